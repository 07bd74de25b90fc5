//! `agentchat listen`: the resident listener (contract 1 and 4, "single-run mode").
//!
//! Data path: `socket` (frames -> `core::engine` -> wakes, acks) -> `daemon` (coalescer, one cycle
//! at a time, status, signals) -> `cycle` (tray, decide, run via `runtime::supervisor`, tray,
//! invite rule). `once` is the single-shot form for scripts and cron. `state_dir` owns the files,
//! `texts` the served texts (the one loader and cache); `core::status` is the vocabulary of the
//! status they write.

pub mod admission;
pub mod agent_lock;
pub mod cycle;
pub mod daemon;
pub mod host;
pub mod logging;
pub mod metrics;
pub mod once;
pub mod pacer;
pub mod reach;
pub mod socket;
pub mod state_dir;
pub mod texts;

use crate::config::{ConfigArgs, IntegrationSwitch, LogFormat, TestTimeScale};
use crate::log_events;
use std::collections::HashMap;

#[derive(Debug, Clone, clap::Args)]
pub struct ListenArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Connect, run at most one cycle if something waits, then exit.
    #[arg(long, conflicts_with = "all")]
    pub once: bool,
    /// Run every profile of the config in this one process, each as its own listener
    /// (docs/many-agents.md); `default` only when the top level names a key of its own.
    #[arg(long, conflicts_with_all = ["profile", "state_dir"])]
    pub all: bool,
    /// Log line format: text for people, json for machines (config `log_format`)
    /// [env: AGENTCHAT_LOG_FORMAT].
    #[arg(long, value_name = "FORMAT", value_enum, ignore_case = true)]
    pub log_format: Option<LogFormat>,
    /// Log level or filter, e.g. debug or agentchat=debug,info (config `log_level`)
    /// [env: AGENTCHAT_LOG].
    #[arg(long, value_name = "LEVEL", value_parser = parse_log_filter, conflicts_with_all = ["verbose", "quiet"])]
    pub log_level: Option<String>,
    /// More log detail: -v debug, -vv trace (instead of --log-level).
    #[arg(short, long, action = clap::ArgAction::Count, conflicts_with = "quiet")]
    pub verbose: u8,
    /// Less: -q warnings and errors only, -qq errors only (instead of --log-level).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub quiet: u8,
}

impl ListenArgs {
    /// The log filter the flags choose, if any: `--log-level`, else `-v`/`-q` counted from
    /// `info`. It wins over `AGENTCHAT_LOG` and the config's `log_level` (docs/operating.md, Logs).
    pub fn log_filter(&self) -> Option<String> {
        if let Some(f) = &self.log_level {
            return Some(f.clone());
        }
        let level = match (self.verbose, self.quiet) {
            (0, 0) => return None,
            (0, 1) => "warn",
            (0, _) => "error",
            (1, _) => "debug",
            _ => "trace",
        };
        Some(level.to_string())
    }
}

/// `--log-level` through the rule `log_level` and `AGENTCHAT_LOG` use.
fn parse_log_filter(raw: &str) -> Result<String, String> {
    crate::config::value::log_filter(raw)
}

pub async fn run_command(args: ListenArgs) -> anyhow::Result<i32> {
    let env = crate::config::process_env();
    match crate::config::integration_switch(&env, &crate::sys::time::today_utc()) {
        IntegrationSwitch::On => {}
        IntegrationSwitch::Off => {
            eprintln!("agentchat listen: AGENTCHAT_INTEGRATION=off; not starting");
            return Ok(0);
        }
        IntegrationSwitch::OffDeprecated(warning) => {
            eprintln!("agentchat listen: {warning}");
            eprintln!("agentchat listen: the integration is switched off; not starting");
            return Ok(0);
        }
        IntegrationSwitch::IgnoredDeprecated(warning) => {
            eprintln!("agentchat listen: {warning}");
        }
    }

    if args.all {
        return run_all(args, &env).await;
    }
    let (settings, key, state) = match prepare(&args) {
        Ok(ready) => ready,
        Err(e) => return Ok(refuse_to_start(&e, &env)),
    };
    // A lock file that cannot be opened (a read-only state dir, say) is a state dir the listener
    // cannot use: 78 like one it cannot create (docs/decisions.md, "Exit codes and signals"),
    // which the systemd unit does not restart into.
    let attempt = match state.lock() {
        Ok(attempt) => attempt,
        Err(e) => return Ok(refuse_to_start(&e.into(), &env)),
    };
    let lock = match attempt {
        state_dir::LockAttempt::Acquired(l) => l,
        state_dir::LockAttempt::Held { pid } => {
            // Said once, in the log's format (logging is up by now), at a level `-qq` still shows.
            tracing::error!(
                event = %log_events::ALREADY_RUNNING,
                profile = %settings.profile,
                pid,
                lock = %state.path(state_dir::LOCK_FILE).display(),
                "a listener for this profile is already running; exiting"
            );
            return Ok(already_running_exit_code(&env));
        }
    };
    // Descriptors: the soft limit up to the hard one, so nothing the listener holds meets a
    // soft 1024 first (the metrics endpoint caps its own connections besides).
    match crate::sys::fs::raise_open_files_limit() {
        Ok((soft, hard)) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, soft, hard, "open files limit")
        }
        Err(e) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, error = %e, "cannot raise the open files limit")
        }
    }
    // Holding the lock, no other listener can be running a run from this state dir: a group
    // recorded there is a killed listener's leftover.
    crate::runtime::supervisor::stop_leftover_run(&state.runs_dir(), settings.listen.kill_grace)
        .await;
    if args.once {
        let scale = settings.time_scale;
        let r = once::run(settings, key, state, scale).await;
        drop(lock);
        r
    } else {
        let prepared = host::Prepared { key, state, lock };
        host::run_one(args.config, settings, prepared).await
    }
}

/// `listen --all`: every profile of the config in this process (`host`). The environment may
/// not choose a key or a state dir for all of them; `AGENTCHAT_PROFILE` is ignored.
async fn run_all(args: ListenArgs, env: &HashMap<String, String>) -> anyhow::Result<i32> {
    // Logging first, from the top level (flags over the environment over the file's top level):
    // one log for every profile, each line naming its profile.
    let (format, level, metrics_addr, scale, slots) =
        match crate::config::load_top_of_all(&args.config) {
            Ok(s) => (
                s.log_format,
                s.log_level.clone(),
                s.listen.metrics_addr,
                s.time_scale,
                host::RunSlots::of(&s),
            ),
            Err(_) => (
                LogFormat::Text,
                "info".to_string(),
                None,
                TestTimeScale::Off,
                host::RunSlots::default(),
            ),
        };
    let filter = args.log_filter().unwrap_or(level);
    if let Err(e) = logging::init(args.log_format.unwrap_or(format), &filter) {
        return Ok(refuse_to_start(&e, env));
    }
    let shared = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
    if shared("AGENTCHAT_API_KEY") {
        let e = anyhow::anyhow!(
            "--all runs each profile with its own key: unset AGENTCHAT_API_KEY and name each \
             profile's key with api_key_file in its [profiles.<name>] table"
        );
        return Ok(refuse_to_start(&e, env));
    }
    if shared("AGENTCHAT_STATE_DIR") {
        let e = anyhow::anyhow!(
            "--all keeps each profile in its own state dir: unset AGENTCHAT_STATE_DIR"
        );
        return Ok(refuse_to_start(&e, env));
    }
    if shared("AGENTCHAT_PROFILE") {
        tracing::warn!(event = %log_events::CONFIG_ADVICE, "AGENTCHAT_PROFILE is ignored with --all: every profile of the config runs");
    }
    let set = match crate::config::load_all(&args.config) {
        Ok(set) => set,
        Err(e) => return Ok(refuse_to_start(&e.into(), env)),
    };
    if set.default_skipped {
        tracing::info!(event = %log_events::DEFAULT_PROFILE_SKIPPED, "the config's top level names no key of its own (api_key_file or api_key): `default` is not one of the profiles");
    }
    if !set.profiles.iter().any(|(_, s)| s.is_ok()) {
        for (name, s) in &set.profiles {
            if let Err(e) = s {
                tracing::error!(event = %log_events::PROFILE_CONFIG_ERROR, profile = %name, error = %e, "this profile's config is wrong");
            }
        }
        let e = match &set.config_path {
            Some(p) if set.profiles.is_empty() => anyhow::anyhow!(
                "--all found no profile in {}: add [profiles.<name>] tables, each with its api_key_file",
                p.display()
            ),
            Some(p) => {
                anyhow::anyhow!("--all: no profile of {} can run as configured", p.display())
            }
            None => anyhow::anyhow!(
                "--all found no config file: name one with --config or AGENTCHAT_CONFIG, or make \
                 one with `agentchat setup`"
            ),
        };
        return Ok(refuse_to_start(&e, env));
    }
    match crate::sys::fs::raise_open_files_limit() {
        Ok((soft, hard)) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, soft, hard, "open files limit")
        }
        Err(e) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, error = %e, "cannot raise the open files limit")
        }
    }
    let endpoint = host::Endpoint::new(metrics_addr);
    host::run_all(args.config, set, endpoint, scale, slots).await
}

/// `sysexits.h` EX_CONFIG: the listener cannot start as configured, and starting it again will
/// not help. The systemd unit names it in `RestartPreventExitStatus`, so a bad config is one
/// failed start, not a restart loop.
pub const EXIT_CONFIG: i32 = 78;

/// `sysexits.h` EX_TEMPFAIL: another listener holds the profile's lock, so this one did nothing.
/// Not 0, so a script can tell; the systemd unit names it in `RestartPreventExitStatus` too, so
/// the service does not restart into the same lock every few seconds.
pub const EXIT_ALREADY_RUNNING: i32 = 75;

/// Everything that must be right before the listener can run: config, logging, key, state dir.
fn prepare(
    args: &ListenArgs,
) -> anyhow::Result<(
    crate::config::Settings,
    secrecy::SecretString,
    state_dir::StateDir,
)> {
    let settings = crate::config::load(&args.config)?;
    crate::sys::tls::require_roots_for(&settings.api_base)?;
    let filter = args
        .log_filter()
        .unwrap_or_else(|| settings.log_level.clone());
    logging::init(args.log_format.unwrap_or(settings.log_format), &filter)?;
    announce_settings(&settings);
    let Some(key) = settings.api_key.clone() else {
        anyhow::bail!(
            "no API key for profile `{0}`: run `agentchat setup --profile {0}` (it signs a new \
             agent up or takes your key), or set AGENTCHAT_API_KEY, or api_key_file in the config",
            settings.profile
        );
    };
    let state = state_dir::StateDir::open(&settings.state_dir)?;
    Ok((settings, key, state))
}

/// What a profile's settings call for at its start: the config's advice (`config::advice`) and
/// the test time scale's notice. Without a key the advice is left out: the start ends with the
/// missing key's own line, and the advice would say it twice.
pub(crate) fn announce_settings(settings: &crate::config::Settings) {
    if settings.api_key.is_some() {
        for line in crate::config::advice(settings) {
            tracing::warn!(event = %log_events::CONFIG_ADVICE, "{line}");
        }
    }
    if let Some(line) = settings.time_scale.notice() {
        tracing::info!(event = %log_events::TEST_TIME_SCALE, "{line}");
    }
}

/// Says why the listener cannot start and picks the exit code a service manager will not answer
/// with a restart loop: `EXIT_CONFIG` (the systemd unit prevents restarts on it), or 0 under
/// launchd, whose `KeepAlive {SuccessfulExit: false}` restarts every non-zero exit.
fn refuse_to_start(error: &anyhow::Error, env: &HashMap<String, String>) -> i32 {
    eprintln!("{}agentchat listen: {error:#}", logging::error_prefix());
    config_error_exit_code(env)
}

/// The exit code for a listener that cannot start as configured (a bad flag included):
/// `EXIT_CONFIG`, or 0 under launchd (see `refuse_to_start`).
pub fn config_error_exit_code(env: &HashMap<String, String>) -> i32 {
    if under_launchd(env) {
        eprintln!("agentchat listen: not restarting until the config is fixed (launchd)");
        0
    } else {
        EXIT_CONFIG
    }
}

/// The exit code for a listener that found the profile's lock held: `EXIT_ALREADY_RUNNING`, or 0
/// under launchd, whose `KeepAlive {SuccessfulExit: false}` would start it again every
/// `ThrottleInterval` into the same lock (launchd/me.agentchat.listen.plist).
pub fn already_running_exit_code(env: &HashMap<String, String>) -> i32 {
    if under_launchd(env) {
        0
    } else {
        EXIT_ALREADY_RUNNING
    }
}

/// Whether launchd started this process as one of our agents: launchd passes the job's label in
/// `XPC_SERVICE_NAME` (config::LAUNCHD_LABEL_PREFIX).
fn under_launchd(env: &HashMap<String, String>) -> bool {
    env.get("XPC_SERVICE_NAME")
        .is_some_and(|label| label.starts_with(crate::config::LAUNCHD_LABEL_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `listen`'s flags alone, parsed as clap parses them for `agentchat listen`.
    #[derive(clap::Parser)]
    struct Flags {
        #[command(flatten)]
        listen: ListenArgs,
    }

    fn filter_of(args: &[&str]) -> Result<Option<String>, clap::error::ErrorKind> {
        use clap::Parser;
        let argv = std::iter::once(&"listen").chain(args);
        Ok(Flags::try_parse_from(argv)
            .map_err(|e| e.kind())?
            .listen
            .log_filter())
    }

    #[test]
    fn v_and_q_count_from_info_and_log_level_takes_a_checked_filter() {
        assert_eq!(filter_of(&[]), Ok(None));
        assert_eq!(filter_of(&["-v"]), Ok(Some("debug".into())));
        assert_eq!(filter_of(&["-vv"]), Ok(Some("trace".into())));
        assert_eq!(filter_of(&["-vvvv"]), Ok(Some("trace".into())));
        assert_eq!(filter_of(&["-q"]), Ok(Some("warn".into())));
        assert_eq!(filter_of(&["-qq"]), Ok(Some("error".into())));
        assert_eq!(
            filter_of(&["--quiet", "-q", "-q"]),
            Ok(Some("error".into()))
        );
        assert_eq!(
            filter_of(&["--log-level", "Agentchat=DEBUG,info"]),
            Ok(Some("Agentchat=debug,info".into()))
        );
        assert_eq!(
            filter_of(&["--log-level", "verbose"]),
            Err(clap::error::ErrorKind::ValueValidation)
        );
        for both in [
            &["-v", "-q"][..],
            &["-v", "--log-level", "info"],
            &["-q", "--log-level", "info"],
        ] {
            assert_eq!(
                filter_of(both),
                Err(clap::error::ErrorKind::ArgumentConflict),
                "{both:?}"
            );
        }
    }
}

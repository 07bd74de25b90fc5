//! `agentchat listen`: the resident listener (contract 1 and 4, "single-run mode").
//!
//! Every decision is the pure state machine's (`core::listener`, `core::host`); this module is the
//! I/O around it: `driver` (the one loop that feeds the machine and performs its effects),
//! `socket` (the dial and one connection's reader), `host` (signals, systemd, which profiles
//! run), `metrics`. `once` is the single-shot form for scripts and cron. `start` gets a profile ready
//! (one way for `listen`, `--once` and `--all`) and says how the process exits when it cannot be
//! (`core::exit`). `state_dir` owns the files, `texts` the served texts (the one loader and
//! cache); `core::status` is the vocabulary of the status they write.

pub mod admission;
pub mod agent_lock;
pub mod driver;
pub mod history;
pub mod host;
pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod once;
pub mod page;
pub mod socket;
pub mod start;
pub mod state_dir;
pub mod texts;
pub mod workdir;

use crate::config::{ConfigArgs, IntegrationSwitch, LogFormat};
use crate::log_events;
use start::StartError;
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
    let ready = if args.all {
        all_ready(&args, &env)
    } else {
        one_ready(&args).map(|s| Ready::One(Box::new(s)))
    };
    let ready = match ready {
        Ok(ready) => ready,
        Err(e) => return Ok(e.refuse(&env)),
    };
    match ready {
        Ready::One(settings) if args.once => match start::prepare(&settings, true).await {
            Ok(prepared) => once::run(*settings, prepared).await,
            Err(e) => Ok(e.refuse(&env)),
        },
        Ready::One(settings) => host::run_one(args.config, *settings).await,
        Ready::All { set, top } => host::run_all(args.config, set, top).await,
    }
}

/// What the command line asks to run, its config read and logging up.
enum Ready {
    /// `listen` or `listen --once`: the profile `args` choose.
    One(Box<crate::config::Settings>),
    /// `listen --all`: every profile of the config, and the top level's process-wide settings.
    All {
        set: crate::config::ProfileSet,
        top: host::Top,
    },
}

/// `listen`'s one profile: its settings, TLS roots for its `api_base`, and logging by them.
fn one_ready(args: &ListenArgs) -> Result<crate::config::Settings, StartError> {
    let settings = crate::config::ConfigFile::read(&args.config)?
        .settings(None, crate::config::KeyFile::Read)?;
    crate::sys::tls::require_roots_for(&settings.api_base)
        .map_err(|e| StartError::Setup(e.into()))?;
    let filter = args
        .log_filter()
        .unwrap_or_else(|| settings.log_level.clone());
    logging::init(args.log_format.unwrap_or(settings.log_format), &filter)
        .map_err(StartError::Setup)?;
    Ok(settings)
}

/// `listen --all`: every profile of the config in this process (`host`). The environment may
/// not choose a key or a state dir for all of them; `AGENTCHAT_PROFILE` is ignored.
fn all_ready(args: &ListenArgs, env: &HashMap<String, String>) -> Result<Ready, StartError> {
    // Logging first, from the top level (flags over the environment over the file's top level):
    // one log for every profile, each line naming its profile. The file is read once, here.
    let file = crate::config::ConfigFile::read(&args.config);
    let (format, level, top) = match file.as_ref().ok().and_then(|f| f.top_of_all().ok()) {
        Some(s) => (s.log_format, s.log_level.clone(), host::Top::of(&s)),
        None => (LogFormat::Text, "info".to_string(), host::Top::default()),
    };
    let filter = args.log_filter().unwrap_or(level);
    logging::init(args.log_format.unwrap_or(format), &filter).map_err(StartError::Setup)?;
    let shared = |name: &str| env.get(name).is_some_and(|v| !v.is_empty());
    if shared("AGENTCHAT_API_KEY") {
        return Err(StartError::Setup(anyhow::anyhow!(
            "--all runs each profile with its own key: unset AGENTCHAT_API_KEY and name each \
             profile's key with api_key_file in its [profiles.<name>] table"
        )));
    }
    if shared("AGENTCHAT_STATE_DIR") {
        return Err(StartError::Setup(anyhow::anyhow!(
            "--all keeps each profile in its own state dir: unset AGENTCHAT_STATE_DIR"
        )));
    }
    if shared("AGENTCHAT_PROFILE") {
        tracing::warn!(event = %log_events::CONFIG_ADVICE, "AGENTCHAT_PROFILE is ignored with --all: every profile of the config runs");
    }
    let set = file.and_then(|f| f.all())?;
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
        return Err(StartError::Setup(e));
    }
    Ok(Ready::All { set, top })
}

/// `sysexits.h` EX_CONFIG (`core::exit`): the listener cannot start as configured.
pub const EXIT_CONFIG: i32 = crate::core::exit::EX_CONFIG;

/// `sysexits.h` EX_TEMPFAIL (`core::exit`): another listener holds the profile's lock.
pub const EXIT_ALREADY_RUNNING: i32 = crate::core::exit::EX_TEMPFAIL;

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

//! `agentchat listen`: the resident listener (contract 1 and 4, "single-run mode").
//!
//! Data path: `socket` (frames -> `core::engine` -> wakes, acks) -> `daemon` (coalescer, one cycle
//! at a time, status, signals) -> `cycle` (tray, decide, run via `runtime::supervisor`, tray,
//! invite rule). `once` is the single-shot form for scripts and cron. `state_dir` owns the files,
//! `texts` the served texts (the one loader and cache); `core::status` is the vocabulary of the
//! status they write.

pub mod cycle;
pub mod daemon;
pub mod logging;
pub mod metrics;
pub mod once;
pub mod socket;
pub mod state_dir;
pub mod texts;

use crate::config::{ConfigArgs, IntegrationSwitch, LogFormat};
use std::collections::HashMap;
use std::time::Duration;

#[derive(Debug, Clone, clap::Args)]
pub struct ListenArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Connect, run at most one cycle if something waits, then exit.
    #[arg(long)]
    pub once: bool,
    /// Log line format (env AGENTCHAT_LOG_FORMAT; config `log_format`).
    #[arg(long, value_name = "FORMAT", value_enum, ignore_case = true)]
    pub log_format: Option<LogFormat>,
}

/// Test-only: `AGENTCHAT_TEST_TIME_SCALE` divides the listener's own fixed timers (invite-rule
/// pace, key-refused retry, status touch, texts refresh). Never the connect budget's delay,
/// which is the server's. Config decides whether it is honoured (`config::TestTimeScale`: only
/// against a loopback `api_base`).
#[derive(Debug, Clone, Copy)]
pub struct TimeScale(pub f64);

impl TimeScale {
    /// `d / scale`, at least 1 ms, and never a panic on an absurd scale (saturates at a day).
    pub fn apply(self, d: Duration) -> Duration {
        Duration::try_from_secs_f64(d.as_secs_f64() / self.0)
            .unwrap_or(Duration::from_secs(86_400))
            .max(Duration::from_millis(1))
    }
    /// The invite rule's pace between single runs (`SINGLE_RUN_PACE_MS`), scaled.
    pub fn invite_pace_ms(self) -> u64 {
        self.apply(Duration::from_millis(
            crate::core::invite_rule::SINGLE_RUN_PACE_MS,
        ))
        .as_millis() as u64
    }
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

    let (settings, key, state) = match prepare(&args) {
        Ok(ready) => ready,
        Err(e) => return Ok(refuse_to_start(&e, &env)),
    };
    let _lock = match state.lock()? {
        state_dir::LockAttempt::Acquired(l) => l,
        state_dir::LockAttempt::Held { pid } => {
            let who = pid
                .map(|p| format!("pid {p}"))
                .unwrap_or_else(|| "another process".into());
            eprintln!(
                "agentchat listen: a listener for profile `{}` is already running ({who}; lock {}); exiting",
                settings.profile,
                state.path(state_dir::LOCK_FILE).display()
            );
            tracing::info!(event = %"already_running", holder = %who, "another listener holds the lock");
            return Ok(0);
        }
    };
    // Holding the lock, no other listener can be running a run from this state dir: a group
    // recorded there is a killed listener's leftover.
    crate::runtime::supervisor::stop_leftover_run(&state.runs_dir(), settings.listen.kill_grace)
        .await;
    let scale = TimeScale(settings.time_scale.factor());
    if args.once {
        once::run(settings, key, state, scale).await
    } else {
        daemon::run(args.config, settings, key, state, scale).await
    }
}

/// `sysexits.h` EX_CONFIG: the listener cannot start as configured, and starting it again will
/// not help. The systemd unit names it in `RestartPreventExitStatus`, so a bad config is one
/// failed start, not a restart loop.
pub const EXIT_CONFIG: i32 = 78;

/// Everything that must be right before the listener can run: config, logging, key, state dir.
fn prepare(
    args: &ListenArgs,
) -> anyhow::Result<(
    crate::config::Settings,
    secrecy::SecretString,
    state_dir::StateDir,
)> {
    let settings = crate::config::load(&args.config)?;
    logging::init(
        args.log_format.unwrap_or(settings.log_format),
        &settings.log_level,
    )?;
    for line in crate::config::advice(&settings) {
        tracing::warn!(event = %"config_advice", "{line}");
    }
    if let Some(line) = settings.time_scale.notice() {
        tracing::info!(event = %"test_time_scale", "{line}");
    }
    let Some(key) = settings.api_key.clone() else {
        anyhow::bail!(
            "no API key: set AGENTCHAT_API_KEY, or api_key_file in the config (profile `{}`)",
            settings.profile
        );
    };
    let state = state_dir::StateDir::open(&settings.state_dir)?;
    Ok((settings, key, state))
}

/// Says why the listener cannot start and picks the exit code a service manager will not answer
/// with a restart loop: `EXIT_CONFIG` (the systemd unit prevents restarts on it), or 0 under
/// launchd, whose `KeepAlive {SuccessfulExit: false}` restarts every non-zero exit.
fn refuse_to_start(error: &anyhow::Error, env: &HashMap<String, String>) -> i32 {
    eprintln!("agentchat listen: {error:#}");
    config_error_exit_code(env)
}

/// The exit code for a listener that cannot start as configured (a bad flag included):
/// `EXIT_CONFIG`, or 0 under launchd (see `refuse_to_start`).
pub fn config_error_exit_code(env: &HashMap<String, String>) -> i32 {
    let under_launchd = env
        .get("XPC_SERVICE_NAME")
        .is_some_and(|label| label.starts_with(crate::config::LAUNCHD_LABEL_PREFIX));
    if under_launchd {
        eprintln!("agentchat listen: not restarting until the config is fixed (launchd)");
        0
    } else {
        EXIT_CONFIG
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_scale_divides_and_never_gives_a_zero_timer() {
        let s = TimeScale(20.0);
        assert_eq!(s.apply(Duration::from_secs(60)), Duration::from_secs(3));
        // Absurd but valid scales neither panic nor give a zero timer.
        assert_eq!(
            TimeScale(1e-300).apply(Duration::from_secs(60)),
            Duration::from_secs(86_400)
        );
        assert_eq!(
            TimeScale(1e300).apply(Duration::from_secs(60)),
            Duration::from_millis(1)
        );
    }
}

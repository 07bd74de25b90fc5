//! One way to start a profile's listener, for `listen`, `listen --once` and each profile of
//! `listen --all`: [`prepare`] (the config's advice, the key, the state dir, its lock, a killed
//! listener's leftover run), and [`StartError`], which says why one did not start and which exit
//! code that is (`core::exit`, the one rule).

use super::state_dir::{self, LockAttempt, StateDir, StateError};
use crate::config::{ConfigError, Settings};
use crate::core::exit::{self, Exit};
use crate::log_events;
use secrecy::SecretString;
use std::collections::HashMap;

/// Why a listener did not start (or, `Listener`, could not be built once it had).
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The config (file, environment or flags) cannot work.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Anything else the start needs from the config or the machine: TLS roots for an https
    /// `api_base`, the log's settings, `--all`'s environment, a config with no profile that runs.
    #[error("{0:#}")]
    Setup(anyhow::Error),
    /// The profile names no key. `alone`: `listen`'s one profile, told how to get one; with
    /// `--all` the key is named in the profile's table.
    #[error("{}", no_key(profile, *alone))]
    NoKey { profile: String, alone: bool },
    /// The state dir or its lock file cannot be used.
    #[error(transparent)]
    StateDir(#[from] StateError),
    /// Another listener holds the profile's lock (`pid`, when its lock file says).
    #[error("another listener holds this profile's lock")]
    LockHeld { pid: Option<u32> },
    /// The listener could not be built (its HTTP client).
    #[error("{0:#}")]
    Listener(anyhow::Error),
}

fn no_key(profile: &str, alone: bool) -> String {
    if alone {
        format!(
            "no API key for profile `{profile}`: run `agentchat setup --profile {profile}` (it \
             signs a new agent up or takes your key), or set AGENTCHAT_API_KEY, or api_key_file \
             in the config"
        )
    } else {
        format!("no API key: set api_key_file in [profiles.{profile}] of the config")
    }
}

impl StartError {
    /// How the process ends for it, when it is the process's one profile's.
    pub fn exit(&self) -> Exit {
        match self {
            StartError::LockHeld { .. } => Exit::AlreadyRunning,
            StartError::Listener(_) => Exit::Failed,
            StartError::Config(_)
            | StartError::Setup(_)
            | StartError::NoKey { .. }
            | StartError::StateDir(_) => Exit::Config,
        }
    }

    /// The error and its causes on one line, each once, as `anyhow`'s `{:#}` writes them.
    pub fn said(&self) -> String {
        let mut line = self.to_string();
        let mut cause = std::error::Error::source(self);
        while let Some(c) = cause {
            line.push_str(": ");
            line.push_str(&c.to_string());
            cause = c.source();
        }
        line
    }

    /// Ends the process's start: says why on stderr (a held lock was said in the log already,
    /// by [`prepare`]) and returns the exit code.
    pub fn refuse(&self, env: &HashMap<String, String>) -> i32 {
        if !matches!(self, StartError::LockHeld { .. }) {
            eprintln!(
                "{}agentchat listen: {}",
                super::logging::error_prefix(),
                self.said()
            );
        }
        exit_code(self.exit(), env)
    }
}

/// The process's exit code for `exit` (`core::exit::code`), launchd told from the environment; a
/// config error hidden as 0 under launchd says so.
pub fn exit_code(exit: Exit, env: &HashMap<String, String>) -> i32 {
    let launchd = under_launchd(env);
    if launchd && exit == Exit::Config {
        eprintln!("agentchat listen: not restarting until the config is fixed (launchd)");
    }
    exit::code(exit, launchd)
}

/// Whether launchd started this process as one of our agents: launchd passes the job's label in
/// `XPC_SERVICE_NAME` (config::LAUNCHD_LABEL_PREFIX).
fn under_launchd(env: &HashMap<String, String>) -> bool {
    env.get("XPC_SERVICE_NAME")
        .is_some_and(|label| label.starts_with(crate::config::LAUNCHD_LABEL_PREFIX))
}

/// A profile ready for its listener: the lock is held for as long as this lives.
pub struct Prepared {
    pub key: SecretString,
    pub state: StateDir,
    pub lock: state_dir::Lock,
}

/// Gets a profile ready for its listener: the config's advice, the key, the state dir, its lock,
/// and, holding the lock, a killed listener's leftover run ended. `alone`: the process's one
/// profile (`listen`, `--once`), whose missing key is told every way `listen` takes one (`--all`
/// refuses `AGENTCHAT_API_KEY`).
pub async fn prepare(settings: &Settings, alone: bool) -> Result<Prepared, StartError> {
    announce_settings(settings);
    let Some(key) = settings.api_key.clone() else {
        return Err(StartError::NoKey {
            profile: settings.profile.clone(),
            alone,
        });
    };
    let state = StateDir::open(&settings.state_dir)?;
    // A lock file that cannot be opened (a read-only state dir, say) is a state dir the listener
    // cannot use: 78 like one it cannot create, which the systemd unit does not restart into.
    let lock = match state.lock()? {
        LockAttempt::Acquired(l) => l,
        LockAttempt::Held { pid } => {
            // Said once, in the log's format, at a level `-qq` still shows; with `--all` the
            // host says what the profile does next.
            tracing::error!(
                event = %log_events::ALREADY_RUNNING,
                profile = %settings.profile,
                pid,
                lock = %state.path(state_dir::LOCK_FILE).display(),
                "a listener for this profile is already running; this one does not start"
            );
            return Err(StartError::LockHeld { pid });
        }
    };
    raise_open_files_limit();
    // Holding the lock, no other listener can be running a run from this state dir: a group
    // recorded there is a killed listener's leftover.
    crate::runtime::supervisor::stop_leftover_run(&state.runs_dir(), settings.listen.kill_grace)
        .await;
    Ok(Prepared { key, state, lock })
}

/// What a profile's settings call for at its start: the config's advice (`config::advice`) and
/// the test time scale's notice. Without a key the advice is left out: the start ends with the
/// missing key's own line, and the advice would say it twice.
fn announce_settings(settings: &Settings) {
    if settings.api_key.is_some() {
        for line in crate::config::advice(settings) {
            tracing::warn!(event = %log_events::CONFIG_ADVICE, "{line}");
        }
    }
    if let Some(line) = settings.time_scale.notice() {
        tracing::info!(event = %log_events::TEST_TIME_SCALE, "{line}");
    }
}

/// Descriptors: the soft limit up to the hard one, so nothing the listener holds meets a soft
/// 1024 first (the metrics endpoint caps its own connections besides). Once per process, by the
/// first profile that holds its lock (a listener that finds its lock held changes nothing).
fn raise_open_files_limit() {
    static RAISED: std::sync::Once = std::sync::Once::new();
    RAISED.call_once(|| match crate::sys::fs::raise_open_files_limit() {
        Ok((soft, hard)) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, soft, hard, "open files limit")
        }
        Err(e) => {
            tracing::debug!(event = %log_events::OPEN_FILES_LIMIT, error = %e, "cannot raise the open files limit")
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn env(xpc: Option<&str>) -> HashMap<String, String> {
        xpc.map(|v| ("XPC_SERVICE_NAME".to_string(), v.to_string()))
            .into_iter()
            .collect()
    }

    fn every_start_error() -> Vec<StartError> {
        let io = || std::io::Error::from(std::io::ErrorKind::PermissionDenied);
        vec![
            StartError::Config(ConfigError::UnknownKey("listen.runtim".into())),
            StartError::Setup(anyhow::anyhow!("--all: unset AGENTCHAT_STATE_DIR")),
            StartError::NoKey {
                profile: "x".into(),
                alone: true,
            },
            StartError::StateDir(StateError::Dir {
                path: PathBuf::from("/s"),
                error: io(),
            }),
            StartError::StateDir(StateError::Lock {
                path: PathBuf::from("/s/listen.lock"),
                error: io(),
            }),
            StartError::LockHeld { pid: Some(7) },
            StartError::Listener(anyhow::anyhow!("no client")),
        ]
    }

    #[test]
    fn a_start_error_exits_78_a_held_lock_75_a_listener_not_built_1_and_launchd_gets_0() {
        for e in every_start_error() {
            let (plain, launchd, other_job) = (
                exit_code(e.exit(), &env(None)),
                exit_code(e.exit(), &env(Some("me.agentchat.listen.work"))),
                exit_code(e.exit(), &env(Some("0"))),
            );
            let want = match e {
                StartError::LockHeld { .. } => (75, 0, 75),
                StartError::Listener(_) => (1, 1, 1),
                _ => (78, 0, 78),
            };
            assert_eq!((plain, launchd, other_job), want, "{}", e.said());
        }
    }

    #[test]
    fn the_no_key_line_tells_one_profile_how_to_get_a_key_and_a_profile_of_all_its_table() {
        let one = StartError::NoKey {
            profile: "work".into(),
            alone: true,
        };
        assert!(one.said().contains("`agentchat setup --profile work`"));
        let of_all = StartError::NoKey {
            profile: "work".into(),
            alone: false,
        };
        assert!(of_all.said().contains("[profiles.work]"));
    }

    #[test]
    fn said_names_each_cause_once() {
        let e = StartError::Setup(anyhow::anyhow!("inner").context("outer"));
        assert_eq!(e.said(), "outer: inner");
    }
}

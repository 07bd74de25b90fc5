//! One profile of the process: what it needs before its listener can start (its key, its state
//! dir and lock, a killed listener's leftover run ended), and what tells a changed profile from an
//! unchanged one on SIGHUP.

use crate::config::Settings;
use crate::listen::state_dir::{self, LockAttempt, StateDir};
use secrecy::{ExposeSecret, SecretString};
use sha2::{Digest, Sha256};

/// A profile ready for its listener: the lock is held for as long as this lives.
pub(in crate::listen) struct Prepared {
    pub key: SecretString,
    pub state: StateDir,
    pub lock: state_dir::Lock,
}

/// The profile's state dir is locked by another listener (`pid`, when its lock file says).
#[derive(Debug, thiserror::Error)]
#[error("another listener holds this profile's lock")]
pub(super) struct LockHeld {
    pub(super) pid: Option<u32>,
}

/// Gets one profile of `listen --all` ready, as `listen` does for its one profile before it
/// starts (`listen::run_command`): advice, the key, the state dir, its lock, the leftover run.
/// An error is this profile's alone, said in its log line (the others run on).
pub(super) async fn prepare(settings: &Settings) -> anyhow::Result<Prepared> {
    crate::listen::announce_settings(settings);
    let Some(key) = settings.api_key.clone() else {
        anyhow::bail!(
            "no API key: set api_key_file in [profiles.{}] of the config",
            settings.profile
        );
    };
    let state = StateDir::open(&settings.state_dir)?;
    let lock = match state.lock()? {
        LockAttempt::Acquired(l) => l,
        LockAttempt::Held { pid } => {
            tracing::error!(
                event = %"already_running",
                pid,
                lock = %state.path(state_dir::LOCK_FILE).display(),
                "a listener for this profile is already running; this one does not start until it lets go"
            );
            return Err(LockHeld { pid }.into());
        }
    };
    crate::runtime::supervisor::stop_leftover_run(&state.runs_dir(), settings.listen.kill_grace)
        .await;
    Ok(Prepared { key, state, lock })
}

/// What SIGHUP compares: every resolved setting (`Debug` redacts the key) and the key itself,
/// hashed, so a profile whose table, key file or inherited top level changed reloads and one
/// whose did not is left alone. 32 bytes a profile.
pub(super) fn fingerprint(settings: &Settings) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(format!("{settings:?}").as_bytes());
    h.update(b"\0");
    if let Some(k) = &settings.api_key {
        h.update(k.expose_secret().as_bytes());
    }
    h.finalize().into()
}

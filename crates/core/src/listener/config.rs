//! What a profile's listener needs of its settings, as plain data: the driver builds it from
//! `config::Settings` (and the policy's zone from the time zone files), so the machine never
//! reads the config, the environment or a clock.

use crate::policy::{OffsetTable, Policy};
use crate::reconnect::scaled;
use crate::runtime_kind::RuntimeKind;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub struct ListenerConfig {
    pub profile: String,
    pub api_base: String,
    pub runtime: RuntimeKind,
    /// Where the key came from, as `status.json` says it (`env`, `file:<path>`, ...).
    pub key_source: String,
    pub quiet_window: Duration,
    pub max_delay: Duration,
    /// No inbound frame for this long drops the socket.
    pub idle_timeout: Duration,
    /// The run's grace after SIGTERM (the stop waits that and some slack).
    pub kill_grace: Duration,
    /// The test time scale in effect (1 unless `api_base` is on loopback): divides the
    /// contract's own timers, never the server's waits nor a setting's ([`Timing`]).
    pub scale: f64,
    /// `[listen.policy]` and its zone's offsets.
    pub policy: Policy,
    pub zone: OffsetTable,
    /// Tell systemd the state (`STATUS=`): only when this is the process's one profile.
    pub notify_status: bool,
    /// The process's pid, for `status.json`.
    pub pid: u32,
    /// The state dir, as the start's log line names it.
    pub state_dir: String,
}

/// The contract's own timers under the test time scale: the one place the scale is applied.
/// A time a setting names (`quiet_window`, `idle_timeout`, `run_timeout`, ...) and a wait the
/// server asks for (`retry_after`, `Retry-After`) are never scaled.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    pub scale: f64,
}

impl Timing {
    pub fn new(scale: f64) -> Timing {
        Timing {
            scale: if scale.is_finite() && scale > 0.0 {
                scale
            } else {
                1.0
            },
        }
    }

    /// A contract duration under the scale.
    pub fn of(&self, d: Duration) -> Duration {
        scaled(d, self.scale)
    }

    /// The same, never below `floor`.
    pub fn at_least(&self, d: Duration, floor: Duration) -> Duration {
        self.of(d).max(floor)
    }
}

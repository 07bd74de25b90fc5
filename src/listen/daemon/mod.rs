//! The main loop (contract 3.4 and 4): owns the coalescer and the status, starts one cycle at a time as
//! a task, refreshes texts on a timer, and handles signals (SIGTERM/SIGINT stop, SIGHUP reload)
//! and systemd notification. The socket runs as its own task and sends wakes here.
//!
//! An idle listener does nothing of its own: `status.json` is written when something in it
//! changes, and no timer wakes the loop (the texts refresh is daily). The server's heartbeat
//! (every 45 s, contract 3.4) still turns it, and such a turn touches the file, at most every
//! `TOUCH_EVERY`, so `agentchat status` can tell a stuck loop (`core::status::quiet_allowance`).

mod events;
mod lifecycle;
mod recovery;
mod settings;
mod status_file;
mod texts_in_use;
mod wiring;

use recovery::Recheck;
use wiring::{Signals, Timers, Wiring, watchdog_due};

use super::TimeScale;
use super::cycle::{self, CycleInput, CycleReport, RunStarting};
use super::metrics::{self, Metrics};
use super::socket::{self, SocketEvent, SocketParams, SocketState};
use super::state_dir::StateDir;
use super::texts::{self, Loaded, Missing};
use crate::client::{Api, ApiError};
use crate::config::{self, ConfigArgs, Settings};
use crate::core::coalescer::Coalescer;
use crate::core::status::{
    Counters, LastCycle, LastWake, ListenerState, Outcome, Status, TextsStatus,
};
use crate::sys::time;
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Interval;

/// A turn of the main loop touches `status.json` (its modification time, not its content) when
/// it was last written or touched this long ago or more: well under the server's 45 s heartbeat,
/// so every heartbeat that finds the file unchanged touches it.
const TOUCH_EVERY: Duration = Duration::from_secs(30);
/// However far a test scales time, the status file is not touched more often.
const TOUCH_EVERY_MIN: Duration = Duration::from_millis(250);
/// While the key is refused, how often the config (and key file) is read again to notice a new key.
const KEY_CHECK: Duration = Duration::from_secs(2);
const TEXTS_REFRESH: Duration = Duration::from_secs(24 * 3600);
/// Beyond the run's own grace, how long a stopping listener waits for a cycle to wind down.
const STOP_SLACK: Duration = Duration::from_secs(5);

/// The listener's own flags (starting, stopping, runtime unusable, handle mismatch), shown on top
/// of the socket's state.
struct ListenerFlags {
    starting: bool,
    unusable: Option<String>,
    /// The runtime's binary when it became unusable: a different one gets a new chance.
    unusable_binary: Option<crate::runtime::agent_cli::BinaryStamp>,
    mismatch: Option<String>,
    /// SIGTERM or SIGINT came.
    stopping: bool,
    /// The stop is done: the last status written says so.
    stopped: bool,
}

/// Why a stopping listener stopped waiting for its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutShort {
    /// A second SIGTERM or SIGINT.
    Killed,
    /// The grace and the slack after it passed.
    Abandoned,
}

struct Daemon {
    args: ConfigArgs,
    settings: Settings,
    key: SecretString,
    /// The one REST client for `settings.api_base` and `key`, shared by the socket task, the
    /// cycles and the texts refreshes, so its keep-alive connection outlives each of them. Built
    /// again only when a reload or a new key file changes either.
    api: Api,
    state: StateDir,
    started: Instant,
    status: Status,
    flags: ListenerFlags,
    socket_state: SocketState,
    /// The texts in use.
    texts: Option<Loaded>,
    handle: Option<String>,
    pending_reasons: BTreeSet<String>,
    coalescer: Coalescer,
    notify: bool,
    /// The last status write failed (full disk, unwritable dir): logged once per episode.
    status_write_failing: bool,
    /// The status changed since it was last written; the main loop writes it once per turn.
    status_dirty: bool,
    /// `status.json` as last written, open for touching; `None` when the last write failed.
    status_file: Option<std::fs::File>,
    /// When `status.json` was last written or touched.
    status_proof: Instant,
    /// A cycle has started and its run is not spawned yet: nothing is written to disk meanwhile
    /// (a wake's way to its run is not held up by a synced write; the periodic refresh still
    /// writes).
    status_held: bool,
    /// `quiet_window`/`max_delay` from a reload, applied once the coalescer is idle.
    pending_windows: Option<(u64, u64)>,
    /// `texts_missing` was logged for the current stretch without texts.
    texts_missing_logged: bool,
    /// When the last frame came: kept as a time and formatted into `status.last_frame_at` only
    /// when the status is written, not on every frame.
    last_frame: Option<SystemTime>,
    /// The metrics registry (a no-op unless `listen.metrics_addr` is set).
    metrics: Arc<Metrics>,
    /// This agent's machine-wide lock: one listener per agent (`agent_lock`).
    agent: super::agent_lock::AgentSlot,
    /// The next look at an unusable runtime (`recovery`).
    runtime_recheck: Recheck,
    /// The next fetch of missing texts (`recovery`).
    texts_recheck: Recheck,
    /// The next write of a status whose last write failed (`status_file`).
    status_retry: Recheck,
    /// A cycle found no texts for a card that waited: texts that come back wake (`recovered`).
    texts_owed: bool,
    /// Cycles in a row that followed up a tray cut short (`core::decision::follow_up`).
    follow_ups: u32,
    /// The runtime check under way started while the runtime was unusable: its pass ends that.
    runtime_check_recovers: bool,
}

/// Runs until SIGTERM/SIGINT. Returns the exit code (0).
pub async fn run(
    args: ConfigArgs,
    settings: Settings,
    key: SecretString,
    state: StateDir,
) -> anyhow::Result<i32> {
    let mut signals = Signals::install()?;
    let notify = std::env::var_os("NOTIFY_SOCKET").is_some();
    let mut d = Daemon::new(args, settings, key, state, notify)?;
    d.announce_start();
    d.check_runtime_at_start();
    d.refresh_texts().await;
    let mut wiring = Wiring::start(d.socket_params());
    metrics::spawn_server(
        &d.metrics,
        d.settings.listen.metrics_addr,
        wiring.shutdown.subscribe(),
    );
    d.ready();
    let mut timers = Timers::new(d.scale(), notify);
    let signal = main_loop(&mut d, &mut wiring, &mut signals, &mut timers).await;
    tracing::info!(event = %"stopping", signal, "stopping");
    d.stop(wiring, &mut signals).await;
    if d.agent.taken_by_other() {
        return Ok(super::already_running_exit_code(
            &crate::config::process_env(),
        ));
    }
    Ok(0)
}

/// Waits for whatever comes next (a signal, a socket event, a due cycle, a cycle's end, a timer)
/// and handles it, until SIGTERM or SIGINT; returns which of the two.
async fn main_loop(
    d: &mut Daemon,
    w: &mut Wiring,
    signals: &mut Signals,
    timers: &mut Timers,
) -> &'static str {
    loop {
        d.flush_status();
        d.turned();
        timers.turned();
        let due = if w.cycle.is_none() {
            d.coalescer.due().map(|at| at.saturating_sub(d.now_ms()))
        } else {
            None
        };
        tokio::select! {
            _ = signals.term.recv() => return "SIGTERM",
            _ = signals.int.recv() => return "SIGINT",
            _ = signals.hup.recv() => {
                let scale = d.scale();
                d.reload(&w.params);
                if d.scale() != scale {
                    // The scale follows `api_base` (`config::TestTimeScale`): a reload onto
                    // another server sets the timers again.
                    *timers = Timers::new(d.scale(), d.notify);
                }
                d.spawn_texts_refresh(&w.texts_tx);
            }
            Some(ev) = w.events.recv() => {
                d.on_socket_event(ev);
                // What else the socket has queued is the same turn (and one status write).
                while !d.agent.taken_by_other() && let Ok(ev) = w.events.try_recv() {
                    d.on_socket_event(ev);
                }
                if d.agent.taken_by_other() {
                    return "another listener serves this agent";
                }
                // A wake due now (a zero quiet window) starts its cycle in this turn.
                start_due_cycle(d, w);
            }
            r = &mut w.socket => {
                // The socket task only ends on shutdown; anything else is a bug. Stay resident:
                // log it and start a new one.
                tracing::error!(event = %"socket_task_ended", error = r.err().map(|e| e.to_string()), "the socket task ended unexpectedly; restarting it");
                w.restart_socket();
            }
            _ = after_ms(due) => start_due_cycle(d, w),
            r = run_starting(&mut w.run_starting) => {
                w.run_starting = None;
                if let Ok(run) = r {
                    d.on_run_starting(run);
                }
            }
            r = cycle_end(&mut w.cycle) => {
                w.cycle = None;
                w.run_starting = None;
                d.on_cycle_task_end(r);
                start_due_cycle(d, w);
            }
            _ = timers.key.tick(), if d.socket_state == SocketState::KeyRefused => {
                d.check_key_file(&w.params);
            }
            _ = timers.texts.tick() => d.spawn_texts_refresh(&w.texts_tx),
            _ = recovery::at(d.runtime_recheck.at), if w.runtime_check.is_none() => {
                d.runtime_recheck.at = None;
                w.runtime_check = Some(d.spawn_runtime_check());
            }
            r = recovery::task_end(&mut w.runtime_check) => {
                w.runtime_check = None;
                d.on_runtime_check(r);
            }
            _ = recovery::at(d.status_retry.at) => {
                d.status_retry.at = None;
                if !d.status_held {
                    d.write_status();
                }
            }
            _ = recovery::at(d.texts_recheck.at) => {
                d.texts_recheck.at = None;
                d.spawn_texts_refresh(&w.texts_tx);
            }
            Some(r) = w.texts.recv() => d.on_texts(r),
            _ = watchdog_due(&mut timers.watchdog) => {
                if let Some(w) = timers.watchdog.as_mut() {
                    w.ping();
                }
            }
        }
    }
}

/// Starts the owed cycle when it is due now and none runs.
fn start_due_cycle(d: &mut Daemon, w: &mut Wiring) {
    if w.cycle.is_some() {
        return;
    }
    let now = d.now_ms();
    if d.coalescer.try_start(now) {
        let (run_starting_tx, run_starting_rx) = oneshot::channel();
        w.cycle = Some(d.start_cycle(w.shutdown.subscribe(), run_starting_tx));
        w.run_starting = Some(run_starting_rx);
    }
}

/// What the running cycle says as it hands its run to the supervisor; never while none runs.
async fn run_starting(
    rx: &mut Option<oneshot::Receiver<RunStarting>>,
) -> Result<RunStarting, oneshot::error::RecvError> {
    match rx.as_mut() {
        Some(rx) => rx.await,
        None => std::future::pending().await,
    }
}

/// After `ms` milliseconds (at once for 0); never for `None`.
async fn after_ms(ms: Option<u64>) {
    match ms {
        Some(0) => {}
        Some(ms) => tokio::time::sleep(Duration::from_millis(ms)).await,
        None => std::future::pending().await,
    }
}

/// The end of the running cycle's task; never while none runs.
async fn cycle_end(
    cycle: &mut Option<JoinHandle<CycleReport>>,
) -> Result<CycleReport, tokio::task::JoinError> {
    match cycle.as_mut() {
        Some(t) => t.await,
        None => std::future::pending().await,
    }
}

/// The one state `status.json` shows: stopping > starting > key_refused > runtime_unusable >
/// handle_mismatch > the socket's. A refused key comes first: nothing else can work without it.
fn shown_state(p: &ListenerFlags, socket: SocketState) -> ListenerState {
    if p.stopped {
        ListenerState::Stopped
    } else if p.stopping {
        ListenerState::Stopping
    } else if p.starting {
        ListenerState::Starting
    } else if socket == SocketState::KeyRefused {
        ListenerState::KeyRefused
    } else if p.unusable.is_some() {
        ListenerState::RuntimeUnusable
    } else if p.mismatch.is_some() {
        ListenerState::HandleMismatch
    } else {
        socket.into()
    }
}

/// The coalescer's `(quiet_window, max_delay)` in milliseconds.
fn windows(s: &Settings) -> (u64, u64) {
    (
        s.listen.quiet_window.as_millis() as u64,
        s.listen.max_delay.as_millis() as u64,
    )
}

fn key_source_label(k: &config::KeySource) -> String {
    match k {
        config::KeySource::Env => "env".into(),
        config::KeySource::File(p) => format!("file:{}", p.display()),
        config::KeySource::Config => "config".into(),
        config::KeySource::Missing => "missing".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags() -> ListenerFlags {
        ListenerFlags {
            starting: false,
            unusable: None,
            unusable_binary: None,
            mismatch: None,
            stopping: false,
            stopped: false,
        }
    }

    #[test]
    fn shown_state_puts_stopping_then_key_then_profile_states_over_the_socket() {
        let mut p = flags();
        assert_eq!(
            shown_state(&p, SocketState::Backoff),
            ListenerState::Backoff
        );
        p.mismatch = Some("@x".into());
        assert_eq!(
            shown_state(&p, SocketState::Connected),
            ListenerState::HandleMismatch
        );
        p.unusable = Some("no claude".into());
        assert_eq!(
            shown_state(&p, SocketState::Connected),
            ListenerState::RuntimeUnusable
        );
        assert_eq!(
            shown_state(&p, SocketState::KeyRefused),
            ListenerState::KeyRefused
        );
        p.stopping = true;
        assert_eq!(
            shown_state(&p, SocketState::KeyRefused),
            ListenerState::Stopping
        );
        p.stopped = true;
        assert_eq!(
            shown_state(&p, SocketState::Connected),
            ListenerState::Stopped
        );
    }
}

//! One profile's listener, the main loop (contract 3.4 and 4): starts one cycle at a time as a
//! task, refreshes texts on a timer, and answers the process
//! layer's commands (`HostCommand`: stop, stop now, reload, probe). Signals, systemd notification,
//! the watchdog and the metrics endpoint are the process's (`listen::host`), which runs one of
//! these per profile. The socket runs as its own task and sends wakes here.
//!
//! An idle listener does nothing of its own: `status.json` is written when something in it
//! changes, and no timer wakes the loop (the texts refresh is daily). The server's heartbeat
//! (every 45 s, contract 3.4) still turns it, and such a turn touches the file, at most every
//! `TOUCH_EVERY`, so `agentchat status` can tell a stuck loop (`core::status::quiet_allowance`).
//!
//! Each concern is a type that owns its fields: the wakes (`core::wakes`, recorded by `wakes`),
//! the runtime's health (`core::runtime_health`, acted on by `runtime`), the texts in use with
//! their recovery (`texts_in_use`), `status.json` as a file (`status_file`); `render` builds the
//! document from them at each write.

mod events;
mod lifecycle;
mod queue;
mod recovery;
mod render;
pub(crate) mod run_policy;
mod runtime;
mod settings;
mod status_file;
mod texts_in_use;
mod wakes;
mod wiring;

use crate::log_events;
use status_file::StatusFile;
use texts_in_use::TextsInUse;
use wiring::{Timers, Wiring};

use super::cycle::{self, CycleInput, CycleReport, RunStarting};
use super::metrics::Metrics;
use super::socket::{self, SocketEvent, SocketParams, SocketState};
use super::state_dir::StateDir;
use super::texts::{self, Loaded, Missing};
use crate::client::{Api, ApiError};
use crate::config::{self, Settings};
use crate::core::engine::WakeCause;
use crate::core::recheck::Recheck;
use crate::core::runtime_health::RuntimeHealth;
use crate::core::shown::Phase;
use crate::core::status::{Counters, LastCycle, ListenerState, ListenerWake, Outcome, Status};
use crate::core::wakes::{Wakes, Windows};
use crate::runtime::agent_cli::BinaryStamp;
use crate::sys::{time, wait};
use secrecy::{ExposeSecret, SecretString};
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant, SystemTime};
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

/// What the socket last said, kept as it came: formatted into the status only when it is written.
#[derive(Debug)]
struct SocketView {
    state: SocketState,
    /// Its words on its state; a tray read whose key was refused says so in their place until
    /// the socket says its next state.
    detail: Option<String>,
    next_retry_at: Option<SystemTime>,
    last_connected: Option<SystemTime>,
    /// When the last frame came: a time per frame, formatted only at a write.
    last_frame: Option<SystemTime>,
}

impl Default for SocketView {
    fn default() -> Self {
        SocketView {
            state: SocketState::Connecting,
            detail: None,
            next_retry_at: None,
            last_connected: None,
            last_frame: None,
        }
    }
}

/// What the listener itself stands in, shown on top of the socket's state (`core::shown`).
#[derive(Debug, Default)]
struct ListenerFlags {
    phase: Phase,
    /// The tray belongs to this agent, not to this key's handle: no runs until it matches.
    mismatch: Option<String>,
    /// The tray's route answered `REMOVED` (contract 7): `upgrade_required` until a tray is read.
    removed: Option<String>,
    /// The cycle's run waits for a slot of the process (`listen::admission`).
    queued: Option<super::admission::Queued>,
    /// The running cycle waits out the server's `429 Retry-After` until then.
    cycle_wait: Option<SystemTime>,
}

/// Why a stopping listener stopped waiting for its cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum CutShort {
    /// A second SIGTERM or SIGINT.
    Killed,
    /// The grace and the slack after it passed.
    Abandoned,
}

/// One profile's listener: its settings and endpoint, and the owners of its state, from which
/// `render` builds `status.json` at each write.
struct Daemon {
    /// Where the settings are read again.
    source: config::Source,
    settings: Settings,
    key: SecretString,
    /// The one REST client for `settings.api_base` and `key`, shared by the socket task, the
    /// cycles and the texts refreshes, so its keep-alive connection outlives each of them. Built
    /// again only when a reload or a new key file changes either.
    api: Api,
    state: StateDir,
    /// The zero of the listener's millisecond clock (`now_ms`), which the pure owners count on.
    started: Instant,
    started_at: SystemTime,
    flags: ListenerFlags,
    socket: SocketView,
    handle: Option<String>,
    /// The counters `status.json` shows, but the wakes' (`wakes`).
    counters: Counters,
    last_cycle: Option<LastCycle>,
    /// The wakes owed a cycle (`core::wakes`; `wakes` records every one).
    wakes: Wakes,
    /// The texts in use, and the way out while there are none (`texts_in_use`).
    texts: TextsInUse,
    /// Whether the runtime can run, and the way out when not (`runtime`).
    runtime: RuntimeHealth<BinaryStamp>,
    /// `status.json`: when it is written and touched (`status_file`).
    status_file: StatusFile,
    /// The process's connect pacer, handed to every socket task.
    pacer: super::pacer::Pacer,
    /// The metrics registry (a no-op unless `listen.metrics_addr` is set).
    metrics: Arc<Metrics>,
    /// This agent's machine-wide lock: one listener per agent (`agent_lock`).
    agent: super::agent_lock::AgentSlot,
    /// No tray read before this: a `429`'s `Retry-After` outlasted a cycle's retries. A cycle of
    /// its own (`recovered`) reads the tray then, so nothing waits for a new message.
    tray_not_before: Recheck,
    /// The next tray read while its route answers `REMOVED` (`recovery`).
    removed_recheck: Recheck,
    /// The process's run slots and this listener's id there (`listen --all`), and the running
    /// cycle's word that its run queued, until the main loop takes it (`queue`).
    admission: Option<(super::admission::Admission, u64)>,
    queued_rx: Option<oneshot::Receiver<super::admission::Queued>>,
    /// `[listen.policy]`: the rules, the ledger of runs and the hold (`run_policy`).
    run_policy: run_policy::RunPolicy,
}

/// What the process layer (`listen::host`) tells a profile's listener. The listener owns no
/// signal and says nothing to systemd: the host turns signals into these, and pings the watchdog
/// only while every profile's loop turns (`host::watchdog`).
#[derive(Debug, Clone)]
pub enum HostCommand {
    /// Stop gracefully (the first SIGTERM/SIGINT, or the profile left the config): the run gets
    /// its grace. The name is the cause, for the log.
    Stop(&'static str),
    /// Stop now (a second signal): the run's group is killed at once.
    StopNow(&'static str),
    /// SIGHUP: read this profile's config and texts again. `listen --all` hands each profile
    /// the settings it read once for all of them; `None`: the listener reads its own.
    Reload(Option<Box<Settings>>),
    /// SIGHUP for a profile of `listen --all` whose settings did not change: whatever keeps its
    /// runs from starting (an unusable runtime, missing texts, a refused key) is looked at now;
    /// nothing for one that can run.
    Recheck,
    /// Turn once: the host's watchdog looks for a loop that does not.
    Probe,
}

/// Room in a profile's command channel: the host sends a few commands in a listener's life, and a
/// probe that finds it full is dropped (the loop that does not drain it is the wedged one).
pub const COMMANDS: usize = 4;

/// How a profile's listener ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerEnd {
    /// Told to stop.
    Stopped,
    /// Another listener serves this agent (`agent_lock`): this one stopped. `holder`: that
    /// listener's pid, as its lock says.
    TakenByOther { holder: Option<u32> },
}

/// What a profile's listener starts with: its settings, and what the host made for it.
pub struct Start {
    /// Where its settings are read again (SIGHUP, a refused key).
    pub source: config::Source,
    pub settings: Settings,
    pub key: SecretString,
    pub state: StateDir,
    /// Its metrics (a no-op unless an endpoint serves them); the host serves the endpoint.
    pub metrics: Arc<Metrics>,
    /// Tell systemd the state (`STATUS=`): only when this is the process's one profile.
    pub notify_status: bool,
    /// The process's one connect pacer (`listen::pacer`), which every profile's socket passes.
    pub pacer: super::pacer::Pacer,
    /// The process's run slots (`listen --all`); `None`: runs start at once.
    pub admission: Option<super::admission::Admission>,
}

/// The listener's link to the host.
pub struct Link {
    pub commands: mpsc::Receiver<HostCommand>,
    /// Said once the listener is started (socket task running, texts looked at): the host's
    /// READY waits for every profile's.
    pub started: Option<oneshot::Sender<()>>,
    /// Counts the main loop's turns, for the host's watchdog.
    pub turns: Arc<AtomicU64>,
}

/// Runs one profile's listener until the host says stop (or another listener takes its agent).
pub async fn run(start: Start, mut link: Link) -> anyhow::Result<ListenerEnd> {
    let mut d = Daemon::new(start)?;
    d.announce_start();
    d.check_runtime_at_start();
    d.refresh_texts().await;
    let mut wiring = Wiring::start(d.socket_params());
    d.ready();
    if let Some(started) = link.started.take() {
        let _ = started.send(());
    }
    let mut timers = Timers::new(d.scale());
    let cause = main_loop(&mut d, &mut wiring, &mut link, &mut timers).await;
    tracing::info!(event = %log_events::STOPPING, signal = cause, "stopping");
    d.stop(wiring, &mut link.commands).await;
    if d.agent.taken_by_other() {
        return Ok(ListenerEnd::TakenByOther {
            holder: d.agent.holder(),
        });
    }
    Ok(ListenerEnd::Stopped)
}

/// The next `StopNow` while stopping; its cause. Other commands are dropped meanwhile, and a
/// host that is gone never cuts the stop short.
async fn stop_now(commands: &mut mpsc::Receiver<HostCommand>) -> &'static str {
    loop {
        match commands.recv().await {
            Some(HostCommand::StopNow(cause)) => return cause,
            Some(_) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// Waits for whatever comes next (a command, a socket event, a due cycle, a cycle's end, a timer)
/// and handles it, until the host says stop; returns why.
async fn main_loop(
    d: &mut Daemon,
    w: &mut Wiring,
    link: &mut Link,
    timers: &mut Timers,
) -> &'static str {
    loop {
        d.flush_status();
        d.turned();
        link.turns
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let due = if w.cycle.is_none() && d.tray_not_before.at().is_none() {
            d.wakes.due().map(|at| at.saturating_sub(d.now_ms()))
        } else {
            None
        };
        tokio::select! {
            cmd = link.commands.recv() => match cmd {
                Some(HostCommand::Stop(cause) | HostCommand::StopNow(cause)) => return cause,
                // The host is gone: nothing will say stop any more.
                None => return "the process is ending",
                Some(HostCommand::Probe) => {}
                Some(HostCommand::Recheck) => d.recheck_now(&w.params),
                Some(HostCommand::Reload(new)) => {
                    let scale = d.scale();
                    d.reload(&w.params, new);
                    if d.scale() != scale {
                        // The scale follows `api_base` (`config::TestTimeScale`): a reload onto
                        // another server sets the timers again.
                        *timers = Timers::new(d.scale());
                    }
                    d.spawn_texts_refresh(&w.texts_tx);
                }
            },
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
                tracing::error!(event = %log_events::SOCKET_TASK_ENDED, error = r.err().map(|e| e.to_string()), "the socket task ended unexpectedly; restarting it");
                w.restart_socket();
            }
            _ = after_ms(due) => start_due_cycle(d, w),
            r = wait::some(w.run_starting.as_mut()) => {
                w.run_starting = None;
                d.left_queue();
                if let Ok(run) = r {
                    d.on_run_starting(run);
                }
            }
            r = wait::some(w.queued.as_mut()) => {
                w.queued = None;
                if let Ok(q) = r {
                    d.on_queued(q);
                }
            }
            r = wait::some(w.cycle.as_mut()) => {
                w.cycle = None;
                w.run_starting = None;
                w.queued = None;
                d.left_queue();
                d.on_cycle_task_end(r);
                start_due_cycle(d, w);
            }
            _ = timers.key.tick(), if d.socket.state == SocketState::KeyRefused => {
                d.check_key_file(&w.params);
            }
            _ = timers.texts.tick() => d.spawn_texts_refresh(&w.texts_tx),
            _ = wait::until(d.instant(d.runtime.recheck_at())), if w.runtime_check.is_none() => {
                if d.runtime.begin_check() {
                    w.runtime_check = Some(d.spawn_runtime_check());
                }
            }
            r = wait::some(w.runtime_check.as_mut()) => {
                w.runtime_check = None;
                d.on_runtime_check(r);
            }
            _ = wait::until(d.instant(d.status_file.retry_at())) => {
                if d.status_file.retry_due() {
                    d.write_status();
                }
            }
            _ = wait::until(d.instant(d.tray_not_before.at())) => {
                d.tray_not_before.reset();
                d.own_wake(ListenerWake::Recovered);
                start_due_cycle(d, w);
            }
            _ = wait::until(d.instant(d.removed_recheck.at())) => {
                d.removed_recheck_due();
                start_due_cycle(d, w);
            }
            _ = wait::until(d.instant(d.texts.recheck_at())) => {
                d.texts.fetching();
                d.spawn_texts_refresh(&w.texts_tx);
            }
            Some(r) = w.texts.recv() => d.on_texts(*r),
            _ = wait::until(d.status_file.hold_deadline()) => d.status_file.release(),
            Some(wait) = w.cycle_waits.recv() => d.on_cycle_wait(wait),
            _ = wait::until(d.run_policy.wake_at()) => {
                if d.run_policy.wake_due() {
                    d.own_wake(crate::core::status::ListenerWake::HoldEnded);
                }
                start_due_cycle(d, w);
            }
        }
    }
}

/// Starts the owed cycle when it is due now and none runs.
fn start_due_cycle(d: &mut Daemon, w: &mut Wiring) {
    if w.cycle.is_some() || d.tray_not_before.at().is_some() {
        return;
    }
    let now = d.now_ms();
    if d.wakes.try_start(now) {
        let (run_starting_tx, run_starting_rx) = oneshot::channel();
        let waits = w.cycle_waits_tx.clone();
        w.cycle = Some(d.start_cycle(w.shutdown.subscribe(), run_starting_tx, waits));
        w.run_starting = Some(run_starting_rx);
        w.queued = d.queued_rx.take();
    }
}

/// After `ms` milliseconds (at once for 0); never for `None`.
async fn after_ms(ms: Option<u64>) {
    if ms != Some(0) {
        wait::until(ms.map(|ms| tokio::time::Instant::now() + Duration::from_millis(ms))).await;
    }
}

/// The coalescer's windows of these settings.
fn windows(s: &Settings) -> Windows {
    Windows {
        quiet_ms: s.listen.quiet_window.as_millis() as u64,
        max_delay_ms: s.listen.max_delay.as_millis() as u64,
    }
}

fn key_source_label(k: &config::KeySource) -> String {
    match k {
        config::KeySource::Env => "env".into(),
        config::KeySource::File(p) => format!("file:{}", p.display()),
        config::KeySource::Config => "config".into(),
        config::KeySource::Missing => "missing".into(),
    }
}

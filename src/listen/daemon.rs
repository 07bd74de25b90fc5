//! The main loop (contract 3.4 and 4): owns the coalescer and the status, starts one cycle at a time as
//! a task, refreshes texts on a timer, and handles signals (SIGTERM/SIGINT stop, SIGHUP reload)
//! and systemd notification. The socket runs as its own task and sends wakes here.
//!
//! An idle listener does nothing of its own: `status.json` is written when something in it
//! changes, and no timer wakes the loop (the texts refresh is daily). The server's heartbeat
//! (every 45 s, contract 3.4) still turns it, and such a turn touches the file, at most every
//! `TOUCH_EVERY`, so `agentchat status` can tell a stuck loop (`core::status::quiet_allowance`).

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

/// The signals the listener answers: SIGTERM and SIGINT stop it, SIGHUP reloads.
struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// The next SIGTERM or SIGINT while stopping; which of the two.
    async fn second(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// The channels between the main loop and its tasks (the socket, texts refreshes, the cycle).
struct Wiring {
    shutdown: watch::Sender<bool>,
    params: watch::Sender<SocketParams>,
    events_tx: mpsc::Sender<SocketEvent>,
    events: mpsc::Receiver<SocketEvent>,
    texts_tx: mpsc::Sender<Result<Loaded, Missing>>,
    texts: mpsc::Receiver<Result<Loaded, Missing>>,
    socket: JoinHandle<()>,
    /// The cycle running now; one at a time, ever.
    cycle: Option<JoinHandle<CycleReport>>,
    /// Hears from the running cycle when it hands its run to the supervisor.
    run_starting: Option<oneshot::Receiver<RunStarting>>,
}

impl Wiring {
    /// Makes the channels and starts the socket task.
    fn start(params: SocketParams) -> Wiring {
        let (shutdown, _) = watch::channel(false);
        let (params, _) = watch::channel(params);
        let (events_tx, events) = mpsc::channel::<SocketEvent>(256);
        let (texts_tx, texts) = mpsc::channel(4);
        let socket = tokio::spawn(socket::run(
            params.subscribe(),
            events_tx.clone(),
            shutdown.subscribe(),
        ));
        Wiring {
            shutdown,
            params,
            events_tx,
            events,
            texts_tx,
            texts,
            socket,
            cycle: None,
            run_starting: None,
        }
    }

    fn restart_socket(&mut self) {
        self.socket = tokio::spawn(socket::run(
            self.params.subscribe(),
            self.events_tx.clone(),
            self.shutdown.subscribe(),
        ));
    }

    /// Lets the socket task close with 1000 and end, answering its wakes meanwhile so it is
    /// never stuck waiting on the main loop; at most 5 s.
    async fn close_socket(self) {
        let Wiring {
            events_tx,
            mut events,
            socket,
            ..
        } = self;
        drop(events_tx);
        let drain = async {
            while let Some(ev) = events.recv().await {
                if let SocketEvent::Wake { registered, .. } = ev {
                    drop(registered);
                }
            }
        };
        let _ = tokio::time::timeout(Duration::from_secs(5), async {
            tokio::join!(socket, drain)
        })
        .await;
    }
}

/// The main loop's timers. None of them ticks while the listener is idle and connected (the
/// texts refresh is daily, the key check runs only while the key is refused, and systemd's
/// watchdog is pinged on the server's heartbeats).
struct Timers {
    texts: Interval,
    key: Interval,
    /// systemd's watchdog, pinged at half its interval when it is on, unless a turn of the loop
    /// pinged it since (see [`Timers::turned`]).
    watchdog: Option<Watchdog>,
}

/// systemd's watchdog (`WatchdogSec=` in the unit): a ping at least every half interval.
struct Watchdog {
    interval: Interval,
    last: tokio::time::Instant,
}

impl Watchdog {
    fn ping(&mut self) {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
        self.last = tokio::time::Instant::now();
        self.interval.reset();
    }
}

impl Timers {
    fn new(scale: TimeScale, notify: bool) -> Timers {
        let every = |d: Duration| {
            let mut i = tokio::time::interval(d);
            i.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            i
        };
        let mut texts = every(scale.apply(TEXTS_REFRESH));
        texts.reset();
        let watchdog = notify
            .then(sd_notify::watchdog_enabled)
            .flatten()
            .map(|w| Watchdog {
                interval: tokio::time::interval((w / 2).max(Duration::from_millis(100))),
                last: tokio::time::Instant::now(),
            });
        Timers {
            texts,
            key: every(KEY_CHECK),
            watchdog,
        }
    }

    /// The main loop turned: a watchdog last pinged a quarter of its interval ago or more is
    /// pinged now, and its timer starts over. The server's heartbeat (45 s) turns the loop more
    /// often than the unit's half interval (60 s), so while the socket is up the timer never
    /// fires and the ping costs no wakeup of its own.
    fn turned(&mut self) {
        if let Some(w) = self.watchdog.as_mut()
            && w.last.elapsed() >= w.interval.period() / 2
        {
            w.ping();
        }
    }
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

/// The next tick of the watchdog's timer; never when there is no watchdog.
async fn watchdog_due(watchdog: &mut Option<Watchdog>) {
    match watchdog.as_mut() {
        Some(w) => {
            w.interval.tick().await;
        }
        None => std::future::pending().await,
    }
}

impl Daemon {
    fn new(
        args: ConfigArgs,
        settings: Settings,
        key: SecretString,
        state: StateDir,
        notify: bool,
    ) -> Result<Daemon, ApiError> {
        let api = Api::new(&settings.api_base, key.clone())?;
        let now = SystemTime::now();
        let status = Status {
            state: ListenerState::Starting,
            since: time::rfc3339(now),
            socket: Some(SocketState::Connecting),
            pid: std::process::id(),
            profile: settings.profile.clone(),
            handle: None,
            api_base: settings.api_base.clone(),
            runtime: settings.listen.runtime.as_str().to_string(),
            key_source: key_source_label(&settings.key_source),
            updated_at: time::rfc3339(now),
            started_at: time::rfc3339(now),
            last_frame_at: None,
            last_connected_at: None,
            last_wake: None,
            last_cycle: None,
            next_retry_at: None,
            detail: None,
            texts: TextsStatus::default(),
            counters: Counters::default(),
            file_modified: None,
        };
        let (quiet_ms, max_delay_ms) = windows(&settings);
        let metrics = Metrics::for_settings(&settings);
        Ok(Daemon {
            args,
            settings,
            key,
            api,
            state,
            started: Instant::now(),
            status,
            flags: ListenerFlags {
                starting: true,
                unusable: None,
                unusable_binary: None,
                mismatch: None,
                stopping: false,
                stopped: false,
            },
            socket_state: SocketState::Connecting,
            texts: None,
            handle: None,
            pending_reasons: BTreeSet::new(),
            coalescer: Coalescer::new(quiet_ms, max_delay_ms),
            notify,
            status_write_failing: false,
            status_dirty: false,
            status_held: false,
            status_file: None,
            status_proof: Instant::now(),
            pending_windows: None,
            texts_missing_logged: false,
            last_frame: None,
            metrics,
            agent: Default::default(),
        })
    }

    fn announce_start(&mut self) {
        tracing::info!(
            event = %"listener_start",
            pid = std::process::id(),
            profile = %self.settings.profile,
            api_base = %self.settings.api_base,
            runtime = self.settings.listen.runtime.as_str(),
            state_dir = %self.state.root.display(),
            "listener starting"
        );
        self.write_status();
    }

    /// The socket task is started: no longer `starting`, and systemd hears READY.
    fn ready(&mut self) {
        self.flags.starting = false;
        if self.notify {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        }
    }

    /// Graceful stop: the run gets its grace, the socket closes with 1000, the status says
    /// `stopped`. A second SIGTERM or SIGINT cuts the wait short: the run's group is killed at
    /// once (however long `kill_grace` is) and the listener exits.
    async fn stop(&mut self, mut w: Wiring, signals: &mut Signals) {
        self.flags.stopping = true;
        self.write_status();
        if self.notify {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
        }
        let _ = w.shutdown.send(true);
        // A run handed to the supervisor just before the signal came is still to be heard of.
        if let Some(run) = w.run_starting.take().and_then(|mut rx| rx.try_recv().ok()) {
            self.on_run_starting(run);
        }
        let mut forced = false;
        if let Some(t) = w.cycle.take() {
            forced = self.wait_for_cycle(t, signals).await;
        }
        if forced {
            w.close_socket().await;
        } else {
            tokio::select! {
                _ = w.close_socket() => {}
                signal = signals.second() => {
                    tracing::warn!(event = %"stop_forced", signal, "second stop signal: not waiting for the socket's close");
                }
            }
        }
        self.flags.stopped = true;
        self.write_status();
        tracing::info!(event = %"stopped", "listener stopped");
    }

    /// While stopping: says once what it waits for and how long, then waits for the cycle to wind
    /// down (its run has SIGTERM and the grace). A second signal, or the grace and some slack
    /// passing, ends the wait: the cycle's task is dropped, and with it the run's supervisor,
    /// which SIGKILLs the run's process group. True when a second signal ended it.
    async fn wait_for_cycle(
        &mut self,
        mut t: JoinHandle<CycleReport>,
        signals: &mut Signals,
    ) -> bool {
        let grace = self.settings.listen.kill_grace;
        let wait = grace.saturating_add(STOP_SLACK);
        let cycle = self.status.last_cycle.as_ref();
        let cycle_id = cycle.map(|c| c.id.as_str());
        let run_log = cycle.and_then(|c| c.run_log.as_deref());
        let what = if cycle.is_some_and(|c| c.run_started) {
            format!(
                "the run to end: it has SIGTERM, and SIGKILL goes to its whole process group when \
                 the grace of {} is over",
                humantime::format_duration(grace)
            )
        } else {
            "the cycle to wind down (no run started)".to_string()
        };
        tracing::info!(
            event = %"stop_waiting",
            cycle_id,
            run_log,
            grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "waiting up to {} for {what}; SIGTERM or SIGINT again ends it now",
            humantime::format_duration(wait),
        );
        let why = tokio::select! {
            r = tokio::time::timeout(wait, &mut t) => match r {
                Ok(Ok(report)) => {
                    self.on_cycle_end(report);
                    return false;
                }
                Ok(Err(_)) => return false,
                Err(_) => {
                    tracing::warn!(
                        event = %"cycle_abandoned",
                        "the cycle did not end within the grace; abandoning it"
                    );
                    CutShort::Abandoned
                }
            },
            signal = signals.second() => {
                tracing::warn!(event = %"stop_forced", signal, "second stop signal: killing the run's process group now");
                CutShort::Killed
            }
        };
        // Dropping the task drops the run's supervisor, whose group guard SIGKILLs the group;
        // awaiting the aborted task waits for that drop.
        t.abort();
        let _ = t.await;
        self.record_cut_cycle(why);
        why == CutShort::Killed
    }

    /// The status of a cycle the stop cut short: a run it had started counts as failed.
    fn record_cut_cycle(&mut self, why: CutShort) {
        let Some(c) = self.status.last_cycle.as_mut() else {
            return;
        };
        c.ended_at = Some(time::rfc3339(SystemTime::now()));
        if c.run_started {
            c.outcome = Some(Outcome::Failed);
            c.failure = Some(
                match why {
                    CutShort::Killed => "killed with its process group: a second stop signal",
                    CutShort::Abandoned => "killed with its process group: the grace was over",
                }
                .to_string(),
            );
            self.status.counters.runs += 1;
            self.status.counters.runs_failed += 1;
        }
    }

    /// The cycle's task ended: the coalescer hears it, and its report goes into the status.
    fn on_cycle_task_end(&mut self, r: Result<CycleReport, tokio::task::JoinError>) {
        self.status_held = false;
        let now = self.now_ms();
        self.coalescer.end(now);
        self.apply_pending_windows();
        match r {
            Ok(report) => self.on_cycle_end(report),
            Err(e) => {
                tracing::error!(event = %"cycle_crashed", error = %e, "the cycle task ended abnormally")
            }
        }
    }

    /// The test time scale of the settings in use, decided against their own `api_base`
    /// (`config::TestTimeScale`): a reload onto a server that is not on loopback gets the
    /// contract's timers back at once.
    fn scale(&self) -> TimeScale {
        TimeScale(self.settings.time_scale.factor())
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn socket_params(&self) -> SocketParams {
        let scale = self.scale();
        SocketParams {
            api_base: self.settings.api_base.clone(),
            key: self.key.clone(),
            api: self.api.clone(),
            idle_timeout: self.settings.listen.idle_timeout,
            key_refused_retry: scale.apply(crate::core::reconnect::KEY_REFUSED_RETRY),
            backoff_scale: scale.0,
            unreachable_warn_after: scale.apply(super::reach::UNREACHABLE_WARN_AFTER),
            misconfigured_retry: scale.apply(super::reach::MISCONFIGURED_RETRY),
            metrics: self.metrics.clone(),
        }
    }

    /// A new base or key gets a new client; the same configuration keeps the one it has (and its
    /// connection). `false`: no client could be built for the new one.
    fn use_endpoint(&mut self, api_base: &str, key: &SecretString) -> bool {
        if api_base == self.settings.api_base && key.expose_secret() == self.key.expose_secret() {
            return true;
        }
        match Api::new(api_base, key.clone()) {
            Ok(api) => {
                self.api = api;
                self.key = key.clone();
                true
            }
            Err(e) => {
                tracing::error!(event = %"http_client_failed", error = %e, "cannot build the HTTP client");
                false
            }
        }
    }

    fn on_socket_event(&mut self, ev: SocketEvent) {
        let now = SystemTime::now();
        match ev {
            SocketEvent::Handle(h) => {
                let state_dir = self.settings.state_dir.clone();
                if !self
                    .agent
                    .on_handle(&self.settings.api_base, &h, &state_dir)
                {
                    return;
                }
                tracing::info!(event = %"handle", handle = %crate::core::handle::shown(&h), "this key's agent");
                self.handle = Some(h.clone());
                self.status.handle = Some(crate::core::handle::shown(&h));
                self.status_changed();
            }
            SocketEvent::State {
                state,
                next_retry_at,
                detail,
            } => {
                self.socket_state = state;
                self.status.next_retry_at = next_retry_at.map(time::rfc3339);
                if self.flags.unusable.is_none() && self.flags.mismatch.is_none() {
                    self.status.detail = detail;
                }
                self.status_changed();
            }
            SocketEvent::Connected => {
                self.status.counters.connects += 1;
                self.status.last_connected_at = Some(time::rfc3339(now));
            }
            SocketEvent::Burst {
                frames,
                skipped,
                acked,
            } => {
                self.status.counters.frames += frames;
                self.status.counters.frames_skipped += skipped;
                self.status.counters.acks += acked;
                self.metrics.burst(skipped, acked);
                self.last_frame = Some(now);
            }
            SocketEvent::Wake {
                cause,
                frames,
                registered,
            } => {
                self.metrics.wake(&cause, frames);
                let label = cause.label();
                let t = self.now_ms();
                self.coalescer.wake(t);
                self.pending_reasons.insert(label);
                let _ = registered.send(());
                self.status.counters.wakes += frames;
                self.status.last_wake = Some(LastWake {
                    at: time::rfc3339(now),
                    reasons: self.pending_reasons.iter().cloned().collect(),
                });
                self.status_changed();
            }
        }
    }

    /// Starts a cycle as its own task. The status shows it once its run is spawned (or it ended):
    /// nothing is written to disk on a wake's way to its run.
    fn start_cycle(
        &mut self,
        shutdown: watch::Receiver<bool>,
        run_starting: oneshot::Sender<RunStarting>,
    ) -> JoinHandle<CycleReport> {
        let reasons: Vec<String> = std::mem::take(&mut self.pending_reasons)
            .into_iter()
            .collect();
        self.retry_a_changed_runtime_binary();
        let id = cycle::new_cycle_id();
        self.status.counters.cycles += 1;
        self.metrics.cycle_started();
        let input = CycleInput {
            id: id.clone(),
            settings: self.settings.clone(),
            api: self.api.clone(),
            key: self.key.clone(),
            state: self.state.clone(),
            handle: self.handle.clone().unwrap_or_default(),
            texts: self.current_texts().map(|l| l.texts.clone()),
            reasons: reasons.clone(),
            runtime_unusable: self.flags.unusable.is_some(),
            invite_pace_ms: self.scale().invite_pace_ms(),
            shutdown,
            run_starting: Some(run_starting),
            metrics: self.metrics.clone(),
        };
        self.status.last_cycle = Some(LastCycle::started(
            id,
            time::rfc3339(SystemTime::now()),
            reasons,
        ));
        self.status_changed();
        self.status_held = true;
        tokio::spawn(cycle::run(input))
    }

    /// The cycle handed its run to the supervisor. On the listener's single-threaded runtime this
    /// is heard once the cycle's task yields, which is after the spawn: now the status may be
    /// written.
    fn on_run_starting(&mut self, run: RunStarting) {
        self.status_held = false;
        if let Some(c) = self.status.last_cycle.as_mut() {
            c.run_started = true;
            c.run_kind = Some(run.kind);
            c.run_log = Some(run.log);
        }
        self.status_changed();
    }

    fn on_cycle_end(&mut self, report: CycleReport) {
        self.metrics.cycle_ended(&report);
        if report.last.run_started {
            self.status.counters.runs += 1;
        }
        if report.last.run_failed() {
            self.status.counters.runs_failed += 1;
        }
        self.status.counters.invites_dismissed += report.last.invites_dismissed;
        if let Some(why) = report.unusable {
            self.flags.unusable = Some(why.clone());
            self.flags.unusable_binary = crate::runtime::binary_stamp(&self.settings);
            self.status.detail = Some(format!("runtime unusable: {why}"));
        }
        if let Some(you) = report.handle_mismatch {
            if self.flags.mismatch.as_deref() != Some(you.as_str()) {
                tracing::error!(
                    event = %"handle_mismatch",
                    you = %crate::core::handle::shown(&you),
                    handle = self.handle.as_deref().map(crate::core::handle::shown),
                    "the tray belongs to another agent than this key's; no runs until it matches"
                );
            }
            self.status.detail = Some(format!(
                "the tray is {you}'s, not @{}'s",
                self.handle.as_deref().unwrap_or("?")
            ));
            self.flags.mismatch = Some(you);
        } else if report.handle_ok && self.flags.mismatch.take().is_some() {
            tracing::info!(event = %"handle_mismatch_cleared", "the tray is this key's agent's again");
            self.status.detail = None;
        }
        if report.key_refused {
            self.status.detail =
                Some("the server refused the key when reading the tray (HTTP 401/403)".into());
        }
        if let Some(loaded) = report.loaded_texts {
            self.take_texts(Ok(loaded));
        } else if let Some(missing) = report.texts_missing {
            self.take_texts(Err(missing));
        }
        self.status.last_cycle = Some(report.last);
        self.status_changed();
    }

    fn shown(&self) -> ListenerState {
        shown_state(&self.flags, self.socket_state)
    }

    /// Something shown in `status.json` changed; the main loop writes it at its next turn.
    fn status_changed(&mut self) {
        self.status_dirty = true;
    }

    /// Writes the status if it changed, unless a cycle is on its way to its run.
    fn flush_status(&mut self) {
        if self.status_dirty && !self.status_held {
            self.write_status();
        }
    }

    /// The main loop turned: `/healthz` hears it, and `status.json` is touched when it was last
    /// written or touched `TOUCH_EVERY` ago (never while a cycle is on its way to its run). A
    /// file that cannot be touched is written instead.
    fn turned(&mut self) {
        self.metrics.turned();
        let touch_every = self.scale().apply(TOUCH_EVERY).max(TOUCH_EVERY_MIN);
        if self.status_held || self.status_proof.elapsed() < touch_every {
            return;
        }
        let touched = self
            .status_file
            .as_ref()
            .is_some_and(|f| f.set_modified(SystemTime::now()).is_ok());
        if touched {
            self.status_proof = Instant::now();
        } else {
            self.write_status();
        }
    }

    fn write_status(&mut self) {
        self.status_dirty = false;
        let now = SystemTime::now();
        let shown = self.shown();
        // `status.state` is the state last shown: a change restarts `since` and is announced.
        if shown != self.status.state {
            self.status.state = shown;
            self.status.since = time::rfc3339(now);
            // While the socket comes and goes, `backoff` says why at INFO, and `stopping`/`stopped`
            // have their own lines: these states are debug, so a retry is one line, not three.
            if matches!(
                shown,
                ListenerState::Connecting
                    | ListenerState::Backoff
                    | ListenerState::Stopping
                    | ListenerState::Stopped
            ) {
                tracing::debug!(event = %"state", state = shown.as_str(), "now {}", shown.as_str());
            } else {
                tracing::info!(event = %"state", state = shown.as_str(), "now {}", shown.as_str());
            }
            if self.notify {
                let line = format!("STATUS={}", shown.as_str());
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Custom(&line)]);
            }
        }
        self.status.socket = Some(self.socket_state);
        self.status.last_frame_at = self.last_frame.map(time::rfc3339);
        self.status.updated_at = time::rfc3339(now);
        self.metrics.observe_status(&self.status);
        self.status_proof = Instant::now();
        match self.state.write_status(&self.status) {
            Ok(file) => {
                self.status_file = Some(file);
                if self.status_write_failing {
                    self.status_write_failing = false;
                    tracing::info!(event = %"status_write_recovered", "status.json is written again");
                }
            }
            Err(e) => {
                self.status_file = None;
                if !self.status_write_failing {
                    self.status_write_failing = true;
                    tracing::warn!(event = %"status_write_failed", error = %e, "could not write status.json; the listener keeps working and logs this once until a write succeeds");
                }
            }
        }
    }

    /// Fetches the texts; on failure keeps what is loaded or falls back to the cache.
    async fn refresh_texts(&mut self) {
        let runtime = self.settings.listen.runtime.texts_runtime();
        let r = texts::load(
            &self.api,
            &self.state,
            runtime,
            self.current_texts().is_none(),
        )
        .await;
        self.on_texts(r);
    }

    /// The timer's and SIGHUP's refresh runs as a task, so a slow server never holds up wakes.
    fn spawn_texts_refresh(&self, tx: &mpsc::Sender<Result<Loaded, Missing>>) {
        let api = self.api.clone();
        let runtime = self.settings.listen.runtime.texts_runtime();
        let state = self.state.clone();
        let use_cache = self.current_texts().is_none();
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = texts::load(&api, &state, runtime, use_cache).await;
            let _ = tx.send(r).await;
        });
    }

    /// The texts runtime the configured runtime reads.
    fn texts_runtime(&self) -> &'static str {
        self.settings.listen.runtime.texts_runtime()
    }

    /// The loaded texts when they are the configured runtime's: another runtime's texts spell the
    /// tools another way and are never used.
    fn current_texts(&self) -> Option<&Loaded> {
        self.texts
            .as_ref()
            .filter(|l| l.runtime == self.texts_runtime())
    }

    /// A texts refresh ended.
    fn on_texts(&mut self, r: Result<Loaded, Missing>) {
        self.take_texts(r);
        self.status_changed();
    }

    /// Texts came (a refresh, or a cycle that had none): the configured runtime's take over; an
    /// answer for a runtime switched away from meanwhile is dropped. With none for the runtime,
    /// `texts_missing` is said once per stretch without texts.
    fn take_texts(&mut self, r: Result<Loaded, Missing>) {
        match r {
            Ok(loaded) if loaded.runtime != self.texts_runtime() => {
                tracing::debug!(event = %"texts_dropped", runtime = loaded.runtime, "texts for a runtime no longer configured");
            }
            Ok(loaded) => {
                self.texts_missing_logged = false;
                self.status.texts = loaded.status();
                self.texts = Some(loaded);
            }
            Err(missing) if missing.runtime != self.texts_runtime() => {}
            Err(missing) => {
                if self.current_texts().is_none() && !self.texts_missing_logged {
                    self.texts_missing_logged = true;
                    missing.log();
                }
            }
        }
    }

    /// An unusable runtime whose binary was installed, updated or replaced since is tried again.
    fn retry_a_changed_runtime_binary(&mut self) {
        if self.flags.unusable.is_none()
            || crate::runtime::binary_stamp(&self.settings) == self.flags.unusable_binary
        {
            return;
        }
        tracing::info!(event = %"runtime_binary_changed", runtime = self.settings.listen.runtime.as_str(), "the runtime's binary changed; trying it again");
        self.flags.unusable = None;
        if self
            .status
            .detail
            .as_deref()
            .is_some_and(|d| d.starts_with("runtime unusable"))
        {
            self.status.detail = None;
        }
    }

    /// SIGHUP: config and texts again; a refused key or an unusable runtime gets a new chance.
    fn reload(&mut self, params_tx: &watch::Sender<SocketParams>) {
        tracing::info!(event = %"reload", "reloading configuration and texts");
        match config::load(&self.args) {
            Ok(s) => match s.api_key.clone() {
                Some(k) => {
                    if s.state_dir != self.settings.state_dir {
                        tracing::warn!(
                            event = %"reload_partial",
                            "the state dir cannot change while running; keeping the old one"
                        );
                    }
                    let mut s = s;
                    s.state_dir = self.settings.state_dir.clone();
                    if self.use_endpoint(&s.api_base, &k) {
                        self.take_settings(s);
                    }
                }
                None => {
                    tracing::error!(
                        event = %"reload_failed",
                        "the new configuration has no API key; keeping the old one"
                    )
                }
            },
            Err(e) => {
                tracing::error!(event = %"reload_failed", error = %e, "the new configuration is invalid; keeping the old one")
            }
        }
        self.flags.unusable = None;
        self.apply_pending_windows();
        let _ = params_tx.send(self.socket_params());
        self.status_changed();
    }

    /// Reloaded settings (with a client for their endpoint already in place) take over.
    fn take_settings(&mut self, s: Settings) {
        if s.time_scale != self.settings.time_scale {
            match s.time_scale.notice() {
                Some(line) => tracing::info!(event = %"test_time_scale", "{line}"),
                None => tracing::info!(
                    event = %"test_time_scale",
                    api_base = %s.api_base,
                    "the test time scale is not in effect (any more): every timer runs at contract speed"
                ),
            }
        }
        let (old, new) = (self.texts_runtime(), s.listen.runtime.texts_runtime());
        if old != new {
            // Texts are keyed by runtime: the old runtime's are not this one's. Until its own come
            // (the server's, else its cached copy) nothing runs.
            tracing::info!(event = %"texts_runtime_changed", from = old, to = new, "the runtime reads other texts now; loading them");
            self.texts = None;
            self.status.texts = TextsStatus::default();
            self.texts_missing_logged = false;
        }
        if windows(&s) != windows(&self.settings) {
            self.pending_windows = Some(windows(&s));
        }
        self.status.api_base = s.api_base.clone();
        self.status.runtime = s.listen.runtime.as_str().to_string();
        self.status.key_source = key_source_label(&s.key_source);
        self.settings = s;
    }

    /// A reloaded `quiet_window`/`max_delay` takes over once no cycle runs and no wake waits, so
    /// a wake already counted keeps the timing it was counted with.
    fn apply_pending_windows(&mut self) {
        if self.coalescer.is_running() || self.coalescer.is_owed() {
            return;
        }
        if let Some((quiet_ms, max_delay_ms)) = self.pending_windows.take() {
            self.coalescer = Coalescer::new(quiet_ms, max_delay_ms);
            tracing::info!(
                event = %"coalescer_windows",
                quiet_window_ms = quiet_ms,
                max_delay_ms,
                "new quiet_window and max_delay in effect"
            );
        }
    }

    /// While the key is refused, a changed key (file or environment) is tried at once.
    fn check_key_file(&mut self, params_tx: &watch::Sender<SocketParams>) {
        if self.socket_state != SocketState::KeyRefused {
            return;
        }
        let Ok(s) = config::load(&self.args) else {
            return;
        };
        if let Some(k) = s.api_key
            && k.expose_secret() != self.key.expose_secret()
        {
            tracing::info!(event = %"key_changed", "the API key changed; retrying now");
            let base = self.settings.api_base.clone();
            if self.use_endpoint(&base, &k) {
                let _ = params_tx.send(self.socket_params());
            }
        }
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

    /// A turn pings a watchdog last pinged half its timer's period ago or more, and the timer
    /// starts over: with turns that often, the timer itself never fires.
    #[tokio::test(start_paused = true)]
    async fn a_turn_pings_the_watchdog_once_its_last_ping_is_half_a_period_old() {
        let period = Duration::from_secs(60);
        let mut timers = Timers::new(TimeScale(1.0), false);
        timers.watchdog = Some(Watchdog {
            interval: tokio::time::interval(period),
            last: tokio::time::Instant::now(),
        });
        let last = |t: &Timers| t.watchdog.as_ref().map(|w| w.last);
        let start = last(&timers);
        tokio::time::advance(Duration::from_secs(29)).await;
        timers.turned();
        assert_eq!(last(&timers), start, "too soon");
        tokio::time::advance(Duration::from_secs(1)).await;
        timers.turned();
        let pinged = tokio::time::Instant::now();
        assert_eq!(last(&timers), Some(pinged));
        // The timer was reset by that ping: nothing is due before a whole period from it.
        tokio::time::advance(period - Duration::from_millis(1)).await;
        let due = futures_util::FutureExt::now_or_never(watchdog_due(&mut timers.watchdog));
        assert!(due.is_none());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(
            futures_util::FutureExt::now_or_never(watchdog_due(&mut timers.watchdog)).is_some()
        );
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

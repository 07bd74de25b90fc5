//! The main loop (design 2-7): owns the coalescer and the status, starts one cycle at a time as
//! a task, refreshes texts and status on timers, and handles signals (SIGTERM/SIGINT stop,
//! SIGHUP reload) and systemd notification. The socket runs as its own task and sends wakes here.

use super::cycle::{self, CycleInput, CycleReport};
use super::metrics::{self, Metrics};
use super::socket::{self, SocketEvent, SocketParams, SocketState};
use super::state_dir::{self, Counters, LastWake, StateDir, Status, TextsStatus};
use super::{TimeScale, load_texts};
use crate::client::Api;
use crate::config::{self, ConfigArgs, Settings};
use crate::core::coalescer::Coalescer;
use crate::core::texts::Texts;
use crate::sys::time;
use secrecy::{ExposeSecret, SecretString};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

const STATUS_REFRESH: Duration = Duration::from_secs(30);
/// However far a test scales time, the status file is not rewritten (and synced) more often.
const STATUS_REFRESH_MIN: Duration = Duration::from_millis(250);
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
    stopping: bool,
}

struct Daemon {
    args: ConfigArgs,
    settings: Settings,
    key: SecretString,
    scale: TimeScale,
    state: StateDir,
    started: Instant,
    status: Status,
    flags: ListenerFlags,
    socket_state: SocketState,
    texts: Option<Texts>,
    handle: Option<String>,
    pending_reasons: BTreeSet<String>,
    coalescer: Coalescer,
    notify: bool,
    /// The last status write failed (full disk, unwritable dir): logged once per episode.
    status_write_failing: bool,
    /// `quiet_window`/`max_delay` from a reload, applied once the coalescer is idle.
    pending_windows: Option<(u64, u64)>,
    /// `texts_missing` was logged for the current stretch without texts.
    texts_missing_logged: bool,
    /// When the last frame came: kept as a time and formatted into `status.last_frame_at` only
    /// when the status is written, not on every frame.
    last_frame: Option<SystemTime>,
    /// The metrics registry (a no-op unless `listen.metrics_addr` is set).
    metrics: Arc<Metrics>,
}

/// Runs until SIGTERM/SIGINT. Returns the exit code (0).
pub async fn run(
    args: ConfigArgs,
    settings: Settings,
    key: SecretString,
    state: StateDir,
    scale: TimeScale,
) -> anyhow::Result<i32> {
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sighup = signal(SignalKind::hangup())?;
    let notify = std::env::var_os("NOTIFY_SOCKET").is_some();
    let watchdog = if notify {
        sd_notify::watchdog_enabled()
    } else {
        None
    };

    let now = SystemTime::now();
    let status = Status {
        state: "starting",
        since: time::rfc3339(now),
        socket: "connecting",
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
        texts: TextsStatus {
            source: "none",
            fetched_at: None,
        },
        counters: Counters::default(),
    };
    let (quiet_ms, max_delay_ms) = windows(&settings);
    let coalescer = Coalescer::new(quiet_ms, max_delay_ms);
    let metrics = Metrics::for_settings(
        &settings,
        scale.apply(STATUS_REFRESH).max(STATUS_REFRESH_MIN),
    );
    let mut d = Daemon {
        args,
        settings,
        key,
        scale,
        state,
        started: Instant::now(),
        status,
        flags: ListenerFlags {
            starting: true,
            unusable: None,
            unusable_binary: None,
            mismatch: None,
            stopping: false,
        },
        socket_state: SocketState::Connecting,
        texts: None,
        handle: None,
        pending_reasons: BTreeSet::new(),
        coalescer,
        notify,
        status_write_failing: false,
        pending_windows: None,
        texts_missing_logged: false,
        last_frame: None,
        metrics,
    };
    tracing::info!(
        event = %"listener_start",
        pid = std::process::id(),
        profile = %d.settings.profile,
        api_base = %d.settings.api_base,
        runtime = d.settings.listen.runtime.as_str(),
        state_dir = %d.state.root.display(),
        "listener starting"
    );
    d.write_status();
    d.refresh_texts().await;

    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    metrics::spawn_server(
        &d.metrics,
        d.settings.listen.metrics_addr,
        shutdown_rx.clone(),
    );
    let (params_tx, params_rx) = watch::channel(d.socket_params());
    let (ev_tx, mut ev_rx) = mpsc::channel::<SocketEvent>(256);
    let (texts_tx, mut texts_rx) = mpsc::channel::<Option<(Texts, &'static str)>>(4);
    let mut socket_task = tokio::spawn(socket::run(
        params_rx.clone(),
        ev_tx.clone(),
        shutdown_rx.clone(),
    ));
    d.flags.starting = false;
    if d.notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    }

    let mut cycle_task: Option<JoinHandle<CycleReport>> = None;
    let mut status_tick =
        tokio::time::interval(d.scale.apply(STATUS_REFRESH).max(STATUS_REFRESH_MIN));
    status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut texts_tick = tokio::time::interval(d.scale.apply(TEXTS_REFRESH));
    texts_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    texts_tick.reset();
    let mut key_tick = tokio::time::interval(KEY_CHECK);
    key_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut watchdog_tick = tokio::time::interval(
        watchdog
            .map(|w| (w / 2).max(Duration::from_millis(100)))
            .unwrap_or(Duration::from_secs(3600)),
    );

    loop {
        let due = if cycle_task.is_none() {
            d.coalescer.due()
        } else {
            None
        };
        let due_sleep = async {
            match due {
                Some(at) => {
                    let now = d.now_ms();
                    if at > now {
                        tokio::time::sleep(Duration::from_millis(at - now)).await;
                    }
                }
                None => std::future::pending::<()>().await,
            }
        };
        tokio::select! {
            _ = sigterm.recv() => { tracing::info!(event = %"stopping", signal = "SIGTERM", "stopping"); break; }
            _ = sigint.recv() => { tracing::info!(event = %"stopping", signal = "SIGINT", "stopping"); break; }
            _ = sighup.recv() => {
                d.reload(&params_tx);
                d.spawn_texts_refresh(&texts_tx);
            }
            Some(ev) = ev_rx.recv() => d.on_socket_event(ev),
            r = &mut socket_task => {
                // The socket task only ends on shutdown; anything else is a bug. Stay resident:
                // log it and start a new one.
                tracing::error!(event = %"socket_task_ended", error = ?r.err(), "the socket task ended unexpectedly; restarting it");
                socket_task = tokio::spawn(socket::run(params_rx.clone(), ev_tx.clone(), shutdown_rx.clone()));
            }
            _ = due_sleep => {
                let now = d.now_ms();
                if d.coalescer.try_start(now) {
                    cycle_task = Some(d.start_cycle(shutdown_rx.clone()));
                }
            }
            r = async { match cycle_task.as_mut() { Some(t) => t.await, None => std::future::pending().await } } => {
                cycle_task = None;
                let now = d.now_ms();
                d.coalescer.end(now);
                d.apply_pending_windows();
                match r {
                    Ok(report) => d.on_cycle_end(report),
                    Err(e) => tracing::error!(event = %"cycle_crashed", error = %e, "the cycle task ended abnormally"),
                }
            }
            _ = status_tick.tick() => d.write_status(),
            _ = key_tick.tick(), if d.socket_state == SocketState::KeyRefused => {
                d.check_key_file(&params_tx);
            }
            _ = texts_tick.tick() => d.spawn_texts_refresh(&texts_tx),
            Some(r) = texts_rx.recv() => d.on_texts(r),
            _ = watchdog_tick.tick(), if watchdog.is_some() => {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            }
        }
    }

    // Graceful stop: runs get their grace, the socket closes with 1000.
    d.flags.stopping = true;
    d.write_status();
    if d.notify {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    }
    let _ = shutdown_tx.send(true);
    let wait = d.settings.listen.kill_grace + STOP_SLACK;
    if let Some(mut t) = cycle_task.take() {
        match tokio::time::timeout(wait, &mut t).await {
            Ok(Ok(report)) => d.on_cycle_end(report),
            Ok(Err(_)) => {}
            Err(_) => {
                tracing::warn!(
                    event = %"cycle_abandoned",
                    "the cycle did not end within the grace; abandoning it"
                );
                t.abort();
            }
        }
    }
    drop(ev_tx);
    // Keep answering wakes so the socket task is never stuck waiting on us while it closes.
    let drain = async {
        while let Some(ev) = ev_rx.recv().await {
            if let SocketEvent::Wake { registered, .. } = ev {
                drop(registered);
            }
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        tokio::join!(socket_task, drain)
    })
    .await;
    d.write_status();
    tracing::info!(event = %"stopped", "listener stopped");
    Ok(0)
}

impl Daemon {
    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn socket_params(&self) -> SocketParams {
        SocketParams {
            api_base: self.settings.api_base.clone(),
            key: self.key.clone(),
            idle_timeout: self.settings.listen.idle_timeout,
            key_refused_retry: self.scale.apply(crate::core::reconnect::KEY_REFUSED_RETRY),
            metrics: self.metrics.clone(),
        }
    }

    fn api(&self) -> Option<Api> {
        match Api::new(&self.settings.api_base, self.key.clone()) {
            Ok(a) => Some(a),
            Err(e) => {
                tracing::error!(event = %"http_client_failed", error = %e, "cannot build the HTTP client");
                None
            }
        }
    }

    fn on_socket_event(&mut self, ev: SocketEvent) {
        let now = SystemTime::now();
        match ev {
            SocketEvent::Handle(h) => {
                tracing::info!(event = %"handle", handle = %h, "this key's agent");
                self.handle = Some(h.clone());
                self.status.handle = Some(format!("@{}", crate::core::handle::normalize(&h)));
                self.write_status();
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
                self.write_status();
            }
            SocketEvent::Connected => {
                self.status.counters.connects += 1;
                self.status.last_connected_at = Some(time::rfc3339(now));
            }
            SocketEvent::Frame => {
                self.status.counters.frames += 1;
                self.last_frame = Some(now);
            }
            SocketEvent::Skipped => {
                self.status.counters.frames_skipped += 1;
                self.metrics.frame_skipped();
            }
            SocketEvent::Acked => {
                self.status.counters.acks += 1;
                self.metrics.acked();
            }
            SocketEvent::Wake { cause, registered } => {
                self.metrics.wake(&cause);
                let label = cause.label();
                let t = self.now_ms();
                self.coalescer.wake(t);
                self.pending_reasons.insert(label);
                let _ = registered.send(());
                self.status.counters.wakes += 1;
                self.status.last_wake = Some(LastWake {
                    at: time::rfc3339(now),
                    reasons: self.pending_reasons.iter().cloned().collect(),
                });
                self.write_status();
            }
        }
    }

    fn start_cycle(&mut self, shutdown: watch::Receiver<bool>) -> JoinHandle<CycleReport> {
        let reasons: Vec<String> = std::mem::take(&mut self.pending_reasons)
            .into_iter()
            .collect();
        self.retry_a_changed_runtime_binary();
        let id = cycle::new_cycle_id();
        self.status.counters.cycles += 1;
        self.metrics.cycle_started();
        let input = self.api().map(|api| CycleInput {
            id: id.clone(),
            settings: self.settings.clone(),
            api,
            key: self.key.clone(),
            state: self.state.clone(),
            handle: self.handle.clone().unwrap_or_default(),
            texts: self.texts.clone(),
            reasons: reasons.clone(),
            runtime_unusable: self.flags.unusable.is_some(),
            invite_pace_ms: self.scale.invite_pace_ms(),
            shutdown,
            metrics: self.metrics.clone(),
        });
        self.status.last_cycle = Some(state_dir::LastCycle::started(id, reasons));
        self.write_status();
        tokio::spawn(async move {
            match input {
                Some(i) => cycle::run(i).await,
                None => CycleReport::default(),
            }
        })
    }

    fn on_cycle_end(&mut self, report: CycleReport) {
        self.metrics.cycle_ended(&report);
        if report.last.run_started {
            self.status.counters.runs += 1;
        }
        if report.run_failed {
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
                    you = %you,
                    handle = %self.handle.as_deref().unwrap_or("?"),
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
        if report.last.no_run_reason.as_deref() == Some("no_texts") && !self.texts_missing_logged {
            self.texts_missing_logged = true;
            tracing::error!(
                event = %"texts_missing",
                "no texts from the server and none cached; no runs until the server's texts can be read"
            );
        }
        if let Some(t) = report.fetched_texts {
            self.texts_missing_logged = false;
            self.texts = Some(t);
            self.status.texts = TextsStatus {
                source: "server",
                fetched_at: Some(time::rfc3339(SystemTime::now())),
            };
        }
        self.status.last_cycle = Some(report.last);
        self.write_status();
    }

    fn shown(&self) -> &'static str {
        shown_state(&self.flags, self.socket_state)
    }

    fn write_status(&mut self) {
        let now = SystemTime::now();
        let shown = self.shown();
        // `status.state` is the state last shown: a change restarts `since` and is announced.
        if shown != self.status.state {
            self.status.state = shown;
            self.status.since = time::rfc3339(now);
            tracing::info!(event = %"state", state = shown, "listener state");
            if self.notify {
                let line = format!("STATUS={shown}");
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Custom(&line)]);
            }
        }
        self.status.socket = self.socket_state.as_str();
        self.status.last_frame_at = self.last_frame.map(time::rfc3339);
        self.status.updated_at = time::rfc3339(now);
        self.metrics.observe_status(&self.status);
        match self.state.write_status(&self.status) {
            Ok(()) if self.status_write_failing => {
                self.status_write_failing = false;
                tracing::info!(event = %"status_write_recovered", "status.json is written again");
            }
            Ok(()) => {}
            Err(e) if !self.status_write_failing => {
                self.status_write_failing = true;
                tracing::warn!(event = %"status_write_failed", error = %e, "could not write status.json; the listener keeps working and logs this once until a write succeeds");
            }
            Err(_) => {}
        }
    }

    /// Fetches the texts; on failure keeps what is loaded or falls back to the cache.
    async fn refresh_texts(&mut self) {
        let Some(api) = self.api() else { return };
        let runtime = self.settings.listen.runtime.texts_runtime();
        let r = load_texts(&api, &self.state, runtime, self.texts.is_none()).await;
        self.on_texts(r);
    }

    /// The timer's and SIGHUP's refresh runs as a task, so a slow server never holds up wakes.
    fn spawn_texts_refresh(&self, tx: &mpsc::Sender<Option<(Texts, &'static str)>>) {
        let Some(api) = self.api() else { return };
        let runtime = self.settings.listen.runtime.texts_runtime();
        let state = self.state.clone();
        let use_cache = self.texts.is_none();
        let tx = tx.clone();
        tokio::spawn(async move {
            let r = load_texts(&api, &state, runtime, use_cache).await;
            let _ = tx.send(r).await;
        });
    }

    fn on_texts(&mut self, r: Option<(Texts, &'static str)>) {
        // Without texts loaded, `load_texts` has just logged `texts_missing` itself.
        self.texts_missing_logged = r.is_none() && self.texts.is_none();
        if let Some((texts, source)) = r {
            self.texts = Some(texts);
            self.status.texts = TextsStatus {
                source,
                fetched_at: Some(time::rfc3339(SystemTime::now())),
            };
        }
        self.write_status();
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
                    if windows(&s) != windows(&self.settings) {
                        self.pending_windows = Some(windows(&s));
                    }
                    self.key = k;
                    self.status.api_base = s.api_base.clone();
                    self.status.runtime = s.listen.runtime.as_str().to_string();
                    self.status.key_source = key_source_label(&s.key_source);
                    self.settings = s;
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
        self.write_status();
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
            self.key = k;
            let _ = params_tx.send(self.socket_params());
        }
    }
}

/// The one state `status.json` shows: stopping > starting > key_refused > runtime_unusable >
/// handle_mismatch > the socket's. A refused key comes first: nothing else can work without it.
fn shown_state(p: &ListenerFlags, socket: SocketState) -> &'static str {
    if p.stopping {
        "stopping"
    } else if p.starting {
        "starting"
    } else if socket == SocketState::KeyRefused {
        "key_refused"
    } else if p.unusable.is_some() {
        "runtime_unusable"
    } else if p.mismatch.is_some() {
        "handle_mismatch"
    } else {
        socket.as_str()
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
        }
    }

    #[test]
    fn shown_state_puts_stopping_then_key_then_profile_states_over_the_socket() {
        let mut p = flags();
        assert_eq!(shown_state(&p, SocketState::Backoff), "backoff");
        p.mismatch = Some("@x".into());
        assert_eq!(shown_state(&p, SocketState::Connected), "handle_mismatch");
        p.unusable = Some("no claude".into());
        assert_eq!(shown_state(&p, SocketState::Connected), "runtime_unusable");
        assert_eq!(shown_state(&p, SocketState::KeyRefused), "key_refused");
        p.stopping = true;
        assert_eq!(shown_state(&p, SocketState::KeyRefused), "stopping");
    }
}

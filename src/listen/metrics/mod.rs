//! The listener's metrics and health, for people who run many agents: a small registry fed by
//! one-line hooks at the listener's event points (the same points that bump `status.json`'s
//! `counters` or log an `event=`), and a loopback HTTP endpoint serving
//!
//! - `GET /metrics`: the Prometheus text exposition format (version 0.0.4);
//! - `GET /healthz`: 200 while the main loop turns; 503 with a one-line reason when its last turn
//!   is older than the bound (`core::status::quiet_allowance`: 120 s, two server heartbeats and
//!   slack, or until past the socket's next retry), or while it stops. The listener's
//!   runtime has one thread, so a loop blocked outright leaves the endpoint unanswered (a probe's
//!   timeout counts that as a failure too);
//! - `GET /readyz`: 200 only while the socket is up (the key was accepted) and a run can start;
//!   503 with the socket's state, or with why no run can start (`runtime_unusable`,
//!   `handle_mismatch`, no texts), otherwise.
//!
//! One process serves one endpoint: [`Registry`] holds every profile's `Metrics` (a single
//! listener's registry holds its one), and the endpoint renders them all on one page and puts
//! their probes together (`registry`).
//!
//! The endpoint is off unless `listen.metrics_addr` is set, and never shows the key, peers'
//! handles, message or invite ids, or text: every label value comes from a fixed list (an unknown
//! wake reason or frame type is `other`), except `profile`, which the operator chose.
//!
//! **Why hand-written, not `prometheus-client`.** The metric set is fixed and small, and the text
//! format is a few lines per type. `prometheus-client` 0.24 would add seven crates (`parking_lot`,
//! `lock_api`, `parking_lot_core`, `scopeguard`, `dtoa`, `cfg-if` and a derive proc-macro) and
//! about 70 KB to a stripped release binary (measured on a probe binary with the release
//! profile of this crate), it writes OpenMetrics rather than the Prometheus text format, and the
//! gauges computed at scrape time (seconds since the last frame, the state as a one-hot gauge)
//! would each need a custom collector. The page is checked with the reference parser (Python
//! `prometheus_client.parser`) in `tests/it/metrics.rs`.

mod defs;
mod probes;
mod queue;
mod registry;
mod render;
mod serve;

pub use probes::Probe;
pub use registry::{Registry, Verdict};
pub use serve::{Site, is_loopback, serve, serve_listener, serve_site, spawn_server};

use crate::core::engine::WakeCause;
use crate::core::reconnect::CloseKind;
use crate::core::status::{LastCycle, Status};
use defs::*;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// Label pairs of one series, besides `profile`.
type Labels = Vec<(&'static str, String)>;

#[derive(Debug, Clone)]
struct Histogram {
    bounds: &'static [f64],
    /// Non-cumulative counts per bound; the `+Inf` bucket is `count`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }
    fn observe(&mut self, v: f64) {
        if let Some(count) = self
            .bounds
            .iter()
            .zip(self.counts.iter_mut())
            .find_map(|(b, count)| (v <= *b).then_some(count))
        {
            *count += 1;
        }
        self.sum += v;
        self.count += 1;
    }
}

#[derive(Debug, Default)]
struct Inner {
    counters: BTreeMap<&'static str, BTreeMap<Labels, u64>>,
    /// Counters of floats (dollars).
    sums: BTreeMap<&'static str, BTreeMap<Labels, f64>>,
    histograms: BTreeMap<&'static str, BTreeMap<Labels, Histogram>>,
    /// `status.json`'s `state` and `socket` when it was last written.
    state: String,
    socket: String,
    /// When the main loop last turned.
    last_turn: Option<Instant>,
    /// When the socket tries again (`status.json`'s `next_retry_at`), while it waits to.
    next_retry: Option<SystemTime>,
    /// `status.json` says no texts are loaded (`texts.source` `none`): no run can start.
    no_texts: bool,
    /// `status.json`'s `held.reason`: why `[listen.policy]` holds runs now.
    held: Option<String>,
    last_frame: Option<Instant>,
    socket_up: bool,
    run_started: Option<Instant>,
    /// The first wake not yet served by a cycle, and the one the running cycle serves.
    first_pending_wake: Option<Instant>,
    cycle_wake: Option<Instant>,
}

impl Inner {
    fn add(&mut self, def: &Def, labels: Labels, n: u64) {
        *self
            .counters
            .entry(def.name)
            .or_default()
            .entry(labels)
            .or_default() += n;
    }
    fn observe(&mut self, def: &Def, bounds: &'static [f64], labels: Labels, v: f64) {
        self.histograms
            .entry(def.name)
            .or_default()
            .entry(labels)
            .or_insert_with(|| Histogram::new(bounds))
            .observe(v);
    }
}

/// One profile's registry, shared as an `Arc` by its main loop, socket task and cycles, and held
/// by the process's [`Registry`] for the endpoint; every hook is a short lock on one mutex, and
/// a no-op when metrics are off ([`Metrics::off`]).
#[derive(Debug)]
pub struct Metrics {
    enabled: bool,
    profile: String,
    started_at: SystemTime,
    inner: Mutex<Inner>,
    /// The profile's state dir, once its start holds it: where the page reads its status and
    /// history (`listen::page`).
    state_dir: std::sync::OnceLock<std::path::PathBuf>,
}

impl Metrics {
    /// A registry that records (metrics are on).
    pub fn new(profile: &str) -> Arc<Metrics> {
        let mut inner = Inner::default();
        // Series that exist from the start at 0, so `rate()` and `increase()` see their first
        // increment.
        for def in [
            &ACKS,
            &FRAMES_SKIPPED,
            &KEY_REFUSALS,
            &INVITES_COUNTED,
            &INVITES_DISMISSED,
        ] {
            inner.add(def, vec![], 0);
        }
        for o in CYCLE_OUTCOMES {
            inner.add(&CYCLES, vec![("outcome", o.to_string())], 0);
        }
        for r in NO_RUN_REASONS {
            inner.add(&NO_RUN, vec![("reason", r.to_string())], 0);
        }
        inner.add(
            &CONNECTS,
            vec![("result", "accepted".into()), ("kind", "none".into())],
            0,
        );
        Arc::new(Metrics {
            enabled: true,
            profile: profile.to_string(),
            started_at: SystemTime::now(),
            inner: Mutex::new(inner),
            state_dir: Default::default(),
        })
    }

    /// A registry that records nothing (`metrics_addr` unset, `--once`).
    pub fn off() -> Arc<Metrics> {
        Arc::new(Metrics {
            enabled: false,
            profile: String::new(),
            started_at: SystemTime::now(),
            inner: Mutex::new(Inner::default()),
            state_dir: Default::default(),
        })
    }

    /// The profile's state dir, for the page (set once its start holds it).
    pub fn set_state_dir(&self, dir: &std::path::Path) {
        let _ = self.state_dir.set(dir.to_path_buf());
    }

    pub fn state_dir(&self) -> Option<&std::path::Path> {
        self.state_dir.get().map(std::path::PathBuf::as_path)
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    fn lock(&self) -> Option<MutexGuard<'_, Inner>> {
        if !self.enabled {
            return None;
        }
        // A panic while holding the lock cannot leave the counters inconsistent enough to matter.
        Some(self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    // ---- hooks: the main loop ----

    /// The main loop turned (`/healthz`).
    pub fn turned(&self) {
        if let Some(mut i) = self.lock() {
            i.last_turn = Some(Instant::now());
        }
    }

    /// The status was written: the main loop turned. Keeps the state for the gauges and probes,
    /// and the socket's next retry for `/healthz`.
    pub fn observe_status(&self, status: &Status) {
        if !self.enabled {
            return;
        }
        let socket = status.socket.map_or("", |s| s.as_str());
        self.observe_state(status.state.as_str(), socket);
        let next_retry = status
            .next_retry_at
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok());
        if let Some(mut i) = self.lock() {
            i.next_retry = next_retry;
            i.no_texts = status.texts.source == crate::core::status::TextsSource::Missing;
            i.held = status.held.as_ref().map(|h| h.reason.clone());
        }
    }

    /// [`Metrics::observe_status`] with `status.json`'s `state` and `socket` words.
    pub fn observe_state(&self, state: &str, socket: &str) {
        if let Some(mut i) = self.lock() {
            i.last_turn = Some(Instant::now());
            i.state = state.to_string();
            i.socket = socket.to_string();
        }
    }

    /// A wake asked for by `frames` frames of one burst.
    pub fn wake(&self, cause: &WakeCause, frames: u64) {
        if let Some(mut i) = self.lock() {
            let label = cause.label();
            let reason = if WAKE_REASONS.contains(&label.as_str()) {
                label
            } else {
                "other".into()
            };
            i.add(&WAKES, vec![("reason", reason)], frames);
            i.first_pending_wake.get_or_insert_with(Instant::now);
        }
    }

    /// A read burst was handled: how many of its frames were skipped, how many acks were sent.
    pub fn burst(&self, skipped: u64, acked: u64) {
        if let Some(mut i) = self.lock() {
            i.add(&FRAMES_SKIPPED, vec![], skipped);
            i.add(&ACKS, vec![], acked);
        }
    }

    /// A cycle starts: it serves the wakes pending until now.
    pub fn cycle_started(&self) {
        if let Some(mut i) = self.lock() {
            i.cycle_wake = i.first_pending_wake.take();
        }
    }

    /// A cycle ended as `last` says; `key_refused`: its tray read met a refused key.
    pub fn cycle_ended(&self, last: &LastCycle, key_refused: bool) {
        let Some(mut i) = self.lock() else { return };
        let outcome = last.outcome.map_or("failed", |o| o.as_str());
        i.add(
            &CYCLES,
            vec![("outcome", known(outcome, CYCLE_OUTCOMES))],
            1,
        );
        if let Some(r) = last.no_run_reason.map(|r| r.as_str()) {
            i.add(&NO_RUN, vec![("reason", known(r, NO_RUN_REASONS))], 1);
        }
        i.add(&INVITES_DISMISSED, vec![], last.invites_dismissed);
        if key_refused {
            i.add(&KEY_REFUSALS, vec![], 1);
        }
        i.cycle_wake = None;
        i.run_started = None;
    }

    // ---- hooks: the socket task ----

    /// One inbound frame of this kind (`core::listener::socket`: a text frame's type, or
    /// `binary`, `close`, `oversized`, `other`).
    pub fn frame(&self, kind: &str) {
        let Some(mut i) = self.lock() else { return };
        i.add(&FRAMES, vec![("type", kind.to_string())], 1);
        i.last_frame = Some(Instant::now());
    }

    pub fn connect_accepted(&self) {
        if let Some(mut i) = self.lock() {
            i.add(
                &CONNECTS,
                vec![("result", "accepted".into()), ("kind", "none".into())],
                1,
            );
            i.socket_up = true;
        }
    }

    /// The socket is down (an attempt refused, or an established socket closed) with this kind.
    pub fn socket_down(&self, kind: &CloseKind) {
        let Some(mut i) = self.lock() else { return };
        let k = close_kind(kind).to_string();
        if std::mem::take(&mut i.socket_up) {
            i.add(&CLOSES, vec![("kind", k)], 1);
        } else {
            i.add(
                &CONNECTS,
                vec![("result", "refused".into()), ("kind", k)],
                1,
            );
        }
        if *kind == CloseKind::KeyRefused {
            i.add(&KEY_REFUSALS, vec![], 1);
        }
    }

    // ---- hooks: the cycle ----

    pub fn run_started(&self) {
        let Some(mut i) = self.lock() else { return };
        let now = Instant::now();
        i.run_started = Some(now);
        if let Some(w) = i.cycle_wake {
            let secs = now.duration_since(w).as_secs_f64();
            i.observe(&WAKE_TO_RUN, LATENCY_BUCKETS, vec![], secs);
        }
    }

    pub fn run_ended(
        &self,
        runtime: &str,
        outcome: &crate::runtime::RunOutcome,
        duration: Duration,
    ) {
        use crate::runtime::RunOutcome;
        let Some(mut i) = self.lock() else { return };
        let outcome = match outcome {
            RunOutcome::Completed => "completed",
            RunOutcome::Failed(_) => "failed",
            RunOutcome::Unusable(_) => "unusable",
        };
        i.run_started = None;
        let runtime = runtime.to_string();
        i.add(
            &RUNS,
            vec![
                ("runtime", runtime.clone()),
                ("outcome", known(outcome, RUN_OUTCOMES)),
            ],
            1,
        );
        i.observe(
            &RUN_DURATION,
            RUN_BUCKETS,
            vec![("runtime", runtime)],
            duration.as_secs_f64(),
        );
    }

    /// The run's own report of cost and tokens (`core::run_report`); what it did not report
    /// adds nothing.
    pub fn run_reported(&self, runtime: &str, report: &crate::core::run_report::RunReport) {
        let Some(mut i) = self.lock() else { return };
        let runtime = runtime.to_string();
        if let Some(cost) = report.cost_usd {
            *i.sums
                .entry(RUN_COST.name)
                .or_default()
                .entry(vec![("runtime", runtime.clone())])
                .or_default() += cost;
        }
        if let Some(u) = report.usage {
            for (kind, n) in [("input", u.input), ("output", u.output)] {
                i.add(
                    &RUN_TOKENS,
                    vec![("runtime", runtime.clone()), ("kind", kind.into())],
                    n,
                );
            }
        }
    }

    pub fn invite_counted(&self) {
        if let Some(mut i) = self.lock() {
            i.add(&INVITES_COUNTED, vec![], 1);
        }
    }
}

impl Metrics {
    /// The registry for these settings: recording when `listen.metrics_addr` is set, else
    /// [`Metrics::off`].
    pub fn for_settings(settings: &crate::config::Settings) -> Arc<Metrics> {
        match settings.listen.metrics_addr {
            Some(_) => Metrics::new(&settings.profile),
            None => Metrics::off(),
        }
    }
}

/// A frame's `type`, as a label from the fixed list: only the type is read, never the payload.
fn close_kind(kind: &CloseKind) -> &'static str {
    match kind {
        CloseKind::Ordinary => "ordinary",
        CloseKind::Budget { .. } => "connect_budget",
        CloseKind::KeyRefused => "key_refused",
        CloseKind::UpgradeRequired => "upgrade_required",
    }
}

/// `v` when it is one of `list`, else `other`: label values never come from the server unbounded.
fn known(v: &str, list: &[&str]) -> String {
    if list.contains(&v) {
        v.to_string()
    } else {
        "other".into()
    }
}

#[cfg(test)]
mod tests {
    /// The socket and the cycle record into the metrics; the metrics know neither (issue 20:
    /// no import circle between `listen::cycle`, `listen::metrics` and `listen::socket`).
    #[test]
    fn the_metrics_import_neither_the_socket_nor_the_cycle() {
        for (file, text) in [
            ("mod.rs", include_str!("mod.rs")),
            ("defs.rs", include_str!("defs.rs")),
            ("probes.rs", include_str!("probes.rs")),
            ("registry.rs", include_str!("registry.rs")),
            ("render.rs", include_str!("render.rs")),
            ("serve.rs", include_str!("serve.rs")),
        ] {
            let code = text.split("#[cfg(test)]").next().unwrap();
            for module in ["cycle", "socket", "daemon"] {
                for path in [format!("super::{module}"), format!("listen::{module}")] {
                    assert!(!code.contains(&path), "{file} names {path}");
                }
            }
        }
    }
}

/// The listener machine's metrics hooks (`core::listener::Observer`) are this registry's.
impl crate::core::listener::Observer for Metrics {
    fn turned(&self) {
        Metrics::turned(self)
    }
    fn observe_status(&self, status: &Status) {
        Metrics::observe_status(self, status)
    }
    fn wake(&self, cause: &WakeCause, frames: u64) {
        Metrics::wake(self, cause, frames)
    }
    fn burst(&self, skipped: u64, acked: u64) {
        Metrics::burst(self, skipped, acked)
    }
    fn frame(&self, kind: &str) {
        Metrics::frame(self, kind)
    }
    fn connect_accepted(&self) {
        Metrics::connect_accepted(self)
    }
    fn socket_down(&self, kind: &CloseKind) {
        Metrics::socket_down(self, kind)
    }
    fn cycle_started(&self) {
        Metrics::cycle_started(self)
    }
    fn cycle_ended(&self, last: &LastCycle, key_refused: bool) {
        Metrics::cycle_ended(self, last, key_refused)
    }
    fn invite_counted(&self) {
        Metrics::invite_counted(self)
    }
    fn run_reported(&self, runtime: &str, report: &crate::core::run_report::RunReport) {
        Metrics::run_reported(self, runtime, report)
    }
}

/// The run queue of `listen --all` as the host machine reports it (`core::host::HostObserver`).
#[derive(Debug)]
pub struct QueueObserver(pub Arc<Registry>);

impl crate::core::host::HostObserver for QueueObserver {
    fn queue(&self, running: usize, queued: usize) {
        self.0.queue.set(running, queued);
    }
    fn waited(&self, waited: Duration) {
        self.0.queue.waited(waited);
    }
}

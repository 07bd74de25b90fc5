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

use super::cycle::CycleReport;
use crate::core::engine::WakeCause;
use crate::core::reconnect::CloseKind;
use crate::core::status::{STALE_AFTER, Status, quiet_allowance};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime};

/// The states `agentchat_listener_state` always lists (one of them is 1), as `status.json` names
/// them.
const STATES: &[&str] = &[
    "starting",
    "connecting",
    "connected",
    "backoff",
    "key_refused",
    "runtime_unusable",
    "handle_mismatch",
    "stopping",
    "stopped",
];

/// Wake reasons kept as labels: the listener's own (`message`, `invite`, `connect`, and
/// `core::status::ListenerWake`'s) and the server's `wake` frame reasons of contract 3.4 and 3.5;
/// anything else is `other`.
const WAKE_REASONS: &[&str] = &[
    "message",
    "invite",
    "connect",
    "reminder",
    "unanswered",
    "messages",
    "test",
    crate::core::frames::WAKE_REASON_UNSPECIFIED,
    "recovered",
    "backlog",
];

/// Frame types of contract 3.4 kept as labels; an unknown one is `other`.
const FRAME_TYPES: &[&str] = &[
    "hello.ok",
    "message.new",
    "message.read",
    "presence.update",
    "typing.start",
    "typing.stop",
    "rate_limit.warning",
    "group.invite.received",
    "group.deleted",
    "wake",
    "heartbeat",
];

const RUN_OUTCOMES: &[&str] = &["completed", "failed", "unusable"];
const CYCLE_OUTCOMES: &[&str] = &["completed", "failed", "unusable", "no_run"];
const NO_RUN_REASONS: &[&str] = &[
    "nothing_waiting",
    "only_muted",
    "handle_mismatch",
    "tray_unreadable",
    "no_texts",
    "no_prompt",
    "runtime_unusable",
];

/// Run durations, in seconds: a run takes seconds to the 15 min default limit.
const RUN_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
];
/// From the first wake a cycle serves to its run's start: the coalescer's quiet window (3 s) to
/// its max delay (15 s), plus the tray read.
const LATENCY_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 300.0];

/// One metric of the page: its name, type and help line.
struct Def {
    name: &'static str,
    kind: &'static str,
    help: &'static str,
}

const WAKES: Def = Def {
    name: "agentchat_wakes_total",
    kind: "counter",
    help: "Wakes handed to the coalescer, by reason (message, invite, connect, the server's wake reasons; other).",
};
const ACKS: Def = Def {
    name: "agentchat_acks_total",
    kind: "counter",
    help: "Acks sent for message.new frames.",
};
const FRAMES: Def = Def {
    name: "agentchat_frames_total",
    kind: "counter",
    help: "Inbound socket frames, by type (contract frame types; other, malformed, oversized, binary, close, ping, pong).",
};
const FRAMES_SKIPPED: Def = Def {
    name: "agentchat_frames_skipped_total",
    kind: "counter",
    help: "Frames skipped unread: binary, over 1 MiB, or malformed.",
};
const CONNECTS: Def = Def {
    name: "agentchat_socket_connects_total",
    kind: "counter",
    help: "Socket connect attempts: result accepted (kind none), or refused with the kind of close or answer that refused it.",
};
const CLOSES: Def = Def {
    name: "agentchat_socket_closes_total",
    kind: "counter",
    help: "Ends of an established socket, by close kind (ordinary, connect_budget, key_refused, upgrade_required).",
};
const KEY_REFUSALS: Def = Def {
    name: "agentchat_key_refusals_total",
    kind: "counter",
    help: "Times the server refused the API key: on connect, by a close, or on a tray read.",
};
const CYCLES: Def = Def {
    name: "agentchat_cycles_total",
    kind: "counter",
    help: "Ended cycles, by outcome (completed, failed, unusable, no_run).",
};
const NO_RUN: Def = Def {
    name: "agentchat_no_run_cycles_total",
    kind: "counter",
    help: "Cycles that started no run, by reason.",
};
const RUNS: Def = Def {
    name: "agentchat_runs_total",
    kind: "counter",
    help: "Ended runs, by runtime and outcome (completed, failed, unusable).",
};
const INVITES_COUNTED: Def = Def {
    name: "agentchat_invites_counted_total",
    kind: "counter",
    help: "Invites a run left pending, counted by the single-run invite rule.",
};
const INVITES_DISMISSED: Def = Def {
    name: "agentchat_invites_dismissed_total",
    kind: "counter",
    help: "Invites dismissed by the single-run invite rule.",
};
const RUN_DURATION: Def = Def {
    name: "agentchat_run_duration_seconds",
    kind: "histogram",
    help: "How long runs took, by runtime.",
};
const WAKE_TO_RUN: Def = Def {
    name: "agentchat_wake_to_run_seconds",
    kind: "histogram",
    help: "From the first wake a cycle serves to the start of its run.",
};
const STATE: Def = Def {
    name: "agentchat_listener_state",
    kind: "gauge",
    help: "The listener's state as status.json shows it: 1 for the current state, 0 for the others.",
};
const READY: Def = Def {
    name: "agentchat_ready",
    kind: "gauge",
    help: "1 while the socket is up, the key accepted and a run can start (what /readyz answers 200 for).",
};
const RUN_IN_PROGRESS: Def = Def {
    name: "agentchat_run_in_progress",
    kind: "gauge",
    help: "1 while a run is in progress.",
};
const LAST_FRAME_AGE: Def = Def {
    name: "agentchat_last_frame_age_seconds",
    kind: "gauge",
    help: "Seconds since the last inbound frame (absent before the first).",
};
const LOOP_AGE: Def = Def {
    name: "agentchat_main_loop_last_turn_age_seconds",
    kind: "gauge",
    help: "Seconds since the main loop last turned (every frame turns it, the server's heartbeat every 45 s included).",
};
const START_TIME: Def = Def {
    name: "agentchat_start_time_seconds",
    kind: "gauge",
    help: "When the listener started, in seconds since the Unix epoch.",
};

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

/// The listener's registry. One per listener process, shared as an `Arc` by the main loop, the
/// socket task and the cycles; every hook is a short lock on one mutex, and a no-op when metrics
/// are off ([`Metrics::off`]).
#[derive(Debug)]
pub struct Metrics {
    enabled: bool,
    profile: String,
    started_at: SystemTime,
    inner: Mutex<Inner>,
}

/// An answer of the endpoint: status code and a one-line body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Probe {
    pub code: u16,
    pub line: String,
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
        })
    }

    /// A registry that records nothing (`metrics_addr` unset, `--once`).
    pub fn off() -> Arc<Metrics> {
        Arc::new(Metrics {
            enabled: false,
            profile: String::new(),
            started_at: SystemTime::now(),
            inner: Mutex::new(Inner::default()),
        })
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

    pub fn cycle_ended(&self, report: &CycleReport) {
        let Some(mut i) = self.lock() else { return };
        let last = &report.last;
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
        if report.key_refused {
            i.add(&KEY_REFUSALS, vec![], 1);
        }
        i.cycle_wake = None;
        i.run_started = None;
    }

    // ---- hooks: the socket task ----

    pub fn frame(&self, msg: &tokio_tungstenite::tungstenite::Message) {
        use tokio_tungstenite::tungstenite::Message;
        let Some(mut i) = self.lock() else { return };
        let kind = match msg {
            Message::Text(t) if t.len() > super::socket::MAX_FRAME_BYTES => "oversized",
            Message::Text(t) => frame_type(t.as_str()),
            Message::Binary(_) => "binary",
            Message::Close(_) => "close",
            Message::Ping(_) => "ping",
            Message::Pong(_) => "pong",
            Message::Frame(_) => "other",
        };
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

    pub fn invite_counted(&self) {
        if let Some(mut i) = self.lock() {
            i.add(&INVITES_COUNTED, vec![], 1);
        }
    }

    // ---- the endpoint's answers ----

    /// `/healthz`: 200 while the main loop turns as often as `core::status::quiet_allowance`
    /// (the rule `agentchat status` applies to the status file) asks.
    pub fn health(&self) -> Probe {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let age = i.last_turn.map(|t| t.elapsed());
        let bound = age
            .and_then(|a| SystemTime::now().checked_sub(a))
            .map_or(STALE_AFTER, |turned| quiet_allowance(turned, i.next_retry));
        match (i.state.as_str(), age) {
            ("stopping" | "stopped", _) => Probe {
                code: 503,
                line: format!("the listener is {}", i.state),
            },
            (_, Some(a)) if a > bound => Probe {
                code: 503,
                line: format!(
                    "wedged: the main loop last turned {} s ago (bound {} s)",
                    a.as_secs(),
                    bound.as_secs()
                ),
            },
            (_, None) => Probe {
                code: 503,
                line: "the main loop has not turned yet".into(),
            },
            (state, Some(_)) => Probe {
                code: 200,
                line: format!("ok: the main loop turns ({state})"),
            },
        }
    }

    /// `/readyz`: 200 only while the socket is up and the key accepted.
    pub fn readiness(&self) -> Probe {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        readiness(&i.state, &i.socket, i.no_texts)
    }

    /// The whole page in the Prometheus text format.
    pub fn render(&self) -> String {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::with_capacity(8 * 1024);
        let profile = escape(&self.profile);
        let series = |out: &mut String, name: &str, labels: &[(&str, String)], value: String| {
            let _ = write!(out, "{name}{{profile=\"{profile}\"");
            for (k, v) in labels {
                let _ = write!(out, ",{k}=\"{}\"", escape(v));
            }
            let _ = writeln!(out, "}} {value}");
        };
        let head = |out: &mut String, def: &Def| {
            let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
            let _ = writeln!(out, "# TYPE {} {}", def.name, def.kind);
        };
        for def in [
            &WAKES,
            &ACKS,
            &FRAMES,
            &FRAMES_SKIPPED,
            &CONNECTS,
            &CLOSES,
            &KEY_REFUSALS,
            &CYCLES,
            &NO_RUN,
            &RUNS,
            &INVITES_COUNTED,
            &INVITES_DISMISSED,
        ] {
            head(&mut out, def);
            for (labels, v) in i.counters.get(def.name).into_iter().flatten() {
                series(&mut out, def.name, labels, v.to_string());
            }
        }
        for def in [&RUN_DURATION, &WAKE_TO_RUN] {
            head(&mut out, def);
            for (labels, h) in i.histograms.get(def.name).into_iter().flatten() {
                let mut cumulative = 0;
                for (bound, n) in h.bounds.iter().zip(&h.counts) {
                    cumulative += n;
                    let mut l = labels.clone();
                    l.push(("le", format_f64(*bound)));
                    series(
                        &mut out,
                        &format!("{}_bucket", def.name),
                        &l,
                        cumulative.to_string(),
                    );
                }
                let mut l = labels.clone();
                l.push(("le", "+Inf".into()));
                series(
                    &mut out,
                    &format!("{}_bucket", def.name),
                    &l,
                    h.count.to_string(),
                );
                series(
                    &mut out,
                    &format!("{}_sum", def.name),
                    labels,
                    format_f64(h.sum),
                );
                series(
                    &mut out,
                    &format!("{}_count", def.name),
                    labels,
                    h.count.to_string(),
                );
            }
        }
        head(&mut out, &STATE);
        let mut states: Vec<&str> = STATES.to_vec();
        if !i.state.is_empty() && !states.contains(&i.state.as_str()) {
            states.push(&i.state);
        }
        for s in states {
            let v = u8::from(s == i.state);
            series(
                &mut out,
                STATE.name,
                &[("state", s.to_string())],
                v.to_string(),
            );
        }
        head(&mut out, &READY);
        let ready = u8::from(readiness(&i.state, &i.socket, i.no_texts).code == 200);
        series(&mut out, READY.name, &[], ready.to_string());
        head(&mut out, &RUN_IN_PROGRESS);
        let running = u8::from(i.run_started.is_some());
        series(&mut out, RUN_IN_PROGRESS.name, &[], running.to_string());
        head(&mut out, &LAST_FRAME_AGE);
        if let Some(t) = i.last_frame {
            series(
                &mut out,
                LAST_FRAME_AGE.name,
                &[],
                format_f64(secs3(t.elapsed())),
            );
        }
        head(&mut out, &LOOP_AGE);
        if let Some(t) = i.last_turn {
            series(&mut out, LOOP_AGE.name, &[], format_f64(secs3(t.elapsed())));
        }
        head(&mut out, &START_TIME);
        let start = self
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        series(&mut out, START_TIME.name, &[], format_f64(secs3(start)));
        out
    }
}

/// Ready means a wake can become a run: the socket is up and nothing stops a run from starting
/// (`runtime_unusable`, `handle_mismatch`, no texts).
fn readiness(state: &str, socket: &str, no_texts: bool) -> Probe {
    match (state, socket) {
        ("stopping" | "stopped", _) => Probe {
            code: 503,
            line: format!("not ready: the listener is {state}"),
        },
        ("runtime_unusable" | "handle_mismatch", _) => Probe {
            code: 503,
            line: format!("not ready: no run can start ({state})"),
        },
        (_, "connected") if no_texts => Probe {
            code: 503,
            line: "not ready: no run can start (no texts for the runtime)".into(),
        },
        (_, "connected") => Probe {
            code: 200,
            line: "ready: the socket is up and the key accepted".into(),
        },
        (_, "key_refused") => Probe {
            code: 503,
            line: "not ready: the server refused the API key".into(),
        },
        (_, "") => Probe {
            code: 503,
            line: "not ready: starting".into(),
        },
        (_, other) => Probe {
            code: 503,
            line: format!("not ready: the socket is {other}"),
        },
    }
}

/// A frame's `type`, as a label from the fixed list: only the type is read, never the payload.
fn frame_type(text: &str) -> &'static str {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_str::<Typed>(text) {
        Ok(Typed { kind: Some(k) }) => FRAME_TYPES
            .iter()
            .find(|t| **t == k)
            .copied()
            .unwrap_or("other"),
        _ => "malformed",
    }
}

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

fn secs3(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A sample value or `le` bound as Prometheus writes it (`1.0`, `0.5`, `+Inf`).
fn format_f64(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// A label value escaped for the text format: backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Whether `addr` may be served without `metrics_public = true`.
pub fn is_loopback(addr: &SocketAddr) -> bool {
    addr.ip().is_loopback()
}

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves the endpoint on `addr` until `shutdown` turns true. A bind that fails (the port is
/// taken) is logged and tried again every 10 s: the listener itself keeps working either way.
pub async fn serve(
    metrics: Arc<Metrics>,
    addr: SocketAddr,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let mut logged = false;
    let listener = loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => break l,
            Err(e) => {
                if !logged {
                    tracing::error!(event = %"metrics_bind_failed", addr = %addr, error = %e, "cannot serve metrics on this address; trying again every 10 s");
                    logged = true;
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_secs(10)) => {}
                    _ = shutdown.wait_for(|s| *s) => return,
                }
            }
        }
    };
    serve_listener(metrics, listener, shutdown).await
}

/// Serves the endpoint on a bound socket until `shutdown` turns true.
pub async fn serve_listener(
    metrics: Arc<Metrics>,
    listener: tokio::net::TcpListener,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if let Ok(local) = listener.local_addr() {
        tracing::info!(event = %"metrics_serving", addr = %local, "serving /metrics, /healthz and /readyz");
    }
    loop {
        let (stream, _) = tokio::select! {
            r = listener.accept() => match r {
                Ok(c) => c,
                Err(_) => continue,
            },
            _ = shutdown.wait_for(|s| *s) => return,
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| {
                let m = m.clone();
                async move { Ok::<_, std::convert::Infallible>(answer(&m, &req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                .await;
        });
    }
}

type Body = http_body_util::Full<hyper::body::Bytes>;

fn answer<B>(m: &Metrics, req: &hyper::Request<B>) -> hyper::Response<Body> {
    let reply = |code: u16, ctype: &str, body: String| {
        hyper::Response::builder()
            .status(code)
            .header("content-type", ctype)
            .header("cache-control", "no-store")
            .body(Body::from(body))
            .unwrap_or_default()
    };
    if req.method() != hyper::Method::GET && req.method() != hyper::Method::HEAD {
        return reply(405, "text/plain", "only GET\n".into());
    }
    match req.uri().path() {
        "/metrics" => reply(200, TEXT_FORMAT, m.render()),
        "/healthz" => {
            let p = m.health();
            reply(p.code, "text/plain", format!("{}\n", p.line))
        }
        "/readyz" => {
            let p = m.readiness();
            reply(p.code, "text/plain", format!("{}\n", p.line))
        }
        _ => reply(
            404,
            "text/plain",
            "not found: GET /metrics, /healthz or /readyz\n".into(),
        ),
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

/// Starts [`serve`] as a task when there is an address (`listen.metrics_addr`). The address is
/// read once at start: a reload (SIGHUP) does not move the endpoint.
pub fn spawn_server(
    metrics: &Arc<Metrics>,
    addr: Option<SocketAddr>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    if let Some(addr) = addr {
        tokio::spawn(serve(metrics.clone(), addr, shutdown));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample<'a>(page: &'a str, series: &str) -> Option<&'a str> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn the_page_moves_with_the_hooks_and_keeps_label_values_on_fixed_lists() {
        let m = Metrics::new("work");
        m.wake(&WakeCause::Message, 1);
        m.wake(&WakeCause::Wake("reminder".into()), 1);
        m.wake(&WakeCause::Wake("something_new".into()), 1);
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            r#"{"type":"message.new","payload":{"id":"msg_secret","content":"hello"}}"#.into(),
        ));
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            r#"{"type":"made.up","payload":{}}"#.into(),
        ));
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            "not json".into(),
        ));
        m.burst(0, 1);
        m.connect_accepted();
        m.socket_down(&CloseKind::KeyRefused);
        m.socket_down(&CloseKind::Budget { retry_after_s: 5 });
        m.cycle_started();
        m.run_started();
        m.run_ended(
            "script",
            &crate::runtime::RunOutcome::Completed,
            Duration::from_millis(2500),
        );
        let page = m.render();
        for (series, value) in [
            (
                r#"agentchat_wakes_total{profile="work",reason="message"}"#,
                "1",
            ),
            (
                r#"agentchat_wakes_total{profile="work",reason="reminder"}"#,
                "1",
            ),
            (
                r#"agentchat_wakes_total{profile="work",reason="other"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="message.new"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="other"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="malformed"}"#,
                "1",
            ),
            (r#"agentchat_acks_total{profile="work"}"#, "1"),
            (
                r#"agentchat_socket_connects_total{profile="work",result="accepted",kind="none"}"#,
                "1",
            ),
            (
                r#"agentchat_socket_closes_total{profile="work",kind="key_refused"}"#,
                "1",
            ),
            (
                r#"agentchat_socket_connects_total{profile="work",result="refused",kind="connect_budget"}"#,
                "1",
            ),
            (r#"agentchat_key_refusals_total{profile="work"}"#, "1"),
            (
                r#"agentchat_runs_total{profile="work",runtime="script",outcome="completed"}"#,
                "1",
            ),
            (
                r#"agentchat_run_duration_seconds_bucket{profile="work",runtime="script",le="1.0"}"#,
                "0",
            ),
            (
                r#"agentchat_run_duration_seconds_bucket{profile="work",runtime="script",le="5.0"}"#,
                "1",
            ),
            (
                r#"agentchat_run_duration_seconds_sum{profile="work",runtime="script"}"#,
                "2.5",
            ),
            (
                r#"agentchat_wake_to_run_seconds_count{profile="work"}"#,
                "1",
            ),
            (r#"agentchat_run_in_progress{profile="work"}"#, "0"),
        ] {
            assert_eq!(sample(&page, series), Some(value), "{series} in\n{page}");
        }
        assert!(
            !page.contains("msg_secret") && !page.contains("hello"),
            "{page}"
        );
        assert!(
            !page.contains("something_new") && !page.contains("made.up"),
            "{page}"
        );
    }

    #[test]
    fn an_off_registry_records_nothing() {
        let m = Metrics::off();
        m.wake(&WakeCause::Message, 1);
        m.burst(0, 1);
        let page = m.render();
        assert!(
            !page.contains("agentchat_wakes_total{") && !page.contains("agentchat_acks_total{"),
            "{page}"
        );
    }

    #[test]
    fn health_is_ok_while_the_loop_turns_and_names_the_wedge_or_the_stop() {
        let m = Metrics::new("default");
        assert_eq!(m.health().code, 503, "before the first turn");
        m.observe_state("connected", "connected");
        assert_eq!(m.health().code, 200);
        m.inner.lock().unwrap().last_turn = Some(Instant::now() - Duration::from_secs(121));
        let p = m.health();
        assert_eq!(p.code, 503);
        assert!(
            p.line
                .starts_with("wedged: the main loop last turned 121 s ago (bound 120 s)"),
            "{}",
            p.line
        );
        // Waiting out a reconnect delay: quiet until past the retry is no wedge.
        m.inner.lock().unwrap().next_retry = Some(SystemTime::now() + Duration::from_secs(600));
        assert_eq!(m.health().code, 200);
        m.turned();
        m.inner.lock().unwrap().next_retry = None;
        assert_eq!(m.health().code, 200);
        m.observe_state("stopping", "connected");
        assert_eq!(
            m.health(),
            Probe {
                code: 503,
                line: "the listener is stopping".into()
            }
        );
    }

    #[test]
    fn ready_only_with_the_socket_up() {
        let m = Metrics::new("default");
        assert_eq!(m.readiness().code, 503);
        for (state, socket, code) in [
            ("connected", "connected", 200),
            ("runtime_unusable", "connected", 503),
            ("handle_mismatch", "connected", 503),
            ("key_refused", "key_refused", 503),
            ("backoff", "backoff", 503),
            ("connecting", "connecting", 503),
            ("stopping", "connected", 503),
        ] {
            m.observe_state(state, socket);
            assert_eq!(m.readiness().code, code, "{state}/{socket}");
            let ready = if code == 200 { "1" } else { "0" };
            assert_eq!(
                sample(&m.render(), r#"agentchat_ready{profile="default"}"#),
                Some(ready)
            );
        }
        assert_eq!(m.readiness().line, "not ready: the listener is stopping");
    }

    /// Over real HTTP: a wedged loop answers 503 with its reason on one line.
    #[tokio::test]
    async fn the_endpoint_answers_each_path_over_http() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let m = Metrics::new("default");
        m.observe_state("connected", "connected");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        tokio::spawn(serve_listener(m.clone(), listener, stop_rx));
        let get = |path: &'static str| async move {
            let mut c = tokio::net::TcpStream::connect(addr).await.unwrap();
            let req = format!("GET {path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
            c.write_all(req.as_bytes()).await.unwrap();
            let mut out = String::new();
            c.read_to_string(&mut out).await.unwrap();
            out
        };
        assert!(get("/healthz").await.starts_with("HTTP/1.1 200"));
        assert!(get("/readyz").await.starts_with("HTTP/1.1 200"));
        let page = get("/metrics").await;
        assert!(
            page.contains("content-type: text/plain; version=0.0.4"),
            "{page}"
        );
        assert!(page.contains("# TYPE agentchat_wakes_total counter"));
        assert!(get("/nope").await.starts_with("HTTP/1.1 404"));
        m.inner.lock().unwrap().last_turn = Some(Instant::now() - Duration::from_secs(150));
        let wedged = get("/healthz").await;
        assert!(wedged.starts_with("HTTP/1.1 503"), "{wedged}");
        assert!(
            wedged
                .trim_end()
                .ends_with("wedged: the main loop last turned 150 s ago (bound 120 s)"),
            "{wedged}"
        );
    }
}

//! One profile's listener as a state machine (contract 3.4 and 4): a plain value fed [`Input`]s
//! and the time, returning [`Effect`]s and its next deadline. No I/O, no clock, no tokio: the
//! driver (`listen::driver` in the binary) performs each effect and feeds its result back, and
//! the simulator (`scripts/simulate`) does the same against a model of the server on a virtual
//! clock, so every run of the daemon can be replayed from its seed.
//!
//! Each concern is a part that owns its state: the socket ([`socket`]), the cycle ([`cycle`]),
//! the run policy ([`policy`]), the wakes (`crate::wakes`), the runtime's health and the texts
//! (`health`), and `status.json` (`status_file`). The listener routes inputs to them and acts on
//! what they say.
//!
//! An idle listener asks for nothing of its own: no deadline but the socket's clock look and the
//! daily texts refresh. The server's heartbeat (every 45 s, contract 3.4) still comes in as a
//! burst, and such a step touches `status.json` at most every [`TOUCH_EVERY`], so `agentchat
//! status` can tell a stuck loop (`crate::status::quiet_allowance`).

pub mod config;
pub mod cycle;
mod cycles;
mod frames_log;
mod health;
pub mod io;
mod lifecycle;
pub mod mutes;
mod parts;
pub mod policy;
pub mod reach;
pub mod record;
pub mod socket;
mod status_file;

pub use config::{ListenerConfig, Timing};
pub use io::*;
use parts::{Cycles, Flags, Kept, Life, Outbox, Runtime, Shown, SocketView, Stopping, Waits};

use crate::engine::WakeCause;
use crate::invite_rule::InviteMemory;
use crate::policy::Ledger;
use crate::recheck::Recheck;
use crate::rng::Rng;
use crate::run_report::RunReport;
use crate::runtime_health::RuntimeHealth;
use crate::status::{Counters, LastCycle, ListenerWake, SocketState, Status};
use crate::time::Now;
use crate::wakes::{Wakes, Windows};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

/// A step touches `status.json` (its modification time, not its content) when it was last
/// written or touched this long ago or more: well under the server's 45 s heartbeat, so every
/// heartbeat that finds the file unchanged touches it.
pub const TOUCH_EVERY: Duration = Duration::from_secs(30);
/// However far a test scales time, the status file is not touched more often.
const TOUCH_EVERY_MIN: Duration = Duration::from_millis(250);
/// While the key is refused, how often the key is read again to notice a new one.
const KEY_CHECK: Duration = Duration::from_secs(2);
/// The texts are fetched again this often (contract 3.6: daily).
pub(crate) const TEXTS_REFRESH: Duration = Duration::from_secs(24 * 3600);
/// Beyond the run's own grace, how long a stopping listener waits for a cycle to wind down.
pub(crate) const STOP_SLACK: Duration = Duration::from_secs(5);

/// What the listener's metrics hear. The binary's registry implements it; every method does
/// nothing by default, so a test or the simulator passes [`Unobserved`].
pub trait Observer: Send + Sync + std::fmt::Debug {
    fn turned(&self) {}
    fn observe_status(&self, _status: &Status) {}
    fn wake(&self, _cause: &WakeCause, _frames: u64) {}
    fn burst(&self, _skipped: u64, _acked: u64) {}
    fn frame(&self, _kind: &str) {}
    fn connect_accepted(&self) {}
    fn socket_down(&self, _kind: &crate::reconnect::CloseKind) {}
    fn cycle_started(&self) {}
    fn cycle_ended(&self, _last: &LastCycle, _key_refused: bool) {}
    fn invite_counted(&self) {}
    fn run_reported(&self, _runtime: &str, _report: &RunReport) {}
}

/// An observer that hears nothing.
#[derive(Debug, Default)]
pub struct Unobserved;
impl Observer for Unobserved {}

/// What a part's step produced: effects for the driver, notes for the listener, and the
/// listener's random source for the part's draws.
pub struct Out<'a, N> {
    effects: &'a mut VecDeque<Effect>,
    notes: Vec<N>,
    pub rng: &'a mut Rng,
}

impl<'a, N> Out<'a, N> {
    pub fn new(effects: &'a mut VecDeque<Effect>, rng: &'a mut Rng) -> Out<'a, N> {
        Out {
            effects,
            notes: Vec::new(),
            rng,
        }
    }

    pub fn effect(&mut self, e: Effect) {
        self.effects.push_back(e);
    }

    pub fn note(&mut self, n: N) {
        self.notes.push(n);
    }
}

/// What the listener starts with, besides its settings: what the state dir kept.
#[derive(Debug, Default)]
pub struct Restored {
    pub ledger: Ledger,
    pub invites: InviteMemory,
}

/// One profile's listener: each part owns its state (the listener routes inputs to them and acts
/// on what they say).
#[derive(Debug)]
pub struct Listener {
    cfg: ListenerConfig,
    timing: Timing,
    /// What it asks of the world, and its seeded draws.
    out: Outbox,
    obs: Arc<dyn Observer>,
    /// Its start and its stop.
    life: Life,
    socket: socket::Socket,
    /// What `status.json` shows beyond the parts' own.
    shown: Shown,
    wakes: Wakes,
    texts: health::TextsInUse,
    rt: Runtime,
    status: status_file::StatusFile,
    policy: policy::RunPolicy,
    /// The hold whose history record is open.
    holds: record::Holds,
    /// What earlier cycles taught it (the invite rule's memory, mutes).
    kept: Kept,
    /// The waits of its own: a `429`'s, a removed route's, a refused key's, the texts' day.
    waits: Waits,
    cycles: Cycles,
}

impl Listener {
    /// A listener for `cfg`, starting at `now`: its first effects (the status, the runtime's
    /// presence, the texts) are queued.
    pub fn new(
        cfg: ListenerConfig,
        restored: Restored,
        seed: u64,
        obs: Arc<dyn Observer>,
        now: Now,
    ) -> Listener {
        let timing = Timing::new(cfg.scale);
        let windows = windows(&cfg);
        let policy = policy::RunPolicy::new(
            cfg.policy.clone(),
            cfg.zone.clone(),
            restored.ledger,
            now.wall_ms,
        );
        let mut l = Listener {
            timing,
            out: Outbox {
                effects: VecDeque::new(),
                rng: Rng::new(seed),
                seed,
            },
            obs,
            life: Life {
                started_wall: now.wall_ms,
                starting: 2,
                stopping: None,
                socket_stopping: false,
                socket_dropped: false,
                end: ListenerEnd::Stopped,
                ended: false,
            },
            socket: socket::Socket::new(now),
            shown: Shown {
                flags: Flags::default(),
                view: SocketView {
                    state: SocketState::Connecting,
                    detail: None,
                    next_retry_at: None,
                    last_connected: None,
                    last_frame: None,
                },
                handle: None,
                pending_handle: None,
                counters: Counters::default(),
                last_cycle: None,
                capabilities_refused: Vec::new(),
                unknown_version_said: false,
            },
            wakes: Wakes::new(windows),
            texts: health::TextsInUse::default(),
            rt: Runtime {
                health: RuntimeHealth::default(),
                checking: false,
                stamp: None,
            },
            status: status_file::StatusFile::new(cfg.notify_status, now),
            policy,
            holds: record::Holds::default(),
            kept: Kept {
                invites: restored.invites,
                mutes: mutes::Mutes::default(),
                heard: Default::default(),
            },
            waits: Waits {
                tray_not_before: Recheck::default(),
                not_before_wall: None,
                removed_recheck: Recheck::default(),
                key_check_at: None,
                texts_refresh_at: now.after(timing.of(TEXTS_REFRESH)),
            },
            cycles: Cycles::default(),
            cfg,
        };
        l.announce_start(now);
        l
    }

    /// The next effect to perform, in the order they were asked for.
    pub fn poll_effect(&mut self) -> Option<Effect> {
        self.out.effects.pop_front()
    }

    /// Whether the listener has ended (its [`Effect::Ended`] was given).
    pub fn is_ended(&self) -> bool {
        self.life.ended
    }

    /// The settings in use.
    pub fn config(&self) -> &ListenerConfig {
        &self.cfg
    }

    /// Today's runs and spending by its policy's ledger (the host's budget sums them).
    pub fn spent_today(&self, now_wall: i64) -> crate::policy::Totals {
        self.policy.today(now_wall)
    }

    /// The next midnight of its policy's zone.
    pub fn tomorrow(&self, now_wall: i64) -> i64 {
        self.policy.tomorrow(now_wall)
    }

    /// The bare handle of this key's agent, once known.
    pub fn agent_handle(&self) -> Option<&str> {
        self.shown.handle.as_deref()
    }

    /// Whether a cycle is under way.
    pub fn cycle_running(&self) -> bool {
        self.cycles.cycle.is_some() || self.cycles.stamping.is_some()
    }

    /// The status document as it would be written now.
    pub fn status(&mut self, now: Now) -> Status {
        self.render(now)
    }

    /// The next time the listener must be stepped ([`Listener::tick`]), monotonic ms.
    pub fn next_deadline(&self) -> Option<u64> {
        self.each_deadline()
            .into_iter()
            .filter_map(|(_, at)| at)
            .min()
    }

    /// Each deadline set, by what it is for: the simulator names the one a busy loop is stuck
    /// on (`deadlines_advance`).
    pub fn deadlines(&self) -> Vec<(&'static str, u64)> {
        self.each_deadline()
            .into_iter()
            .filter_map(|(name, at)| Some((name, at?)))
            .collect()
    }

    /// Every deadline the listener keeps, set or not: the host asks for the earliest after
    /// each step of each profile, so this allocates nothing.
    fn each_deadline(&self) -> [(&'static str, Option<u64>); 12] {
        // No cycle starts while one runs, a 429's wait lasts, or the listener stops
        // (`start_due_cycle`): a wake owed then is no deadline.
        let due = if self.cycle_running()
            || self.waits.tray_not_before.at().is_some()
            || self.life.stopping.is_some()
        {
            None
        } else {
            self.wakes.due()
        };
        let key = self
            .waits
            .key_check_at
            .filter(|_| self.shown.view.state == SocketState::KeyRefused);
        let runtime = self.rt.health.recheck_at().filter(|_| !self.rt.checking);
        [
            ("cycle_due", due),
            ("socket", self.socket.deadline()),
            (
                "cycle",
                self.cycles.cycle.as_ref().and_then(cycle::Cycle::deadline),
            ),
            ("key_check", key),
            ("texts_refresh", Some(self.waits.texts_refresh_at)),
            ("runtime_recheck", runtime),
            ("status", self.status.deadline()),
            ("tray_not_before", self.waits.tray_not_before.at()),
            ("removed_recheck", self.waits.removed_recheck.at()),
            ("texts_recheck", self.texts.recheck_at()),
            ("policy", self.policy.wake_at()),
            ("stopping", self.life.stopping.map(|s| s.deadline)),
        ]
    }

    /// Time passed (a deadline came, or the host's watchdog probes the loop).
    pub fn tick(&mut self, now: Now) {
        if self.life.ended {
            return;
        }
        self.on_time(now);
        self.after_step(now);
    }

    /// One input at `now`.
    pub fn handle(&mut self, now: Now, input: Input) {
        if self.life.ended {
            return;
        }
        match input {
            Input::Stop {
                now: at_once,
                cause,
            } => self.stop(now, at_once, cause),
            Input::Reload {
                config,
                endpoint_changed,
            } => self.reload(now, config, endpoint_changed),
            Input::Recheck => self.recheck_now(now),
            Input::KeyChanged => self.key_changed(now),
            Input::Me { req, result } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_me(now, req, result, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::Paced => {
                let mut out = self.out.out();
                self.socket.on_paced(&mut out);
            }
            Input::Dialed { conn, result } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_dialed(now, conn, result, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::Burst { conn, frames, lost } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_burst(now, conn, frames, lost, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::AcksSent { conn, result } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_acks_sent(now, conn, result, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::ConnLost { conn, lost } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_lost(now, conn, lost, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::Closed { conn } => {
                let mut out = self.out.out();
                let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
                self.socket.on_closed(now, conn, &p, &mut out);
                let notes = out.notes;
                self.socket_notes(now, notes);
            }
            Input::AgentLock { taken, holder } => self.on_agent_lock(now, taken, holder),
            Input::Tray { cycle, result } => {
                self.with_cycle(now, cycle, |c, ctx, out| c.on_tray(ctx, result, out))
            }
            Input::Texts { req, result } => self.on_texts_answer(now, req, result),
            Input::Slot { cycle, slot } => {
                if self.cycles.cycle.as_ref().is_some_and(|c| c.seq == cycle) {
                    self.with_cycle(now, cycle, |c, ctx, out| c.on_slot(ctx, slot, out));
                } else if let Slot::Granted { .. } = slot {
                    self.out.effects.push_back(Effect::ReleaseSlot);
                }
            }
            Input::RunStarted { cycle, log } => {
                self.with_cycle(now, cycle, |c, _, out| c.on_run_started(log, out))
            }
            Input::RunEnded { cycle, end } => {
                if end.binary.is_some() {
                    self.rt.stamp = end.binary;
                }
                let stopping = self.life.stopping.is_some();
                self.with_cycle(now, cycle, |c, ctx, out| {
                    c.on_run_ended(ctx, end, stopping, out)
                });
            }
            Input::Dismissed {
                cycle,
                invite_id,
                result,
            } => self.with_cycle(now, cycle, |c, ctx, out| {
                c.on_dismissed(ctx, &invite_id, result, out)
            }),
            Input::RuntimeBinary { cycle, stamp } => self.on_runtime_binary(now, cycle, stamp),
            Input::RuntimeChecked { result, binary } => {
                self.rt.stamp = binary;
                self.on_runtime_checked(now, result)
            }
            Input::StatusWritten { result } => {
                self.status.written(result, now, self.timing);
            }
            Input::StatusTouched { ok } => {
                if !ok {
                    self.write_status(now);
                }
            }
        }
        self.after_step(now);
    }

    /// After every step: what changed is written (unless a cycle is on its way to its run),
    /// the file is touched when due, and a cycle due now starts.
    fn after_step(&mut self, now: Now) {
        if self.life.ended {
            return;
        }
        self.start_due_cycle(now);
        self.stop_progress(now);
        if self.life.ended {
            return;
        }
        if self.status.due(now) {
            self.write_status(now);
        }
        self.obs.turned();
        let every = self.timing.at_least(TOUCH_EVERY, TOUCH_EVERY_MIN);
        if self.status.touch_due(now, every) {
            self.out.effects.push_back(Effect::TouchStatus);
        }
    }

    /// Every deadline that came.
    fn on_time(&mut self, now: Now) {
        {
            let mut out = self.out.out();
            let p = socket_params(&self.cfg, self.timing, self.obs.as_ref());
            self.socket.on_time(now, &p, &mut out);
            let notes = out.notes;
            self.socket_notes(now, notes);
        }
        if let Some(seq) = self.cycles.cycle.as_ref().map(|c| c.seq) {
            self.with_cycle(now, seq, |c, _, out| c.on_time(now, out));
        }
        if let Some(s) = self.life.stopping
            && s.deadline <= now.mono_ms
        {
            self.abandon_cycle(now);
        }
        if self.shown.view.state == SocketState::KeyRefused
            && self.waits.key_check_at.is_some_and(|t| t <= now.mono_ms)
        {
            self.waits.key_check_at = Some(now.after(KEY_CHECK));
            self.out.effects.push_back(Effect::ReadKey);
        }
        if self.waits.texts_refresh_at <= now.mono_ms {
            self.waits.texts_refresh_at = now.after(self.timing.of(TEXTS_REFRESH));
            self.refresh_texts();
        }
        if !self.rt.checking
            && self
                .rt
                .health
                .recheck_at()
                .is_some_and(|t| t <= now.mono_ms)
            && self.rt.health.begin_check()
        {
            self.rt.checking = true;
            self.out.effects.push_back(Effect::CheckRuntime {
                presence_only: false,
            });
        }
        if self.status.retry_due(now) {
            self.write_status(now);
        }
        self.status.hold_over(now);
        if self
            .waits
            .tray_not_before
            .at()
            .is_some_and(|t| t <= now.mono_ms)
        {
            self.waits.tray_not_before.reset();
            self.waits.not_before_wall = None;
            self.status.changed();
            self.own_wake(ListenerWake::Recovered, now);
        }
        if self
            .waits
            .removed_recheck
            .at()
            .is_some_and(|t| t <= now.mono_ms)
        {
            self.waits.removed_recheck.clear();
            if self.shown.flags.removed.is_some() {
                self.own_wake(ListenerWake::Recovered, now);
            }
        }
        if self.texts.recheck_at().is_some_and(|t| t <= now.mono_ms) {
            self.texts.fetching();
            self.refresh_texts();
        }
        if self.policy.wake_at().is_some_and(|t| t <= now.mono_ms) {
            let held = self.policy.holding();
            let wake = self.policy.wake_due(now.mono_ms, now.wall_ms);
            if held
                && !self.policy.holding()
                && let Some(line) = self.holds.ended(now.wall_ms)
            {
                self.out.effects.push_back(Effect::Record(Box::new(line)));
            }
            if wake {
                self.own_wake(ListenerWake::HoldEnded, now);
            }
        }
    }

    /// `frames` wakes of one cause: counted in the metrics, owed a cycle, shown.
    fn record(&mut self, cause: &WakeCause, frames: u64, now: Now) {
        if !matches!(cause, WakeCause::Listener(_)) {
            self.wake_parked_runtime(now);
        }
        self.obs.wake(cause, frames);
        self.wakes
            .record(cause, frames, now.mono_ms, now.wall_u64());
        self.status.changed();
    }

    /// A wake the listener gives itself.
    fn own_wake(&mut self, why: ListenerWake, now: Now) {
        self.record(&WakeCause::Listener(why), 1, now);
    }
}

/// The socket's view of the settings.
fn socket_params<'a>(
    cfg: &'a ListenerConfig,
    timing: Timing,
    obs: &'a dyn Observer,
) -> socket::Params<'a> {
    socket::Params {
        api_base: &cfg.api_base,
        idle_timeout: cfg.idle_timeout,
        timing,
        obs,
    }
}

/// The coalescer's windows of these settings.
fn windows(cfg: &ListenerConfig) -> Windows {
    Windows {
        quiet_ms: crate::time::ms(cfg.quiet_window),
        max_delay_ms: crate::time::ms(cfg.max_delay),
    }
}

/// The ws(s) URL for an API base: `http` -> `ws`, `https` -> `wss`, plus `/v1/ws`.
pub fn ws_url(api_base: &str) -> String {
    let base = api_base.trim_end_matches('/');
    let rest = if let Some(r) = base.strip_prefix("https://") {
        format!("wss://{r}")
    } else if let Some(r) = base.strip_prefix("http://") {
        format!("ws://{r}")
    } else {
        base.to_string()
    };
    format!("{rest}/v1/ws")
}

#[cfg(test)]
mod tests;

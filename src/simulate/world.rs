//! The world around the machine: true time and the listener's two clocks (a suspend stops the
//! monotonic one, an NTP step moves the wall one), the queue of everything due (answers on their
//! way, the server's timers, the runtime, the scenario's acts), and the loop that takes the
//! earliest of that queue and the host's own deadline, one step at a time, with the invariants
//! checked after each.

use super::checks::Checks;
pub use super::profile::{Ear, Heard, Profile, Runtime, listener_config};
use super::scenario::{Act, Scenario};
use super::server::{Rest, Server};
use super::trace::Trace;
use super::{Report, Violation};
use crate::core::engine::WakeCause;
use crate::core::frames::ServerFrame;
use crate::core::host::{Host, NoHostObserver, ProfileId};
use crate::core::listener::{InFrame, Input, Listener, Observer, Restored};
use crate::core::pacing::PacingPolicy;
use crate::core::rng::Rng;
use crate::core::time::Now;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

/// What the queue holds: each is due at its time.
#[derive(Debug)]
pub enum Ev {
    /// An answer reaches the listener.
    Deliver(usize, Input),
    /// A REST request reaches the server.
    Rest(usize, Rest),
    /// A socket upgrade reaches the server.
    Dial(usize, u64),
    /// Acks reach the server.
    Acks(usize, u64, Vec<String>),
    /// A connection may have frames to hand over now.
    ConnDue,
    /// The server's heartbeat on a socket.
    Heartbeat(usize, u64),
    /// An agent's server timers (re-wake ladder, defer reminders) may be due.
    ServerTick(String),
    /// A step of a run.
    Run(usize, u64, super::runs::Step),
    /// A scenario act.
    Act(Act),
    /// A drawn act's kind comes: one is drawn and done, and the next of its kind drawn.
    Draw(Drawn),
    /// A fault window ends.
    Heal(super::acts::Heal),
    /// The machine wakes from a suspend.
    Resume,
    /// The chaos ends: every fault heals, the sockets drop once, traffic stops.
    Settle,
    /// The settle ends: liveness is checked, every listener is stopped.
    Finish,
}

/// A drawn act's kind: its next is drawn when it comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Drawn {
    Dm(usize),
    Group,
    Invite,
    Mute,
    Drop,
    Close,
    RefuseKey,
    RotateKey,
    Upgrade,
    Outage,
    Unreachable,
    Throttle,
    Removed,
    SlowTray,
    TextsDown,
    TextsUnusable,
    DiskFull,
    Suspend,
    WallStep,
    Reload,
    Refuses,
    Flood,
    MutedFlood,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Chaos,
    Settle,
    Stopping,
    Done,
}

/// The user's machine's clocks.
#[derive(Debug, Default)]
pub struct Machine {
    /// True ms the machine slept, which its monotonic clock did not count.
    pub slept: u64,
    /// How far the wall clock was stepped, ms.
    pub wall_offset: i64,
    /// Asleep since then until then (true ms).
    pub asleep_from: u64,
    pub asleep_until: Option<u64>,
}

pub struct World {
    pub t: u64,
    pub plan: Scenario,
    pub machine: Machine,
    pub host: Host,
    pub server: Server,
    pub profiles: Vec<Profile>,
    pub by_id: BTreeMap<ProfileId, usize>,
    queue: BTreeMap<(u64, u64), Ev>,
    next_seq: u64,
    pub rng: Rng,
    pub trace: Trace,
    pub checks: Checks,
    pub steps: u64,
    pub phase: Phase,
    /// Answers known at once, handed over once every effect was taken (as the driver does).
    pub local: VecDeque<(usize, Input)>,
    /// Ticks in a row at one instant (a deadline that never moves is a busy loop).
    same_instant_ticks: (u64, u32),
    /// The host's next deadline, as last asked (`None`: the host was stepped since).
    pub host_deadline: Option<Option<u64>>,
    /// Something may have moved a connection's frames (an event, an effect on a socket): the
    /// connections are looked at before the next step.
    pub pump: bool,
    /// The direct conversation of each profile with each peer, once one was written.
    pub dm_convs: BTreeMap<(usize, usize), String>,
}

impl World {
    pub fn new(plan: Scenario, opts: &super::Options) -> World {
        let mut rng = Rng::new(plan.seed);
        // The store's ids (`sim::clock::new_id`) come from `fastrand`'s generator of this thread:
        // seeded from the scenario, so they replay too.
        fastrand::seed(rng.u64());
        let server = Server::new(plan.epoch_ms);
        let host = Host::new(
            PacingPolicy::default(),
            plan.slots.map(|max| (max, None)),
            rng.u64(),
            Arc::new(NoHostObserver),
        );
        let checks = Checks::new(&plan, &opts.skip);
        World {
            t: 0,
            machine: Machine::default(),
            host,
            server,
            profiles: Vec::new(),
            by_id: BTreeMap::new(),
            queue: BTreeMap::new(),
            next_seq: 0,
            rng,
            trace: Trace::new(opts.keep_trace),
            checks,
            steps: 0,
            phase: Phase::Chaos,
            local: VecDeque::new(),
            same_instant_ticks: (u64::MAX, 0),
            host_deadline: None,
            pump: true,
            dm_convs: BTreeMap::new(),
            plan,
        }
    }

    /// The listener's clocks now.
    pub fn now(&self) -> Now {
        Now::at(
            self.t.saturating_sub(self.machine.slept),
            self.plan.epoch_ms
                + i64::try_from(self.t).unwrap_or(i64::MAX)
                + self.machine.wall_offset,
        )
    }

    pub fn at(&mut self, t: u64, ev: Ev) {
        self.next_seq += 1;
        self.queue.insert((t.max(self.t), self.next_seq), ev);
    }

    pub fn after(&mut self, ms: u64, ev: Ev) {
        self.at(self.t.saturating_add(ms), ev);
    }

    /// A line of the trace at the current time.
    pub fn note(&mut self, what: std::fmt::Arguments<'_>) {
        self.trace.line(self.t, what);
    }

    pub fn violated(&mut self, invariant: &'static str, pid: Option<usize>, detail: String) {
        let profile = pid
            .and_then(|p| self.profiles.get(p))
            .map(|p| p.name.clone());
        self.checks.fail(Violation {
            invariant,
            profile,
            at_ms: self.t,
            detail,
        });
    }

    fn start(&mut self) {
        self.server.set_clock(self.t);
        let peers = self.plan.peers;
        self.server.create_peers(peers);
        let plans = self.plan.profiles.clone();
        let single = plans.len() == 1;
        for (i, p) in plans.iter().enumerate() {
            let key = self.server.create_agent(&p.handle);
            let now = self.now();
            let cfg = listener_config(p, self.plan.zone, single, now.wall_ms);
            let ear = Arc::new(Ear::default());
            let seed = self.host.seed();
            let obs: Arc<dyn Observer> = ear.clone();
            let listener = Listener::new(cfg.clone(), Restored::default(), seed, obs, now);
            self.profiles.push(Profile {
                id: 0,
                name: p.name.clone(),
                handle: p.handle.clone(),
                key: key.clone(),
                key_file: key.clone(),
                server_key: key,
                cfg,
                plan: p.clone(),
                ear,
                runtime: Runtime {
                    refuses_until: 0,
                    login_ok: true,
                    stamp: 1,
                },
                conns: BTreeMap::new(),
                cancelled: BTreeSet::new(),
                run: None,
                texts_cached: None,
                disk_full_until: 0,
                status_ok: true,
                status: None,
                ready: false,
                ended: false,
            });
            let id = self.host.add(now, listener, tracing::Span::none());
            self.host_deadline = None;
            if let Some(pr) = self.profiles.get_mut(i) {
                pr.id = id;
            }
            self.by_id.insert(id, i);
            self.note(format_args!(
                "{} starts: {:?}, policy {:?}",
                p.name, p.runtime, p.policy
            ));
        }
        let groups = self.plan.groups.clone();
        for (peers, agents) in &groups {
            let handles: Vec<String> = agents
                .iter()
                .filter_map(|a| self.profiles.get(*a).map(|p| p.handle.clone()))
                .collect();
            self.server.create_group(peers, &handles);
        }
        super::draw::schedule_start(self);
        let script = self.plan.script.clone();
        for s in script {
            self.at(s.at_ms, Ev::Act(s.act));
        }
        self.at(self.plan.chaos_ms, Ev::Settle);
        self.at(self.plan.chaos_ms + self.plan.settle_ms, Ev::Finish);
    }

    /// Runs to the end, or to the first invariant broken.
    pub fn run(&mut self) {
        self.start();
        loop {
            self.settle_effects();
            if self.checks.failed() || self.phase == Phase::Done {
                break;
            }
            let event_t = self.queue.keys().next().map(|k| k.0);
            let deadline = if self.machine.asleep_until.is_some() {
                None
            } else {
                // Only a step of the host moves its deadline.
                let d = match self.host_deadline {
                    Some(d) => d,
                    None => *self.host_deadline.insert(self.host.next_deadline()),
                };
                d.map(|m| m.saturating_add(self.machine.slept).max(self.t))
            };
            match (event_t, deadline) {
                (None, None) => break,
                (Some(e), Some(d)) if d < e => self.tick(d),
                (None, Some(d)) => self.tick(d),
                _ => {
                    if let Some(((t, _), ev)) = self.queue.pop_first() {
                        self.t = t;
                        self.server.set_clock(self.t);
                        self.event(ev);
                    }
                }
            }
        }
        self.server.clear_clock();
    }

    fn tick(&mut self, d: u64) {
        self.t = d;
        self.server.set_clock(self.t);
        if self.same_instant_ticks.0 == d {
            self.same_instant_ticks.1 += 1;
            if self.same_instant_ticks.1 > 1000 {
                let due: Vec<String> = self
                    .profiles
                    .iter()
                    .filter_map(|p| {
                        let l = self.host.profile(p.id)?;
                        let stuck: Vec<&str> = l
                            .deadlines()
                            .into_iter()
                            .filter(|(_, d)| d + self.machine.slept <= self.t)
                            .map(|(name, _)| name)
                            .collect();
                        (!stuck.is_empty()).then(|| format!("{} ({})", p.name, stuck.join(", ")))
                    })
                    .collect();
                self.note(format_args!(
                    "due at once, again and again: {}",
                    if due.is_empty() {
                        "the host".to_string()
                    } else {
                        due.join(", ")
                    }
                ));
                self.violated(
                    "deadlines_advance",
                    None,
                    "the host asked for a step at the same instant 1000 times in a row".into(),
                );
                // Time stands still in a busy loop: the run ends here, skipped or not.
                self.phase = Phase::Done;
                return;
            }
        } else {
            self.same_instant_ticks = (d, 0);
        }
        let now = self.now();
        self.host.tick(now);
        self.host_deadline = None;
        self.steps += 1;
        self.hear_all();
    }

    fn event(&mut self, ev: Ev) {
        self.pump = true;
        match ev {
            Ev::Deliver(pid, input) => self.deliver(pid, input),
            Ev::Rest(pid, r) => super::server::rest(self, pid, r),
            Ev::Dial(pid, conn) => super::conn::dial_reaches_server(self, pid, conn),
            Ev::Acks(pid, conn, ids) => super::conn::acks_reach_server(self, pid, conn, &ids),
            Ev::ConnDue => {}
            Ev::Heartbeat(pid, conn) => super::conn::heartbeat(self, pid, conn),
            Ev::ServerTick(h) => super::server::timers(self, &h),
            Ev::Run(pid, cycle, step) => super::runs::step(self, pid, cycle, step),
            Ev::Act(act) => super::acts::act(self, act),
            Ev::Draw(d) => super::draw::draw(self, d),
            Ev::Heal(h) => super::acts::heal(self, h),
            Ev::Resume => self.resume(),
            Ev::Settle => super::acts::settle(self),
            Ev::Finish => self.finish(),
        }
    }

    /// Hands an input to a profile's listener (later, if the machine sleeps).
    pub fn deliver(&mut self, pid: usize, input: Input) {
        if let Some(w) = self.machine.asleep_until {
            self.at(w, Ev::Deliver(pid, input));
            return;
        }
        if self.profiles.get(pid).is_none_or(|p| p.ended) {
            return;
        }
        if !super::perform::admit(self, pid, &input) {
            return;
        }
        // A burst's frames, parsed once for the checks and the trace.
        let parsed: Vec<Option<ServerFrame>> = match &input {
            Input::Burst { frames, .. } => frames
                .iter()
                .map(|f| match f {
                    InFrame::Text(t) => ServerFrame::parse(t).ok(),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        };
        super::checks::before_input(self, pid, &input, &parsed);
        let Some(p) = self.profiles.get(pid) else {
            return;
        };
        let id = p.id;
        let line = super::perform::input_line(&input, &parsed);
        let name = p.name.clone();
        self.note(format_args!("{name} <- {line}"));
        let now = self.now();
        self.host.handle(now, id, input);
        self.host_deadline = None;
        self.steps += 1;
        self.hear_all();
    }

    /// Takes what every listener told its observer, in order, to the checks.
    fn hear_all(&mut self) {
        for pid in 0..self.profiles.len() {
            let heard = match self.profiles.get(pid) {
                Some(p) => p.ear.take(),
                None => continue,
            };
            for h in heard {
                if let Heard::Wake(WakeCause::Listener(why)) = &h {
                    let name = self
                        .profiles
                        .get(pid)
                        .map(|p| p.name.clone())
                        .unwrap_or_default();
                    self.note(format_args!("{name} wakes itself: {}", why.as_str()));
                }
                if let Heard::CycleEnded(last) = &h {
                    let name = self
                        .profiles
                        .get(pid)
                        .map(|p| p.name.clone())
                        .unwrap_or_default();
                    let how = match (last.outcome, last.no_run_reason) {
                        (_, Some(why)) => format!("no run ({})", why.as_str()),
                        (Some(o), None) => o.as_str().to_string(),
                        (None, None) => "?".to_string(),
                    };
                    self.note(format_args!("{name} cycle {} ended: {how}", last.id));
                }
                super::checks::heard(self, pid, h);
            }
        }
    }

    /// Performs every effect asked for, hands over the answers known at once, and lets every
    /// connection hand over the frames that have come, until nothing is left; then the checks
    /// that look at the state after a step.
    fn settle_effects(&mut self) {
        loop {
            while self.host.poll_host_effect().is_some() {
                let now = self.now();
                self.host.memory(now, Some(u64::MAX / 2));
                self.host_deadline = None;
            }
            if let Some((id, effect)) = self.host.poll_effect() {
                if let Some(&pid) = self.by_id.get(&id) {
                    super::perform::perform(self, pid, effect);
                }
                continue;
            }
            if let Some((pid, input)) = self.local.pop_front() {
                self.deliver(pid, input);
                continue;
            }
            if std::mem::take(&mut self.pump) && super::conn::pump_all(self) {
                self.pump = true;
                continue;
            }
            break;
        }
        super::server::schedule_timers(self);
        super::checks::after_step(self);
    }

    /// The machine sleeps: the monotonic clock stops, every socket dies under the listener.
    pub fn suspend(&mut self, for_ms: u64) {
        if self.machine.asleep_until.is_some() || self.phase != Phase::Chaos {
            return;
        }
        let until = self.t + for_ms;
        self.machine.asleep_until = Some(until);
        self.machine.asleep_from = self.t;
        self.note(format_args!("the machine sleeps for {} s", for_ms / 1000));
        super::conn::machine_sleeps(self);
        self.at(until, Ev::Resume);
        self.checks.clock_moved(self.t);
    }

    fn resume(&mut self) {
        if let Some(until) = self.machine.asleep_until.take() {
            self.machine.slept += until.saturating_sub(self.machine.asleep_from);
            self.checks.clock_moved(self.t);
            self.note(format_args!("the machine wakes"));
        }
    }

    fn finish(&mut self) {
        match self.phase {
            Phase::Settle | Phase::Chaos => {
                super::checks::liveness(self);
                if self.checks.failed() {
                    return;
                }
                self.phase = Phase::Stopping;
                self.note(format_args!("every listener is stopped"));
                for pid in 0..self.profiles.len() {
                    self.local.push_back((
                        pid,
                        Input::Stop {
                            now: false,
                            cause: "SIGTERM",
                        },
                    ));
                }
                let grace = self
                    .profiles
                    .iter()
                    .map(|p| p.plan.kill_grace_s)
                    .max()
                    .unwrap_or(0);
                self.after((grace + 30) * 1000, Ev::Finish);
            }
            Phase::Stopping => {
                let left: Vec<String> = self
                    .profiles
                    .iter()
                    .filter(|p| !p.ended)
                    .map(|p| p.name.clone())
                    .collect();
                if !left.is_empty() {
                    self.violated(
                        "stops_cleanly",
                        None,
                        format!(
                            "{} did not end within the kill grace and the stop's slack",
                            left.join(", ")
                        ),
                    );
                }
                self.phase = Phase::Done;
            }
            Phase::Done => {}
        }
    }

    pub fn report(&self) -> Report {
        Report {
            seed: self.plan.seed,
            steps: self.steps,
            simulated_ms: self.t,
            trace: self.trace.digest(),
            violation: self.checks.violation().cloned(),
            last_lines: self.trace.last(),
            all_lines: self.trace.all().map(<[String]>::to_vec),
            skipped: self.checks.skipped(),
            reached: self.checks.reached.iter().copied().collect(),
            ip_peak: u64::try_from(self.checks.ip_peak).unwrap_or(u64::MAX),
            accepted_dials: self.checks.accepted_dials.clone(),
        }
    }
}

//! The process's profiles as one state machine: one map of per-profile listeners
//! (`crate::listener`), the one connect pacer they all pass (`crate::pacing`, contract 3.4's
//! per-IP budget), and, for `listen --all`, the run slots (`crate::admission`). The host answers
//! the listeners' [`Effect::AskPacer`], [`Effect::AskSlot`] and [`Effect::ReleaseSlot`] itself;
//! every other effect goes to the driver tagged with its profile. No I/O: the memory a run needs
//! is read by the driver when the host asks ([`HostEffect::ReadMemory`]).

use crate::admission::{self, Asked, RunQueue};
use crate::listener::{Effect, Input, Listener, Slot};
use crate::log_events;
use crate::pacing::{Admit, Pacing, PacingPolicy};
use crate::rng::Rng;
use crate::time::Now;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

/// How often memory is read again while it holds the queue back; with a memory threshold set,
/// runs also start one per this at most, so each start sees the memory the last one took.
pub const MEMORY_RECHECK: Duration = Duration::from_millis(250);

/// A profile's id in the host (not its name: a profile removed and added again is another).
pub type ProfileId = u64;

/// What the host asks of the driver besides its profiles' effects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostEffect {
    /// Read the memory a run can have (`crate::admission::available`); answer with
    /// [`Host::memory`].
    ReadMemory,
}

/// What the host's metrics hear.
pub trait HostObserver: Send + Sync + std::fmt::Debug {
    /// The run queue now.
    fn queue(&self, _running: usize, _queued: usize) {}
    /// A run took a slot after waiting this long.
    fn waited(&self, _waited: Duration) {}
}

#[derive(Debug, Default)]
pub struct NoHostObserver;
impl HostObserver for NoHostObserver {}

/// The run slots of `listen --all`.
#[derive(Debug)]
struct Slots {
    queue: RunQueue,
    /// Which cycle of each profile asked.
    asking: BTreeMap<ProfileId, u64>,
    min_memory: Option<u64>,
    /// The last reading of memory and when (monotonic ms).
    memory: Option<(Option<u64>, u64)>,
    /// A reading was asked for.
    reading: bool,
    /// When memory (or the one-start pace) held the queue back: look again then.
    recheck_at: Option<u64>,
    /// When the last run started, with a threshold set.
    last_start: Option<u64>,
    /// Memory held the queue back, said once per episode.
    memory_short: bool,
}

/// `listen --all`'s budget for the whole host (issue 38 item 6): runs and dollars of every
/// profile's local day together (`listen.host_max_runs_per_day`,
/// `listen.host_max_cost_per_day_usd`). `None`: no cap.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct HostBudget {
    pub max_runs_per_day: Option<u32>,
    pub max_cost_per_day_usd: Option<f64>,
}

/// The process's profiles, pacer and slots.
#[derive(Debug)]
pub struct Host {
    profiles: BTreeMap<ProfileId, Listener>,
    /// Each profile's next deadline, kept after every step of it, so a tick and the host's
    /// next deadline cost a lookup, not a pass over a thousand profiles (`listen --all`).
    due: BTreeSet<(u64, ProfileId)>,
    due_of: BTreeMap<ProfileId, u64>,
    /// Each profile's span: its lines carry its name (`listen --all`).
    spans: BTreeMap<ProfileId, tracing::Span>,
    next_id: ProfileId,
    pacing: Pacing,
    /// Profiles waiting for the pacer, first come first served.
    pacer_queue: VecDeque<ProfileId>,
    /// When the head of the pacer queue asks again.
    pacer_at: Option<u64>,
    /// When the head of the pacer queue first asked (for the log).
    pacer_since: Option<u64>,
    slots: Option<Slots>,
    out: VecDeque<(ProfileId, Effect)>,
    host_out: VecDeque<HostEffect>,
    rng: Rng,
    obs: std::sync::Arc<dyn HostObserver>,
    budget: HostBudget,
}

impl Host {
    /// A host whose pacer has `pacing`; with `slots` (`listen --all`: the most runs at once and
    /// the memory a run needs) runs wait for a slot.
    pub fn new(
        pacing: PacingPolicy,
        slots: Option<(usize, Option<u64>)>,
        seed: u64,
        obs: std::sync::Arc<dyn HostObserver>,
    ) -> Host {
        Host {
            profiles: BTreeMap::new(),
            due: BTreeSet::new(),
            due_of: BTreeMap::new(),
            spans: BTreeMap::new(),
            next_id: 0,
            pacing: Pacing::new(pacing),
            pacer_queue: VecDeque::new(),
            pacer_at: None,
            pacer_since: None,
            slots: slots.map(|(max, min_memory)| Slots {
                queue: RunQueue::new(max),
                asking: BTreeMap::new(),
                min_memory,
                memory: None,
                reading: false,
                recheck_at: None,
                last_start: None,
                memory_short: false,
            }),
            out: VecDeque::new(),
            host_out: VecDeque::new(),
            rng: Rng::new(seed),
            obs,
            budget: HostBudget::default(),
        }
    }

    /// The host's daily budget (a reload may change it).
    pub fn set_budget(&mut self, budget: HostBudget) {
        self.budget = budget;
    }

    /// Whether the host's budget is spent for a run of profile `id` at `now`: the cap that
    /// holds it, and when its day ends (the asking profile's local midnight).
    fn over_budget(&self, now: Now, id: ProfileId) -> Option<Slot> {
        let b = self.budget;
        if b.max_runs_per_day.is_none() && b.max_cost_per_day_usd.is_none() {
            return None;
        }
        let (runs, cost) = self
            .profiles
            .values()
            .map(|l| l.spent_today(now.wall_ms))
            .fold((0u64, 0.0f64), |(r, c), t| {
                (r.saturating_add(t.runs), c + t.cost_usd)
            });
        use crate::policy::HoldReason;
        let (reason, key) = if b.max_runs_per_day.is_some_and(|cap| runs >= u64::from(cap)) {
            (HoldReason::RunsPerDay, "host_max_runs_per_day")
        } else if b.max_cost_per_day_usd.is_some_and(|cap| cost >= cap) {
            (HoldReason::CostPerDay, "host_max_cost_per_day_usd")
        } else {
            return None;
        };
        let until = self.profiles.get(&id)?.tomorrow(now.wall_ms);
        Some(Slot::OverBudget { reason, key, until })
    }

    /// A seed for a new profile's listener, drawn from the host's.
    pub fn seed(&mut self) -> u64 {
        self.rng.u64()
    }

    /// Adds a profile's listener (made inside `span`, which its later steps enter too); its
    /// first effects are taken at once.
    pub fn add(&mut self, now: Now, listener: Listener, span: tracing::Span) -> ProfileId {
        self.next_id += 1;
        let id = self.next_id;
        self.profiles.insert(id, listener);
        self.spans.insert(id, span);
        self.drain(now, id);
        self.reindex(id);
        id
    }

    /// Removes an ended profile (its effects were taken).
    pub fn remove(&mut self, id: ProfileId) -> Option<Listener> {
        self.leave(id);
        self.spans.remove(&id);
        let l = self.profiles.remove(&id);
        self.reindex(id);
        l
    }

    /// Steps profile `id` inside its span.
    fn step(&mut self, id: ProfileId, f: impl FnOnce(&mut Listener)) {
        let _g = self.spans.get(&id).map(|s| s.clone().entered());
        if let Some(l) = self.profiles.get_mut(&id) {
            f(l);
        }
        self.reindex(id);
    }

    /// Files profile `id` under its next deadline again (none once it is gone).
    fn reindex(&mut self, id: ProfileId) {
        if let Some(old) = self.due_of.remove(&id) {
            self.due.remove(&(old, id));
        }
        if let Some(at) = self.profiles.get(&id).and_then(Listener::next_deadline) {
            self.due.insert((at, id));
            self.due_of.insert(id, at);
        }
    }

    pub fn profile(&self, id: ProfileId) -> Option<&Listener> {
        self.profiles.get(&id)
    }

    /// The watchdog's probe of one profile (`listen` alone): it takes a step.
    pub fn probe_one(&mut self, now: Now, id: ProfileId) {
        self.step(id, |l| l.tick(now));
        self.drain(now, id);
    }

    pub fn ids(&self) -> impl Iterator<Item = ProfileId> + '_ {
        self.profiles.keys().copied()
    }

    pub fn len(&self) -> usize {
        self.profiles.len()
    }

    pub fn is_empty(&self) -> bool {
        self.profiles.is_empty()
    }

    /// The slots: the most at once, and how many go now.
    pub fn slots(&self) -> Option<(usize, usize)> {
        self.slots
            .as_ref()
            .map(|s| (s.queue.max(), s.queue.running()))
    }

    /// One input for one profile.
    pub fn handle(&mut self, now: Now, id: ProfileId, input: Input) {
        self.step(id, |l| l.handle(now, input));
        self.drain(now, id);
    }

    /// Time passed: every profile whose deadline came, the pacer and the slots.
    pub fn tick(&mut self, now: Now) {
        let due: Vec<ProfileId> = self
            .due
            .range(..=(now.mono_ms, ProfileId::MAX))
            .map(|(_, id)| *id)
            .collect();
        for id in due {
            self.step(id, |l| l.tick(now));
            self.drain(now, id);
        }
        if self.pacer_at.is_some_and(|t| t <= now.mono_ms) {
            self.pacer_at = None;
            self.pace(now);
        }
        if self
            .slots
            .as_ref()
            .and_then(|s| s.recheck_at)
            .is_some_and(|t| t <= now.mono_ms)
        {
            if let Some(s) = self.slots.as_mut() {
                s.recheck_at = None;
            }
            self.pump(now);
        }
    }

    /// The watchdog's probe: every profile takes a step.
    pub fn probe(&mut self, now: Now) {
        let ids: Vec<ProfileId> = self.profiles.keys().copied().collect();
        for id in ids {
            self.step(id, |l| l.tick(now));
            self.drain(now, id);
        }
    }

    /// The next time the host must tick.
    pub fn next_deadline(&self) -> Option<u64> {
        let profiles = self.due.first().map(|(at, _)| *at);
        let slots = self.slots.as_ref().and_then(|s| s.recheck_at);
        [profiles, self.pacer_at, slots].into_iter().flatten().min()
    }

    /// The next effect for the driver.
    pub fn poll_effect(&mut self) -> Option<(ProfileId, Effect)> {
        self.out.pop_front()
    }

    pub fn poll_host_effect(&mut self) -> Option<HostEffect> {
        self.host_out.pop_front()
    }

    /// The memory a run can have now, as the driver read it.
    pub fn memory(&mut self, now: Now, available: Option<u64>) {
        if let Some(s) = self.slots.as_mut() {
            s.memory = Some((available, now.mono_ms));
            s.reading = false;
        }
        self.pump(now);
    }

    /// Takes a profile's effects: the host's own are answered, the rest go to the driver.
    fn drain(&mut self, now: Now, id: ProfileId) {
        loop {
            let Some(e) = self.profiles.get_mut(&id).and_then(Listener::poll_effect) else {
                return;
            };
            match e {
                Effect::AskPacer => {
                    if !self.pacer_queue.contains(&id) {
                        self.pacer_queue.push_back(id);
                    }
                    if self.pacer_queue.len() == 1 {
                        self.pacer_since = Some(now.mono_ms);
                        self.pace(now);
                    }
                }
                Effect::AskSlot { cycle } => self.ask_slot(now, id, cycle),
                Effect::ReleaseSlot => self.release(now, id),
                Effect::CancelRun {
                    cycle,
                    now: at_once,
                } => {
                    // A cycle that gives up while it waits for a slot leaves the queue.
                    if self
                        .slots
                        .as_ref()
                        .is_some_and(|s| s.asking.get(&id) == Some(&cycle))
                        && !self.slots.as_ref().is_some_and(|s| s.queue.is_running(id))
                    {
                        self.release(now, id);
                    }
                    self.out.push_back((
                        id,
                        Effect::CancelRun {
                            cycle,
                            now: at_once,
                        },
                    ));
                }
                Effect::Ended(end) => {
                    self.leave(id);
                    self.out.push_back((id, Effect::Ended(end)));
                }
                e => self.out.push_back((id, e)),
            }
        }
    }

    /// A profile is gone or ended: out of the pacer's queue and the slots.
    fn leave(&mut self, id: ProfileId) {
        self.pacer_queue.retain(|p| *p != id);
        if let Some(s) = self.slots.as_mut() {
            s.queue.leave(id);
            s.asking.remove(&id);
        }
    }

    /// The head of the pacer's queue goes when a token is free; the next waits its turn.
    fn pace(&mut self, now: Now) {
        while let Some(&head) = self.pacer_queue.front() {
            match self.pacing.admit(now.mono_ms, self.rng.f64()) {
                Admit::Go => {
                    self.pacer_queue.pop_front();
                    let waited = self
                        .pacer_since
                        .map_or(0, |t| now.mono_ms.saturating_sub(t));
                    tracing::debug!(
                        event = %log_events::CONNECT_PACED,
                        waited_ms = waited,
                        "connect attempt admitted by the pacer"
                    );
                    self.pacer_since = Some(now.mono_ms);
                    self.step(head, |l| l.handle(now, Input::Paced));
                    self.drain(now, head);
                }
                Admit::Wait(ms) => {
                    self.pacer_at = Some(now.mono_ms.saturating_add(ms));
                    return;
                }
            }
        }
    }

    /// A cycle's run asks for a slot: at once without slots (a single `listen`); never while the
    /// host's budget is spent.
    fn ask_slot(&mut self, now: Now, id: ProfileId, cycle: u64) {
        if let Some(over) = self.over_budget(now, id) {
            self.answer_slot(now, id, cycle, over);
            return;
        }
        let Some(s) = self.slots.as_mut() else {
            self.answer_slot(now, id, cycle, Slot::Granted { waited_ms: 0 });
            return;
        };
        s.asking.insert(id, cycle);
        let memory_ok = match self.memory_ok(now) {
            Some(ok) => ok,
            None => {
                // A reading is on its way: the ask queues, and the pump admits it then.
                if let Some(s) = self.slots.as_mut() {
                    let asked = s.queue.ask(id, now.mono_ms, false);
                    let (running, max) = (s.queue.running(), s.queue.max());
                    if let Asked::Queued { place } = asked {
                        self.publish();
                        self.answer_slot(
                            now,
                            id,
                            cycle,
                            Slot::Queued {
                                place,
                                running,
                                max,
                            },
                        );
                    }
                }
                return;
            }
        };
        let Some(s) = self.slots.as_mut() else {
            return;
        };
        match s.queue.ask(id, now.mono_ms, memory_ok) {
            Asked::Admitted => {
                self.started(now, Duration::ZERO);
                self.publish();
                self.answer_slot(now, id, cycle, Slot::Granted { waited_ms: 0 });
            }
            Asked::Queued { place } => {
                let (running, max) = (s.queue.running(), s.queue.max());
                self.pump(now);
                self.publish();
                self.answer_slot(
                    now,
                    id,
                    cycle,
                    Slot::Queued {
                        place,
                        running,
                        max,
                    },
                );
            }
        }
    }

    fn answer_slot(&mut self, now: Now, id: ProfileId, cycle: u64, slot: Slot) {
        self.step(id, |l| l.handle(now, Input::Slot { cycle, slot }));
        self.drain(now, id);
    }

    /// A profile's run ended, or it will not start: its slot goes to the next.
    fn release(&mut self, now: Now, id: ProfileId) {
        if let Some(s) = self.slots.as_mut() {
            s.queue.leave(id);
            s.asking.remove(&id);
        }
        self.pump(now);
        self.publish();
    }

    /// Whether memory lets a run start now: always without a threshold; `None` while a fresh
    /// reading is on its way. With one, also one start per [`MEMORY_RECHECK`].
    fn memory_ok(&mut self, now: Now) -> Option<bool> {
        let s = self.slots.as_mut()?;
        let Some(min) = s.min_memory else {
            return Some(true);
        };
        let recheck = crate::time::ms(MEMORY_RECHECK);
        if s.last_start
            .is_some_and(|t| now.mono_ms.saturating_sub(t) < recheck)
        {
            s.recheck_at = Some(s.last_start.unwrap_or(0).saturating_add(recheck));
            return Some(false);
        }
        let fresh = s.memory.filter(|(_, at)| *at == now.mono_ms);
        let Some((available, _)) = fresh else {
            if !s.reading {
                s.reading = true;
                self.host_out.push_back(HostEffect::ReadMemory);
            }
            return None;
        };
        let ok = admission::memory_ok(available, Some(min));
        if !ok && !std::mem::replace(&mut s.memory_short, true) {
            tracing::warn!(
                event = %log_events::RUN_QUEUE_MEMORY_WAIT,
                available_bytes = available,
                min_available_memory = min,
                "less memory is available than listen.min_available_memory: no run starts until there is more (read again every {} ms)",
                MEMORY_RECHECK.as_millis()
            );
        } else if ok {
            s.memory_short = false;
        }
        if !ok {
            s.recheck_at = Some(now.mono_ms.saturating_add(recheck));
        }
        Some(ok)
    }

    /// Starts whoever's turn it is, while slots are free and memory allows.
    fn pump(&mut self, now: Now) {
        loop {
            if !self.slots.as_ref().is_some_and(|s| s.queue.could_admit()) {
                return;
            }
            let Some(ok) = self.memory_ok(now) else {
                return;
            };
            let Some(s) = self.slots.as_mut() else {
                return;
            };
            let Some(next) = s.queue.admit_next(ok) else {
                return;
            };
            let waited = now.mono_ms.saturating_sub(next.since_ms);
            let cycle = s.asking.get(&next.who).copied();
            self.started(now, Duration::from_millis(waited));
            self.publish();
            match cycle {
                Some(cycle) if self.profiles.contains_key(&next.who) => {
                    self.answer_slot(now, next.who, cycle, Slot::Granted { waited_ms: waited })
                }
                // Gone before its turn: its slot is free again.
                _ => {
                    if let Some(s) = self.slots.as_mut() {
                        s.queue.leave(next.who);
                    }
                }
            }
        }
    }

    fn started(&mut self, now: Now, waited: Duration) {
        if let Some(s) = self.slots.as_mut()
            && s.min_memory.is_some()
        {
            s.last_start = Some(now.mono_ms);
        }
        self.obs.waited(waited);
    }

    fn publish(&self) {
        if let Some(s) = &self.slots {
            self.obs.queue(s.queue.running(), s.queue.queued());
        }
    }
}

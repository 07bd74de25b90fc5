//! The process's run slots (issue 27; docs/many-agents.md, "How many runs at once"): with
//! `listen --all`, a cycle that found something waiting asks here before it starts its run, and
//! waits its turn when `listen.max_concurrent_runs` runs already go or the memory a run needs is
//! not there (`listen.min_available_memory`). The policy (first come, first served; one run per
//! profile; what "available" means) is `core::admission`; this module holds the one queue of
//! the process, wakes whoever's turn it is, reads memory, and keeps the metrics.
//!
//! A slot is a [`Permit`], held for the run and given back when it is dropped (the run ended, or
//! the cycle ended some other way). A profile that stops while it waits drops its [`Waiting`],
//! which takes it out of the queue. While memory holds the queue back, it is read again every
//! `RECHECK`; with `min_available_memory` set, runs also start one per `RECHECK` at most, so
//! each start sees the memory the last one took as it grew.
//!
//! A single `listen` has no `Admission`: its one profile runs one run at a time as always.

use super::metrics::Registry;
use crate::core::admission::{self, Asked, CgroupMemory, RunQueue};
use crate::log_events;
use std::collections::HashMap;
use std::io::Read as _;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How often memory is read again while it holds the queue back.
const RECHECK: Duration = Duration::from_millis(250);
/// The most read of a `/proc` or cgroup file (`/proc/meminfo` is under 2 KiB).
const FILE_CAP: u64 = 16 * 1024;

/// The process's run slots; cloned into every profile's listener.
#[derive(Clone, Debug)]
pub struct Admission {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    state: Mutex<State>,
    min_memory: Option<u64>,
    epoch: Instant,
    registry: Option<Arc<Registry>>,
}

#[derive(Debug)]
struct State {
    queue: RunQueue,
    /// Each waiter's way to hear its turn, with how long it waited.
    wakers: HashMap<u64, oneshot::Sender<Duration>>,
    next_member: u64,
    /// A re-check is scheduled.
    recheck: bool,
    /// When the last run started, with a memory threshold set (one start per `RECHECK`).
    last_start: Option<Instant>,
    /// Memory held the queue back, said once per episode.
    memory_short: bool,
}

/// What asking for a slot came to.
pub enum Entry {
    Now(Permit),
    /// Waiting at `place` (1 is next) behind `running` runs.
    Queued {
        place: usize,
        running: usize,
        max: usize,
        waiting: Waiting,
    },
}

/// A run slot, given back when dropped.
#[derive(Debug)]
pub struct Permit {
    shared: Arc<Shared>,
    who: u64,
}

/// A place in the queue; dropped before its turn, it leaves the queue.
#[derive(Debug)]
pub struct Waiting {
    shared: Arc<Shared>,
    who: u64,
    rx: oneshot::Receiver<Duration>,
    admitted: bool,
}

impl Admission {
    /// `max` runs at once; none started under `min_memory` bytes available. `registry`: the
    /// process's metrics endpoint, when it has one.
    pub fn new(max: usize, min_memory: Option<u64>, registry: Option<Arc<Registry>>) -> Admission {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                queue: RunQueue::new(max),
                wakers: HashMap::new(),
                next_member: 0,
                recheck: false,
                last_start: None,
                memory_short: false,
            }),
            min_memory,
            epoch: Instant::now(),
            registry,
        });
        shared.publish(&shared.lock());
        Admission { shared }
    }

    /// The slots there are.
    pub fn max(&self) -> usize {
        self.shared.lock().queue.max()
    }

    /// A new member's id: one per profile's listener.
    pub fn member(&self) -> u64 {
        let mut st = self.shared.lock();
        st.next_member += 1;
        st.next_member
    }

    /// `who` asks for a slot: one now, or a place in the queue.
    pub fn enter(&self, who: u64) -> Entry {
        let shared = &self.shared;
        let mut st = shared.lock();
        let now = shared.now_ms();
        let memory_ok = shared.may_start(&mut st);
        match st.queue.ask(who, now, memory_ok) {
            Asked::Admitted => {
                shared.started(&mut st, Duration::ZERO);
                shared.publish(&st);
                Entry::Now(Permit {
                    shared: shared.clone(),
                    who,
                })
            }
            Asked::Queued { place } => {
                let (tx, rx) = oneshot::channel();
                st.wakers.insert(who, tx);
                shared.pump(&mut st);
                shared.publish(&st);
                let (running, max) = (st.queue.running(), st.queue.max());
                Entry::Queued {
                    place,
                    running,
                    max,
                    waiting: Waiting {
                        shared: shared.clone(),
                        who,
                        rx,
                        admitted: false,
                    },
                }
            }
        }
    }
}

impl Waiting {
    /// Waits for this profile's turn: its slot, and how long it waited.
    pub async fn turn(mut self) -> (Permit, Duration) {
        let waited = (&mut self.rx).await.unwrap_or_default();
        self.admitted = true;
        let permit = Permit {
            shared: self.shared.clone(),
            who: self.who,
        };
        (permit, waited)
    }
}

impl Drop for Waiting {
    /// Out of the queue; a slot given just now (its turn came as it gave up) goes to the next.
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        let mut st = self.shared.lock();
        st.wakers.remove(&self.who);
        st.queue.leave(self.who);
        self.shared.pump(&mut st);
        self.shared.publish(&st);
    }
}

impl Drop for Permit {
    /// The slot is free: the next in the queue starts.
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.queue.leave(self.who);
        self.shared.pump(&mut st);
        self.shared.publish(&st);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Whether memory lets a run start now (always without a threshold). With one, also one
    /// start per `RECHECK`.
    fn may_start(&self, st: &mut State) -> bool {
        let Some(min) = self.min_memory else {
            return true;
        };
        if st.last_start.is_some_and(|t| t.elapsed() < RECHECK) {
            return false;
        }
        let available = available_memory();
        let ok = admission::memory_ok(available, Some(min));
        if !ok && !std::mem::replace(&mut st.memory_short, true) {
            tracing::warn!(
                event = %log_events::RUN_QUEUE_MEMORY_WAIT,
                available_bytes = available,
                min_available_memory = min,
                "less memory is available than listen.min_available_memory: no run starts until there is more (read again every {} ms)",
                RECHECK.as_millis()
            );
        } else if ok {
            st.memory_short = false;
        }
        ok
    }

    /// A run took a slot after `waited`.
    fn started(&self, st: &mut State, waited: Duration) {
        if self.min_memory.is_some() {
            st.last_start = Some(Instant::now());
        }
        if let Some(r) = &self.registry {
            r.queue.waited(waited);
        }
    }

    /// Starts whoever's turn it is, while slots are free and memory allows; schedules a re-check
    /// when memory (or the one-start pace) held the queue back.
    fn pump(self: &Arc<Self>, st: &mut State) {
        while st.queue.could_admit() {
            let ok = self.may_start(st);
            let Some(next) = st.queue.admit_next(ok) else {
                self.recheck_later(st);
                return;
            };
            let waited = Duration::from_millis(self.now_ms().saturating_sub(next.since_ms));
            self.started(st, waited);
            let told = st
                .wakers
                .remove(&next.who)
                .is_some_and(|tx| tx.send(waited).is_ok());
            if !told {
                // Gone before its turn: its slot is free again.
                st.queue.leave(next.who);
            }
        }
    }

    /// Looks at the queue again after `RECHECK`, once (needs the runtime: outside one, the next
    /// release or arrival looks instead).
    fn recheck_later(self: &Arc<Self>, st: &mut State) {
        if st.recheck {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        st.recheck = true;
        let shared = self.clone();
        rt.spawn(async move {
            tokio::time::sleep(RECHECK).await;
            let mut st = shared.lock();
            st.recheck = false;
            shared.pump(&mut st);
            shared.publish(&st);
        });
    }

    fn publish(&self, st: &State) {
        if let Some(r) = &self.registry {
            r.queue.set(st.queue.running(), st.queue.queued());
        }
    }
}

/// A profile's cycle's way to a slot: the process's `Admission`, the profile's id in it, and
/// who hears that the run queued (the listener, for its status).
#[derive(Debug)]
pub struct Ticket {
    pub admission: Admission,
    pub who: u64,
    pub queued: Option<oneshot::Sender<Queued>>,
}

/// A run that waits for a slot, as the profile's status says it.
#[derive(Debug, Clone)]
pub struct Queued {
    /// Its place when it joined the queue (1 is next).
    pub place: usize,
    /// Runs going then, and the slots there are.
    pub running: usize,
    pub max: usize,
}

/// How long a run may wait for its slot before the tray that decided it is read again: a wait
/// longer than this (scaled by the test time scale) ends in a fresh tray read and decision
/// (`listen::cycle`), since the card may have been answered elsewhere meanwhile.
pub const STALE_DECISION: Duration = Duration::from_secs(30);

/// Waits for the cycle's run slot (no ticket: a single `listen`, no wait): the slot and how long
/// the run waited for it. `None` when the listener stops first: no run was started.
pub async fn slot_for(
    ticket: Option<Ticket>,
    cycle_id: &str,
    shutdown: &tokio::sync::watch::Receiver<bool>,
) -> Option<(Option<Permit>, Duration)> {
    let Some(mut ticket) = ticket else {
        return Some((None, Duration::ZERO));
    };
    let (place, running, max, waiting) = match ticket.admission.enter(ticket.who) {
        Entry::Now(p) => return Some((Some(p), Duration::ZERO)),
        Entry::Queued {
            place,
            running,
            max,
            waiting,
        } => (place, running, max, waiting),
    };
    tracing::info!(
        event = %log_events::RUN_QUEUED,
        cycle_id,
        place,
        running,
        max_concurrent_runs = max,
        "every run slot is taken (or memory is short): this run waits its turn"
    );
    if let Some(tx) = ticket.queued.take() {
        let _ = tx.send(Queued {
            place,
            running,
            max,
        });
    }
    let mut shutdown = shutdown.clone();
    let stopped = async move {
        if shutdown.wait_for(|s| *s).await.is_err() {
            // The listener is gone without a stop: nothing ends the wait but the turn.
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        (permit, waited) = waiting.turn() => {
            tracing::info!(
                event = %log_events::RUN_DEQUEUED,
                cycle_id,
                waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX),
                "this run's turn came"
            );
            Some((Some(permit), waited))
        }
        // The cycle ends `no_run` (`stopped`): no run was started, so none failed.
        () = stopped => None,
    }
}

/// The memory a run can have now (`core::admission::available`): `MemAvailable`, and the
/// headroom of every cgroup of this process that has a memory limit.
pub fn available_memory() -> Option<u64> {
    let meminfo = read_small("/proc/meminfo").and_then(|t| admission::parse_meminfo(&t));
    let cgroups: Vec<CgroupMemory> = read_small("/proc/self/cgroup")
        .map(|t| admission::cgroup_paths(&t))
        .unwrap_or_default()
        .iter()
        .filter_map(|p| {
            let dir = format!("/sys/fs/cgroup{p}");
            let limit = admission::parse_memory_max(&read_small(&format!("{dir}/memory.max"))?)?;
            let usage = read_small(&format!("{dir}/memory.current"))?
                .trim()
                .parse()
                .ok()?;
            Some(CgroupMemory { limit, usage })
        })
        .collect();
    admission::available(meminfo, &cgroups)
}

fn read_small(path: &str) -> Option<String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(FILE_CAP)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_freed_slot_goes_to_the_first_waiter_and_one_that_gives_up_leaves_the_queue() {
        let a = Admission::new(1, None, None);
        let (p1, p2, p3) = (a.member(), a.member(), a.member());
        let Entry::Now(first) = a.enter(p1) else {
            panic!("a free slot");
        };
        let Entry::Queued {
            place: 1,
            waiting: second,
            ..
        } = a.enter(p2)
        else {
            panic!("queued first");
        };
        let Entry::Queued {
            place: 2,
            waiting: third,
            ..
        } = a.enter(p3)
        else {
            panic!("queued second");
        };
        drop(second);
        assert_eq!(a.shared.lock().queue.place(p3), Some(1));
        drop(first);
        let (permit, _) = tokio::time::timeout(Duration::from_secs(5), third.turn())
            .await
            .unwrap();
        assert!(a.shared.lock().queue.is_running(p3));
        drop(permit);
        assert_eq!(a.shared.lock().queue.running(), 0);
    }

    #[test]
    fn this_machines_memory_can_be_read() {
        // Linux always has MemAvailable; the cgroup part depends on where the tests run.
        if std::path::Path::new("/proc/meminfo").exists() {
            assert!(available_memory().is_some_and(|b| b > 0));
        }
    }
}

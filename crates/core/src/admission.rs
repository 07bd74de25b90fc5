//! Run admission for a host of many profiles (`listen --all`, docs/many-agents.md, "How many runs
//! at once"): at most `max_concurrent_runs` runs at once across the process, one per profile, the
//! rest waiting first come, first served, and none started while the machine's available memory is
//! under `min_available_memory`. This module is the policy alone: who is admitted, who waits and
//! at which place, and what "available memory" is, from numbers the caller read
//! (`listen::admission` does the I/O and the waiting). Times are injected milliseconds.

use std::collections::{BTreeSet, VecDeque};

/// The default `max_concurrent_runs`: one run per CPU core, and never fewer than two (a run is
/// mostly waiting on a model, so two fit even one core).
pub fn default_max(cores: usize) -> usize {
    cores.max(2)
}

/// What asking for a run slot came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    /// A slot is this profile's now.
    Admitted,
    /// It waits at `place` (1 is next).
    Queued { place: usize },
}

/// One profile waiting for a slot: who, and since when (ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiter {
    pub who: u64,
    pub since_ms: u64,
}

/// The process's run slots and its queue. `who` is a profile's listener (one cycle, so one run,
/// at a time each: a profile is never queued or running twice).
#[derive(Debug, Clone)]
pub struct RunQueue {
    max: usize,
    running: BTreeSet<u64>,
    waiting: VecDeque<Waiter>,
}

impl RunQueue {
    /// `max` slots (at least one: a queue with none would never start anything).
    pub fn new(max: usize) -> RunQueue {
        RunQueue {
            max: max.max(1),
            running: BTreeSet::new(),
            waiting: VecDeque::new(),
        }
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    pub fn queued(&self) -> usize {
        self.waiting.len()
    }

    /// `who`'s place in the queue (1 is next), if it waits.
    pub fn place(&self, who: u64) -> Option<usize> {
        self.waiting
            .iter()
            .position(|w| w.who == who)
            .map(|i| i + 1)
    }

    /// `who` asks for a slot at `now_ms`; `memory_ok` says whether the machine has the memory a
    /// run needs now. Admitted only when a slot is free, nobody waits ahead of it (first come,
    /// first served) and memory allows; otherwise it queues at the back. Asking again while
    /// waiting (or running) changes nothing: a profile is never in the queue twice.
    pub fn ask(&mut self, who: u64, now_ms: u64, memory_ok: bool) -> Asked {
        if self.running.contains(&who) {
            return Asked::Admitted;
        }
        if let Some(place) = self.place(who) {
            return Asked::Queued { place };
        }
        if self.waiting.is_empty() && self.running.len() < self.max && memory_ok {
            self.running.insert(who);
            return Asked::Admitted;
        }
        self.waiting.push_back(Waiter {
            who,
            since_ms: now_ms,
        });
        Asked::Queued {
            place: self.waiting.len(),
        }
    }

    /// Whether the head of the queue could start now but for memory: the caller reads memory only
    /// then.
    pub fn could_admit(&self) -> bool {
        !self.waiting.is_empty() && self.running.len() < self.max
    }

    /// The next waiter to start, taking a slot, when one is free and `memory_ok`; `None`
    /// otherwise. The caller calls it until `None` (each admission is one run's memory: a caller
    /// that reads memory again between calls sees the run it started once that run has grown).
    pub fn admit_next(&mut self, memory_ok: bool) -> Option<Waiter> {
        if !memory_ok || !self.could_admit() {
            return None;
        }
        let next = self.waiting.pop_front()?;
        self.running.insert(next.who);
        Some(next)
    }

    /// `who` is done: its run ended (its slot is free), or it gave up waiting (a listener that
    /// stops while queued). Unknown `who` changes nothing.
    pub fn leave(&mut self, who: u64) {
        self.running.remove(&who);
        self.waiting.retain(|w| w.who != who);
    }

    /// Whether `who` holds a slot.
    pub fn is_running(&self, who: u64) -> bool {
        self.running.contains(&who)
    }
}

/// The memory a new run can have, in bytes: the machine's `MemAvailable`, or, when the process
/// lives in cgroups with memory limits (a systemd unit's `MemoryMax=`, a container's limit),
/// the least headroom (limit minus usage) among them, whichever is less. `None` when nothing
/// could be read: memory then never holds a run back.
pub fn available(mem_available: Option<u64>, cgroups: &[CgroupMemory]) -> Option<u64> {
    let headroom = cgroups
        .iter()
        .filter_map(|c| c.limit.map(|l| l.saturating_sub(c.usage)))
        .min();
    match (mem_available, headroom) {
        (Some(a), Some(h)) => Some(a.min(h)),
        (a, h) => a.or(h),
    }
}

/// Whether a run may start: no threshold set, memory unknown, or at least `min` available.
pub fn memory_ok(available: Option<u64>, min: Option<u64>) -> bool {
    match (available, min) {
        (Some(a), Some(m)) => a >= m,
        _ => true,
    }
}

/// One cgroup's memory: its limit (`memory.max`; `None` for `max`, no limit) and its usage
/// (`memory.current`), in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CgroupMemory {
    pub limit: Option<u64>,
    pub usage: u64,
}

/// `MemAvailable` from `/proc/meminfo`'s text, in bytes.
pub fn parse_meminfo(text: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix("MemAvailable:")?.trim();
        let kb: u64 = rest
            .strip_suffix("kB")
            .unwrap_or(rest)
            .trim()
            .parse()
            .ok()?;
        kb.checked_mul(1024)
    })
}

/// The process's cgroup v2 path from `/proc/self/cgroup`'s text (the `0::` line), and each
/// ancestor's up to (not including) the root, innermost first: `0::/a/b` → `["/a/b", "/a"]`.
pub fn cgroup_paths(text: &str) -> Vec<String> {
    let Some(path) = text.lines().find_map(|l| l.strip_prefix("0::")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut p = path.trim().trim_end_matches('/');
    while !p.is_empty() && p != "/" {
        out.push(p.to_string());
        p = match p.rfind('/') {
            Some(i) => p.get(..i).unwrap_or(""),
            None => "",
        };
    }
    out
}

/// `memory.max`'s text: `Some(None)` for `max` (no limit), `Some(Some(bytes))` for a limit,
/// `None` when it is neither.
pub fn parse_memory_max(text: &str) -> Option<Option<u64>> {
    match text.trim() {
        "max" => Some(None),
        n => n.parse().ok().map(Some),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_one_slot_per_core_and_never_fewer_than_two() {
        assert_eq!(default_max(1), 2);
        assert_eq!(default_max(2), 2);
        assert_eq!(default_max(16), 16);
        assert_eq!(RunQueue::new(0).max(), 1, "a queue always has a slot");
    }

    #[test]
    fn runs_start_up_to_the_limit_then_wait_first_come_first_served_across_profiles() {
        let mut q = RunQueue::new(2);
        assert_eq!(q.ask(1, 0, true), Asked::Admitted);
        assert_eq!(q.ask(2, 1, true), Asked::Admitted);
        assert_eq!(q.ask(3, 2, true), Asked::Queued { place: 1 });
        assert_eq!(q.ask(4, 3, true), Asked::Queued { place: 2 });
        assert_eq!(q.ask(5, 4, true), Asked::Queued { place: 3 });
        assert_eq!((q.running(), q.queued()), (2, 3));
        // Nothing is free: nobody starts.
        assert_eq!(q.admit_next(true), None);
        q.leave(2);
        assert_eq!(
            q.admit_next(true),
            Some(Waiter {
                who: 3,
                since_ms: 2
            })
        );
        assert_eq!(q.admit_next(true), None, "one freed slot, one start");
        assert_eq!(q.place(4), Some(1));
        assert_eq!(q.place(5), Some(2));
        q.leave(1);
        q.leave(3);
        assert_eq!(q.admit_next(true).map(|w| w.who), Some(4));
        assert_eq!(q.admit_next(true).map(|w| w.who), Some(5));
        assert_eq!((q.running(), q.queued()), (2, 0));
    }

    #[test]
    fn a_newcomer_never_passes_the_queue_even_when_a_slot_is_free() {
        let mut q = RunQueue::new(1);
        assert_eq!(q.ask(1, 0, true), Asked::Admitted);
        assert_eq!(q.ask(2, 1, true), Asked::Queued { place: 1 });
        q.leave(1);
        // A slot is free but 2 waits ahead: 3 queues behind it.
        assert_eq!(q.ask(3, 2, true), Asked::Queued { place: 2 });
        assert_eq!(q.admit_next(true).map(|w| w.who), Some(2));
    }

    #[test]
    fn a_profile_that_asks_again_is_never_queued_twice() {
        let mut q = RunQueue::new(1);
        assert_eq!(q.ask(1, 0, true), Asked::Admitted);
        assert_eq!(q.ask(1, 1, true), Asked::Admitted, "running already");
        assert_eq!(q.ask(2, 2, true), Asked::Queued { place: 1 });
        assert_eq!(q.ask(3, 3, true), Asked::Queued { place: 2 });
        assert_eq!(q.ask(2, 4, true), Asked::Queued { place: 1 });
        assert_eq!(q.queued(), 2);
        // Its `since` is the first ask's.
        q.leave(1);
        assert_eq!(
            q.admit_next(true),
            Some(Waiter {
                who: 2,
                since_ms: 2
            })
        );
    }

    #[test]
    fn one_that_gives_up_waiting_leaves_the_queue_and_the_others_move_up() {
        let mut q = RunQueue::new(1);
        q.ask(1, 0, true);
        q.ask(2, 1, true);
        q.ask(3, 2, true);
        q.leave(2);
        assert_eq!(q.place(3), Some(1));
        assert!(!q.is_running(2));
        q.leave(42);
        assert_eq!((q.running(), q.queued()), (1, 1));
    }

    #[test]
    fn short_memory_holds_every_start_back_until_it_is_back() {
        let mut q = RunQueue::new(4);
        assert_eq!(q.ask(1, 0, false), Asked::Queued { place: 1 });
        assert_eq!(q.ask(2, 0, true), Asked::Queued { place: 2 }, "behind 1");
        assert!(q.could_admit());
        assert_eq!(q.admit_next(false), None);
        assert_eq!(q.admit_next(true).map(|w| w.who), Some(1));
        assert_eq!(q.admit_next(true).map(|w| w.who), Some(2));
        assert!(!q.could_admit());
    }

    #[test]
    fn available_memory_is_the_least_of_the_machine_and_every_limited_cgroup() {
        let gib = 1u64 << 30;
        let unit = CgroupMemory {
            limit: Some(4 * gib),
            usage: 3 * gib,
        };
        let parent = CgroupMemory {
            limit: None,
            usage: 10 * gib,
        };
        assert_eq!(available(Some(8 * gib), &[unit, parent]), Some(gib));
        assert_eq!(available(Some(gib / 2), &[unit]), Some(gib / 2));
        assert_eq!(available(Some(8 * gib), &[parent]), Some(8 * gib));
        assert_eq!(available(None, &[unit]), Some(gib));
        assert_eq!(available(None, &[]), None);
        // Usage over the limit (it happens briefly): nothing is available.
        let over = CgroupMemory {
            limit: Some(gib),
            usage: 2 * gib,
        };
        assert_eq!(available(Some(8 * gib), &[over]), Some(0));
    }

    #[test]
    fn memory_holds_a_run_back_only_under_a_set_threshold_that_can_be_read() {
        assert!(memory_ok(Some(100), None));
        assert!(memory_ok(None, Some(100)), "unknown never blocks");
        assert!(memory_ok(Some(100), Some(100)));
        assert!(!memory_ok(Some(99), Some(100)));
    }

    #[test]
    fn proc_and_cgroup_files_are_read_as_the_kernel_writes_them() {
        let meminfo =
            "MemTotal:       24576000 kB\nMemFree:         1000 kB\nMemAvailable:   20000000 kB\n";
        assert_eq!(parse_meminfo(meminfo), Some(20_000_000 * 1024));
        assert_eq!(parse_meminfo("MemTotal: 1 kB\n"), None);
        assert_eq!(
            cgroup_paths("0::/user.slice/user-0.slice/agentchat-host.service\n"),
            vec![
                "/user.slice/user-0.slice/agentchat-host.service".to_string(),
                "/user.slice/user-0.slice".to_string(),
                "/user.slice".to_string(),
            ]
        );
        assert!(cgroup_paths("0::/\n").is_empty());
        assert!(cgroup_paths("1:name=systemd:/x\n").is_empty(), "v1 only");
        assert_eq!(parse_memory_max("max\n"), Some(None));
        assert_eq!(parse_memory_max("1073741824\n"), Some(Some(1 << 30)));
        assert_eq!(parse_memory_max("lots"), None);
    }
}

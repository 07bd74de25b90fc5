//! The process's run queue on the page (`listen::admission`, issue 27): how many runs go, how
//! many profiles wait for a slot, and how long they waited. One set per process, without a
//! `profile` label, and only on a host's page (`listen --all`): a single listener has no queue.

use super::Histogram;
use super::defs::{QUEUE_WAIT, QUEUE_WAIT_BUCKETS, RUNS_QUEUED, RUNS_RUNNING};
use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::Duration;

#[derive(Debug)]
struct Inner {
    running: usize,
    queued: usize,
    wait: Histogram,
}

/// The queue's samples; nothing is on the page until the queue first says something.
#[derive(Debug, Default)]
pub struct QueueSamples {
    inner: Mutex<Option<Inner>>,
}

impl QueueSamples {
    fn with(&self, f: impl FnOnce(&mut Inner)) {
        let mut g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let i = g.get_or_insert_with(|| Inner {
            running: 0,
            queued: 0,
            wait: Histogram::new(QUEUE_WAIT_BUCKETS),
        });
        f(i);
    }

    /// Runs going and profiles waiting, now.
    pub fn set(&self, running: usize, queued: usize) {
        self.with(|i| {
            i.running = running;
            i.queued = queued;
        });
    }

    /// A run started after waiting `waited` for its slot (zero when one was free).
    pub fn waited(&self, waited: Duration) {
        self.with(|i| i.wait.observe(waited.as_secs_f64()));
    }

    /// The three families, when the queue has said anything.
    pub(super) fn render(&self, out: &mut String) {
        let g = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(i) = g.as_ref() else {
            return;
        };
        for (def, v) in [(&RUNS_RUNNING, i.running), (&RUNS_QUEUED, i.queued)] {
            let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
            let _ = writeln!(out, "# TYPE {} {}", def.name, def.kind);
            let _ = writeln!(out, "{} {v}", def.name);
        }
        let name = QUEUE_WAIT.name;
        let _ = writeln!(out, "# HELP {name} {}", QUEUE_WAIT.help);
        let _ = writeln!(out, "# TYPE {name} {}", QUEUE_WAIT.kind);
        let mut cumulative = 0;
        for (bound, n) in i.wait.bounds.iter().zip(&i.wait.counts) {
            cumulative += n;
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound:?}\"}} {cumulative}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", i.wait.count);
        let _ = writeln!(out, "{name}_sum {:?}", i.wait.sum);
        let _ = writeln!(out, "{name}_count {}", i.wait.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_is_off_the_page_until_it_says_something_then_counts_and_waits() {
        let q = QueueSamples::default();
        let mut page = String::new();
        q.render(&mut page);
        assert!(page.is_empty());
        q.set(2, 3);
        q.waited(Duration::ZERO);
        q.waited(Duration::from_millis(1500));
        q.render(&mut page);
        for line in [
            "agentchat_runs_running 2",
            "agentchat_runs_queued 3",
            "agentchat_run_queue_wait_seconds_bucket{le=\"0.1\"} 1",
            "agentchat_run_queue_wait_seconds_bucket{le=\"2.0\"} 2",
            "agentchat_run_queue_wait_seconds_bucket{le=\"+Inf\"} 2",
            "agentchat_run_queue_wait_seconds_sum 1.5",
            "agentchat_run_queue_wait_seconds_count 2",
        ] {
            assert!(page.lines().any(|l| l == line), "{line} in\n{page}");
        }
    }
}

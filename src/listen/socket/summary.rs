//! The frames' log: what bursts of frames came to, summed up at most every `SUMMARY_EVERY`.

use crate::core::frames::FrameType;
use crate::log_events;
use std::time::Duration;

/// What some frames came to: counted by type, skipped, acked, and the wakes they asked for.
#[derive(Default)]
pub(super) struct Tally {
    /// Every inbound message, control frames included.
    pub(super) frames: u64,
    pub(super) types: TypeCounts,
    pub(super) skipped: u64,
    pub(super) acked: u64,
    /// Wake labels in first-seen order, each with how many frames asked for it.
    pub(super) wakes: Vec<(String, u64)>,
}

impl Tally {
    pub(super) fn wake(&mut self, label: &str, n: u64) {
        match self.wakes.iter_mut().find(|(l, _)| l == label) {
            Some((_, m)) => *m += n,
            None => self.wakes.push((label.to_string(), n)),
        }
    }

    fn add(&mut self, other: Tally) {
        self.frames += other.frames;
        self.types.add(&other.types);
        self.skipped += other.skipped;
        self.acked += other.acked;
        for (label, n) in other.wakes {
            self.wake(&label, n);
        }
    }

    /// One line: counts by frame type, acks and wakes. At info when something woke, was acked or
    /// skipped; heartbeats and pings alone are debug.
    fn log(&self) {
        let wakes = self
            .wakes
            .iter()
            .map(|(label, n)| format!("{label}:{n}"))
            .collect::<Vec<_>>()
            .join(",");
        let t = &self.types;
        macro_rules! summary {
            ($level:expr) => {
                tracing::event!(
                    $level,
                    event = %log_events::FRAMES,
                    frames = self.frames,
                    message_new = t.message_new,
                    wake = t.wake,
                    invite = t.invite,
                    hello = t.hello,
                    heartbeat = t.heartbeat,
                    other = t.other,
                    skipped = self.skipped,
                    acked = self.acked,
                    wakes = %wakes,
                    "frames handled"
                )
            };
        }
        if self.wakes.is_empty() && self.acked == 0 && self.skipped == 0 {
            summary!(tracing::Level::DEBUG);
        } else {
            summary!(tracing::Level::INFO);
        }
    }
}

/// How often, at most, a summary line is written while frames keep coming. Short enough that
/// separate events (a message, then an invite a moment later) keep lines of their own, written as
/// they happen; long enough that a flood writes ten lines a second, not one per frame.
const SUMMARY_EVERY: Duration = Duration::from_millis(100);

/// The frames' log: a burst after a quiet `SUMMARY_EVERY` gets its line at once; the bursts that
/// follow within that time are added up and get one line when it ends. A timer runs only while
/// bursts wait to be summed up: a lone burst (a heartbeat) leaves none behind.
#[derive(Default)]
pub(super) struct SummaryLog {
    pending: Tally,
    /// Until when a new burst is added up instead of logged at once: `SUMMARY_EVERY` after the
    /// last line.
    until: Option<tokio::time::Instant>,
}

impl SummaryLog {
    pub(super) fn record(&mut self, burst: Tally) {
        let now = tokio::time::Instant::now();
        self.pending.add(burst);
        match self.until {
            Some(until) if now < until => {}
            // The time is up (its timer has not fired yet, or nothing was pending): this burst
            // and whatever waits get their line now.
            _ => {
                self.flush();
                self.until = Some(now + SUMMARY_EVERY);
            }
        }
    }

    /// When the bursts added up so far are logged; `None` when there are none.
    pub(super) fn due(&self) -> Option<tokio::time::Instant> {
        self.until.filter(|_| self.pending.frames > 0)
    }

    /// The time is over: log what it added up.
    pub(super) fn on_due(&mut self) {
        self.flush();
        self.until = Some(tokio::time::Instant::now() + SUMMARY_EVERY);
    }

    /// Logs what is pending now (the time is over, or the connection ended).
    pub(super) fn flush(&mut self) {
        if self.pending.frames > 0 {
            std::mem::take(&mut self.pending).log();
        }
    }
}

/// Text frames of a burst by type.
#[derive(Default)]
pub(super) struct TypeCounts {
    message_new: u64,
    wake: u64,
    invite: u64,
    hello: u64,
    heartbeat: u64,
    /// `group.deleted`, `message.read`, `presence.update`, `typing.*`, ... and unknown types.
    other: u64,
}

impl TypeCounts {
    fn add(&mut self, o: &TypeCounts) {
        self.message_new += o.message_new;
        self.wake += o.wake;
        self.invite += o.invite;
        self.hello += o.hello;
        self.heartbeat += o.heartbeat;
        self.other += o.other;
    }

    pub(super) fn count(&mut self, t: FrameType) {
        let n = match t {
            FrameType::MessageNew => &mut self.message_new,
            FrameType::Wake => &mut self.wake,
            FrameType::GroupInviteReceived => &mut self.invite,
            FrameType::HelloOk => &mut self.hello,
            FrameType::Heartbeat => &mut self.heartbeat,
            FrameType::GroupDeleted | FrameType::Other => &mut self.other,
        };
        *n += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(n: u64) -> Tally {
        Tally {
            frames: n,
            ..Tally::default()
        }
    }

    /// A lone burst is logged at once and arms no timer; bursts within `SUMMARY_EVERY` wait for
    /// one line, which the timer writes, or the first burst after the time is up if that comes
    /// first: nothing pending is ever left behind a later line.
    #[tokio::test(start_paused = true)]
    async fn the_summary_log_sums_bursts_up_and_times_only_what_waits() {
        let mut log = SummaryLog::default();
        log.record(frames(1));
        assert_eq!((log.pending.frames, log.due()), (0, None), "a lone burst");
        log.record(frames(2));
        log.record(frames(3));
        assert_eq!(log.pending.frames, 5);
        let due = log.due().expect("a timer while bursts wait");
        tokio::time::advance(SUMMARY_EVERY).await;
        assert!(tokio::time::Instant::now() >= due);
        // The timer has not fired yet: the next burst takes what waits with it.
        log.record(frames(4));
        assert_eq!((log.pending.frames, log.due()), (0, None));
        log.record(frames(5));
        tokio::time::advance(SUMMARY_EVERY).await;
        log.on_due();
        assert_eq!((log.pending.frames, log.due()), (0, None));
    }
}

//! The frames' log: what bursts of frames came to, summed up at most every `SUMMARY_EVERY`.

use crate::frames::FrameType;
use crate::log_events;

/// What some frames came to: counted by type, skipped, acked, and the wakes they asked for.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Tally {
    /// Every inbound message, control frames included.
    pub(crate) frames: u64,
    pub(crate) types: TypeCounts,
    pub(crate) skipped: u64,
    pub(crate) acked: u64,
    /// Wake labels in first-seen order, each with how many frames asked for it.
    pub(crate) wakes: Vec<(String, u64)>,
}

impl Tally {
    pub(crate) fn wake(&mut self, label: &str, n: u64) {
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
const SUMMARY_EVERY_MS: u64 = 100;

/// The frames' log: a burst after a quiet `SUMMARY_EVERY` gets its line at once; the bursts that
/// follow within that time are added up and get one line when it ends. A timer runs only while
/// bursts wait to be summed up: a lone burst (a heartbeat) leaves none behind.
#[derive(Debug, Default)]
pub(crate) struct SummaryLog {
    pending: Tally,
    /// Until when (monotonic ms) a new burst is added up instead of logged at once:
    /// `SUMMARY_EVERY_MS` after the last line.
    until: Option<u64>,
}

impl SummaryLog {
    pub(crate) fn record(&mut self, burst: Tally, now: u64) {
        self.pending.add(burst);
        match self.until {
            Some(until) if now < until => {}
            // The time is up (its timer has not fired yet, or nothing was pending): this burst
            // and whatever waits get their line now.
            _ => {
                self.flush();
                self.until = Some(now + SUMMARY_EVERY_MS);
            }
        }
    }

    /// When the bursts added up so far are logged; `None` when there are none.
    pub(crate) fn due(&self) -> Option<u64> {
        self.until.filter(|_| self.pending.frames > 0)
    }

    /// The time is over: log what it added up.
    pub(crate) fn on_due(&mut self, now: u64) {
        self.flush();
        self.until = Some(now + SUMMARY_EVERY_MS);
    }

    /// Logs what is pending now (the time is over, or the connection ended).
    pub(crate) fn flush(&mut self) {
        if self.pending.frames > 0 {
            std::mem::take(&mut self.pending).log();
        }
    }
}

/// Text frames of a burst by type.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct TypeCounts {
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

    pub(crate) fn count(&mut self, t: FrameType) {
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

    /// A lone burst is logged at once and arms no timer; bursts within `SUMMARY_EVERY_MS` wait
    /// for one line, which the timer writes, or the first burst after the time is up if that
    /// comes first: nothing pending is ever left behind a later line.
    #[test]
    fn the_summary_log_sums_bursts_up_and_times_only_what_waits() {
        let mut log = SummaryLog::default();
        log.record(frames(1), 0);
        assert_eq!((log.pending.frames, log.due()), (0, None), "a lone burst");
        log.record(frames(2), 0);
        log.record(frames(3), 0);
        assert_eq!(log.pending.frames, 5);
        let due = log.due().expect("a timer while bursts wait");
        assert_eq!(due, SUMMARY_EVERY_MS);
        // The timer has not fired yet: the next burst takes what waits with it.
        log.record(frames(4), SUMMARY_EVERY_MS);
        assert_eq!((log.pending.frames, log.due()), (0, None));
        log.record(frames(5), SUMMARY_EVERY_MS);
        log.on_due(2 * SUMMARY_EVERY_MS);
        assert_eq!((log.pending.frames, log.due()), (0, None));
    }
}

//! The lines a listener adds to its history (`crate::history`): each run's start and end, each
//! hold of the run policy from the cycle that held to the one that ran or the hold's end, each
//! queued wait that came to no run. Built from what the cycle reported, never a message body.

use super::cycle::Report;
use crate::history::{After, HoldNote, Kind, Outcome as Ended, Record};
use crate::status::{Held, NoRunReason, Outcome};
use crate::time::rfc3339_ms;

/// The hold whose record is open (written at its start, ended when it is over).
#[derive(Debug, Default)]
pub(super) struct Holds {
    open: Option<Record>,
}

/// A run's line: at its start (`running`) or, with the cycle's outcome, at its end.
pub(super) fn run(profile: &str, report: &Report, ended: bool) -> Record {
    let last = &report.last;
    let started = report
        .run_started_ms
        .or_else(|| crate::history::unix_ms(&last.started_at))
        .unwrap_or(0);
    let mut r = Record::new(last.id.clone(), Kind::Run, profile, started, Ended::Running);
    r.reason = last.reasons.join(",");
    r.waited(&report.waited);
    r.run_kind = last.run_kind.map(|k| k.as_str().to_string());
    r.log = last.run_log.clone();
    r.conversations = report.conversations.clone();
    if let Some((place, waited)) = report.queued {
        r.queue_place = Some(place);
        r.queued_ms = Some(waited);
    }
    r.counted = report.run_started_ms.is_some();
    if !ended {
        return r;
    }
    r.ended_at = last.ended_at.clone();
    let exit = report.run_exit.map(|(e, _)| e).unwrap_or_default();
    r.outcome = match last.outcome {
        Some(Outcome::Completed) => Ended::Completed,
        Some(Outcome::Unusable) => Ended::Refused,
        _ if exit.timed_out => Ended::TimedOut,
        _ => Ended::Failed,
    };
    if r.outcome == Ended::Refused {
        r.counted = false;
    }
    r.exit = exit.code;
    r.signal = exit.signal;
    if let Some(why) = &last.failure {
        r.set_failure(why);
    }
    r.duration_ms = report.run_exit.map(|(_, d)| d);
    if let Some(spent) = report.spent {
        // What the ledger counts: the run's report, or its budget where it ended unreported.
        r.cost_usd = spent.cost_usd;
        r.tokens = spent.tokens;
        r.cost_estimated = spent.estimated;
    } else if let Some(rep) = &report.run_report {
        r.cost_usd = rep.cost_usd;
        r.tokens = rep.usage.as_ref().map(|u| u.total());
    }
    r.after = report.after.clone().map(|a| After {
        dismissed: last.invites_dismissed,
        ..a
    });
    r
}

/// A cycle whose run waited for a slot and never started: its line.
pub(super) fn queued(profile: &str, report: &Report) -> Option<Record> {
    let last = &report.last;
    let (place, waited) = report.queued?;
    if last.outcome != Some(Outcome::NoRun) {
        return None;
    }
    let started = crate::history::unix_ms(&last.started_at).unwrap_or(0);
    let mut r = Record::new(
        last.id.clone(),
        Kind::Queued,
        profile,
        started,
        Ended::NoRun,
    );
    r.reason = last.reasons.join(",");
    r.waited(&report.waited);
    r.ended_at = last.ended_at.clone();
    r.queue_place = Some(place);
    r.queued_ms = Some(waited);
    r.no_run_reason = last
        .no_run_reason
        .map(|w| NoRunReason::as_str(w).to_string());
    r.counted = false;
    Some(r)
}

impl Holds {
    /// The run policy's hold before and after a cycle's end: the lines that end a hold that is
    /// over (or changed its reason) and start a new one; a cycle the same hold held again is
    /// counted in it.
    pub(super) fn cycle(
        &mut self,
        profile: &str,
        report: &Report,
        before: Option<Held>,
        now: Option<Held>,
        now_ms: i64,
    ) -> Vec<Record> {
        let same = |a: &Held, b: &Held| a.reason == b.reason && a.key == b.key;
        let mut lines = Vec::new();
        match (&before, &now) {
            (Some(b), Some(n)) if same(b, n) => {
                if let Some(open) = self.open.as_mut().and_then(|r| r.hold.as_mut())
                    && report.last.no_run_reason == Some(NoRunReason::Held)
                {
                    open.wakes = open.wakes.saturating_add(1);
                    open.until.clone_from(&n.until);
                }
                return lines;
            }
            (Some(_), _) => lines.extend(self.ended(now_ms)),
            (None, _) => {}
        }
        if let Some(n) = now {
            let mut r = Record::new(
                report.last.id.clone(),
                Kind::Hold,
                profile,
                now_ms,
                Ended::Held,
            );
            r.reason = report.last.reasons.join(",");
            r.waited(&report.waited);
            r.hold = Some(HoldNote {
                reason: n.reason,
                key: n.key,
                until: n.until,
                wakes: 1,
            });
            lines.push(r.clone());
            self.open = Some(r);
        }
        lines
    }

    /// The hold is over: its end line.
    pub(super) fn ended(&mut self, now_ms: i64) -> Option<Record> {
        let mut r = self.open.take()?;
        r.ended_at = Some(rfc3339_ms(now_ms));
        Some(r)
    }
}

/// `listen --once`'s lines: its run's (which the caps count), or its hold's, opened and closed
/// at once.
pub fn of_once(profile: &str, report: &Report, held: Option<Held>, now_ms: i64) -> Vec<Record> {
    let mut lines: Vec<Record> = report
        .run_exit
        .map(|_| run(profile, report, true))
        .into_iter()
        .collect();
    let mut holds = Holds::default();
    lines.extend(holds.cycle(profile, report, None, held, now_ms));
    lines.extend(holds.ended(now_ms));
    lines
}

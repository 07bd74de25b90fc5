//! The single-run invite rule (contract 4 last paragraph, `turn-outcome.cases.json`
//! `single_run_invite_cases`): an invite two completed runs left pending, the second ending at least
//! `pace_ms` after the first counted one, is dismissed. The memory is serialisable so a restart keeps it.
//! Times are wall-clock unix milliseconds, because the memory outlives the process.
//!
//! `Dismiss` is an intent, not a fact: the memory keeps the invite's count until the caller
//! reports the dismissal confirmed ([`InviteMemory::confirm_dismissed`]), so a dismiss call that
//! failed is made again by the next completed run that leaves the invite pending, instead of that
//! run counting it afresh.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

pub const SINGLE_RUN_PACE_MS: u64 = 60_000;

/// Per invite: when the counted run ended.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct InviteMemory {
    pub counted: BTreeMap<String, u64>,
}

/// What the rule says about one invite after a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InviteVerdict {
    /// First completed run that left it pending: remembered.
    Counted,
    /// Second completed run, at least the pace later: dismiss it on the server. It stays
    /// remembered until [`InviteMemory::confirm_dismissed`], so a failed dismiss is retried by the
    /// next completed run.
    Dismiss,
    /// Second completed run too soon after the counted one: counts nothing.
    SilentPaced,
    /// Gone from a complete list: answered, forgotten.
    Forgotten,
    /// Not seen by this run (arrived during it, the run failed, or the list was truncated): nothing.
    NotCounted,
}

/// What the listener saw around one run.
#[derive(Debug, Clone)]
pub struct RunObservation<'a> {
    /// Invite ids on the tray before the run.
    pub before: &'a [String],
    /// Invite ids on the tray after the run.
    pub after: &'a [String],
    /// The after-list is complete (`invites` present and `invites_truncated` false).
    pub after_complete: bool,
    pub run_completed: bool,
    pub run_ended_at_ms: u64,
}

impl InviteMemory {
    /// Applies one run; returns a verdict per invite id involved, sorted by id.
    ///
    /// Involved: every id on the before or after list, plus remembered ids a complete after-list
    /// no longer shows (reported `Forgotten`). A failed run changes nothing and reports every
    /// listed id `NotCounted` (contract 4: a failed turn records nothing).
    pub fn apply_run(
        &mut self,
        obs: &RunObservation<'_>,
        pace_ms: u64,
    ) -> Vec<(String, InviteVerdict)> {
        let before: BTreeSet<&str> = obs.before.iter().map(String::as_str).collect();
        let after: BTreeSet<&str> = obs.after.iter().map(String::as_str).collect();
        let mut ids: BTreeSet<String> = before.union(&after).map(|s| (*s).to_owned()).collect();
        if !obs.run_completed {
            return ids
                .into_iter()
                .map(|id| (id, InviteVerdict::NotCounted))
                .collect();
        }
        if obs.after_complete {
            ids.extend(self.counted.keys().cloned());
        }
        ids.into_iter()
            .map(|id| {
                let verdict = self.judge(&id, &before, &after, obs, pace_ms);
                (id, verdict)
            })
            .collect()
    }

    /// The server confirmed a dismissal the rule asked for (`200`, or `404 INVITE_NOT_FOUND`:
    /// no longer pending, nothing left to dismiss): forget the invite. Until then the count stays.
    pub fn confirm_dismissed(&mut self, id: &str) {
        self.counted.remove(id);
    }

    /// A complete invite list read without a run around it (for example a tray with no invite
    /// before a run): every remembered invite it does not show was answered, so it is forgotten
    /// (`docs/decisions.md`). Returns the forgotten ids, sorted. An incomplete list proves nothing: no change.
    pub fn forget_unlisted(&mut self, listed: &[String], complete: bool) -> Vec<String> {
        if !complete {
            return Vec::new();
        }
        let gone: Vec<String> = self
            .counted
            .keys()
            .filter(|id| !listed.contains(id))
            .cloned()
            .collect();
        for id in &gone {
            self.counted.remove(id);
        }
        gone
    }

    fn judge(
        &mut self,
        id: &str,
        before: &BTreeSet<&str>,
        after: &BTreeSet<&str>,
        obs: &RunObservation<'_>,
        pace_ms: u64,
    ) -> InviteVerdict {
        if !after.contains(id) {
            if obs.after_complete {
                self.counted.remove(id);
                return InviteVerdict::Forgotten;
            }
            // Maybe only cut off by the truncated list: keep what we know.
            return InviteVerdict::NotCounted;
        }
        if !before.contains(id) {
            // Arrived during the run: the run may never have seen it.
            return InviteVerdict::NotCounted;
        }
        match self.counted.get(id) {
            None => {
                self.counted.insert(id.to_owned(), obs.run_ended_at_ms);
                InviteVerdict::Counted
            }
            // Kept until the caller confirms the dismissal.
            Some(&counted_at) if obs.run_ended_at_ms.saturating_sub(counted_at) >= pace_ms => {
                InviteVerdict::Dismiss
            }
            Some(_) => InviteVerdict::SilentPaced,
        }
    }
}

impl InviteVerdict {
    /// The word used in `turn-outcome.cases.json`, logs and status.
    pub fn as_str(&self) -> &'static str {
        match self {
            InviteVerdict::Counted => "counted",
            InviteVerdict::Dismiss => "dismiss",
            InviteVerdict::SilentPaced => "silent_paced",
            InviteVerdict::Forgotten => "forgotten",
            InviteVerdict::NotCounted => "not_counted",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    fn run(
        m: &mut InviteMemory,
        before: &[&str],
        after: &[&str],
        complete: bool,
        completed: bool,
        at: u64,
    ) -> Vec<(String, InviteVerdict)> {
        let (b, a) = (ids(before), ids(after));
        m.apply_run(
            &RunObservation {
                before: &b,
                after: &a,
                after_complete: complete,
                run_completed: completed,
                run_ended_at_ms: at,
            },
            SINGLE_RUN_PACE_MS,
        )
    }

    #[test]
    fn counted_then_paced_then_dismissed() {
        let mut m = InviteMemory::default();
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, true, 1_000),
            vec![("i".into(), InviteVerdict::Counted)]
        );
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, true, 60_999),
            vec![("i".into(), InviteVerdict::SilentPaced)]
        );
        assert_eq!(m.counted.get("i"), Some(&1_000));
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, true, 61_000),
            vec![("i".into(), InviteVerdict::Dismiss)]
        );
        assert_eq!(m.counted.get("i"), Some(&1_000), "kept until confirmed");
        m.confirm_dismissed("i");
        assert!(m.counted.is_empty());
    }

    #[test]
    fn a_failed_dismiss_keeps_the_count_and_the_next_completed_run_dismisses_again() {
        let mut m = InviteMemory::default();
        run(&mut m, &["i"], &["i"], true, true, 1_000);
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, true, 61_000),
            vec![("i".into(), InviteVerdict::Dismiss)]
        );
        // The dismiss call failed: nothing confirmed. A failed run after it changes nothing...
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, false, 62_000),
            vec![("i".into(), InviteVerdict::NotCounted)]
        );
        // ...and the next completed run dismisses again, it does not count afresh.
        assert_eq!(
            run(&mut m, &["i"], &["i"], true, true, 63_000),
            vec![("i".into(), InviteVerdict::Dismiss)]
        );
        m.confirm_dismissed("i");
        assert!(m.counted.is_empty());
        // Confirming an invite the memory does not hold is harmless.
        m.confirm_dismissed("other");
    }

    #[test]
    fn failed_run_counts_nothing() {
        let mut m = InviteMemory::default();
        assert_eq!(
            run(&mut m, &["i"], &[], true, false, 1_000),
            vec![("i".into(), InviteVerdict::NotCounted)]
        );
        assert!(m.counted.is_empty());
    }

    #[test]
    fn gone_from_complete_list_forgets_but_truncated_list_keeps() {
        let mut m = InviteMemory::default();
        run(&mut m, &["i"], &["i"], true, true, 0);
        assert_eq!(
            run(&mut m, &["i"], &[], false, true, 100_000),
            vec![("i".into(), InviteVerdict::NotCounted)]
        );
        assert!(m.counted.contains_key("i"));
        // Remembered but not even on the before list: a complete list still forgets it.
        assert_eq!(
            run(&mut m, &[], &[], true, true, 200_000),
            vec![("i".into(), InviteVerdict::Forgotten)]
        );
        assert!(m.counted.is_empty());
    }

    #[test]
    fn arrived_during_run_is_not_counted() {
        let mut m = InviteMemory::default();
        assert_eq!(
            run(&mut m, &[], &["new"], true, true, 0),
            vec![("new".into(), InviteVerdict::NotCounted)]
        );
        assert!(m.counted.is_empty());
    }

    #[test]
    fn a_complete_list_alone_forgets_what_it_no_longer_shows() {
        let mut m = InviteMemory::default();
        run(&mut m, &["a", "b"], &["a", "b"], true, true, 0);
        assert_eq!(m.forget_unlisted(&ids(&[]), false), Vec::<String>::new());
        assert_eq!(m.counted.len(), 2, "an incomplete list proves nothing");
        assert_eq!(m.forget_unlisted(&ids(&["b"]), true), ids(&["a"]));
        assert_eq!(m.counted.keys().collect::<Vec<_>>(), vec!["b"]);
        assert_eq!(m.forget_unlisted(&ids(&[]), true), ids(&["b"]));
        assert!(m.counted.is_empty());
    }

    #[test]
    fn memory_serialises_round_trip() {
        let mut m = InviteMemory::default();
        run(&mut m, &["gri_1"], &["gri_1"], true, true, 42);
        let json = serde_json::to_string(&m).unwrap();
        assert_eq!(serde_json::from_str::<InviteMemory>(&json).unwrap(), m);
    }
}

//! Whether the agent's runtime can run, and the way out when it cannot (docs/runtimes.md,
//! "Unusable until fixed"): an unusable runtime is looked at again on `recheck`'s backoff, a
//! check that passes ends it only if it started while the runtime was unusable, and a changed
//! binary gets a new chance. The data of each state lives in that state only. Pure: `now` is the
//! caller's milliseconds, `factor` the test time scale; `B` is the binary's stamp
//! (`runtime::agent_cli::BinaryStamp` in the listener).

use super::recheck::Recheck;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeHealth<B> {
    Usable {
        /// Looks of the last unusable stretch: a runtime that flaps backs off further; a run that
        /// works or a reload starts over ([`RuntimeHealth::start_over`]).
        looks: u32,
        /// Usable only on the word of a check (or a server wake while parked): the next run is
        /// the trial, and a refusal of it parks the runtime instead of looking again.
        trial: bool,
    },
    Unusable {
        why: String,
        /// The binary when it became unusable: a different one gets a new chance.
        binary: Option<B>,
        recheck: Recheck,
        /// A check is under way that started in this stretch: its pass ends it.
        checking: bool,
        /// Refused again by the run right after a check passed: the check cannot tell, so no
        /// look of the listener's own comes any more (contract 4: no retry ladder of its own);
        /// a server wake, a reload or a changed binary gives the next chance.
        parked: bool,
    },
}

/// What a runtime check's end changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckEnd {
    /// It passed while unusable: usable again; `was` is why it was not.
    Recovered { was: String },
    /// It failed while unusable: the next look is set.
    StillUnusable,
    /// Nothing: usable anyway, or the check started before this stretch.
    Nothing,
}

impl<B> Default for RuntimeHealth<B> {
    fn default() -> Self {
        RuntimeHealth::Usable {
            looks: 0,
            trial: false,
        }
    }
}

impl<B: PartialEq> RuntimeHealth<B> {
    /// Why no run can start, while none can.
    pub fn why(&self) -> Option<&str> {
        match self {
            RuntimeHealth::Usable { .. } => None,
            RuntimeHealth::Unusable { why, .. } => Some(why),
        }
    }

    pub fn is_usable(&self) -> bool {
        matches!(self, RuntimeHealth::Usable { .. })
    }

    /// The runtime cannot work (the check at start, or a run refused by it): no run until it is
    /// fixed, and a look again on the backoff; or, when the run refused was the trial of a check
    /// that passed (or of a server wake while parked), parked: no look of its own. While already
    /// unusable the newest why and binary are kept and the look already set stays. True when it
    /// parked.
    pub fn mark_unusable(&mut self, why: String, binary: Option<B>, now: u64, factor: f64) -> bool {
        match self {
            RuntimeHealth::Usable { looks, trial } => {
                let parked = *trial;
                let mut recheck = Recheck::after_looks(*looks);
                if !parked {
                    recheck.schedule(now, factor);
                }
                *self = RuntimeHealth::Unusable {
                    why,
                    binary,
                    recheck,
                    checking: false,
                    parked,
                };
                parked
            }
            RuntimeHealth::Unusable {
                why: w,
                binary: b,
                recheck,
                parked,
                ..
            } => {
                *w = why;
                *b = binary;
                if !*parked {
                    recheck.schedule(now, factor);
                }
                *parked
            }
        }
    }

    /// Usable on the word of a check (or a server wake while parked): the next run is the trial.
    pub fn is_trial(&self) -> bool {
        matches!(self, RuntimeHealth::Usable { trial: true, .. })
            || matches!(self, RuntimeHealth::Unusable { parked: true, .. })
    }

    /// The next run is a trial (it came on the listener's own word, not the server's): refused,
    /// the runtime parks instead of being looked at on the backoff.
    pub fn as_trial(&mut self) {
        if let RuntimeHealth::Usable { trial, .. } = self {
            *trial = true;
        }
    }

    /// Parked: refused again right after a check passed, and waiting for a server wake, a reload
    /// or a changed binary.
    pub fn is_parked(&self) -> bool {
        matches!(self, RuntimeHealth::Unusable { parked: true, .. })
    }

    /// A wake of the server's while parked: one more trial (usable, the run that comes is it).
    /// Why it was not, if it left.
    pub fn server_wake(&mut self) -> Option<String> {
        if !self.is_parked() {
            return None;
        }
        let was = self.leave();
        if let RuntimeHealth::Usable { trial, .. } = self {
            *trial = true;
        }
        was
    }

    /// Usable again (a reload, a passed check, a changed binary): why it was not, if it was not.
    pub fn leave(&mut self) -> Option<String> {
        match std::mem::take(self) {
            RuntimeHealth::Usable { looks, trial } => {
                *self = RuntimeHealth::Usable { looks, trial };
                None
            }
            RuntimeHealth::Unusable { why, recheck, .. } => {
                *self = RuntimeHealth::Usable {
                    looks: recheck.attempt(),
                    trial: false,
                };
                Some(why)
            }
        }
    }

    /// A reload (a person acted): usable again, its looks from the first delay; why it was not,
    /// if it was not. A runtime parked before it (its login check passes and runs are refused
    /// all the same) gets the reload's run as its trial: refused again, it parks again rather
    /// than looking on its own and starting a second run that the check cannot vouch for
    /// (contract 4; the simulator's `no_private_retry_ladder`, seed 133).
    pub fn reload(&mut self) -> Option<String> {
        let parked = self.is_parked();
        self.start_over();
        let was = self.leave();
        if parked && let RuntimeHealth::Usable { trial, .. } = self {
            *trial = true;
        }
        was
    }

    /// A person acted (a reload), or a run worked: the next stretch's looks start from the first
    /// delay. A look already set stays set.
    pub fn start_over(&mut self) {
        match self {
            RuntimeHealth::Usable { looks, trial } => {
                *looks = 0;
                *trial = false;
            }
            RuntimeHealth::Unusable { recheck, .. } => recheck.forget_looks(),
        }
    }

    /// When the next look is due.
    pub fn recheck_at(&self) -> Option<u64> {
        match self {
            RuntimeHealth::Usable { .. } | RuntimeHealth::Unusable { parked: true, .. } => None,
            RuntimeHealth::Unusable { recheck, .. } => recheck.at(),
        }
    }

    /// SIGHUP: look now. False when usable (nothing to look at).
    pub fn recheck_now(&mut self, now: u64) -> bool {
        match self {
            RuntimeHealth::Usable { .. } => false,
            RuntimeHealth::Unusable {
                recheck, parked, ..
            } => {
                // A person asked: a parked runtime is looked at too.
                *parked = false;
                recheck.now(now);
                true
            }
        }
    }

    /// The look is due: the caller starts a check (true), whose end goes to
    /// [`RuntimeHealth::check_ended`].
    pub fn begin_check(&mut self) -> bool {
        match self {
            RuntimeHealth::Usable { .. } => false,
            RuntimeHealth::Unusable {
                recheck, checking, ..
            } => {
                recheck.clear();
                *checking = true;
                true
            }
        }
    }

    /// A check ended: a pass ends the stretch it started in; a failure while unusable sets the
    /// next look.
    pub fn check_ended(&mut self, passed: bool, now: u64, factor: f64) -> CheckEnd {
        let RuntimeHealth::Unusable {
            recheck, checking, ..
        } = self
        else {
            return CheckEnd::Nothing;
        };
        let recovers = std::mem::take(checking);
        if !passed {
            recheck.schedule(now, factor);
            return CheckEnd::StillUnusable;
        }
        if !recovers {
            return CheckEnd::Nothing;
        }
        match self.leave() {
            Some(was) => {
                // The check cannot tell a login from a refused model call: the run that comes is
                // its trial.
                if let RuntimeHealth::Usable { trial, .. } = self {
                    *trial = true;
                }
                CheckEnd::Recovered { was }
            }
            None => CheckEnd::Nothing,
        }
    }

    /// Unusable, and the binary is not the one it was unusable with (installed, updated,
    /// replaced): worth a try.
    pub fn binary_changed(&self, now: Option<&B>) -> bool {
        match self {
            RuntimeHealth::Usable { .. } => false,
            RuntimeHealth::Unusable { binary, .. } => binary.as_ref() != now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Health = RuntimeHealth<&'static str>;

    #[test]
    fn a_run_of_the_listeners_own_wake_is_a_trial_and_its_refusal_parks() {
        let mut h = Health::default();
        h.as_trial();
        assert!(h.mark_unusable("refused".into(), None, 0, 1.0));
        assert_eq!(h.recheck_at(), None, "no look of its own");
    }

    #[test]
    fn a_reload_of_a_parked_runtime_makes_its_run_the_trial_and_a_refusal_parks_it_again() {
        let mut h = Health::default();
        h.mark_unusable("refused".into(), None, 0, 1.0);
        assert!(h.begin_check());
        h.check_ended(true, 1_000, 1.0);
        assert!(
            h.mark_unusable("refused".into(), None, 2_000, 1.0),
            "the trial parks"
        );
        assert_eq!(h.reload(), Some("refused".into()));
        assert!(h.is_usable() && h.is_trial());
        assert!(
            h.mark_unusable("refused".into(), None, 3_000, 1.0),
            "refused again: parked, no look of its own"
        );
        assert_eq!(h.recheck_at(), None);
        // Unusable but not parked (its checks fail): a reload's run is no trial.
        let mut h = Health::default();
        h.mark_unusable("not logged in".into(), None, 0, 1.0);
        h.reload();
        assert!(!h.mark_unusable("not logged in".into(), None, 1_000, 1.0));
        assert!(h.recheck_at().is_some());
    }

    #[test]
    fn an_unusable_runtime_is_looked_at_on_the_backoff_until_a_check_passes() {
        let mut h = Health::default();
        assert!(h.is_usable());
        assert_eq!((h.why(), h.recheck_at()), (None, None));
        h.mark_unusable("no claude".into(), None, 1_000, 1.0);
        assert_eq!(h.why(), Some("no claude"));
        assert_eq!(h.recheck_at(), Some(6_000));
        assert!(h.begin_check());
        assert_eq!(h.recheck_at(), None, "one check at a time");
        assert_eq!(h.check_ended(false, 7_000, 1.0), CheckEnd::StillUnusable);
        assert_eq!(
            h.recheck_at(),
            Some(17_000),
            "the next look waits twice as long"
        );
        assert!(h.begin_check());
        assert_eq!(
            h.check_ended(true, 18_000, 1.0),
            CheckEnd::Recovered {
                was: "no claude".into()
            }
        );
        assert!(h.is_usable());
        assert_eq!(h.recheck_at(), None);
    }

    #[test]
    fn a_check_from_before_the_stretch_ends_nothing() {
        let mut h = Health::default();
        assert!(!h.begin_check(), "nothing to look at while usable");
        assert_eq!(h.check_ended(true, 0, 1.0), CheckEnd::Nothing);
        h.mark_unusable("refused".into(), None, 0, 1.0);
        h.begin_check();
        // A reload ends the stretch while the check runs; a run makes it unusable again.
        assert!(h.leave().is_some());
        h.mark_unusable("refused again".into(), None, 10, 1.0);
        assert_eq!(h.check_ended(true, 20, 1.0), CheckEnd::Nothing);
        assert_eq!(
            h.why(),
            Some("refused again"),
            "the old check's pass predates it"
        );
    }

    #[test]
    fn a_flapping_runtime_backs_off_further_until_it_starts_over() {
        let mut h = Health::default();
        h.mark_unusable("x".into(), None, 0, 1.0);
        h.begin_check();
        h.check_ended(false, 0, 1.0);
        assert_eq!(h.recheck_at(), Some(10_000));
        assert_eq!(h.leave().as_deref(), Some("x"));
        assert_eq!(h.leave(), None, "said once");
        h.mark_unusable("x".into(), None, 100_000, 1.0);
        assert_eq!(
            h.recheck_at(),
            Some(120_000),
            "the third look of the same trouble"
        );
        h.start_over();
        assert_eq!(h.recheck_at(), Some(120_000), "a look set stays");
        h.leave();
        h.start_over();
        h.mark_unusable("x".into(), None, 200_000, 1.0);
        assert_eq!(
            h.recheck_at(),
            Some(205_000),
            "a run that worked starts over"
        );
    }

    #[test]
    fn a_changed_binary_or_sighup_gets_a_look_now() {
        let mut h = Health::default();
        assert!(!h.binary_changed(Some(&"a")));
        assert!(!h.recheck_now(5));
        h.mark_unusable("old".into(), Some("a"), 0, 100.0);
        assert_eq!(h.recheck_at(), Some(50), "scaled");
        assert!(!h.binary_changed(Some(&"a")));
        assert!(h.binary_changed(Some(&"b")));
        assert!(
            h.binary_changed(None),
            "a binary that went away is a change too"
        );
        assert!(h.recheck_now(7));
        assert_eq!(h.recheck_at(), Some(7));
    }
}

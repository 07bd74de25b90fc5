//! The way out of missing texts: while the configured runtime has none, they are fetched again
//! on `recheck`'s backoff, `texts_missing` is said once per stretch without them, and a cycle
//! that found none for a card that waited spent a wake, which texts that come back make good
//! (a `recovered` wake). Pure: `now` is the caller's milliseconds, `factor` the test time scale.

use super::recheck::Recheck;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TextsRecovery {
    /// `texts_missing` was said in this stretch without texts.
    missing_said: bool,
    /// A cycle found no texts for a card that waited.
    owed: bool,
    recheck: Recheck,
}

impl TextsRecovery {
    /// A cycle found no texts for a card that waited: texts that come back wake.
    pub fn owe(&mut self, now: u64, factor: f64) {
        self.owed = true;
        self.recheck.schedule(now, factor);
    }

    /// No texts for the runtime came, and none are in use: fetched again on the backoff. True
    /// when this is the first of the stretch, to be said.
    pub fn missing(&mut self, now: u64, factor: f64) -> bool {
        self.recheck.schedule(now, factor);
        !std::mem::replace(&mut self.missing_said, true)
    }

    /// Texts for the runtime came: the stretch and its backoff end. True when a wake was spent
    /// meanwhile and the tray is to be read now.
    pub fn came(&mut self) -> bool {
        self.recheck.reset();
        self.missing_said = false;
        std::mem::take(&mut self.owed)
    }

    /// The runtime reads other texts now: a new stretch without them begins, to be said again.
    pub fn runtime_changed(&mut self) {
        self.missing_said = false;
    }

    /// When the next fetch is due.
    pub fn recheck_at(&self) -> Option<u64> {
        self.recheck.at()
    }

    /// The fetch is due (the caller fetches); the next is set by its answer.
    pub fn fetching(&mut self) {
        self.recheck.clear();
    }

    /// SIGHUP: fetch now.
    pub fn recheck_now(&mut self, now: u64) {
        self.recheck.now(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_texts_are_said_once_and_fetched_on_the_backoff() {
        let mut t = TextsRecovery::default();
        assert_eq!(t.recheck_at(), None);
        assert!(t.missing(0, 1.0), "the first of the stretch is said");
        assert_eq!(t.recheck_at(), Some(5_000));
        t.fetching();
        assert!(!t.missing(5_000, 1.0), "said once per stretch");
        assert_eq!(t.recheck_at(), Some(15_000));
        assert!(!t.came(), "nothing owed: no wake");
        assert_eq!(t.recheck_at(), None);
        assert!(t.missing(20_000, 1.0), "a new stretch is said again");
        assert_eq!(t.recheck_at(), Some(25_000), "from the first delay");
    }

    #[test]
    fn texts_that_come_back_after_a_spent_wake_wake_once() {
        let mut t = TextsRecovery::default();
        t.owe(0, 1.0);
        assert_eq!(t.recheck_at(), Some(5_000));
        assert!(t.came());
        assert!(!t.came(), "made good once");
    }

    #[test]
    fn a_runtime_change_is_a_new_stretch_and_sighup_fetches_now() {
        let mut t = TextsRecovery::default();
        assert!(t.missing(0, 1.0));
        t.runtime_changed();
        assert!(t.missing(1, 1.0));
        t.recheck_now(2);
        assert_eq!(t.recheck_at(), Some(2));
    }
}

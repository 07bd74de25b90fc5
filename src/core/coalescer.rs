//! Turns wakes into cycles (design 3, contract 4 step 1, `coalescer.cases.json`). Pure: the caller
//! passes the time in milliseconds and asks when the next cycle is due.
//!
//! Idle, first wake at t0: due at min(last_wake + quiet, t0 + max_delay). During a cycle any number
//! of wakes earn exactly one more, due at min(max(cycle_end, last_wake + quiet), cycle_end + max_delay).

#[derive(Debug, Clone)]
pub struct Coalescer {
    quiet_ms: u64,
    max_delay_ms: u64,
}

impl Coalescer {
    pub fn new(quiet_ms: u64, max_delay_ms: u64) -> Coalescer {
        Coalescer { quiet_ms, max_delay_ms }
    }
    /// Records a wake at `now`.
    pub fn wake(&mut self, now: u64) {
        let _ = now;
        todo!("core: coalescer")
    }
    /// When the next cycle should start, if one is owed and none is running.
    pub fn due(&self) -> Option<u64> {
        todo!("core: coalescer {} {}", self.quiet_ms, self.max_delay_ms)
    }
    /// Starts the owed cycle if it is due at `now`. Returns true when a cycle started.
    pub fn try_start(&mut self, now: u64) -> bool {
        let _ = now;
        todo!("core: coalescer")
    }
    /// The running cycle ended at `now`.
    pub fn end(&mut self, now: u64) {
        let _ = now;
        todo!("core: coalescer")
    }
    pub fn is_running(&self) -> bool {
        todo!("core: coalescer")
    }
}

//! The simulator (`scripts/simulate`, docs/decisions.md "The simulator"): the real process
//! machine (`core::host::Host`) with one to eight real listeners (`core::listener::Listener`)
//! against the sim's own server (`crate::sim`'s store, routes, budgets and timers) on a virtual
//! clock, with a simulated runtime and transport, and faults, peers and the user's own acts drawn
//! from one seed. After every step it checks the invariants (`checks`); a seed replays exactly,
//! and its trace's SHA-256 says so.
//!
//! Nothing here runs in the daemon: only `examples/simulate.rs` and the tests use it. Each
//! simulation is single-threaded and deterministic: no real clock (the store's clock is virtual
//! on the simulating thread, `crate::sim::clock::set_virtual`), no randomness but the seed's
//! (`core::rng::Rng`; the store's ids come from `fastrand` seeded from it), no hash map
//! iteration, no tokio.
//!
//! Parts: `scenario` (what the seed draws; `findings`: the scenarios built by hand), `world`
//! (time, the queue of events, the loop), `profile` (what the world keeps of each),
//! `perform` (each effect, as `listen::driver` performs it for real), `server` (the store's doors
//! and the faults in front of them), `conn` (a socket's frames on their way), `runs` (the
//! runtime), `acts` (peers, the user, faults) and `draw` (when they come), `checks` (the
//! invariants), `trace`.

mod acts;
mod checks;
mod conn;
mod draw;
mod findings;
mod perform;
mod profile;
mod runs;
mod scenario;
mod server;
pub mod storm;
mod trace;
mod world;

pub use checks::{HOLD_END_UNREADABLE, INVARIANTS, MUTED_PAST_CUT, RUN_REFUSED};
pub use scenario::Shape;

/// What one simulation did.
#[derive(Debug, Clone)]
pub struct Report {
    pub seed: u64,
    /// Steps of the machine: inputs handled and deadlines ticked.
    pub steps: u64,
    /// Simulated time, ms.
    pub simulated_ms: u64,
    /// The SHA-256 of the whole event trace.
    pub trace: String,
    pub violation: Option<Violation>,
    /// The trace's last lines (`trace::SHORT`).
    pub last_lines: Vec<String>,
    /// Every line, when asked for.
    pub all_lines: Option<Vec<String>>,
    /// Breaches of skipped invariants, by name.
    pub skipped: Vec<(String, u64)>,
    /// Situations reached (`checks::RUN_REFUSED`, ...): a scenario built around a fault says
    /// it got there.
    pub reached: Vec<&'static str>,
    /// The most socket attempts from the one IP in any minute (contract 3.4 allows 300).
    pub ip_peak: u64,
    /// Each dial the server's budgets let through: when (simulated ms), and the profile's index.
    pub accepted_dials: Vec<(u64, usize)>,
}

/// An invariant that did not hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// The invariant's name (`INVARIANTS`).
    pub invariant: &'static str,
    /// The profile's name, when one profile broke it.
    pub profile: Option<String>,
    /// Simulated time, ms.
    pub at_ms: u64,
    pub detail: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "invariant `{}` broken at {:.3} s",
            self.invariant,
            self.at_ms as f64 / 1000.0
        )?;
        if let Some(p) = &self.profile {
            write!(f, " by profile {p}")?;
        }
        write!(f, ": {}", self.detail)
    }
}

/// How to run a simulation.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// Keep every line of the trace (`Report::all_lines`).
    pub keep_trace: bool,
    /// Invariants whose breach is only counted, not the end (to look past a known failure).
    pub skip: Vec<String>,
}

/// Runs seed `seed` as `scenario` draws it.
pub fn run_seed(seed: u64, opts: &Options) -> Report {
    run_shape(scenario::Shape::Seeded(seed), opts)
}

/// Runs a scenario: one drawn from a seed, or one built by hand around a known fault.
pub fn run_shape(shape: Shape, opts: &Options) -> Report {
    let plan = scenario::Scenario::draw(&shape);
    let mut w = world::World::new(plan, opts);
    w.run();
    w.report()
}

#[cfg(test)]
mod tests;

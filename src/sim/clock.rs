//! One clock for every server timer. Contract durations (45 s heartbeat, 1/5/30/180 min rungs,
//! 15 min / 24 h defer, budget windows, 5 s HELLO, the wake webhook's spacing and 24 h cycle)
//! run on a *server clock* that advances `time_scale` times faster than real time and can be
//! stepped forward (`POST /_sim/clock`); bodies keep real wall-clock timestamps. The simulator
//! (`crate::simulate`) runs the store on a virtual clock instead ([`set_virtual`]).

use std::cell::Cell;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// One reading of the simulator's virtual clock: the server clock's milliseconds and the server's
/// wall clock (Unix ms).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VirtualNow {
    pub server_ms: u64,
    pub wall_ms: u64,
}

thread_local! {
    /// The virtual time of the simulation running on this thread, if one is: the store is a
    /// plain value driven by one thread there, so the server clock and every time a body shows
    /// follow it instead of the real clocks.
    static VIRTUAL: Cell<Option<VirtualNow>> = const { Cell::new(None) };
}

/// Puts this thread's server on a virtual clock at `now` (the simulator moves it step by step),
/// or back on the real clocks (`None`).
pub fn set_virtual(now: Option<VirtualNow>) {
    VIRTUAL.with(|v| v.set(now));
}

fn virtual_now() -> Option<VirtualNow> {
    VIRTUAL.with(Cell::get)
}

#[derive(Debug, Clone)]
pub struct SimClock {
    start: Instant,
    scale: f64,
    /// Server-clock milliseconds added by `advance`, shared by every clone.
    stepped: Arc<AtomicU64>,
}

impl SimClock {
    pub fn new(scale: f64) -> SimClock {
        let scale = if scale.is_finite() && scale > 0.0 {
            scale
        } else {
            1.0
        };
        SimClock {
            start: Instant::now(),
            scale,
            stepped: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Steps the server clock `ms` forward at once, as if that much server time had passed: every
    /// timer that falls due in between comes due at the next tick (a test of a 24 h rule need not
    /// wait 24 h of scaled time). The clock never goes back.
    pub fn advance(&self, ms: u64) {
        self.stepped.fetch_add(ms, Ordering::Relaxed);
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// Server-clock milliseconds since the sim started (scaled).
    pub fn now_v(&self) -> u64 {
        if let Some(v) = virtual_now() {
            return v.server_ms;
        }
        let run = (self.start.elapsed().as_secs_f64() * 1000.0 * self.scale) as u64;
        run.saturating_add(self.stepped.load(Ordering::Relaxed))
    }

    /// The real duration that a contract duration of `ms` server-clock milliseconds takes.
    pub fn real(&self, ms: u64) -> Duration {
        Duration::from_secs_f64(ms as f64 / 1000.0 / self.scale)
    }

    /// Whole real seconds (at least 1) for a server-clock wait: what `Retry-After` and
    /// `retry_after=` say, because the client waits in real time.
    pub fn real_secs_ceil(&self, ms: u64) -> u64 {
        (self.real(ms).as_secs_f64().ceil() as u64).max(1)
    }
}

pub const SEC: u64 = 1000;
pub const MIN: u64 = 60 * SEC;
pub const HOUR: u64 = 60 * MIN;

/// Now, as bodies show times: RFC 3339 UTC with milliseconds, e.g. `2026-11-08T09:12:41.902Z`.
pub fn now_iso() -> String {
    crate::sys::time::rfc3339(wall_now())
}

/// The server's wall clock now: the real one, or the virtual one's.
pub fn wall_now() -> SystemTime {
    match virtual_now() {
        Some(v) => SystemTime::UNIX_EPOCH + Duration::from_millis(v.wall_ms),
        None => SystemTime::now(),
    }
}

/// Real Unix time in milliseconds (for the control API's precise logs).
pub fn unix_ms() -> u64 {
    crate::sys::time::unix_ms(wall_now())
}

/// Microseconds on the system's monotonic clock (`CLOCK_MONOTONIC`, the clock Python's
/// `time.monotonic_ns()` reads on Linux), for the control API's send and ack logs: a benchmark in
/// another process can line its own times up with them, and no wall-clock step moves them.
pub fn mono_us() -> u64 {
    if let Some(v) = virtual_now() {
        return v.server_ms.saturating_mul(1000);
    }
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes one `timespec` through the valid, exclusive pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if r != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000 + ts.tv_nsec as u64 / 1_000
}

/// `<prefix>_<16 base64url>`, the real id format.
pub fn new_id(prefix: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut s = String::with_capacity(prefix.len() + 17);
    s.push_str(prefix);
    s.push('_');
    for _ in 0..16 {
        s.push(ALPHABET[fastrand::usize(..64)] as char);
    }
    s
}

/// `del_<32 hex>`.
pub fn new_delivery_id() -> String {
    format!("del_{:016x}{:016x}", fastrand::u64(..), fastrand::u64(..))
}

/// An API key in the real format (`ac_live_…`).
pub fn new_key() -> String {
    let mut s = String::from("ac_live_");
    for _ in 0..32 {
        s.push(char::from_digit(fastrand::u32(..36), 36).unwrap_or('x'));
    }
    s
}

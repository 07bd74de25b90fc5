//! OS plumbing shared by every layer: files (`fs`), who holds a lock file (`flock`), processes
//! and their groups (`process`), time formatting (`time`), a time zone's offsets from the
//! system's zone files (`tz`), TLS (`tls`), cutting text to a length (`text`) and waiting on an
//! optional deadline or future (`wait`). Imports nothing else of the crate, so any module may use
//! it.

pub mod capped;
pub mod flock;
pub mod fs;
pub mod process;
pub mod text;
pub mod time;
pub mod tls;
pub mod tz;
pub mod wait;

//! OS plumbing shared by every layer: files (`fs`), who holds a lock file (`flock`), processes
//! and their groups (`process`), time formatting (`time`), TLS (`tls`), cutting text to a length
//! (`text`) and waiting on an optional deadline or future (`wait`). Imports nothing else of the
//! crate, so any module may use it.

pub mod flock;
pub mod fs;
pub mod process;
pub mod text;
pub mod time;
pub mod tls;
pub mod wait;

//! OS plumbing shared by every layer: files (`fs`), processes and their groups (`process`), time
//! formatting (`time`), TLS (`tls`) and cutting text to a length (`text`). Imports nothing else of
//! the crate, so any module may use it.

pub mod fs;
pub mod process;
pub mod text;
pub mod time;
pub mod tls;

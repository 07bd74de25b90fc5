//! `stamp FILE LABEL`: appends `LABEL <microseconds on CLOCK_MONOTONIC>` as one line to FILE.
//!
//! `scripts/bench` builds this with `rustc` and puts it first in the `sh` run both listeners
//! start, so "the run started" is observed the same way for both, on the clock the sim's send and
//! ack logs use (`mono_us`). Linux only, like the harness (it reads /proc).

use std::io::Write;

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

const CLOCK_MONOTONIC: i32 = 1;

unsafe extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

fn main() {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes one timespec through the valid, exclusive pointer.
    if unsafe { clock_gettime(CLOCK_MONOTONIC, &mut ts) } != 0 {
        std::process::exit(1);
    }
    let us = ts.tv_sec * 1_000_000 + ts.tv_nsec / 1_000;
    let mut args = std::env::args().skip(1);
    let (Some(file), Some(label)) = (args.next(), args.next()) else {
        eprintln!("usage: stamp FILE LABEL");
        std::process::exit(2);
    };
    let line = format!("{label} {us}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if written.is_err() {
        std::process::exit(1);
    }
}

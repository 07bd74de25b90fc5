//! The event trace of one simulation: every step as one line, hashed as it goes (SHA-256, so a
//! seed's hash is the same on every run and machine), and the last lines kept for a failure's
//! report.

use sha2::{Digest, Sha256};
use std::collections::VecDeque;
use std::fmt::Write as _;

/// How many of the last lines a failure prints.
pub const SHORT: usize = 40;

pub struct Trace {
    hash: Sha256,
    last: VecDeque<String>,
    /// Every line is kept as well (`--trace`), for reading one seed whole.
    all: Option<Vec<String>>,
}

impl Trace {
    pub fn new(keep_all: bool) -> Trace {
        Trace {
            hash: Sha256::new(),
            last: VecDeque::with_capacity(SHORT + 1),
            all: keep_all.then(Vec::new),
        }
    }

    /// One line at true time `t` (ms since the start).
    pub fn line(&mut self, t: u64, what: std::fmt::Arguments<'_>) {
        let mut s = String::with_capacity(96);
        let _ = write!(s, "{:>10}.{:03} ", t / 1000, t % 1000);
        let _ = s.write_fmt(what);
        self.hash.update(s.as_bytes());
        self.hash.update(b"\n");
        if let Some(all) = self.all.as_mut() {
            all.push(s.clone());
        }
        if self.last.len() == SHORT {
            self.last.pop_front();
        }
        self.last.push_back(s);
    }

    /// The SHA-256 of every line so far, in hex.
    pub fn digest(&self) -> String {
        let d = self.hash.clone().finalize();
        d.iter().fold(String::with_capacity(64), |mut s, b| {
            let _ = write!(s, "{b:02x}");
            s
        })
    }

    pub fn last(&self) -> Vec<String> {
        self.last.iter().cloned().collect()
    }

    pub fn all(&self) -> Option<&[String]> {
        self.all.as_deref()
    }
}

//! A run's stdout and stderr on their way to its log (`supervisor`'s relay): read to the end
//! whatever the cap keeps, so a run that writes without end is never blocked on a full pipe, and
//! capped at `RunLimits::log_max` (the first half as it comes, then only the newest half).

use crate::core::run_report::{self, Lines};
use crate::sys::time::rfc3339_seconds;
use std::fs::File;
use std::io::Write;
use std::time::SystemTime;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::sync::watch;

/// Bytes read from the run's pipes at a time.
const OUTPUT_CHUNK: usize = 64 * 1024;

/// The first write to a run's log that failed (a full or read-only disk): the log ends there.
/// Shared by the supervisor's own lines and the output relay, so the cut is said once, when the
/// run ends (`event=run_log_cut`).
pub(super) type Cut = std::sync::Arc<std::sync::OnceLock<String>>;

/// Copies the run's stdout and stderr into its log, capped (`CappedLog`), until both are closed.
/// Keeps reading past the cap, so a run that writes without end is never blocked on a full pipe.
/// Stdout also goes through `lines`, whose report is said on the channel each time it changes.
pub(super) async fn relay_output(
    mut out: Option<tokio::process::ChildStdout>,
    mut err: Option<tokio::process::ChildStderr>,
    mut log: CappedLog,
    (mut lines, reported): (Lines, watch::Sender<run_report::RunReport>),
) -> CappedLog {
    let mut out_buf = vec![0u8; OUTPUT_CHUNK];
    let mut err_buf = vec![0u8; OUTPUT_CHUNK];
    let say = |lines: &Lines| {
        let now = lines.report();
        reported.send_if_modified(|r| std::mem::replace(r, now) != now);
    };
    while out.is_some() || err.is_some() {
        // Unbiased on purpose: fair between the two pipes, whose order the OS decides anyway.
        tokio::select! {
            n = read_some(&mut out, &mut out_buf) => match n {
                Some(n) => {
                    let chunk = out_buf.get(..n).unwrap_or_default();
                    log.push(chunk);
                    lines.push(chunk);
                    say(&lines);
                }
                None => {
                    out = None;
                    lines.finish();
                    say(&lines);
                }
            },
            n = read_some(&mut err, &mut err_buf) => match n {
                Some(n) => log.push(err_buf.get(..n).unwrap_or_default()),
                None => err = None,
            },
        }
    }
    log
}

/// The next bytes from `pipe`: `None` at its end (or on an error); never ready without a pipe.
async fn read_some<R: AsyncRead + Unpin>(pipe: &mut Option<R>, buf: &mut [u8]) -> Option<usize> {
    match crate::sys::wait::some(pipe.as_mut().map(|p| p.read(buf))).await {
        Ok(0) | Err(_) => None,
        Ok(n) => Some(n),
    }
}

/// The run's output on its way to the log: the first half of `max` bytes is written as it comes;
/// past it, only the newest half is kept, in memory, and written by `finish` after a line that
/// says which bytes were left out. Failed writes (a full disk) are ignored: the run goes on.
pub(super) struct CappedLog {
    /// `None`: no log could be opened; the output is read (the run must never block on a full
    /// pipe) and dropped.
    file: Option<File>,
    /// Bytes still written as they come.
    head_left: u64,
    /// Every byte of output seen so far.
    seen: u64,
    tail: Tail,
    /// Set by the first write that failed.
    cut: Cut,
}

impl CappedLog {
    pub(super) fn new(file: Option<File>, max: u64, cut: Cut) -> CappedLog {
        let head = max - max / 2;
        CappedLog {
            file,
            head_left: head,
            seen: 0,
            tail: Tail::new(usize::try_from(max / 2).unwrap_or(usize::MAX)),
            cut,
        }
    }

    fn push(&mut self, mut data: &[u8]) {
        self.seen += data.len() as u64;
        if self.file.is_none() {
            return;
        }
        if self.head_left > 0 {
            let now = data
                .len()
                .min(usize::try_from(self.head_left).unwrap_or(usize::MAX));
            let (head, rest) = data.split_at_checked(now).unwrap_or((data, &[]));
            self.write(head);
            self.head_left -= head.len() as u64;
            data = rest;
        }
        self.tail.push(data);
    }

    pub(super) fn finish(mut self) {
        let Some(mut file) = self.file.take() else {
            return;
        };
        let (older, newer) = self.tail.parts();
        let kept = (older.len() + newer.len()) as u64;
        let head = self.seen - self.tail.total;
        let left_out = self.tail.total - kept;
        if left_out > 0 {
            let line = format!(
                "\n=== {} output cut: bytes {head} to {} of {} left out (run_log_max_bytes); the last {kept} bytes follow\n",
                rfc3339_seconds(SystemTime::now()),
                head + left_out,
                self.seen,
            );
            self.written(file.write_all(line.as_bytes()));
        }
        self.written(file.write_all(older));
        self.written(file.write_all(newer));
    }

    /// Writes to the log, if there is one; a failed write must not fail the run.
    fn write(&mut self, bytes: &[u8]) {
        if let Some(f) = &mut self.file {
            let r = f.write_all(bytes);
            self.written(r);
        }
    }

    /// A failed write marks the log cut (the first error is kept).
    fn written(&self, r: std::io::Result<()>) {
        if let Err(e) = r {
            let _ = self.cut.set(e.to_string());
        }
    }
}

/// The newest `cap` bytes pushed into it (a ring, allocated on first use).
struct Tail {
    cap: usize,
    buf: std::collections::VecDeque<u8>,
    /// Every byte pushed.
    total: u64,
}

impl Tail {
    fn new(cap: usize) -> Tail {
        Tail {
            cap,
            buf: std::collections::VecDeque::new(),
            total: 0,
        }
    }

    fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        if data.is_empty() || self.cap == 0 {
            return;
        }
        if self.buf.capacity() == 0 {
            self.buf.reserve_exact(self.cap);
        }
        // Only the newest `cap` bytes of this push can stay; then the oldest go to make room.
        let data = data
            .get(data.len().saturating_sub(self.cap)..)
            .unwrap_or_default();
        let over = (self.buf.len() + data.len()).saturating_sub(self.cap);
        self.buf.drain(..over.min(self.buf.len()));
        self.buf.extend(data);
    }

    /// The kept bytes, oldest first, in two slices.
    fn parts(&self) -> (&[u8], &[u8]) {
        self.buf.as_slices()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tail_bytes(t: &Tail) -> Vec<u8> {
        let (a, b) = t.parts();
        [a, b].concat()
    }

    #[test]
    fn the_tail_keeps_the_newest_bytes_across_wraps_and_big_pushes() {
        let mut t = Tail::new(5);
        t.push(b"abc");
        assert_eq!(tail_bytes(&t), b"abc");
        t.push(b"defg");
        assert_eq!(tail_bytes(&t), b"cdefg");
        t.push(b"h");
        assert_eq!(tail_bytes(&t), b"defgh");
        t.push(b"0123456789");
        assert_eq!(tail_bytes(&t), b"56789");
        t.push(b"xy");
        assert_eq!(tail_bytes(&t), b"789xy");
        assert_eq!(t.total, 20);
    }

    fn capped(max: u64, pushes: &[&[u8]]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.log");
        let mut log = CappedLog::new(Some(File::create(&path).unwrap()), max, Cut::default());
        for p in pushes {
            log.push(p);
        }
        log.finish();
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn output_within_the_cap_is_kept_whole_and_in_order() {
        assert_eq!(capped(10, &[b"abc", b"defgh", b"ij"]), "abcdefghij");
    }

    #[test]
    fn output_past_the_cap_keeps_head_and_tail_and_says_what_was_left_out() {
        let text = capped(10, &[b"abcdefgh", b"ijklmnop", b"qrst"]);
        let (head, rest) = text.split_once('\n').unwrap();
        assert_eq!(head, "abcde");
        assert!(
            rest.contains("output cut: bytes 5 to 15 of 20 left out"),
            "{text}"
        );
        assert!(rest.ends_with("the last 5 bytes follow\npqrst"), "{text}");
    }
}

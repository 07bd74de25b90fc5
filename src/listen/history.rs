//! The state dir's history file (`core::history`): the driver appends each line the machine
//! asks for (`Effect::Record`) and compacts the file past its bounds; at a listener's start it
//! is read back into the run policy's ledger, the lines a dead listener could not write are
//! added, and an old `ledger.json` is taken into it once. `agentchat runs` and the page read it
//! with [`Tail`].
//!
//! An append is one `write(2)` of one line to a file opened `O_APPEND`, without an `fsync` (as
//! `status.json`): it happens on the driver's one thread right after a run's spawn and at its
//! end, where a slow disk's flush would hold up acks and heartbeats; a machine crash may lose the
//! last line. A compaction reads at most [`MAX_BYTES`] and writes at most [`KEEP_BYTES`], about
//! once every three thousand lines (docs/benchmarks.md measures it).

use crate::core::history::{
    self, Filter, KEEP_BYTES, KEEP_RECORDS, MAX_BYTES, MAX_LINE_BYTES, MAX_LINES, Record,
};
use crate::core::policy::{DayTotal, Ledger, Offsets, RunEntry};
use crate::listen::state_dir::StateDir;
use crate::log_events;
use crate::sys::fs;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The history's file in the state dir.
pub const FILE: &str = "history.jsonl";
/// The run policy's file before the history (issue 35): read once into the history, then removed.
const OLD_LEDGER: &str = "ledger.json";
/// The largest `ledger.json` taken in.
const MAX_OLD_LEDGER_BYTES: u64 = 16 * 1024 * 1024;
/// The most read of a file at once: its bound and a line's worth (a file made larger by hand is
/// read from its end).
const MAX_READ: u64 = MAX_BYTES + MAX_LINE_BYTES as u64;

/// One profile's history file as its listener writes it.
#[derive(Debug)]
pub struct Book {
    path: PathBuf,
    /// Lines and bytes in the file (those this listener found and wrote).
    lines: usize,
    bytes: u64,
}

impl Book {
    /// A book of the profile's history file that read nothing (what a start falls back on
    /// when reading it failed outright): lines are appended; its counts start at zero.
    pub fn unopened(state: &StateDir) -> Book {
        Book {
            path: state.path(FILE),
            lines: 0,
            bytes: 0,
        }
    }

    /// The profile's history at a listener's start: what it holds (a damaged line said once
    /// and skipped), the end lines a dead listener could not write added, and the ledger the
    /// caps count from.
    pub fn open(state: &StateDir, offsets: &dyn Offsets, now_ms: i64) -> (Book, Ledger) {
        let path = state.path(FILE);
        let mut book = Book {
            path,
            lines: 0,
            bytes: 0,
        };
        book.take_old_ledger(state, offsets);
        let mut tail = Tail::new(&book.path);
        let parsed = match tail.read() {
            Ok(chunk) => {
                book.bytes = tail.offset;
                let mut parsed = history::parse(&chunk.bytes);
                if chunk.cut {
                    // A line a crash cut (no listener writes meanwhile: this one holds the lock):
                    // a bad line, and the next one starts on a line of its own.
                    parsed.bad += 1;
                    parsed.lines += 1;
                    let ended =
                        fs::open_append_private(&book.path).and_then(|mut f| f.write_all(b"\n"));
                    if ended.is_ok() {
                        book.bytes = std::fs::metadata(&book.path).map_or(book.bytes, |m| m.len());
                    }
                }
                parsed
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => history::Parsed::default(),
            Err(e) => {
                tracing::warn!(event = %log_events::HISTORY_UNREADABLE, path = %book.path.display(), error = %e, "the run history cannot be read; it starts afresh (today's caps count from now)");
                history::Parsed::default()
            }
        };
        if parsed.bad > 0 {
            tracing::warn!(event = %log_events::HISTORY_UNREADABLE, path = %book.path.display(), bad_lines = parsed.bad, lines = parsed.lines, "lines of the run history are damaged and were skipped; the rest is kept");
        }
        book.lines = parsed.lines;
        let mut records = parsed.records;
        for end in history::unended(&records, now_ms) {
            if let Err(e) = book.append(&end, offsets) {
                tracing::warn!(event = %log_events::HISTORY_WRITE_FAILED, error = %e, "could not write the run history");
                break;
            }
            if let Some(r) = records.iter_mut().find(|r| r.id == end.id) {
                *r = end;
            }
        }
        let ledger = history::ledger(&records, offsets);
        (book, ledger)
    }

    /// Appends one line; past the bounds the file is compacted.
    pub fn append(&mut self, record: &Record, offsets: &dyn Offsets) -> std::io::Result<()> {
        let mut line = record.line();
        line.push('\n');
        let mut file = fs::open_append_private(&self.path)?;
        file.write_all(line.as_bytes())?;
        self.lines = self.lines.saturating_add(1);
        self.bytes = self.bytes.saturating_add(line.len() as u64);
        if self.lines >= MAX_LINES || self.bytes >= MAX_BYTES {
            self.compact(offsets)?;
        }
        Ok(())
    }

    /// Rewrites the file with what [`history::compact`] keeps.
    fn compact(&mut self, offsets: &dyn Offsets) -> std::io::Result<()> {
        let chunk = Tail::new(&self.path).read()?;
        let kept = history::compact(history::parse(&chunk.bytes).records, offsets);
        let mut out = String::with_capacity(KEEP_BYTES + MAX_LINE_BYTES);
        for r in &kept {
            out.push_str(&r.line());
            out.push('\n');
        }
        fs::write_atomic_unsynced(&self.path, out.as_bytes())?;
        tracing::info!(event = %log_events::HISTORY_COMPACTED, lines_before = self.lines, lines = kept.len(), bytes = out.len(), "the run history reached its bound; its oldest records were dropped");
        self.lines = kept.len();
        self.bytes = out.len() as u64;
        Ok(())
    }

    /// `ledger.json` of a listener before the history: its runs become history lines (their
    /// outcome `unknown`), its folded total a `carried` line, and the file goes.
    fn take_old_ledger(&mut self, state: &StateDir, offsets: &dyn Offsets) {
        let old = state.path(OLD_LEDGER);
        if self.path.exists() || !old.exists() {
            return;
        }
        let taken: OldLedger = match fs::read_regular_capped(&old, MAX_OLD_LEDGER_BYTES)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice(&b).map_err(|e| e.to_string()))
        {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(event = %log_events::HISTORY_UNREADABLE, path = %old.display(), error = %e, "the old run ledger could not be read; the history starts afresh");
                let _ = std::fs::remove_file(&old);
                return;
            }
        };
        let mut lines = Vec::new();
        if let Some(total) = taken.folded {
            let mut r = Record::new(
                format!("carried-{}", total.day),
                history::Kind::Carried,
                "",
                0,
                history::Outcome::Completed,
            );
            r.carried = Some(total);
            lines.push(r);
        }
        for run in taken.runs {
            let mut r = Record::new(
                format!("ledger-{}", run.started_ms),
                history::Kind::Run,
                "",
                run.started_ms,
                history::Outcome::Unknown,
            );
            r.cost_usd = run.cost_usd;
            r.tokens = run.tokens;
            r.conversations = run.conversations;
            lines.push(r);
        }
        // One write, already within the bounds: a ledger of 200,000 runs becomes the newest
        // records and one carried total in one pass (issue 38 item 7), not 200,000 appends.
        let kept = if lines.len() > KEEP_RECORDS {
            history::compact(lines, offsets)
        } else {
            lines
        };
        let mut out = String::new();
        for r in &kept {
            out.push_str(&r.line());
            out.push('\n');
        }
        if fs::write_atomic_unsynced(&self.path, out.as_bytes()).is_err() {
            return;
        }
        let _ = std::fs::remove_file(&old);
    }
}

/// `ledger.json` as a listener before the history wrote it.
#[derive(serde::Deserialize)]
struct OldLedger {
    #[serde(default)]
    runs: Vec<RunEntry>,
    #[serde(default)]
    folded: Option<DayTotal>,
}

/// The machine's own time zone, asked of the C library at each instant: a hold's end is shown
/// to the person at this machine in its local time. Only [`Offsets::offset_at`] is needed to
/// say a time; no change is looked for.
pub struct MachineZone;

impl Offsets for MachineZone {
    fn offset_at(&self, utc_ms: i64) -> i32 {
        crate::sys::time::local_offset_secs(utc_ms).unwrap_or(0)
    }
    fn next_change(&self, _: i64) -> Option<i64> {
        None
    }
}

/// The records `filter` keeps, newest first, at most `limit` (0: all).
pub fn newest_first<'a>(records: &'a [Record], filter: &Filter, limit: usize) -> Vec<&'a Record> {
    let mut kept: Vec<&Record> = records.iter().filter(|r| filter.keeps(r)).collect();
    kept.sort_by_key(|r| std::cmp::Reverse(r.started_ms().unwrap_or(0)));
    if limit > 0 {
        kept.truncate(limit);
    }
    kept
}

/// `2h`, `30m`, `3days` before now; `2026-12-01` (local midnight); an RFC 3339 time.
pub fn parse_since(s: &str, now_ms: i64) -> anyhow::Result<i64> {
    let s = s.trim();
    if let Ok(d) = humantime::parse_duration(s) {
        let back = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        return Ok(now_ms.saturating_sub(back));
    }
    if let Some(t) = history::unix_ms(s) {
        return Ok(t);
    }
    if let Some(midnight_utc) = history::unix_ms(&format!("{s}T00:00:00Z")) {
        let offset = crate::sys::time::local_offset_secs(midnight_utc).unwrap_or(0);
        return Ok(midnight_utc - i64::from(offset) * 1000);
    }
    anyhow::bail!("--since {s:?}: give a span (2h, 30m, 3days) or a date (2026-12-01)")
}

/// Complete lines read from a history file.
#[derive(Debug, Default)]
pub struct Chunk {
    pub bytes: Vec<u8>,
    /// The file was read from its start (the first read, or it was compacted or replaced since
    /// the last): what was read before is gone from it.
    pub from_start: bool,
    /// Bytes after the last complete line: a line being written, or one a crash cut.
    pub cut: bool,
}

/// A reader of one history file that reads only what was added since its last read.
#[derive(Debug, Clone)]
pub struct Tail {
    path: PathBuf,
    /// The file read last (device, inode) and how far.
    file: Option<(u64, u64)>,
    offset: u64,
}

impl Tail {
    pub fn new(path: &Path) -> Tail {
        Tail {
            path: path.to_path_buf(),
            file: None,
            offset: 0,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The complete lines added since the last read; the whole file (at most its bound, from its
    /// end) when it is new, replaced or shorter. A line still being written waits for the next
    /// read (`cut` says one is there).
    pub fn read(&mut self) -> std::io::Result<Chunk> {
        // Nothing added (the same file, as long as it was): a `stat`, no open.
        let unchanged = std::fs::metadata(&self.path)
            .is_ok_and(|m| self.file == Some((m.dev(), m.ino())) && m.len() == self.offset);
        if unchanged {
            return Ok(Chunk::default());
        }
        let (mut file, meta) = fs::open_regular(&self.path)?;
        let id = (meta.dev(), meta.ino());
        let len = meta.len();
        let from_start = self.file != Some(id) || len < self.offset;
        let start = if from_start {
            len.saturating_sub(MAX_READ)
        } else {
            self.offset
        };
        let want = len.saturating_sub(start).min(MAX_READ);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        file.take(want).read_to_end(&mut bytes)?;
        let mut skipped = 0;
        if from_start && start > 0 {
            // Read from the middle of an oversized file: its first, partial line is dropped.
            skipped = memchr_newline(&bytes).map_or(bytes.len(), |i| i + 1);
            bytes.drain(..skipped);
        }
        let whole = bytes
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |end| end + 1);
        let cut = bytes.len() > whole;
        bytes.truncate(whole);
        self.file = Some(id);
        self.offset = start + skipped as u64 + bytes.len() as u64;
        Ok(Chunk {
            bytes,
            from_start,
            cut,
        })
    }
}

fn memchr_newline(bytes: &[u8]) -> Option<usize> {
    bytes.iter().position(|&b| b == b'\n')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::{Kind, Outcome};
    use crate::core::policy::FixedOffset;

    fn run(id: &str, at: i64) -> Record {
        let mut r = Record::new(id.into(), Kind::Run, "p", at, Outcome::Completed);
        r.cost_usd = Some(0.25);
        r
    }

    #[test]
    fn a_tail_reads_only_what_was_added_and_everything_again_after_a_compaction() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        let mut book = Book {
            path: path.clone(),
            lines: 0,
            bytes: 0,
        };
        let z = FixedOffset(0);
        book.append(&run("a", 1), &z).unwrap();
        let mut tail = Tail::new(&path);
        let first = tail.read().unwrap();
        assert!(first.from_start);
        assert_eq!(history::parse(&first.bytes).records.len(), 1);
        assert!(tail.read().unwrap().bytes.is_empty());
        book.append(&run("b", 2), &z).unwrap();
        // Half a line being written waits for the next read.
        let mut f = fs::open_append_private(&path).unwrap();
        f.write_all(b"{\"id\":").unwrap();
        let next = tail.read().unwrap();
        assert!(!next.from_start);
        assert_eq!(history::parse(&next.bytes).records[0].id, "b");
        f.write_all(b"\"c\",\"kind\":\"run\",\"profile\":\"p\",\"started_at\":\"2026-12-01T00:00:00Z\",\"outcome\":\"completed\"}\n").unwrap();
        assert_eq!(
            history::parse(&tail.read().unwrap().bytes).records[0].id,
            "c"
        );
        book.compact(&z).unwrap();
        let again = tail.read().unwrap();
        assert!(again.from_start, "a compaction replaces the file");
        assert_eq!(history::parse(&again.bytes).records.len(), 3);
    }

    #[test]
    fn a_start_takes_an_old_ledger_in_once_and_ends_what_a_dead_listener_left_open() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::at(dir.path());
        let z = FixedOffset(0);
        let old = r#"{"runs":[{"started_ms":1000,"cost_usd":0.5,"conversations":["c"]},{"started_ms":2000}]}"#;
        std::fs::write(state.path(OLD_LEDGER), old).unwrap();
        let (mut book, ledger) = Book::open(&state, &z, 3_000);
        assert_eq!(ledger.runs().len(), 2);
        assert_eq!(ledger.day(3_000, &z).cost_usd, 0.5);
        assert!(!state.path(OLD_LEDGER).exists(), "one file, not two");
        let mut running = run("c1", 2_500);
        running.outcome = Outcome::Running;
        book.append(&running, &z).unwrap();
        let (_, ledger) = Book::open(&state, &z, 4_000);
        assert_eq!(
            ledger.runs().len(),
            3,
            "a run a dead listener started counts"
        );
        let bytes = std::fs::read(state.path(FILE)).unwrap();
        let parsed = history::parse(&bytes);
        let c1 = parsed.records.iter().find(|r| r.id == "c1").unwrap();
        assert_eq!(c1.outcome, Outcome::Interrupted);
        // A crash cut the last line: it costs itself, and the next line is whole.
        let mut f = fs::open_append_private(&state.path(FILE)).unwrap();
        f.write_all(b"{\"id\":\"c9\",\"ki").unwrap();
        let (mut book, ledger) = Book::open(&state, &z, 5_000);
        assert_eq!(ledger.runs().len(), 3);
        book.append(&run("c10", 4_500), &z).unwrap();
        let parsed = history::parse(&std::fs::read(state.path(FILE)).unwrap());
        assert_eq!(parsed.bad, 1, "the cut line only");
        assert!(parsed.records.iter().any(|r| r.id == "c10"));
    }
}

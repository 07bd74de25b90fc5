//! The live page (issue 35): every profile with its handle, state, hold and today's runs and
//! spend, sorted by what needs attention (stuck, failing, held), paginated and searchable by
//! handle; a 24-hour timeline per profile of wakes, runs by outcome and holds; the latest runs.
//! `listen --metrics-addr` serves it at `/` beside the metrics (`listen::metrics::serve`), and
//! `agentchat dashboard` serves it alone for the config's profiles.
//!
//! It reads what `agentchat runs` and `status` read, the profiles' `status.json` and history
//! files, so it says what they say and the listener keeps nothing for it. **Polling, not
//! server-sent events**: the page asks `/api/overview` every 2 s while it is visible, and the
//! endpoint keeps its bounds (one request per connection, each closed within 30 s, at most 32 at
//! once) that a held event stream would break; the listener's loop does no work for the page, open
//! or closed. While the page is open the server keeps the files it read ([`Page`]: the new lines
//! of each history since the last look, a status re-read only when its file changed) and forgets
//! them a minute after the last request, so nothing is held while nobody looks. The reads run on
//! tokio's blocking pool, never on the listener's one thread.
//!
//! Every asset is embedded in the binary (`assets/`): no CDN, no font, no script from elsewhere,
//! and a `Content-Security-Policy` that allows none. No message body ever reaches it: the
//! records hold none, and the page shows no run log (only its path; `agentchat runs show` prints
//! its tail on the user's terminal).

mod overview;

use crate::core::history::{self, Record};
use crate::listen::history::{FILE, Tail};
use crate::listen::state_dir::StateDir;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};
use tokio::time::Instant;

pub use overview::{Overview, Query};

const INDEX_HTML: &str = include_str!("assets/index.html");
const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// What the server keeps while the page is open is forgotten this long after the last request
/// (on tokio's clock, which the tests step).
pub const FORGET_AFTER: Duration = Duration::from_secs(60);
/// The newest records of a profile kept whole (for the latest runs and its last).
const KEEP_NEWEST: usize = 20;
/// The timeline's span.
pub const DAY_MS: i64 = 24 * 3_600_000;

/// A profile the page shows: its name, where its files are, or why it does not run.
#[derive(Debug, Clone)]
pub struct PageProfile {
    pub name: String,
    pub state_dir: Option<PathBuf>,
    /// Why it could not start (its config is wrong), when it could not.
    pub error: Option<String>,
}

/// One record as the page keeps it for the timeline and today's sums (a day of them per
/// profile: a few dozen bytes each, where a whole record is most of a kilobyte).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Mark {
    /// `run`, `hold` or `queued`.
    pub kind: history::Kind,
    pub outcome: history::Outcome,
    pub start: i64,
    /// `None`: not ended.
    pub end: Option<i64>,
    pub id: String,
    #[serde(skip)]
    pub cost: Option<f64>,
    #[serde(skip)]
    pub tokens: Option<u64>,
}

impl Mark {
    fn of(r: &Record) -> Option<Mark> {
        (r.kind != history::Kind::Carried).then_some(())?;
        Some(Mark {
            kind: r.kind,
            outcome: r.outcome,
            start: r.started_ms()?,
            end: r.ended_at.as_deref().and_then(history::unix_ms),
            id: r.id.clone(),
            cost: r.cost_usd,
            tokens: r.tokens,
        })
    }
}

/// One profile's files as the page last read them.
#[derive(Debug)]
struct Seen {
    tail: Tail,
    /// The last day's records as marks, oldest first.
    marks: Vec<Mark>,
    /// The newest records as their lines, oldest first: (id, start, line), at most
    /// [`KEEP_NEWEST`].
    newest: std::collections::VecDeque<(String, i64, String)>,
    status: Option<(SystemTime, crate::core::status::Status)>,
}

/// The page's server side: what it read, while it is looked at.
#[derive(Debug, Default)]
pub struct Page {
    seen: Mutex<Option<(Instant, HashMap<PathBuf, Seen>)>>,
    janitor: Mutex<bool>,
}

/// An answer: status, content type, body.
pub struct Answer {
    pub code: u16,
    pub content_type: &'static str,
    pub body: String,
}

impl Answer {
    fn ok(content_type: &'static str, body: String) -> Answer {
        Answer {
            code: 200,
            content_type,
            body,
        }
    }

    fn not_found(what: &str) -> Answer {
        Answer {
            code: 404,
            content_type: "text/plain; charset=utf-8",
            body: format!("{what}\n"),
        }
    }
}

/// The headers every page answer carries: nothing from elsewhere may load, nothing may frame it.
pub const SECURITY_HEADERS: [(&str, &str); 4] = [
    (
        "content-security-policy",
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "no-referrer"),
    ("x-frame-options", "DENY"),
];

/// Whether `path` is the page's (`/`, its assets, `/api/...`).
pub fn serves(path: &str) -> bool {
    matches!(path, "/" | "/index.html" | "/app.js" | "/app.css") || path.starts_with("/api/")
}

impl Page {
    pub fn new() -> Arc<Page> {
        Arc::new(Page::default())
    }

    /// The answer for `path` and its query, for `profiles`. Reads files: run it off the
    /// listener's loop (`tokio::task::spawn_blocking`).
    pub fn answer(&self, path: &str, query: &str, profiles: &[PageProfile]) -> Answer {
        match path {
            "/" | "/index.html" => Answer::ok("text/html; charset=utf-8", INDEX_HTML.into()),
            "/app.js" => Answer::ok("text/javascript; charset=utf-8", APP_JS.into()),
            "/app.css" => Answer::ok("text/css; charset=utf-8", APP_CSS.into()),
            "/api/overview" => {
                let q = Query::parse(query);
                let view = self.read(profiles, |seen, now_ms| {
                    overview::build(profiles, seen, &q, now_ms)
                });
                Answer::ok(
                    "application/json",
                    serde_json::to_string(&view).unwrap_or_default(),
                )
            }
            "/api/runs" => {
                let q = overview::RunsQuery::parse(query);
                let lines = self.read(profiles, |seen, now_ms| {
                    overview::runs(profiles, seen, &q, now_ms)
                });
                Answer::ok("application/x-ndjson", lines)
            }
            _ => match path.strip_prefix("/api/run/") {
                Some(id) => {
                    let found = self.read(profiles, |seen, _| overview::run(profiles, seen, id));
                    match found {
                        Some(r) => Answer::ok("application/json", r.line()),
                        None => Answer::not_found("no such run"),
                    }
                }
                None => Answer::not_found("not found"),
            },
        }
    }

    /// Brings each profile's files up to date (new history lines, a changed status) and hands
    /// them to `f`.
    fn read<T>(
        &self,
        profiles: &[PageProfile],
        f: impl FnOnce(&HashMap<PathBuf, Seen>, i64) -> T,
    ) -> T {
        let now_ms = i64::try_from(crate::sys::time::unix_ms(SystemTime::now())).unwrap_or(0);
        let mut guard = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let (used, seen) = guard.get_or_insert_with(|| (Instant::now(), HashMap::new()));
        *used = Instant::now();
        seen.retain(|dir, _| profiles.iter().any(|p| p.state_dir.as_deref() == Some(dir)));
        for dir in profiles.iter().filter_map(|p| p.state_dir.as_deref()) {
            let s = seen.entry(dir.to_path_buf()).or_insert_with(|| Seen {
                tail: Tail::new(&StateDir::at(dir).path(FILE)),
                marks: Vec::new(),
                newest: Default::default(),
                status: None,
            });
            refresh(s, dir, now_ms);
        }
        f(seen, now_ms)
    }

    /// Forgets what was read once nobody asked for [`FORGET_AFTER`]: a task that sleeps that
    /// long and looks, started by the first request after a forget, ended by the forget.
    pub async fn forget_when_idle(self: Arc<Page>) {
        {
            let mut running = self.janitor.lock().unwrap_or_else(|e| e.into_inner());
            if *running {
                return;
            }
            *running = true;
        }
        loop {
            tokio::time::sleep(FORGET_AFTER).await;
            let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
            if seen
                .as_ref()
                .is_none_or(|(used, _)| used.elapsed() >= FORGET_AFTER)
            {
                *seen = None;
                drop(seen);
                crate::sys::process::release_free_memory();
                *self.janitor.lock().unwrap_or_else(|e| e.into_inner()) = false;
                return;
            }
        }
    }

    /// Whether the page holds anything now (for the tests of its forgetting).
    pub fn holds_anything(&self) -> bool {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
}

/// A profile's new history lines and, when its file changed, its status.
fn refresh(s: &mut Seen, dir: &Path, now_ms: i64) {
    if let Ok(chunk) = s.tail.read() {
        if chunk.from_start {
            s.marks.clear();
            s.newest.clear();
        }
        for r in history::parse(&chunk.bytes).records {
            let Some(mark) = Mark::of(&r) else {
                continue;
            };
            let (id, start) = (mark.id.clone(), mark.start);
            match s.marks.iter_mut().rev().find(|m| m.id == mark.id) {
                Some(old) => *old = mark,
                None => s.marks.push(mark),
            }
            let line = r.line();
            match s.newest.iter_mut().rev().find(|(i, _, _)| *i == id) {
                Some(old) => old.2 = line,
                None => s.newest.push_back((id, start, line)),
            }
            if s.newest.len() > KEEP_NEWEST {
                s.newest.pop_front();
            }
        }
        s.marks
            .retain(|m| m.end.is_none_or(|e| now_ms - e < DAY_MS) || now_ms - m.start < DAY_MS);
    }
    let state = StateDir::at(dir);
    let path = state.path(crate::listen::state_dir::STATUS_FILE);
    let modified = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
    match modified {
        Some(m) if s.status.as_ref().is_some_and(|(at, _)| *at == m) => {}
        Some(m) => {
            s.status = state.read_status().ok().flatten().map(|st| (m, st));
        }
        None => s.status = None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::{Kind, Outcome};

    fn profile(dir: &Path, name: &str) -> PageProfile {
        PageProfile {
            name: name.into(),
            state_dir: Some(dir.to_path_buf()),
            error: None,
        }
    }

    fn write(dir: &Path, records: &[Record]) {
        let mut text = String::new();
        for r in records {
            text.push_str(&r.line());
            text.push('\n');
        }
        std::fs::write(dir.join(FILE), text).unwrap();
    }

    /// The page holds what it read only while it is asked: a minute after the last request it
    /// holds nothing, and its janitor task is over.
    #[tokio::test(start_paused = true)]
    async fn what_the_page_read_is_forgotten_a_minute_after_the_last_request() {
        let dir = tempfile::tempdir().unwrap();
        write(
            dir.path(),
            &[Record::new(
                "c1".into(),
                Kind::Run,
                "p",
                0,
                Outcome::Completed,
            )],
        );
        let page = Page::new();
        let profiles = [profile(dir.path(), "p")];
        assert!(!page.holds_anything());
        let a = page.answer("/api/overview", "", &profiles);
        assert_eq!(a.code, 200);
        assert!(page.holds_anything());
        let janitor = tokio::spawn(page.clone().forget_when_idle());
        tokio::time::sleep(FORGET_AFTER / 2).await;
        page.answer("/api/overview", "", &profiles);
        tokio::time::sleep(FORGET_AFTER).await;
        assert!(page.holds_anything(), "asked 30 s ago: still held");
        tokio::time::sleep(FORGET_AFTER).await;
        assert!(!page.holds_anything(), "a minute after the last request");
        janitor.await.unwrap();
    }

    /// Profiles sorted by what needs attention, found by a part of their name, a page at a
    /// time; the new lines of a history are read, and a profile's runs are the latest.
    #[test]
    fn the_overview_sorts_by_attention_searches_pages_and_reads_new_lines() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let names = ["zed", "amy", "bob"];
        let profiles: Vec<PageProfile> = dirs
            .iter()
            .zip(names)
            .map(|(d, n)| profile(d.path(), n))
            .collect();
        let now = i64::try_from(crate::sys::time::unix_ms(SystemTime::now())).unwrap();
        let mut failed = Record::new("c2".into(), Kind::Run, "zed", now - 1000, Outcome::Failed);
        failed.exit = Some(1);
        write(dirs[0].path(), &[failed]);
        write(
            dirs[1].path(),
            &[Record::new(
                "c1".into(),
                Kind::Run,
                "amy",
                now - 2000,
                Outcome::Completed,
            )],
        );
        let page = Page::new();
        let get = |q: &str| -> serde_json::Value {
            serde_json::from_str(&page.answer("/api/overview", q, &profiles).body).unwrap()
        };
        let o = get("");
        let order: Vec<&str> = o["profiles"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["profile"].as_str().unwrap())
            .collect();
        // No listener runs for any (no status.json): all stuck, then by name.
        assert_eq!(order, ["amy", "bob", "zed"]);
        assert_eq!(o["counts"]["stuck"], 3);
        assert_eq!(o["today"]["runs"], 2);
        assert_eq!(o["latest"][0]["id"], "c2", "newest first");
        assert_eq!(get("q=ZE")["matched"], 1);
        let paged = get("per=2&page=2");
        assert_eq!(
            (
                paged["pages"].as_u64(),
                paged["profiles"].as_array().map(Vec::len)
            ),
            (Some(2), Some(1))
        );
        // A line appended is read at the next request.
        let mut more = std::fs::OpenOptions::new()
            .append(true)
            .open(dirs[2].path().join(FILE))
            .or_else(|_| std::fs::File::create(dirs[2].path().join(FILE)))
            .unwrap();
        use std::io::Write;
        let r = Record::new("c3".into(), Kind::Hold, "bob", now, Outcome::Held);
        writeln!(more, "{}", r.line()).unwrap();
        assert_eq!(get("")["latest"][0]["id"], "c3");
        let one = page.answer("/api/run/c3", "", &profiles);
        assert_eq!(
            (one.code, one.body.contains("\"kind\":\"hold\"")),
            (200, true)
        );
        assert_eq!(page.answer("/api/run/nope", "", &profiles).code, 404);
    }
}

//! What the page's API answers: `/api/overview` (the profiles, sorted by what needs attention,
//! a page of them with their timelines, and the latest runs), `/api/runs` (the records as
//! `agentchat runs --json` prints them), `/api/run/ID` (one).

use super::{DAY_MS, Mark, PageProfile, Seen};
use crate::core::history::{self, Filter, Kind, Record, Summary};
use crate::core::status::{Held, Status};
use crate::listen::history::{FILE, Tail};
use crate::listen::liveness::{Liveness, assess};
use crate::listen::state_dir::StateDir;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::SystemTime;

/// Profiles a page shows at most.
const MAX_PER_PAGE: usize = 200;
/// Runs the overview lists.
const LATEST: usize = 20;
/// Records `/api/runs` answers at most.
const MAX_RUNS: usize = 5_000;

/// `/api/overview`'s query: `q` (a part of the profile's name or handle), `page` (from 1), `per`.
#[derive(Debug, Clone)]
pub struct Query {
    pub q: String,
    pub page: usize,
    pub per: usize,
}

/// The value of `key` in a query string (`+` and `%XX` decoded).
fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|kv| {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        (k == key).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        match b {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                if let Some(v) = hex {
                    out.push(v);
                    i += 2;
                } else {
                    out.push(b);
                }
            }
            _ => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Query {
    pub fn parse(query: &str) -> Query {
        let num = |k: &str| param(query, k).and_then(|v| v.parse::<usize>().ok());
        Query {
            q: param(query, "q").unwrap_or_default().trim().to_lowercase(),
            page: num("page").unwrap_or(1).max(1),
            per: num("per").unwrap_or(50).clamp(1, MAX_PER_PAGE),
        }
    }
}

/// `/api/runs`' query: as `agentchat runs`' flags.
#[derive(Debug, Clone, Default)]
pub struct RunsQuery {
    pub profile: Option<String>,
    pub since: Option<String>,
    pub failed: bool,
    pub limit: usize,
}

impl RunsQuery {
    pub fn parse(query: &str) -> RunsQuery {
        RunsQuery {
            profile: param(query, "profile").filter(|p| !p.is_empty()),
            since: param(query, "since").filter(|p| !p.is_empty()),
            failed: param(query, "failed").is_some_and(|v| v == "1" || v == "true"),
            limit: param(query, "limit")
                .and_then(|v| v.parse().ok())
                .unwrap_or(100)
                .min(MAX_RUNS),
        }
    }
}

/// What needs the user first: a listener that does not run or cannot work, then one whose last
/// run failed, then one held by its policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Attention {
    Stuck,
    Failing,
    Held,
    Ok,
}

/// One profile's row.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub profile: String,
    pub handle: Option<String>,
    pub state: String,
    pub detail: Option<String>,
    pub attention: Attention,
    /// Its listener runs and its loop turns.
    pub running: bool,
    pub held: Option<Held>,
    pub today: Summary,
    /// Its newest record.
    pub last: Option<Record>,
    /// The last day's runs, holds and queued waits (Unix ms; an `end` of `null` is not over);
    /// each record's start is a wake.
    pub timeline: Vec<Mark>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Counts {
    pub stuck: usize,
    pub failing: usize,
    pub held: usize,
    pub ok: usize,
}

/// `/api/overview`.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    pub now_ms: i64,
    /// Profiles in all, those the search matched, the page shown and how many there are.
    pub total: usize,
    pub matched: usize,
    pub page: usize,
    pub pages: usize,
    pub per: usize,
    pub counts: Counts,
    /// Today's runs, holds and cost over every profile (the machine's local day).
    pub today: Summary,
    pub profiles: Vec<Row>,
    /// The newest runs, holds and queued waits of the profiles the search matched.
    pub latest: Vec<Record>,
}

/// What every profile needs for the order, the search and the sums; a row is made whole only
/// for the profiles the page shows ([`Light::row`]).
struct Light<'a> {
    p: &'a PageProfile,
    seen: Option<&'a Seen>,
    status: Option<&'a Status>,
    liveness: Option<Liveness>,
    attention: Attention,
    today: Summary,
}

impl<'a> Light<'a> {
    fn of(p: &'a PageProfile, seen: Option<&'a Seen>, day: i64) -> Light<'a> {
        let status: Option<&Status> = seen.and_then(|s| s.status.as_ref()).map(|(_, st)| st);
        let marks: &[Mark] = seen.map_or(&[], |s| s.marks.as_slice());
        let liveness = status.map(|st| {
            assess(
                st,
                crate::sys::process::pid_alive(u64::from(st.pid)),
                SystemTime::now(),
            )
        });
        let mut today = Summary::default();
        for m in marks.iter().filter(|m| local_day(m.start) == day) {
            today.count(m.kind, m.outcome, m.cost, m.tokens);
        }
        let failing = marks
            .iter()
            .rev()
            .find(|m| m.kind == Kind::Run)
            .is_some_and(|m| m.outcome.is_failure());
        let running = liveness == Some(Liveness::Running);
        let attention = if p.error.is_some()
            || !running
            || status.is_some_and(|st| st.state.needs_the_user())
        {
            Attention::Stuck
        } else if failing {
            Attention::Failing
        } else if status.is_some_and(|st| st.held.is_some()) {
            Attention::Held
        } else {
            Attention::Ok
        };
        Light {
            p,
            seen,
            status,
            liveness,
            attention,
            today,
        }
    }

    fn handle(&self) -> Option<&str> {
        self.status.and_then(|st| st.handle.as_deref())
    }

    /// The newest records' lines, oldest first.
    fn newest(&self) -> impl DoubleEndedIterator<Item = &'a (String, i64, String)> + 'a {
        self.seen.into_iter().flat_map(|s| s.newest.iter())
    }

    /// The row the page shows.
    fn row(&self, now_ms: i64) -> Row {
        let state = match (self.status, self.liveness) {
            (_, Some(Liveness::NotRunning)) => "not_running".to_string(),
            (_, Some(Liveness::Stale)) => "stale".to_string(),
            (Some(st), _) => st.state.as_str().to_string(),
            (None, _) if self.p.error.is_some() => "config_error".to_string(),
            (None, _) => "never_ran".to_string(),
        };
        let timeline = self
            .seen
            .map(|s| {
                s.marks
                    .iter()
                    .filter(|m| m.end.unwrap_or(now_ms) >= now_ms - DAY_MS)
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        Row {
            profile: self.p.name.clone(),
            handle: self.handle().map(str::to_string),
            state,
            detail: self.status.and_then(|st| st.detail.clone()),
            attention: self.attention,
            running: self.liveness == Some(Liveness::Running),
            held: self.status.and_then(|st| st.held.clone()),
            today: self.today,
            last: self
                .newest()
                .next_back()
                .and_then(|(_, _, line)| record(line, &self.p.name)),
            timeline,
            error: self.p.error.clone(),
        }
    }
}

/// A kept line as a record of `profile`.
fn record(line: &str, profile: &str) -> Option<Record> {
    let mut r: Record = serde_json::from_str(line).ok()?;
    profile.clone_into(&mut r.profile);
    Some(r)
}

/// The machine's local day of a Unix ms time.
fn local_day(t: i64) -> i64 {
    crate::core::policy::local_day(&crate::listen::history::MachineZone, t)
}

/// The overview of `profiles` for `q`.
pub(super) fn build(
    profiles: &[PageProfile],
    seen: &HashMap<PathBuf, Seen>,
    q: &Query,
    now_ms: i64,
) -> Overview {
    let day = local_day(now_ms);
    let of = |p: &PageProfile| p.state_dir.as_ref().and_then(|d| seen.get(d));
    let mut lights: Vec<Light> = profiles.iter().map(|p| Light::of(p, of(p), day)).collect();
    let mut counts = Counts::default();
    let mut today = Summary::default();
    for l in &lights {
        match l.attention {
            Attention::Stuck => counts.stuck += 1,
            Attention::Failing => counts.failing += 1,
            Attention::Held => counts.held += 1,
            Attention::Ok => counts.ok += 1,
        }
        today.runs += l.today.runs;
        today.failed += l.today.failed;
        today.holds += l.today.holds;
        today.cost_usd += l.today.cost_usd;
        today.tokens = today.tokens.saturating_add(l.today.tokens);
    }
    let total = lights.len();
    if !q.q.is_empty() {
        let q = q.q.trim_start_matches('@');
        lights.retain(|l| {
            l.p.name.to_lowercase().contains(q)
                || l.handle().is_some_and(|h| h.to_lowercase().contains(q))
        });
    }
    lights.sort_by(|a, b| (a.attention, &a.p.name).cmp(&(b.attention, &b.p.name)));
    let matched = lights.len();
    // The newest of every matched profile's newest lines, read whole only once chosen.
    let mut newest: Vec<(&PageProfile, &(String, i64, String))> = lights
        .iter()
        .flat_map(|l| l.newest().map(move |n| (l.p, n)))
        .collect();
    newest.sort_by_key(|(_, (_, start, _))| std::cmp::Reverse(*start));
    let latest: Vec<Record> = newest
        .into_iter()
        .take(LATEST)
        .filter_map(|(p, (_, _, line))| record(line, &p.name))
        .collect();
    let pages = matched.div_ceil(q.per).max(1);
    let page = q.page.min(pages);
    let profiles: Vec<Row> = lights
        .iter()
        .skip((page - 1) * q.per)
        .take(q.per)
        .map(|l| l.row(now_ms))
        .collect();
    Overview {
        now_ms,
        total,
        matched,
        page,
        pages,
        per: q.per,
        counts,
        today,
        profiles,
        latest,
    }
}

/// Every record of `p`'s history file, read whole (not the page's last day).
fn whole(p: &PageProfile) -> Vec<Record> {
    let Some(dir) = &p.state_dir else {
        return Vec::new();
    };
    let mut tail = Tail::new(&StateDir::at(dir).path(FILE));
    let bytes = tail.read().map(|c| c.bytes).unwrap_or_default();
    history::parse(&bytes)
        .records
        .into_iter()
        .map(|mut r| {
            r.profile.clone_from(&p.name);
            r
        })
        .collect()
}

/// `/api/runs`: the records `agentchat runs --json` prints for the same filters, newest first,
/// one JSON object a line.
pub(super) fn runs(
    profiles: &[PageProfile],
    _seen: &HashMap<PathBuf, Seen>,
    q: &RunsQuery,
    now_ms: i64,
) -> String {
    let filter = Filter {
        since_ms: q
            .since
            .as_deref()
            .and_then(|s| crate::listen::history::parse_since(s, now_ms).ok()),
        failed: q.failed,
    };
    let records: Vec<Record> = profiles
        .iter()
        .filter(|p| q.profile.as_ref().is_none_or(|n| *n == p.name))
        .flat_map(whole)
        .collect();
    let mut out = String::new();
    for r in crate::listen::history::newest_first(&records, &filter, q.limit) {
        out.push_str(&r.line());
        out.push('\n');
    }
    out
}

/// `/api/run/ID`: one record, from what the page holds, else the files.
pub(super) fn run(
    profiles: &[PageProfile],
    seen: &HashMap<PathBuf, Seen>,
    id: &str,
) -> Option<Record> {
    for p in profiles {
        let held = p.state_dir.as_ref().and_then(|d| seen.get(d));
        let kept = held.and_then(|s| s.newest.iter().find(|(i, _, _)| i == id));
        let found = match kept {
            Some((_, _, line)) => record(line, &p.name),
            None => whole(p).into_iter().find(|r| r.id == id),
        };
        if found.is_some() {
            return found;
        }
    }
    None
}

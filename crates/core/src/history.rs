//! The listener's record of what it did (issue 35): one [`Record`] per run, per hold of the run
//! policy and per queued wait that came to no run, as one JSON line each in the state dir's
//! history file. It is the one record the listener keeps of its runs: `agentchat runs`, the
//! page and `status`'s usage read it, and the run policy's caps and loop guard are built from it
//! at start ([`ledger`]): no second bookkeeping.
//!
//! The machine writes a run twice, at its start (outcome `running`, so a listener that dies
//! mid-run still counts it) and at its end; a hold at its start and its end. Readers keep the
//! last line of each id ([`parse`]). Never a message body: the senders are handles from the
//! tray's metadata (contract 3.1: a direct card's `counterparty`, else `last_sender`; an
//! invite's `invited_by`), never `preview`.
//!
//! Bounded: the driver compacts the file ([`compact`]) once it holds [`MAX_LINES`] lines or
//! [`MAX_BYTES`] bytes, to the newest [`KEEP_RECORDS`] records within [`KEEP_BYTES`]; the runs
//! of the newest dropped day that the caps still count are kept as one `carried` total, so a
//! compaction never lowers today's count. A line that does not parse costs only itself.

use crate::policy::{DayTotal, Ledger, Offsets, RunEntry, local_day};
use crate::tray::{Card, Tray};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;

/// Lines in the file before it is compacted (a run writes two).
pub const MAX_LINES: usize = 5_000;
/// Bytes in the file before it is compacted.
pub const MAX_BYTES: u64 = 2 * 1024 * 1024;
/// What a compaction keeps: the newest records up to this many ...
pub const KEEP_RECORDS: usize = 2_000;
/// ... and this many bytes.
pub const KEEP_BYTES: usize = 1024 * 1024;
/// The longest line read back; a longer one is a bad line.
pub const MAX_LINE_BYTES: usize = 16 * 1024;
/// Senders named in a record; the rest are counted in `cards` and `invites` only.
pub const MAX_SENDERS: usize = 10;
/// The longest failure text kept in a record.
const MAX_FAILURE_CHARS: usize = 300;

/// What a record is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// A run of the agent (or one that could not be started).
    Run,
    /// `[listen.policy]` held the runs: from the cycle that held them to the one that ran, or
    /// the hold's end.
    Hold,
    /// A run waited for one of `listen --all`'s slots and never started (the listener stopped,
    /// or the tray read again after the wait had nothing for it).
    Queued,
    /// The runs a compaction dropped that the caps still count, as one total.
    Carried,
}

/// How a record ended, as `runs` and the page say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Started and not ended yet (or the listener died before it could say).
    Running,
    Completed,
    /// Failed: a non-zero exit (`exit`), a signal, the runtime's own verdict, or it could not
    /// be started; `failure` says which.
    Failed,
    /// Ended by `run_timeout`.
    TimedOut,
    /// Its runtime refused it before a model was asked (not logged in, a refused key): no cap
    /// counts it.
    Refused,
    /// The listener found it unended at its start: it died mid-run.
    Interrupted,
    /// A hold: its runs waited.
    Held,
    /// A queued wait that came to no run; `no_run_reason` says why.
    NoRun,
    /// A word this version does not know (a newer listener wrote it).
    #[serde(other)]
    Unknown,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Running => "running",
            Outcome::Completed => "completed",
            Outcome::Failed => "failed",
            Outcome::TimedOut => "timed_out",
            Outcome::Refused => "refused",
            Outcome::Interrupted => "interrupted",
            Outcome::Held => "held",
            Outcome::NoRun => "no_run",
            Outcome::Unknown => "unknown",
        }
    }

    /// A run that did not do its work: what `--failed` shows and the page calls failing.
    pub fn is_failure(self) -> bool {
        matches!(
            self,
            Outcome::Failed | Outcome::TimedOut | Outcome::Refused | Outcome::Interrupted
        )
    }
}

/// What changed on the tray between the reads before and after a run (only when the listener
/// read it after the run: an invite waited or the tray was cut short).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct After {
    /// Cards the tray showed before the run that it no longer shows (answered, dismissed or
    /// deferred by the agent's verdicts).
    pub answered: u32,
    /// Cards still waiting.
    pub waiting: u32,
    /// Invites the listener dismissed after the run (the single-run invite rule).
    pub dismissed: u64,
}

/// A hold's reason, its rule and its end.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldNote {
    /// `quiet_hours`, `runs_per_hour`, `not_allowed`, `loop_guard`, ...
    pub reason: String,
    /// The `[listen.policy]` key that holds.
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// Cycles it held (wakes that found it in force).
    #[serde(default)]
    pub wakes: u32,
}

/// One line of the history. `started_at`, `profile`, `reason`, `senders`, `outcome`,
/// `duration_ms`, `cost_usd`, `tokens` and `log` are always there (`null` when unknown); the
/// rest only when they say something.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The cycle's id (`c<ms>-<rand>`), as logs and run files name it.
    pub id: String,
    pub kind: Kind,
    pub profile: String,
    /// RFC 3339 UTC with ms: a run's spawn (else its cycle's start), a hold's first cycle.
    pub started_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// Why the cycle was woken: its reasons joined by `,` (`message`, `unanswered`, `connect`,
    /// `hold_ended`, `recovered`, ...).
    #[serde(default)]
    pub reason: String,
    /// Who waited: handles from the tray's metadata, at most [`MAX_SENDERS`].
    #[serde(default)]
    pub senders: Vec<String>,
    #[serde(default)]
    pub cards: u32,
    #[serde(default)]
    pub invites: u32,
    pub outcome: Outcome,
    /// `wake` or `invite` (the prompt it got).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// The run's own report (`core::run_report`); `None` where its runtime reports none.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    #[serde(default)]
    pub tokens: Option<u64>,
    /// `cost_usd` is the listener's estimate, not the run's report: it ended before its runtime
    /// reported (a timeout, a crash) and counts as its per-run budget (issue 38).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cost_estimated: bool,
    /// The run's own log file.
    #[serde(default)]
    pub log: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<After>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<HoldNote>,
    /// How long the run waited for a slot of the process (`listen --all`), and its place then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queued_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_place: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_run_reason: Option<String>,
    /// Whether the caps count it (false: refused by its runtime, or never spawned).
    #[serde(default = "yes", skip_serializing_if = "is_yes")]
    pub counted: bool,
    /// The conversations the loop guard counts (`policy::loop_conversations`): ids, never text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversations: Vec<String>,
    /// `carried` only: the dropped runs' total for their day.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub carried: Option<DayTotal>,
}

fn yes() -> bool {
    true
}

fn is_yes(b: &bool) -> bool {
    *b
}

impl Record {
    /// A record of `kind` that started at `started_ms`, everything else empty.
    pub fn new(id: String, kind: Kind, profile: &str, started_ms: i64, outcome: Outcome) -> Record {
        Record {
            id,
            kind,
            profile: profile.to_string(),
            started_at: crate::time::rfc3339_ms(started_ms),
            ended_at: None,
            reason: String::new(),
            senders: Vec::new(),
            cards: 0,
            invites: 0,
            outcome,
            run_kind: None,
            exit: None,
            signal: None,
            failure: None,
            duration_ms: None,
            cost_usd: None,
            tokens: None,
            cost_estimated: false,
            log: None,
            after: None,
            hold: None,
            queued_ms: None,
            queue_place: None,
            no_run_reason: None,
            counted: true,
            conversations: Vec::new(),
            carried: None,
        }
    }

    /// `started_at` as Unix ms (`None`: not a time).
    pub fn started_ms(&self) -> Option<i64> {
        unix_ms(&self.started_at)
    }

    /// Who and what waited.
    pub fn waited(&mut self, w: &Waited) {
        self.senders = w.senders.clone();
        self.cards = w.cards;
        self.invites = w.invites;
    }

    /// The failure's text, cut to a line's worth.
    pub fn set_failure(&mut self, why: &str) {
        self.failure = Some(why.chars().take(MAX_FAILURE_CHARS).collect());
    }

    /// One JSON line, without its newline.
    pub fn line(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }

    /// Whether this record counts toward the caps: a run that was spawned and not refused.
    fn counts(&self) -> bool {
        self.kind == Kind::Run && self.counted && self.outcome != Outcome::Refused
    }
}

/// An RFC 3339 time as Unix ms.
pub fn unix_ms(at: &str) -> Option<i64> {
    let t = humantime::parse_rfc3339_weak(at).ok()?;
    let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
    i64::try_from(d.as_millis()).ok()
}

/// What waited on a tray: senders (metadata only), cards and invites.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Waited {
    pub senders: Vec<String>,
    pub cards: u32,
    pub invites: u32,
}

impl Waited {
    /// The cards that could wake a run (not muted, not notices only) and every invite; only
    /// `cards`/`invites` when given (a hold's).
    pub fn of(tray: &Tray, cards: Option<&[String]>, invites: Option<&[String]>) -> Waited {
        let card_in = |c: &Card| match cards {
            Some(ids) => ids.contains(&c.conversation_id),
            None => !c.is_muted() && !c.is_notices_only(),
        };
        let mut w = Waited::default();
        let mut add = |who: Option<String>| {
            if let Some(h) = who
                && w.senders.len() < MAX_SENDERS
                && !w.senders.contains(&h)
            {
                w.senders.push(h);
            }
        };
        for card in tray.conversations.iter().filter(|c| card_in(c)) {
            w.cards = w.cards.saturating_add(1);
            add(card_sender(card));
        }
        for invite in tray.invites.iter().flatten() {
            if invites.is_some_and(|ids| !ids.contains(&invite.invite_id)) {
                continue;
            }
            w.invites = w.invites.saturating_add(1);
            add(handle_in(invite.extra.get("invited_by")));
        }
        w
    }
}

/// A card's other side from its metadata: a direct card's `counterparty`, else `last_sender`
/// (never `preview`, which is the message, contract 3.1).
fn card_sender(card: &Card) -> Option<String> {
    let group = card.extra.get("type").and_then(Value::as_str) == Some("group");
    let counterparty = if group {
        None
    } else {
        handle_in(card.extra.get("counterparty"))
    };
    counterparty.or_else(|| handle_in(card.extra.get("last_sender")))
}

/// A handle field (a string, or an object with `handle`) as `@handle`; `None` when it is not one.
fn handle_in(v: Option<&Value>) -> Option<String> {
    let v = v?;
    let s = v
        .as_str()
        .or_else(|| v.get("handle").and_then(Value::as_str))?;
    let bare = crate::handle::normalize(s);
    let plausible = !bare.is_empty()
        && bare.len() <= 64
        && bare
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    plausible.then(|| format!("@{bare}"))
}

/// A file's lines read back.
#[derive(Debug, Default)]
pub struct Parsed {
    /// The last line of each id, in the order of each id's first line (oldest first).
    pub records: Vec<Record>,
    /// Lines that did not parse (a damaged or cut file): each costs only itself.
    pub bad: usize,
    /// Lines read, good and bad.
    pub lines: usize,
}

/// Reads the lines of a history file (a cut last line is a bad one).
pub fn parse(bytes: &[u8]) -> Parsed {
    let mut out = Parsed::default();
    let mut at: HashMap<String, usize> = HashMap::new();
    for line in bytes.split(|&b| b == b'\n') {
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        out.lines += 1;
        let record = (line.len() <= MAX_LINE_BYTES)
            .then(|| serde_json::from_slice::<Record>(line).ok())
            .flatten();
        match record {
            Some(r) => match at.get(&r.id) {
                Some(&i) => {
                    if let Some(slot) = out.records.get_mut(i) {
                        *slot = r;
                    }
                }
                None => {
                    at.insert(r.id.clone(), out.records.len());
                    out.records.push(r);
                }
            },
            None => out.bad += 1,
        }
    }
    out
}

/// The run policy's ledger from the records: every run the caps count, and the carried total.
pub fn ledger(records: &[Record], offsets: &dyn Offsets) -> Ledger {
    let mut runs: Vec<RunEntry> = records
        .iter()
        .filter(|r| r.counts())
        .filter_map(|r| {
            Some(RunEntry {
                started_ms: r.started_ms()?,
                cost_usd: r.cost_usd,
                tokens: r.tokens,
                estimated: r.cost_estimated && r.cost_usd.is_some(),
                conversations: r.conversations.clone(),
            })
        })
        .collect();
    runs.sort_by_key(|r| r.started_ms);
    let carried = records.iter().rev().find_map(|r| r.carried.clone());
    Ledger::restore(runs, carried, offsets)
}

/// The end lines a listener that died could not write, at the next start: its run is
/// `interrupted` (and still counts), its hold over.
pub fn unended(records: &[Record], now_ms: i64) -> Vec<Record> {
    let at = crate::time::rfc3339_ms(now_ms);
    records
        .iter()
        .filter_map(|r| {
            let mut end = r.clone();
            match (r.kind, r.outcome) {
                (Kind::Run, Outcome::Running) => {
                    end.outcome = Outcome::Interrupted;
                    end.failure = Some("the listener ended before the run did".into());
                }
                (Kind::Hold, _) if r.ended_at.is_none() => {}
                _ => return None,
            }
            end.ended_at = Some(at.clone());
            Some(end)
        })
        .collect()
}

/// The newest records within [`KEEP_RECORDS`] and [`KEEP_BYTES`], oldest first; the counted runs
/// of the newest day among those dropped (with what an earlier compaction carried for that
/// day) as one `carried` record first, so the caps count them still.
pub fn compact(records: Vec<Record>, offsets: &dyn Offsets) -> Vec<Record> {
    let mut bytes = 0usize;
    let mut keep = 0usize;
    for r in records.iter().rev().filter(|r| r.kind != Kind::Carried) {
        bytes = bytes.saturating_add(r.line().len() + 1);
        if keep >= KEEP_RECORDS || bytes > KEEP_BYTES {
            break;
        }
        keep += 1;
    }
    let mut carried: Option<DayTotal> = None;
    let mut kept = Vec::with_capacity(keep + 1);
    let live = records.iter().filter(|r| r.kind != Kind::Carried).count();
    let drop = live.saturating_sub(keep);
    let mut dropped = 0usize;
    for r in records {
        if r.kind == Kind::Carried {
            if let Some(t) = r.carried {
                carried = Some(fold(carried, t));
            }
            continue;
        }
        if dropped < drop {
            dropped += 1;
            if r.counts()
                && let Some(t) = r.started_ms()
            {
                let run = DayTotal {
                    day: local_day(offsets, t),
                    runs: 1,
                    cost_usd: r.cost_usd.unwrap_or(0.0),
                    tokens: r.tokens.unwrap_or(0),
                    estimated: u64::from(r.cost_estimated),
                };
                carried = Some(fold(carried, run));
            }
            continue;
        }
        kept.push(r);
    }
    if let Some(total) = carried {
        let mut line = Record::new(
            format!("carried-{}", total.day),
            Kind::Carried,
            kept.first().map_or("", |r| r.profile.as_str()),
            0,
            Outcome::Completed,
        );
        line.carried = Some(total);
        kept.insert(0, line);
    }
    kept
}

/// Two day totals as one: the same day's add up; a newer day's replaces an older one (the caps
/// count only today's, as `Ledger`'s own fold does).
fn fold(into: Option<DayTotal>, t: DayTotal) -> DayTotal {
    match into {
        Some(a) if a.day == t.day => DayTotal {
            day: a.day,
            runs: a.runs.saturating_add(t.runs),
            cost_usd: a.cost_usd + t.cost_usd,
            tokens: a.tokens.saturating_add(t.tokens),
            estimated: a.estimated.saturating_add(t.estimated),
        },
        Some(a) if a.day > t.day => a,
        _ => t,
    }
}

/// What `runs` and the page keep of the records.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    /// Only records that started at or after this (Unix ms).
    pub since_ms: Option<i64>,
    /// Only runs that did not do their work ([`Outcome::is_failure`]).
    pub failed: bool,
}

impl Filter {
    pub fn keeps(&self, r: &Record) -> bool {
        if r.kind == Kind::Carried {
            return false;
        }
        if self.failed && !(r.kind == Kind::Run && r.outcome.is_failure()) {
            return false;
        }
        match self.since_ms {
            Some(since) => r.started_ms().is_some_and(|t| t >= since),
            None => true,
        }
    }
}

/// A day's summary, for `runs`' footer and the page.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Summary {
    pub runs: u64,
    pub failed: u64,
    pub holds: u64,
    pub cost_usd: f64,
    pub tokens: u64,
}

impl Summary {
    pub fn add(&mut self, r: &Record) {
        self.count(r.kind, r.outcome, r.cost_usd, r.tokens);
    }

    /// A record by its kind, outcome and what it cost.
    pub fn count(&mut self, kind: Kind, outcome: Outcome, cost: Option<f64>, tokens: Option<u64>) {
        match kind {
            Kind::Run => {
                self.runs += 1;
                if outcome.is_failure() {
                    self.failed += 1;
                }
                self.cost_usd += cost.unwrap_or(0.0);
                self.tokens = self.tokens.saturating_add(tokens.unwrap_or(0));
            }
            Kind::Hold => self.holds += 1,
            Kind::Queued | Kind::Carried => {}
        }
    }
}

#[cfg(test)]
mod tests;

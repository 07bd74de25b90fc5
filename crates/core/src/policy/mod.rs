//! The run policy (`[listen.policy]`, issue 26): who may wake a paid run, when, and how much the
//! runs may spend. Pure: the clock is an injected instant (Unix ms) and the local time an
//! injected [`Offsets`]; what a card is and who sent it come from the tray's metadata only
//! (contract 3.1: `relationship`, `type`, `counterparty`, `mentioned_you`, `preview.sender`,
//! `last_sender`, `muted`, `pace`; an invite's `invited_by`), never a message's text.
//!
//! [`gate`] is asked after `core::decision` chose a run: it lets the run start, or holds it with
//! a reason and the instant the hold ends (`until`), when the daemon starts a cycle of its own.
//! A card no rule lets wake a run stays on the tray untouched. The choices the issue leaves open
//! are in docs/decisions.md, "Run policy"; `conformance/policy.cases.json` pins every rule.

mod admit;
mod clock;
mod ledger;
mod parse;
mod say;

pub use admit::admit;
pub use clock::{FixedOffset, OffsetTable, Offsets, local_day, local_hour};
pub use ledger::{DayTotal, Ledger, MAX_CONVERSATIONS_PER_RUN, MAX_RUNS, RunEntry, Totals};
pub use parse::{MAX_LOOP_WINDOW_MS, PolicyError, PolicyLayer};
pub use say::{ShownZone, held_line, hold_line, summary, today_line, usage_line};

use super::handle;
use super::tray::{Card, Invite, Tray};
use serde::Serialize;
use serde_json::Value;

/// The rules of one profile. The default has none: every card wakes a run as without a policy.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Policy {
    /// Local times when runs wait; empty: none.
    pub quiet_hours: Vec<QuietRange>,
    /// The zone `quiet_hours` and the day and hour caps follow; `None`: the machine's own.
    pub timezone: Option<String>,
    pub max_runs_per_hour: Option<u32>,
    pub max_runs_per_day: Option<u32>,
    pub max_cost_per_day_usd: Option<f64>,
    pub max_tokens_per_day: Option<u64>,
    /// Not a hold: the runtime's own budget for one run (Claude Code's `--max-budget-usd`).
    pub max_cost_per_run_usd: Option<f64>,
    pub first_contact: FirstContact,
    pub groups: Groups,
    /// `Some`: only cards from these handles wake a run.
    pub allow: Option<Vec<HandlePattern>>,
    pub deny: Vec<HandlePattern>,
    pub loop_guard: Option<LoopGuard>,
}

/// What a stranger's first message does (`first_contact`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FirstContact {
    #[default]
    Wake,
    Wait,
}

/// Which group cards wake a run (`groups`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Groups {
    #[default]
    All,
    Mentions,
}

/// `loop_guard`: a conversation on the tray for `runs` runs within `within_ms` stops waking runs
/// until the oldest of them leaves the window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LoopGuard {
    pub runs: u32,
    pub within_ms: i64,
}

/// One `quiet_hours` range in minutes of the local day: `start` inclusive, `end` exclusive; an
/// `end` before `start` spans midnight.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuietRange {
    pub start: u16,
    pub end: u16,
}

impl QuietRange {
    /// `"22:00-07:00"`; `24:00` only as an end.
    pub fn parse(text: &str) -> Result<QuietRange, String> {
        let form = "expected \"HH:MM-HH:MM\" such as \"22:00-07:00\"";
        let (a, b) = text.trim().split_once('-').ok_or(form)?;
        let minute = |s: &str| -> Option<u16> {
            let (h, m) = s.trim().split_once(':')?;
            if h.is_empty() || h.len() > 2 || m.len() != 2 {
                return None;
            }
            let (h, m): (u16, u16) = (h.parse().ok()?, m.parse().ok()?);
            (m < 60 && (h < 24 || (h == 24 && m == 0))).then_some(h * 60 + m)
        };
        let (start, end) = (minute(a).ok_or(form)?, minute(b).ok_or(form)?);
        if start == 1440 {
            return Err("24:00 can only end a range".into());
        }
        if start == end % 1440 {
            return Err("the range starts where it ends".into());
        }
        Ok(QuietRange { start, end })
    }

    /// Whether a minute of the local day (0..1440) is inside.
    pub fn contains(&self, minute: u16) -> bool {
        if self.start < self.end {
            (self.start..self.end).contains(&minute)
        } else {
            minute >= self.start || minute < self.end
        }
    }
}

/// A handle or a pattern with `*` (any run of characters), normalised as `core::handle` does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlePattern(String);

impl HandlePattern {
    pub fn parse(text: &str) -> Result<HandlePattern, String> {
        let p = handle::normalize(text);
        if p.is_empty() || p.chars().any(char::is_whitespace) || p.contains('@') {
            return Err(
                "expected a handle such as \"@alice\" or a pattern such as \"@ops-*\"".into(),
            );
        }
        Ok(HandlePattern(p))
    }

    /// Whether `who` (any spelling) matches. Iterative, so a pattern of many `*` costs no more
    /// than its length times the handle's.
    pub fn matches(&self, who: &str) -> bool {
        glob(self.0.as_bytes(), handle::normalize(who).as_bytes())
    }
}

/// `*` matches any run of bytes; everything else itself. The classic two-pointer match with
/// backtracking to the last `*`.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    let (mut p, mut t) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, t));
                p += 1;
            }
            Some(c) if Some(c) == text.get(t) => {
                p += 1;
                t += 1;
            }
            _ => match star {
                Some((sp, st)) => {
                    p = sp + 1;
                    t = st + 1;
                    star = Some((sp, st + 1));
                }
                None => return false,
            },
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(|c| *c == b'*'))
}

/// Why runs wait: the `held.reason` of status.json (issue 26).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldReason {
    QuietHours,
    RunsPerHour,
    RunsPerDay,
    CostPerDay,
    LoopGuard,
    NotAllowed,
}

impl HoldReason {
    pub fn as_str(self) -> &'static str {
        match self {
            HoldReason::QuietHours => "quiet_hours",
            HoldReason::RunsPerHour => "runs_per_hour",
            HoldReason::RunsPerDay => "runs_per_day",
            HoldReason::CostPerDay => "cost_per_day",
            HoldReason::LoopGuard => "loop_guard",
            HoldReason::NotAllowed => "not_allowed",
        }
    }
}

/// What the policy says of one card or invite.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// It may wake a run.
    Wakes,
    /// It never wakes a run, policy or not (muted, or system notices only): not a hold.
    Never,
    /// A rule keeps it from waking a run: the reason, the config key, and when it may again
    /// (`None`: not by time; a new message, a reload or the rule lifted).
    Held {
        reason: HoldReason,
        key: &'static str,
        until: Option<i64>,
    },
}

/// A run held: why (the first rule holding, in the order quiet hours, runs per hour, runs per day,
/// cost per day; or the cards' own), the config key, when every time rule lets it start given the
/// runs so far (`None`: no time ends it), and the cards and invites that wait.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub reason: HoldReason,
    pub key: &'static str,
    pub until: Option<i64>,
    pub cards: Vec<String>,
    pub invites: Vec<String>,
}

/// The policy's answer for a tray the cycle would run for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Gate {
    /// Nothing on the tray would wake a run, policy or not: `core::decision` says why.
    Nothing,
    /// The run may start, for these cards and invites (empty cards with `beyond_cut`: for the
    /// cards past a cut tray).
    Run {
        cards: Vec<String>,
        invites: Vec<String>,
        beyond_cut: bool,
    },
    Held(Hold),
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str).filter(|s| !s.trim().is_empty())
}

/// A handle field: a string, or an object with `handle`.
fn handle_of(v: Option<&Value>) -> Option<&str> {
    text(v).or_else(|| text(v.and_then(|v| v.get("handle"))))
}

/// Who a card is from, for `allow` and `deny`: a direct card's counterparty; a group card's
/// newest unread message's sender (`preview.sender`); either falls back to `last_sender`.
pub fn card_sender(card: &Card) -> Option<&str> {
    let field = |k: &str| card.extra.get(k);
    let preview = handle_of(field("preview").and_then(|p| p.get("sender")));
    let direct = if is_group(card) {
        None
    } else {
        handle_of(field("counterparty"))
    };
    direct
        .or(preview)
        .or_else(|| handle_of(field("last_sender")))
}

fn is_group(card: &Card) -> bool {
    let field = |k: &str| card.extra.get(k).and_then(Value::as_str);
    field("type") == Some("group") || field("relationship") == Some("group")
}

/// The conversations of a tray the ledger remembers for the loop guard: cards that could wake a
/// run (not muted, not notices only) whose `pace` shows the conversation moving (`last_10m`
/// above 0, or no pace to tell). A card left sitting unanswered is not a loop.
pub fn loop_conversations(tray: &Tray) -> Vec<String> {
    tray.conversations
        .iter()
        .filter(|c| !c.is_muted() && !c.is_notices_only())
        .filter(|c| {
            c.extra
                .get("pace")
                .and_then(|p| p.get("last_10m"))
                .and_then(Value::as_f64)
                .is_none_or(|n| n > 0.0)
        })
        .map(|c| c.conversation_id.clone())
        .take(MAX_CONVERSATIONS_PER_RUN)
        .collect()
}

impl Policy {
    /// Whether `allow`, `deny`, `first_contact` or `groups` can keep a card from waking.
    fn filters_senders(&self) -> bool {
        self.allow.is_some()
            || !self.deny.is_empty()
            || self.first_contact == FirstContact::Wait
            || self.groups == Groups::Mentions
    }

    fn sender_verdict(&self, who: Option<&str>) -> Option<Verdict> {
        let held = |key| Verdict::Held {
            reason: HoldReason::NotAllowed,
            key,
            until: None,
        };
        if who.is_some_and(|w| self.deny.iter().any(|p| p.matches(w))) {
            return Some(held("deny"));
        }
        match &self.allow {
            Some(allow) if !who.is_some_and(|w| allow.iter().any(|p| p.matches(w))) => {
                Some(held("allow"))
            }
            _ => None,
        }
    }

    /// One card, from its metadata and the ledger at `now_ms`.
    pub fn card(&self, card: &Card, ledger: &Ledger, now_ms: i64) -> Verdict {
        if card.is_muted() || card.is_notices_only() {
            return Verdict::Never;
        }
        if let Some(v) = self.sender_verdict(card_sender(card)) {
            return v;
        }
        let field = |k: &str| card.extra.get(k);
        let not_allowed = |key| Verdict::Held {
            reason: HoldReason::NotAllowed,
            key,
            until: None,
        };
        if self.first_contact == FirstContact::Wait
            && field("relationship").and_then(Value::as_str) == Some("first_contact")
        {
            return not_allowed("first_contact");
        }
        if self.groups == Groups::Mentions
            && is_group(card)
            && field("mentioned_you") != Some(&Value::Bool(true))
        {
            return not_allowed("groups");
        }
        if let Some(guard) = self.loop_guard {
            let seen = ledger.saw(&card.conversation_id, now_ms, guard.within_ms);
            let runs = usize::try_from(guard.runs).unwrap_or(usize::MAX);
            if seen.len() >= runs {
                // It frees once fewer than `runs` remain: when the run `runs` from the newest leaves.
                let until = seen
                    .len()
                    .checked_sub(runs)
                    .and_then(|i| seen.get(i))
                    .map(|s| s.saturating_add(guard.within_ms));
                return Verdict::Held {
                    reason: HoldReason::LoopGuard,
                    key: "loop_guard",
                    until,
                };
            }
        }
        Verdict::Wakes
    }

    /// One invite, by who sent it (`allow` and `deny` only).
    pub fn invite(&self, invite: &Invite) -> Verdict {
        let who = handle_of(invite.extra.get("invited_by"));
        self.sender_verdict(who).unwrap_or(Verdict::Wakes)
    }

    /// The invites on `tray` these rules let wake a run: the only ones the invite rule may count
    /// after it (a held invite is left as the run found it, docs/operating.md).
    pub fn allowed_invites(&self, tray: &Tray) -> Vec<String> {
        tray.invites
            .iter()
            .flatten()
            .filter(|i| matches!(self.invite(i), Verdict::Wakes))
            .map(|i| i.invite_id.clone())
            .collect()
    }

    /// The first time rule that holds a run starting at `at_ms`, with the instant it ends.
    fn time_hold(
        &self,
        ledger: &Ledger,
        at_ms: i64,
        offsets: &dyn Offsets,
    ) -> Option<(HoldReason, &'static str, Option<i64>)> {
        let minute = |m: u32| u16::try_from(m).unwrap_or(0);
        let quiet = |m: u32| self.quiet_hours.iter().any(|r| r.contains(minute(m)));
        if quiet(clock::local_minute_of_day(offsets, at_ms)) {
            let until = clock::first_outside(offsets, at_ms, quiet);
            return Some((HoldReason::QuietHours, "quiet_hours", until));
        }
        let hour = ledger.hour(at_ms, offsets);
        if self
            .max_runs_per_hour
            .is_some_and(|cap| hour.runs >= u64::from(cap))
        {
            let until = clock::next_hour(offsets, at_ms);
            return Some((HoldReason::RunsPerHour, "max_runs_per_hour", Some(until)));
        }
        let day = ledger.day(at_ms, offsets);
        let tomorrow = || Some(clock::next_day(offsets, at_ms));
        if self
            .max_runs_per_day
            .is_some_and(|cap| day.runs >= u64::from(cap))
        {
            return Some((HoldReason::RunsPerDay, "max_runs_per_day", tomorrow()));
        }
        if self
            .max_cost_per_day_usd
            .is_some_and(|cap| day.cost_usd >= cap)
        {
            return Some((HoldReason::CostPerDay, "max_cost_per_day_usd", tomorrow()));
        }
        if self.max_tokens_per_day.is_some_and(|cap| day.tokens >= cap) {
            return Some((HoldReason::CostPerDay, "max_tokens_per_day", tomorrow()));
        }
        None
    }

    /// Whether a run may start at `now_ms` by the time rules alone (quiet hours and caps): `None`,
    /// or the first rule holding and the instant at which none does, the ledger as it is.
    pub fn may_start(
        &self,
        ledger: &Ledger,
        now_ms: i64,
        offsets: &dyn Offsets,
    ) -> Option<(HoldReason, &'static str, Option<i64>)> {
        let (reason, key, mut until) = self.time_hold(ledger, now_ms, offsets)?;
        // Quiet hours may end inside a cap's window and a day's cap at midnight inside quiet
        // hours: step to each end until no rule holds. Each step moves forward; a few suffice.
        for _ in 0..16 {
            let Some(t) = until else { break };
            match self.time_hold(ledger, t, offsets) {
                None => break,
                Some((_, _, next)) => until = next.filter(|n| *n > t),
            }
        }
        Some((reason, key, until))
    }
}

/// The policy's answer for `tray` at `now_ms` (after `core::decision` chose a run).
///
/// Cards that wake and invites that wake make a run, unless a time rule holds it. With no card
/// or invite that wakes: a tray cut short (`truncated`) runs for the cards past the cut only
/// when no rule could keep a card from waking (`allow`, `deny`, `first_contact`, `groups`),
/// since those cards cannot be judged; otherwise the run is held by the cards' own rule
/// (`loop_guard` before `not_allowed`: it has an end).
pub fn gate(
    policy: &Policy,
    tray: &Tray,
    ledger: &Ledger,
    now_ms: i64,
    offsets: &dyn Offsets,
) -> Gate {
    let mut cards = Vec::new();
    let mut held: Vec<(String, HoldReason, &'static str, Option<i64>)> = Vec::new();
    for card in &tray.conversations {
        match policy.card(card, ledger, now_ms) {
            Verdict::Wakes => cards.push(card.conversation_id.clone()),
            Verdict::Never => {}
            Verdict::Held { reason, key, until } => {
                held.push((card.conversation_id.clone(), reason, key, until));
            }
        }
    }
    let mut invites = Vec::new();
    let mut held_invites = Vec::new();
    for invite in tray.invites.iter().flatten() {
        match policy.invite(invite) {
            Verdict::Wakes => invites.push(invite.invite_id.clone()),
            Verdict::Held { key, .. } => held_invites.push((invite.invite_id.clone(), key)),
            Verdict::Never => {}
        }
    }
    let beyond_cut =
        cards.is_empty() && invites.is_empty() && tray.is_truncated() && !policy.filters_senders();
    if !cards.is_empty() || !invites.is_empty() || beyond_cut {
        return match policy.may_start(ledger, now_ms, offsets) {
            None => Gate::Run {
                cards,
                invites,
                beyond_cut,
            },
            Some((reason, key, until)) => Gate::Held(Hold {
                reason,
                key,
                until,
                cards,
                invites,
            }),
        };
    }
    if held.is_empty() && held_invites.is_empty() {
        return Gate::Nothing;
    }
    let guarded = held
        .iter()
        .filter(|h| h.1 == HoldReason::LoopGuard)
        .filter_map(|h| h.3)
        .min();
    let (reason, key, until) = match guarded {
        // A guarded card frees at `t`; a time rule may hold the run past it.
        Some(t) => match policy.may_start(ledger, t, offsets) {
            Some((_, _, later)) => (HoldReason::LoopGuard, "loop_guard", later),
            None => (HoldReason::LoopGuard, "loop_guard", Some(t)),
        },
        None => {
            let key = held
                .first()
                .map(|h| h.2)
                .or_else(|| held_invites.first().map(|h| h.1))
                .unwrap_or("allow");
            (HoldReason::NotAllowed, key, None)
        }
    };
    Gate::Held(Hold {
        reason,
        key,
        until,
        cards: held.into_iter().map(|h| h.0).collect(),
        invites: held_invites.into_iter().map(|h| h.0).collect(),
    })
}

#[cfg(test)]
mod tests;

//! The run policy (`[listen.policy]`, issue 26): who may wake a paid run, when, and how much the
//! runs may spend. Pure: the clock is an injected instant (Unix ms) and the local time an
//! injected [`Offsets`]; what a card is and who sent it come from the tray's metadata only
//! (contract 3.1: `relationship`, `type`, `counterparty`, `mentioned_you`, `preview.sender`,
//! `last_sender`, `muted`, `pace`; an invite's `invited_by`), never a message's text.
//!
//! [`gate`] is asked after `core::decision` chose a run and [`observe`] took the tray in: it lets
//! the run start, or holds it with a reason and the instant the hold ends (`until`), when the
//! daemon starts a cycle of its own. A card no rule lets wake a run stays on the tray untouched.
//! Unset keys take bounded defaults ([`DEFAULTS`], issue 38). The choices the issues leave open
//! are in docs/decisions.md, "Run policy"; `conformance/policy.cases.json` pins every rule.

mod admit;
mod clock;
mod contacts;
mod heard;
mod judge;
mod ledger;
mod loops;
mod parse;
mod say;

pub use admit::admit;
pub use clock::{FixedOffset, OffsetTable, Offsets, local_day, local_hour, next_day};
pub use contacts::Contacts;
pub use heard::{Heard, HeardMessage, Unread, unix_ms};
pub use judge::{card_sender, gate, loop_conversations, observe};
pub use ledger::{DayTotal, Ledger, MAX_CONVERSATIONS_PER_RUN, MAX_RUNS, Memory, RunEntry, Totals};
pub use loops::{Looping, Loops, Mark};
pub use parse::{DEFAULTS, KEYS, MAX_LOOP_WINDOW_MS, PolicyError, PolicyLayer, dollars_of};
pub use say::{ShownZone, dollars, held_line, hold_line, summary, today_line, usage_line};

use super::handle;
use serde::Serialize;

/// The rules of one profile. `Policy::default()` has none (every card wakes a run); the
/// config's resolved policy starts from [`DEFAULTS`] instead.
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
            // Digits only: `+9:00` is no time of day (`u16::from_str` would take the sign).
            let (h, m) = s.trim().split_once(':')?;
            let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
            if h.is_empty() || h.len() > 2 || m.len() != 2 || !digits(h) || !digits(m) {
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
/// runs so far (`None`: no time ends it), and what waits: the cards and invites, the
/// conversations past the tray's cut the socket heard from (`unseen`), and whether the tray was
/// cut short at all (`truncated`: more waits than it showed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hold {
    pub reason: HoldReason,
    pub key: &'static str,
    pub until: Option<i64>,
    pub cards: Vec<String>,
    pub invites: Vec<String>,
    pub unseen: Vec<String>,
    pub truncated: bool,
}

impl Hold {
    /// A hold by a time rule alone (quiet hours, a cap), for no card in particular.
    pub fn by_time(reason: HoldReason, key: &'static str, until: Option<i64>) -> Hold {
        Hold {
            reason,
            key,
            until,
            cards: Vec::new(),
            invites: Vec::new(),
            unseen: Vec::new(),
            truncated: false,
        }
    }
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

#[cfg(test)]
mod tests;

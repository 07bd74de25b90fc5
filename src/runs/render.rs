//! How `agentchat runs` says a record: one line each, the day's summary, one run whole.

use crate::core::history::{Filter, Kind, Outcome, Record, Summary};
use crate::core::policy::Offsets;

/// A Unix ms time in the machine's local time: `12-03 14:02:11`.
fn local(at_ms: i64) -> String {
    let zone = crate::listen::history::MachineZone;
    let shifted = at_ms.saturating_add(i64::from(zone.offset_at(at_ms)) * 1000);
    let s = crate::core::time::rfc3339_ms(shifted);
    // `2026-12-03T14:02:11.000Z` → `12-03 14:02:11`
    match (s.get(5..10), s.get(11..19)) {
        (Some(day), Some(time)) => format!("{day} {time}"),
        _ => s,
    }
}

/// `41 s`, `3 min 5 s`, `1 h 2 min`.
pub fn took(ms: u64) -> String {
    let s = ms / 1000;
    match s {
        0..60 if ms < 10_000 => format!("{:.1} s", ms as f64 / 1000.0),
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, (s % 3600) / 60),
    }
}

/// `$0.04`, or tokens when only they were reported, else `-`.
fn cost(r: &Record) -> String {
    match (r.cost_usd, r.tokens) {
        (Some(c), _) => format!("${c:.2}"),
        (None, Some(t)) => tokens(t),
        (None, None) => "-".into(),
    }
}

fn tokens(t: u64) -> String {
    if t >= 10_000 {
        format!("{:.0}k tok", t as f64 / 1000.0)
    } else {
        format!("{t} tok")
    }
}

fn plural(n: u64, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// What waited: `2 cards, 1 invite from @alice @bob`.
fn waited(r: &Record) -> String {
    let mut parts = Vec::new();
    if r.cards > 0 {
        parts.push(plural(u64::from(r.cards), "card"));
    }
    if r.invites > 0 {
        parts.push(plural(u64::from(r.invites), "invite"));
    }
    let mut s = if parts.is_empty() {
        "nothing named".to_string()
    } else {
        parts.join(", ")
    };
    if !r.senders.is_empty() {
        s.push_str(" from ");
        s.push_str(&r.senders.join(" "));
    }
    s
}

/// How it ended, in words: `failed (exit 1)`, `timed out`, `held: runs_per_hour`.
pub fn outcome(r: &Record) -> String {
    match r.outcome {
        Outcome::Failed => match (r.exit, r.signal) {
            (Some(c), _) => format!("failed (exit {c})"),
            (None, Some(s)) => format!("failed (signal {s})"),
            _ => "failed".into(),
        },
        Outcome::TimedOut => "timed out".into(),
        Outcome::NoRun => match &r.no_run_reason {
            Some(why) => format!("no run: {why}"),
            None => "no run".into(),
        },
        Outcome::Held => {
            let Some(h) = &r.hold else {
                return "held".into();
            };
            format!("held: {}", h.reason)
        }
        o => o.as_str().replace('_', " "),
    }
}

/// One record on one line: when, (profile), outcome, how long, cost, why, what waited, what the
/// tray showed after, its id.
pub fn line(r: &Record, with_profile: bool, now_ms: i64) -> String {
    let when = r.started_ms().map_or_else(|| r.started_at.clone(), local);
    let mut cols = vec![when];
    if with_profile {
        cols.push(format!("{:<12}", r.profile));
    }
    let span = match (r.kind, r.duration_ms, &r.ended_at) {
        (Kind::Run, Some(d), _) => took(d),
        (_, _, Some(end)) => match (r.started_ms(), crate::core::history::unix_ms(end)) {
            (Some(a), Some(b)) => took(u64::try_from(b - a).unwrap_or(0)),
            _ => "-".into(),
        },
        _ => "-".into(),
    };
    cols.push(format!("{:<22}", outcome(r)));
    cols.push(format!("{span:>9}"));
    cols.push(format!("{:>8}", cost(r)));
    cols.push(format!("{:<18}", r.reason));
    let mut what = waited(r);
    if let Some(a) = &r.after {
        what.push_str(&format!(
            "; after: {} answered, {} waiting",
            a.answered, a.waiting
        ));
        if a.dismissed > 0 {
            what.push_str(&format!(", {} invite(s) dismissed", a.dismissed));
        }
    }
    if let Some(h) = &r.hold {
        match (
            &r.ended_at,
            h.until.as_deref().and_then(crate::core::history::unix_ms),
        ) {
            (Some(_), _) => what.push_str("; over"),
            (None, Some(until)) if until > now_ms => {
                what.push_str(&format!("; until {}", local(until)));
            }
            _ => {}
        }
        if h.wakes > 1 {
            what.push_str(&format!("; {} wakes held", h.wakes));
        }
    }
    if let Some(q) = r.queued_ms.filter(|q| *q > 0) {
        what.push_str(&format!("; queued {}", took(q)));
    }
    cols.push(what);
    cols.push(r.id.clone());
    cols.join("  ")
}

/// `today: 14 runs (1 failed), 3 holds, $0.83`.
pub fn summary_line(s: &Summary, label: &str) -> String {
    let mut out = format!("{label}: {}", plural(s.runs, "run"));
    if s.failed > 0 {
        out.push_str(&format!(" ({} failed)", s.failed));
    }
    out.push_str(&format!(", {}", plural(s.holds, "hold")));
    if s.cost_usd > 0.0 {
        out.push_str(&format!(", ${:.2}", s.cost_usd));
    } else if s.tokens > 0 {
        out.push_str(&format!(", {}", tokens(s.tokens)));
    }
    out
}

/// What an empty listing says.
pub fn nothing(filter: &Filter, profiles: usize) -> String {
    let what = if filter.failed {
        "no failed run"
    } else {
        "no run or hold"
    };
    let since = if filter.since_ms.is_some() {
        " in that time"
    } else {
        " yet"
    };
    let whose = if profiles == 1 { "" } else { " in any profile" };
    format!("{what}{since}{whose}")
}

/// The last lines of a run's log (at most 64 KiB of its end are read).
#[derive(Debug)]
pub enum LogTail {
    Lines(Vec<String>),
    Unreadable(String),
}

/// The tail of the run log at `path`.
pub fn log_tail(path: &str, lines: usize) -> LogTail {
    use std::io::{Read, Seek, SeekFrom};
    const MAX: u64 = 64 * 1024;
    let read = || -> std::io::Result<Vec<u8>> {
        let (mut f, meta) = crate::sys::fs::open_regular(std::path::Path::new(path))?;
        f.seek(SeekFrom::Start(meta.len().saturating_sub(MAX)))?;
        let mut bytes = Vec::new();
        f.take(MAX).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    match read() {
        Ok(bytes) => {
            let text = String::from_utf8_lossy(&bytes);
            let all: Vec<&str> = text.lines().collect();
            let from = all.len().saturating_sub(lines);
            LogTail::Lines(all.iter().skip(from).map(|l| (*l).to_string()).collect())
        }
        Err(e) => LogTail::Unreadable(e.to_string()),
    }
}

/// One record whole, a field a line, then the tail of its log.
pub fn show(r: &Record, log: Option<&LogTail>) -> String {
    let mut out = Vec::new();
    let mut field = |k: &str, v: String| out.push(format!("{k:<13} {v}"));
    field("id", r.id.clone());
    field("profile", r.profile.clone());
    field("kind", format!("{:?}", r.kind).to_lowercase());
    field("outcome", outcome(r));
    field(
        "started",
        r.started_ms().map_or_else(|| r.started_at.clone(), local),
    );
    if let Some(end) = r
        .ended_at
        .as_deref()
        .and_then(crate::core::history::unix_ms)
    {
        field("ended", local(end));
    }
    if let Some(d) = r.duration_ms {
        field("took", took(d));
    }
    field("woken for", r.reason.clone());
    field("waited", waited(r));
    if let Some(k) = &r.run_kind {
        field("run kind", k.clone());
    }
    if let Some(why) = &r.failure {
        field("failure", why.clone());
    }
    if r.cost_usd.is_some() || r.tokens.is_some() {
        let mut v = Vec::new();
        if let Some(c) = r.cost_usd {
            v.push(format!("${c:.4}"));
        }
        if let Some(t) = r.tokens {
            v.push(format!("{t} tokens"));
        }
        field("cost", v.join(", "));
    }
    if let Some(a) = &r.after {
        field(
            "after",
            format!(
                "{} answered, {} still waiting, {} invite(s) dismissed",
                a.answered, a.waiting, a.dismissed
            ),
        );
    }
    if let Some(h) = &r.hold {
        let until = h
            .until
            .clone()
            .unwrap_or_else(|| "a new message, a reload or the rule lifted".into());
        field(
            "hold",
            format!(
                "{} ({}), until {until}; {} wake(s) held",
                h.reason, h.key, h.wakes
            ),
        );
    }
    if let Some(q) = r.queued_ms {
        field(
            "queued",
            format!("{} (place {})", took(q), r.queue_place.unwrap_or(0)),
        );
    }
    if !r.counted && r.kind == Kind::Run {
        field("caps", "not counted".into());
    }
    if let Some(path) = &r.log {
        field("log", path.clone());
    }
    match log {
        Some(LogTail::Lines(lines)) => {
            out.push(String::new());
            out.push(format!("last {} line(s) of its log:", lines.len()));
            out.extend(lines.iter().cloned());
        }
        Some(LogTail::Unreadable(e)) => out.push(format!("its log cannot be read: {e}")),
        None => {}
    }
    out.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::history::{After, HoldNote};

    #[test]
    fn a_run_says_how_it_ended_what_waited_and_what_changed_on_one_line() {
        let mut r = Record::new("c1-ab".into(), Kind::Run, "bob", 0, Outcome::Failed);
        r.exit = Some(3);
        r.duration_ms = Some(41_000);
        r.cost_usd = Some(0.04);
        r.reason = "message".into();
        r.cards = 2;
        r.senders = vec!["@alice".into(), "@carol".into()];
        r.after = Some(After {
            answered: 1,
            waiting: 1,
            dismissed: 0,
        });
        let l = line(&r, true, 0);
        for part in [
            "bob",
            "failed (exit 3)",
            "41 s",
            "$0.04",
            "message",
            "2 cards from @alice @carol",
            "after: 1 answered, 1 waiting",
            "c1-ab",
        ] {
            assert!(l.contains(part), "{part} in {l}");
        }
    }

    #[test]
    fn a_hold_says_its_reason_until_when_and_the_wakes_it_held() {
        let mut r = Record::new("c2".into(), Kind::Hold, "bob", 0, Outcome::Held);
        r.hold = Some(HoldNote {
            reason: "quiet_hours".into(),
            key: "quiet_hours".into(),
            until: Some(crate::core::time::rfc3339_ms(3_600_000)),
            wakes: 3,
        });
        let l = line(&r, false, 1_000);
        assert!(l.contains("held: quiet_hours"), "{l}");
        assert!(l.contains("; until "), "{l}");
        assert!(l.contains("3 wakes held"), "{l}");
        r.ended_at = Some(crate::core::time::rfc3339_ms(3_600_000));
        assert!(line(&r, false, 4_000_000).contains("; over"));
    }

    #[test]
    fn the_summary_counts_runs_failures_holds_and_cost() {
        let s = Summary {
            runs: 14,
            failed: 1,
            holds: 3,
            cost_usd: 0.83,
            tokens: 0,
        };
        assert_eq!(
            summary_line(&s, "today"),
            "today: 14 runs (1 failed), 3 holds, $0.83"
        );
        assert_eq!(
            summary_line(&Summary::default(), "today"),
            "today: 0 runs, 0 holds"
        );
    }
}

//! The policy in words, for the lines issue 26 asks for: doctor's one line per profile
//! ([`summary`]), `status`'s hold ("runs wait: max_runs_per_hour reached, until 14:00",
//! [`hold_line`], or [`held_line`] from `status.json`'s `held`) and today's spending ("today: 14
//! runs, $0.83", [`today_line`], [`usage_line`]). Pure: the local time of `until` comes from the
//! injected offsets.

use super::clock::{self, Offsets};
use super::{FirstContact, Groups, Hold, HoldReason, Policy, Totals};
use crate::status::{Held, Usage};
use std::fmt::Write as _;

/// `[listen.policy]` in one line: `no rules`, or each rule set, in the keys' order.
pub fn summary(p: &Policy) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !p.quiet_hours.is_empty() {
        let ranges: Vec<String> = p
            .quiet_hours
            .iter()
            .map(|r| format!("{}-{}", hhmm(r.start), hhmm(r.end)))
            .collect();
        parts.push(format!("quiet {}", ranges.join(", ")));
    }
    if let Some(zone) = &p.timezone {
        parts.push(format!("time zone {zone}"));
    }
    if let Some(n) = p.max_runs_per_hour {
        parts.push(format!("at most {n} runs an hour"));
    }
    if let Some(n) = p.max_runs_per_day {
        parts.push(format!("{n} a day"));
    }
    if let Some(c) = p.max_cost_per_day_usd {
        parts.push(format!("{} a day", dollars(c)));
    }
    if let Some(n) = p.max_tokens_per_day {
        parts.push(format!("{n} tokens a day"));
    }
    if let Some(c) = p.max_cost_per_run_usd {
        parts.push(format!("{} a run", dollars(c)));
    }
    if p.first_contact == FirstContact::Wait {
        parts.push("first contact waits".into());
    }
    if p.groups == Groups::Mentions {
        parts.push("groups only when mentioned".into());
    }
    if let Some(allow) = &p.allow {
        parts.push(format!("allow {}", handles(allow)));
    }
    if !p.deny.is_empty() {
        parts.push(format!("deny {}", handles(&p.deny)));
    }
    if let Some(g) = p.loop_guard {
        let within = humantime::format_duration(std::time::Duration::from_millis(
            u64::try_from(g.within_ms).unwrap_or(0),
        ));
        parts.push(format!("loop guard {} runs in {within}", g.runs));
    }
    if parts.is_empty() {
        "no rules".into()
    } else {
        parts.join("; ")
    }
}

/// A sum in dollars as written: to the cent when that is exact (`$5.00`), else as many decimals
/// as it has (`$0.001`, not `$0.00`: issue 38 item 6).
pub fn dollars(x: f64) -> String {
    let cents = x * 100.0;
    if (cents - cents.round()).abs() < 1e-9 {
        return format!("${x:.2}");
    }
    let text = format!("{x:.6}");
    format!("${}", text.trim_end_matches('0'))
}

fn handles(list: &[super::HandlePattern]) -> String {
    let shown: Vec<String> = list.iter().map(|p| format!("@{}", p.0)).collect();
    shown.join(" ")
}

fn hhmm(minute: u16) -> String {
    format!("{:02}:{:02}", minute / 60, minute % 60)
}

/// `runs wait: max_runs_per_hour reached, until 14:00` (the local time; with the date when
/// `until` is not today). `now_ms` is when the line is written.
pub fn hold_line(hold: &Hold, now_ms: i64, offsets: &dyn Offsets) -> String {
    let mut line = reason_words(
        Some(hold.reason),
        hold.reason.as_str(),
        hold.key,
        &hold.cards,
        hold.invites.len(),
        hold.until.is_some(),
    );
    if let Some(until) = hold.until {
        let _ = write!(line, ", until {}", local_time(until, now_ms, offsets));
        line.push_str(loop_tail(Some(hold.reason)));
    }
    line
}

/// After a loop hold's end: what moves it.
fn loop_tail(reason: Option<HoldReason>) -> &'static str {
    match reason {
        Some(HoldReason::LoopGuard) => " unless its other side writes again",
        _ => "",
    }
}

/// The zone `status` tells a hold's end in: the policy's own `timezone` when it could read it,
/// else the machine's. The name is said only where the two zones would tell the time apart.
#[derive(Clone, Copy)]
pub struct ShownZone<'a> {
    /// The offsets `until` and today are told in.
    pub offsets: &'a dyn Offsets,
    /// The policy's `timezone`; `None` for the machine's own zone.
    pub name: Option<&'a str>,
    /// The machine's zone, the reader's local time.
    pub machine: &'a dyn Offsets,
}

impl<'a> ShownZone<'a> {
    /// The machine's own zone: never named.
    pub fn machine(offsets: &'a dyn Offsets) -> ShownZone<'a> {
        ShownZone {
            offsets,
            name: None,
            machine: offsets,
        }
    }

    /// The name to say after a time at `at_ms` written at `now_ms`: when the zone's offset differs
    /// from the machine's at either (the time, or whether it is today, would read otherwise).
    fn name_for(&self, at_ms: i64, now_ms: i64) -> Option<&'a str> {
        let differs = [at_ms, now_ms]
            .into_iter()
            .any(|t| self.offsets.offset_at(t) != self.machine.offset_at(t));
        self.name.filter(|_| differs)
    }
}

/// [`hold_line`]'s words for `status.json`'s `held`, as `agentchat status` reads it back: the
/// same line for every reason this version knows, `runs wait: <reason> (<key>)` for one a newer
/// listener wrote, and an `until` that is not RFC 3339 shown as written. `until` is told in
/// `zone`, with its name when it is not the machine's (`until 14:00 Europe/Berlin`).
pub fn held_line(held: &Held, now_ms: i64, zone: ShownZone<'_>) -> String {
    let reason = ALL_REASONS.into_iter().find(|r| r.as_str() == held.reason);
    let mut line = reason_words(
        reason,
        &held.reason,
        &held.key,
        &held.cards,
        held.invites.len(),
        held.until.is_some(),
    );
    if let Some(until) = held.until.as_deref().filter(|u| !u.is_empty()) {
        let shown = humantime::parse_rfc3339_weak(until)
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .and_then(|d| i64::try_from(d.as_millis()).ok())
            .map_or_else(
                || until.to_string(),
                |ms| {
                    let time = local_time(ms, now_ms, zone.offsets);
                    match zone.name_for(ms, now_ms) {
                        Some(name) => format!("{time} {name}"),
                        None => time,
                    }
                },
            );
        let _ = write!(line, ", until {shown}");
        line.push_str(loop_tail(reason));
    }
    line
}

const ALL_REASONS: [HoldReason; 6] = [
    HoldReason::QuietHours,
    HoldReason::RunsPerHour,
    HoldReason::RunsPerDay,
    HoldReason::CostPerDay,
    HoldReason::LoopGuard,
    HoldReason::NotAllowed,
];

/// A hold's line before its `until`; `raw` and `key` name a reason this version does not know.
/// A loop guard's line names its conversations and how the hold ends (issue 38 item 2).
fn reason_words(
    reason: Option<HoldReason>,
    raw: &str,
    key: &str,
    card_ids: &[String],
    invites: usize,
    ends: bool,
) -> String {
    let cards = card_ids.len();
    match reason {
        Some(HoldReason::QuietHours) => "runs wait: quiet hours".to_string(),
        Some(HoldReason::RunsPerHour | HoldReason::RunsPerDay | HoldReason::CostPerDay) => {
            format!("runs wait: {key} reached")
        }
        Some(HoldReason::LoopGuard) => {
            let shown: Vec<&str> = card_ids.iter().take(3).map(String::as_str).collect();
            let more = match cards.saturating_sub(3) {
                0 => String::new(),
                n => format!(" and {n} more"),
            };
            let which = format!("{}{more}", shown.join(", "));
            if ends {
                format!("runs wait: loop_guard holds a loop in {which} (a reload lets it go)")
            } else {
                format!(
                    "runs wait: loop_guard: the loop in {which} is over; its last message wakes \
                     no run until a newer one comes (a reload lets it go)"
                )
            }
        }
        Some(HoldReason::NotAllowed) => {
            let mut what = Vec::new();
            if cards > 0 {
                what.push(count(cards, "card"));
            }
            if invites > 0 {
                what.push(count(invites, "invite"));
            }
            if what.is_empty() {
                return format!("runs wait: no card from a sender allowed to wake a run ({key})");
            }
            format!("{} may not wake a run ({key})", what.join(" and "))
        }
        None => format!("runs wait: {raw} ({key})"),
    }
}

fn count(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// `today: 14 runs, $0.83` (and the tokens when a run reported tokens but no cost).
pub fn today_line(day: &Totals) -> String {
    let runs = count(usize::try_from(day.runs).unwrap_or(usize::MAX), "run");
    // Nothing reported (no run yet, or a script's runs, which report no cost): no "$0.00".
    if day.cost_usd > 0.0 {
        let shown = if day.cost_usd < 0.005 {
            dollars(day.cost_usd)
        } else {
            format!("${:.2}", day.cost_usd)
        };
        match day.estimated {
            0 => format!("today: {runs}, {shown}"),
            n => format!(
                "today: {runs}, {shown} ({} ended before reporting: counted at the per-run budget)",
                count(usize::try_from(n).unwrap_or(usize::MAX), "run")
            ),
        }
    } else if day.tokens > 0 {
        format!("today: {runs}, {} tokens", day.tokens)
    } else {
        format!("today: {runs}")
    }
}

/// `today: 14 runs, $0.83; this hour: 3 runs`: [`today_line`] for `usage.today`, then this
/// local hour's runs (what `max_runs_per_hour` counts), from `status.json`'s `usage`.
pub fn usage_line(usage: &Usage) -> String {
    let today = Totals {
        runs: usage.today.runs,
        cost_usd: usage.today.cost_usd,
        tokens: usage.today.tokens,
        estimated: usage.today.estimated,
    };
    let hour = count(
        usize::try_from(usage.this_hour.runs).unwrap_or(usize::MAX),
        "run",
    );
    format!("{}; this hour: {hour}", today_line(&today))
}

/// `14:00` today (local), else `2026-10-25 07:00`.
fn local_time(at_ms: i64, now_ms: i64, offsets: &dyn Offsets) -> String {
    let minute = clock::local_minute_of_day(offsets, at_ms);
    let time = format!("{:02}:{:02}", minute / 60, minute % 60);
    let day = clock::local_day(offsets, at_ms);
    if day == clock::local_day(offsets, now_ms) {
        return time;
    }
    let (y, m, d) = civil(day);
    format!("{y:04}-{m:02}-{d:02} {time}")
}

/// Days since 1970-01-01 -> (year, month, day), proleptic Gregorian (H. Hinnant's
/// `civil_from_days`).
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (
        y,
        u32::try_from(m).unwrap_or(1),
        u32::try_from(d).unwrap_or(1),
    )
}

#[cfg(test)]
mod tests {
    use super::super::clock::FixedOffset;
    use super::*;

    #[test]
    fn the_summary_names_each_rule_set_or_says_there_is_none() {
        assert_eq!(summary(&Policy::default()), "no rules");
        let cheap = Policy {
            max_cost_per_run_usd: Some(0.001),
            max_cost_per_day_usd: Some(0.5),
            ..Policy::default()
        };
        assert_eq!(
            summary(&cheap),
            "$0.50 a day; $0.001 a run",
            "issue 38 item 6"
        );
        let p = Policy::from_toml(
            toml::from_str(
                r#"quiet_hours = ["22:00-07:00"]
                max_runs_per_hour = 12
                max_cost_per_day_usd = 5
                first_contact = "wait"
                allow = ["@Alice", "@ops-*"]
                loop_guard = { runs = 6, within = "30m" }"#,
            )
            .unwrap(),
            "listen.policy",
        )
        .unwrap();
        assert_eq!(
            summary(&p),
            "quiet 22:00-07:00; at most 12 runs an hour; 500 a day; $5.00 a day; \
             first contact waits; allow @alice @ops-*; loop guard 6 runs in 30m"
        );
    }

    #[test]
    fn a_hold_says_its_key_and_local_end() {
        let z = FixedOffset(2 * 3600);
        let hold = Hold {
            reason: HoldReason::RunsPerHour,
            key: "max_runs_per_hour",
            until: Some(12 * 3_600_000), // 14:00 local
            cards: vec!["c".into()],
            invites: vec![],
            unseen: vec![],
            truncated: false,
        };
        assert_eq!(
            hold_line(&hold, 11 * 3_600_000, &z),
            "runs wait: max_runs_per_hour reached, until 14:00"
        );
        // Another day: with its date (2026-10-25 07:00 local).
        let later = Hold {
            reason: HoldReason::QuietHours,
            key: "quiet_hours",
            until: Some(1_792_908_000_000),
            ..hold.clone()
        };
        assert_eq!(
            hold_line(&later, 0, &FixedOffset(3600)),
            "runs wait: quiet hours, until 2026-10-25 07:00"
        );
        let refused = Hold {
            cards: vec!["a".into(), "b".into()],
            invites: vec!["i".into()],
            ..Hold::by_time(HoldReason::NotAllowed, "allow", None)
        };
        assert_eq!(
            hold_line(&refused, 0, &z),
            "2 cards and 1 invite may not wake a run (allow)"
        );
    }

    #[test]
    fn today_says_runs_and_cost_or_tokens() {
        let t = |runs, cost_usd, tokens| Totals {
            runs,
            cost_usd,
            tokens,
            estimated: 0,
        };
        assert_eq!(today_line(&t(14, 0.834, 0)), "today: 14 runs, $0.83");
        assert_eq!(
            today_line(&t(1, 0.0, 0)),
            "today: 1 run",
            "a script reports no cost"
        );
        assert_eq!(today_line(&t(3, 0.0, 1200)), "today: 3 runs, 1200 tokens");
    }

    fn held(reason: &str, key: &str, until: Option<&str>) -> Held {
        Held {
            reason: reason.into(),
            key: key.into(),
            until: until.map(String::from),
            since: "2026-11-30T11:40:00Z".into(),
            cards: vec!["conv_a".into(), "conv_b".into()],
            ..Held::default()
        }
    }

    #[test]
    fn a_held_status_says_the_hold_with_its_local_end() {
        // 2026-11-30T12:00:00Z is 14:00 two hours east of UTC; "now" is 11:30Z the same day.
        let now = 1_796_038_200_000;
        let east = FixedOffset(2 * 3600);
        let h = held(
            "runs_per_hour",
            "max_runs_per_hour",
            Some("2026-11-30T12:00:00Z"),
        );
        assert_eq!(
            held_line(&h, now, ShownZone::machine(&east)),
            "runs wait: max_runs_per_hour reached, until 14:00"
        );
        // The same instant in UTC, and on another local day with its date.
        assert!(held_line(&h, now, ShownZone::machine(&FixedOffset(0))).ends_with("until 12:00"));
        assert!(
            held_line(&h, now, ShownZone::machine(&FixedOffset(12 * 3600)))
                .ends_with("until 2026-12-01 00:00"),
            "{}",
            held_line(&h, now, ShownZone::machine(&FixedOffset(12 * 3600)))
        );
        // Every reason this version writes reads as `hold_line` says it.
        let quiet = held("quiet_hours", "quiet_hours", Some("2026-11-30T12:00:00Z"));
        assert_eq!(
            held_line(&quiet, now, ShownZone::machine(&east)),
            "runs wait: quiet hours, until 14:00"
        );
        let cost = held("cost_per_day", "max_tokens_per_day", None);
        assert_eq!(
            held_line(&cost, now, ShownZone::machine(&east)),
            "runs wait: max_tokens_per_day reached"
        );
        let guard = held("loop_guard", "loop_guard", Some("2026-11-30T12:00:00Z"));
        assert_eq!(
            held_line(&guard, now, ShownZone::machine(&east)),
            "runs wait: loop_guard holds a loop in conv_a, conv_b (a reload lets it go), until \
             14:00 unless its other side writes again"
        );
        let over = held("loop_guard", "loop_guard", None);
        assert!(
            held_line(&over, now, ShownZone::machine(&east))
                .contains("the loop in conv_a, conv_b is over"),
            "{}",
            held_line(&over, now, ShownZone::machine(&east))
        );
        let refused = held("not_allowed", "first_contact", None);
        assert_eq!(
            held_line(&refused, now, ShownZone::machine(&east)),
            "2 cards may not wake a run (first_contact)"
        );
        let none = Held {
            cards: vec![],
            ..refused
        };
        assert_eq!(
            held_line(&none, now, ShownZone::machine(&east)),
            "runs wait: no card from a sender allowed to wake a run (first_contact)"
        );
        // A reason from a newer listener, and an `until` that is not a time, as written.
        let newer = held("moon_phase", "max_moons", Some("soon"));
        assert_eq!(
            held_line(&newer, now, ShownZone::machine(&east)),
            "runs wait: moon_phase (max_moons), until soon"
        );
    }

    #[test]
    fn a_held_status_tells_its_end_in_the_policys_zone_and_names_it_when_not_the_machines() {
        // 2026-11-30T12:00:00Z: 13:00 in Berlin (winter), 14:00 two hours east; now 11:30Z.
        let now = 1_796_038_200_000;
        let (berlin, east) = (FixedOffset(3600), FixedOffset(2 * 3600));
        let h = held("quiet_hours", "quiet_hours", Some("2026-11-30T12:00:00Z"));
        let zone = |machine| ShownZone {
            offsets: &berlin,
            name: Some("Europe/Berlin"),
            machine,
        };
        assert_eq!(
            held_line(&h, now, zone(&east)),
            "runs wait: quiet hours, until 13:00 Europe/Berlin"
        );
        // A machine whose clock reads the same as the policy's needs no name.
        assert_eq!(
            held_line(&h, now, zone(&FixedOffset(3600))),
            "runs wait: quiet hours, until 13:00"
        );
        // The day boundary is the policy zone's: 12:00Z is tomorrow's 00:00 twelve hours east.
        let far = FixedOffset(12 * 3600);
        let pacific = ShownZone {
            offsets: &far,
            name: Some("Pacific/Auckland"),
            machine: &FixedOffset(0),
        };
        assert_eq!(
            held_line(&h, now, pacific),
            "runs wait: quiet hours, until 2026-12-01 00:00 Pacific/Auckland"
        );
        // The same offset at the end but not now (a DST change between): named, since whether
        // it is today could read otherwise.
        struct Changes(i64);
        impl Offsets for Changes {
            fn offset_at(&self, utc_ms: i64) -> i32 {
                if utc_ms < self.0 { 0 } else { 3600 }
            }
            fn next_change(&self, _: i64) -> Option<i64> {
                None
            }
        }
        let changing = Changes(now + 1);
        let z = ShownZone {
            offsets: &berlin,
            name: Some("Europe/Berlin"),
            machine: &changing,
        };
        assert!(held_line(&h, now, z).ends_with("until 13:00 Europe/Berlin"));
        // An `until` that is not a time is shown as written, with no zone.
        let soon = held("quiet_hours", "quiet_hours", Some("soon"));
        assert!(held_line(&soon, now, zone(&east)).ends_with("until soon"));
    }

    #[test]
    fn usage_says_today_with_cost_or_tokens_and_this_hours_runs() {
        use crate::status::UsageTotals;
        let usage = |today: UsageTotals, hour: u64| Usage {
            this_hour: UsageTotals {
                runs: hour,
                ..UsageTotals::default()
            },
            today,
        };
        let t = |runs, cost_usd, tokens| UsageTotals {
            runs,
            cost_usd,
            tokens,
            estimated: 0,
        };
        assert_eq!(
            usage_line(&usage(t(14, 0.834, 52_000), 3)),
            "today: 14 runs, $0.83; this hour: 3 runs"
        );
        assert_eq!(
            usage_line(&usage(t(2, 0.0, 1200), 1)),
            "today: 2 runs, 1200 tokens; this hour: 1 run"
        );
        assert_eq!(
            usage_line(&Usage::default()),
            "today: 0 runs; this hour: 0 runs"
        );
    }
}

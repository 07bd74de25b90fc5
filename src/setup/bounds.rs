//! Setup's step for the bounds on runs (issue 38 item 1): the profile's runs an hour and a day
//! and its loop guard, shown as the listener will apply them (the defaults of
//! `core::policy::DEFAULTS` until the config says otherwise), and on a terminal asked; what the
//! user changes goes into the profile's `[listen.policy]`. A scripted setup keeps them and says
//! them.

use super::tty;
use crate::core::policy::{LoopGuard, Policy};
use toml_edit::Value;

/// `bounds: runs an hour at most 60; runs a day at most 500; loop guard 30 runs in 1h (...)`,
/// each part `no cap` / `off` when lifted.
pub fn said(p: &Policy) -> String {
    let cap = |n: Option<u32>| n.map_or_else(|| "no cap".to_string(), |n| format!("at most {n}"));
    let guard = p.loop_guard.map_or_else(
        || "off".to_string(),
        |g| format!("{} runs in {}", g.runs, within(g)),
    );
    format!(
        "bounds: runs an hour {}; runs a day {}; loop guard {guard} (a conversation that many \
         runs saw in that time is held as a loop; `0` lifts each: docs/operating.md)",
        cap(p.max_runs_per_hour),
        cap(p.max_runs_per_day),
    )
}

fn within(g: LoopGuard) -> String {
    let ms = u64::try_from(g.within_ms).unwrap_or(0);
    humantime::format_duration(std::time::Duration::from_millis(ms)).to_string()
}

/// Says the bounds and, when `ask`, whether to keep them; the `[listen.policy]` keys to write
/// (their name under the table and value), only those the user changed.
pub fn choose(p: &Policy, ask: bool) -> anyhow::Result<Vec<(&'static str, Value)>> {
    println!("{}", said(p));
    if !ask || tty::confirm("Keep these bounds on runs?", true)? {
        return Ok(Vec::new());
    }
    let mut keys = Vec::new();
    let hour = count("Most runs an hour (0: no cap)", p.max_runs_per_hour)?;
    if hour != p.max_runs_per_hour.unwrap_or(0) {
        keys.push(("max_runs_per_hour", Value::from(i64::from(hour))));
    }
    let day = count("Most runs a day (0: no cap)", p.max_runs_per_day)?;
    if day != p.max_runs_per_day.unwrap_or(0) {
        keys.push(("max_runs_per_day", Value::from(i64::from(day))));
    }
    let window = p.loop_guard.map_or_else(|| "1h".to_string(), within);
    let runs = count(
        &format!("Runs in {window} that make a conversation a loop (0: no loop guard)"),
        p.loop_guard.map(|g| g.runs),
    )?;
    if runs != p.loop_guard.map_or(0, |g| g.runs) {
        let mut t = toml_edit::InlineTable::new();
        t.insert("runs", Value::from(i64::from(runs)));
        if runs > 0 {
            t.insert("within", Value::from(window));
        }
        keys.push(("loop_guard", Value::InlineTable(t)));
    }
    Ok(keys)
}

/// Asks for a whole number from 0 up until one is given.
fn count(question: &str, now: Option<u32>) -> anyhow::Result<u32> {
    let default = now.unwrap_or(0).to_string();
    loop {
        match tty::ask(question, &default)?.parse::<u32>() {
            Ok(n) => return Ok(n),
            Err(_) => println!("Please give a whole number, 0 for none."),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_are_said_and_a_lifted_bound_says_so() {
        let defaults =
            crate::core::policy::Policy::from_toml(toml::Table::new(), "listen.policy").unwrap();
        assert!(
            said(&defaults).starts_with(
                "bounds: runs an hour at most 60; runs a day at most 500; loop guard 30 runs in 1h"
            ),
            "{}",
            said(&defaults)
        );
        assert!(
            said(&Policy::default())
                .starts_with("bounds: runs an hour no cap; runs a day no cap; loop guard off")
        );
    }
}

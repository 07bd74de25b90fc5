//! The page in the Prometheus text exposition format (version 0.0.4), for one profile or many.

use super::defs::*;
use super::probes::readiness;
use super::{Inner, Metrics};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

/// One family of the page: its samples come together, under one `# HELP` and `# TYPE`, whatever
/// the number of profiles (the text format wants a family's lines as one group).
#[derive(Clone, Copy)]
enum Family {
    Counter(&'static Def),
    /// A counter of a float (dollars).
    Sum(&'static Def),
    Histogram(&'static Def),
    State,
    Ready,
    RunInProgress,
    LastFrameAge,
    LoopAge,
    StartTime,
    Held,
}

/// The page's families, in the order they are written.
const FAMILIES: &[Family] = &[
    Family::Counter(&WAKES),
    Family::Counter(&ACKS),
    Family::Counter(&FRAMES),
    Family::Counter(&FRAMES_SKIPPED),
    Family::Counter(&CONNECTS),
    Family::Counter(&CLOSES),
    Family::Counter(&KEY_REFUSALS),
    Family::Counter(&CYCLES),
    Family::Counter(&NO_RUN),
    Family::Counter(&RUNS),
    Family::Sum(&RUN_COST),
    Family::Counter(&RUN_TOKENS),
    Family::Counter(&INVITES_COUNTED),
    Family::Counter(&INVITES_DISMISSED),
    Family::Histogram(&RUN_DURATION),
    Family::Histogram(&WAKE_TO_RUN),
    Family::State,
    Family::Ready,
    Family::RunInProgress,
    Family::LastFrameAge,
    Family::LoopAge,
    Family::StartTime,
    Family::Held,
];

impl Family {
    fn def(self) -> &'static Def {
        match self {
            Family::Counter(d) | Family::Sum(d) | Family::Histogram(d) => d,
            Family::State => &STATE,
            Family::Ready => &READY,
            Family::RunInProgress => &RUN_IN_PROGRESS,
            Family::LastFrameAge => &LAST_FRAME_AGE,
            Family::LoopAge => &LOOP_AGE,
            Family::StartTime => &START_TIME,
            Family::Held => &HELD,
        }
    }
}

impl Metrics {
    /// The whole page in the Prometheus text format, this profile alone.
    pub fn render(&self) -> String {
        page(&[self], &[])
    }
}

/// The page for every profile of `profiles`, and `failed`, the profiles that could not start
/// (`agentchat_ready` 0 and `agentchat_profile_failed` 1 each). Each profile's registry is locked
/// once, so its samples are one moment's; the families are then written one after the other.
pub(super) fn page(profiles: &[&Metrics], failed: &[&str]) -> String {
    let mut groups: Vec<String> = FAMILIES.iter().map(|_| String::new()).collect();
    for m in profiles {
        let i = m.inner.lock().unwrap_or_else(|e| e.into_inner());
        let profile = escape(&m.profile);
        for (family, out) in FAMILIES.iter().zip(groups.iter_mut()) {
            samples(*family, m, &i, &profile, out);
        }
    }
    let body: usize = groups.iter().map(String::len).sum();
    let mut out = String::with_capacity(body + 4 * 1024);
    let head = |out: &mut String, def: &Def| {
        let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
        let _ = writeln!(out, "# TYPE {} {}", def.name, def.kind);
    };
    for (family, group) in FAMILIES.iter().zip(&groups) {
        head(&mut out, family.def());
        out.push_str(group);
        if matches!(family, Family::Ready) {
            for p in failed {
                series(&mut out, &escape(p), READY.name, &[], "0".into());
            }
        }
    }
    if !failed.is_empty() {
        head(&mut out, &PROFILE_FAILED);
        for p in failed {
            series(&mut out, &escape(p), PROFILE_FAILED.name, &[], "1".into());
        }
    }
    out
}

/// One sample line; `profile` is already escaped.
fn series(out: &mut String, profile: &str, name: &str, labels: &[(&str, String)], value: String) {
    let _ = write!(out, "{name}{{profile=\"{profile}\"");
    for (k, v) in labels {
        let _ = write!(out, ",{k}=\"{}\"", escape(v));
    }
    let _ = writeln!(out, "}} {value}");
}

/// One profile's samples of one family.
fn samples(family: Family, m: &Metrics, i: &Inner, profile: &str, out: &mut String) {
    let series = |out: &mut String, name: &str, labels: &[(&str, String)], value: String| {
        series(out, profile, name, labels, value)
    };
    match family {
        Family::Counter(def) => {
            for (labels, v) in i.counters.get(def.name).into_iter().flatten() {
                series(out, def.name, labels, v.to_string());
            }
        }
        Family::Sum(def) => {
            for (labels, v) in i.sums.get(def.name).into_iter().flatten() {
                series(out, def.name, labels, format_f64(*v));
            }
        }
        Family::Histogram(def) => {
            for (labels, h) in i.histograms.get(def.name).into_iter().flatten() {
                let bucket = format!("{}_bucket", def.name);
                let mut cumulative = 0;
                for (bound, n) in h.bounds.iter().zip(&h.counts) {
                    cumulative += n;
                    let mut l = labels.clone();
                    l.push(("le", format_f64(*bound)));
                    series(out, &bucket, &l, cumulative.to_string());
                }
                let mut l = labels.clone();
                l.push(("le", "+Inf".into()));
                series(out, &bucket, &l, h.count.to_string());
                series(out, &format!("{}_sum", def.name), labels, format_f64(h.sum));
                series(
                    out,
                    &format!("{}_count", def.name),
                    labels,
                    h.count.to_string(),
                );
            }
        }
        Family::State => {
            let mut states: Vec<&str> = STATES.to_vec();
            if !i.state.is_empty() && !states.contains(&i.state.as_str()) {
                states.push(&i.state);
            }
            for s in states {
                let v = u8::from(s == i.state);
                series(out, STATE.name, &[("state", s.to_string())], v.to_string());
            }
        }
        Family::Ready => {
            let ready = u8::from(readiness(&i.state, &i.socket, i.no_texts).code == 200);
            series(out, READY.name, &[], ready.to_string());
        }
        Family::RunInProgress => {
            let running = u8::from(i.run_started.is_some());
            series(out, RUN_IN_PROGRESS.name, &[], running.to_string());
        }
        Family::LastFrameAge => {
            if let Some(t) = i.last_frame {
                let age = format_f64(secs3(t.elapsed()));
                series(out, LAST_FRAME_AGE.name, &[], age);
            }
        }
        Family::LoopAge => {
            if let Some(t) = i.last_turn {
                series(out, LOOP_AGE.name, &[], format_f64(secs3(t.elapsed())));
            }
        }
        Family::StartTime => {
            let start = m
                .started_at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default();
            series(out, START_TIME.name, &[], format_f64(secs3(start)));
        }
        Family::Held => {
            for r in HOLD_REASONS {
                let v = u8::from(i.held.as_deref() == Some(*r));
                series(out, HELD.name, &[("reason", r.to_string())], v.to_string());
            }
        }
    }
}

fn secs3(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}

/// A sample value or `le` bound as Prometheus writes it (`1.0`, `0.5`, `+Inf`).
fn format_f64(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.1}")
    } else {
        format!("{v}")
    }
}

/// A label value escaped for the text format: backslash, double quote and newline.
fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::engine::WakeCause;
    use crate::core::reconnect::CloseKind;

    fn sample<'a>(page: &'a str, series: &str) -> Option<&'a str> {
        page.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
    }

    #[test]
    fn the_page_moves_with_the_hooks_and_keeps_label_values_on_fixed_lists() {
        let m = Metrics::new("work");
        m.wake(&WakeCause::Message(None), 1);
        m.wake(&WakeCause::Wake("reminder".into()), 1);
        m.wake(&WakeCause::Wake("something_new".into()), 1);
        for text in [
            r#"{"type":"message.new","payload":{"id":"msg_secret","content":"hello"}}"#,
            r#"{"type":"made.up","payload":{}}"#,
            "not json",
        ] {
            m.frame(crate::core::frames::type_label(text));
        }
        m.burst(0, 1);
        m.connect_accepted();
        m.socket_down(&CloseKind::KeyRefused);
        m.socket_down(&CloseKind::Budget { retry_after_s: 5 });
        m.cycle_started();
        m.run_started();
        m.run_ended(
            "script",
            &crate::runtime::RunOutcome::Completed,
            Duration::from_millis(2500),
        );
        let page = m.render();
        for (series, value) in [
            (
                r#"agentchat_wakes_total{profile="work",reason="message"}"#,
                "1",
            ),
            (
                r#"agentchat_wakes_total{profile="work",reason="reminder"}"#,
                "1",
            ),
            (
                r#"agentchat_wakes_total{profile="work",reason="other"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="message.new"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="other"}"#,
                "1",
            ),
            (
                r#"agentchat_frames_total{profile="work",type="malformed"}"#,
                "1",
            ),
            (r#"agentchat_acks_total{profile="work"}"#, "1"),
            (
                r#"agentchat_socket_connects_total{profile="work",result="accepted",kind="none"}"#,
                "1",
            ),
            (
                r#"agentchat_socket_closes_total{profile="work",kind="key_refused"}"#,
                "1",
            ),
            (
                r#"agentchat_socket_connects_total{profile="work",result="refused",kind="connect_budget"}"#,
                "1",
            ),
            (r#"agentchat_key_refusals_total{profile="work"}"#, "1"),
            (
                r#"agentchat_runs_total{profile="work",runtime="script",outcome="completed"}"#,
                "1",
            ),
            (
                r#"agentchat_run_duration_seconds_bucket{profile="work",runtime="script",le="1.0"}"#,
                "0",
            ),
            (
                r#"agentchat_run_duration_seconds_bucket{profile="work",runtime="script",le="5.0"}"#,
                "1",
            ),
            (
                r#"agentchat_run_duration_seconds_sum{profile="work",runtime="script"}"#,
                "2.5",
            ),
            (
                r#"agentchat_wake_to_run_seconds_count{profile="work"}"#,
                "1",
            ),
            (r#"agentchat_run_in_progress{profile="work"}"#, "0"),
        ] {
            assert_eq!(sample(&page, series), Some(value), "{series} in\n{page}");
        }
        assert!(
            !page.contains("msg_secret") && !page.contains("hello"),
            "{page}"
        );
        assert!(
            !page.contains("something_new") && !page.contains("made.up"),
            "{page}"
        );
    }

    #[test]
    fn run_reports_add_up_per_runtime_and_what_was_not_reported_adds_nothing() {
        use crate::core::run_report::{RunReport, Usage};
        let m = Metrics::new("work");
        let usage = |input, output| {
            Some(Usage {
                input,
                cached_input: 0,
                output,
            })
        };
        m.run_reported(
            "claude-code",
            &RunReport {
                cost_usd: Some(0.25),
                usage: usage(100, 10),
                partial: false,
            },
        );
        m.run_reported(
            "claude-code",
            &RunReport {
                cost_usd: Some(0.125),
                usage: usage(50, 5),
                partial: false,
            },
        );
        m.run_reported(
            "codex",
            &RunReport {
                cost_usd: None,
                usage: usage(7, 3),
                partial: false,
            },
        );
        m.run_reported("script", &RunReport::default());
        let page = m.render();
        for (series, value) in [
            (
                r#"agentchat_run_cost_usd_total{profile="work",runtime="claude-code"}"#,
                "0.375",
            ),
            (
                r#"agentchat_run_tokens_total{profile="work",runtime="claude-code",kind="input"}"#,
                "150",
            ),
            (
                r#"agentchat_run_tokens_total{profile="work",runtime="claude-code",kind="output"}"#,
                "15",
            ),
            (
                r#"agentchat_run_tokens_total{profile="work",runtime="codex",kind="input"}"#,
                "7",
            ),
        ] {
            assert_eq!(sample(&page, series), Some(value), "{series} in\n{page}");
        }
        assert!(
            page.contains("# TYPE agentchat_run_cost_usd_total counter"),
            "{page}"
        );
        assert!(
            !page.contains(r#"agentchat_run_cost_usd_total{profile="work",runtime="codex"}"#),
            "{page}"
        );
        assert!(!page.contains(r#"runtime="script""#), "{page}");
    }

    #[test]
    fn an_off_registry_records_nothing() {
        let m = Metrics::off();
        m.wake(&WakeCause::Message(None), 1);
        m.burst(0, 1);
        let page = m.render();
        assert!(
            !page.contains("agentchat_wakes_total{") && !page.contains("agentchat_acks_total{"),
            "{page}"
        );
    }
}

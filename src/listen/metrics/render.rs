//! The page in the Prometheus text exposition format (version 0.0.4).

use super::defs::*;
use super::{Metrics, readiness};
use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

impl Metrics {
    /// The whole page in the Prometheus text format.
    pub fn render(&self) -> String {
        let i = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::with_capacity(8 * 1024);
        let profile = escape(&self.profile);
        let series = |out: &mut String, name: &str, labels: &[(&str, String)], value: String| {
            let _ = write!(out, "{name}{{profile=\"{profile}\"");
            for (k, v) in labels {
                let _ = write!(out, ",{k}=\"{}\"", escape(v));
            }
            let _ = writeln!(out, "}} {value}");
        };
        let head = |out: &mut String, def: &Def| {
            let _ = writeln!(out, "# HELP {} {}", def.name, def.help);
            let _ = writeln!(out, "# TYPE {} {}", def.name, def.kind);
        };
        for def in [
            &WAKES,
            &ACKS,
            &FRAMES,
            &FRAMES_SKIPPED,
            &CONNECTS,
            &CLOSES,
            &KEY_REFUSALS,
            &CYCLES,
            &NO_RUN,
            &RUNS,
            &INVITES_COUNTED,
            &INVITES_DISMISSED,
        ] {
            head(&mut out, def);
            for (labels, v) in i.counters.get(def.name).into_iter().flatten() {
                series(&mut out, def.name, labels, v.to_string());
            }
        }
        for def in [&RUN_DURATION, &WAKE_TO_RUN] {
            head(&mut out, def);
            for (labels, h) in i.histograms.get(def.name).into_iter().flatten() {
                let mut cumulative = 0;
                for (bound, n) in h.bounds.iter().zip(&h.counts) {
                    cumulative += n;
                    let mut l = labels.clone();
                    l.push(("le", format_f64(*bound)));
                    series(
                        &mut out,
                        &format!("{}_bucket", def.name),
                        &l,
                        cumulative.to_string(),
                    );
                }
                let mut l = labels.clone();
                l.push(("le", "+Inf".into()));
                series(
                    &mut out,
                    &format!("{}_bucket", def.name),
                    &l,
                    h.count.to_string(),
                );
                series(
                    &mut out,
                    &format!("{}_sum", def.name),
                    labels,
                    format_f64(h.sum),
                );
                series(
                    &mut out,
                    &format!("{}_count", def.name),
                    labels,
                    h.count.to_string(),
                );
            }
        }
        head(&mut out, &STATE);
        let mut states: Vec<&str> = STATES.to_vec();
        if !i.state.is_empty() && !states.contains(&i.state.as_str()) {
            states.push(&i.state);
        }
        for s in states {
            let v = u8::from(s == i.state);
            series(
                &mut out,
                STATE.name,
                &[("state", s.to_string())],
                v.to_string(),
            );
        }
        head(&mut out, &READY);
        let ready = u8::from(readiness(&i.state, &i.socket, i.no_texts).code == 200);
        series(&mut out, READY.name, &[], ready.to_string());
        head(&mut out, &RUN_IN_PROGRESS);
        let running = u8::from(i.run_started.is_some());
        series(&mut out, RUN_IN_PROGRESS.name, &[], running.to_string());
        head(&mut out, &LAST_FRAME_AGE);
        if let Some(t) = i.last_frame {
            series(
                &mut out,
                LAST_FRAME_AGE.name,
                &[],
                format_f64(secs3(t.elapsed())),
            );
        }
        head(&mut out, &LOOP_AGE);
        if let Some(t) = i.last_turn {
            series(&mut out, LOOP_AGE.name, &[], format_f64(secs3(t.elapsed())));
        }
        head(&mut out, &START_TIME);
        let start = self
            .started_at
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap_or_default();
        series(&mut out, START_TIME.name, &[], format_f64(secs3(start)));
        out
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
        m.wake(&WakeCause::Message, 1);
        m.wake(&WakeCause::Wake("reminder".into()), 1);
        m.wake(&WakeCause::Wake("something_new".into()), 1);
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            r#"{"type":"message.new","payload":{"id":"msg_secret","content":"hello"}}"#.into(),
        ));
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            r#"{"type":"made.up","payload":{}}"#.into(),
        ));
        m.frame(&tokio_tungstenite::tungstenite::Message::Text(
            "not json".into(),
        ));
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
    fn an_off_registry_records_nothing() {
        let m = Metrics::off();
        m.wake(&WakeCause::Message, 1);
        m.burst(0, 1);
        let page = m.render();
        assert!(
            !page.contains("agentchat_wakes_total{") && !page.contains("agentchat_acks_total{"),
            "{page}"
        );
    }
}

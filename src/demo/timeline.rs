//! Turns the listener's JSON log lines into the demo's readable timeline. Pure: a line in, a
//! sentence (or nothing) out.

use serde_json::Value;

/// A field of a tracing JSON line, whether the subscriber nests fields under `fields` or
/// flattens them.
pub fn field<'a>(line: &'a Value, name: &str) -> Option<&'a Value> {
    line.get("fields")
        .and_then(|f| f.get(name))
        .or_else(|| line.get(name))
}

pub fn field_str<'a>(line: &'a Value, name: &str) -> Option<&'a str> {
    field(line, name).and_then(Value::as_str)
}

/// The `event` name the listener puts on every line it logs for a reader.
pub fn event(line: &Value) -> Option<&str> {
    field_str(line, "event")
}

fn level(line: &Value) -> &str {
    line.get("level").and_then(Value::as_str).unwrap_or("")
}

fn message(line: &Value) -> &str {
    field_str(line, "message").unwrap_or("")
}

fn num(line: &Value, name: &str) -> Option<u64> {
    field(line, name).and_then(|v| {
        v.as_u64()
            .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
    })
}

/// The timeline sentence for one listener log line, or `None` for lines the timeline skips.
pub fn describe(line: &Value) -> Option<String> {
    let ev = event(line).unwrap_or("");
    let cycle = field_str(line, "cycle_id").unwrap_or("?");
    let invite = field_str(line, "invite_id").unwrap_or("?");
    Some(match ev {
        "listener_start" => format!(
            "started (pid {})",
            num(line, "pid").map_or("?".into(), |p| p.to_string())
        ),
        "socket_connected" => "connected to the server's socket".into(),
        "hello" => format!(
            "server accepted capabilities: {}",
            field_str(line, "capabilities").unwrap_or("")
        ),
        "wake" => {
            let reason = field_str(line, "reason").unwrap_or("?");
            match field_str(line, "message_id").filter(|m| !m.is_empty()) {
                Some(m) => format!("wake ({reason}, {m} acked)"),
                None => format!("wake ({reason})"),
            }
        }
        "cycle_start" => format!(
            "cycle {cycle} started (wakes: {})",
            field_str(line, "reasons").unwrap_or("")
        ),
        "no_run" => format!(
            "cycle {cycle}: no run ({})",
            field_str(line, "reason").unwrap_or("nothing waiting")
        ),
        "run_start" => format!(
            "run started for cycle {cycle} ({} run, runtime {})",
            field_str(line, "run_kind").unwrap_or("?"),
            field_str(line, "runtime").unwrap_or("?")
        ),
        "run_end" => {
            let outcome = field_str(line, "outcome").unwrap_or("?");
            let ms = num(line, "duration_ms").map_or(String::new(), |m| format!(" in {m} ms"));
            match field_str(line, "why") {
                Some(why) => format!("run {outcome}{ms}: {why}"),
                None => format!("run {outcome}{ms}"),
            }
        }
        "invite_dismissed" => {
            format!("invite {invite} left pending by two runs: dismissed on the server")
        }
        "invite_counted" => format!("invite {invite} left pending by a completed run: counted"),
        "invite_silent_paced" => format!(
            "invite {invite} left pending again, but too soon after the counted run: not counted"
        ),
        "cycle_end" => format!("cycle {cycle} ended"),
        "stopping" => format!(
            "stopping ({})",
            field_str(line, "signal").unwrap_or("signal")
        ),
        "stopped" => "stopped".into(),
        _ if matches!(level(line), "WARN" | "ERROR") => {
            format!("{}: {}", level(line).to_lowercase(), message(line))
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn nested_and_flat_fields_both_read() {
        let nested = json!({"level": "INFO", "fields": {"event": "wake", "reason": "message", "message_id": "msg_1"}});
        assert_eq!(describe(&nested).unwrap(), "wake (message, msg_1 acked)");
        let flat =
            json!({"level": "INFO", "event": "run_end", "outcome": "completed", "duration_ms": 42});
        assert_eq!(describe(&flat).unwrap(), "run completed in 42 ms");
    }

    #[test]
    fn unknown_info_lines_are_skipped_and_warnings_shown() {
        assert_eq!(
            describe(&json!({"level": "INFO", "fields": {"event": "ack"}})),
            None
        );
        let w = json!({"level": "WARN", "fields": {"event": "x", "message": "tray unreadable"}});
        assert_eq!(describe(&w).unwrap(), "warn: tray unreadable");
    }

    #[test]
    fn invite_dismissal_names_the_invite() {
        let l = json!({"fields": {"event": "invite_dismissed", "invite_id": "gri_9"}});
        assert!(describe(&l).unwrap().contains("gri_9"));
        assert_eq!(event(&l), Some("invite_dismissed"));
    }
}

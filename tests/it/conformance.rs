//! Runs every case in `conformance/` against the pure core (`agentchat::core`), and checks that
//! `conformance/manifest.sha256` matches the fixtures byte for byte.
//!
//! Each test collects every failing case by name before asserting, so one run shows them all.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use agentchat::core::coalescer::Coalescer;
use agentchat::core::decision::{self, CycleDecision, NoRunReason, RunKind};
use agentchat::core::engine::{Engine, WakeCause};
use agentchat::core::frames::ack_frame;
use agentchat::core::identity::{self, AnchorError};
use agentchat::core::invite_rule::{InviteMemory, InviteVerdict, RunObservation};
use agentchat::core::policy;
use agentchat::core::reconnect::{self, Backoff, CloseKind};
use agentchat::core::status::ListenerWake;
use agentchat::core::texts::{Texts, TextsError};
use agentchat::core::tray::Tray;
use serde_json::Value;
use sha2::{Digest, Sha256};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance")
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(dir().join(name)).unwrap_or_else(|e| panic!("read conformance/{name}: {e}"))
}

fn json(name: &str) -> Value {
    serde_json::from_slice(&bytes(name)).unwrap_or_else(|e| panic!("conformance/{name}: {e}"))
}

fn text(name: &str) -> String {
    String::from_utf8(bytes(name)).unwrap()
}

/// Every case carries a non-empty `description` (the contract sentence it pins).
fn described<'a>(file: &str, cases: &'a Value) -> &'a Vec<Value> {
    let cases = cases
        .as_array()
        .unwrap_or_else(|| panic!("{file}: cases is not a list"));
    assert!(!cases.is_empty(), "{file}: no cases");
    for c in cases {
        let d = c["description"].as_str().unwrap_or("");
        assert!(
            !d.trim().is_empty(),
            "{file}: case {} has no description",
            c["name"]
        );
    }
    cases
}

/// Runs `check` on every described case of `doc[key]` and asserts once, listing every failure:
/// `check` returns what is wrong with one case, and each line is prefixed with the case's `name`.
fn check_cases(file: &str, doc: &Value, key: &str, mut check: impl FnMut(&Value) -> Vec<String>) {
    let mut failures = Vec::new();
    for case in described(file, &doc[key]) {
        let found = check(case);
        match case["name"].as_str() {
            Some(name) => failures.extend(found.into_iter().map(|f| format!("{name}: {f}"))),
            None => failures.extend(found),
        }
    }
    report(file, failures);
}

fn report(file: &str, failures: Vec<String>) {
    assert!(
        failures.is_empty(),
        "{file}: {} failing case(s):\n{}",
        failures.len(),
        failures.join("\n")
    );
}

// ---------------------------------------------------------------- manifest

fn sha256_hex(data: &[u8]) -> String {
    Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
fn manifest_lists_every_fixture_with_its_current_hash() {
    let manifest = text("manifest.sha256");
    let mut listed = Vec::new();
    let mut failures = Vec::new();
    for (n, line) in manifest.lines().enumerate() {
        let Some((hash, name)) = line.split_once("  ") else {
            failures.push(format!("line {}: not `<hex>  <name>`", n + 1));
            continue;
        };
        listed.push(name.to_owned());
        match std::fs::read(dir().join(name)) {
            Ok(data) if sha256_hex(&data) == hash => {}
            Ok(_) => failures.push(format!(
                "{name}: changed without the manifest (run scripts/update-manifest)"
            )),
            Err(_) => failures.push(format!("{name}: listed in the manifest but missing")),
        }
    }
    let mut sorted = listed.clone();
    sorted.sort();
    if sorted != listed {
        failures.push("manifest is not sorted by name".into());
    }
    let mut present: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n != "manifest.sha256")
        .collect();
    present.sort();
    for name in &present {
        if !listed.contains(name) {
            failures.push(format!(
                "{name}: missing from the manifest (run scripts/update-manifest)"
            ));
        }
    }
    report("manifest.sha256", failures);
}

#[test]
fn manifest_hash_changes_with_one_byte() {
    // Guards the manifest test against a check that could never fail.
    let data = bytes("ack-frame.json");
    let mut changed = data.clone();
    changed[0] ^= 1;
    assert_ne!(sha256_hex(&data), sha256_hex(&changed));
    assert_eq!(
        sha256_hex(b""),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
}

// ---------------------------------------------------------------- trays and texts

#[test]
fn trays_parse_both_shapes_and_round_trip_exactly() {
    for name in ["tray.v1.sample.json", "tray.sample.json"] {
        let tray = Tray::parse(&bytes(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        let back = serde_json::to_value(&tray).unwrap();
        assert_eq!(
            back,
            json(name),
            "{name}: round trip changed the JSON value"
        );
        // Through text too, as the listener would write it to disk.
        let again = Tray::parse(serde_json::to_string(&tray).unwrap().as_bytes()).unwrap();
        assert_eq!(again, tray, "{name}: second round trip differs");
    }
}

#[test]
fn v1_tray_reads_invites_muted_cards_and_flags() {
    let tray = Tray::parse(&bytes("tray.v1.sample.json")).unwrap();
    assert_eq!(tray.version, Some(1));
    assert_eq!(tray.you.as_deref(), Some("@example-relay"));
    assert_eq!(
        tray.invite_ids(),
        vec!["gri_2KdP8wXyT5mQr0Zs", "gri_9VfJ3cNa6Lp1Eh4W"]
    );
    assert!(tray.invites_complete());
    assert!(!tray.is_truncated());
    let muted: Vec<&str> = tray
        .conversations
        .iter()
        .filter(|c| c.is_muted())
        .map(|c| c.conversation_id.as_str())
        .collect();
    assert_eq!(muted, vec!["conv_Tm2Ld8Pq4Ws6Xz0C"]);
    // The notices-only card keeps its explicit `preview: null`; the reminder card its reminder.
    let notices = tray
        .conversations
        .iter()
        .find(|c| c.conversation_id == "grp_Qa2Wm5Xe0Ty8Ui4O")
        .unwrap();
    assert_eq!(notices.extra.get("preview"), Some(&Value::Null));
    assert!(
        tray.conversations
            .iter()
            .any(|c| c.extra["reminder"]["step"] == 1)
    );
    assert_eq!(tray.extra.get("deferred"), Some(&Value::from(1)));
}

#[test]
fn pre_v1_tray_has_unknown_invites_not_empty() {
    let tray = Tray::parse(&bytes("tray.sample.json")).unwrap();
    assert_eq!(tray.version, None);
    assert!(tray.invites.is_none());
    assert!(
        !tray.invites_complete(),
        "a missing invites list is not a complete empty list"
    );
    assert_eq!(tray.conversations.len(), 2);
}

#[test]
fn texts_parse_every_field_and_ignore_unknown_ones() {
    let texts = Texts::parse(&bytes("texts.sample.json")).unwrap();
    assert_eq!(texts.version, "1");
    let manual = texts.manual.as_ref().unwrap();
    assert_eq!(manual.url.as_deref(), Some("https://agentchat.me/skill.md"));
    assert_eq!(manual.version.as_deref(), Some("2.3.4"));
    assert!(manual.sha256.is_some());
    for (field, v) in [
        ("wake_instruction", &texts.wake_instruction),
        ("invite_prompt", &texts.invite_prompt),
        ("identity_line", &texts.identity_line),
        ("identity_line_template", &texts.identity_line_template),
        ("gate_call_preamble", &texts.gate_call_preamble),
        ("gate_call_answer_format", &texts.gate_call_answer_format),
        ("reply_turn_template", &texts.reply_turn_template),
    ] {
        assert!(
            v.as_deref().is_some_and(|s| !s.is_empty()),
            "texts.sample.json: {field} not read"
        );
    }
    // The served identity_line is the template rendered for the sample handle.
    assert_eq!(
        identity::render(
            texts.identity_line_template.as_deref().unwrap(),
            "example-relay"
        ),
        texts.identity_line.clone().unwrap()
    );
    assert_eq!(
        decision::prompt_for(RunKind::Wake, &texts),
        texts.wake_instruction.as_deref()
    );
    assert_eq!(
        decision::prompt_for(RunKind::Invite, &texts),
        texts.invite_prompt.as_deref()
    );

    let mut v = json("texts.sample.json");
    v["some_future_text"] = Value::from("added within v1");
    v["manual"]["mirror"] = Value::from("https://example.invalid/");
    let extended = Texts::parse(v.to_string().as_bytes()).unwrap();
    assert_eq!(extended, texts, "unknown fields must be ignored");

    v["version"] = Value::from("2");
    assert!(matches!(
        Texts::parse(v.to_string().as_bytes()),
        Err(TextsError::Version(s)) if s == "2"
    ));
}

/// Every string value in `v`, at any depth.
fn strings(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::String(s) => out.push(s.clone()),
        Value::Array(a) => a.iter().for_each(|x| strings(x, out)),
        Value::Object(m) => m.values().for_each(|x| strings(x, out)),
        _ => {}
    }
}

#[test]
fn tray_entry_cases_skip_malformed_entries_by_index_only() {
    let file = "tray-entries.cases.json";
    let doc = json(file);
    check_cases(file, &doc, "cases", |case| {
        let served = match case["tray_file"].as_str() {
            Some(f) => json(f),
            None => case["tray"].clone(),
        };
        let tray = match Tray::parse(served.to_string().as_bytes()) {
            Ok(t) => t,
            Err(e) => return vec![format!("tray does not parse: {e}")],
        };
        let exp = &case["expect"];
        let mut failures = Vec::new();
        let indices = |s: &[agentchat::core::tray::Skipped]| -> Value {
            s.iter().map(|s| s.index).collect::<Vec<_>>().into()
        };
        let cards: Vec<&str> = tray
            .conversations
            .iter()
            .map(|c| c.conversation_id.as_str())
            .collect();
        let got = [
            ("cards", Value::from(cards)),
            ("skipped_cards", indices(&tray.skipped_cards)),
            ("invites", Value::from(tray.invite_ids())),
            ("skipped_invites", indices(&tray.skipped_invites)),
            ("invites_complete", Value::from(tray.invites_complete())),
        ];
        for (key, got) in got {
            if !exp[key].is_null() && exp[key] != got {
                failures.push(format!("{key}: {got}, want {}", exp[key]));
            }
        }
        let mut values = Vec::new();
        strings(&served, &mut values);
        for s in tray.skipped_cards.iter().chain(&tray.skipped_invites) {
            if let Some(v) = values
                .iter()
                .find(|v| v.len() >= 4 && s.reason.contains(v.as_str()))
            {
                failures.push(format!("skip reason {:?} quotes the value {v:?}", s.reason));
            }
        }
        failures
    });
}

/// A wake cause as `cycle.cases.json` spells it (its `semantics`).
fn wake_cause(word: &str) -> WakeCause {
    match word.split_once(':') {
        Some(("message", conversation)) => WakeCause::Message(Some(conversation.into())),
        _ => match word {
            "message" => WakeCause::Message(None),
            "connect" => WakeCause::Connected,
            "invite" => WakeCause::Invite,
            "recovered" => WakeCause::Listener(ListenerWake::Recovered),
            "backlog" => WakeCause::Listener(ListenerWake::Backlog),
            reason => WakeCause::Wake(reason.into()),
        },
    }
}

#[test]
fn cycle_cases_decide_run_kind_or_why_not() {
    let file = "cycle.cases.json";
    let doc = json(file);
    let own = doc["own_handle"].as_str().unwrap();
    check_cases(file, &doc, "cases", |case| {
        let tray_bytes = match case["tray_file"].as_str() {
            Some(f) => bytes(f),
            None => case["tray"].to_string().into_bytes(),
        };
        let tray = match Tray::parse(&tray_bytes) {
            Ok(t) => t,
            Err(e) => return vec![format!("tray does not parse: {e}")],
        };
        let causes = match case["wake_causes"].as_array() {
            None => decision::WakeCauses::unknown(),
            Some(list) => {
                let mut causes = decision::WakeCauses::default();
                for c in list {
                    causes.add(&wake_cause(c.as_str().unwrap()));
                }
                causes
            }
        };
        let got = match decision::decide_woken(&tray, own, &causes) {
            CycleDecision::Run(RunKind::Wake) => "run_wake".to_owned(),
            CycleDecision::Run(RunKind::Invite) => "run_invite".to_owned(),
            CycleDecision::NoRun(why) => format!("no_run:{}", why.as_str()),
        };
        if got == case["expect"].as_str().unwrap() {
            vec![]
        } else {
            vec![format!("expected {}, got {got}", case["expect"])]
        }
    });
    // A mismatch wins over what waits; the tray's `you` names the other agent for the log line.
    let t = Tray::parse(br#"{"you":"@someone-else","conversations":[{"conversation_id":"c"}]}"#)
        .unwrap();
    assert_eq!(
        decision::decide(&t, own),
        CycleDecision::NoRun(NoRunReason::HandleMismatch)
    );
    assert_eq!(t.you.as_deref(), Some("@someone-else"));
}

// ---------------------------------------------------------------- socket frames

#[test]
fn socket_frame_fixtures_give_hello_ack_and_wakes() {
    let mut engine = Engine::new("@example-relay", 64);
    let hello = engine.on_text(&text("hello-ok.v1.json"));
    assert_eq!(
        hello.hello,
        Some(Some(vec![
            "ack".into(),
            "heartbeat".into(),
            "rewake".into()
        ]))
    );
    assert_eq!((hello.ack, hello.wake), (None, None));

    let ack: Value = serde_json::from_str(&ack_frame("msg_7pQk2LxV9sTbYw3E")).unwrap();
    assert_eq!(ack, json("ack-frame.json"), "the ack the listener sends");

    let hb = engine.on_text(&text("heartbeat-frame.json"));
    assert_eq!((hb.ack, hb.wake, hb.malformed), (None, None, None));

    for (name, reason) in [
        ("wake-frame.json", "reminder"),
        ("wake-frame.unanswered.json", "unanswered"),
    ] {
        let a = engine.on_text(&text(name));
        assert_eq!(a.ack, None, "{name}: a wake is never acked");
        assert_eq!(a.wake.map(|w| w.label()).as_deref(), Some(reason), "{name}");
    }
}

#[test]
fn engine_scenarios_give_the_acks_and_wakes() {
    let file = "engine-scenarios.json";
    let doc = json(file);
    let own = doc["own_handle"].as_str().unwrap();
    check_cases(file, &doc, "scenarios", |sc| {
        let mut failures = Vec::new();
        let mut engine = Engine::new(own, 2048);
        for (i, step) in sc["steps"].as_array().unwrap().iter().enumerate() {
            let frame = match step.get("raw").and_then(Value::as_str) {
                Some(raw) => raw.to_owned(),
                None => step["frame"].to_string(),
            };
            let got = engine.on_text(&frame);
            let exp = &step["expect"];
            let want_ack = exp["ack"].as_str();
            let want_wake = exp["wake"].as_str();
            let want_malformed = exp["malformed"].as_bool().unwrap_or(false);
            if got.ack.as_deref() != want_ack {
                failures.push(format!("step {i}: ack {:?}, want {want_ack:?}", got.ack));
            }
            let wake = got.wake.as_ref().map(|w| w.label());
            if wake.as_deref() != want_wake {
                failures.push(format!("step {i}: wake {wake:?}, want {want_wake:?}"));
            }
            if got.malformed.is_some() != want_malformed {
                failures.push(format!(
                    "step {i}: malformed {:?}, want {want_malformed}",
                    got.malformed
                ));
            }
            if let Some(e) = &got.malformed
                && frame.len() > 12
                && e.to_string().contains(&frame)
            {
                failures.push(format!("step {i}: the error carries the frame"));
            }
            if let Some(h) = exp.get("hello") {
                let want: Option<Vec<String>> = serde_json::from_value(h.clone()).unwrap();
                if got.hello != Some(want.clone()) {
                    failures.push(format!("step {i}: hello {:?}, want {want:?}", got.hello));
                }
            } else if got.hello.is_some() {
                failures.push(format!("step {i}: unexpected hello"));
            }
        }
        failures
    });
}

// ---------------------------------------------------------------- coalescer

/// Replays a case as `coalescer.cases.json`'s `semantics` says; returns the start times.
fn replay(quiet: u64, max_delay: u64, events: &[Value]) -> Result<Vec<u64>, String> {
    let mut c = Coalescer::new(quiet, max_delay);
    let mut starts = Vec::new();
    for ev in events {
        let at = ev["at"].as_u64().ok_or("event without at")?;
        if let Some(due) = c.due()
            && due <= at
        {
            if !c.try_start(due) {
                return Err(format!("due at {due} but did not start"));
            }
            starts.push(due);
        }
        match ev["event"].as_str() {
            Some("wake") => c.wake(at),
            Some("cycle_end") => {
                if !c.is_running() {
                    return Err(format!("cycle_end at {at} while no cycle runs"));
                }
                c.end(at);
            }
            other => return Err(format!("unknown event {other:?}")),
        }
    }
    if let Some(due) = c.due() {
        if !c.try_start(due) {
            return Err(format!("due at {due} but did not start"));
        }
        starts.push(due);
    }
    Ok(starts)
}

#[test]
fn coalescer_cases_give_the_cycle_start_times() {
    let file = "coalescer.cases.json";
    let doc = json(file);
    check_cases(file, &doc, "cases", |case| {
        let quiet = case
            .get("quiet_ms")
            .unwrap_or(&doc["defaults"]["quiet_ms"])
            .as_u64()
            .unwrap();
        let max = case
            .get("max_delay_ms")
            .unwrap_or(&doc["defaults"]["max_delay_ms"])
            .as_u64()
            .unwrap();
        let want: Vec<u64> = serde_json::from_value(case["expected_cycle_starts"].clone()).unwrap();
        match replay(quiet, max, case["events"].as_array().unwrap()) {
            Ok(got) if got == want => vec![],
            Ok(got) => vec![format!("starts {got:?}, want {want:?}")],
            Err(e) => vec![e],
        }
    });
}

// ---------------------------------------------------------------- invite rule

#[test]
fn single_run_invite_cases_give_each_verdict() {
    let file = "turn-outcome.cases.json";
    let doc = json(file);
    let pace = doc["single_run_pace_ms"].as_u64().unwrap();
    assert_eq!(pace, agentchat::core::invite_rule::SINGLE_RUN_PACE_MS);
    check_cases(file, &doc, "single_run_invite_cases", |case| {
        let mut failures = Vec::new();
        let mut memory = InviteMemory {
            counted: serde_json::from_value(case["memory_before"].clone()).unwrap(),
        };
        for (i, run) in case["runs"].as_array().unwrap().iter().enumerate() {
            let before: Vec<String> = serde_json::from_value(run["before"].clone()).unwrap();
            let after: Vec<String> = serde_json::from_value(run["after"].clone()).unwrap();
            let obs = RunObservation {
                before: &before,
                after: &after,
                after_complete: run["after_complete"].as_bool().unwrap(),
                run_completed: run["run_completed"].as_bool().unwrap(),
                run_ended_at_ms: run["run_ended_at_ms"].as_u64().unwrap(),
            };
            let verdicts = memory.apply_run(&obs, pace);
            // What the dismiss call got (default ok): only a confirmed dismissal forgets.
            let answer = run["dismiss_answer"].as_str().unwrap_or("ok");
            for (id, v) in &verdicts {
                if *v == InviteVerdict::Dismiss {
                    match answer {
                        "ok" | "invite_not_found" => memory.confirm_dismissed(id),
                        "failed" => {}
                        other => failures.push(format!("run {i}: unknown dismiss_answer {other}")),
                    }
                }
            }
            let got: BTreeMap<String, String> = verdicts
                .into_iter()
                .map(|(id, v)| (id, v.as_str().to_owned()))
                .collect();
            let want: BTreeMap<String, String> =
                serde_json::from_value(run["expect"].clone()).unwrap();
            if got != want {
                failures.push(format!("run {i}: {got:?}, want {want:?}"));
            }
        }
        let want_mem: BTreeMap<String, u64> =
            serde_json::from_value(case["memory_after"].clone()).unwrap();
        if memory.counted != want_mem {
            failures.push(format!("memory {:?}, want {want_mem:?}", memory.counted));
        }
        failures
    });
}

// ---------------------------------------------------------------- identity block

#[test]
fn anchor_cases_render_find_and_upsert() {
    let file = "anchor.cases.json";
    let doc = json(file);
    assert_eq!(doc["start_marker"], identity::START_MARKER);
    assert_eq!(doc["end_marker"], identity::END_MARKER);
    let template = doc["identity_line_template"].as_str().unwrap();
    let served = Texts::parse(&bytes("texts.sample.json")).unwrap();
    assert_eq!(Some(template), served.identity_line_template.as_deref());
    let mut failures = Vec::new();

    for case in described(file, &doc["render_cases"]) {
        let name = case["name"].as_str().unwrap();
        let t = case["template"].as_str().unwrap_or(template);
        let got = identity::render(t, case["handle"].as_str().unwrap());
        if got != case["expected"].as_str().unwrap() {
            failures.push(format!("render {name}: got {got:?}"));
        }
    }
    for case in described(file, &doc["find_cases"]) {
        let name = case["name"].as_str().unwrap();
        let f = case["file"].as_str().unwrap();
        let got = identity::find(f);
        let ok = match (case.get("expected_error"), &got) {
            (Some(_), Err(AnchorError::Damaged)) => true,
            (None, Ok(range)) => range.clone().map(|r| &f[r]) == case["expected_block"].as_str(),
            _ => false,
        };
        if !ok {
            failures.push(format!("find {name}: got {got:?}"));
        }
    }
    for case in described(file, &doc["upsert_cases"]) {
        let name = case["name"].as_str().unwrap();
        let f = case["file"].as_str().unwrap();
        let rendered = identity::render(template, case["handle"].as_str().unwrap());
        let got = identity::upsert(f, &rendered);
        let ok = match (case.get("expected_error"), &got) {
            (Some(_), Err(AnchorError::Damaged)) => true,
            // Upserting the result again changes nothing.
            (None, Ok(out)) => {
                Some(out.as_str()) == case["expected"].as_str()
                    && identity::upsert(out, &rendered).as_ref() == Ok(out)
            }
            _ => false,
        };
        if !ok {
            failures.push(format!("upsert {name}: got {got:?}"));
        }
    }
    report(file, failures);
}

// ---------------------------------------------------------------- connect budget

fn kind_word(k: &CloseKind) -> &'static str {
    k.as_str()
}

#[test]
fn connect_budget_cases_classify_and_bound_the_delay() {
    let file = "connect-budget.cases.json";
    let doc = json(file);
    let key_retry = Duration::from_secs(doc["key_refused_retry_s"].as_u64().unwrap());
    assert_eq!(key_retry, reconnect::KEY_REFUSED_RETRY);
    check_cases(file, &doc, "cases", |case| {
        let mut failures = Vec::new();
        let code = case["code"].as_u64().unwrap() as u16;
        let reason = case["reason"].as_str().unwrap();
        let label = format!("{code} {reason:?}");
        let kind = reconnect::classify_close(code, reason);
        let exp = &case["expect"];
        if kind_word(&kind) != exp["kind"].as_str().unwrap() {
            return vec![format!("{label}: {kind:?}, want {}", exp["kind"])];
        }
        // The delay at both ends of the injected randomness, from a fresh backoff.
        let low = reconnect::delay_after(&kind, &mut Backoff::default(), key_retry, 0.0, 1.0);
        let high = reconnect::delay_after(
            &kind,
            &mut Backoff::default(),
            key_retry,
            0.999_999_999,
            1.0,
        );
        let (want_lo, want_hi) = match &kind {
            CloseKind::Budget { retry_after_s } => {
                if Some(*retry_after_s) != exp["retry_after_s"].as_u64() {
                    failures.push(format!(
                        "{label}: retry_after {retry_after_s}, want {}",
                        exp["retry_after_s"]
                    ));
                }
                let lo = exp["delay_s"]["min"].as_f64().unwrap();
                let hi = exp["delay_s"]["max"].as_f64().unwrap();
                (Duration::from_secs_f64(lo), Duration::from_secs_f64(hi))
            }
            // The refused-key retry's first wait, drawn from [c/2, c] above its floor.
            CloseKind::KeyRefused => {
                let k = &doc["key_refused_backoff"];
                let c = Duration::from_secs(k["first_ceiling_s"].as_u64().unwrap());
                let floor = Duration::from_secs(k["floor_s"].as_u64().unwrap());
                ((c / 2).max(floor), c)
            }
            // The slow re-check after a `4426` (contract 7).
            CloseKind::UpgradeRequired => {
                let lo = exp["delay_s"]["min"].as_f64().unwrap();
                let hi = exp["delay_s"]["max"].as_f64().unwrap();
                (Duration::from_secs_f64(lo), Duration::from_secs_f64(hi))
            }
            // A first ordinary delay is the 1 s floor.
            _ => (Duration::from_secs(1), Duration::from_secs(1)),
        };
        if low != want_lo {
            failures.push(format!("{label}: lowest delay {low:?}, want {want_lo:?}"));
        }
        if high < want_lo || high > want_hi {
            failures.push(format!(
                "{label}: highest delay {high:?} outside {want_lo:?}..={want_hi:?}"
            ));
        }
        failures
    });
}

/// Refusals in a row, not only a fresh backoff: each waits the hint's bounds (contract 3.4).
#[test]
fn connect_budget_refusals_in_a_row_each_wait_within_the_hint_bounds() {
    let doc = json("connect-budget.cases.json");
    let key_retry = Duration::from_secs(doc["key_refused_retry_s"].as_u64().unwrap());
    let mut failures = Vec::new();
    for seq in doc["budget_sequences"].as_array().unwrap() {
        let reason = seq["reason"].as_str().unwrap();
        let kind = reconnect::classify_close(1013, reason);
        let lo = Duration::from_secs_f64(seq["delay_s"]["min"].as_f64().unwrap());
        let hi = Duration::from_secs_f64(seq["delay_s"]["max"].as_f64().unwrap());
        for rand in [0.0, 0.5, 0.999_999_999] {
            let mut backoff = Backoff::default();
            for n in 0..seq["refusals"].as_u64().unwrap() {
                let d = reconnect::delay_after(&kind, &mut backoff, key_retry, rand, 1.0);
                if d < lo || d > hi {
                    failures.push(format!("{reason:?} refusal {n} at {rand}: {d:?}"));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The refused-key retry grows from seconds to `key_refused_retry_s` and starts again once the
/// key is accepted.
#[test]
fn key_refused_retry_follows_the_fixture_ceilings_and_resets_on_an_accepted_key() {
    let doc = json("connect-budget.cases.json");
    let key_retry = Duration::from_secs(doc["key_refused_retry_s"].as_u64().unwrap());
    let k = &doc["key_refused_backoff"];
    let floor = Duration::from_secs(k["floor_s"].as_u64().unwrap());
    let ceilings: Vec<u64> = serde_json::from_value(k["ceilings_s"].clone()).unwrap();
    let (mut top, mut bottom) = (Backoff::default(), Backoff::default());
    let (mut first_minute, mut attempts) = (Duration::ZERO, 0u64);
    for (n, c) in ceilings.iter().enumerate() {
        let c = Duration::from_secs(*c);
        let hi = reconnect::delay_after(
            &CloseKind::KeyRefused,
            &mut top,
            key_retry,
            0.999_999_999,
            1.0,
        );
        let lo = reconnect::delay_after(&CloseKind::KeyRefused, &mut bottom, key_retry, 0.0, 1.0);
        assert!(
            hi <= c && hi > c.mul_f64(0.99),
            "wait {n}: {hi:?} not just under {c:?}"
        );
        assert_eq!(lo, (c / 2).max(floor), "wait {n}: lowest draw");
        if first_minute < Duration::from_secs(60) {
            first_minute += lo;
            attempts += 1;
        }
    }
    assert!(attempts <= k["max_attempts_first_minute"].as_u64().unwrap());
    top.key_accepted();
    let again = reconnect::delay_after(
        &CloseKind::KeyRefused,
        &mut top,
        key_retry,
        0.999_999_999,
        1.0,
    );
    assert!(again <= Duration::from_secs(ceilings[0]), "{again:?}");
}

#[test]
fn upgrade_status_cases_tell_a_refused_key_from_an_ordinary_failure() {
    let file = "connect-budget.cases.json";
    let doc = json(file);
    check_cases(file, &doc, "upgrade_status_cases", |case| {
        let status = case["status"].as_u64().unwrap() as u16;
        let got = kind_word(&reconnect::classify_upgrade_status(status));
        if got == case["expect"]["kind"].as_str().unwrap() {
            vec![]
        } else {
            vec![format!(
                "HTTP {status}: {got}, want {}",
                case["expect"]["kind"]
            )]
        }
    });
}

#[test]
fn backoff_follows_the_fixture_ceilings_and_reset_rule() {
    let doc = json("connect-budget.cases.json");
    let b = &doc["backoff"];
    let floor = Duration::from_secs(b["floor_s"].as_u64().unwrap());
    let ceilings: Vec<u64> = serde_json::from_value(b["ceilings_s"].clone()).unwrap();
    let (mut top, mut bottom) = (Backoff::default(), Backoff::default());
    for (n, c) in ceilings.iter().enumerate() {
        let c = Duration::from_secs(*c);
        let hi = top.next_delay(0.999_999_999);
        let lo = bottom.next_delay(0.0);
        assert!(
            hi <= c && hi > c.mul_f64(0.99),
            "delay {n}: {hi:?} not just under ceiling {c:?}"
        );
        assert_eq!(lo, (c / 2).max(floor), "delay {n}: lowest draw");
    }
    for case in b["reset_cases"].as_array().unwrap() {
        let mut backoff = Backoff::default();
        for _ in 0..5 {
            backoff.next_delay(0.0);
        }
        backoff.connection_lasted(Duration::from_secs_f64(case["up_for_s"].as_f64().unwrap()));
        let resets = backoff.next_delay(0.999_999_999) <= floor;
        assert_eq!(
            resets,
            case["resets"].as_bool().unwrap(),
            "{}",
            case["description"]
        );
    }
}

// ---------------------------------------------------------------- run policy (issue 26)

fn instant(v: &Value) -> i64 {
    let s = v.as_str().unwrap_or_else(|| panic!("not an instant: {v}"));
    let t = humantime::parse_rfc3339(s).unwrap_or_else(|e| panic!("{s}: {e}"));
    i64::try_from(t.duration_since(std::time::UNIX_EPOCH).unwrap().as_millis()).unwrap()
}

fn shown_instant(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(u64::try_from(ms).unwrap());
    humantime::format_rfc3339_seconds(t).to_string()
}

/// The gate's answer in the fixture's terms.
fn gate_as_json(gate: &policy::Gate) -> Value {
    match gate {
        policy::Gate::Nothing => serde_json::json!({"gate": "nothing"}),
        policy::Gate::Run {
            cards,
            invites,
            beyond_cut,
        } => {
            let mut v = serde_json::json!({"gate": "run", "cards": cards});
            if !invites.is_empty() {
                v["invites"] = serde_json::json!(invites);
            }
            if *beyond_cut {
                v["beyond_cut"] = Value::Bool(true);
            }
            v
        }
        policy::Gate::Held(h) => serde_json::json!({
            "gate": "held",
            "reason": h.reason.as_str(),
            "key": h.key,
            "until": h.until.map(shown_instant),
            "cards": h.cards,
            "invites": h.invites,
        }),
    }
}

#[test]
fn policy_cases_hold_or_run_with_reason_and_end() {
    let file = "policy.cases.json";
    let doc = json(file);
    let zones: BTreeMap<String, policy::OffsetTable> = doc["zones"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, z)| {
            let changes = z["changes"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| {
                    (
                        instant(&c[0]),
                        i32::try_from(c[1].as_i64().unwrap()).unwrap(),
                    )
                })
                .collect();
            let initial = i32::try_from(z["initial"].as_i64().unwrap()).unwrap();
            (name.clone(), policy::OffsetTable::new(initial, changes))
        })
        .collect();
    check_cases(file, &doc, "parse_cases", |case| {
        let table: toml::Table = toml::from_str(case["policy"].as_str().unwrap()).unwrap();
        match (
            policy::Policy::from_toml(table, "listen.policy"),
            case["error"].as_str(),
        ) {
            (Ok(_), None) => vec![],
            (Ok(_), Some(want)) => vec![format!("parsed, expected an error with {want:?}")],
            (Err(e), Some(want)) if e.to_string().contains(want) => vec![],
            (Err(e), _) => vec![format!("error {e}")],
        }
    });
    check_cases(file, &doc, "cases", |case| {
        let table: toml::Table = toml::from_str(case["policy"].as_str().unwrap()).unwrap();
        let p = match policy::Policy::from_toml(table, "listen.policy") {
            Ok(p) => p,
            Err(e) => return vec![format!("policy: {e}")],
        };
        let zone = &zones[case["zone"].as_str().unwrap()];
        let mut ledger = policy::Ledger::new();
        for r in case["runs"].as_array().unwrap() {
            let at = instant(&r["at"]);
            let conversations = r["conversations"]
                .as_array()
                .map(|c| c.iter().map(|c| c.as_str().unwrap().to_string()).collect())
                .unwrap_or_default();
            ledger.started(at, conversations, zone);
            ledger.ended(at, r["cost_usd"].as_f64(), r["tokens"].as_u64());
        }
        let tray = Tray::parse(case["tray"].to_string().as_bytes()).unwrap();
        let now = instant(&case["now"]);
        let mut failures = Vec::new();
        // The listener takes the tray in (the loop guard's marks, the contacts), then judges it.
        let heard = policy::Heard::default();
        policy::observe(&p, &tray, &mut ledger, now);
        let got = policy::gate(&p, &tray, &ledger, &heard, now, zone);
        if gate_as_json(&got) != case["expect"] {
            failures.push(format!(
                "expected {}, got {}",
                case["expect"],
                gate_as_json(&got)
            ));
        }
        if let (Some(after), policy::Gate::Held(h)) = (case.get("after_until"), &got) {
            let at = h.until.expect("after_until needs an until");
            policy::observe(&p, &tray, &mut ledger, at);
            let then = gate_as_json(&policy::gate(&p, &tray, &ledger, &heard, at, zone));
            if &then != after {
                failures.push(format!("at until: expected {after}, got {then}"));
            }
        }
        failures
    });
}

/// The lines the pinned CLIs printed under the scripted model server (tests/it/runtimes_cli.rs),
/// read for their own report of cost and usage.
#[test]
fn run_reports_read_cost_and_usage_from_the_clis_own_final_events() {
    use agentchat::core::run_report::{self, Usage};
    use agentchat::core::runtime_kind::RuntimeKind;
    let claude = run_report::parse(
        RuntimeKind::ClaudeCode,
        &bytes("run-report.claude-code.jsonl"),
    );
    let codex = run_report::parse(RuntimeKind::Codex, &bytes("run-report.codex.jsonl"));
    let doc = json("run-report.expected.json");
    let usage = |u: &Value| Usage {
        input: u["input"].as_u64().unwrap(),
        cached_input: u["cached_input"].as_u64().unwrap(),
        output: u["output"].as_u64().unwrap(),
    };
    assert_eq!(claude.cost_usd, doc["claude-code"]["cost_usd"].as_f64());
    assert_eq!(claude.usage, Some(usage(&doc["claude-code"]["usage"])));
    assert_eq!(codex.cost_usd, None, "Codex reports no cost");
    assert_eq!(codex.usage, Some(usage(&doc["codex"]["usage"])));
}

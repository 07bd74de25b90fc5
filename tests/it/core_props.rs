//! Property tests for the pure core: no parser panics on arbitrary input, the coalescer's
//! guarantees hold on any timeline, the reconnect delays stay in bounds, the identity upsert is
//! idempotent and keeps the bytes around the block. CI runs them with `PROPTEST_CASES=64`; the
//! `never_panic` properties are also run at fuzzing scale, `PROPTEST_CASES=1000000` (CONTRIBUTING.md,
//! "Fuzzing").

use std::time::Duration;

use agentchat::core::coalescer::Coalescer;
use agentchat::core::engine::Engine;
use agentchat::core::frames::ServerFrame;
use agentchat::core::identity;
use agentchat::core::reconnect::{self, Backoff};
use agentchat::core::texts::Texts;
use agentchat::core::tray::Tray;
use proptest::prelude::*;
use serde_json::{Map, Value};

/// Arbitrary JSON values, a few levels deep.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        "[a-z_@.]{0,12}".prop_map(Value::from),
        any::<String>().prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(key(), inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// Keys that often hit the modelled fields, sometimes not.
fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "type",
            "payload",
            "id",
            "sender",
            "reason",
            "step",
            "capabilities",
            "version",
            "you",
            "conversations",
            "conversation_id",
            "muted",
            "truncated",
            "invites",
            "invite_id",
            "invites_truncated",
            "preview",
            "manual",
            "wake_instruction",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,10}",
    ]
}

/// Tray-shaped values: objects with arbitrary values under the tray's keys and cards that
/// mostly have a conversation id.
fn tray_like() -> impl Strategy<Value = Value> {
    let card = (
        "[a-z_0-9]{1,12}",
        prop::option::of(prop_oneof![
            any::<bool>().prop_map(Value::from),
            Just(Value::Null)
        ]),
        prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..4),
    )
        .prop_map(|(id, muted, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            m.insert("conversation_id".into(), id.into());
            if let Some(muted) = muted {
                m.insert("muted".into(), muted);
            }
            Value::Object(m)
        });
    (
        prop::collection::vec(card, 0..4),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            Just(Value::from(1)),
            Just(Value::from(7))
        ]),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            "@[a-z]{1,8}".prop_map(Value::from)
        ]),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from)
        ]),
        prop::option::of(prop_oneof![
            Just(Value::Null),
            prop::collection::vec("gri_[a-z]{1,6}", 0..3).prop_map(|ids| Value::from(
                ids.into_iter()
                    .map(|i| serde_json::json!({"invite_id": i, "at": null}))
                    .collect::<Vec<_>>()
            )),
        ]),
        prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..4),
    )
        .prop_map(|(cards, version, you, truncated, invites, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            m.insert("conversations".into(), Value::from(cards));
            for (k, v) in [
                ("version", version),
                ("you", you),
                ("truncated", truncated),
                ("invites", invites),
            ] {
                if let Some(v) = v {
                    m.insert(k.into(), v);
                }
            }
            Value::Object(m)
        })
}

proptest! {
    #[test]
    fn frame_parser_and_engine_never_panic_on_any_text(text in any::<String>()) {
        let _ = ServerFrame::parse(&text);
        let action = Engine::new("@me", 4).on_text(&text);
        // Whatever it is, an error never comes with an ack or a wake.
        if action.malformed.is_some() {
            prop_assert!(action.ack.is_none() && action.wake.is_none());
        }
    }

    #[test]
    fn engine_acks_only_message_frames_and_never_wakes_twice_for_one_id(
        frames in prop::collection::vec(json_value(), 0..12),
        ids in prop::collection::vec("msg_[a-c]", 0..12),
    ) {
        let mut engine = Engine::new("me", 64);
        let mut woken = std::collections::HashSet::new();
        for (i, v) in frames.iter().enumerate() {
            // Mix arbitrary values with message frames that reuse a few ids.
            let text = match ids.get(i) {
                Some(id) if i % 2 == 0 => serde_json::json!({"type": "message.new", "payload": {"id": id, "sender": "x"}}).to_string(),
                _ => v.to_string(),
            };
            let a = engine.on_text(&text);
            if let Some(id) = &a.ack {
                prop_assert!(matches!(ServerFrame::parse(&text), Ok(ServerFrame::MessageNew(m)) if &m.id == id));
                if a.wake.is_some() {
                    prop_assert!(woken.insert(id.clone()), "second wake for {}", id);
                }
            }
        }
    }

    #[test]
    fn any_wake_reason_wakes_under_a_label_safe_for_an_env_list(reason in any::<String>()) {
        let frame = serde_json::json!({"type": "wake", "payload": {"reason": reason}}).to_string();
        let label = Engine::new("me", 4).on_text(&frame).wake.map(|w| w.label());
        let label = label.expect("every wake frame wakes");
        prop_assert!(!label.is_empty() && label.len() <= agentchat::core::frames::MAX_WAKE_REASON_CHARS);
        prop_assert!(label.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b)), "{:?}", label);
    }

    #[test]
    fn tray_and_texts_parsers_never_panic_on_any_bytes(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        let _ = Tray::parse(&bytes);
        let _ = Texts::parse(&bytes);
    }

    #[test]
    fn tray_and_texts_parsers_never_panic_on_any_json(v in json_value()) {
        let text = v.to_string();
        let _ = Tray::parse(text.as_bytes());
        let _ = Texts::parse(text.as_bytes());
    }

    #[test]
    fn tray_round_trip_gives_the_same_json_value(v in tray_like()) {
        if let Ok(tray) = Tray::parse(v.to_string().as_bytes()) {
            prop_assert_eq!(serde_json::to_value(&tray).unwrap(), v);
        }
    }

    #[test]
    fn tray_errors_and_skip_reasons_never_quote_a_value(
        secret in "zq[a-z]{8,16}",
        place in 0usize..7,
    ) {
        let s = Value::from(secret.clone());
        let v = match place {
            0 => serde_json::json!({"conversations": [], "truncated": s}),
            1 => serde_json::json!({"conversations": [], "version": s}),
            2 => serde_json::json!({"conversations": [{"conversation_id": "c", "muted": s}]}),
            3 => serde_json::json!({"conversations": [s]}),
            4 => serde_json::json!({"conversations": [], "invites": [{"invite_id": 1, "x": s}], "invites_truncated": s}),
            5 => serde_json::json!({"conversations": s}),
            // A body that is not an object at all.
            _ => s,
        };
        match Tray::parse(v.to_string().as_bytes()) {
            Err(e) => {
                // A tray field of the wrong type, or no object at all: the tray is refused.
                prop_assert!(![2, 3].contains(&place), "place {}: {}", place, e);
                let err = e.to_string();
                prop_assert!(!err.contains(&secret), "{}", err);
            }
            Ok(tray) => {
                // A malformed card: skipped, and the reason logged for it quotes nothing.
                prop_assert!([2, 3].contains(&place), "place {} parsed", place);
                prop_assert_eq!(tray.skipped_cards.len(), 1);
                for s in &tray.skipped_cards {
                    prop_assert!(!s.reason.contains(&secret), "{}", s.reason);
                }
            }
        }
    }

    #[test]
    fn close_reason_parsing_never_panics(code in any::<u16>(), reason in any::<String>()) {
        let _ = reconnect::parse_retry_after(&reason);
        let kind = reconnect::classify_close(code, &reason);
        let d = reconnect::delay_after(&kind, &mut Backoff::default(), Duration::from_secs(600), 0.5, 1.0);
        prop_assert!(d >= Duration::from_secs(1) && d <= Duration::from_secs(3960));
    }

    #[test]
    fn close_reason_with_hint_and_noise_is_the_budget(
        s in any::<u32>(), pre in "[a-z;, ]{0,10}", post in "[;, ][a-z ]{0,10}",
    ) {
        let reason = format!("{pre} retry_after={s}{post}");
        prop_assert_eq!(
            reconnect::classify_close(1013, &reason),
            reconnect::CloseKind::Budget { retry_after_s: u64::from(s) }
        );
    }

    #[test]
    fn under_any_time_scale_a_budget_refusal_waits_its_hint_and_the_ordinary_backoff_is_divided(
        s in any::<u64>(),
        scale in prop_oneof![any::<f64>(), 1.0f64..1e6],
        rands in prop::collection::vec(any::<f64>(), 1..20),
    ) {
        let hint = Duration::from_secs(s.clamp(1, 3600));
        let (mut budget, mut ordinary) = (Backoff::default(), Backoff::default());
        for r in rands {
            let unscaled = ordinary.clone().next_delay(r);
            let d = reconnect::delay_after(
                &reconnect::CloseKind::Budget { retry_after_s: s },
                &mut budget,
                Duration::from_secs(600),
                r,
                scale,
            );
            prop_assert!(d >= hint, "{:?} < the hint {:?} at scale {}", d, hint, scale);
            let o = reconnect::delay_after(
                &reconnect::CloseKind::Ordinary,
                &mut ordinary,
                Duration::from_secs(600),
                r,
                scale,
            );
            if scale.is_finite() && scale >= 1.0 {
                prop_assert!(o <= unscaled.div_f64(scale).max(Duration::from_millis(1)) + Duration::from_nanos(1),
                    "{:?} not {:?} divided by {}", o, unscaled, scale);
            }
        }
    }

    #[test]
    fn budget_delay_is_clamped_plus_at_most_ten_percent(s in any::<u64>(), r in any::<f64>()) {
        let base = Duration::from_secs(s.clamp(1, 3600));
        let d = reconnect::budget_delay(s, r);
        prop_assert!(d >= base, "{:?} < {:?}", d, base);
        prop_assert!(d <= base.mul_f64(1.1), "{:?} > 110% of {:?}", d, base);
    }

    #[test]
    fn backoff_stays_between_one_second_and_a_minute(
        rands in prop::collection::vec(any::<f64>(), 1..40),
        ups in prop::collection::vec(0u64..60, 1..40),
    ) {
        let mut b = Backoff::default();
        for (i, r) in rands.iter().enumerate() {
            let d = b.next_delay(*r);
            prop_assert!(d >= Duration::from_secs(1) && d <= Duration::from_secs(60), "{:?}", d);
            let ceiling = Duration::from_secs(1u64 << (b.attempt() - 1).min(6)).min(Duration::from_secs(60));
            prop_assert!(d <= ceiling, "{:?} above ceiling {:?}", d, ceiling);
            let up = Duration::from_secs(ups[i % ups.len()]);
            let before = b.attempt();
            b.connection_lasted(up);
            prop_assert_eq!(b.attempt() == 0, up >= Duration::from_secs(30) || before == 0);
        }
    }

    #[test]
    fn identity_upsert_is_idempotent_and_keeps_surrounding_bytes(
        file in "([a-z #\\-]{0,12}(\r\n|\n|\r)?){0,8}",
        body in "[a-zA-Z@ ]{0,20}(\n[a-zA-Z@ ]{0,20}){0,3}",
    ) {
        let out = identity::upsert(&file, &body).unwrap();
        // Appended: the old text is a prefix, untouched.
        prop_assert!(out.starts_with(&file));
        prop_assert_eq!(identity::upsert(&out, &body).unwrap(), out.clone());
        let range = identity::find(&out).unwrap().unwrap();
        // The block holds the body, in the file's line endings.
        prop_assert!(out[range].replace("\r\n", "\n").contains(body.trim_end_matches('\n')));
        // Replacing with another body keeps every byte outside the block.
        let other = identity::upsert(&out, "other").unwrap();
        let r1 = identity::find(&out).unwrap().unwrap();
        let r2 = identity::find(&other).unwrap().unwrap();
        prop_assert_eq!(&out[..r1.start], &other[..r2.start]);
        prop_assert_eq!(&out[r1.end..], &other[r2.end..]);
    }

    #[test]
    fn identity_functions_never_panic(file in any::<String>(), body in any::<String>(), handle in any::<String>()) {
        let _ = identity::render(&body, &handle);
        let _ = identity::find(&file);
        if let Ok(out) = identity::upsert(&file, &body) {
            // A rendered text with marker lines of its own can make the result damaged; it
            // never panics either way.
            let _ = identity::find(&out);
        }
    }
}

/// One step of a coalescer timeline: a wake after `gap` ms, or (when a cycle runs) its end.
#[derive(Debug, Clone)]
enum Step {
    Wake(u64),
    End(u64),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        3 => (0u64..8_000).prop_map(Step::Wake),
        1 => (0u64..30_000).prop_map(Step::End),
    ]
}

proptest! {
    #[test]
    fn coalescer_never_overlaps_never_drops_a_wake_and_honours_max_delay(
        quiet in 0u64..5_000,
        max_delay in 0u64..20_000,
        steps in prop::collection::vec(step(), 0..40),
    ) {
        let mut c = Coalescer::new(quiet, max_delay);
        let mut now = 0u64;
        let mut starts: Vec<u64> = Vec::new();
        let mut wakes: Vec<u64> = Vec::new();
        // The first wake while idle with nothing owed, and the end of a cycle that left wakes owed:
        // the next start must come no later than either plus max_delay.
        let mut deadline: Option<u64> = None;
        let mut running = false;

        let start_due = |c: &mut Coalescer, upto: u64, starts: &mut Vec<u64>, running: &mut bool, deadline: &mut Option<u64>| -> Result<(), TestCaseError> {
            if let Some(due) = c.due() && due <= upto {
                prop_assert!(!*running, "a cycle is due while one runs");
                prop_assert!(c.try_start(due));
                prop_assert!(!c.try_start(due), "two cycles started at once");
                if let Some(d) = deadline.take() {
                    prop_assert!(due <= d, "started at {} after deadline {}", due, d);
                }
                starts.push(due);
                *running = true;
            }
            Ok(())
        };

        for s in &steps {
            match *s {
                Step::Wake(gap) => {
                    now += gap;
                    start_due(&mut c, now, &mut starts, &mut running, &mut deadline)?;
                    if !running && !c.is_owed() {
                        deadline = Some(now + max_delay);
                    }
                    c.wake(now);
                    wakes.push(now);
                    prop_assert!(running || c.due().is_some());
                }
                Step::End(gap) => {
                    if running {
                        now += gap;
                        start_due(&mut c, now, &mut starts, &mut running, &mut deadline)?;
                        c.end(now);
                        running = false;
                        if c.is_owed() {
                            deadline = Some(now + max_delay);
                        }
                    }
                }
            }
            prop_assert_eq!(c.is_running(), running);
        }
        // Drain: end whatever runs and start whatever is owed, until nothing is.
        for _ in 0..3 {
            if running {
                now += 1;
                c.end(now);
                running = false;
                if c.is_owed() {
                    deadline = Some(now + max_delay);
                }
            }
            if let Some(due) = c.due() {
                start_due(&mut c, due, &mut starts, &mut running, &mut deadline)?;
            }
        }
        prop_assert!(!c.is_owed());
        // Starts are in order and every wake is followed by a start at or after it.
        prop_assert!(starts.windows(2).all(|w| w[0] <= w[1]));
        for w in &wakes {
            prop_assert!(starts.iter().any(|s| s >= w), "wake at {} never served; starts {:?}", w, starts);
        }
    }
}

// ---------------------------------------------------------------- no panic, at fuzzing scale
//
// Structured inputs for the parsers the listener feeds with what a server or a user wrote:
// socket frames, trays (malformed entries included), texts and the config. Every property here
// has `never_panic` in its name, so one run can raise them all to fuzzing scale (CONTRIBUTING.md,
// "Fuzzing"): `PROPTEST_CASES=1000000 cargo test --release --test it never_panic`.

/// Text frames shaped like the server's: a known (or unknown) `type`, and a payload whose keys
/// often hit the modelled fields.
fn frame_like() -> impl Strategy<Value = String> {
    let kind = prop_oneof![
        prop::sample::select(vec![
            "hello.ok",
            "message.new",
            "wake",
            "group.invite.received",
            "group.deleted",
            "heartbeat",
            "message.read",
            "typing.start",
            "rate_limit.warning",
        ])
        .prop_map(Value::from),
        json_value(),
    ];
    (
        kind,
        prop::option::of(json_value()),
        prop::option::of(json_value()),
        prop::collection::btree_map(key(), json_value(), 0..3),
    )
        .prop_map(|(kind, payload, caps, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            m.insert("type".into(), kind);
            if let Some(p) = payload {
                m.insert("payload".into(), p);
            }
            if let Some(c) = caps {
                m.insert("capabilities".into(), c);
            }
            Value::Object(m).to_string()
        })
}

/// JSON values of the types not excluded, built rather than filtered, so a fuzzing-scale run
/// never runs out of rejections.
fn json_except(
    null: bool,
    boolean: bool,
    string: bool,
    object: bool,
) -> impl Strategy<Value = Value> {
    let mut options: Vec<BoxedStrategy<Value>> = vec![
        any::<i64>().prop_map(Value::from).boxed(),
        // Finite: `Value::from` turns NaN and the infinities into `null`.
        (-1e12f64..1e12).prop_map(Value::from).boxed(),
        prop::collection::vec(json_value(), 0..3)
            .prop_map(Value::from)
            .boxed(),
    ];
    if !null {
        options.push(Just(Value::Null).boxed());
    }
    if !boolean {
        options.push(any::<bool>().prop_map(Value::from).boxed());
    }
    if !string {
        options.push(any::<String>().prop_map(Value::from).boxed());
    }
    if !object {
        options.push(
            prop::collection::btree_map(key(), json_value(), 0..3)
                .prop_map(|m| Value::Object(m.into_iter().collect()))
                .boxed(),
        );
    }
    prop::strategy::Union::new(options)
}

/// One tray entry: well formed (`true`) or malformed in one of the ways a server could get wrong.
fn entry(id_key: &'static str, prefix: &'static str) -> impl Strategy<Value = (bool, Value)> {
    let good = (
        "[a-z0-9]{1,8}",
        prop::option::of(prop_oneof![
            any::<bool>().prop_map(Value::from),
            Just(Value::Null)
        ]),
        prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..3),
    )
        .prop_map(move |(id, muted, extra)| {
            let mut m: Map<String, Value> = extra.into_iter().collect();
            m.insert(id_key.into(), Value::from(format!("{prefix}{id}")));
            if let Some(muted) = muted {
                m.insert("muted".into(), muted);
            }
            // Invites carry no `muted`; it is an unknown field there and never makes one bad.
            (true, Value::Object(m))
        });
    let bad = prop_oneof![
        // No id, or an id of the wrong type.
        prop::collection::btree_map("[a-z_]{1,8}", json_value(), 0..3).prop_map(move |m| {
            let mut m: Map<String, Value> = m.into_iter().collect();
            m.remove(id_key);
            Value::Object(m)
        }),
        json_except(false, false, true, false)
            .prop_map(move |id| serde_json::json!({ id_key: id })),
        // Not an object at all.
        json_except(false, false, false, true),
    ]
    .prop_map(|v| (false, v));
    prop_oneof![3 => good, 1 => bad]
}

/// A wrongly typed `muted` makes a card bad (an invite has no `muted` to get wrong).
fn card_entry() -> impl Strategy<Value = (bool, Value)> {
    prop_oneof![
        4 => entry("conversation_id", "conv_"),
        1 => ("[a-z0-9]{1,8}", json_except(true, true, false, false))
            .prop_map(|(id, muted)| (false, serde_json::json!({"conversation_id": id, "muted": muted}))),
    ]
}

/// A valid config file: each known key optionally set to a plausible value of its type.
fn valid_config() -> impl Strategy<Value = String> {
    fn pick(values: &'static [&'static str]) -> impl Strategy<Value = Option<&'static str>> {
        prop::option::of(prop::sample::select(values))
    }
    const DURATIONS: &[&str] = &[
        "\"1ms\"",
        "\"3s\"",
        "\"15m\"",
        "\"1h 30m\"",
        "\"100s\"",
        "\"2days\"",
    ];
    let top = (
        pick(&["\"http://127.0.0.1:9\"", "\"https://api.example.invalid/\""]),
        pick(&["\"debug\"", "\"info\"", "\"agentchat=debug\""]),
        pick(&["\"json\"", "\"text\""]),
    );
    let listen = (
        pick(&["\"claude-code\"", "\"codex\"", "\"script\""]),
        pick(&["[\"/bin/sh\", \"run.sh\"]", "[]"]),
        pick(DURATIONS),
        pick(DURATIONS),
        pick(DURATIONS),
        pick(DURATIONS),
        pick(DURATIONS),
        pick(&["true", "false"]),
        pick(&["1", "50"]),
        pick(&["\"/tmp/agentchat-work\""]),
    );
    let claude = (
        pick(&["\"listener\"", "\"user\""]),
        pick(&["[\"--verbose\"]"]),
    );
    let profile = pick(&["runtime = \"codex\"", "run_timeout = \"1m\""]);
    (top, listen, claude, profile).prop_map(|(top, listen, claude, profile)| {
        let line = |k: &str, v: Option<&str>| v.map(|v| format!("{k} = {v}\n")).unwrap_or_default();
        let mut s = String::new();
        s += &line("api_base", top.0);
        s += &line("log_level", top.1);
        s += &line("log_format", top.2);
        s += "[listen]\n";
        s += &line("runtime", listen.0);
        s += &line("command", listen.1);
        s += &line("run_timeout", listen.2);
        s += &line("kill_grace", listen.3);
        s += &line("quiet_window", listen.4);
        s += &line("max_delay", listen.5);
        s += &line("idle_timeout", listen.6);
        s += &line("identity_block", listen.7);
        s += &line("run_logs_keep", listen.8);
        s += &line("workdir", listen.9);
        s += "[listen.claude]\n";
        s += &line("mcp", claude.0);
        s += &line("extra_args", claude.1);
        if let Some(p) = profile {
            s += &format!("[profiles.work.listen]\n{p}\n");
        }
        s
    })
}

/// A config file's text: a valid one, a valid one with a line of noise, known and unknown keys
/// with values of every TOML type in any table, or any text at all.
fn config_text() -> impl Strategy<Value = String> {
    let toml_value = prop_oneof![
        // A JSON string is a TOML basic string (but for a rare raw DEL, which TOML refuses).
        "[a-z0-9 ./:_-]{0,12}".prop_map(|s| Value::from(s).to_string()),
        prop::sample::select(vec![
            "\"0s\"",
            "\"1ms\"",
            "\"3s\"",
            "\"15m\"",
            "\"999999y\"",
            "\"1h 30m\"",
            "\"-1s\"",
            "\"claude-code\"",
            "\"codex\"",
            "\"script\"",
            "\"json\"",
            "\"text\"",
            "\"debug\"",
            "\"http://127.0.0.1:1\"",
            "\"https://x\"",
            "\"\"",
            "\"listener\"",
            "\"user\"",
        ])
        .prop_map(str::to_owned),
        any::<String>().prop_map(|s| Value::from(s).to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<f64>().prop_map(|f| format!("{f:?}")),
        prop::collection::vec("[a-z/-]{0,6}", 0..3).prop_map(|v| Value::from(v).to_string()),
        Just("[1, \"a\"]".to_owned()),
        Just("{ a = 1 }".to_owned()),
    ];
    let key = prop_oneof![
        prop::sample::select(vec![
            "api_base",
            "api_key_file",
            "api_key",
            "log_level",
            "log_format",
            "runtime",
            "command",
            "workdir",
            "run_timeout",
            "kill_grace",
            "quiet_window",
            "max_delay",
            "idle_timeout",
            "script_gets_key",
            "identity_block",
            "run_logs_keep",
            "binary",
            "extra_args",
            "mcp",
            "mcp_url",
            "listen",
            "profiles",
            "claude",
            "codex",
        ])
        .prop_map(str::to_owned),
        "[a-z_]{1,8}",
    ];
    // Tables `valid_config` never opens, so a noise section after it is still valid TOML.
    let noise_header = prop::sample::select(vec![
        "",
        "[listen.codex]",
        "[profiles.default]",
        "[profiles.other.listen]",
        "[claude]",
    ]);
    let header = prop::sample::select(vec![
        "",
        "[listen]",
        "[listen.claude]",
        "[listen.codex]",
        "[profiles.work]",
        "[profiles.work.listen]",
        "[profiles.work.listen.claude]",
        "[profiles.default]",
        "[profiles]",
        "[claude]",
    ]);
    let lines = |h: &str, kvs: Vec<(String, String)>| {
        let mut s = format!("{h}\n");
        for (k, v) in kvs {
            s.push_str(&format!("{k} = {v}\n"));
        }
        s
    };
    let kvs = prop::collection::vec((key, toml_value), 0..5);
    let section = (header, kvs.clone()).prop_map(move |(h, kvs)| lines(h, kvs));
    let noise = (noise_header, kvs).prop_map(move |(h, kvs)| lines(h, kvs));
    prop_oneof![
        3 => valid_config(),
        2 => (valid_config(), noise).prop_map(|(v, noise)| v + &noise),
        2 => prop::collection::vec(section, 0..4).prop_map(|v| v.concat()),
        1 => any::<String>(),
    ]
}

/// An environment: the variables the config reads, with plausible or arbitrary values.
fn config_env() -> impl Strategy<Value = std::collections::HashMap<String, String>> {
    let valid = prop::collection::hash_map(
        prop::sample::select(vec![
            ("AGENTCHAT_LOG", "debug"),
            ("AGENTCHAT_LOG_FORMAT", "json"),
            ("AGENTCHAT_RUNTIME", "script"),
            ("AGENTCHAT_PROFILE", "work"),
            ("AGENTCHAT_STATE_DIR", "/tmp/agentchat-state"),
            ("AGENTCHAT_API_BASE", "http://127.0.0.1:9"),
            ("AGENTCHAT_INTEGRATION", "off"),
        ])
        .prop_map(|(k, v)| (k.to_owned(), v.to_owned())),
        Just(()),
        0..5,
    )
    .prop_map(|m| {
        let mut env: std::collections::HashMap<String, String> = m.into_keys().collect();
        env.insert("HOME".into(), "/tmp/home".into());
        env
    });
    let name = prop::sample::select(vec![
        "AGENTCHAT_API_BASE",
        "AGENTCHAT_API_KEY",
        "AGENTCHAT_CONFIG",
        "AGENTCHAT_DOORBELL",
        "AGENTCHAT_INTEGRATION",
        "AGENTCHAT_LOG",
        "AGENTCHAT_LOG_FORMAT",
        "AGENTCHAT_PROFILE",
        "AGENTCHAT_RUNTIME",
        "AGENTCHAT_STATE_DIR",
        "AGENTCHAT_UNKNOWN",
        "HOME",
        "XDG_STATE_HOME",
    ]);
    let value = prop_oneof![
        prop::sample::select(vec![
            "",
            "off",
            "OFF",
            "on",
            "json",
            "text",
            "codex",
            "script",
            "work",
            "default",
            "/tmp/x",
            "relative",
            "http://127.0.0.1:9",
            "agentchat=debug",
            "..",
        ])
        .prop_map(str::to_owned),
        any::<String>(),
    ];
    let any_env = prop::collection::hash_map(name.prop_map(str::to_owned), value, 0..5);
    prop_oneof![2 => valid, 1 => any_env]
}

proptest! {
    #[test]
    fn frame_parser_and_engine_never_panic_on_frame_shaped_json(text in frame_like()) {
        let parsed = ServerFrame::parse(&text);
        let a = Engine::new("@me", 4).on_text(&text);
        if a.malformed.is_some() {
            prop_assert!(a.ack.is_none() && a.wake.is_none());
        }
        if let Some(id) = &a.ack {
            prop_assert!(matches!(&parsed, Ok(ServerFrame::MessageNew(m)) if &m.id == id));
        }
        if a.wake.is_some() {
            prop_assert!(parsed.is_ok());
        }
    }

    #[test]
    fn tray_with_malformed_entries_never_panics_and_skips_exactly_the_bad_ones(
        cards in prop::collection::vec(card_entry(), 0..6),
        invites in prop::option::of(prop::collection::vec(entry("invite_id", "gri_"), 0..4)),
        truncated in prop::option::of(any::<bool>()),
        invites_truncated in prop::option::of(any::<bool>()),
        you in prop::option::of(prop::sample::select(vec!["@me", "@Me", "@other"])),
    ) {
        let mut v = serde_json::json!({
            "conversations": cards.iter().map(|(_, c)| c.clone()).collect::<Vec<_>>(),
        });
        if let Some(i) = &invites {
            v["invites"] = i.iter().map(|(_, x)| x.clone()).collect::<Vec<_>>().into();
        }
        for (k, x) in [("truncated", truncated), ("invites_truncated", invites_truncated)] {
            if let Some(x) = x {
                v[k] = x.into();
            }
        }
        if let Some(you) = you {
            v["you"] = you.into();
        }
        let tray = Tray::parse(v.to_string().as_bytes());
        prop_assert!(tray.is_ok(), "{:?}", tray);
        let tray = tray.unwrap();
        let bad = |list: &[(bool, Value)]| -> Vec<usize> {
            list.iter().enumerate().filter(|(_, (ok, _))| !ok).map(|(i, _)| i).collect()
        };
        let skipped = |s: &[agentchat::core::tray::Skipped]| -> Vec<usize> {
            s.iter().map(|s| s.index).collect()
        };
        prop_assert_eq!(skipped(&tray.skipped_cards), bad(&cards));
        prop_assert_eq!(tray.conversations.len(), cards.len() - bad(&cards).len());
        let bad_invites = invites.as_deref().map(bad).unwrap_or_default();
        prop_assert_eq!(skipped(&tray.skipped_invites), bad_invites.clone());
        prop_assert_eq!(
            tray.invites_complete(),
            invites.is_some() && !invites_truncated.unwrap_or(false) && bad_invites.is_empty()
        );
        // The decision never panics, and a skipped card waits like `truncated`.
        let decision = agentchat::core::decision::decide(&tray, "me");
        if !tray.skipped_cards.is_empty() && you != Some("@other") {
            prop_assert_eq!(
                decision,
                agentchat::core::decision::CycleDecision::Run(agentchat::core::decision::RunKind::Wake)
            );
        }
        // What is kept survives a round trip; skipped entries are not serialised.
        let again = Tray::parse(&serde_json::to_vec(&tray).unwrap()).unwrap();
        prop_assert_eq!(&again.conversations, &tray.conversations);
        prop_assert_eq!(&again.invites, &tray.invites);
        prop_assert!(again.skipped_cards.is_empty() && again.skipped_invites.is_empty());
    }

    #[test]
    fn texts_parser_never_panics_on_texts_shaped_json(
        version in prop_oneof![Just(Value::from("1")), Just(Value::from("2")), Just(Value::from(1)), json_value()],
        fields in prop::collection::btree_map(
            prop::sample::select(vec![
                "manual", "wake_instruction", "invite_prompt", "identity_line",
                "identity_line_template", "gate_call_preamble", "gate_call_answer_format",
                "reply_turn_template", "future",
            ]).prop_map(str::to_owned),
            json_value(),
            0..6,
        ),
        drop_version in any::<bool>(),
    ) {
        let mut m: Map<String, Value> = fields.into_iter().collect();
        if !drop_version {
            m.insert("version".into(), version);
        }
        if let Ok(t) = Texts::parse(Value::Object(m).to_string().as_bytes()) {
            prop_assert_eq!(t.version.as_str(), "1");
        }
    }

    #[test]
    fn config_resolve_never_panics_and_never_quotes_the_key(
        text in config_text(),
        env in config_env(),
        profile in prop::option::of(prop_oneof![
            3 => Just("default".to_owned()), 3 => Just("work".to_owned()), 1 => any::<String>()
        ]),
        runtime in prop::option::of(prop_oneof![
            Just(agentchat::config::RuntimeKind::Codex),
            Just(agentchat::config::RuntimeKind::ClaudeCode),
            Just(agentchat::config::RuntimeKind::Script),
        ]),
        api_base in prop::option::of(prop_oneof![
            3 => Just("http://127.0.0.1:1".to_owned()), 1 => any::<String>()
        ]),
        key in "zqk[a-z]{12}",
        key_in_file in any::<bool>(),
    ) {
        let mut env = env;
        let mut text = text;
        if key_in_file {
            text = format!("api_key = {key:?}\n{text}");
        } else {
            env.insert("AGENTCHAT_API_KEY".into(), key.clone());
        }
        let args = agentchat::config::ConfigArgs {
            profile,
            runtime,
            api_base,
            ..Default::default()
        };
        let path = std::path::Path::new("/nonexistent/config.toml");
        match agentchat::config::resolve(&args, &env, Some((path, &text))) {
            Ok(settings) => {
                let _ = agentchat::config::advice(&settings);
            }
            Err(e) => {
                let msg = e.to_string();
                prop_assert!(!msg.contains(&key), "{}", msg);
            }
        }
        for raw in [text.as_str(), env.get("AGENTCHAT_LOG").map_or("", String::as_str)] {
            let _ = agentchat::config::value::duration(raw);
        }
    }
}

// ---------------------------------------------------------------- run policy (issue 26)

/// Quiet ranges as `"HH:MM-HH:MM"` text, some of them refused by the parser (start == end).
fn quiet_ranges() -> impl Strategy<Value = Vec<String>> {
    prop::collection::vec(
        (0u16..1440, 0u16..1440)
            .prop_map(|(a, b)| format!("{:02}:{:02}-{:02}:{:02}", a / 60, a % 60, b / 60, b % 60)),
        0..4,
    )
}

proptest! {
    /// On any time zone with DST-like changes, any caps and quiet hours and any past runs: a
    /// held run's `until` is later than now, and at `until` no time rule holds it (the ledger as
    /// it was), so the listener's own wake then starts the run.
    #[test]
    fn policy_hold_ends_at_until_on_any_timeline(
        ranges in quiet_ranges(),
        per_hour in 0u32..4,
        per_day in 0u32..6,
        cost in prop::option::of(0.1f64..2.0),
        initial in -12i32..=14,
        changes in prop::collection::vec((0i64..10 * 86_400_000, prop::bool::ANY), 0..6),
        runs in prop::collection::vec((0i64..10 * 86_400_000, 0.0f64..1.0), 0..12),
        now in 0i64..10 * 86_400_000,
    ) {
        use agentchat::core::policy::{Ledger, OffsetTable, Policy};
        let mut text = format!("max_runs_per_hour = {per_hour}\nmax_runs_per_day = {per_day}\n");
        if let Some(c) = cost {
            text.push_str(&format!("max_cost_per_day_usd = {c}\n"));
        }
        if !ranges.is_empty() {
            text.push_str(&format!("quiet_hours = {ranges:?}\n"));
        }
        let Ok(policy) = Policy::from_toml(toml::from_str(&text).unwrap(), "listen.policy") else {
            return Ok(()); // a range the parser refuses
        };
        // An offset of whole hours that moves an hour forward or back at each change.
        let mut offset = initial * 3600;
        let mut table = Vec::new();
        let mut at: Vec<_> = changes;
        at.sort();
        for (t, forward) in at {
            offset = (offset + if forward { 3600 } else { -3600 }).clamp(-12 * 3600, 14 * 3600);
            table.push((t, offset));
        }
        let zone = OffsetTable::new(initial * 3600, table);
        let mut ledger = Ledger::new();
        let mut past: Vec<_> = runs.into_iter().filter(|r| r.0 <= now).collect();
        past.sort_by_key(|r| r.0);
        for (t, c) in past {
            ledger.started(t, vec![], &zone);
            ledger.ended(t, Some(c), Some(10));
        }
        if let Some((_, _, until)) = policy.may_start(&ledger, now, &zone) {
            let until = until.expect("a hold of time rules always ends");
            prop_assert!(until > now);
            prop_assert_eq!(policy.may_start(&ledger, until, &zone), None);
        }
    }
}

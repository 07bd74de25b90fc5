//! Property tests for the pure core: no parser panics on arbitrary input, the coalescer's
//! guarantees hold on any timeline, the reconnect delays stay in bounds, the identity upsert is
//! idempotent and keeps the bytes around the block. CI runs them with `PROPTEST_CASES=64`.

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
        let d = reconnect::delay_after(&kind, &mut Backoff::default(), Duration::from_secs(600), 0.5);
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

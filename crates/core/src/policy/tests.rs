use super::*;
use serde_json::json;

const H: i64 = 3_600_000;
const D: i64 = 24 * H;

fn policy(text: &str) -> Policy {
    Policy::from_toml(toml::from_str(text).unwrap(), "listen.policy").unwrap()
}

fn error(text: &str) -> PolicyError {
    Policy::from_toml(toml::from_str(text).unwrap(), "listen.policy").unwrap_err()
}

fn tray(v: serde_json::Value) -> Tray {
    Tray::parse(v.to_string().as_bytes()).unwrap()
}

fn direct(id: &str, from: &str) -> serde_json::Value {
    json!({"conversation_id": id, "type": "direct", "relationship": "established",
           "counterparty": {"handle": from}, "preview": {"sender": from}, "you_owe_reply": true,
           "pace": {"last_60s": 1, "last_10m": 3}})
}

#[test]
fn every_key_is_read_and_a_cap_of_zero_is_no_cap() {
    let p = policy(
        r#"quiet_hours = ["22:00-07:00"]
        timezone = "Europe/Berlin"
        max_runs_per_hour = 12
        max_runs_per_day = 0
        max_cost_per_day_usd = 5
        max_tokens_per_day = 100000
        max_cost_per_run_usd = 0.5
        first_contact = "wait"
        groups = "mentions"
        allow = ["@alice", "@Ops-*"]
        deny = ["noisy"]
        loop_guard = { runs = 6, within = "30m" }"#,
    );
    assert_eq!(
        p.quiet_hours,
        vec![QuietRange {
            start: 1320,
            end: 420
        }]
    );
    assert_eq!(p.timezone.as_deref(), Some("Europe/Berlin"));
    assert_eq!((p.max_runs_per_hour, p.max_runs_per_day), (Some(12), None));
    assert_eq!(p.max_cost_per_day_usd, Some(5.0));
    assert_eq!(p.max_tokens_per_day, Some(100_000));
    assert_eq!(p.max_cost_per_run_usd, Some(0.5));
    assert_eq!(
        (p.first_contact, p.groups),
        (FirstContact::Wait, Groups::Mentions)
    );
    assert!(p.allow.as_ref().unwrap()[1].matches("@ops-eu"));
    assert!(p.deny[0].matches("@NOISY"));
    assert_eq!(
        p.loop_guard,
        Some(LoopGuard {
            runs: 6,
            within_ms: 30 * 60_000
        })
    );
    assert_eq!(policy(""), Policy::default());
}

#[test]
fn errors_name_the_key_path_and_never_quote_the_value() {
    let cases = [
        (
            "quiet_hourz = []",
            "unknown config key `listen.policy.quiet_hourz`",
        ),
        (
            "loop_guard = { runs = 1, within = \"1m\", x = 1 }",
            "unknown config key `listen.policy.loop_guard.x`",
        ),
        ("loop_guard = \"secret\"", "`listen.policy.loop_guard`"),
        (
            "loop_guard = { runs = 1 }",
            "`listen.policy.loop_guard.within`",
        ),
        (
            "loop_guard = { runs = 1, within = \"48h\" }",
            "`listen.policy.loop_guard.within`",
        ),
        ("quiet_hours = [\"secret\"]", "`listen.policy.quiet_hours`"),
        ("quiet_hours = [\"07:00-07:00\"]", "starts where it ends"),
        (
            "quiet_hours = [\"00:00-12:00\", \"12:00-24:00\"]",
            "no minute of the day",
        ),
        (
            "max_runs_per_hour = -1",
            "`listen.policy.max_runs_per_hour`",
        ),
        ("max_runs_per_hour = \"secret\"", "found string"),
        (
            "max_cost_per_day_usd = -0.5",
            "`listen.policy.max_cost_per_day_usd`",
        ),
        ("first_contact = \"secret\"", "\"wake\" or \"wait\""),
        ("groups = \"secret\"", "\"all\" or \"mentions\""),
        ("allow = []", "`listen.policy.allow`: lists no handle"),
        ("deny = [\"two words secret\"]", "`listen.policy.deny`"),
        ("timezone = \"../secret\"", "`listen.policy.timezone`"),
    ];
    for (text, want) in cases {
        let e = error(text).to_string();
        assert!(e.contains(want), "{text}: {e}");
        assert!(!e.contains("secret"), "{text}: {e}");
    }
    assert_eq!(
        Policy::from_toml(toml::from_str("deny = []").unwrap(), "p")
            .unwrap()
            .deny,
        vec![]
    );
}

#[test]
fn a_profiles_table_overrides_the_top_level_key_by_key() {
    let layer = |t: &str| PolicyLayer::from_toml(toml::from_str(t).unwrap(), "p").unwrap();
    let top = layer("max_runs_per_day = 10\nallow = [\"@a\", \"@b\"]");
    let mine = layer("allow = [\"@c\"]\nloop_guard = { runs = 0, within = \"1m\" }");
    let p = mine.over(top).resolve();
    assert_eq!(p.max_runs_per_day, Some(10));
    assert_eq!(p.allow, Some(vec![HandlePattern::parse("c").unwrap()]));
    assert_eq!(p.loop_guard, None);
}

#[test]
fn handle_patterns_match_with_stars_in_any_spelling() {
    let p = |s: &str| HandlePattern::parse(s).unwrap();
    assert!(p("@ops-*").matches("OPS-eu"));
    assert!(p("*").matches("@anyone"));
    assert!(p("a*b*c").matches("@axxbyyc"));
    assert!(!p("a*b*c").matches("@axxbyy"));
    assert!(!p("@alice").matches("@alice2"));
    assert!(p("**a**").matches("a"));
    assert!(HandlePattern::parse("@").is_err());
}

#[test]
fn a_card_is_judged_by_its_metadata_in_rule_order() {
    let p = policy(
        "allow = [\"@a*\"]\ndeny = [\"@ab\"]\nfirst_contact = \"wait\"\ngroups = \"mentions\"",
    );
    let l = Ledger::new();
    let t = tray(json!({"conversations": [
        direct("allowed", "@alice"),
        direct("denied", "@ab"),
        direct("stranger", "@bob"),
        {"conversation_id": "first", "relationship": "first_contact", "counterparty": {"handle": "@amy"}},
        {"conversation_id": "group", "type": "group", "relationship": "group", "preview": {"sender": "@al"}, "mentioned_you": false},
        {"conversation_id": "mention", "type": "group", "preview": {"sender": "@al"}, "mentioned_you": true},
        {"conversation_id": "muted", "muted": true, "counterparty": {"handle": "@alice"}},
    ]}));
    let keys: Vec<_> = t
        .conversations
        .iter()
        .map(|c| match p.card(c, &l, 0) {
            Verdict::Wakes => "wakes",
            Verdict::Never => "never",
            Verdict::Held { key, .. } => key,
        })
        .collect();
    assert_eq!(
        keys,
        [
            "wakes",
            "deny",
            "allow",
            "first_contact",
            "groups",
            "wakes",
            "never"
        ]
    );
}

#[test]
fn the_loop_guard_holds_a_conversation_until_its_oldest_counted_run_leaves_the_window() {
    let p = policy("loop_guard = { runs = 3, within = \"30m\" }");
    let z = FixedOffset(0);
    let t = tray(json!({"conversations": [direct("loop", "@bot"), direct("other", "@carol")]}));
    let mut l = Ledger::new();
    for at in [0, 10 * 60_000, 20 * 60_000] {
        l.started(at, vec!["loop".into()], &z);
    }
    let now = 25 * 60_000;
    assert_eq!(
        p.card(&t.conversations[0], &l, now),
        Verdict::Held {
            reason: HoldReason::LoopGuard,
            key: "loop_guard",
            until: Some(30 * 60_000)
        }
    );
    // Another conversation still wakes the run.
    match gate(&p, &t, &l, now, &z) {
        Gate::Run { cards, .. } => assert_eq!(cards, ["other"]),
        other => panic!("{other:?}"),
    }
    let alone = tray(json!({"conversations": [direct("loop", "@bot")]}));
    match gate(&p, &alone, &l, now, &z) {
        Gate::Held(h) => {
            assert_eq!(
                (h.reason, h.until),
                (HoldReason::LoopGuard, Some(30 * 60_000))
            );
            assert_eq!(h.cards, ["loop"]);
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        gate(&p, &alone, &l, 30 * 60_000, &z),
        Gate::Run { .. }
    ));
}

#[test]
fn a_quiet_card_is_not_remembered_for_the_loop_guard() {
    let t = tray(json!({"conversations": [
        direct("moving", "@a"),
        {"conversation_id": "still", "pace": {"last_60s": 0, "last_10m": 0}},
        {"conversation_id": "nopace"},
        {"conversation_id": "muted", "muted": true},
    ]}));
    assert_eq!(loop_conversations(&t), ["moving", "nopace"]);
}

#[test]
fn quiet_hours_across_midnight_hold_until_their_end_then_a_cap_until_the_hour_rolls() {
    let p = policy("quiet_hours = [\"22:00-07:00\"]\nmax_runs_per_hour = 1");
    let z = FixedOffset(2 * 3600);
    let t = tray(json!({"conversations": [direct("c", "@a")]}));
    let mut l = Ledger::new();
    // 23:30 local = 21:30Z.
    let now = 21 * H + 30 * 60_000;
    match gate(&p, &t, &l, now, &z) {
        Gate::Held(h) => {
            assert_eq!((h.reason, h.key), (HoldReason::QuietHours, "quiet_hours"));
            assert_eq!(h.until, Some(D + 5 * H)); // 07:00 local next day
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(gate(&p, &t, &l, D + 5 * H, &z), Gate::Run { .. }));
    // Quiet hours that end inside a day whose cap is reached hold until the day rolls over.
    let p = policy("quiet_hours = [\"22:00-23:00\"]\nmax_runs_per_day = 1");
    l.started(19 * H, vec![], &z); // 21:00 local
    match gate(&p, &t, &l, 20 * H + 30 * 60_000, &z) {
        Gate::Held(h) => {
            assert_eq!(
                (h.reason, h.until),
                (HoldReason::QuietHours, Some(D - 2 * H))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_a_truncated_tray_without_sender_rules_runs_for_cards_past_the_cut() {
    let z = FixedOffset(0);
    let l = Ledger::new();
    let t = tray(
        json!({"truncated": true, "conversations": [{"conversation_id": "m", "muted": true}]}),
    );
    assert!(matches!(
        gate(&Policy::default(), &t, &l, 0, &z),
        Gate::Run {
            beyond_cut: true,
            ..
        }
    ));
    assert_eq!(
        gate(&policy("groups = \"mentions\""), &t, &l, 0, &z),
        Gate::Nothing
    );
}

#[test]
fn invites_are_judged_by_who_invited() {
    let p = policy("deny = [\"@spam*\"]");
    let z = FixedOffset(0);
    let t = tray(json!({"conversations": [], "invites": [
        {"invite_id": "i1", "invited_by": "@spammer"},
    ]}));
    match gate(&p, &t, &Ledger::new(), 0, &z) {
        Gate::Held(h) => assert_eq!(
            (h.reason, h.key, h.invites.clone()),
            (HoldReason::NotAllowed, "deny", vec!["i1".to_string()])
        ),
        other => panic!("{other:?}"),
    }
}

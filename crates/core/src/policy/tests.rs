use super::*;
use crate::tray::Tray;
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
    // Nothing set: the bounded defaults (issue 38 item 1), and `0` lifts each of them.
    let none = policy("");
    assert_eq!(
        (none.max_runs_per_hour, none.max_runs_per_day),
        (Some(60), Some(500))
    );
    assert_eq!(
        none.loop_guard,
        Some(LoopGuard {
            runs: 30,
            within_ms: 3_600_000
        })
    );
    let lifted = policy("max_runs_per_hour = 0\nmax_runs_per_day = 0\nloop_guard = { runs = 0 }");
    assert_eq!(
        (
            lifted.max_runs_per_hour,
            lifted.max_runs_per_day,
            lifted.loop_guard
        ),
        (None, None, None)
    );
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
        // Issue 38 item 8: a sign is no hour, and a cap too large says the largest.
        (
            "quiet_hours = [\"+9:00-17:00\"]",
            "`listen.policy.quiet_hours`",
        ),
        (
            "quiet_hours = [\"09:+0-17:00\"]",
            "`listen.policy.quiet_hours`",
        ),
        (
            "max_runs_per_hour = 99999999999",
            "expected at most 4294967295 (0 is no cap)",
        ),
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
        .map(|c| match p.card(c, &l, &Heard::default()) {
            Verdict::Wakes => "wakes",
            Verdict::Never => "never",
            Verdict::Held { key, .. } => key,
        })
        .collect();
    assert_eq!(
        keys,
        [
            "wakes", "deny", "allow",
            // `@amy` is in `allow`: known to the user, no stranger (issue 38 item 8).
            "wakes", "groups", "wakes", "never"
        ]
    );
    let p = policy("first_contact = \"wait\"");
    assert_eq!(
        p.card(&t.conversations[3], &l, &Heard::default()),
        Verdict::Held {
            reason: HoldReason::NotAllowed,
            key: "first_contact",
            until: None
        }
    );
}

/// Issue 38 item 2: a conversation the guard saw loop is held until its other side has been quiet
/// for the window (each new message moves the end), then its last message wakes no run (only a
/// newer one does); another conversation still wakes runs all along.
#[test]
fn the_loop_guard_holds_a_loop_until_the_other_side_is_quiet_and_its_last_message_stays_unrun() {
    let p = policy("loop_guard = { runs = 3, within = \"30m\" }");
    let z = FixedOffset(0);
    let h = Heard::default();
    let card = |newest: &str| {
        let mut c = direct("loop", "@bot");
        c["last_message_id"] = json!(newest);
        c
    };
    let both = tray(json!({"conversations": [card("m1"), direct("other", "@carol")]}));
    let mut l = Ledger::new();
    for at in [0, 10 * 60_000, 20 * 60_000] {
        l.started(at, vec!["loop".into()], &z);
    }
    let now = 25 * 60_000;
    assert!(observe(&p, &both, &mut l, now));
    match gate(&p, &both, &l, &h, now, &z) {
        Gate::Run { cards, .. } => assert_eq!(cards, ["other"]),
        other => panic!("{other:?}"),
    }
    let alone = tray(json!({"conversations": [card("m1")]}));
    let held = |l: &Ledger, at| match gate(&p, &alone, l, &h, at, &z) {
        Gate::Held(hold) => (hold.reason, hold.until, hold.cards),
        other => panic!("{other:?}"),
    };
    let loop_card = vec!["loop".to_string()];
    assert_eq!(
        held(&l, now),
        (HoldReason::LoopGuard, Some(55 * 60_000), loop_card.clone())
    );
    // The oldest counted run leaving the window (at 30 min) frees nothing now.
    observe(&p, &alone, &mut l, 31 * 60_000);
    assert_eq!(held(&l, 31 * 60_000).1, Some(55 * 60_000));
    // The other side writes again at 40 min: the end moves to 70 min.
    let again = tray(json!({"conversations": [card("m2")]}));
    observe(&p, &again, &mut l, 40 * 60_000);
    let held_again = |l: &Ledger, at| match gate(&p, &again, l, &h, at, &z) {
        Gate::Held(hold) => hold.until,
        other => panic!("{other:?}"),
    };
    assert_eq!(held_again(&l, 40 * 60_000), Some(70 * 60_000));
    // Quiet for the window: the loop is over; m2 still starts no run, and no time ends that.
    observe(&p, &again, &mut l, 70 * 60_000);
    assert_eq!(held_again(&l, 70 * 60_000), None);
    assert_eq!(held_again(&l, 10 * 70 * 60_000), None);
    // A newer message is a new conversation for the guard.
    let later = tray(json!({"conversations": [card("m3")]}));
    observe(&p, &later, &mut l, 80 * 60_000);
    assert!(matches!(
        gate(&p, &later, &l, &h, 80 * 60_000, &z),
        Gate::Run { .. }
    ));
}

/// Issue 38 item 2: the user lets a loop go (a reload): only runs from then on count.
#[test]
fn a_released_loop_counts_only_the_runs_after_the_release() {
    let p = policy("loop_guard = { runs = 2, within = \"30m\" }");
    let z = FixedOffset(0);
    let t = tray(json!({"conversations": [direct("loop", "@bot")]}));
    let mut l = Ledger::new();
    l.started(0, vec!["loop".into()], &z);
    l.started(60_000, vec!["loop".into()], &z);
    observe(&p, &t, &mut l, 2 * 60_000);
    assert!(l.loops_mut().release_all(3 * 60_000));
    observe(&p, &t, &mut l, 3 * 60_000);
    let h = Heard::default();
    assert!(matches!(
        gate(&p, &t, &l, &h, 3 * 60_000, &z),
        Gate::Run { .. }
    ));
    l.started(4 * 60_000, vec!["loop".into()], &z);
    l.started(5 * 60_000, vec!["loop".into()], &z);
    observe(&p, &t, &mut l, 6 * 60_000);
    assert!(matches!(
        gate(&p, &t, &l, &h, 6 * 60_000, &z),
        Gate::Held(_)
    ));
}

fn heard_msg(id: &str, conv: &str, sender: &str, mentions_me: bool, group: bool) -> HeardMessage {
    HeardMessage {
        id: id.into(),
        conversation: conv.into(),
        sender: sender.into(),
        mentions_me: Some(mentions_me),
        at_ms: None,
        group: Some(group),
    }
}

/// Issue 38 item 3: a group card is judged by every unread message's sender the socket heard,
/// each with its own mention: an allowed member's mention before a denied member's message still
/// wakes a run; a denied member's mention before anyone's plain message does not.
#[test]
fn a_group_card_is_judged_by_every_sender_the_socket_heard_not_only_the_newest() {
    let p = policy("groups = \"mentions\"\ndeny = [\"@x\"]");
    let l = Ledger::new();
    let group = |newest: &str, sender: &str| {
        tray(
            json!({"conversations": [{"conversation_id": "g", "type": "group",
            "relationship": "group", "mentioned_you": true, "unread": 2,
            "preview": {"message_id": newest, "sender": sender}, "last_sender": sender}]}),
        )
    };
    let mut h = Heard::default();
    h.hear(heard_msg("m1", "g", "ally", true, true), None);
    h.hear(heard_msg("m2", "g", "x", false, true), None);
    let t = group("m2", "@x");
    assert_eq!(p.card(&t.conversations[0], &l, &h), Verdict::Wakes);
    let mut h = Heard::default();
    h.hear(heard_msg("m1", "g", "x", true, true), None);
    h.hear(heard_msg("m2", "g", "anyone", false, true), None);
    let t = group("m2", "@anyone");
    assert_eq!(
        p.card(&t.conversations[0], &l, &h),
        Verdict::Held {
            reason: HoldReason::NotAllowed,
            key: "groups",
            until: None
        }
    );
    // Nothing heard (the messages came while no socket was up): the card alone, as before.
    assert_eq!(
        p.card(&t.conversations[0], &l, &Heard::default()),
        Verdict::Wakes
    );
}

/// Issue 38 item 4: under `first_contact = "wait"` an invite from a handle no tray showed as a
/// contact waits like a stranger's message; a contact's, or one `allow` lists, wakes a run.
#[test]
fn an_invite_from_a_stranger_waits_under_first_contact() {
    let p = policy("first_contact = \"wait\"");
    let z = FixedOffset(0);
    let h = Heard::default();
    let mut l = Ledger::new();
    let t = tray(json!({"conversations": [
        {"conversation_id": "dm", "type": "direct", "relationship": "first_contact",
         "counterparty": {"handle": "@stranger"}, "preview": {"sender": "@stranger"}}],
        "invites": [{"invite_id": "i1", "invited_by": "@stranger"}]}));
    observe(&p, &t, &mut l, 0);
    match gate(&p, &t, &l, &h, 0, &z) {
        Gate::Held(hold) => {
            assert_eq!(
                (hold.reason, hold.key),
                (HoldReason::NotAllowed, "first_contact")
            );
            assert_eq!(
                (hold.cards, hold.invites),
                (vec!["dm".to_string()], vec!["i1".to_string()])
            );
        }
        other => panic!("{other:?}"),
    }
    let from_contact = tray(json!({"conversations": [direct("c", "@friend")],
        "invites": [{"invite_id": "i2", "invited_by": "@friend"}]}));
    observe(&p, &from_contact, &mut l, 0);
    let only_invite = tray(json!({"conversations": [],
        "invites": [{"invite_id": "i2", "invited_by": "@Friend"}]}));
    assert!(matches!(
        gate(&p, &only_invite, &l, &h, 0, &z),
        Gate::Run { .. }
    ));
    let allowed = policy("first_contact = \"wait\"\nallow = [\"@stranger\"]");
    assert_eq!(
        allowed.invite(&t.invites.as_ref().unwrap()[0], &l),
        Verdict::Wakes
    );
}

/// Issue 38 item 5: a contact's message whose card a flood of strangers pushed past the tray's
/// cut is judged by what the socket heard, and wakes a run; a stranger's past the cut waits and
/// the hold names it as unseen.
#[test]
fn a_contact_past_the_cut_wakes_a_run_and_a_stranger_past_it_is_named_unseen() {
    let p = policy("first_contact = \"wait\"");
    let z = FixedOffset(0);
    let mut l = Ledger::new();
    observe(
        &p,
        &tray(json!({"conversations": [direct("c_friend", "@friend")]})),
        &mut l,
        0,
    );
    let strangers: Vec<serde_json::Value> = (0..50)
        .map(|i| {
            json!({"conversation_id": format!("s{i}"), "type": "direct",
            "relationship": "first_contact", "counterparty": {"handle": format!("@s{i}")},
            "preview": {"sender": format!("@s{i}")}})
        })
        .collect();
    let flood = tray(json!({"conversations": strangers, "truncated": true}));
    let mut h = Heard::default();
    h.hear(heard_msg("mf", "c_friend", "friend", false, false), None);
    observe(&p, &flood, &mut l, 1_000);
    match gate(&p, &flood, &l, &h, 1_000, &z) {
        Gate::Run {
            cards, beyond_cut, ..
        } => {
            assert_eq!(cards, ["c_friend"]);
            assert!(beyond_cut);
        }
        other => panic!("{other:?}"),
    }
    // Its run had its chance: spent, it does not wake again.
    h.spend(&["c_friend".into()]);
    h.hear(heard_msg("mx", "c_late", "nobody", false, false), None);
    match gate(&p, &flood, &l, &h, 2_000, &z) {
        Gate::Held(hold) => {
            assert_eq!(hold.key, "first_contact");
            assert_eq!(hold.unseen, ["c_late"]);
            assert!(hold.truncated);
            assert_eq!(hold.cards.len(), 50);
        }
        other => panic!("{other:?}"),
    }
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
    let heard = Heard::default();
    match gate(&p, &t, &l, &heard, now, &z) {
        Gate::Held(h) => {
            assert_eq!((h.reason, h.key), (HoldReason::QuietHours, "quiet_hours"));
            assert_eq!(h.until, Some(D + 5 * H)); // 07:00 local next day
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        gate(&p, &t, &l, &heard, D + 5 * H, &z),
        Gate::Run { .. }
    ));
    // Quiet hours that end inside a day whose cap is reached hold until the day rolls over.
    let p = policy("quiet_hours = [\"22:00-23:00\"]\nmax_runs_per_day = 1");
    l.started(19 * H, vec![], &z); // 21:00 local
    match gate(&p, &t, &l, &heard, 20 * H + 30 * 60_000, &z) {
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
    let h = Heard::default();
    assert!(matches!(
        gate(&Policy::default(), &t, &l, &h, 0, &z),
        Gate::Run {
            beyond_cut: true,
            ..
        }
    ));
    assert_eq!(
        gate(&policy("groups = \"mentions\""), &t, &l, &h, 0, &z),
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
    match gate(&p, &t, &Ledger::new(), &Heard::default(), 0, &z) {
        Gate::Held(h) => assert_eq!(
            (h.reason, h.key, h.invites.clone()),
            (HoldReason::NotAllowed, "deny", vec!["i1".to_string()])
        ),
        other => panic!("{other:?}"),
    }
}

//! One tray body (contract 3.1) through the parser, the cycle decision and the invite rule: never
//! a panic; a tray that parses serialises and parses back with the same ids, flags and `muted`,
//! and nothing skipped the second time (skipped entries are not serialised).
#![no_main]

use agentchat::core::cycle::decide;
use agentchat::core::invite_rule::{InviteMemory, RunObservation, SINGLE_RUN_PACE_MS};
use agentchat::core::tray::Tray;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(tray) = Tray::parse(data) else {
        return;
    };
    let _ = decide(&tray, "me");
    for list in [&tray.skipped_cards, &tray.skipped_invites] {
        assert!(list.windows(2).all(|w| w[0].index < w[1].index));
    }
    if !tray.skipped_invites.is_empty() {
        assert!(!tray.invites_complete());
    }
    // What the listener reads survives a round trip. (Unknown fields are kept too, but a float
    // among them may come back a last digit off: serde_json's default float parsing is not
    // correctly rounded, and the listener reads no float.)
    let bytes = serde_json::to_vec(&tray).expect("a parsed tray serialises");
    let again = Tray::parse(&bytes).expect("a serialised tray parses");
    let read = |t: &Tray| -> Vec<(String, Option<bool>)> {
        t.conversations
            .iter()
            .map(|c| (c.conversation_id.clone(), c.muted))
            .collect()
    };
    assert_eq!(read(&again), read(&tray));
    assert_eq!(again.invite_ids(), tray.invite_ids());
    assert_eq!(again.invites.is_some(), tray.invites.is_some());
    assert_eq!(
        (
            again.version,
            &again.you,
            again.truncated,
            again.invites_truncated
        ),
        (
            tray.version,
            &tray.you,
            tray.truncated,
            tray.invites_truncated
        )
    );
    assert!(again.skipped_cards.is_empty() && again.skipped_invites.is_empty());

    let ids = tray.invite_ids();
    let mut memory = InviteMemory::default();
    for at in [0, SINGLE_RUN_PACE_MS] {
        let verdicts = memory.apply_run(
            &RunObservation {
                before: &ids,
                after: &ids,
                after_complete: tray.invites_complete(),
                run_completed: true,
                run_ended_at_ms: at,
            },
            SINGLE_RUN_PACE_MS,
        );
        assert!(verdicts.len() >= ids.iter().collect::<std::collections::BTreeSet<_>>().len());
    }
});

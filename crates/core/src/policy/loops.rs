//! The loop guard's marks (issue 38 item 2): a conversation the guard saw loop is held until the
//! user lets it go (a reload) or the other side has been quiet for the guard's window; then the
//! loop is over, and its last message wakes no run by itself: only a newer message does. So a
//! loop between two agents stops instead of slowing down (before, the hold ended when the oldest
//! counted run left the window, the held card ran, and the loop went on: `runs` runs per window
//! for ever). Kept in the ledger, so a restart does not start the loop again.
//!
//! A conversation's newest message is told by its card's fingerprint (`Card::fingerprint`: its
//! `last_message_id`, else `newest_unread_at`), never by a body.

use super::{LoopGuard, Verdict};
use crate::tray::Tray;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most conversations marked at once; past it, released marks go first, then the oldest
/// ended ones (a held one is never dropped for room).
pub const MAX_MARKS: usize = 256;

/// One conversation the guard saw loop.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Mark {
    /// Held since `since_ms`; the other side's newest message is `through`, first seen at
    /// `moved_ms`. Ends `within` after `moved_ms`.
    Held {
        since_ms: i64,
        moved_ms: i64,
        through: String,
    },
    /// The other side was quiet for the window (at `at_ms`): its message `through` wakes no run;
    /// a newer one ends the mark.
    Ended { at_ms: i64, through: String },
    /// The user let it go at `at_ms`: only runs after it count towards the guard.
    Released { at_ms: i64 },
}

/// The marks, by conversation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Loops(BTreeMap<String, Mark>);

/// A conversation held by the guard, for the status and the hold's end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Looping {
    pub conversation: String,
    /// When the hold ends unless the other side writes again (`None`: the loop is over and its
    /// last message waits for a newer one or a reload).
    pub until: Option<i64>,
}

impl Loops {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, conversation: &str) -> Option<&Mark> {
        self.0.get(conversation)
    }

    /// When the user last let `conversation` go (runs before it do not count).
    pub fn released_at(&self, conversation: &str) -> Option<i64> {
        match self.0.get(conversation) {
            Some(Mark::Released { at_ms }) => Some(*at_ms),
            _ => None,
        }
    }

    /// What the guard says of a card of `conversation` whose newest message is `newest`:
    /// `Some(held)` while a mark holds it.
    pub fn verdict(&self, conversation: &str, newest: &str, guard: LoopGuard) -> Option<Verdict> {
        let until = match self.0.get(conversation)? {
            Mark::Held { moved_ms, .. } => Some(moved_ms.saturating_add(guard.within_ms)),
            Mark::Ended { through, .. } if through == newest => None,
            Mark::Ended { .. } | Mark::Released { .. } => return None,
        };
        Some(Verdict::Held {
            reason: super::HoldReason::LoopGuard,
            key: "loop_guard",
            until,
        })
    }

    /// Takes in a tray at `now_ms`: a card whose conversation `count` says the guard's runs saw
    /// often enough is marked held; a held one's other side that wrote again moves its end; a
    /// hold whose other side was quiet for the window is over; an ended one whose card shows a
    /// newer message, or that a complete tray no longer shows, is forgotten. Without a guard
    /// every mark goes. True when a mark changed (the ledger is saved).
    pub fn step(
        &mut self,
        tray: &Tray,
        guard: Option<LoopGuard>,
        count: &dyn Fn(&str) -> usize,
        now_ms: i64,
    ) -> bool {
        let Some(g) = guard else {
            let had = !self.0.is_empty();
            self.0.clear();
            return had;
        };
        let before = self.0.clone();
        let runs = usize::try_from(g.runs).unwrap_or(usize::MAX);
        let cards = tray
            .conversations
            .iter()
            .filter(|c| !c.is_muted() && !c.is_notices_only());
        for card in cards {
            let conv = &card.conversation_id;
            let newest = card.fingerprint().1;
            match self.0.get_mut(conv) {
                Some(Mark::Held {
                    moved_ms, through, ..
                }) if *through != newest => {
                    *through = newest.clone();
                    *moved_ms = now_ms;
                }
                Some(Mark::Ended { through, .. }) if *through != newest => {
                    self.0.remove(conv);
                }
                _ => {}
            }
            let free = matches!(self.0.get(conv), None | Some(Mark::Released { .. }));
            if free && count(conv) >= runs {
                self.0.insert(
                    conv.clone(),
                    Mark::Held {
                        since_ms: now_ms,
                        moved_ms: now_ms,
                        through: newest,
                    },
                );
            }
        }
        let shown = |c: &str| tray.conversations.iter().any(|k| k.conversation_id == c);
        let complete = !tray.is_truncated();
        self.0.retain(|conv, mark| match mark {
            Mark::Held {
                moved_ms, through, ..
            } => {
                if now_ms.saturating_sub(*moved_ms) >= g.within_ms {
                    *mark = Mark::Ended {
                        at_ms: now_ms,
                        through: std::mem::take(through),
                    };
                }
                true
            }
            Mark::Ended { .. } => !complete || shown(conv),
            Mark::Released { at_ms } => now_ms.saturating_sub(*at_ms) < g.within_ms,
        });
        self.bound();
        self.0 != before
    }

    /// The user lets every loop go (a reload): held and ended marks become released, so only
    /// runs from now count. True when one was held or ended (the tray is read at once).
    pub fn release_all(&mut self, now_ms: i64) -> bool {
        let mut any = false;
        for mark in self.0.values_mut() {
            if !matches!(mark, Mark::Released { .. }) {
                any = true;
                *mark = Mark::Released { at_ms: now_ms };
            }
        }
        any
    }

    /// The conversations held now, with their ends.
    pub fn looping(&self, guard: Option<LoopGuard>) -> Vec<Looping> {
        let within = guard.map_or(0, |g| g.within_ms);
        self.0
            .iter()
            .filter_map(|(c, m)| {
                let until = match m {
                    Mark::Held { moved_ms, .. } => Some(moved_ms.saturating_add(within)),
                    Mark::Ended { .. } => None,
                    Mark::Released { .. } => return None,
                };
                Some(Looping {
                    conversation: c.clone(),
                    until,
                })
            })
            .collect()
    }

    /// At most [`MAX_MARKS`]: released marks go first, then the ended ones ended longest ago.
    fn bound(&mut self) {
        while self.0.len() > MAX_MARKS {
            let victim = self
                .0
                .iter()
                .filter_map(|(c, m)| match m {
                    Mark::Released { at_ms } => Some((0, *at_ms, c.clone())),
                    Mark::Ended { at_ms, .. } => Some((1, *at_ms, c.clone())),
                    Mark::Held { .. } => None,
                })
                .min();
            match victim {
                Some((_, _, c)) => {
                    self.0.remove(&c);
                }
                None => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MIN: i64 = 60_000;

    fn tray(cards: &[(&str, &str)], truncated: bool) -> Tray {
        let cards: Vec<serde_json::Value> = cards
            .iter()
            .map(|(c, newest)| {
                json!({"conversation_id": c, "last_message_id": newest, "muted": false,
                       "preview": {"message_id": newest, "sender": "@bot"}})
            })
            .collect();
        Tray::parse(
            json!({"conversations": cards, "truncated": truncated})
                .to_string()
                .as_bytes(),
        )
        .unwrap()
    }

    fn guard() -> Option<LoopGuard> {
        Some(LoopGuard {
            runs: 3,
            within_ms: 30 * MIN,
        })
    }

    #[test]
    fn a_loop_is_held_while_the_other_side_writes_then_over_and_its_last_message_wakes_nothing() {
        let mut l = Loops::default();
        let many = |_: &str| 3;
        assert!(l.step(&tray(&[("c", "m1")], false), guard(), &many, 0));
        let g = guard().unwrap();
        assert!(l.verdict("c", "m1", g).is_some());
        // The other side writes again 10 minutes on: the end moves.
        l.step(&tray(&[("c", "m2")], false), guard(), &many, 10 * MIN);
        assert_eq!(
            l.looping(guard()),
            [Looping {
                conversation: "c".into(),
                until: Some(40 * MIN)
            }]
        );
        // Quiet for the window: over, and m2 still wakes nothing; m3 does.
        l.step(&tray(&[("c", "m2")], false), guard(), &many, 40 * MIN);
        assert_eq!(l.looping(guard())[0].until, None);
        assert!(l.verdict("c", "m2", g).is_some());
        assert!(l.verdict("c", "m3", g).is_none());
        let few = |_: &str| 0;
        l.step(&tray(&[("c", "m3")], false), guard(), &few, 41 * MIN);
        assert!(l.is_empty(), "a newer message ends the mark");
    }

    #[test]
    fn a_release_counts_only_later_runs_and_a_complete_tray_forgets_an_ended_loop() {
        let mut l = Loops::default();
        let many = |_: &str| 3;
        l.step(&tray(&[("c", "m1")], false), guard(), &many, 0);
        assert!(l.release_all(MIN));
        assert_eq!(l.released_at("c"), Some(MIN));
        assert!(!l.release_all(2 * MIN), "nothing held any more");
        // Ended, then the card leaves a complete tray: forgotten. Past a cut it stays.
        let mut l = Loops::default();
        l.step(&tray(&[("c", "m1")], false), guard(), &many, 0);
        l.step(&tray(&[("c", "m1")], false), guard(), &many, 30 * MIN);
        l.step(&tray(&[], true), guard(), &many, 31 * MIN);
        assert!(!l.is_empty());
        l.step(&tray(&[], false), guard(), &many, 32 * MIN);
        assert!(l.is_empty());
        // No guard: no mark.
        l.step(&tray(&[("c", "m1")], false), guard(), &many, 33 * MIN);
        assert!(l.step(&tray(&[], false), None, &many, 34 * MIN));
        assert!(l.is_empty());
    }
}

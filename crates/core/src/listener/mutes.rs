//! What earlier trays said of mutes, per conversation: a `message.new` names its conversation
//! but not whether it is muted, and a tray cut short (`truncated`) may not show the card. The
//! cycle decides a wake for such a conversation from the last tray that did show it (issue 37
//! item 3). Bounded: the oldest conversation seen is forgotten first.

use crate::tray::Tray;
use std::collections::{BTreeMap, VecDeque};

/// Conversations remembered at most.
pub const MAX_REMEMBERED: usize = 4096;

#[derive(Debug, Default)]
pub struct Mutes {
    muted: BTreeMap<String, bool>,
    /// Insertion order, oldest first, for the bound.
    order: VecDeque<String>,
}

impl Mutes {
    /// Takes in what `tray` shows.
    pub fn see(&mut self, tray: &Tray) {
        for c in &tray.conversations {
            let id = &c.conversation_id;
            if self.muted.insert(id.clone(), c.is_muted()).is_none() {
                self.order.push_back(id.clone());
                if self.order.len() > MAX_REMEMBERED
                    && let Some(old) = self.order.pop_front()
                {
                    self.muted.remove(&old);
                }
            }
        }
    }

    /// Muted or not as the last tray that showed it said; `None` when none did.
    pub fn get(&self, conversation: &str) -> Option<bool> {
        self.muted.get(conversation).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_tray_that_showed_a_conversation_says_whether_it_is_muted_and_the_memory_is_bounded()
    {
        let tray = |cards: &[(&str, bool)]| {
            let cards: Vec<serde_json::Value> = cards
                .iter()
                .map(|(id, m)| serde_json::json!({"conversation_id": id, "muted": m}))
                .collect();
            Tray::parse(
                serde_json::json!({"conversations": cards})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap()
        };
        let mut m = Mutes::default();
        m.see(&tray(&[("a", true), ("b", false)]));
        assert_eq!(
            (m.get("a"), m.get("b"), m.get("c")),
            (Some(true), Some(false), None)
        );
        m.see(&tray(&[("a", false)]));
        assert_eq!(m.get("a"), Some(false), "unmuted since");
        for i in 0..MAX_REMEMBERED {
            m.see(&tray(&[(&format!("x{i}"), false)]));
        }
        assert_eq!(m.get("a"), None, "the oldest went first");
        assert!(m.muted.len() <= MAX_REMEMBERED);
    }
}

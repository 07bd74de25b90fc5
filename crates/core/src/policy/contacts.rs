//! The handles the trays showed as this agent's contacts (issue 38 items 4 and 5): the
//! counterparty of a direct card whose `relationship` is `established` or `your_outreach`. An
//! invite names only its inviter, and a card past the tray's cut shows no relationship: for
//! `first_contact = "wait"` these say who is no stranger. Kept in the ledger; bounded, the
//! handle seen longest ago forgotten first.

use crate::tray::Tray;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::VecDeque;

/// The most handles kept.
pub const MAX_CONTACTS: usize = 1024;

/// Normalised handles (`core::handle`), the one seen most recently last.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Contacts(VecDeque<String>);

impl Contacts {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `handle` (any spelling) is a contact.
    pub fn knows(&self, handle: &str) -> bool {
        let h = crate::handle::normalize(handle);
        self.0.iter().any(|c| *c == h)
    }

    /// Takes in the contacts `tray` shows. True when one is new.
    pub fn see(&mut self, tray: &Tray) -> bool {
        let mut added = false;
        for card in &tray.conversations {
            let field = |k: &str| card.extra.get(k).and_then(Value::as_str);
            let known = matches!(field("relationship"), Some("established" | "your_outreach"));
            if !known || field("type") == Some("group") {
                continue;
            }
            let Some(who) = super::judge::handle_of(card.extra.get("counterparty")) else {
                continue;
            };
            let h = crate::handle::normalize(who);
            match self.0.iter().position(|c| *c == h) {
                Some(i) if i + 1 == self.0.len() => {}
                Some(i) => {
                    self.0.remove(i);
                    self.0.push_back(h);
                }
                None => {
                    self.0.push_back(h);
                    added = true;
                }
            }
            while self.0.len() > MAX_CONTACTS {
                self.0.pop_front();
            }
        }
        added
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn established_and_outreach_counterparties_are_contacts_strangers_and_groups_are_not() {
        let tray = Tray::parse(
            serde_json::json!({"conversations": [
                {"conversation_id": "a", "type": "direct", "relationship": "established",
                 "counterparty": {"handle": "@Alice"}},
                {"conversation_id": "b", "type": "direct", "relationship": "your_outreach",
                 "counterparty": "@bob"},
                {"conversation_id": "s", "type": "direct", "relationship": "first_contact",
                 "counterparty": {"handle": "@stranger"}},
                {"conversation_id": "g", "type": "group", "relationship": "group",
                 "last_sender": "@member"},
            ]})
            .to_string()
            .as_bytes(),
        )
        .unwrap();
        let mut c = Contacts::default();
        assert!(c.see(&tray));
        assert!(!c.see(&tray), "nothing new the second time");
        assert!(c.knows("alice") && c.knows("@bob"));
        assert!(!c.knows("@stranger") && !c.knows("@member"));
        let one = |i: usize| {
            Tray::parse(
                serde_json::json!({"conversations": [{"conversation_id": "x",
                    "type": "direct", "relationship": "established",
                    "counterparty": {"handle": format!("@h{i}")}}]})
                .to_string()
                .as_bytes(),
            )
            .unwrap()
        };
        for i in 0..MAX_CONTACTS {
            c.see(&one(i));
        }
        assert!(!c.knows("alice"), "the oldest went first");
        assert_eq!(c.0.len(), MAX_CONTACTS);
    }
}

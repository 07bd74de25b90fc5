//! The tray (`GET /v1/inbox`, contract 3.1), v1 and the pre-v1 shape. Unknown fields are kept so a
//! round trip preserves them.
//!
//! A modelled field the server sent as an explicit `null` is read as `None` and its `null` is kept
//! in `extra`, so parse-then-serialize gives back the same JSON value (except that a missing
//! `conversations`, a very old server, comes back as `[]`). A float among the unknown fields may
//! come back a last digit off (serde_json's default float parsing is not correctly rounded); the
//! listener reads no float.
//!
//! One malformed entry never makes the whole tray unreadable: a card without a string
//! `conversation_id` or with a `muted` that is not a boolean, an invite without a string
//! `invite_id`, or an entry that is not an object is skipped, and the tray records its index and
//! what was wrong (never its text) in `skipped_cards` / `skipped_invites` for the caller to log.
//! A skipped invite makes the invite list incomplete. Skipped entries are not serialised. A tray
//! whose own fields have the wrong type (`conversations` not a list, `truncated` not a boolean,
//! ...) is still an error: that is not a v1 tray at all.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The cause is part of the message and not a `source`, so a chain printed with `{:#}` says it
/// once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum TrayError {
    #[error("tray is not valid JSON: {0}")]
    Json(serde_json::Error),
}

impl From<serde_json::Error> for TrayError {
    fn from(e: serde_json::Error) -> TrayError {
        TrayError::Json(e)
    }
}

/// A tray as served. Every field but `conversations` may be missing (pre-v1 servers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Tray {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub you: Option<String>,
    #[serde(default)]
    pub conversations: Vec<Card>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncated: Option<bool>,
    /// `None` means the server did not say ("unknown, not empty"), not "no invites".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invites: Option<Vec<Invite>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub invites_truncated: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
    /// Malformed entries of `conversations`, skipped (not in `conversations`).
    #[serde(skip)]
    pub skipped_cards: Vec<Skipped>,
    /// Malformed entries of `invites`, skipped (not in `invites`); any makes the list incomplete.
    #[serde(skip)]
    pub skipped_invites: Vec<Skipped>,
}

/// A tray entry skipped because it was malformed: where it was and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Its 0-based index in the list as served.
    pub index: usize,
    /// What was wrong, naming the field. Never a value from the tray, so it is safe to log.
    pub reason: String,
}

/// One briefing card. Only `conversation_id` is required; the listener reads `muted` and never
/// the preview text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Card {
    pub conversation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub muted: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A pending group invite on the tray.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>")]
pub struct Invite {
    pub invite_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Takes `key` out of `map`: `Ok(None)` when absent or `null` (a `null` is put back, to stay in
/// `extra`), else the value read as `T`.
fn take<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &str,
) -> Result<Option<T>, serde_json::Error> {
    match map.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(_) => match map.remove(key) {
            Some(v) => serde_json::from_value(v)
                .map(Some)
                .map_err(|e| field_error(key, e)),
            None => Ok(None),
        },
    }
}

/// Names the field. serde's "invalid type/value" messages quote the offending value, which could
/// be text from the tray: only the "expected ..." part is kept, so errors are safe to log.
fn field_error(key: &str, e: serde_json::Error) -> serde_json::Error {
    let detail = redacted(&e);
    serde::de::Error::custom(format_args!("field `{key}`: {detail}"))
}

/// serde's message without the value it quotes: "invalid type: string \"…\", expected a map"
/// becomes "wrong type or value, expected a map"; other messages carry no value and stay.
fn redacted(e: &serde_json::Error) -> String {
    let msg = e.to_string();
    if msg.starts_with("invalid type") || msg.starts_with("invalid value") {
        match msg.find("expected ") {
            Some(i) => format!("wrong type or value, {}", &msg[i..]),
            None => "wrong type or value".to_owned(),
        }
    } else {
        msg
    }
}

/// A served list read entry by entry: the well-formed entries, and the malformed ones skipped.
fn entries<T>(items: Vec<Value>) -> (Vec<T>, Vec<Skipped>)
where
    T: TryFrom<Map<String, Value>, Error = serde_json::Error>,
{
    let mut kept = Vec::with_capacity(items.len());
    let mut skipped = Vec::new();
    for (index, item) in items.into_iter().enumerate() {
        let parsed = match item {
            Value::Object(map) => T::try_from(map).map_err(|e| e.to_string()),
            other => Err(format!("not an object but {}", json_type(&other))),
        };
        match parsed {
            Ok(entry) => kept.push(entry),
            Err(reason) => skipped.push(Skipped { index, reason }),
        }
    }
    (kept, skipped)
}

/// A served list: `Ok(None)` when absent, else its entries; anything but a list is an error.
fn list(map: &mut Map<String, Value>, key: &str) -> Result<Option<Vec<Value>>, serde_json::Error> {
    match map.remove(key) {
        None => Ok(None),
        Some(Value::Array(items)) => Ok(Some(items)),
        Some(other) => Err(serde::de::Error::custom(format_args!(
            "field `{key}`: wrong type, expected a list, found {}",
            json_type(&other)
        ))),
    }
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

fn required<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &'static str,
) -> Result<T, serde_json::Error> {
    take(map, key)?.ok_or_else(|| serde::de::Error::missing_field(key))
}

impl TryFrom<Map<String, Value>> for Tray {
    type Error = serde_json::Error;
    fn try_from(mut map: Map<String, Value>) -> Result<Tray, Self::Error> {
        let version = take(&mut map, "version")?;
        let you = take(&mut map, "you")?;
        // Missing means none (a very old server); `null` is not a list and is refused.
        let (conversations, skipped_cards) =
            entries(list(&mut map, "conversations")?.unwrap_or_default());
        let truncated = take(&mut map, "truncated")?;
        // Missing or `null` means unknown (the `null` stays in `extra`), not empty.
        let (invites, skipped_invites) = match map.get("invites") {
            None | Some(Value::Null) => (None, Vec::new()),
            Some(_) => {
                let (kept, skipped) = entries(list(&mut map, "invites")?.unwrap_or_default());
                (Some(kept), skipped)
            }
        };
        Ok(Tray {
            version,
            you,
            conversations,
            truncated,
            invites,
            invites_truncated: take(&mut map, "invites_truncated")?,
            extra: map,
            skipped_cards,
            skipped_invites,
        })
    }
}

impl TryFrom<Map<String, Value>> for Card {
    type Error = serde_json::Error;
    fn try_from(mut map: Map<String, Value>) -> Result<Card, Self::Error> {
        Ok(Card {
            conversation_id: required(&mut map, "conversation_id")?,
            muted: take(&mut map, "muted")?,
            extra: map,
        })
    }
}

impl TryFrom<Map<String, Value>> for Invite {
    type Error = serde_json::Error;
    fn try_from(mut map: Map<String, Value>) -> Result<Invite, Self::Error> {
        Ok(Invite {
            invite_id: required(&mut map, "invite_id")?,
            extra: map,
        })
    }
}

/// The tray version this listener reads (contract 3.1); a pre-v1 server sends none.
pub const KNOWN_VERSION: u64 = 1;

impl Tray {
    /// A `version` other than 1 (issue 29 item 13). Contract rule 2: within v1 changes are
    /// additive and a breaking change ships as v2 next to v1, so `GET /v1/inbox` should never
    /// serve one; if it does, the listener reads the fields it knows as v1 (and says so once),
    /// rather than stop waking the agent.
    pub fn unknown_version(&self) -> Option<u64> {
        self.version.filter(|v| *v != KNOWN_VERSION)
    }

    /// Parses a tray body. The error never quotes a value from the body (it is logged), including
    /// a body that is not an object at all.
    pub fn parse(bytes: &[u8]) -> Result<Tray, TrayError> {
        serde_json::from_slice(bytes)
            .map_err(|e| TrayError::Json(serde::de::Error::custom(redacted(&e))))
    }
    pub fn is_truncated(&self) -> bool {
        self.truncated.unwrap_or(false)
    }
    /// The invite list shows every pending invite: it was served, not cut (`invites_truncated`),
    /// and no entry of it was skipped as malformed. Only then does an invite missing from it mean
    /// the invite was answered.
    pub fn invites_complete(&self) -> bool {
        self.invites.is_some()
            && !self.invites_truncated.unwrap_or(false)
            && self.skipped_invites.is_empty()
    }
    pub fn invite_ids(&self) -> Vec<String> {
        self.invites
            .iter()
            .flatten()
            .map(|i| i.invite_id.clone())
            .collect()
    }
}

impl Card {
    pub fn is_muted(&self) -> bool {
        self.muted.unwrap_or(false)
    }

    /// The card's only unread messages are system notices (contract 3.1): `preview` is `null`,
    /// `you_owe_reply` is `false` and `mentioned_you` is not `true`, each as served. A card that
    /// leaves any of them out (a pre-v1 server) or came back from a defer `reminder` is not read
    /// as notices only: without the fields the listener cannot tell, and it runs rather than
    /// leave a message unseen.
    pub fn is_notices_only(&self) -> bool {
        let field = |k: &str| self.extra.get(k);
        field("preview") == Some(&Value::Null)
            && field("you_owe_reply") == Some(&Value::Bool(false))
            && field("mentioned_you") != Some(&Value::Bool(true))
            && field("reminder").is_none_or(Value::is_null)
    }

    /// What tells this card's state apart on two reads of the tray: its conversation and its
    /// newest unread message (`last_message_id`, else `newest_unread_at`) and `unread`. A run that
    /// answered the card takes it off the tray; one that left it leaves this the same.
    pub fn fingerprint(&self) -> (String, String, String) {
        let text = |k: &str| match self.extra.get(k) {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => String::new(),
        };
        let newest = match text("last_message_id") {
            id if id.is_empty() => text("newest_unread_at"),
            id => id,
        };
        (self.conversation_id.clone(), newest, text("unread"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_keeps_unknown_fields_and_nulls() {
        let v = json!({
            "version": 1, "you": "@me", "question": "q", "waited_ms": null, "truncated": null,
            "conversations": [{"conversation_id": "c", "muted": null, "preview": null, "x": {"y": 1}}],
            "invites": [{"invite_id": "i", "group": {"id": "g"}, "at": null}],
            "invites_truncated": false, "future": [1, 2]
        });
        let tray = Tray::parse(v.to_string().as_bytes()).unwrap();
        assert_eq!(tray.truncated, None);
        assert_eq!(tray.conversations[0].muted, None);
        assert_eq!(tray.invite_ids(), vec!["i".to_string()]);
        assert_eq!(serde_json::to_value(&tray).unwrap(), v);
    }

    /// Issue 29 item 13: the tray's `version` was parsed and never looked at.
    #[test]
    fn a_version_other_than_1_is_unknown_and_a_missing_one_is_pre_v1() {
        let of = |body: &str| Tray::parse(body.as_bytes()).unwrap().unknown_version();
        assert_eq!(of(r#"{"version": 1, "conversations": []}"#), None);
        assert_eq!(of(r#"{"conversations": []}"#), None);
        assert_eq!(
            of(r#"{"version": 2, "conversations": [{"conversation_id": "c"}]}"#),
            Some(2)
        );
    }

    #[test]
    fn pre_v1_has_unknown_invites() {
        let tray = Tray::parse(br#"{"conversations": []}"#).unwrap();
        assert_eq!(tray.version, None);
        assert!(!tray.invites_complete());
        assert!(tray.invite_ids().is_empty());
    }

    #[test]
    fn a_wrongly_typed_tray_field_is_an_error_that_names_it_and_quotes_no_value() {
        for (field, body) in [
            (
                "truncated",
                json!({"conversations": [], "truncated": "secret words"}),
            ),
            ("conversations", json!({"conversations": "secret words"})),
            ("conversations", json!({"conversations": null})),
            (
                "invites",
                json!({"conversations": [], "invites": "secret words"}),
            ),
            (
                "invites_truncated",
                json!({"conversations": [], "invites": [], "invites_truncated": "secret words"}),
            ),
        ] {
            let err = Tray::parse(body.to_string().as_bytes())
                .unwrap_err()
                .to_string();
            assert!(err.contains(&format!("`{field}`")), "{err}");
            assert!(!err.contains("secret"), "{err}");
        }
    }

    #[test]
    fn a_malformed_entry_is_skipped_by_index_and_the_rest_kept() {
        let v = json!({
            "conversations": [
                {"conversation_id": "a"},
                {"muted": true, "preview": {"text": "secret words"}},
                {"conversation_id": "c", "muted": "secret words"},
                "secret words",
                {"conversation_id": 5},
                {"conversation_id": "f", "muted": true},
            ],
            "invites": [{"at": "secret words"}, {"invite_id": "i"}, {"invite_id": null}],
            "invites_truncated": false,
        });
        let tray = Tray::parse(v.to_string().as_bytes()).unwrap();
        let ids: Vec<&str> = tray
            .conversations
            .iter()
            .map(|c| c.conversation_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "f"]);
        let at = |s: &[Skipped]| s.iter().map(|s| s.index).collect::<Vec<_>>();
        assert_eq!(at(&tray.skipped_cards), [1, 2, 3, 4]);
        assert_eq!(tray.invite_ids(), ["i"]);
        assert_eq!(at(&tray.skipped_invites), [0, 2]);
        assert!(
            !tray.invites_complete(),
            "a skipped invite makes the list incomplete"
        );
        let reasons: Vec<&str> = tray
            .skipped_cards
            .iter()
            .chain(&tray.skipped_invites)
            .map(|s| s.reason.as_str())
            .collect();
        assert_eq!(
            reasons,
            [
                "missing field `conversation_id`",
                "field `muted`: wrong type or value, expected a boolean",
                "not an object but a string",
                "field `conversation_id`: wrong type or value, expected a string",
                "missing field `invite_id`",
                "missing field `invite_id`",
            ]
        );
        // A well-formed tray skips nothing and its list is complete.
        let ok = Tray::parse(br#"{"conversations": [{"conversation_id": "a"}], "invites": []}"#)
            .unwrap();
        assert!(ok.skipped_cards.is_empty() && ok.skipped_invites.is_empty());
        assert!(ok.invites_complete());
    }

    #[test]
    fn a_tray_that_is_not_an_object_is_refused_without_quoting_it() {
        for body in [
            &br#""secret words""#[..],
            b"[\"secret words\"]",
            b"12345678",
        ] {
            let err = Tray::parse(body).unwrap_err().to_string();
            assert!(err.contains("expected a map"), "{err}");
            assert!(
                !err.contains("secret") && !err.contains("12345678"),
                "{err}"
            );
        }
    }
}

//! The tray (`GET /v1/inbox`, contract 3.1), v1 and the pre-v1 shape. Unknown fields are kept so a
//! round trip preserves them.
//!
//! A modelled field the server sent as an explicit `null` is read as `None` and its `null` is kept
//! in `extra`, so parse-then-serialize gives back the same JSON value (except that a missing
//! `conversations`, a very old server, comes back as `[]`).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum TrayError {
    #[error("tray is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
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

fn required<T: DeserializeOwned>(
    map: &mut Map<String, Value>,
    key: &'static str,
) -> Result<T, serde_json::Error> {
    take(map, key)?.ok_or_else(|| serde::de::Error::missing_field(key))
}

impl TryFrom<Map<String, Value>> for Tray {
    type Error = serde_json::Error;
    fn try_from(mut map: Map<String, Value>) -> Result<Tray, Self::Error> {
        Ok(Tray {
            version: take(&mut map, "version")?,
            you: take(&mut map, "you")?,
            // Missing means none (a very old server); `null` is not a list and is refused.
            conversations: match map.remove("conversations") {
                Some(v) => {
                    serde_json::from_value(v).map_err(|e| field_error("conversations", e))?
                }
                None => Vec::new(),
            },
            truncated: take(&mut map, "truncated")?,
            invites: take(&mut map, "invites")?,
            invites_truncated: take(&mut map, "invites_truncated")?,
            extra: map,
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

impl Tray {
    /// Parses a tray body. The error never quotes a value from the body (it is logged), including
    /// a body that is not an object at all.
    pub fn parse(bytes: &[u8]) -> Result<Tray, TrayError> {
        serde_json::from_slice(bytes)
            .map_err(|e| TrayError::Json(serde::de::Error::custom(redacted(&e))))
    }
    pub fn is_truncated(&self) -> bool {
        self.truncated.unwrap_or(false)
    }
    pub fn invites_complete(&self) -> bool {
        self.invites.is_some() && !self.invites_truncated.unwrap_or(false)
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

    #[test]
    fn pre_v1_has_unknown_invites() {
        let tray = Tray::parse(br#"{"conversations": []}"#).unwrap();
        assert_eq!(tray.version, None);
        assert!(!tray.invites_complete());
        assert!(tray.invite_ids().is_empty());
    }

    #[test]
    fn card_without_id_or_wrong_type_is_an_error() {
        assert!(Tray::parse(br#"{"conversations": [{"muted": true}]}"#).is_err());
        let err =
            Tray::parse(br#"{"conversations": [], "truncated": "secret words"}"#).unwrap_err();
        assert!(err.to_string().contains("truncated"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        let err =
            Tray::parse(br#"{"conversations": [{"conversation_id": "c", "muted": "secret"}]}"#)
                .unwrap_err();
        assert!(err.to_string().contains("muted"), "{err}");
        assert!(!err.to_string().contains("secret"), "{err}");
        assert!(Tray::parse(b"[]").is_err());
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

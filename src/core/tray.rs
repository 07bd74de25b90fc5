//! The tray (`GET /v1/inbox`, contract 3.1), v1 and the pre-v1 shape. Unknown fields are kept so a
//! round trip preserves them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

#[derive(Debug, thiserror::Error)]
pub enum TrayError {
    #[error("tray is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
}

/// A tray as served. Every field but `conversations` may be missing (pre-v1 servers).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
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
pub struct Card {
    pub conversation_id: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub muted: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A pending group invite on the tray.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Invite {
    pub invite_id: String,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Tray {
    pub fn parse(bytes: &[u8]) -> Result<Tray, TrayError> {
        Ok(serde_json::from_slice(bytes)?)
    }
    pub fn is_truncated(&self) -> bool {
        self.truncated.unwrap_or(false)
    }
    pub fn invites_complete(&self) -> bool {
        self.invites.is_some() && !self.invites_truncated.unwrap_or(false)
    }
    pub fn invite_ids(&self) -> Vec<String> {
        self.invites.iter().flatten().map(|i| i.invite_id.clone()).collect()
    }
}

impl Card {
    pub fn is_muted(&self) -> bool {
        self.muted.unwrap_or(false)
    }
}

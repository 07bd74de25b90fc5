//! Texts v1 (`GET /v1/texts?runtime=`, contract 3.6). Unknown fields are ignored; every field may be
//! missing on an older server, and a missing prompt means "no run" rather than a text of our own.

use serde::{Deserialize, Serialize};

/// The cause is part of the message and not a `source`, so a chain printed with `{:#}` says it
/// once (as `config::ConfigError` does).
#[derive(Debug, thiserror::Error)]
pub enum TextsError {
    #[error("texts are not valid JSON: {0}")]
    Json(serde_json::Error),
    #[error("texts version {0:?} is not \"1\"")]
    Version(String),
}

impl From<serde_json::Error> for TextsError {
    fn from(e: serde_json::Error) -> TextsError {
        TextsError::Json(e)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manual {
    #[serde(default)]
    pub url: Option<String>,
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub sha256: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Texts {
    pub version: String,
    #[serde(default)]
    pub manual: Option<Manual>,
    #[serde(default)]
    pub wake_instruction: Option<String>,
    #[serde(default)]
    pub invite_prompt: Option<String>,
    #[serde(default)]
    pub identity_line: Option<String>,
    #[serde(default)]
    pub identity_line_template: Option<String>,
    #[serde(default)]
    pub gate_call_preamble: Option<String>,
    #[serde(default)]
    pub gate_call_answer_format: Option<String>,
    #[serde(default)]
    pub reply_turn_template: Option<String>,
}

impl Texts {
    /// Why a run could not use these texts, when it could not: without a `wake_instruction` no
    /// woken run can start, without an `invite_prompt` no run for an invite can, so such texts
    /// are refused like missing ones and the last good copy stays in use (contract 3.6: both are
    /// fields of texts v1, "keep the last good copy", "never ship your own"; docs/decisions.md).
    pub fn unusable(&self) -> Option<&'static str> {
        match (
            self.wake_instruction.as_deref().map(str::trim),
            self.invite_prompt.as_deref().map(str::trim),
        ) {
            (None, _) => Some("they have no wake_instruction"),
            (Some(""), _) => Some("their wake_instruction is empty"),
            (_, None) => Some("they have no invite_prompt"),
            (_, Some("")) => Some("their invite_prompt is empty"),
            _ => None,
        }
    }

    /// Parses texts; refuses a `version` other than "1".
    pub fn parse(bytes: &[u8]) -> Result<Texts, TextsError> {
        let texts: Texts = serde_json::from_slice(bytes)?;
        if texts.version != "1" {
            return Err(TextsError::Version(texts.version));
        }
        Ok(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_without_either_prompt_are_unusable() {
        let t = |w: Option<&str>, i: Option<&str>| {
            let mut v = serde_json::json!({"version": "1"});
            if let Some(w) = w {
                v["wake_instruction"] = w.into();
            }
            if let Some(i) = i {
                v["invite_prompt"] = i.into();
            }
            Texts::parse(v.to_string().as_bytes()).unwrap().unusable()
        };
        assert_eq!(t(Some("wake"), Some("invite")), None);
        assert_eq!(
            t(None, Some("invite")),
            Some("they have no wake_instruction")
        );
        assert_eq!(t(Some("wake"), None), Some("they have no invite_prompt"));
        assert_eq!(
            t(Some("wake"), Some(" ")),
            Some("their invite_prompt is empty")
        );
    }
}

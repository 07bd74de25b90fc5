//! Socket frames (contract 3.4): what the server sends, and the one frame the listener sends (`ack`).
//! Unknown frame types and unknown wake reasons are kept as data, never errors (contract rule 2).

#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum FrameError {
    #[error("frame is not valid JSON")]
    NotJson,
    #[error("frame has no string `type`")]
    NoType,
    #[error("`{0}` frame is missing `{1}`")]
    Missing(&'static str, &'static str),
}

/// The parts of a `message.new` envelope the listener needs. Never the body.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageMeta {
    pub id: String,
    pub conversation_id: Option<String>,
    /// Bare handle as sent (no `@`).
    pub sender: Option<String>,
    /// Message type (`text`, `system`, ...).
    pub kind: Option<String>,
    pub delivery_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ServerFrame {
    /// `capabilities` is `None` on a pre-v1 server.
    HelloOk { capabilities: Option<Vec<String>> },
    MessageNew(MessageMeta),
    /// Any reason, known or not, means "read the tray".
    Wake { reason: String, step: Option<u64> },
    GroupInviteReceived { invite_id: Option<String> },
    GroupDeleted,
    Heartbeat,
    /// `message.read`, `presence.update`, `typing.*`, `rate_limit.warning` and unknown types.
    Other { kind: String },
}

impl ServerFrame {
    pub fn parse(text: &str) -> Result<ServerFrame, FrameError> {
        let _ = text;
        todo!("core: parse a server frame")
    }
}

/// `{"type":"ack","message_id":"…"}`.
pub fn ack_frame(message_id: &str) -> String {
    serde_json::json!({"type": "ack", "message_id": message_id}).to_string()
}

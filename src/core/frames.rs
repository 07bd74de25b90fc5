//! Socket frames (contract 3.4): what the server sends, and the one frame the listener sends (`ack`).
//! Unknown frame types and unknown wake reasons are kept as data, never errors (contract rule 2).

use serde_json::Value;

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
    HelloOk {
        capabilities: Option<Vec<String>>,
    },
    MessageNew(MessageMeta),
    /// Any reason, known or not, means "read the tray". `reason` is a safe label (see
    /// `MAX_WAKE_REASON_CHARS`): unknown characters become `_`.
    Wake {
        reason: String,
        step: Option<u64>,
    },
    GroupInviteReceived {
        invite_id: Option<String>,
    },
    GroupDeleted,
    Heartbeat,
    /// `message.read`, `presence.update`, `typing.*`, `rate_limit.warning` and unknown types.
    Other {
        kind: String,
    },
}

/// What kind of frame a `ServerFrame` is, for counting frames by type (a burst's summary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameType {
    HelloOk,
    MessageNew,
    Wake,
    GroupInviteReceived,
    GroupDeleted,
    Heartbeat,
    /// `message.read`, `presence.update`, `typing.*`, `rate_limit.warning` and unknown types.
    Other,
}

impl ServerFrame {
    pub fn frame_type(&self) -> FrameType {
        match self {
            ServerFrame::HelloOk { .. } => FrameType::HelloOk,
            ServerFrame::MessageNew(_) => FrameType::MessageNew,
            ServerFrame::Wake { .. } => FrameType::Wake,
            ServerFrame::GroupInviteReceived { .. } => FrameType::GroupInviteReceived,
            ServerFrame::GroupDeleted => FrameType::GroupDeleted,
            ServerFrame::Heartbeat => FrameType::Heartbeat,
            ServerFrame::Other { .. } => FrameType::Other,
        }
    }
}

/// The reason recorded for a `wake` frame that names none: it still means "read the tray".
pub const WAKE_REASON_UNSPECIFIED: &str = "wake";

/// The longest wake reason kept; the server's reasons are short words.
pub const MAX_WAKE_REASON_CHARS: usize = 64;

/// A wake reason as a label safe to pass on: it goes into logs, the status file and the run's
/// comma-separated `AGENTCHAT_WAKE_REASONS`, where a NUL would fail the spawn and a comma would
/// split it. Characters other than ASCII letters, digits, `_`, `-` and `.` become `_`, and it is
/// cut at `MAX_WAKE_REASON_CHARS`. Known reasons pass unchanged.
fn wake_reason_label(raw: &str) -> String {
    raw.chars()
        .take(MAX_WAKE_REASON_CHARS)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn str_field(obj: Option<&Value>, key: &str) -> Option<String> {
    obj.and_then(|o| o.get(key))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

impl ServerFrame {
    /// Parses one inbound text frame. Only what the listener acts on is required: a string `type`,
    /// and for `message.new` the payload's string `id` (the ack key). Everything else is optional,
    /// so additive changes never turn a frame into an error.
    pub fn parse(text: &str) -> Result<ServerFrame, FrameError> {
        let value: Value = serde_json::from_str(text).map_err(|_| FrameError::NotJson)?;
        let kind = value
            .get("type")
            .and_then(Value::as_str)
            .ok_or(FrameError::NoType)?;
        let payload = value.get("payload").filter(|p| p.is_object());
        Ok(match kind {
            "hello.ok" => ServerFrame::HelloOk {
                capabilities: value
                    .get("capabilities")
                    .and_then(Value::as_array)
                    .map(|caps| {
                        caps.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    }),
            },
            "message.new" => {
                let payload = payload.ok_or(FrameError::Missing("message.new", "payload"))?;
                let id = str_field(Some(payload), "id")
                    .filter(|id| !id.is_empty())
                    .ok_or(FrameError::Missing("message.new", "payload.id"))?;
                // Hermes also read a legacy `from`, and `context.sender.handle` is platform-authored;
                // the socket sends bare handles, strip `@` anyway.
                let sender = str_field(Some(payload), "sender")
                    .or_else(|| str_field(Some(payload), "from"))
                    .or_else(|| {
                        str_field(
                            payload.get("context").and_then(|c| c.get("sender")),
                            "handle",
                        )
                    })
                    .map(|s| s.trim().trim_start_matches('@').to_owned());
                ServerFrame::MessageNew(MessageMeta {
                    id,
                    conversation_id: str_field(Some(payload), "conversation_id"),
                    sender,
                    kind: str_field(Some(payload), "type"),
                    delivery_id: str_field(Some(payload), "delivery_id"),
                })
            }
            "wake" => ServerFrame::Wake {
                reason: str_field(payload, "reason")
                    .filter(|r| !r.is_empty())
                    .map_or_else(
                        || WAKE_REASON_UNSPECIFIED.to_owned(),
                        |r| wake_reason_label(&r),
                    ),
                step: payload.and_then(|p| p.get("step")).and_then(Value::as_u64),
            },
            "group.invite.received" => ServerFrame::GroupInviteReceived {
                invite_id: str_field(payload, "id").or_else(|| str_field(payload, "invite_id")),
            },
            "group.deleted" => ServerFrame::GroupDeleted,
            "heartbeat" => ServerFrame::Heartbeat,
            other => ServerFrame::Other {
                kind: other.to_owned(),
            },
        })
    }
}

/// `{"type":"ack","message_id":"…"}`.
pub fn ack_frame(message_id: &str) -> String {
    serde_json::json!({"type": "ack", "message_id": message_id}).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_new_keeps_ids_and_strips_at_from_sender() {
        let f = ServerFrame::parse(
            r#"{"type":"message.new","payload":{"id":"msg_1","conversation_id":"conv_1","sender":"@Scout","type":"text","content":{"text":"secret"}}}"#,
        )
        .unwrap();
        assert_eq!(
            f,
            ServerFrame::MessageNew(MessageMeta {
                id: "msg_1".into(),
                conversation_id: Some("conv_1".into()),
                sender: Some("Scout".into()),
                kind: Some("text".into()),
                delivery_id: None,
            })
        );
    }

    #[test]
    fn message_new_sender_falls_back_to_context() {
        let f = ServerFrame::parse(
            r#"{"type":"message.new","payload":{"id":"m","context":{"sender":{"handle":"quill"}}}}"#,
        )
        .unwrap();
        assert!(matches!(f, ServerFrame::MessageNew(m) if m.sender.as_deref() == Some("quill")));
    }

    #[test]
    fn message_new_without_id_is_missing_and_error_has_no_content() {
        let err = ServerFrame::parse(
            r#"{"type":"message.new","payload":{"content":{"text":"top secret words"}}}"#,
        )
        .unwrap_err();
        assert_eq!(err, FrameError::Missing("message.new", "payload.id"));
        assert!(!err.to_string().contains("secret"));
        assert_eq!(
            ServerFrame::parse(r#"{"type":"message.new"}"#).unwrap_err(),
            FrameError::Missing("message.new", "payload")
        );
    }

    #[test]
    fn wake_keeps_unknown_reason_and_defaults_missing_reason() {
        assert_eq!(
            ServerFrame::parse(r#"{"type":"wake","payload":{"reason":"future_thing","step":3}}"#)
                .unwrap(),
            ServerFrame::Wake {
                reason: "future_thing".into(),
                step: Some(3)
            }
        );
        assert_eq!(
            ServerFrame::parse(r#"{"type":"wake"}"#).unwrap(),
            ServerFrame::Wake {
                reason: WAKE_REASON_UNSPECIFIED.into(),
                step: None
            }
        );
    }

    #[test]
    fn wake_reason_becomes_a_safe_bounded_label() {
        let reason = |raw: &str| match ServerFrame::parse(
            &serde_json::json!({"type": "wake", "payload": {"reason": raw}}).to_string(),
        ) {
            Ok(ServerFrame::Wake { reason, .. }) => reason,
            other => panic!("{other:?}"),
        };
        // It ends up in AGENTCHAT_WAKE_REASONS (a comma-separated env var: a NUL fails the spawn).
        assert_eq!(reason("a\u{0}b,c d\n"), "a_b_c_d_");
        assert_eq!(reason("unanswered"), "unanswered");
        assert_eq!(reason("new.kind-2_x"), "new.kind-2_x");
        assert_eq!(reason(&"r".repeat(500)), "r".repeat(MAX_WAKE_REASON_CHARS));
        assert_eq!(reason("\u{e9}t\u{e9}"), "_t_");
    }

    #[test]
    fn hello_ok_with_and_without_capabilities() {
        assert_eq!(
            ServerFrame::parse(r#"{"type":"hello.ok","capabilities":["ack","heartbeat"]}"#)
                .unwrap(),
            ServerFrame::HelloOk {
                capabilities: Some(vec!["ack".into(), "heartbeat".into()])
            }
        );
        assert_eq!(
            ServerFrame::parse(r#"{"type":"hello.ok"}"#).unwrap(),
            ServerFrame::HelloOk { capabilities: None }
        );
    }

    #[test]
    fn garbage_is_not_json_or_no_type_and_unknown_type_is_other() {
        assert_eq!(
            ServerFrame::parse("{not json").unwrap_err(),
            FrameError::NotJson
        );
        assert_eq!(ServerFrame::parse("[1,2]").unwrap_err(), FrameError::NoType);
        assert_eq!(
            ServerFrame::parse(r#"{"type":5}"#).unwrap_err(),
            FrameError::NoType
        );
        assert_eq!(
            ServerFrame::parse(r#"{"type":"typing.start","payload":{}}"#).unwrap(),
            ServerFrame::Other {
                kind: "typing.start".into()
            }
        );
        assert_eq!(
            ServerFrame::parse(r#"{"type":"heartbeat","payload":{"at":"x"}}"#).unwrap(),
            ServerFrame::Heartbeat
        );
    }

    #[test]
    fn ack_frame_shape() {
        let v: Value = serde_json::from_str(&ack_frame("msg_9")).unwrap();
        assert_eq!(v, serde_json::json!({"type":"ack","message_id":"msg_9"}));
    }
}

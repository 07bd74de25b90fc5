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
    /// `context.mentions`: the bare lowercase handles the message mentions (platform-authored
    /// metadata, not the text); `None` when the envelope has none (an old message).
    pub mentions: Option<Vec<String>>,
    /// `created_at`, as sent.
    pub created_at: Option<String>,
    /// `context.conversation.type`: `group`, `direct`, or `None` when not said.
    pub conversation_type: Option<String>,
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

/// Frames larger than this are skipped unread (docs/operating.md, "What happens, in order"): the
/// socket skips them and the metrics count them `oversized`, both reading this one number.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

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

impl ServerFrame {
    /// Parses one inbound text frame. Only what the listener acts on is required: a string `type`,
    /// and for `message.new` the payload's string `id` (the ack key). Everything else is optional,
    /// so additive changes never turn a frame into an error.
    ///
    /// Read in one pass that keeps only the fields below and skips the rest unbuilt (a message's
    /// content is never materialised): the same answers as reading the frame into a JSON value
    /// and picking from it, at a fraction of the cost in a burst of frames. A field that is there
    /// but of another type counts as absent; a repeated key counts with its last value.
    pub fn parse(text: &str) -> Result<ServerFrame, FrameError> {
        let top: wire::Obj<wire::Top> =
            serde_json::from_str(text).map_err(|_| FrameError::NotJson)?;
        let top = top.0.unwrap_or_default();
        let kind = top.kind.ok_or(FrameError::NoType)?;
        let payload = top.payload;
        Ok(match kind.as_str() {
            "hello.ok" => ServerFrame::HelloOk {
                capabilities: top.capabilities,
            },
            "message.new" => {
                let p = payload.ok_or(FrameError::Missing("message.new", "payload"))?;
                let id =
                    p.id.filter(|id| !id.is_empty())
                        .ok_or(FrameError::Missing("message.new", "payload.id"))?;
                // Hermes also read a legacy `from`, and `context.sender.handle` is platform-authored;
                // the socket sends bare handles, strip `@` anyway.
                let sender = p
                    .sender
                    .or(p.from)
                    .or(p.context_sender_handle)
                    .map(|s| s.trim().trim_start_matches('@').to_owned());
                ServerFrame::MessageNew(MessageMeta {
                    id,
                    conversation_id: p.conversation_id,
                    sender,
                    kind: p.kind,
                    delivery_id: p.delivery_id,
                    mentions: p.context_mentions,
                    created_at: p.created_at,
                    conversation_type: p.context_conversation_type,
                })
            }
            "wake" => {
                let p = payload.unwrap_or_default();
                ServerFrame::Wake {
                    reason: p.reason.filter(|r| !r.is_empty()).map_or_else(
                        || WAKE_REASON_UNSPECIFIED.to_owned(),
                        |r| wake_reason_label(&r),
                    ),
                    step: p.step,
                }
            }
            "group.invite.received" => {
                let p = payload.unwrap_or_default();
                ServerFrame::GroupInviteReceived {
                    invite_id: p.id.or(p.invite_id),
                }
            }
            "group.deleted" => ServerFrame::GroupDeleted,
            "heartbeat" => ServerFrame::Heartbeat,
            _ => ServerFrame::Other { kind },
        })
    }
}

/// The one-pass reader behind `ServerFrame::parse`: serde visitors that accept any JSON value,
/// keep a field only when it has the type asked for, and skip everything else without building it.
mod wire {
    use serde::Deserialize;
    use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use std::borrow::Cow;
    use std::fmt;
    use std::marker::PhantomData;

    /// The top-level fields of a frame.
    #[derive(Default)]
    pub struct Top {
        pub kind: Option<String>,
        pub payload: Option<Payload>,
        pub capabilities: Option<Vec<String>>,
    }

    /// The payload fields any frame type uses (`id` is a message's or an invite's).
    #[derive(Default)]
    pub struct Payload {
        pub id: Option<String>,
        pub conversation_id: Option<String>,
        pub sender: Option<String>,
        pub from: Option<String>,
        pub kind: Option<String>,
        pub delivery_id: Option<String>,
        pub reason: Option<String>,
        pub step: Option<u64>,
        pub invite_id: Option<String>,
        /// `context.sender.handle`.
        pub context_sender_handle: Option<String>,
        /// `context.mentions`.
        pub context_mentions: Option<Vec<String>>,
        /// `context.conversation.type`.
        pub context_conversation_type: Option<String>,
        pub created_at: Option<String>,
    }

    /// `context`: `sender.handle`, `mentions` and `conversation.type` are read.
    #[derive(Default)]
    pub struct Context {
        sender_handle: Option<String>,
        mentions: Option<Vec<String>>,
        conversation_type: Option<String>,
    }

    /// `context.conversation`: only `type` is read.
    #[derive(Default)]
    pub struct Conversation {
        kind: Option<String>,
    }

    #[derive(Default)]
    pub struct Sender {
        handle: Option<String>,
    }

    /// An object whose fields are read one key at a time; any other key's value is skipped.
    pub trait Fields: Default {
        fn field<'de, A: MapAccess<'de>>(&mut self, key: &str, map: &mut A)
        -> Result<(), A::Error>;
    }

    fn skip<'de, A: MapAccess<'de>>(map: &mut A) -> Result<(), A::Error> {
        map.next_value::<IgnoredAny>().map(|_| ())
    }

    impl Fields for Top {
        fn field<'de, A: MapAccess<'de>>(
            &mut self,
            key: &str,
            map: &mut A,
        ) -> Result<(), A::Error> {
            match key {
                "type" => self.kind = map.next_value::<Str>()?.0,
                "payload" => self.payload = map.next_value::<Obj<Payload>>()?.0,
                "capabilities" => self.capabilities = map.next_value::<Strings>()?.0,
                _ => skip(map)?,
            }
            Ok(())
        }
    }

    impl Fields for Payload {
        fn field<'de, A: MapAccess<'de>>(
            &mut self,
            key: &str,
            map: &mut A,
        ) -> Result<(), A::Error> {
            let slot = match key {
                "id" => &mut self.id,
                "conversation_id" => &mut self.conversation_id,
                "sender" => &mut self.sender,
                "from" => &mut self.from,
                "type" => &mut self.kind,
                "delivery_id" => &mut self.delivery_id,
                "reason" => &mut self.reason,
                "invite_id" => &mut self.invite_id,
                "created_at" => &mut self.created_at,
                "step" => {
                    self.step = map.next_value::<U64>()?.0;
                    return Ok(());
                }
                "context" => {
                    if let Some(c) = map.next_value::<Obj<Context>>()?.0 {
                        self.context_sender_handle = c.sender_handle;
                        self.context_mentions = c.mentions;
                        self.context_conversation_type = c.conversation_type;
                    }
                    return Ok(());
                }
                _ => return skip(map),
            };
            *slot = map.next_value::<Str>()?.0;
            Ok(())
        }
    }

    impl Fields for Context {
        fn field<'de, A: MapAccess<'de>>(
            &mut self,
            key: &str,
            map: &mut A,
        ) -> Result<(), A::Error> {
            match key {
                "sender" => {
                    let sender = map.next_value::<Obj<Sender>>()?.0;
                    self.sender_handle = sender.and_then(|s| s.handle);
                }
                "mentions" => self.mentions = map.next_value::<Strings>()?.0,
                "conversation" => {
                    let c = map.next_value::<Obj<Conversation>>()?.0;
                    self.conversation_type = c.and_then(|c| c.kind);
                }
                _ => skip(map)?,
            }
            Ok(())
        }
    }

    impl Fields for Conversation {
        fn field<'de, A: MapAccess<'de>>(
            &mut self,
            key: &str,
            map: &mut A,
        ) -> Result<(), A::Error> {
            if key != "type" {
                return skip(map);
            }
            self.kind = map.next_value::<Str>()?.0;
            Ok(())
        }
    }

    impl Fields for Sender {
        fn field<'de, A: MapAccess<'de>>(
            &mut self,
            key: &str,
            map: &mut A,
        ) -> Result<(), A::Error> {
            if key != "handle" {
                return skip(map);
            }
            self.handle = map.next_value::<Str>()?.0;
            Ok(())
        }
    }

    /// One JSON value as a visitor first sees it. Arrays and objects are read by `seq` and `map`.
    enum Seen<'a> {
        Str(&'a str),
        U64(u64),
        Other,
    }

    /// What a value that accepts any JSON makes of a scalar, an array and an object. The default
    /// array and object readers read them to their end and keep nothing.
    trait AnyValue: Sized {
        fn scalar(seen: Seen) -> Self;
        fn seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Self, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Self::scalar(Seen::Other))
        }
        fn map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Self, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Self::scalar(Seen::Other))
        }
    }

    struct AnyVisitor<T>(PhantomData<T>);

    impl<'de, T: AnyValue> Visitor<'de> for AnyVisitor<T> {
        type Value = T;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("any JSON value")
        }
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<T, E> {
            Ok(T::scalar(Seen::Other))
        }
        fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
            Ok(T::scalar(u64::try_from(v).map_or(Seen::Other, Seen::U64)))
        }
        fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
            Ok(T::scalar(Seen::U64(v)))
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<T, E> {
            Ok(T::scalar(Seen::Other))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
            Ok(T::scalar(Seen::Str(v)))
        }
        fn visit_unit<E: de::Error>(self) -> Result<T, E> {
            Ok(T::scalar(Seen::Other))
        }
        fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<T, A::Error> {
            T::seq(seq)
        }
        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::map(map)
        }
    }

    macro_rules! deserialize_any_value {
        ($($t:ident),*) => {$(
            impl<'de> Deserialize<'de> for $t {
                fn deserialize<D: Deserializer<'de>>(d: D) -> Result<$t, D::Error> {
                    d.deserialize_any(AnyVisitor(PhantomData))
                }
            }
        )*};
    }
    deserialize_any_value!(Str, U64, Strings);

    /// A string, or `None` for any other value.
    pub struct Str(pub Option<String>);
    impl AnyValue for Str {
        fn scalar(seen: Seen) -> Str {
            match seen {
                Seen::Str(s) => Str(Some(s.to_owned())),
                _ => Str(None),
            }
        }
    }

    /// A non-negative integer (what `serde_json::Value::as_u64` reads), or `None`.
    pub struct U64(pub Option<u64>);
    impl AnyValue for U64 {
        fn scalar(seen: Seen) -> U64 {
            match seen {
                Seen::U64(n) => U64(Some(n)),
                _ => U64(None),
            }
        }
    }

    /// An array's string elements (the others dropped), or `None` when it is not an array.
    pub struct Strings(pub Option<Vec<String>>);
    impl AnyValue for Strings {
        fn scalar(_: Seen) -> Strings {
            Strings(None)
        }
        fn seq<'de, A: SeqAccess<'de>>(mut seq: A) -> Result<Strings, A::Error> {
            let mut out = Vec::new();
            while let Some(Str(s)) = seq.next_element::<Str>()? {
                out.extend(s);
            }
            Ok(Strings(Some(out)))
        }
    }

    /// An object read through its `Fields`, or `None` when it is not an object.
    pub struct Obj<T>(pub Option<T>);
    impl<T: Fields> AnyValue for Obj<T> {
        fn scalar(_: Seen) -> Obj<T> {
            Obj(None)
        }
        fn map<'de, A: MapAccess<'de>>(mut map: A) -> Result<Obj<T>, A::Error> {
            let mut t = T::default();
            while let Some(Key(key)) = map.next_key::<Key>()? {
                t.field(&key, &mut map)?;
            }
            Ok(Obj(Some(t)))
        }
    }
    impl<'de, T: Fields> Deserialize<'de> for Obj<T> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Obj<T>, D::Error> {
            d.deserialize_any(AnyVisitor(PhantomData))
        }
    }

    /// An object key, borrowed from the frame when it has no escapes.
    struct Key<'de>(Cow<'de, str>);
    struct KeyVisitor;
    impl<'de> Visitor<'de> for KeyVisitor {
        type Value = Key<'de>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an object key")
        }
        fn visit_borrowed_str<E: de::Error>(self, v: &'de str) -> Result<Key<'de>, E> {
            Ok(Key(Cow::Borrowed(v)))
        }
        fn visit_str<E: de::Error>(self, v: &str) -> Result<Key<'de>, E> {
            Ok(Key(Cow::Owned(v.to_owned())))
        }
    }
    impl<'de> Deserialize<'de> for Key<'de> {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Key<'de>, D::Error> {
            d.deserialize_str(KeyVisitor)
        }
    }
}

/// `{"type":"ack","message_id":"…"}`, written straight from the id (one per acked message).
pub fn ack_frame(message_id: &str) -> String {
    #[derive(serde::Serialize)]
    struct Ack<'a> {
        r#type: &'static str,
        message_id: &'a str,
    }
    let ack = Ack {
        r#type: "ack",
        message_id,
    };
    // Two string fields: serialising cannot fail.
    serde_json::to_string(&ack).unwrap_or_default()
}

/// Frame types of contract 3.4 as the metrics label them; any other is `other`.
pub const KNOWN_TYPES: &[&str] = &[
    "hello.ok",
    "message.new",
    "message.read",
    "presence.update",
    "typing.start",
    "typing.stop",
    "rate_limit.warning",
    "group.invite.received",
    "group.deleted",
    "wake",
    "heartbeat",
];

/// A text frame's type as a label of [`KNOWN_TYPES`], `other` for another type, `malformed` when
/// it names none. Reads only the `type` field.
pub fn type_label(text: &str) -> &'static str {
    #[derive(serde::Deserialize)]
    struct Typed<'a> {
        #[serde(borrow, rename = "type")]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    match serde_json::from_str::<Typed>(text) {
        Ok(Typed { kind: Some(k) }) => KNOWN_TYPES
            .iter()
            .find(|t| **t == k)
            .copied()
            .unwrap_or("other"),
        _ => "malformed",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::Value;

    // The reading `parse` replaced: the whole frame into a `serde_json::Value`, then picked from.
    // Kept as the oracle `parse` must agree with.
    fn str_field(obj: Option<&Value>, key: &str) -> Option<String> {
        obj.and_then(|o| o.get(key))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    fn parse_via_value(text: &str) -> Result<ServerFrame, FrameError> {
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
                let context = payload.get("context");
                ServerFrame::MessageNew(MessageMeta {
                    id,
                    conversation_id: str_field(Some(payload), "conversation_id"),
                    sender,
                    kind: str_field(Some(payload), "type"),
                    delivery_id: str_field(Some(payload), "delivery_id"),
                    mentions: context
                        .and_then(|c| c.get("mentions"))
                        .and_then(Value::as_array)
                        .map(|a| {
                            a.iter()
                                .filter_map(|v| v.as_str().map(str::to_owned))
                                .collect()
                        }),
                    created_at: str_field(Some(payload), "created_at"),
                    conversation_type: str_field(
                        context.and_then(|c| c.get("conversation")),
                        "type",
                    ),
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

    /// A JSON value for a frame field: strings the parser acts on, numbers of every kind, and
    /// nested arrays and objects (keys may repeat).
    fn json_value() -> impl Strategy<Value = String> {
        let words = prop::sample::select(vec![
            "",
            "m",
            "@Bob ",
            "message.new",
            "wake",
            "hello.ok",
            "heartbeat",
            "group.invite.received",
            "group.deleted",
            "typing.start",
            "ack",
            "reminder",
            "x\\\"y",
            "\\u00e9t\\u00e9",
        ]);
        let leaf = prop_oneof![
            words.prop_map(|w| format!("\"{w}\"")),
            prop::sample::select(vec![
                "0",
                "3",
                "-5",
                "1.5",
                "3.0",
                "1e3",
                "18446744073709551615",
                "99999999999999999999",
                "true",
                "false",
                "null",
            ])
            .prop_map(str::to_string),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4)
                    .prop_map(|v| format!("[{}]", v.join(","))),
                prop::collection::vec((json_key(), inner), 0..5).prop_map(|kv| object(&kv)),
            ]
        })
    }

    fn json_key() -> impl Strategy<Value = String> {
        prop::sample::select(vec![
            "type",
            "payload",
            "capabilities",
            "id",
            "conversation_id",
            "sender",
            "from",
            "delivery_id",
            "reason",
            "step",
            "invite_id",
            "context",
            "handle",
            "content",
            "t\\u0079pe",
        ])
        .prop_map(str::to_string)
    }

    fn object(kv: &[(String, String)]) -> String {
        let fields: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", fields.join(","))
    }

    /// A frame: a top-level object whose `type` and `payload` are likely to be what the parser
    /// acts on, with other keys, repeats and odd values mixed in.
    fn frame() -> impl Strategy<Value = String> {
        let kind = prop_oneof![
            prop::sample::select(vec![
                "message.new",
                "wake",
                "hello.ok",
                "group.invite.received",
                "heartbeat",
                "other",
            ])
            .prop_map(|t| format!("\"{t}\"")),
            json_value(),
        ];
        let payload = prop_oneof![
            prop::collection::vec((json_key(), json_value()), 0..7).prop_map(|kv| object(&kv)),
            json_value(),
        ];
        let extra = prop::collection::vec((json_key(), json_value()), 0..3);
        (kind, payload, extra, any::<bool>()).prop_map(|(kind, payload, extra, repeat)| {
            let mut kv = vec![("type".to_string(), kind), ("payload".to_string(), payload)];
            kv.extend(extra);
            if repeat {
                kv.rotate_left(1);
            }
            object(&kv)
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2_000))]

        #[test]
        fn parse_agrees_with_reading_the_frame_into_a_json_value(text in frame()) {
            prop_assert_eq!(ServerFrame::parse(&text), parse_via_value(&text), "{}", text);
        }

        #[test]
        fn parse_agrees_on_any_text(text in any::<String>()) {
            prop_assert_eq!(ServerFrame::parse(&text), parse_via_value(&text));
        }
    }

    #[test]
    fn a_message_whose_skipped_content_nests_deeply_is_still_a_message() {
        let deep = format!("{}{}", "[".repeat(300), "]".repeat(300));
        let text = format!(r#"{{"type":"message.new","payload":{{"id":"m","content":{deep}}}}}"#);
        assert!(matches!(ServerFrame::parse(&text), Ok(ServerFrame::MessageNew(m)) if m.id == "m"));
        assert_eq!(
            parse_via_value(&text),
            Err(FrameError::NotJson),
            "as it was"
        );
    }

    #[test]
    fn parse_agrees_on_the_edges() {
        for text in [
            r#"{"type":"message.new","payload":{"id":"a","id":"b"}}"#,
            r#"{"type":"message.new","payload":{"id":"a","id":7}}"#,
            r#"{"type":"message.new","payload":{"id":"a"},"payload":[1]}"#,
            r#"{"type":"wake","payload":{"step":-1}}"#,
            r#"{"type":"wake","payload":{"step":2.0}}"#,
            r#"{"type":"wake","payload":{"step":18446744073709551615}}"#,
            r#"{"type":"hello.ok","capabilities":["ack",1,null,"rewake"]}"#,
            r#"{"type":"hello.ok","capabilities":{"ack":true}}"#,
            r#"{"t\u0079pe":"heartbeat"}"#,
            r#"{"type":"message.new","payload":{"id":"m","sender":5,"from":"@x","context":{"sender":{"handle":"y"}}}}"#,
            r#"{"type":"message.new","payload":{"id":"m","context":{"sender":"y"}}}"#,
            r#"{"type":"group.invite.received","payload":{"id":null,"invite_id":"gri_1"}}"#,
            r#"[{"type":"wake"}]"#,
            r#""wake""#,
            r#"{"type":"wake"} trailing"#,
            "",
        ] {
            assert_eq!(ServerFrame::parse(text), parse_via_value(text), "{text}");
        }
    }

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
                mentions: None,
                created_at: None,
                conversation_type: None,
            })
        );
    }

    /// Issue 38 item 3: who a message mentions and where it was said come from the envelope's
    /// platform-written `context`, never from its text.
    #[test]
    fn message_new_keeps_the_contexts_mentions_and_conversation_type() {
        let text = r#"{"type":"message.new","payload":{"id":"m","sender":"x","created_at":"2026-01-01T00:00:00Z","content":{"text":"@bob hi"},"context":{"sender":{"handle":"x"},"conversation":{"type":"group","group_name":"g"},"mentions":["bob",7]}}}"#;
        let Ok(ServerFrame::MessageNew(m)) = ServerFrame::parse(text) else {
            panic!("a message")
        };
        assert_eq!(m.mentions, Some(vec!["bob".to_string()]));
        assert_eq!(m.conversation_type.as_deref(), Some("group"));
        assert_eq!(m.created_at.as_deref(), Some("2026-01-01T00:00:00Z"));
        assert_eq!(ServerFrame::parse(text), parse_via_value(text));
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
        assert_eq!(ack_frame("msg_9"), r#"{"type":"ack","message_id":"msg_9"}"#);
        let odd = "m\"\\\u{1}\u{e9}";
        let v: Value = serde_json::from_str(&ack_frame(odd)).unwrap();
        assert_eq!(v["message_id"], odd, "the id is escaped, never spliced");
    }
}

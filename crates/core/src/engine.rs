//! What each inbound frame asks of the listener: ack it, wake, or nothing (contract 3.4, 4 step 1;
//! `engine-scenarios.json`). Dedupes message ids in a bounded memory so a re-pushed message is
//! acked again and wakes nothing new.

use std::collections::{HashSet, VecDeque};

use super::frames::{FrameType, ServerFrame};

/// Why a cycle was asked for. Carried into the run as `AGENTCHAT_WAKE_REASONS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WakeCause {
    /// A new message from someone else, with its conversation when the frame named one (the
    /// cycle's decision skips a wake for muted mail only, `core::decision::WakeCauses`).
    Message(Option<String>),
    /// A `wake` frame; the reason as sent (`reminder`, `unanswered`, or one we do not know).
    Wake(String),
    /// `group.invite.received`.
    Invite,
    /// The socket (re)connected.
    Connected,
    /// A wake the listener gives itself (`core::status::ListenerWake`): a way out of a state
    /// in which no run could start, or a tray left cut short.
    Listener(super::status::ListenerWake),
}

impl WakeCause {
    /// The word used in logs, status and `AGENTCHAT_WAKE_REASONS`.
    pub fn label(&self) -> String {
        match self {
            WakeCause::Message(_) => "message".into(),
            WakeCause::Wake(r) => r.clone(),
            WakeCause::Invite => "invite".into(),
            WakeCause::Connected => "connect".into(),
            WakeCause::Listener(w) => w.as_str().into(),
        }
    }
}

/// What to do with one frame.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct FrameAction {
    /// Send `{"type":"ack","message_id":…}` for this id (after registering the wake, if any).
    pub ack: Option<String>,
    pub wake: Option<WakeCause>,
    /// Capabilities the server accepted, from `hello.ok`.
    pub hello: Option<Option<Vec<String>>>,
    /// Parse failure to log (without the frame's content).
    pub malformed: Option<super::frames::FrameError>,
    /// The frame's type; `None` when it was malformed.
    pub frame_type: Option<FrameType>,
    /// A new message that wakes, as the run policy keeps it (sender, mentions; never its body).
    pub heard: Option<super::policy::HeardMessage>,
}

/// The default size of the dedupe memory (the SDKs keep 2048 ids).
pub const DEFAULT_DEDUPE_CAPACITY: usize = 2048;

/// How the dedupe memory keeps one id: the first 16 bytes of its SHA-256. Every id takes the same
/// 16 bytes and no allocation of its own, however long the server made it; two different ids
/// share a key with a chance of 2^-128.
type SeenKey = [u8; 16];

fn seen_key(id: &str) -> SeenKey {
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(id.as_bytes());
    let mut key = [0u8; 16];
    for (k, d) in key.iter_mut().zip(digest) {
        *k = d;
    }
    key
}

pub struct Engine {
    own_handle: String,
    capacity: usize,
    /// Seen message ids, oldest first; `seen_set` mirrors it for lookups.
    seen_order: VecDeque<SeenKey>,
    seen_set: HashSet<SeenKey>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("own_handle", &self.own_handle)
            .field("remembered", &self.seen_order.len())
            .finish()
    }
}

impl Engine {
    /// `own_handle` in any spelling; `capacity` bounds the dedupe memory (at least 1).
    pub fn new(own_handle: &str, capacity: usize) -> Engine {
        Engine {
            own_handle: super::handle::normalize(own_handle),
            capacity: capacity.max(1),
            seen_order: VecDeque::new(),
            seen_set: HashSet::new(),
        }
    }

    /// The listener's handle can become known after connect (`/v1/agents/me`).
    pub fn set_own_handle(&mut self, handle: &str) {
        self.own_handle = super::handle::normalize(handle);
    }

    /// Remembers `id`; returns false when it was already remembered (a duplicate).
    fn remember(&mut self, id: &str) -> bool {
        let key = seen_key(id);
        if self.seen_set.contains(&key) {
            return false;
        }
        if self.seen_order.len() >= self.capacity
            && let Some(old) = self.seen_order.pop_front()
        {
            self.seen_set.remove(&old);
        }
        self.seen_set.insert(key);
        self.seen_order.push_back(key);
        true
    }

    fn is_own(&self, sender: Option<&str>) -> bool {
        match sender {
            // `normalize(s) == own_handle` without a new String per message: `own_handle` is
            // already normalised (ASCII-lowercased).
            Some(s) if !self.own_handle.is_empty() => s
                .trim()
                .trim_start_matches('@')
                .eq_ignore_ascii_case(&self.own_handle),
            _ => false,
        }
    }

    /// What the run policy keeps of a new message: its conversation and sender (both needed),
    /// whether its `context.mentions` names this agent, when and where it was said.
    fn heard(&self, meta: &super::frames::MessageMeta) -> Option<super::policy::HeardMessage> {
        let conversation = meta.conversation_id.clone().filter(|c| !c.is_empty())?;
        let sender = meta.sender.as_deref().map(super::handle::normalize)?;
        let mentions_me = meta.mentions.as_ref().map(|m| {
            !self.own_handle.is_empty()
                && m.iter()
                    .any(|h| super::handle::normalize(h) == self.own_handle)
        });
        Some(super::policy::HeardMessage {
            id: meta.id.clone(),
            conversation,
            sender,
            mentions_me,
            at_ms: meta.created_at.as_deref().and_then(super::policy::unix_ms),
            group: meta.conversation_type.as_deref().map(|t| t == "group"),
        })
    }

    /// Decides what one inbound text frame asks for. Every `message.new` is acked (a duplicate
    /// again: the previous ack may have been lost); only a new message from someone else that is
    /// not a system notice wakes. `wake` and `group.invite.received` wake and are never acked.
    pub fn on_text(&mut self, text: &str) -> FrameAction {
        let frame = match ServerFrame::parse(text) {
            Ok(frame) => frame,
            Err(e) => {
                return FrameAction {
                    malformed: Some(e),
                    ..FrameAction::default()
                };
            }
        };
        let frame_type = Some(frame.frame_type());
        let action = match frame {
            ServerFrame::HelloOk { capabilities } => FrameAction {
                hello: Some(capabilities),
                ..FrameAction::default()
            },
            ServerFrame::MessageNew(meta) => {
                let fresh = self.remember(&meta.id);
                let wakes = fresh
                    && !self.is_own(meta.sender.as_deref())
                    && meta.kind.as_deref() != Some("system");
                let heard = wakes.then(|| self.heard(&meta)).flatten();
                FrameAction {
                    ack: Some(meta.id),
                    wake: wakes.then_some(WakeCause::Message(meta.conversation_id)),
                    heard,
                    ..FrameAction::default()
                }
            }
            ServerFrame::Wake { reason, .. } => FrameAction {
                wake: Some(WakeCause::Wake(reason)),
                ..FrameAction::default()
            },
            ServerFrame::GroupInviteReceived { .. } => FrameAction {
                wake: Some(WakeCause::Invite),
                ..FrameAction::default()
            },
            // A group deletion is a system notice: it never wakes by itself (contract 4 step 1).
            ServerFrame::GroupDeleted | ServerFrame::Heartbeat | ServerFrame::Other { .. } => {
                FrameAction::default()
            }
        };
        FrameAction {
            frame_type,
            ..action
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(id: &str, sender: &str, kind: &str) -> String {
        serde_json::json!({"type":"message.new","payload":{"id":id,"sender":sender,"type":kind}})
            .to_string()
    }

    #[test]
    fn new_message_is_acked_and_wakes_duplicate_is_reacked_without_wake() {
        let mut e = Engine::new("@me", 8);
        let a = e.on_text(&msg("msg_1", "scout", "text"));
        assert_eq!(a.ack.as_deref(), Some("msg_1"));
        assert_eq!(a.wake, Some(WakeCause::Message(None)));
        let b = e.on_text(&msg("msg_1", "scout", "text"));
        assert_eq!(b.ack.as_deref(), Some("msg_1"));
        assert_eq!(b.wake, None);
        // The wake names the message's conversation (the decision skips muted mail).
        let c = e.on_text(
            r#"{"type":"message.new","payload":{"id":"msg_2","sender":"scout","conversation_id":"conv_9"}}"#,
        );
        assert_eq!(c.wake, Some(WakeCause::Message(Some("conv_9".into()))));
    }

    #[test]
    fn own_and_system_messages_are_acked_without_wake() {
        let mut e = Engine::new("@Me", 8);
        let own = e.on_text(&msg("msg_1", "me", "text"));
        assert_eq!((own.ack.as_deref(), own.wake), (Some("msg_1"), None));
        let own_at = e.on_text(&msg("msg_2", "@ME", "text"));
        assert_eq!(own_at.wake, None);
        let sys = e.on_text(&msg("msg_3", "scout", "system"));
        assert_eq!((sys.ack.as_deref(), sys.wake), (Some("msg_3"), None));
    }

    #[test]
    fn dedupe_memory_is_bounded_and_forgets_oldest() {
        let mut e = Engine::new("me", 2);
        e.on_text(&msg("a", "x", "text"));
        e.on_text(&msg("b", "x", "text"));
        e.on_text(&msg("c", "x", "text"));
        assert_eq!(e.seen_order.len(), 2);
        // `a` was forgotten, so it wakes again; `c` is still remembered.
        assert_eq!(
            e.on_text(&msg("a", "x", "text")).wake,
            Some(WakeCause::Message(None))
        );
        assert_eq!(e.on_text(&msg("c", "x", "text")).wake, None);
    }

    #[test]
    fn wake_and_invite_wake_without_ack_heartbeat_does_nothing() {
        let mut e = Engine::new("me", 8);
        let w = e.on_text(r#"{"type":"wake","payload":{"reason":"brand_new"}}"#);
        assert_eq!(
            (w.ack, w.wake),
            (None, Some(WakeCause::Wake("brand_new".into())))
        );
        let i = e.on_text(r#"{"type":"group.invite.received","payload":{"id":"gri_1"}}"#);
        assert_eq!((i.ack, i.wake), (None, Some(WakeCause::Invite)));
        let nothing = |frame_type| FrameAction {
            frame_type: Some(frame_type),
            ..FrameAction::default()
        };
        assert_eq!(
            e.on_text(r#"{"type":"heartbeat"}"#),
            nothing(FrameType::Heartbeat)
        );
        assert_eq!(
            e.on_text(r#"{"type":"group.deleted","payload":{}}"#),
            nothing(FrameType::GroupDeleted)
        );
    }

    #[test]
    fn a_huge_message_id_is_deduped_in_bounded_memory() {
        let mut e = Engine::new("me", 8);
        let long = |c: char| c.to_string().repeat(200_000);
        assert_eq!(
            e.on_text(&msg(&long('a'), "x", "text")).wake,
            Some(WakeCause::Message(None))
        );
        let again = e.on_text(&msg(&long('a'), "x", "text"));
        assert_eq!(again.ack, Some(long('a')), "acked with the id as sent");
        assert_eq!(again.wake, None, "a duplicate, however long its id");
        assert_eq!(
            e.on_text(&msg(&long('b'), "x", "text")).wake,
            Some(WakeCause::Message(None)),
            "another long id is another message"
        );
        // What the memory keeps per id is 16 bytes, whatever the frame size.
        assert_eq!(e.seen_order.len(), 2);
        assert_eq!(std::mem::size_of::<SeenKey>(), 16);
    }

    #[test]
    fn malformed_frame_only_reports() {
        let mut e = Engine::new("me", 8);
        let a = e.on_text("nope");
        assert!(a.malformed.is_some());
        assert_eq!(
            (a.ack, a.wake, a.hello, a.frame_type),
            (None, None, None, None)
        );
    }

    #[test]
    fn unknown_own_handle_never_suppresses() {
        let mut e = Engine::new("", 8);
        assert_eq!(
            e.on_text(&msg("m", "", "text")).wake,
            Some(WakeCause::Message(None))
        );
        e.set_own_handle("@x");
        assert_eq!(e.on_text(&msg("m2", "X", "text")).wake, None);
    }
}

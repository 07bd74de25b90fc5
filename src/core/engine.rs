//! What each inbound frame asks of the listener: ack it, wake, or nothing (contract 3.4, 4 step 1;
//! `engine-scenarios.json`). Dedupes message ids in a bounded memory so a re-pushed message is
//! acked again and wakes nothing new.

/// Why a cycle was asked for. Carried into the run as `AGENTCHAT_WAKE_REASONS`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WakeCause {
    /// A new message from someone else.
    Message,
    /// A `wake` frame; the reason as sent (`reminder`, `unanswered`, or one we do not know).
    Wake(String),
    /// `group.invite.received`.
    Invite,
    /// The socket (re)connected.
    Connected,
}

impl WakeCause {
    /// The word used in logs, status and `AGENTCHAT_WAKE_REASONS`.
    pub fn label(&self) -> String {
        match self {
            WakeCause::Message => "message".into(),
            WakeCause::Wake(r) => r.clone(),
            WakeCause::Invite => "invite".into(),
            WakeCause::Connected => "connect".into(),
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
}

pub struct Engine {
    own_handle: String,
    capacity: usize,
}

impl Engine {
    /// `own_handle` in any spelling; `capacity` bounds the dedupe memory.
    pub fn new(own_handle: &str, capacity: usize) -> Engine {
        Engine {
            own_handle: super::handle::normalize(own_handle),
            capacity,
        }
    }

    /// The listener's handle can become known after connect (`/v1/agents/me`).
    pub fn set_own_handle(&mut self, handle: &str) {
        self.own_handle = super::handle::normalize(handle);
    }

    pub fn on_text(&mut self, text: &str) -> FrameAction {
        let _ = (text, self.capacity, &self.own_handle);
        todo!("core: engine")
    }
}

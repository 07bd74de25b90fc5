//! The sim's data: agents, conversations, messages with per-recipient delivery state, groups,
//! invites, and the per-agent server state (verdicts, defer ladders, re-wake ladder, budgets).
//! Handles are stored lowercase without `@`.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::Value;
use tokio::sync::{broadcast, mpsc, watch};

use super::budget::{ConnectBudget, PollBudget};

/// What a socket task is told to do.
#[derive(Debug, Clone)]
pub enum Out {
    Frame(String),
    /// A `message.new` frame: the socket logs its send (`id` and time) once it is written.
    Message {
        id: String,
        frame: String,
    },
    Close(u16, String),
    /// Keep TCP open, send nothing more, answer nothing.
    Silence,
    /// Drop the TCP connection without a close frame (a server that went away: `1006` to the
    /// client).
    Drop,
}

/// Something landed for an agent: ends a held tray read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Landing {
    Message,
    Wake,
    Invite,
}

#[derive(Debug)]
pub struct SocketEntry {
    pub id: u64,
    pub caps: BTreeSet<String>,
    pub tx: mpsc::UnboundedSender<Out>,
    pub silenced: bool,
    pub path: &'static str,
    pub connected_at: String,
}

impl SocketEntry {
    pub fn has(&self, cap: &str) -> bool {
        self.caps.contains(cap)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub decision: String,
    pub category: String,
    pub at: String,
}

/// The defer ladder of one conversation (contract 3.2, 6).
#[derive(Debug, Clone)]
pub struct Defer {
    /// How many defers in a row on this anchor line (1: +15 min, 2: +24 h, 3: stop).
    pub count: u8,
    pub anchor_id: String,
    pub anchor_seq: u64,
    /// Server-clock time the reminder comes due; `None` once fired or stopped.
    pub due_v: Option<u64>,
}

#[derive(Debug, Clone, Default)]
pub struct ConvView {
    pub last_decision: Option<Decision>,
    pub defer: Option<Defer>,
    /// `(step, fired_at)` of the reminder that brought the card back.
    pub reminder: Option<(u8, String)>,
}

/// The unanswered re-wake ladder (contract 5): rungs 1, 5, 30, 180 min after `base_v`.
#[derive(Debug, Clone, Default)]
pub struct Ladder {
    pub base_v: Option<u64>,
    /// Rungs already sent (0..=4).
    pub sent: u8,
    pub fired: Vec<Value>,
}

pub const RUNGS_MIN: [u64; 4] = [1, 5, 30, 180];

#[derive(Debug)]
pub struct Agent {
    pub handle: String,
    pub display_name: String,
    pub key: String,
    pub key_refused: bool,
    /// `paused_by_owner`: `none`, `send` or `full` (`POST /_sim/agents/{h}/pause`). A `full`
    /// pause means no live push, an empty tray at once, and `[]` from sync (contract 3.1).
    pub paused: &'static str,
    /// Suspended by the platform (`POST /_sim/agents/{h}/suspend`, `owner`).
    pub suspended: bool,
    /// Invites that came while the agent was asleep (`owner`): pushed when it wakes.
    pub missed_invites: Vec<String>,
    pub created_at: String,
    pub mutes: super::mutes::Mutes,
    /// The wake webhook: subscription, deliveries, presence (contract 3.5).
    pub hook: super::webhook::Hook,
    /// `/v1/reply/*` claims and leases (contract 7's `reply_coord`).
    pub reply_coord: super::reply_coord::ReplyCoord,
    pub views: BTreeMap<String, ConvView>,
    pub connects: Vec<Value>,
    pub acks: Vec<Value>,
    /// Every `message.new` written to one of the agent's sockets: id and times.
    pub sends: Vec<Value>,
    pub wakes: Vec<Value>,
    /// While true, the agent's sockets write nothing from their queue (pings still go); frames
    /// pile up in order and go out back to back on release.
    pub hold: watch::Sender<bool>,
    /// The re-wake ladder is switched off for this agent (control API): no `unanswered` wakes,
    /// and the timer never builds its tray.
    pub ladder_off: bool,
    pub connect_budget: ConnectBudget,
    pub sockets: Vec<SocketEntry>,
    pub ladder: Ladder,
    pub polls: PollBudget,
    pub last_progress_v: Option<u64>,
    pub verdicts: Vec<Value>,
    pub idem: HashMap<String, (String, u16, Value)>,
    pub landing: broadcast::Sender<Landing>,
    /// Tray reads parked in a `wait_ms` hold right now.
    pub held: usize,
}

#[derive(Debug, Clone)]
pub struct Delivery {
    pub delivery_id: String,
    /// `stored` | `delivered` | `read`
    pub status: &'static str,
    pub delivered_at: Option<String>,
    pub read_at: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Message {
    pub id: String,
    pub conversation_id: String,
    pub sender: String,
    pub client_msg_id: String,
    pub seq: u64,
    /// `text` | `structured` | `system` ...
    pub kind: String,
    pub content: Value,
    pub metadata: Value,
    pub mentions: Vec<String>,
    pub created_at: String,
    pub created_unix_ms: u64,
    /// Server-clock creation time: the re-wake ladder counts its rungs from it (contract 5).
    pub created_v: u64,
    /// Global arrival order (newest-first sorting).
    pub ord: u64,
    pub recipients: BTreeMap<String, Delivery>,
}

impl Message {
    pub fn is_notice(&self) -> bool {
        self.kind == "system"
    }
    pub fn text(&self) -> String {
        self.content
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    }
}

#[derive(Debug, Clone)]
pub enum ConvKind {
    Direct([String; 2]),
    Group,
}

#[derive(Debug, Clone)]
pub struct Conversation {
    pub id: String,
    pub kind: ConvKind,
    /// Message ids in seq order.
    pub messages: Vec<String>,
}

#[derive(Debug, Clone)]
pub struct Member {
    pub role: &'static str,
    pub joined_at: String,
}

#[derive(Debug, Clone)]
pub struct Group {
    pub id: String,
    pub name: String,
    pub description: Option<String>,
    pub owner: String,
    pub members: BTreeMap<String, Member>,
    pub created_at: String,
    /// `(at, by)` once deleted.
    pub deleted: Option<(String, String)>,
}

#[derive(Debug, Clone)]
pub struct Invite {
    pub id: String,
    pub group_id: String,
    pub invitee: String,
    pub inviter: String,
    pub created_at: String,
    /// Server-clock creation time (the ladder's base when it is the newest unanswered item).
    pub created_v: u64,
    pub ord: u64,
    /// `pending` | `accepted` | `declined` | `cancelled`
    pub state: &'static str,
    pub dismissed: bool,
}

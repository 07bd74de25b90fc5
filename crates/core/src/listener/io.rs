//! What a profile's listener is told ([`Input`]) and what it asks for ([`Effect`]): the whole
//! boundary between the state machine and the world. The driver (`listen::driver`, or the
//! simulator) performs each effect and feeds its result back as an input, tagged with the
//! request it answers, so an answer that comes after its request was given up (a reload, a stop)
//! is told apart and dropped.

use super::config::ListenerConfig;
use crate::history::Record;
use crate::invite_rule::InviteMemory;
use crate::policy::Ledger;
use crate::reconnect::CloseKind;
use crate::run_report::RunReport;
use crate::status::{ListenerState, RunKind, Status, TextsSource, TextsStatus};
use crate::texts::Texts;
use crate::tray::Tray;
use std::sync::Arc;
use std::time::Duration;

/// Why no AgentChat server was reached (`reach`): something answered that is not AgentChat, or
/// nothing answered. Each carries the line the log and `status.json` show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotReached {
    Misconfigured(String),
    Unreachable(String),
}

impl NotReached {
    pub fn detail(&self) -> &str {
        match self {
            NotReached::Misconfigured(d) | NotReached::Unreachable(d) => d,
        }
    }
}

/// How `GET /v1/agents/me` failed.
#[derive(Debug, Clone, PartialEq)]
pub enum MeError {
    /// HTTP 401/403.
    Refused(u16),
    /// HTTP 429: the wait it asked for (`Retry-After`).
    RateLimited(Duration),
    /// `REMOVED` (contract 7): the server's words.
    Removed(String),
    NotReached(NotReached),
}

/// How an attempt to open the socket failed before it carried a frame.
#[derive(Debug, Clone, PartialEq)]
pub enum DialError {
    /// The server answered the upgrade with a status that is a close of this kind.
    Closed(CloseKind, String),
    /// An HTTP `429` with its wait.
    Throttled(Duration, String),
    NotReached(NotReached),
}

/// One message read from the socket.
#[derive(Debug, Clone, PartialEq)]
pub enum InFrame {
    Text(String),
    /// A binary message of this many bytes (never read).
    Binary(usize),
    /// A ping, pong or raw frame.
    Control,
    /// The server's close frame (`None`: without a code, 1005).
    Close(Option<(u16, String)>),
}

/// How a connection was lost under the reader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lost {
    /// A socket error.
    Error(String),
    /// The stream ended without a close frame (1006).
    Ended,
}

/// How a tray read failed.
#[derive(Debug, Clone, PartialEq)]
pub struct TrayError {
    pub kind: TrayErrorKind,
    /// The error as the log says it (never a body).
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TrayErrorKind {
    /// HTTP 401/403: the key.
    Refused,
    /// HTTP 429 and the wait its `Retry-After` asked for.
    RateLimited(Duration),
    /// `REMOVED` (contract 7).
    Removed,
    /// Worth a retry soon (a network error, a 5xx).
    Transient,
    /// Anything else.
    Failed,
}

/// Texts loaded for a runtime.
#[derive(Debug, Clone)]
pub struct LoadedTexts {
    pub texts: Arc<Texts>,
    pub runtime: &'static str,
    pub source: TextsSource,
    /// When they were fetched (the server's) or cached (the copy's), Unix ms.
    pub at_ms: i64,
}

impl LoadedTexts {
    pub fn status(&self) -> TextsStatus {
        TextsStatus {
            source: self.source,
            fetched_at: Some(crate::time::rfc3339_ms(self.at_ms)),
        }
    }
}

/// No texts for a runtime: neither the server's nor a cached copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingTexts {
    pub runtime: &'static str,
    pub fetch: String,
    pub cache: Option<String>,
}

/// How a run ended, as its runtime judges it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    Completed,
    Failed(String),
    /// The runtime cannot work until the user fixes it (not logged in, bad key).
    Unusable(String),
}

/// A run's end, as the driver saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct RunEnd {
    /// The process was started (false: it could not be prepared or spawned).
    pub started: bool,
    pub outcome: RunOutcome,
    pub report: RunReport,
    pub duration_ms: u64,
    /// How its process ended (all empty when it was not started).
    pub exit: ProcessExit,
    /// The runtime binary's stamp when the run was judged unusable (a changed one gets a new
    /// chance).
    pub binary: Option<u64>,
}

/// How a run's process ended, for its record (`crate::history`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessExit {
    /// Its exit code, when it exited by itself.
    pub code: Option<i32>,
    /// The signal that ended it.
    pub signal: Option<i32>,
    /// `run_timeout` ended it.
    pub timed_out: bool,
}

/// How an invite's dismissal went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Dismissal {
    Dismissed,
    /// `404 INVITE_NOT_FOUND`: nothing to dismiss.
    NotPending,
    Failed(String),
}

/// What the machine is told.
#[derive(Debug, Clone)]
pub enum Input {
    /// Stop: gracefully (the run gets its grace), or now (its group is killed).
    Stop {
        now: bool,
        cause: &'static str,
    },
    /// SIGHUP's reading of the config: the new settings, or why they could not be read (the old
    /// ones stay). `endpoint_changed`: the API base or the key differ (the driver made a new
    /// client for them).
    Reload {
        config: Result<Box<ListenerConfig>, String>,
        endpoint_changed: bool,
    },
    /// SIGHUP for a profile whose settings did not change (`listen --all`).
    Recheck,
    /// The key file was read while the key is refused: a new key is in use.
    KeyChanged,

    Me {
        req: u64,
        result: Result<String, MeError>,
    },
    /// The host's pacer let this attempt go.
    Paced,
    Dialed {
        conn: u64,
        result: Result<(), DialError>,
    },
    /// Messages that were there back to back; the reader waits for the acks
    /// ([`Effect::SendAcks`]) before it reads on.
    Burst {
        conn: u64,
        frames: Vec<InFrame>,
        lost: Option<Lost>,
    },
    AcksSent {
        conn: u64,
        result: Result<usize, String>,
    },
    /// The reader lost the connection while no burst was under way.
    ConnLost {
        conn: u64,
        lost: Lost,
    },
    /// A close the machine asked for is done.
    Closed {
        conn: u64,
    },
    /// This agent's machine-wide lock: taken, or held by another listener (its pid).
    AgentLock {
        taken: bool,
        holder: Option<u32>,
    },

    Tray {
        cycle: u64,
        result: Result<Tray, TrayError>,
    },
    /// The answer to [`Effect::FetchTexts`] with the same `req`.
    Texts {
        req: u64,
        result: Result<LoadedTexts, MissingTexts>,
    },
    /// The host's answer to [`Effect::AskSlot`].
    Slot {
        cycle: u64,
        slot: Slot,
    },
    /// The run's process started; its log file.
    RunStarted {
        cycle: u64,
        log: String,
    },
    RunEnded {
        cycle: u64,
        end: RunEnd,
    },
    Dismissed {
        cycle: u64,
        invite_id: String,
        result: Dismissal,
    },
    /// The runtime binary's stamp now (`None`: it cannot be read).
    RuntimeBinary {
        cycle: u64,
        stamp: Option<u64>,
    },
    /// A check of the runtime (`doctor`'s): usable (its word), or why not.
    RuntimeChecked {
        result: Result<String, String>,
        binary: Option<u64>,
    },
    StatusWritten {
        result: Result<(), String>,
    },
    /// `false`: the file could not be touched (it is written instead).
    StatusTouched {
        ok: bool,
    },
}

/// A run the machine wants started.
#[derive(Debug, Clone)]
pub struct RunOrder {
    pub cycle: u64,
    /// The cycle's id as logs and run files name it.
    pub cycle_id: String,
    pub kind: RunKind,
    pub prompt: String,
    pub reasons: Vec<String>,
    /// Bare handle.
    pub handle: String,
    pub texts: Option<Arc<Texts>>,
}

/// A slot of the process for a run (`listen --all`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Slot {
    /// Granted after waiting this long.
    Granted { waited_ms: u64 },
    /// The run waits: its place (1 is next), the runs going and the slots.
    Queued {
        place: usize,
        running: usize,
        max: usize,
    },
    /// No run: the host's daily budget is spent (`listen --all`), until its day ends.
    OverBudget {
        reason: crate::policy::HoldReason,
        key: &'static str,
        until: i64,
    },
}

/// What the machine asks the driver (or the host) to do.
#[derive(Debug, Clone)]
pub enum Effect {
    /// `GET /v1/agents/me`.
    FetchMe {
        req: u64,
    },
    /// Ask the host's connect pacer (answered with [`Input::Paced`]).
    AskPacer,
    /// Open the socket (the upgrade with the key and the capabilities).
    Dial {
        conn: u64,
    },
    /// Write these acks and flush, then read on (also the answer a burst waits for when empty).
    SendAcks {
        conn: u64,
        ids: Vec<String>,
    },
    /// A ping after a clock jump.
    Probe {
        conn: u64,
    },
    /// Close with 1000 and drain the server's answer (at most a few seconds).
    CloseSocket {
        conn: u64,
    },
    /// Drop the connection without a close (the watchdog).
    DropSocket {
        conn: u64,
    },
    TakeAgentLock {
        handle: String,
    },
    /// Read the key again (answered with [`Input::KeyChanged`] when it changed).
    ReadKey,
    /// `GET /v1/inbox`.
    ReadTray {
        cycle: u64,
    },
    /// The texts; `use_cache`: fall back to the state dir's copy when the server's cannot be
    /// had; `quiet`: without the fetch's own log lines (a cycle that found none loaded).
    FetchTexts {
        req: u64,
        use_cache: bool,
        quiet: bool,
    },
    /// `doctor`'s check of the runtime (`presence_only`: only that the program is there).
    CheckRuntime {
        presence_only: bool,
    },
    StatRuntimeBinary {
        cycle: u64,
    },
    /// A slot of the process for this cycle's run (the host answers).
    AskSlot {
        cycle: u64,
    },
    /// The run ended or will not start: its slot goes to the next.
    ReleaseSlot,
    StartRun(Box<RunOrder>),
    /// Stop the run: SIGTERM and the grace, or (`now`) SIGKILL to its group at once; also the way
    /// to give up a cycle's request in flight.
    CancelRun {
        cycle: u64,
        now: bool,
    },
    DismissInvite {
        cycle: u64,
        invite_id: String,
    },
    SaveInvites(InviteMemory),
    /// Append this line to the history (`crate::history`): a run's start or end, a hold's, a
    /// queued wait's. The run policy's ledger is built from these lines at the next start.
    Record(Box<Record>),
    /// Keep what the run policy learnt besides runs (the loop guard's marks, the contacts, since
    /// when runs are held) in the state dir: its runs are in the history, never in this.
    SavePolicyMemory(Arc<Ledger>),
    WriteStatus(Box<Status>),
    TouchStatus,
    /// Tell systemd the state (`STATUS=`), for the process's one profile.
    Notify(ListenerState),
    /// The listener is started (its socket task runs, its texts were looked at): the host's
    /// READY waits for every profile's.
    Ready,
    /// The listener is done.
    Ended(ListenerEnd),
}

/// How a profile's listener ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerEnd {
    Stopped,
    /// Another listener serves this agent; its pid, as its lock says.
    TakenByOther {
        holder: Option<u32>,
    },
}

//! What a cycle does with the tray it read (design 4): run with `wake_instruction`, run with
//! `invite_prompt`, or no run.

use super::texts::Texts;
use super::tray::Tray;

/// Why the run was started; becomes `AGENTCHAT_RUN_KIND`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunKind {
    /// A card waits: `wake_instruction`.
    Wake,
    /// Only invites wait: `invite_prompt`.
    Invite,
}

impl RunKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RunKind::Wake => "wake",
            RunKind::Invite => "invite",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoRun {
    NothingWaiting,
    OnlyMuted,
    /// The tray's `you` is not this agent: another account's key.
    HandleMismatch { you: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleDecision {
    Run(RunKind),
    NoRun(NoRun),
}

/// Decides from the tray alone. `own_handle` in any spelling.
pub fn decide(tray: &Tray, own_handle: &str) -> CycleDecision {
    let _ = (tray, own_handle);
    todo!("core: decide")
}

/// The served prompt for a run kind; `None` when the texts lack it (then: no run).
pub fn prompt_for(kind: RunKind, texts: &Texts) -> Option<&str> {
    match kind {
        RunKind::Wake => texts.wake_instruction.as_deref(),
        RunKind::Invite => texts.invite_prompt.as_deref(),
    }
}

//! The page's fixed vocabulary: every metric's name, type and help line, the label values kept
//! (anything else is `other`), and the histograms' buckets.

/// The states `agentchat_listener_state` always lists (one of them is 1), as `status.json` names
/// them.
pub(super) const STATES: &[&str] = &[
    "starting",
    "connecting",
    "connected",
    "backoff",
    "key_refused",
    "runtime_unusable",
    "handle_mismatch",
    "upgrade_required",
    "queued",
    "stopping",
    "stopped",
];

/// Wake reasons kept as labels: the listener's own (`message`, `invite`, `connect`, and
/// `core::status::ListenerWake`'s) and the server's `wake` frame reasons of contract 3.4 and 3.5;
/// anything else is `other`.
pub(super) const WAKE_REASONS: &[&str] = &[
    "message",
    "invite",
    "connect",
    "reminder",
    "unanswered",
    "messages",
    "test",
    crate::core::frames::WAKE_REASON_UNSPECIFIED,
    "recovered",
    "backlog",
    "hold_ended",
];

pub(super) const RUN_OUTCOMES: &[&str] = &["completed", "failed", "unusable"];
pub(super) const CYCLE_OUTCOMES: &[&str] = &["completed", "failed", "unusable", "no_run"];
pub(super) const NO_RUN_REASONS: &[&str] = &[
    "nothing_waiting",
    "only_muted",
    "handle_mismatch",
    "tray_unreadable",
    "no_texts",
    "no_prompt",
    "runtime_unusable",
    "stopped",
    "held",
];

/// Why `[listen.policy]` holds runs (`core::policy::HoldReason`): `agentchat_held`'s labels.
pub(super) const HOLD_REASONS: &[&str] = &[
    "quiet_hours",
    "runs_per_hour",
    "runs_per_day",
    "cost_per_day",
    "loop_guard",
    "not_allowed",
];

/// Run durations, in seconds: a run takes seconds to the 15 min default limit.
pub(super) const RUN_BUCKETS: &[f64] = &[
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0,
];
/// From the first wake a cycle serves to its run's start: the coalescer's quiet window (3 s) to
/// its max delay (15 s), plus the tray read.
pub(super) const LATENCY_BUCKETS: &[f64] =
    &[0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 15.0, 30.0, 60.0, 300.0];

/// Waits for a run slot, in seconds: none while slots are free, a run's length (seconds to
/// minutes) per place ahead while they are not.
pub(super) const QUEUE_WAIT_BUCKETS: &[f64] = &[
    0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
];

/// One metric of the page: its name, type and help line.
pub(super) struct Def {
    pub(super) name: &'static str,
    pub(super) kind: &'static str,
    pub(super) help: &'static str,
}

pub(super) const WAKES: Def = Def {
    name: "agentchat_wakes_total",
    kind: "counter",
    help: "Wakes handed to the coalescer, by reason (message, invite, connect, the server's wake reasons; other).",
};
pub(super) const ACKS: Def = Def {
    name: "agentchat_acks_total",
    kind: "counter",
    help: "Acks sent for message.new frames.",
};
pub(super) const FRAMES: Def = Def {
    name: "agentchat_frames_total",
    kind: "counter",
    help: "Inbound socket frames, by type (contract frame types; other, malformed, oversized, binary, close, ping, pong).",
};
pub(super) const FRAMES_SKIPPED: Def = Def {
    name: "agentchat_frames_skipped_total",
    kind: "counter",
    help: "Frames skipped unread: binary, over 1 MiB, or malformed.",
};
pub(super) const CONNECTS: Def = Def {
    name: "agentchat_socket_connects_total",
    kind: "counter",
    help: "Socket connect attempts: result accepted (kind none), or refused with the kind of close or answer that refused it.",
};
pub(super) const CLOSES: Def = Def {
    name: "agentchat_socket_closes_total",
    kind: "counter",
    help: "Ends of an established socket, by close kind (ordinary, connect_budget, key_refused, upgrade_required).",
};
pub(super) const KEY_REFUSALS: Def = Def {
    name: "agentchat_key_refusals_total",
    kind: "counter",
    help: "Times the server refused the API key: on connect, by a close, or on a tray read.",
};
pub(super) const CYCLES: Def = Def {
    name: "agentchat_cycles_total",
    kind: "counter",
    help: "Ended cycles, by outcome (completed, failed, unusable, no_run).",
};
pub(super) const NO_RUN: Def = Def {
    name: "agentchat_no_run_cycles_total",
    kind: "counter",
    help: "Cycles that started no run, by reason.",
};
pub(super) const RUNS: Def = Def {
    name: "agentchat_runs_total",
    kind: "counter",
    help: "Ended runs, by runtime and outcome (completed, failed, unusable).",
};
pub(super) const RUN_COST: Def = Def {
    name: "agentchat_run_cost_usd_total",
    kind: "counter",
    help: "What runs cost in US dollars, as each run reported it (Claude Code's result event; Codex reports no cost), by runtime.",
};
pub(super) const RUN_TOKENS: Def = Def {
    name: "agentchat_run_tokens_total",
    kind: "counter",
    help: "Tokens runs used, as each run reported them, by runtime and kind (input, cached ones included; output).",
};
pub(super) const INVITES_COUNTED: Def = Def {
    name: "agentchat_invites_counted_total",
    kind: "counter",
    help: "Invites a run left pending, counted by the single-run invite rule.",
};
pub(super) const INVITES_DISMISSED: Def = Def {
    name: "agentchat_invites_dismissed_total",
    kind: "counter",
    help: "Invites dismissed by the single-run invite rule.",
};
pub(super) const RUN_DURATION: Def = Def {
    name: "agentchat_run_duration_seconds",
    kind: "histogram",
    help: "How long runs took, by runtime.",
};
pub(super) const WAKE_TO_RUN: Def = Def {
    name: "agentchat_wake_to_run_seconds",
    kind: "histogram",
    help: "From the first wake a cycle serves to the start of its run.",
};
pub(super) const STATE: Def = Def {
    name: "agentchat_listener_state",
    kind: "gauge",
    help: "The listener's state as status.json shows it: 1 for the current state, 0 for the others.",
};
pub(super) const READY: Def = Def {
    name: "agentchat_ready",
    kind: "gauge",
    help: "1 while the socket is up, the key accepted and a run can start (what /readyz answers 200 for).",
};
pub(super) const RUN_IN_PROGRESS: Def = Def {
    name: "agentchat_run_in_progress",
    kind: "gauge",
    help: "1 while a run is in progress.",
};
pub(super) const LAST_FRAME_AGE: Def = Def {
    name: "agentchat_last_frame_age_seconds",
    kind: "gauge",
    help: "Seconds since the last inbound frame (absent before the first).",
};
pub(super) const LOOP_AGE: Def = Def {
    name: "agentchat_main_loop_last_turn_age_seconds",
    kind: "gauge",
    help: "Seconds since the main loop last turned (every frame turns it, the server's heartbeat every 45 s included).",
};
pub(super) const START_TIME: Def = Def {
    name: "agentchat_start_time_seconds",
    kind: "gauge",
    help: "When the listener started, in seconds since the Unix epoch.",
};
pub(super) const PROFILE_FAILED: Def = Def {
    name: "agentchat_profile_failed",
    kind: "gauge",
    help: "1 for a profile the host could not start (a bad config table, its lock held elsewhere); why is in /readyz and the log. Absent while every profile started.",
};
pub(super) const RUNS_RUNNING: Def = Def {
    name: "agentchat_runs_running",
    kind: "gauge",
    help: "Runs going now, across the process's profiles (listen --all).",
};
pub(super) const RUNS_QUEUED: Def = Def {
    name: "agentchat_runs_queued",
    kind: "gauge",
    help: "Profiles waiting for a run slot (max_concurrent_runs, min_available_memory).",
};
pub(super) const HELD: Def = Def {
    name: "agentchat_held",
    kind: "gauge",
    help: "1 for the reason [listen.policy] holds this profile's runs now (status.json's held.reason), 0 for the others. A hold is the user's choice: /readyz stays 200.",
};
pub(super) const QUEUE_WAIT: Def = Def {
    name: "agentchat_run_queue_wait_seconds",
    kind: "histogram",
    help: "How long each run waited for its slot (0 when one was free).",
};

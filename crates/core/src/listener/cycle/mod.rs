//! One cycle (contract 4) as a state machine: read the tray (with its `429 Retry-After` and
//! transient retries, and `REMOVED`, contract 7), check `you`, decide run / no run and which
//! served text (`crate::decision`), the run policy's judgement, the texts if none are loaded, a
//! slot of the process, the run, then the tray again and the single-run invite rule
//! (`crate::invite_rule`) with its dismissals. Each step is a state; the I/O is an effect whose
//! answer moves it on. It ends in one [`Report`], the value the status is written from.

mod after;
mod run;

use super::config::Timing;
use super::io::{
    Effect, LoadedTexts, MissingTexts, ProcessExit, RunOutcome, TrayError, TrayErrorKind,
};
use super::policy::{RunPolicy, Seen};
use super::{Observer, Out};
use crate::decision::{self, CycleDecision, WakeCauses};
use crate::history::{After, Waited};
use crate::invite_rule::{InviteMemory, InviteVerdict};
use crate::log_events;
use crate::run_report::RunReport;
use crate::shown::Waiting;
use crate::status::{LastCycle, NoRunReason, Outcome, RunKind};
use crate::time::{Now, ms, rfc3339_ms};
use crate::tray::Tray;
use std::collections::VecDeque;
use std::time::Duration;

/// Tray reads tried inside one cycle before it ends without a run.
const TRAY_ATTEMPTS: u32 = 3;
/// The longest `Retry-After` waited inside a cycle; a longer one ends the cycle, and the
/// listener reads the tray again once it is over (its not-before time).
const MAX_RETRY_AFTER: Duration = Duration::from_secs(300);
/// How long a run may wait for its slot before the tray that decided it is read again: the card
/// may have been answered elsewhere meanwhile.
pub const STALE_DECISION: Duration = Duration::from_secs(30);

/// What a cycle did, for the status and the listener.
#[derive(Debug, Default)]
pub struct Report {
    pub last: LastCycle,
    /// The runtime said it cannot work (not logged in, ...): the reason.
    pub unusable: Option<String>,
    /// The tray's `you` named someone else.
    pub handle_mismatch: Option<String>,
    /// The tray was read and `you` matched (clears an earlier mismatch).
    pub handle_ok: bool,
    /// Texts loaded during the cycle because none were loaded before.
    pub loaded_texts: Option<LoadedTexts>,
    pub texts_missing: Option<MissingTexts>,
    /// The tray could not be read because the key was refused.
    pub key_refused: bool,
    /// The tray's route answered `REMOVED` (contract 7): what it said.
    pub removed: Option<String>,
    /// The tray read ended on a `429` whose `Retry-After` the cycle did not wait out.
    pub not_before: Option<Duration>,
    /// The tray after the run was cut short and the run made progress: the next cycle starts at
    /// once (`crate::decision::follow_up`).
    pub follow_up: bool,
    /// The run's own report of its cost and tokens: `Some` once a run was started.
    pub run_report: Option<RunReport>,
    pub policy: Seen,
    /// The conversations the tray before the run showed moving (`policy::loop_conversations`).
    pub conversations: Vec<String>,
    /// The cards the policy let wake the run (past the tray's cut too).
    pub cards: Vec<String>,
    /// Who and what waited on the tray that decided the cycle (a hold's: the held ones), for
    /// its record (`crate::history`).
    pub waited: Waited,
    /// What the tray after the run shows changed, when it was read.
    pub after: Option<After>,
    /// The run waited for a slot: its place when it was queued, and how long it waited (ms).
    pub queued: Option<(usize, u64)>,
    /// When the run's process started (wall ms).
    pub run_started_ms: Option<i64>,
    /// How the run's process ended and how long it ran (ms), once a run was asked for.
    pub run_exit: Option<(ProcessExit, u64)>,
    /// What the run spent as the ledger counts it (`RunPolicy::spent`), once it ended.
    pub spent: Option<crate::listener::policy::Spent>,
}

/// Where a cycle stands.
#[derive(Debug, Clone, PartialEq)]
enum Step {
    /// A tray read is in flight (`after`: the read after the run).
    Read {
        after: bool,
        attempt: u32,
    },
    /// Waiting before the next read.
    Retry {
        after: bool,
        attempt: u32,
        until: u64,
    },
    /// The texts for the prompt are being fetched.
    Texts {
        req: u64,
    },
    /// A slot of the process was asked for (monotonic ms).
    Slot {
        asked_at: u64,
    },
    /// The run was asked for and has not ended.
    Running,
    /// Dismissals under way; the verdicts left.
    Dismissing,
    Done,
}

/// One cycle.
#[derive(Debug)]
pub struct Cycle {
    /// The request tag its effects carry.
    pub seq: u64,
    pub id: String,
    reasons: Vec<String>,
    causes: WakeCauses,
    follow_ups: u32,
    step: Step,
    pub report: Report,
    before: Option<Tray>,
    kind: Option<RunKind>,
    prompt: Option<String>,
    /// Re-read the tray before the run (the slot took long).
    rereading: bool,
    /// The invites the run policy let wake this run: the invite rule counts only these.
    allowed_invites: Vec<String>,
    slot_held: bool,
    /// The run waits in the slots' queue.
    queued: bool,
    run_ended_wall: i64,
    outcome: Option<RunOutcome>,
    pending: VecDeque<(String, InviteVerdict)>,
    /// The memory of invites changed: saved when the cycle ends.
    invites_changed: bool,
}

/// What a cycle says to the listener as it goes.
#[derive(Debug, Clone, PartialEq)]
pub enum Note {
    /// The run's process started: its log file, and the conversations for the ledger.
    RunStarting {
        kind: RunKind,
        log: String,
        conversations: Vec<String>,
        /// The cards that woke it.
        cards: Vec<String>,
    },
    /// The cycle waits out the server's `429 Retry-After` until then (wall ms).
    Wait { until_wall: i64 },
    /// The run waits for a slot of the process.
    Queued(Waiting),
    /// No longer queued.
    LeftQueue,
}

/// What a cycle needs of its listener.
pub struct Ctx<'a> {
    pub now: Now,
    /// Bare handle.
    pub handle: &'a str,
    pub texts: Option<&'a LoadedTexts>,
    pub policy: &'a mut RunPolicy,
    pub invites: &'a mut InviteMemory,
    pub timing: Timing,
    pub obs: &'a dyn Observer,
    /// Whether a tray said a version this listener does not know yet.
    pub unknown_version_said: &'a mut bool,
    /// The next texts request tag.
    pub next_req: &'a mut u64,
    /// The listener knows the tray's route is switched off (`REMOVED`): said at ERROR once.
    pub removed_known: bool,
    /// What earlier trays said of mutes.
    pub mutes: &'a mut super::mutes::Mutes,
    /// What the socket heard of unread messages.
    pub heard: &'a mut crate::policy::Heard,
}

impl Cycle {
    /// A cycle starts: its first read goes out. `runtime_unusable`: no run can start, and the
    /// cycle ends at once.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        seq: u64,
        reasons: Vec<String>,
        causes: WakeCauses,
        follow_ups: u32,
        runtime_unusable: bool,
        now: Now,
        out: &mut Out<Note>,
    ) -> Cycle {
        let id = format!(
            "c{:x}-{:04x}",
            now.wall_u64(),
            out.rng.below(u64::from(u16::MAX) + 1)
        );
        tracing::info!(event = %log_events::CYCLE_START, cycle_id = %id, reasons = %reasons.join(","), "cycle started");
        let mut c = Cycle {
            seq,
            report: Report {
                last: LastCycle::started(id.clone(), rfc3339_ms(now.wall_ms), reasons.clone()),
                ..Default::default()
            },
            id,
            reasons,
            causes,
            follow_ups,
            step: Step::Read {
                after: false,
                attempt: 1,
            },
            before: None,
            kind: None,
            prompt: None,
            rereading: false,
            allowed_invites: Vec::new(),
            slot_held: false,
            queued: false,
            run_ended_wall: 0,
            outcome: None,
            pending: VecDeque::new(),
            invites_changed: false,
        };
        if runtime_unusable {
            c.end_no_run(NoRunReason::RuntimeUnusable, out);
        } else {
            out.effect(Effect::ReadTray { cycle: seq });
        }
        c
    }

    pub fn is_done(&self) -> bool {
        self.step == Step::Done
    }

    /// The run is going.
    pub fn is_running(&self) -> bool {
        self.step == Step::Running
    }

    /// A run was started (or is going).
    pub fn run_started(&self) -> bool {
        self.report.last.run_started
    }

    /// The next time the cycle must be looked at.
    pub fn deadline(&self) -> Option<u64> {
        match self.step {
            Step::Retry { until, .. } => Some(until),
            _ => None,
        }
    }

    /// Time passed: a retry's wait may be over.
    pub fn on_time(&mut self, now: Now, out: &mut Out<Note>) {
        if let Step::Retry {
            after,
            attempt,
            until,
        } = self.step
            && until <= now.mono_ms
        {
            self.step = Step::Read { after, attempt };
            out.effect(Effect::ReadTray { cycle: self.seq });
        }
    }

    /// A tray read answered.
    pub fn on_tray(&mut self, ctx: &mut Ctx, result: Result<Tray, TrayError>, out: &mut Out<Note>) {
        let Step::Read { after, attempt } = self.step else {
            return;
        };
        match result {
            Ok(tray) => {
                let when = if after { "after" } else { "before" };
                log_tray(&self.id, when, &tray, ctx.unknown_version_said);
                if after {
                    self.after_tray(ctx, tray, out);
                } else {
                    self.before_tray(ctx, tray, out);
                }
            }
            Err(e) => {
                let transient = matches!(
                    e.kind,
                    TrayErrorKind::Transient | TrayErrorKind::RateLimited(_)
                );
                let too_long =
                    matches!(e.kind, TrayErrorKind::RateLimited(d) if d > MAX_RETRY_AFTER);
                if transient && !too_long && attempt < TRAY_ATTEMPTS {
                    let wait = match e.kind {
                        TrayErrorKind::RateLimited(d) => d,
                        _ => Duration::from_millis(500 * (1 << attempt)),
                    };
                    tracing::info!(event = %log_events::TRAY_RETRY, cycle_id = %self.id, error = %e.detail, wait_ms = ms(wait), "tray read failed; retrying");
                    if matches!(e.kind, TrayErrorKind::RateLimited(_)) {
                        out.note(Note::Wait {
                            until_wall: ctx.now.wall_ms.saturating_add(ms(wait) as i64),
                        });
                    }
                    self.step = Step::Retry {
                        after,
                        attempt: attempt + 1,
                        until: ctx.now.after(wait),
                    };
                } else if after {
                    // The wait is the server's for every read, the next cycle's too.
                    if let TrayErrorKind::RateLimited(wait) = e.kind {
                        self.report.not_before = Some(wait);
                    }
                    tracing::warn!(event = %log_events::TRAY_UNREADABLE, cycle_id = %self.id, error = %e.detail, "the tray after the run could not be read; the invite rule counts nothing this time");
                    self.finish(ctx, out);
                } else {
                    self.before_unreadable(e, ctx.removed_known, out);
                }
            }
        }
    }

    /// Step 1 failed: no run (the server re-wakes).
    fn before_unreadable(&mut self, e: TrayError, removed_known: bool, out: &mut Out<Note>) {
        self.report.key_refused = e.kind == TrayErrorKind::Refused;
        if let TrayErrorKind::RateLimited(wait) = e.kind {
            self.report.not_before = Some(wait);
        }
        if e.kind == TrayErrorKind::Removed {
            // Contract 7: retrying will not succeed; the profile is not ready until a tray is
            // read again (issue 29 item 12). Said at ERROR once per episode, at debug after.
            if removed_known {
                tracing::debug!(event = %log_events::ROUTE_REMOVED, cycle_id = %self.id, error = %e.detail, "the tray's route is still switched off");
            } else {
                tracing::error!(event = %log_events::ROUTE_REMOVED, cycle_id = %self.id, error = %e.detail, "the tray could not be read: the server switched its route off; no run until agentchat is updated");
            }
            self.report.removed = Some(e.detail);
        } else {
            tracing::warn!(event = %log_events::TRAY_UNREADABLE, cycle_id = %self.id, error = %e.detail, "the tray could not be read; no run (the server re-wakes)");
        }
        self.end_no_run(NoRunReason::TrayUnreadable, out);
    }

    /// Steps 2 to 4 on the tray before the run: `you`, the decision, the policy, the prompt.
    fn before_tray(&mut self, ctx: &mut Ctx, tray: Tray, out: &mut Out<Note>) {
        match self.decide(ctx, &tray) {
            Ok(kind) => {
                self.before = Some(tray);
                self.kind = Some(kind);
                if ctx.texts.is_none() {
                    // None loaded for this runtime: one more try now, the server's, else the
                    // cached copy.
                    *ctx.next_req += 1;
                    let req = *ctx.next_req;
                    self.step = Step::Texts { req };
                    out.effect(Effect::FetchTexts {
                        req,
                        use_cache: true,
                        quiet: true,
                    });
                } else {
                    self.with_texts(ctx, out);
                }
            }
            Err(why) => self.end_no_run(why, out),
        }
    }

    /// Steps 2 and 3 and the policy: `Ok(kind)` when a run is due and may start.
    fn decide(&mut self, ctx: &mut Ctx, tray: &Tray) -> Result<RunKind, NoRunReason> {
        let mutes = &*ctx.mutes;
        let decided = decision::decide_knowing(tray, ctx.handle, &self.causes, &|c| mutes.get(c));
        ctx.mutes.see(tray);
        ctx.heard.see(tray);
        match decided {
            CycleDecision::NoRun(NoRunReason::HandleMismatch) => {
                let you = tray.you.clone().unwrap_or_default();
                // The listener logs the error once per mismatch episode, not once per cycle.
                tracing::debug!(event = %log_events::TRAY_YOU_MISMATCH, cycle_id = %self.id, you = %crate::handle::shown(&you), handle = %crate::handle::shown(ctx.handle), "the tray belongs to another agent than this key's");
                self.report.handle_mismatch = Some(you);
                Err(NoRunReason::HandleMismatch)
            }
            CycleDecision::NoRun(why) => {
                self.report.handle_ok = true;
                self.report.policy = Seen::Clear;
                Err(why)
            }
            CycleDecision::Run(kind) => {
                self.report.handle_ok = true;
                self.report.conversations = crate::policy::loop_conversations(tray);
                self.report.waited = Waited::of(tray, None, None);
                match ctx.policy.judge(tray, kind, ctx.heard, ctx.now.wall_ms) {
                    Ok((kind, cards)) => {
                        self.report.cards = cards;
                        self.report.policy = Seen::Clear;
                        self.allowed_invites = ctx.policy.allowed_invites(tray);
                        Ok(kind)
                    }
                    Err(hold) => {
                        self.report.waited =
                            Waited::of(tray, Some(&hold.cards), Some(&hold.invites));
                        tracing::debug!(event = %log_events::POLICY_HELD, cycle_id = %self.id, reason = hold.reason.as_str(), key = hold.key, cards = hold.cards.len(), invites = hold.invites.len(), "the run policy holds this run");
                        self.report.policy = Seen::Held(hold);
                        Err(NoRunReason::Held)
                    }
                }
            }
        }
    }

    /// The texts the cycle asked for came (or not).
    pub fn on_texts(
        &mut self,
        ctx: &mut Ctx,
        req: u64,
        result: Result<LoadedTexts, MissingTexts>,
        out: &mut Out<Note>,
    ) -> bool {
        if self.step != (Step::Texts { req }) {
            return false;
        }
        match result {
            Ok(loaded) => self.report.loaded_texts = Some(loaded),
            Err(missing) => {
                tracing::debug!(event = %log_events::TEXTS_FETCH_FAILED, runtime = missing.runtime, error = %missing.fetch, "texts still unavailable");
                self.report.texts_missing = Some(missing);
            }
        }
        let loaded = self.report.loaded_texts.clone();
        let texts = ctx.texts.or(loaded.as_ref());
        let mut inner = Ctx {
            texts,
            now: ctx.now,
            handle: ctx.handle,
            policy: ctx.policy,
            invites: ctx.invites,
            timing: ctx.timing,
            obs: ctx.obs,
            unknown_version_said: ctx.unknown_version_said,
            next_req: ctx.next_req,
            removed_known: ctx.removed_known,
            mutes: ctx.mutes,
            heard: ctx.heard,
        };
        self.with_texts(&mut inner, out);
        true
    }

    /// Step 4: the served prompt; then a slot of the process.
    fn with_texts(&mut self, ctx: &mut Ctx, out: &mut Out<Note>) {
        let Some(kind) = self.kind else {
            return;
        };
        let Some(texts) = ctx.texts else {
            // The listener says this once per episode (the start already said it).
            tracing::debug!(event = %log_events::NO_TEXTS, cycle_id = %self.id, "no texts loaded");
            return self.end_no_run(NoRunReason::NoTexts, out);
        };
        match decision::prompt_for(kind, &texts.texts) {
            Some(prompt) => {
                self.prompt = Some(prompt.to_string());
                self.step = Step::Slot {
                    asked_at: ctx.now.mono_ms,
                };
                out.effect(Effect::AskSlot { cycle: self.seq });
            }
            None => {
                tracing::error!(event = %log_events::TEXTS_MISSING, cycle_id = %self.id, field = if kind == RunKind::Wake { "wake_instruction" } else { "invite_prompt" }, "the served texts lack the prompt for this run; no run");
                self.end_no_run(NoRunReason::NoPrompt, out);
            }
        }
    }

    /// The listener stops: a cycle short of its run ends now (`stopped`); one after its run
    /// skips the rest of step 6. A running run is the listener's to end (its grace).
    pub fn stop(&mut self, ctx: &mut Ctx, out: &mut Out<Note>) {
        match self.step {
            Step::Done | Step::Running => {}
            Step::Read { after: true, .. } | Step::Retry { after: true, .. } | Step::Dismissing => {
                out.effect(Effect::CancelRun {
                    cycle: self.seq,
                    now: true,
                });
                self.finish(ctx, out);
            }
            _ => {
                out.effect(Effect::CancelRun {
                    cycle: self.seq,
                    now: true,
                });
                self.end_no_run(NoRunReason::Stopped, out);
            }
        }
    }

    /// The stop cut the run short (a second signal, or its grace and the slack passed): it
    /// counts as failed.
    pub fn cut_short(&mut self, why: &str, now: Now, out: &mut Out<Note>) {
        self.release_slot(out);
        self.report.last.ended_at = Some(rfc3339_ms(now.wall_ms));
        if self.report.last.run_started {
            self.report.last.outcome = Some(Outcome::Failed);
            self.report.last.failure = Some(why.to_string());
        }
        self.step = Step::Done;
    }

    fn release_slot(&mut self, out: &mut Out<Note>) {
        if std::mem::take(&mut self.slot_held) {
            out.effect(Effect::ReleaseSlot);
        }
    }

    /// Ends without a run.
    fn end_no_run(&mut self, why: NoRunReason, out: &mut Out<Note>) {
        if matches!(self.step, Step::Slot { .. }) {
            out.note(Note::LeftQueue);
        }
        self.release_slot(out);
        tracing::info!(event = %log_events::NO_RUN, cycle_id = %self.id, reason = why.as_str(), "no run this cycle");
        let last = &mut self.report.last;
        last.outcome = Some(Outcome::NoRun);
        last.no_run_reason = Some(why);
        last.failure = None;
        self.step = Step::Done;
    }

    /// Ends after a run (or its attempt): the outcome into the status.
    fn finish(&mut self, ctx: &mut Ctx, out: &mut Out<Note>) {
        if std::mem::take(&mut self.invites_changed) {
            out.effect(Effect::SaveInvites(ctx.invites.clone()));
        }
        let last = &mut self.report.last;
        let (outcome, failure) = match self.outcome.take() {
            Some(RunOutcome::Completed) | None => (Outcome::Completed, None),
            Some(RunOutcome::Failed(why)) => (Outcome::Failed, Some(why)),
            Some(RunOutcome::Unusable(why)) => {
                self.report.unusable = Some(why.clone());
                (Outcome::Unusable, Some(why))
            }
        };
        last.outcome = Some(outcome);
        last.no_run_reason = None;
        last.failure = failure;
        self.step = Step::Done;
    }

    /// The cycle's end, logged, with its end time.
    pub fn close(&mut self, now: Now) {
        self.report.last.ended_at = Some(rfc3339_ms(now.wall_ms));
        let last = &self.report.last;
        tracing::info!(
            event = %log_events::CYCLE_END,
            cycle_id = %self.id,
            run_started = last.run_started,
            outcome = last.outcome.map(Outcome::as_str),
            no_run_reason = last.no_run_reason.map(NoRunReason::as_str),
            "cycle ended"
        );
    }
}

/// The `tray_read` line, and the tray's skipped entries (by index and field, never text).
fn log_tray(cycle_id: &str, when: &str, tray: &Tray, unknown_version_said: &mut bool) {
    if let Some(v) = tray.unknown_version()
        && !std::mem::replace(unknown_version_said, true)
    {
        tracing::warn!(event = %log_events::TRAY_VERSION_UNKNOWN, cycle_id = %cycle_id, version = v, known = crate::tray::KNOWN_VERSION, "the tray says version {v}; this agentchat knows version 1 and reads the fields it knows (contract 3.1); update agentchat");
    }
    tracing::info!(
        event = %log_events::TRAY_READ,
        cycle_id = %cycle_id,
        when = when,
        cards = tray.conversations.len(),
        muted = tray.conversations.iter().filter(|c| c.is_muted()).count(),
        truncated = tray.is_truncated(),
        invites = tray.invite_ids().len(),
        "tray read"
    );
    for (list, skipped) in [
        ("conversations", &tray.skipped_cards),
        ("invites", &tray.skipped_invites),
    ] {
        for s in skipped {
            tracing::warn!(event = %log_events::TRAY_ENTRY_SKIPPED, cycle_id = %cycle_id, when = when, list = list, index = s.index, reason = %s.reason, "a malformed tray entry was skipped; the rest of the tray is used");
        }
    }
}

//! The listener's start, what the socket tells it, SIGHUP's reload, and its graceful stop.

use super::cycle::Ctx;
use super::socket::Note;
use super::{Effect, ListenerConfig, ListenerEnd, STOP_SLACK, Stopping, Timing, windows};
use super::{Listener, TEXTS_REFRESH};
use crate::log_events;
use crate::shown::Phase;
use crate::status::{ListenerWake, SocketState};
use crate::time::{Now, ms};

impl Listener {
    /// The start: said, the status written, the runtime's presence and the texts asked for. The
    /// socket starts once both answered.
    pub(super) fn announce_start(&mut self, now: Now) {
        tracing::info!(
            event = %log_events::LISTENER_START,
            pid = self.cfg.pid,
            profile = %self.cfg.profile,
            api_base = %self.cfg.api_base,
            runtime = self.cfg.runtime.as_str(),
            state_dir = %self.cfg.state_dir,
            seed = self.out.seed,
            "listener starting"
        );
        self.write_status(now);
        self.out.effects.push_back(Effect::CheckRuntime {
            presence_only: true,
        });
        self.refresh_texts();
    }

    /// One of the start's looks answered; after both, the socket starts and the listener is
    /// ready (the host's READY waits for every profile's).
    pub(super) fn started_part(&mut self, now: Now) {
        if self.life.starting == 0 {
            return;
        }
        self.life.starting -= 1;
        if self.life.starting > 0 || self.shown.flags.phase != Phase::Starting {
            return;
        }
        let mut out = self.out.out();
        let p = super::socket_params(&self.cfg, self.timing, self.obs.as_ref());
        self.socket.start(now, &p, &mut out);
        let notes = out.notes;
        self.shown.flags.phase = Phase::Running;
        self.out.effects.push_back(Effect::Ready);
        self.socket_notes(now, notes);
        self.status.changed();
    }

    /// What the socket said.
    pub(super) fn socket_notes(&mut self, now: Now, notes: Vec<Note>) {
        for n in notes {
            match n {
                Note::Handle(h) => {
                    self.shown.pending_handle = Some(h.clone());
                    self.out
                        .effects
                        .push_back(Effect::TakeAgentLock { handle: h });
                }
                Note::State {
                    state,
                    next_retry_at,
                    detail,
                } => {
                    if state == SocketState::KeyRefused && self.shown.view.state != state {
                        self.waits.key_check_at = Some(now.mono_ms);
                    }
                    self.shown.view.state = state;
                    self.shown.view.next_retry_at = next_retry_at;
                    self.shown.view.detail = detail;
                    self.status.changed();
                }
                Note::Connected => {
                    self.shown.counters.connects += 1;
                    self.shown.view.last_connected = Some(now.wall_ms);
                }
                Note::Burst {
                    frames,
                    skipped,
                    acked,
                } => {
                    self.shown.counters.frames += frames;
                    self.shown.counters.frames_skipped += skipped;
                    self.shown.counters.acks += acked;
                    self.shown.view.last_frame = Some(now.wall_ms);
                }
                Note::Wake { cause, frames } => self.record(&cause, frames, now),
                Note::Refused { capabilities } => self.on_refused_capabilities(capabilities),
                Note::Heard(messages) => {
                    for m in messages {
                        let muted = self.kept.mutes.get(&m.conversation);
                        self.kept.heard.hear(m, muted);
                    }
                }
            }
        }
    }

    /// The server did not accept every capability asked for: said at WARN naming them (once
    /// per change), and shown in the status until a server accepts them.
    fn on_refused_capabilities(&mut self, refused: Vec<String>) {
        if refused == self.shown.capabilities_refused {
            return;
        }
        if !refused.is_empty() {
            let without: Vec<&str> = refused
                .iter()
                .map(|c| match c.as_str() {
                    "rewake" => "without rewake, held and failed cards are never re-woken (contract 5)",
                    "heartbeat" => "without heartbeat, a quiet socket is proven only by the idle watchdog",
                    "ack" => "without ack, the server marks a message delivered when it hands it over (deprecated, contract 7)",
                    _ => "",
                })
                .filter(|w| !w.is_empty())
                .collect();
            tracing::warn!(
                event = %log_events::CAPABILITIES_REFUSED,
                refused = %refused.join(","),
                "the server did not accept the capabilities {}: {}",
                refused.join(", "),
                without.join("; ")
            );
        }
        self.shown.capabilities_refused = refused;
        self.status.changed();
    }

    /// This agent's machine-wide lock (one listener per agent): taken, and the handle is this
    /// listener's; or another listener serves the agent, and this one stops.
    pub(super) fn on_agent_lock(&mut self, now: Now, taken: bool, holder: Option<u32>) {
        let Some(h) = self.shown.pending_handle.take() else {
            return;
        };
        if taken {
            tracing::info!(event = %log_events::HANDLE, handle = %crate::handle::shown(&h), "this key's agent");
            self.shown.handle = Some(h);
            self.status.changed();
        } else {
            self.life.end = ListenerEnd::TakenByOther { holder };
            self.stop(now, false, "another listener serves this agent");
        }
    }

    /// SIGHUP: the settings again (or the old ones, which the driver kept and said why); a
    /// refused key or an unusable runtime gets a new chance, and the texts are fetched again.
    pub(super) fn reload(
        &mut self,
        now: Now,
        config: Result<Box<ListenerConfig>, String>,
        endpoint_changed: bool,
    ) {
        if let Ok(cfg) = config {
            self.take_settings(*cfg, now);
        }
        self.release_loops(now);
        // A person acted: the runtime gets a new chance at once, and its looks start over; it
        // is looked at as at the start (for Claude Code a login no file shows is checked), so a
        // runtime that still cannot work is found now, not by the next run.
        self.reload_runtime(now);
        self.out.effects.push_back(Effect::CheckRuntime {
            presence_only: true,
        });
        self.socket_params_changed(now, endpoint_changed);
        self.status.changed();
        self.refresh_texts();
    }

    /// Reloaded settings take over.
    fn take_settings(&mut self, cfg: ListenerConfig, now: Now) {
        let (old, new) = (
            self.cfg.runtime.texts_runtime(),
            cfg.runtime.texts_runtime(),
        );
        if old != new {
            // Texts are keyed by runtime: the old runtime's are not this one's. Until its own
            // come (the server's, else its cached copy) nothing runs.
            tracing::info!(event = %log_events::TEXTS_RUNTIME_CHANGED, from = old, to = new, "the runtime reads other texts now; loading them");
            self.texts.runtime_changed();
        }
        let applied = self.wakes.set_windows(windows(&cfg));
        self.windows_in_effect(applied);
        let lifted = self.policy.reload(&cfg.policy, cfg.zone.clone());
        if cfg.scale != self.cfg.scale {
            self.timing = Timing::new(cfg.scale);
            self.waits.texts_refresh_at = now.after(self.timing.of(TEXTS_REFRESH));
        }
        self.cfg = cfg;
        if lifted {
            // Runs were held and the rules changed: the tray is read now, not at the next
            // message.
            self.own_wake(ListenerWake::HoldEnded, now);
        }
    }

    /// A SIGHUP lets the conversations the loop guard holds go: the tray is read at once.
    pub(super) fn release_loops(&mut self, now: Now) {
        if self.policy.release_loops(now.wall_ms) {
            self.save_policy_memory();
            self.own_wake(ListenerWake::HoldEnded, now);
        }
    }

    /// The policy's ledger when it changed without a run (`RunPolicy::unsaved`).
    pub(super) fn save_policy_memory(&mut self) {
        if let Some(ledger) = self.policy.unsaved() {
            self.out.effects.push_back(Effect::SavePolicyMemory(ledger));
        }
    }

    /// The socket hears of new settings (a reload, a new key).
    pub(super) fn socket_params_changed(&mut self, now: Now, endpoint_changed: bool) {
        let mut out = self.out.out();
        let p = super::socket_params(&self.cfg, self.timing, self.obs.as_ref());
        self.socket.on_params(now, endpoint_changed, &p, &mut out);
        let notes = out.notes;
        self.socket_notes(now, notes);
    }

    /// Stop: the run gets its grace (`at_once`: its group is killed now), the socket closes
    /// with 1000, the status says `stopped`. A second stop while stopping cuts the wait short.
    pub(super) fn stop(&mut self, now: Now, at_once: bool, cause: &'static str) {
        if self.life.stopping.is_some() {
            if at_once {
                self.forced(now);
            }
            return;
        }
        tracing::info!(event = %log_events::STOPPING, signal = cause, "stopping");
        self.shown.flags.phase = Phase::Stopping;
        self.cycles.stamping = None;
        self.write_status(now);
        let grace = self.cfg.kill_grace;
        let wait = grace.saturating_add(STOP_SLACK);
        self.life.stopping = Some(Stopping {
            deadline: now.after(wait),
        });
        // The socket closes with 1000 now: a message that arrives while the run winds down is
        // the server's to deliver again, never acked by a listener that will not run it.
        self.stop_socket(now);
        if let Some(seq) = self.cycles.cycle.as_ref().map(|c| c.seq) {
            self.with_cycle(now, seq, |c, ctx: &mut Ctx, out| c.stop(ctx, out));
        }
        if let Some(c) = &self.cycles.cycle {
            if at_once {
                self.forced(now);
                return;
            }
            let what = if c.run_started() {
                format!(
                    "the run to end: it has SIGTERM, and SIGKILL goes to its whole process group when \
                     the grace of {} is over",
                    humantime::format_duration(grace)
                )
            } else {
                "the cycle to wind down (no run started)".to_string()
            };
            tracing::info!(
                event = %log_events::STOP_WAITING,
                cycle_id = %c.id,
                run_log = c.report.last.run_log.as_deref(),
                grace_ms = ms(grace),
                wait_ms = ms(wait),
                "waiting up to {} for {what}; SIGTERM or SIGINT again ends it now",
                humantime::format_duration(wait),
            );
            self.out.effects.push_back(Effect::CancelRun {
                cycle: c.seq,
                now: false,
            });
        }
        self.stop_progress(now);
    }

    /// A second stop signal: the run's group is killed now, or the socket's close is not waited
    /// for.
    fn forced(&mut self, now: Now) {
        if let Some(mut c) = self.cycles.cycle.take() {
            tracing::warn!(event = %log_events::STOP_FORCED, signal = "second", "second stop signal: killing the run's process group now");
            self.out.effects.push_back(Effect::CancelRun {
                cycle: c.seq,
                now: true,
            });
            let mut out = self.out.out();
            c.cut_short(
                "killed with its process group: a second stop signal",
                now,
                &mut out,
            );
            self.cycles.cycle = Some(c);
            self.take_done_cycle(now);
        } else if let Some(conn) = self.socket.conn() {
            tracing::warn!(event = %log_events::STOP_FORCED, signal = "second", "second stop signal: not waiting for the socket's close");
            self.out.effects.push_back(Effect::DropSocket { conn });
            self.life.socket_dropped = true;
        }
        self.stop_progress(now);
    }

    /// The grace and the slack passed and the cycle did not end: its run's group is killed.
    pub(super) fn abandon_cycle(&mut self, now: Now) {
        self.life.stopping = Some(Stopping { deadline: u64::MAX });
        let Some(mut c) = self.cycles.cycle.take() else {
            return;
        };
        tracing::warn!(
            event = %log_events::CYCLE_ABANDONED,
            "the cycle did not end within the grace; abandoning it"
        );
        self.out.effects.push_back(Effect::CancelRun {
            cycle: c.seq,
            now: true,
        });
        let mut out = self.out.out();
        c.cut_short(
            "killed with its process group: the grace was over",
            now,
            &mut out,
        );
        self.cycles.cycle = Some(c);
        self.take_done_cycle(now);
        self.stop_progress(now);
    }

    fn stop_socket(&mut self, now: Now) {
        if !self.life.socket_stopping {
            self.life.socket_stopping = true;
            let mut out = self.out.out();
            let p = super::socket_params(&self.cfg, self.timing, self.obs.as_ref());
            self.socket.stop(now, &p, &mut out);
        }
    }

    /// While stopping: once no cycle is left and the socket has closed, the listener ends.
    pub(super) fn stop_progress(&mut self, now: Now) {
        if self.life.stopping.is_none() || self.life.ended || self.cycles.cycle.is_some() {
            return;
        }
        if !self.socket.is_stopped() && !self.life.socket_dropped {
            self.stop_socket(now);
            if !self.socket.is_stopped() {
                return;
            }
        }
        self.shown.flags.phase = Phase::Stopped;
        self.write_status(now);
        tracing::info!(event = %log_events::STOPPED, "listener stopped");
        self.life.ended = true;
        self.out.effects.push_back(Effect::Ended(self.life.end));
    }
}

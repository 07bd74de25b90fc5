//! The listener's start and its graceful stop.

use super::*;
use crate::log_events;

impl Daemon {
    pub(super) fn new(start: Start) -> Result<Daemon, ApiError> {
        let Start {
            source,
            settings,
            key,
            state,
            metrics,
            notify_status,
            pacer,
            admission,
        } = start;
        let api = Api::new(&settings.api_base, key.clone())?;
        let now = SystemTime::now();
        let status = Status {
            state: ListenerState::Starting,
            since: time::rfc3339(now),
            socket: Some(SocketState::Connecting),
            pid: std::process::id(),
            profile: settings.profile.clone(),
            handle: None,
            api_base: settings.api_base.clone(),
            runtime: settings.listen.runtime.as_str().to_string(),
            key_source: key_source_label(&settings.key_source),
            updated_at: time::rfc3339(now),
            started_at: time::rfc3339(now),
            last_frame_at: None,
            last_connected_at: None,
            last_wake: None,
            last_cycle: None,
            next_retry_at: None,
            detail: None,
            texts: TextsStatus::default(),
            counters: Counters::default(),
            held: None,
            usage: Default::default(),
            file_modified: None,
        };
        let (quiet_ms, max_delay_ms) = windows(&settings);
        Ok(Daemon {
            source,
            settings,
            key,
            api,
            state,
            started: Instant::now(),
            status,
            flags: ListenerFlags {
                starting: true,
                unusable: None,
                unusable_binary: None,
                mismatch: None,
                removed: None,
                stopping: false,
                stopped: false,
                queued: None,
            },
            socket_state: SocketState::Connecting,
            texts: None,
            handle: None,
            pending_reasons: BTreeSet::new(),
            wake_causes: Default::default(),
            coalescer: Coalescer::new(quiet_ms, max_delay_ms),
            notify_status,
            pacer,
            status_write_failing: false,
            status_dirty: false,
            status_hold: Default::default(),
            status_file: None,
            status_proof: Instant::now(),
            pending_windows: None,
            texts_missing_logged: false,
            last_frame: None,
            metrics,
            agent: Default::default(),
            runtime_recheck: Recheck::default(),
            texts_recheck: Recheck::default(),
            tray_not_before: Recheck::default(),
            status_retry: Recheck::default(),
            removed_recheck: Recheck::default(),
            texts_owed: false,
            follow_ups: 0,
            runtime_check_recovers: false,
            admission: admission.map(|a| {
                let who = a.member();
                (a, who)
            }),
            queued_rx: None,
        })
    }

    pub(super) fn announce_start(&mut self) {
        tracing::info!(
            event = %log_events::LISTENER_START,
            pid = std::process::id(),
            profile = %self.settings.profile,
            api_base = %self.settings.api_base,
            runtime = self.settings.listen.runtime.as_str(),
            state_dir = %self.state.root.display(),
            "listener starting"
        );
        self.write_status();
    }

    /// The socket task is started: no longer `starting` (the host tells systemd).
    pub(super) fn ready(&mut self) {
        self.flags.starting = false;
    }

    /// Graceful stop: the run gets its grace, the socket closes with 1000, the status says
    /// `stopped`. `HostCommand::StopNow` (a second SIGTERM or SIGINT) cuts the wait short: the run's
    /// group is killed at once (however long `kill_grace` is) and the listener ends.
    pub(super) async fn stop(&mut self, mut w: Wiring, commands: &mut mpsc::Receiver<HostCommand>) {
        self.flags.stopping = true;
        self.write_status();
        let _ = w.shutdown.send(true);
        // A run handed to the supervisor just before the signal came is still to be heard of.
        if let Some(run) = w.run_starting.take().and_then(|mut rx| rx.try_recv().ok()) {
            self.on_run_starting(run);
        }
        let mut forced = false;
        if let Some(t) = w.cycle.take() {
            forced = self.wait_for_cycle(t, commands).await;
        }
        if forced {
            w.close_socket().await;
        } else {
            tokio::select! {
                _ = w.close_socket() => {}
                signal = stop_now(commands) => {
                    tracing::warn!(event = %log_events::STOP_FORCED, signal, "second stop signal: not waiting for the socket's close");
                }
            }
        }
        self.flags.stopped = true;
        self.write_status();
        tracing::info!(event = %log_events::STOPPED, "listener stopped");
    }

    /// While stopping: says once what it waits for and how long, then waits for the cycle to wind
    /// down (its run has SIGTERM and the grace). A second signal, or the grace and some slack
    /// passing, ends the wait: the cycle's task is dropped, and with it the run's supervisor,
    /// which SIGKILLs the run's process group. True when a second signal ended it.
    pub(super) async fn wait_for_cycle(
        &mut self,
        mut t: JoinHandle<CycleReport>,
        commands: &mut mpsc::Receiver<HostCommand>,
    ) -> bool {
        let grace = self.settings.listen.kill_grace;
        let wait = grace.saturating_add(STOP_SLACK);
        let cycle = self.status.last_cycle.as_ref();
        let cycle_id = cycle.map(|c| c.id.as_str());
        let run_log = cycle.and_then(|c| c.run_log.as_deref());
        let what = if cycle.is_some_and(|c| c.run_started) {
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
            cycle_id,
            run_log,
            grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX),
            wait_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
            "waiting up to {} for {what}; SIGTERM or SIGINT again ends it now",
            humantime::format_duration(wait),
        );
        let why = tokio::select! {
            r = tokio::time::timeout(wait, &mut t) => match r {
                Ok(Ok(report)) => {
                    self.on_cycle_end(report);
                    return false;
                }
                Ok(Err(_)) => return false,
                Err(_) => {
                    tracing::warn!(
                        event = %log_events::CYCLE_ABANDONED,
                        "the cycle did not end within the grace; abandoning it"
                    );
                    CutShort::Abandoned
                }
            },
            signal = stop_now(commands) => {
                tracing::warn!(event = %log_events::STOP_FORCED, signal, "second stop signal: killing the run's process group now");
                CutShort::Killed
            }
        };
        // Dropping the task drops the run's supervisor, whose group guard SIGKILLs the group;
        // awaiting the aborted task waits for that drop.
        t.abort();
        let _ = t.await;
        self.record_cut_cycle(why);
        why == CutShort::Killed
    }

    /// The status of a cycle the stop cut short: a run it had started counts as failed.
    pub(super) fn record_cut_cycle(&mut self, why: CutShort) {
        let Some(c) = self.status.last_cycle.as_mut() else {
            return;
        };
        c.ended_at = Some(time::rfc3339(SystemTime::now()));
        if c.run_started {
            c.outcome = Some(Outcome::Failed);
            c.failure = Some(
                match why {
                    CutShort::Killed => "killed with its process group: a second stop signal",
                    CutShort::Abandoned => "killed with its process group: the grace was over",
                }
                .to_string(),
            );
            self.status.counters.runs += 1;
            self.status.counters.runs_failed += 1;
        }
    }
}

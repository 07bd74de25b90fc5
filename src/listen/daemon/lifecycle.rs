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
        let windows = windows(&settings);
        let run_policy = run_policy::RunPolicy::load(&settings, &state);
        Ok(Daemon {
            source,
            settings,
            key,
            api,
            state,
            started: Instant::now(),
            started_at: now,
            flags: ListenerFlags::default(),
            socket: SocketView::default(),
            handle: None,
            counters: Counters::default(),
            last_cycle: None,
            wakes: Wakes::new(windows),
            texts: TextsInUse::default(),
            runtime: RuntimeHealth::default(),
            status_file: StatusFile::new(notify_status, now),
            pacer,
            metrics,
            agent: Default::default(),
            tray_not_before: Recheck::default(),
            removed_recheck: Recheck::default(),
            admission: admission.map(|a| {
                let who = a.member();
                (a, who)
            }),
            queued_rx: None,
            run_policy,
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
        self.flags.phase = Phase::Running;
    }

    /// Graceful stop: the run gets its grace, the socket closes with 1000, the status says
    /// `stopped`. `HostCommand::StopNow` (a second SIGTERM or SIGINT) cuts the wait short: the run's
    /// group is killed at once (however long `kill_grace` is) and the listener ends.
    pub(super) async fn stop(&mut self, mut w: Wiring, commands: &mut mpsc::Receiver<HostCommand>) {
        self.flags.phase = Phase::Stopping;
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
        self.flags.phase = Phase::Stopped;
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
        let cycle = self.last_cycle.as_ref();
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
        self.flags.cycle_wait = None;
        let Some(c) = self.last_cycle.as_mut() else {
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
            self.counters.runs += 1;
            self.counters.runs_failed += 1;
        }
    }
}

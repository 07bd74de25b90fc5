//! Every effect the machine asks for, performed: requests and runs as tasks that answer on the
//! driver's channel, file writes and lock takes at once (their answers are handled before the
//! loop waits again, in the order they were asked).

use super::{Driver, Io, ProfileIo, run};
use crate::client::Dismissal as ClientDismissal;
use crate::core::host::{HostEffect, ProfileId};
use crate::core::listener::{Dismissal, Effect, Input, ListenerEnd};
use crate::listen::socket::{self, ConnCmd, DialParams};
use crate::listen::texts;
use crate::log_events;
use secrecy::ExposeSecret;
use std::collections::VecDeque;
use std::time::SystemTime;
use tokio::sync::{mpsc, watch};
use tracing::Instrument;

impl Driver {
    /// Performs every effect the machine has asked for, and handles the answers that are known
    /// at once, until none is left.
    pub(super) fn perform_all(&mut self) {
        let mut local: VecDeque<(ProfileId, Input)> = VecDeque::new();
        loop {
            while let Some(e) = self.host.poll_host_effect() {
                match e {
                    HostEffect::ReadMemory => {
                        let now = self.clock.now();
                        let available = crate::listen::admission::available_memory();
                        self.host.memory(now, available);
                    }
                }
            }
            if let Some((id, effect)) = self.host.poll_effect() {
                if let Some(answer) = self.perform(id, effect) {
                    local.push_back((id, answer));
                }
                continue;
            }
            let Some((id, input)) = local.pop_front() else {
                return;
            };
            let now = self.clock.now();
            self.step(id, |h| h.handle(now, id, input));
        }
    }

    /// Performs one effect; an answer known at once is returned.
    fn perform(&mut self, id: ProfileId, effect: Effect) -> Option<Input> {
        if let Effect::Ended(end) = effect {
            self.finish(id, end);
            return None;
        }
        let chan = Io {
            id,
            tx: self.tx.clone(),
        };
        let io = self.ios.get_mut(&id)?;
        let _g = io.span.clone().entered();
        let span = io.span.clone();
        match effect {
            Effect::FetchMe { req } => {
                let api = io.api.clone();
                let base = io.settings.api_base.clone();
                tokio::spawn(
                    async move {
                        let result = api
                            .me()
                            .await
                            .map_err(|e| super::convert::me_error(&base, e));
                        chan.send(Input::Me { req, result });
                    }
                    .instrument(span),
                );
            }
            Effect::Dial { conn } => {
                let (tx, rx) = mpsc::unbounded_channel();
                io.conns.insert(conn, tx);
                let params = DialParams {
                    api_base: io.settings.api_base.clone(),
                    key: io.key.clone(),
                };
                tokio::spawn(socket::run(params, conn, chan, rx).instrument(span));
            }
            Effect::SendAcks { conn, ids } => send(io, conn, ConnCmd::Acks(ids)),
            Effect::Probe { conn } => send(io, conn, ConnCmd::Probe),
            Effect::CloseSocket { conn } => {
                let sent = io
                    .conns
                    .remove(&conn)
                    .is_some_and(|tx| tx.send(ConnCmd::Close).is_ok());
                if !sent {
                    return Some(Input::Closed { conn });
                }
            }
            Effect::DropSocket { conn } => {
                if let Some(tx) = io.conns.remove(&conn) {
                    let _ = tx.send(ConnCmd::Drop);
                }
            }
            Effect::TakeAgentLock { handle } => {
                let taken =
                    io.agent
                        .on_handle(&io.settings.api_base, &handle, &io.settings.state_dir);
                return Some(Input::AgentLock {
                    taken,
                    holder: io.agent.holder(),
                });
            }
            Effect::ReadKey => return read_key(io).then_some(Input::KeyChanged),
            Effect::ReadTray { cycle } => {
                let api = io.api.clone();
                let task = tokio::spawn(
                    async move {
                        let result = api.inbox().await.map_err(super::convert::tray_error);
                        chan.send(Input::Tray { cycle, result });
                    }
                    .instrument(span),
                );
                io.requests.entry(cycle).or_default().push(task);
            }
            Effect::FetchTexts {
                req,
                use_cache,
                quiet,
            } => {
                let api = io.api.clone();
                let state = io.state.clone();
                let runtime = io.settings.listen.runtime.texts_runtime();
                tokio::spawn(
                    async move {
                        let r = if quiet {
                            texts::load_quietly(&api, &state, runtime).await
                        } else {
                            texts::load(&api, &state, runtime, use_cache).await
                        };
                        let result = r
                            .map(super::convert::loaded)
                            .map_err(super::convert::missing);
                        chan.send(Input::Texts { req, result });
                    }
                    .instrument(span),
                );
            }
            Effect::CheckRuntime { presence_only } => {
                let settings = io.settings.clone();
                let workdir = io.state.workdir(settings.listen.workdir.as_deref());
                if presence_only {
                    // At start and on reload: the program's presence, and for Claude Code a look
                    // for a login that starts no process (`check::at_start`). Only when no file
                    // or variable shows one does `claude auth status` run (a Node process of
                    // about 290 MB for 2 s), off the loop: its failure marks the runtime unusable
                    // before a message starts a run that fails (issue 34 item 12).
                    let look = crate::runtime::check::at_start(&settings, &workdir);
                    let binary = super::binary_stamp(&settings);
                    let result = match look {
                        Err(e) => Err(e.why().to_string()),
                        Ok(crate::runtime::check::StartLook::Ready(p)) => {
                            Ok(p.display().to_string())
                        }
                        Ok(crate::runtime::check::StartLook::CheckLogin(p)) => {
                            let login = chan.clone();
                            tokio::spawn(
                                async move {
                                    if let Err(e) =
                                        crate::runtime::check::usable(&settings, &workdir).await
                                    {
                                        login.send(Input::RuntimeChecked {
                                            result: Err(e.why().to_string()),
                                            binary,
                                        });
                                    }
                                }
                                .instrument(span),
                            );
                            Ok(p.display().to_string())
                        }
                    };
                    return Some(Input::RuntimeChecked { result, binary });
                }
                tokio::spawn(
                    async move {
                        let result = crate::runtime::check::usable(&settings, &workdir)
                            .await
                            .map_err(|e| e.why().to_string());
                        let binary = super::binary_stamp(&settings);
                        chan.send(Input::RuntimeChecked { result, binary });
                    }
                    .instrument(span),
                );
            }
            Effect::StatRuntimeBinary { cycle } => {
                return Some(Input::RuntimeBinary {
                    cycle,
                    stamp: super::binary_stamp(&io.settings),
                });
            }
            Effect::StartRun(order) => {
                let (cancel, cancelled) = watch::channel(false);
                let cycle = order.cycle;
                let r = run::RunIo {
                    settings: io.settings.clone(),
                    key: io.key.clone(),
                    state: io.state.clone(),
                    metrics: io.metrics.clone(),
                };
                let task = tokio::spawn(run::run(*order, r, cancelled, chan).instrument(span));
                io.run = Some((cycle, cancel, task));
            }
            Effect::CancelRun { cycle, now } => {
                for t in io.requests.remove(&cycle).unwrap_or_default() {
                    t.abort();
                }
                if let Some((c, cancel, task)) = io.run.take() {
                    if c != cycle {
                        io.run = Some((c, cancel, task));
                    } else if now {
                        // Dropping the run's supervisor SIGKILLs its group; the profile's end
                        // waits for that (`finish`).
                        task.abort();
                        io.dying.push(task);
                    } else {
                        let _ = cancel.send(true);
                        io.run = Some((c, cancel, task));
                    }
                }
            }
            Effect::DismissInvite { cycle, invite_id } => {
                let api = io.api.clone();
                let task = tokio::spawn(
                    async move {
                        let result = match api.dismiss_invite(&invite_id).await {
                            Ok(ClientDismissal::Dismissed) => Dismissal::Dismissed,
                            Ok(ClientDismissal::NotPending) => Dismissal::NotPending,
                            Err(e) => Dismissal::Failed(e.to_string()),
                        };
                        chan.send(Input::Dismissed {
                            cycle,
                            invite_id,
                            result,
                        });
                    }
                    .instrument(span),
                );
                io.requests.entry(cycle).or_default().push(task);
            }
            Effect::SaveInvites(memory) => {
                let written = io.state.save_invites(&memory);
                io.invites_failing = episode(
                    io.invites_failing,
                    written,
                    log_events::INVITE_MEMORY_WRITE_FAILED,
                    log_events::INVITE_MEMORY_WRITE_RECOVERED,
                    "invites.json",
                );
            }
            Effect::SavePolicyMemory(ledger) => {
                // Written by its own task, off this loop (`driver::policy_memory`).
                if let Some(w) = &io.memory {
                    w.save(ledger);
                }
            }
            Effect::Record(line) => {
                // One appended line (`listen::history`): the run policy's ledger is built from
                // these at the next start.
                let utc = crate::core::policy::FixedOffset(0);
                let zone: &dyn crate::core::policy::Offsets =
                    match self.host.profile(id).map(|l| &l.config().zone) {
                        Some(z) => z,
                        None => &utc,
                    };
                let written = io.history.append(&line, zone);
                io.history_failing = episode(
                    io.history_failing,
                    written,
                    log_events::HISTORY_WRITE_FAILED,
                    log_events::HISTORY_WRITE_RECOVERED,
                    crate::listen::history::FILE,
                );
            }
            Effect::WriteStatus(status) => {
                let result = match io.state.write_status(&status) {
                    Ok(file) => {
                        io.status_file = Some(file);
                        Ok(())
                    }
                    Err(e) => {
                        io.status_file = None;
                        Err(e.to_string())
                    }
                };
                return Some(Input::StatusWritten { result });
            }
            Effect::TouchStatus => {
                let ok = io
                    .status_file
                    .as_ref()
                    .is_some_and(|f| f.set_modified(SystemTime::now()).is_ok());
                if !ok {
                    return Some(Input::StatusTouched { ok });
                }
            }
            Effect::Notify(state) => {
                let line = format!("STATUS={}", state.as_str());
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Custom(&line)]);
            }
            Effect::Ready => {
                if let Some(tx) = io.started.take() {
                    let _ = tx.send(());
                }
            }
            // The host's own; none reach the driver.
            Effect::AskPacer | Effect::AskSlot { .. } | Effect::ReleaseSlot | Effect::Ended(_) => {}
        }
        None
    }

    /// A profile ended: it leaves the machine; its tasks end, the run's group is gone (a killed
    /// run's task is awaited), and only then does its lock go and its end reach the process layer.
    fn finish(&mut self, id: ProfileId, end: ListenerEnd) {
        self.host.remove(id);
        let Some(mut io) = self.ios.remove(&id) else {
            return;
        };
        self.by_generation.remove(&io.generation);
        for (_, tx) in std::mem::take(&mut io.conns) {
            let _ = tx.send(ConnCmd::Drop);
        }
        for t in std::mem::take(&mut io.requests).into_values().flatten() {
            t.abort();
        }
        let mut dying = std::mem::take(&mut io.dying);
        if let Some((_, _, task)) = io.run.take() {
            task.abort();
            dying.push(task);
        }
        // What its policy last learnt is written before its lock goes.
        if let Some(w) = io.memory.take() {
            dying.push(w.finish());
        }
        tokio::spawn(async move {
            for t in dying {
                let _ = t.await;
            }
            let ended = io.ended.take();
            drop(io);
            if let Some(tx) = ended {
                let _ = tx.send(end);
            }
        });
    }
}

fn send(io: &ProfileIo, conn: u64, cmd: ConnCmd) {
    if let Some(tx) = io.conns.get(&conn) {
        let _ = tx.send(cmd);
    }
}

/// While the key is refused, a changed key (file or environment) is tried at once: true when the
/// key in use is new now. One profile of many with a key file reads that file alone: a host whose
/// keys are all refused (a rotation under way) must not parse the whole config for each profile
/// every 2 s. A changed `api_key_file` itself is SIGHUP's.
fn read_key(io: &mut ProfileIo) -> bool {
    use crate::config;
    let key = match (&io.source, &io.settings.key_source) {
        (config::Source::OfAll { .. }, config::KeySource::File(path)) => {
            config::read_key_file(path).ok()
        }
        _ => io.source.load().ok().and_then(|s| s.api_key),
    };
    let Some(k) = key else {
        return false;
    };
    if k.expose_secret() == io.key.expose_secret() {
        return false;
    }
    match crate::client::Api::new(&io.settings.api_base, k.clone()) {
        Ok(api) => {
            io.api = api;
            io.key = k;
            true
        }
        Err(e) => {
            tracing::error!(event = %log_events::HTTP_CLIENT_FAILED, error = %e, "cannot build the HTTP client");
            false
        }
    }
}

/// A write's episode of failure: said once when it begins and once when it ends. The new state.
pub(super) fn episode(
    failing: bool,
    written: std::io::Result<()>,
    failed: &'static str,
    recovered: &'static str,
    file: &str,
) -> bool {
    match written {
        Ok(()) => {
            if failing {
                tracing::info!(event = %recovered, "{file} is written again");
            }
            false
        }
        Err(e) => {
            if !failing {
                tracing::warn!(event = %failed, error = %e, "could not write {file}; the listener keeps working with what it holds, and says this once until a write succeeds");
            }
            true
        }
    }
}

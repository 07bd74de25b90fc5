//! `agentchat listen --once`, for scripts and cron: connect (which proves the key and acks what the
//! server pushes), run at most one cycle if something waits, exit. Exit 0 when nothing waited or
//! the run completed; an error (exit 1) when it could not connect or the run failed. The cycle is
//! the daemon's own state machine (`core::listener::cycle`), its effects performed one at a time.

use super::driver::{convert, run};
use super::socket::{self, DialParams};
use super::start::Prepared;
use crate::client::{Api, Dismissal as ClientDismissal};
use crate::config::Settings;
use crate::core::decision::WakeCauses;
use crate::core::exit::Exit;
use crate::core::invite_rule::InviteMemory;
use crate::core::listener::cycle::{Ctx, Cycle, Note};
use crate::core::listener::policy::RunPolicy;
use crate::core::listener::record;
use crate::core::listener::{Dismissal, Effect, Input, Out, Slot, Timing, Unobserved};
use crate::core::rng::Rng;
use crate::core::status::{ListenerState, NoRunReason, Outcome, Status};
use crate::core::time::rfc3339_ms;
use std::collections::VecDeque;
use std::time::Duration;
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::watch;

/// How long `--once` listens after connecting before it reads the tray.
const SETTLE: Duration = Duration::from_millis(500);

/// `prepared`: the profile as `start::prepare` left it, its lock held until this returns.
pub async fn run(settings: Settings, prepared: Prepared) -> anyhow::Result<i32> {
    let Prepared {
        key,
        state,
        lock: _lock,
    } = prepared;
    // One REST client for the whole run: who am I, the texts, the tray.
    let api = Api::new(&settings.api_base, key.clone())?;
    let params = DialParams {
        api_base: settings.api_base.clone(),
        key: key.clone(),
    };
    let handle = socket::connect_once(&params, &api, SETTLE)
        .await
        .map_err(|e| {
            // Said once: the lines about a wrong or unreachable api_base name it already.
            if e.contains(settings.api_base.as_str()) {
                anyhow::anyhow!("could not connect: {e}")
            } else {
                anyhow::anyhow!("could not connect to {}: {e}", settings.api_base)
            }
        })?;
    // One agent, one listener (`agent_lock`): a resident listener or another `--once` for the
    // same agent under another state dir runs already.
    let mut agent = super::agent_lock::AgentSlot::default();
    if !agent.on_handle(&settings.api_base, &handle, &settings.state_dir) {
        return Ok(super::start::exit_code(
            Exit::AlreadyRunning,
            &crate::config::process_env(),
        ));
    }
    let runtime = settings.listen.runtime.texts_runtime();
    let texts = match super::texts::load(&api, &state, runtime, true).await {
        Ok(loaded) => Some(convert::loaded(loaded)),
        Err(missing) => {
            let m = convert::missing(missing);
            tracing::error!(event = %crate::log_events::TEXTS_MISSING, runtime = m.runtime, fetch_error = %m.fetch, cache = %m.cache.as_deref().unwrap_or("not tried"), "no texts for this runtime, neither from the server nor cached; no runs until the server's texts can be read");
            None
        }
    };

    let clock = super::driver::Clock::new();
    let now = clock.now();
    let started_wall = now.wall_ms;
    // `[listen.policy]` holds a one-off run as it holds the daemon's, and counts it.
    let cfg = convert::listener_config(&settings, false, now.wall_ms);
    let (mut history, ledger) = super::driver::open_off_loop(&state, &settings).await;
    let mut policy = RunPolicy::new(cfg.policy.clone(), cfg.zone.clone(), ledger, now.wall_ms);
    let mut invites: InviteMemory = state.load_invites().unwrap_or_default();
    let mut rng = Rng::new(fastrand::u64(..));
    let mut effects = VecDeque::new();
    let timing = Timing::new(cfg.scale);
    let mut unknown_version_said = false;
    let mut next_req = 0;
    let mut mutes = crate::core::listener::mutes::Mutes::default();
    let mut heard = crate::core::policy::Heard::default();

    let mut out = Out::new(&mut effects, &mut rng);
    let mut cycle = Cycle::start(
        1,
        vec!["connect".into()],
        WakeCauses::unknown(),
        0,
        false,
        now,
        &mut out,
    );
    let (cancel_tx, cancel) = watch::channel(false);
    let mut sigterm = signal(SignalKind::terminate())?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut stopping = false;
    let r = || run::RunIo {
        settings: settings.clone(),
        key: key.clone(),
        state: state.clone(),
        metrics: super::metrics::Metrics::off(),
    };
    while !cycle.is_done() {
        let Some(effect) = effects.pop_front() else {
            // A retry's wait (a `429 Retry-After`, a transient error), or nothing left to do.
            let Some(t) = cycle.deadline() else {
                break;
            };
            tokio::time::sleep_until(clock.instant(t)).await;
            cycle.on_time(clock.now(), &mut Out::new(&mut effects, &mut rng));
            continue;
        };
        let input = match effect {
            Effect::ReadTray { cycle: c } => Input::Tray {
                cycle: c,
                result: api.inbox().await.map_err(convert::tray_error),
            },
            Effect::FetchTexts { req, .. } => Input::Texts {
                req,
                result: super::texts::load_quietly(&api, &state, runtime)
                    .await
                    .map(convert::loaded)
                    .map_err(convert::missing),
            },
            Effect::AskSlot { cycle: c } => Input::Slot {
                cycle: c,
                slot: Slot::Granted { waited_ms: 0 },
            },
            Effect::StartRun(order) => {
                let c = order.cycle;
                let mut started = None;
                // A signal gives the run SIGTERM and its grace; the cycle then ends without the
                // invite rule.
                let end = {
                    let fut = run::supervise(*order, r(), cancel.clone(), |log| {
                        started = Some((log, clock.now().wall_ms))
                    });
                    tokio::pin!(fut);
                    loop {
                        tokio::select! {
                            biased;
                            end = &mut fut => break end,
                            _ = sigterm.recv() => { stopping = true; let _ = cancel_tx.send(true); }
                            _ = sigint.recv() => { stopping = true; let _ = cancel_tx.send(true); }
                        }
                    }
                };
                if let Some((log, at)) = started {
                    cycle.report.run_started_ms = Some(at);
                    feed(
                        &mut cycle,
                        Input::RunStarted { cycle: c, log },
                        &mut Env {
                            policy: &mut policy,
                            invites: &mut invites,
                            rng: &mut rng,
                            effects: &mut effects,
                            texts: texts.as_ref(),
                            handle: &handle,
                            timing,
                            unknown_version_said: &mut unknown_version_said,
                            next_req: &mut next_req,
                            clock,
                            stopping,
                            mutes: &mut mutes,
                            heard: &mut heard,
                        },
                    );
                }
                Input::RunEnded { cycle: c, end }
            }
            Effect::DismissInvite {
                cycle: c,
                invite_id,
            } => {
                let result = match api.dismiss_invite(&invite_id).await {
                    Ok(ClientDismissal::Dismissed) => Dismissal::Dismissed,
                    Ok(ClientDismissal::NotPending) => Dismissal::NotPending,
                    Err(e) => Dismissal::Failed(e.to_string()),
                };
                Input::Dismissed {
                    cycle: c,
                    invite_id,
                    result,
                }
            }
            Effect::SaveInvites(memory) => {
                let _ = state.save_invites(&memory);
                continue;
            }
            _ => continue,
        };
        feed(
            &mut cycle,
            input,
            &mut Env {
                policy: &mut policy,
                invites: &mut invites,
                rng: &mut rng,
                effects: &mut effects,
                texts: texts.as_ref(),
                handle: &handle,
                timing,
                unknown_version_said: &mut unknown_version_said,
                next_req: &mut next_req,
                clock,
                stopping,
                mutes: &mut mutes,
                heard: &mut heard,
            },
        );
    }
    let now = clock.now();
    cycle.close(now);
    let mut report = cycle.report;
    // A held run is said as the daemon says it.
    policy.seen(&report.policy, now.mono_ms, now.wall_ms);
    if report.last.run_started {
        let budgeted = settings.listen.runtime == crate::config::RuntimeKind::ClaudeCode;
        let spent = report
            .run_report
            .as_ref()
            .map(|r| policy.spent(r, budgeted))
            .unwrap_or_default();
        policy.run_started(&report.conversations, now.wall_ms);
        policy.run_ended(&report.conversations, spent, now.wall_ms);
        report.spent = Some(spent);
    }
    // Its lines in the history, as the daemon's: the run (its caps count it), or the hold.
    let held = policy.current_hold();
    let lines = record::of_once(&settings.profile, &report, held, now.wall_ms);
    for line in lines {
        let _ = history.append(&line, &cfg.zone);
    }
    let _ = super::driver::write_memory(&state.path(super::driver::MEMORY_FILE), &policy.ledger());
    // `agentchat status` shows what this run did and what holds the next (issue 38 item 8).
    let mut status = Status {
        state: ListenerState::Stopped,
        since: rfc3339_ms(now.wall_ms),
        pid: std::process::id(),
        profile: settings.profile.clone(),
        handle: Some(crate::core::handle::shown(&handle)),
        api_base: settings.api_base.clone(),
        runtime: settings.listen.runtime.as_str().to_string(),
        key_source: cfg.key_source.clone(),
        updated_at: rfc3339_ms(now.wall_ms),
        started_at: rfc3339_ms(started_wall),
        last_cycle: Some(report.last.clone()),
        ..Status::default()
    };
    policy.show(&mut status, now.wall_ms);
    if let Err(e) = state.write_status(&status) {
        tracing::warn!(event = %crate::log_events::STATUS_WRITE_FAILED, error = %e, "could not write status.json");
    }
    exit(&report, policy.hold_said(now.wall_ms))
}

/// What feeding the cycle needs.
struct Env<'a> {
    policy: &'a mut RunPolicy,
    invites: &'a mut InviteMemory,
    rng: &'a mut Rng,
    effects: &'a mut VecDeque<Effect>,
    texts: Option<&'a crate::core::listener::LoadedTexts>,
    handle: &'a str,
    timing: Timing,
    unknown_version_said: &'a mut bool,
    next_req: &'a mut u64,
    clock: super::driver::Clock,
    stopping: bool,
    mutes: &'a mut crate::core::listener::mutes::Mutes,
    heard: &'a mut crate::core::policy::Heard,
}

fn feed(cycle: &mut Cycle, input: Input, env: &mut Env) {
    let now = env.clock.now();
    let obs = Unobserved;
    let mut ctx = Ctx {
        now,
        handle: env.handle,
        texts: env.texts,
        policy: env.policy,
        invites: env.invites,
        timing: env.timing,
        obs: &obs,
        unknown_version_said: env.unknown_version_said,
        next_req: env.next_req,
        removed_known: false,
        mutes: env.mutes,
        heard: env.heard,
    };
    let mut out: Out<Note> = Out::new(env.effects, env.rng);
    match input {
        Input::Tray { result, .. } => cycle.on_tray(&mut ctx, result, &mut out),
        Input::Texts { req, result } => {
            cycle.on_texts(&mut ctx, req, result, &mut out);
        }
        Input::Slot { slot, .. } => cycle.on_slot(&mut ctx, slot, &mut out),
        Input::RunStarted { log, .. } => cycle.on_run_started(log, &mut out),
        Input::RunEnded { end, .. } => cycle.on_run_ended(&mut ctx, end, env.stopping, &mut out),
        Input::Dismissed {
            invite_id, result, ..
        } => cycle.on_dismissed(&mut ctx, &invite_id, result, &mut out),
        _ => {}
    }
}

/// The exit for how the one cycle ended; `held`: the hold in words when the policy held it.
fn exit(
    report: &crate::core::listener::cycle::Report,
    held: Option<String>,
) -> anyhow::Result<i32> {
    let last = &report.last;
    match last.outcome {
        Some(Outcome::Completed) => {
            println!("run completed (cycle {})", last.id);
            Ok(0)
        }
        Some(Outcome::NoRun) => {
            let why = last.no_run_reason;
            let why_word = why.map_or("", NoRunReason::as_str);
            match why {
                // Nothing for a run to do: a success for a script or cron job.
                Some(
                    NoRunReason::NothingWaiting
                    | NoRunReason::OnlyMuted
                    | NoRunReason::NoPrompt
                    | NoRunReason::RuntimeUnusable
                    // The user's `[listen.policy]` chose that no run starts now.
                    | NoRunReason::Held,
                )
                | None => {
                    match held.filter(|_| why == Some(NoRunReason::Held)) {
                        Some(line) => println!("no run: held: {line}"),
                        None => println!("no run: {why_word}"),
                    }
                    Ok(0)
                }
                // Something waited, or may have, and could not get a run.
                Some(
                    NoRunReason::TrayUnreadable
                    | NoRunReason::HandleMismatch
                    | NoRunReason::NoTexts
                    | NoRunReason::Stopped,
                ) => anyhow::bail!("no run: {why_word} (cycle {})", last.id),
            }
        }
        outcome @ (Some(Outcome::Failed | Outcome::Unusable) | None) => {
            let what = match outcome {
                Some(Outcome::Unusable) => "the runtime cannot be used",
                _ => "the run failed",
            };
            let failure = last.failure.as_deref().unwrap_or("unknown");
            // A cycle that started no run has no log to name.
            match &last.run_log {
                Some(log) => anyhow::bail!("{what}: {failure} (cycle {}, log {log})", last.id),
                None => anyhow::bail!("{what}: {failure} (cycle {})", last.id),
            }
        }
    }
}

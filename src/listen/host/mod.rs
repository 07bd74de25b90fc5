//! The process around the profiles' listeners: `agentchat listen` runs one profile through it (a
//! set of one), `agentchat listen --all` every profile of the config (docs/many-agents.md, "One
//! process for many agents"); what the two do differently is one `Scope`, decided at start. The boundary: a profile's listener (`listen::daemon`: its socket, coalescer,
//! cycles, status, texts, state dir and locks) is a task that answers `daemon::HostCommand`s; the
//! process owns what there is one of per process: the signals (`signals`), systemd's
//! notification and watchdog (`notify`), the metrics endpoint, and, with `--all`, the set of
//! profiles that SIGHUP re-reads (`profiles`).
//!
//! Isolation: a profile that cannot start (no key, an unusable state dir, its lock held by
//! another listener, an error in its own table of the config) is said in a log line naming it,
//! and the others run; a profile whose listener ends (its agent served by another listener) ends
//! alone. With `--all` the process never exits non-zero for one profile's trouble.

mod blocked;
mod notify;
mod profiles;
mod reload;
mod scope;
mod signals;

use super::driver::{Driver, DriverCommand, HostCommand, Start};
use super::metrics::{self, Metrics, Registry};
use super::start::{Prepared, StartError};
use crate::config::TestTimeScale;
use crate::config::{self, ConfigArgs, Settings};
use crate::core::exit::Exit;
use crate::core::listener::ListenerEnd;
use crate::log_events;
use notify::{Notify, Watchdog};
pub(super) use scope::Top;
use scope::{Endpoint, RunSlots, Scope};
use signals::{Asked, Signals};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

/// How one profile's listener ended: `Ok` as `daemon::run` says, `Err` when it could not start.
type TaskEnd = Result<ListenerEnd, StartError>;

/// One profile's listener, as the process sees it.
struct Running {
    /// Tells this start of the profile from a later one (a profile removed and added again).
    generation: u64,
    commands: Commands,
    task: JoinHandle<()>,
    /// The loop's turns (`daemon::Link::turns`), and their count at the watchdog's last tick.
    turns: Arc<AtomicU64>,
    seen: Option<u64>,
    /// What SIGHUP compares (`profiles::fingerprint`).
    fingerprint: [u8; 32],
    /// The process's agent lock releases when it started (`blocked`).
    releases_seen: u64,
}

struct Host {
    scope: Scope,
    profiles: BTreeMap<String, Running>,
    /// Profiles told to stop because the config no longer names them, until their task ends.
    leaving: Vec<(String, Running)>,
    /// Profiles named again while their old listener is still leaving: started once it has
    /// ended (and let go of the state dir's lock).
    returning: BTreeMap<String, Settings>,
    ends_tx: mpsc::UnboundedSender<(String, u64, TaskEnd)>,
    ends: mpsc::UnboundedReceiver<(String, u64, TaskEnd)>,
    next_generation: u64,
    notify: Notify,
    watchdog: Option<Watchdog>,
    /// Turns true when the process stops: the metrics endpoint ends.
    endpoint: watch::Sender<bool>,
    /// The driver of the process's state machine (`listen::driver`): every profile's listener,
    /// the one connect pacer (contract 3.4's per-IP budget) and the run slots.
    driver: mpsc::UnboundedSender<DriverCommand>,
    driver_task: JoinHandle<()>,
    /// `listen --all`'s run slots, as the top level sets them.
    slots: RunSlots,
    /// Profiles whose agent another listener serves, tried again (`blocked`).
    blocked: BTreeMap<String, blocked::Blocked>,
    /// Profiles that cannot run for another reason (their config, their key, their state dir).
    failed_other: std::collections::BTreeSet<String>,
    scale: TestTimeScale,
}

/// `agentchat listen`: the one profile `args` choose, as a set of one. Exit 0 on a stop; the
/// start's own exit code when it cannot start (`StartError::exit`); `Exit::AlreadyRunning`'s when
/// another listener took its agent (`agent_lock`).
pub(super) async fn run_one(args: ConfigArgs, settings: Settings) -> anyhow::Result<i32> {
    let mut signals = Signals::install()?;
    let scope = Scope { args, shared: None };
    let mut host = Host::new(scope, settings.time_scale, None, None);
    let name = settings.profile.clone();
    let started = host.start(name, settings);
    host.serve(&mut signals, vec![started]).await
}

/// `agentchat listen --all`: every profile `config::ConfigFile::all` finds. Exit 0 on a stop (78,
/// from `listen::run_command`, only when nothing can run: the environment or the file as a whole
/// is wrong, or no profile's settings resolve); `Exit::AlreadyRunning`'s when every profile is
/// another process's.
///
/// `top.scale` is the process's test time scale (the top level's, `config::TestTimeScale`), read
/// once: the connect pacer, which all profiles share, runs by it.
pub(super) async fn run_all(
    args: ConfigArgs,
    set: config::ProfileSet,
    top: Top,
) -> anyhow::Result<i32> {
    let mut signals = Signals::install()?;
    let endpoint = Endpoint::new(top.metrics_addr);
    let (addr, registry) = (endpoint.addr, endpoint.registry.clone());
    let scope = Scope {
        args,
        shared: Some(endpoint),
    };
    let slots = top.slots;
    let mut host = Host::new(
        scope,
        top.scale,
        Some((slots.max(), slots.min_memory)),
        Some(registry.clone()),
    );
    let _ = host.driver.send(DriverCommand::Budget(top.budget));
    host.slots = slots;
    if let Some(addr) = addr {
        tokio::spawn(metrics::serve(registry, addr, host.endpoint.subscribe()));
    }
    let mut started = Vec::new();
    for (name, settings) in set.profiles {
        match settings {
            Ok(s) => started.push(host.start(name, s)),
            Err(e) => host.config_error(&name, &e),
        }
    }
    tracing::info!(
        event = %log_events::HOST_START,
        pid = std::process::id(),
        profiles = host.profiles.len(),
        max_concurrent_runs = slots.max(),
        min_available_memory = slots.min_memory,
        host_max_runs_per_day = top.budget.max_runs_per_day,
        host_max_cost_per_day_usd = top.budget.max_cost_per_day_usd,
        "listening for {} profiles in one process",
        host.profiles.len()
    );
    host.serve(&mut signals, started).await
}

impl Host {
    /// `slots`: `listen --all`'s run slots (the most at once, the memory a run needs), whose
    /// queue `registry` shows.
    fn new(
        scope: Scope,
        scale: TestTimeScale,
        slots: Option<(usize, Option<u64>)>,
        registry: Option<Arc<Registry>>,
    ) -> Host {
        let (ends_tx, ends) = mpsc::unbounded_channel();
        let (endpoint, _) = watch::channel(false);
        let pacing = crate::core::pacing::PacingPolicy::default().scaled(scale.factor());
        let seed = fastrand::u64(..);
        let obs: Arc<dyn crate::core::host::HostObserver> = match registry {
            Some(r) => Arc::new(metrics::QueueObserver(r)),
            None => Arc::new(crate::core::host::NoHostObserver),
        };
        let (driver, commands) = mpsc::unbounded_channel();
        let driver_task = tokio::spawn(Driver::new(pacing, slots, seed, obs).run(commands));
        Host {
            scope,
            profiles: BTreeMap::new(),
            leaving: Vec::new(),
            returning: BTreeMap::new(),
            ends_tx,
            ends,
            next_generation: 0,
            notify: Notify::from_env(),
            watchdog: None,
            endpoint,
            driver,
            driver_task,
            slots: RunSlots::default(),
            blocked: BTreeMap::new(),
            failed_other: Default::default(),
            scale,
        }
    }

    /// The endpoint's registry (`--all` only).
    fn registry(&self) -> Option<&Arc<Registry>> {
        self.scope.shared.as_ref().map(|e| &e.registry)
    }

    /// A profile that does not run: `/readyz` says why (`--all`).
    fn failed(&self, name: &str, why: &str) {
        if let Some(r) = self.registry() {
            r.set_failed(name, why);
        }
    }

    /// A profile whose table of the config is wrong: said naming the profile and the key, in the
    /// log and on `/readyz`.
    fn config_error(&mut self, name: &str, e: &config::ConfigError) {
        self.failed_other.insert(name.to_string());
        tracing::error!(
            event = %log_events::PROFILE_CONFIG_ERROR,
            profile = %name,
            error = %e,
            "this profile's config is wrong; it does not run (the others do); fix it and send SIGHUP"
        );
        self.failed(name, &format!("config: {e}"));
    }

    /// Starts a profile (with `--all`, in a span naming the profile, so every line it logs says
    /// `profile=<name>`): `start::prepare` as a task, then the listener joins the driver's
    /// machine, and the task waits for its end. Returns what says it has started; a start that
    /// fails sends its end before that is dropped.
    fn start(&mut self, name: String, settings: Settings) -> oneshot::Receiver<()> {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.failed_other.remove(&name);
        if let Some(b) = self.blocked.get_mut(&name) {
            // A try under way: its backoff goes on should it be refused again.
            b.at_none();
        }
        let (started_tx, started) = oneshot::channel();
        let turns = Arc::new(AtomicU64::new(0));
        let alone = self.scope.alone();
        let source = self.scope.source(&name);
        // `listen`'s one profile serves its own endpoint once it holds its lock; with `--all` the
        // process serves every profile's.
        let (metrics, own_endpoint) = match &self.scope.shared {
            None => (
                Metrics::for_settings(&settings),
                Some(self.endpoint.subscribe()),
            ),
            Some(endpoint) => {
                self.ignored_with_all(&name, &settings, endpoint);
                let metrics = match endpoint.addr {
                    Some(_) => endpoint.registry.profile(&name),
                    None => Metrics::off(),
                };
                (metrics, None)
            }
        };
        let fingerprint = profiles::fingerprint(&settings);
        let ends = self.ends_tx.clone();
        let end_name = name.clone();
        let driver = self.driver.clone();
        let span = if alone {
            tracing::Span::none()
        } else {
            tracing::error_span!("profile", profile = %name)
        };
        let task_span = span.clone();
        let task_turns = turns.clone();
        let task = async move {
            let outcome = match super::start::prepare(&settings, alone).await {
                Ok(Prepared { key, state, lock }) => {
                    metrics.set_state_dir(&state.root);
                    if let Some(stop) = own_endpoint {
                        metrics::spawn_server(&metrics, settings.listen.metrics_addr, stop);
                    }
                    // The history (up to its bounds) and the policy's memory are read here, not on
                    // the loop the other profiles share.
                    let opened = crate::listen::driver::open_off_loop(&state, &settings).await;
                    let (ended_tx, ended) = oneshot::channel();
                    let start = Start {
                        generation,
                        source,
                        settings,
                        key,
                        state,
                        lock,
                        metrics,
                        notify_status: alone,
                        span,
                        started: started_tx,
                        ended: ended_tx,
                        turns: task_turns,
                        opened,
                    };
                    let _ = driver.send(DriverCommand::Add(Box::new(start)));
                    // The driver drops the lock only once the listener ended: no other can start
                    // on this state dir meanwhile.
                    Ok(ended.await.unwrap_or(ListenerEnd::Stopped))
                }
                // `started_tx` lives on until the end is sent: the host hears the end before it
                // hears "started" (READY is never sent for a process that ends at its start).
                Err(e) => {
                    let _ = ends.send((end_name, generation, Err(e)));
                    drop(started_tx);
                    return;
                }
            };
            let _ = ends.send((end_name, generation, outcome));
        };
        let task = tokio::spawn(task.instrument(task_span));
        self.profiles.insert(
            name,
            Running {
                generation,
                commands: Commands {
                    generation,
                    driver: self.driver.clone(),
                },
                task,
                turns,
                seen: None,
                fingerprint,
                releases_seen: *super::agent_lock::released().borrow(),
            },
        );
        started
    }

    /// With `--all`, what a profile's own table may not choose for the process: said once at its
    /// start.
    fn ignored_with_all(&self, name: &str, settings: &Settings, endpoint: &Endpoint) {
        if settings.listen.metrics_addr.is_some() && settings.listen.metrics_addr != endpoint.addr {
            tracing::warn!(
                event = %log_events::CONFIG_ADVICE,
                profile = %name,
                "this profile's listen.metrics_addr is ignored with --all: the process serves every profile on one endpoint (--metrics-addr, or the top level's [listen] metrics_addr)"
            );
        }
        if RunSlots::of(settings) != self.slots {
            tracing::warn!(
                event = %log_events::CONFIG_ADVICE,
                profile = %name,
                "this profile's listen.max_concurrent_runs or listen.min_available_memory is ignored with --all: the process's run slots are the top level's [listen]"
            );
        }
    }

    /// Answers signals, profile ends and the watchdog until a stop signal, then stops every
    /// profile. `started`: READY goes to systemd once each of these has started (or ended).
    async fn serve(
        mut self,
        signals: &mut Signals,
        started: Vec<oneshot::Receiver<()>>,
    ) -> anyhow::Result<i32> {
        let mut all_started = Some(Box::pin(futures_util::future::join_all(started)));
        let mut released = super::agent_lock::released();
        let cause = loop {
            let next_retry = self.next_retry();
            tokio::select! {
                // Ends first: a profile that could not start sends its end before its "started"
                // goes, so `listen` that cannot start ends without READY.
                biased;
                Some((name, generation, outcome)) = self.ends.recv() => {
                    if let Some(code) = self.on_end(&name, generation, outcome) {
                        // The one profile ended by itself: so does the process. A process that
                        // ends at its start tells systemd nothing, as before there was a host.
                        if all_started.is_none() {
                            self.notify.stopping();
                        }
                        let _ = self.endpoint.send(true);
                        return Ok(code);
                    }
                }
                asked = signals.next() => match asked {
                    Asked::Stop(cause) => break cause,
                    Asked::Reload => self.reload(),
                },
                _ = async { all_started.as_mut()?.await; Some(()) }, if all_started.is_some() => {
                    all_started = None;
                    self.notify.ready();
                    self.watchdog = self.notify.watchdog_interval().map(Watchdog::new);
                }
                _ = released.changed() => self.retry_blocked(true),
                _ = crate::sys::wait::until(next_retry) => self.retry_blocked(false),
                _ = notify::due(&mut self.watchdog) => self.watchdog_tick(),
            }
        };
        self.stop(signals, cause).await
    }

    /// A profile's task ended by itself. `Some`: the process ends too, with this exit code.
    fn on_end(&mut self, name: &str, generation: u64, outcome: TaskEnd) -> Option<i32> {
        if let Some(i) = self
            .leaving
            .iter()
            .position(|(n, r)| n == name && r.generation == generation)
        {
            self.leaving.swap_remove(i);
            if let Some(settings) = self.returning.remove(name) {
                tracing::info!(event = %log_events::PROFILE_ADDED, profile = %name, "the old listener of this profile has stopped; starting it again");
                drop(self.start(name.to_string(), settings));
            } else if !self.profiles.contains_key(name)
                && let Some(r) = self.registry()
            {
                r.remove(name);
            }
            return None;
        }
        let releases_seen = self.profiles.get(name).map_or(0, |r| r.releases_seen);
        match self.profiles.get(name).map(|r| r.generation) {
            Some(g) if g == generation => drop(self.profiles.remove(name)),
            // An older start's end: the profile runs again already.
            Some(_) => return None,
            None => {}
        }
        if self.scope.alone() {
            return Some(alone_exit(outcome));
        }
        match outcome {
            Ok(ListenerEnd::Stopped) => {}
            Ok(ListenerEnd::TakenByOther { holder }) => {
                tracing::warn!(
                    event = %log_events::PROFILE_ENDED,
                    profile = %name,
                    holder,
                    "another listener serves this profile's agent; this profile stopped until that one lets go (the others run on)"
                );
                self.failed(name, "another listener serves this profile's agent");
                self.block(name, holder, releases_seen);
            }
            Err(e @ StartError::LockHeld { pid: holder }) => {
                let why = e.said();
                tracing::error!(
                    event = %log_events::PROFILE_NOT_RUNNING,
                    profile = %name,
                    error = %why,
                    "this profile cannot run until that listener lets go; the others run on"
                );
                self.failed(name, &why);
                self.block(name, holder, releases_seen);
            }
            Err(e) => {
                self.failed_other.insert(name.to_string());
                let why = e.said();
                tracing::error!(
                    event = %log_events::PROFILE_NOT_RUNNING,
                    profile = %name,
                    error = %why,
                    "this profile cannot run; the others run on (SIGHUP tries again)"
                );
                self.failed(name, &why);
            }
        }
        if self.all_served_elsewhere() {
            tracing::error!(
                event = %log_events::ALREADY_RUNNING,
                "every profile of this config is served by another listener already; this process has nothing to do: exiting"
            );
            return Some(super::start::exit_code(
                Exit::AlreadyRunning,
                &crate::config::process_env(),
            ));
        }
        None
    }

    /// The watchdog's tick: a ping when every started profile's loop turned since the last
    /// tick, then a probe to each so that a healthy idle loop turns before the next
    /// (`notify`'s module doc).
    fn watchdog_tick(&mut self) {
        let counts = self.profiles.values().filter_map(|r| {
            let now = r.turns.load(Ordering::Relaxed);
            // Not started yet: its loop has not turned once.
            (now > 0).then_some((now, r.seen))
        });
        if notify::all_turned(counts) {
            self.notify.watchdog();
        } else {
            tracing::warn!(event = %log_events::WATCHDOG_WITHHELD, "a profile's main loop has not turned since the last watchdog tick; not pinging");
        }
        for r in self.profiles.values_mut() {
            let now = r.turns.load(Ordering::Relaxed);
            r.seen = (now > 0).then_some(now);
            deliver(&r.commands, HostCommand::Probe);
        }
    }

    /// SIGTERM/SIGINT: every profile stops at once, in parallel, each run with its grace; a
    /// second signal kills every run's group now.
    async fn stop(mut self, signals: &mut Signals, cause: &'static str) -> anyhow::Result<i32> {
        self.notify.stopping();
        let _ = self.endpoint.send(true);
        let alone = self.scope.alone();
        let mut all: Vec<(String, Running)> =
            std::mem::take(&mut self.profiles).into_iter().collect();
        all.append(&mut self.leaving);
        for (_, r) in &all {
            deliver(&r.commands, HostCommand::Stop(cause));
        }
        let senders: Vec<Commands> = all.iter().map(|(_, r)| r.commands.clone()).collect();
        let mut tasks = Box::pin(futures_util::future::join_all(
            all.into_iter().map(|(_, r)| r.task),
        ));
        loop {
            tokio::select! {
                biased;
                _ = &mut tasks => break,
                second = signals.stop() => {
                    for tx in &senders {
                        deliver(tx, HostCommand::StopNow(second));
                    }
                }
            }
        }
        // Every profile ended (their runs' groups with them): the driver has nothing left.
        self.driver_task.abort();
        if alone && let Ok((_, _, outcome)) = self.ends.try_recv() {
            return Ok(alone_exit(outcome));
        }
        Ok(0)
    }
}

/// The process's exit code for its one profile's end (`listen`): 0 when stopped; a start
/// error's own, said on stderr (`StartError::refuse`); `Exit::AlreadyRunning`'s when another
/// listener took its agent.
fn alone_exit(outcome: TaskEnd) -> i32 {
    let env = crate::config::process_env();
    match outcome {
        Ok(ListenerEnd::Stopped) => super::start::exit_code(Exit::Done, &env),
        Ok(ListenerEnd::TakenByOther { .. }) => super::start::exit_code(Exit::AlreadyRunning, &env),
        Err(e) => e.refuse(&env),
    }
}

/// The way to one start of a profile's listener in the driver.
#[derive(Clone)]
struct Commands {
    generation: u64,
    driver: mpsc::UnboundedSender<DriverCommand>,
}

/// Hands a command to a profile's listener.
fn deliver(c: &Commands, cmd: HostCommand) {
    let _ = c.driver.send(DriverCommand::To(c.generation, cmd));
}

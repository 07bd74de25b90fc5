//! The process around the profiles' listeners: `agentchat listen` runs one profile through it,
//! `agentchat listen --all` every profile of the config (docs/many-agents.md, "One process for
//! many agents"). The boundary: a profile's listener (`listen::daemon`: its socket, coalescer,
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
mod signals;

pub(super) use profiles::Prepared;

use super::admission::Admission;
use super::daemon::{self, COMMANDS, HostCommand, Link, ListenerEnd, Start};
use super::metrics::{self, Metrics, Registry};
use super::pacer::Pacer;
use crate::config::TestTimeScale;
use crate::config::{self, ConfigArgs, Settings};
use crate::log_events;
use notify::{Notify, Watchdog};
use signals::{Asked, Signals};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tracing::Instrument;

/// How one profile's listener ended: `Ok` as `daemon::run` says, `Err` when it could not start.
type TaskEnd = anyhow::Result<ListenerEnd>;

/// One profile's listener, as the process sees it.
struct Running {
    /// Tells this start of the profile from a later one (a profile removed and added again).
    generation: u64,
    commands: mpsc::Sender<HostCommand>,
    task: JoinHandle<()>,
    /// The loop's turns (`daemon::Link::turns`), and their count at the watchdog's last tick.
    turns: Arc<AtomicU64>,
    seen: Option<u64>,
    /// What SIGHUP compares (`profiles::fingerprint`).
    fingerprint: [u8; 32],
    /// The process's agent lock releases when it started (`blocked`).
    releases_seen: u64,
}

/// One profile (`listen`), or every profile of the config (`listen --all`).
enum Mode {
    One(ConfigArgs),
    All(ConfigArgs, Endpoint),
}

/// The one metrics endpoint of `listen --all`: every profile's `Metrics` in one `Registry`.
pub(super) struct Endpoint {
    /// `--metrics-addr`, else `AGENTCHAT_METRICS_ADDR`, else the top level's
    /// `[listen] metrics_addr`; off when none is set (a profile's own is ignored).
    pub(super) addr: Option<std::net::SocketAddr>,
    registry: Arc<Registry>,
}

impl Endpoint {
    pub(super) fn new(addr: Option<std::net::SocketAddr>) -> Endpoint {
        Endpoint {
            addr,
            registry: Registry::new(),
        }
    }
}

/// The top level's `listen.max_concurrent_runs` and `listen.min_available_memory`: the process's
/// run slots (`listen::admission`), for every profile of `listen --all`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RunSlots {
    pub(super) max: Option<usize>,
    pub(super) min_memory: Option<u64>,
}

impl RunSlots {
    pub(super) fn of(s: &Settings) -> RunSlots {
        RunSlots {
            max: s.listen.max_concurrent_runs,
            min_memory: s.listen.min_available_memory,
        }
    }

    /// The slots there are: as set, else one per CPU core, at least two.
    fn max(self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        self.max
            .unwrap_or_else(|| crate::core::admission::default_max(cores))
    }
}

struct Host {
    mode: Mode,
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
    /// The one connect pacer every profile's socket passes (contract 3.4's per-IP budget).
    pacer: Pacer,
    /// `listen --all`'s run slots, as the top level sets them, and the queue for them.
    slots: RunSlots,
    admission: Option<Admission>,
    /// Profiles whose agent another listener serves, tried again (`blocked`).
    blocked: BTreeMap<String, blocked::Blocked>,
    /// Profiles that cannot run for another reason (their config, their key, their state dir).
    failed_other: std::collections::BTreeSet<String>,
    scale: TestTimeScale,
}

/// `agentchat listen`: the one profile `args` choose, prepared by `listen::run_command` (its
/// lock held). Exit 0 on a stop; `already_running_exit_code` when another listener took its
/// agent (`agent_lock`).
pub(super) async fn run_one(
    args: ConfigArgs,
    settings: Settings,
    prepared: Prepared,
) -> anyhow::Result<i32> {
    let mut signals = Signals::install()?;
    let scale = settings.time_scale;
    let mut host = Host::new(Mode::One(args), scale);
    let name = settings.profile.clone();
    let started = host.start(name, settings, Some(prepared));
    host.serve(&mut signals, vec![started]).await
}

/// `agentchat listen --all`: every profile `config::load_all` finds. Exit 0 on a stop, and 78
/// (`config_error_exit_code`) only when nothing can run: the environment or the file as a whole
/// is wrong, or no profile's settings resolve.
///
/// `scale` is the process's test time scale (the top level's, `config::TestTimeScale`), read once:
/// the connect pacer, which all profiles share, runs by it.
pub(super) async fn run_all(
    args: ConfigArgs,
    set: config::ProfileSet,
    endpoint: Endpoint,
    scale: TestTimeScale,
    slots: RunSlots,
) -> anyhow::Result<i32> {
    let mut signals = Signals::install()?;
    let (addr, registry) = (endpoint.addr, endpoint.registry.clone());
    let mut host = Host::new(Mode::All(args, endpoint), scale);
    let admission = Admission::new(slots.max(), slots.min_memory, Some(registry.clone()));
    host.slots = slots;
    host.admission = Some(admission.clone());
    if let Some(addr) = addr {
        tokio::spawn(metrics::serve(registry, addr, host.endpoint.subscribe()));
    }
    let mut started = Vec::new();
    for (name, settings) in set.profiles {
        match settings {
            Ok(s) => started.push(host.start(name, s, None)),
            Err(e) => host.config_error(&name, &e),
        }
    }
    tracing::info!(
        event = %log_events::HOST_START,
        pid = std::process::id(),
        profiles = host.profiles.len(),
        max_concurrent_runs = admission.max(),
        min_available_memory = slots.min_memory,
        "listening for {} profiles in one process",
        host.profiles.len()
    );
    host.serve(&mut signals, started).await
}

impl Host {
    fn new(mode: Mode, scale: TestTimeScale) -> Host {
        let (ends_tx, ends) = mpsc::unbounded_channel();
        let (endpoint, _) = watch::channel(false);
        Host {
            mode,
            profiles: BTreeMap::new(),
            leaving: Vec::new(),
            returning: BTreeMap::new(),
            ends_tx,
            ends,
            next_generation: 0,
            notify: Notify::from_env(),
            watchdog: None,
            endpoint,
            pacer: Pacer::new(scale.factor()),
            slots: RunSlots::default(),
            admission: None,
            blocked: BTreeMap::new(),
            failed_other: Default::default(),
            scale,
        }
    }

    fn one(&self) -> bool {
        matches!(self.mode, Mode::One(_))
    }

    /// The endpoint's registry (`--all` only).
    fn registry(&self) -> Option<&Arc<Registry>> {
        match &self.mode {
            Mode::All(_, e) => Some(&e.registry),
            Mode::One(_) => None,
        }
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

    /// Starts a profile's listener as a task (with `--all`, in a span naming the profile, so
    /// every line it logs says `profile=<name>`); returns what says it has started.
    fn start(
        &mut self,
        name: String,
        settings: Settings,
        prepared: Option<Prepared>,
    ) -> oneshot::Receiver<()> {
        let generation = self.next_generation;
        self.next_generation += 1;
        self.failed_other.remove(&name);
        if let Some(b) = self.blocked.get_mut(&name) {
            // A try under way: its backoff goes on should it be refused again.
            b.at_none();
        }
        let (commands, commands_rx) = mpsc::channel(COMMANDS);
        let (started_tx, started) = oneshot::channel();
        let turns = Arc::new(AtomicU64::new(0));
        let link = Link {
            commands: commands_rx,
            started: Some(started_tx),
            turns: turns.clone(),
        };
        let (source, notify_status, metrics) = match &self.mode {
            Mode::One(args) => {
                let metrics = Metrics::for_settings(&settings);
                metrics::spawn_server(
                    &metrics,
                    settings.listen.metrics_addr,
                    self.endpoint.subscribe(),
                );
                (config::Source::One(args.clone()), true, metrics)
            }
            Mode::All(args, endpoint) => {
                if settings.listen.metrics_addr.is_some()
                    && settings.listen.metrics_addr != endpoint.addr
                {
                    tracing::warn!(
                        event = %log_events::CONFIG_ADVICE,
                        profile = %name,
                        "this profile's listen.metrics_addr is ignored with --all: the process serves every profile on one endpoint (--metrics-addr, or the top level's [listen] metrics_addr)"
                    );
                }
                if RunSlots::of(&settings) != self.slots {
                    tracing::warn!(
                        event = %log_events::CONFIG_ADVICE,
                        profile = %name,
                        "this profile's listen.max_concurrent_runs or listen.min_available_memory is ignored with --all: the process's run slots are the top level's [listen]"
                    );
                }
                let metrics = match endpoint.addr {
                    Some(_) => endpoint.registry.profile(&name),
                    None => Metrics::off(),
                };
                let source = config::Source::OfAll {
                    args: args.clone(),
                    profile: name.clone(),
                };
                (source, false, metrics)
            }
        };
        let fingerprint = profiles::fingerprint(&settings);
        let ends = self.ends_tx.clone();
        let end_name = name.clone();
        let pacer = self.pacer.clone();
        let admission = self.admission.clone();
        let listener = async move {
            let prepared = match prepared {
                Some(p) => p,
                None => profiles::prepare(&settings).await?,
            };
            let Prepared { key, state, lock } = prepared;
            let start = Start {
                source,
                settings,
                key,
                state,
                metrics,
                notify_status,
                pacer,
                admission,
            };
            let r = daemon::run(start, link).await;
            // The lock outlives the listener: no other can start on this state dir meanwhile.
            drop(lock);
            r
        };
        let task = async move {
            let r = listener.await;
            let _ = ends.send((end_name, generation, r));
        };
        let task = if self.one() {
            tokio::spawn(task)
        } else {
            tokio::spawn(task.instrument(tracing::error_span!("profile", profile = %name)))
        };
        self.profiles.insert(
            name,
            Running {
                generation,
                commands,
                task,
                turns,
                seen: None,
                fingerprint,
                releases_seen: *super::agent_lock::released().borrow(),
            },
        );
        started
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
            tokio::select! {
                _ = released.changed() => self.retry_blocked(true),
                _ = crate::sys::wait::until(self.next_retry()) => self.retry_blocked(false),
                asked = signals.next() => match asked {
                    Asked::Stop(cause) => break cause,
                    Asked::Reload => self.reload(),
                },
                _ = async { all_started.as_mut()?.await; Some(()) }, if all_started.is_some() => {
                    all_started = None;
                    self.notify.ready();
                    self.watchdog = self.notify.watchdog_interval().map(Watchdog::new);
                }
                Some((name, generation, outcome)) = self.ends.recv() => {
                    if let Some(code) = self.on_end(&name, generation, outcome) {
                        // The one profile ended by itself: so does the process.
                        self.notify.stopping();
                        let _ = self.endpoint.send(true);
                        return code;
                    }
                }
                _ = notify::due(&mut self.watchdog) => self.watchdog_tick(),
            }
        };
        self.stop(signals, cause).await
    }

    /// A profile's task ended by itself. With one profile, the process's exit (`Some`).
    fn on_end(
        &mut self,
        name: &str,
        generation: u64,
        outcome: TaskEnd,
    ) -> Option<anyhow::Result<i32>> {
        if let Some(i) = self
            .leaving
            .iter()
            .position(|(n, r)| n == name && r.generation == generation)
        {
            self.leaving.swap_remove(i);
            if let Some(settings) = self.returning.remove(name) {
                tracing::info!(event = %log_events::PROFILE_ADDED, profile = %name, "the old listener of this profile has stopped; starting it again");
                drop(self.start(name.to_string(), settings, None));
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
        if self.one() {
            return Some(exit_code(outcome));
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
            Err(e) if e.downcast_ref::<profiles::LockHeld>().is_some() => {
                let holder = e.downcast_ref::<profiles::LockHeld>().and_then(|h| h.pid);
                let why = format!("{e:#}");
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
                let why = format!("{e:#}");
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
            return Some(Ok(super::already_running_exit_code(
                &crate::config::process_env(),
            )));
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
            let _ = r.commands.try_send(HostCommand::Probe);
        }
    }

    /// SIGTERM/SIGINT: every profile stops at once, in parallel, each run with its grace; a
    /// second signal kills every run's group now.
    async fn stop(mut self, signals: &mut Signals, cause: &'static str) -> anyhow::Result<i32> {
        self.notify.stopping();
        let _ = self.endpoint.send(true);
        let one = self.one();
        let mut all: Vec<(String, Running)> =
            std::mem::take(&mut self.profiles).into_iter().collect();
        all.append(&mut self.leaving);
        for (_, r) in &all {
            deliver(&r.commands, HostCommand::Stop(cause));
        }
        let senders: Vec<mpsc::Sender<HostCommand>> =
            all.iter().map(|(_, r)| r.commands.clone()).collect();
        let mut tasks = Box::pin(futures_util::future::join_all(
            all.into_iter().map(|(_, r)| r.task),
        ));
        loop {
            tokio::select! {
                _ = &mut tasks => break,
                second = signals.stop() => {
                    for tx in &senders {
                        deliver(tx, HostCommand::StopNow(second));
                    }
                }
            }
        }
        if one && let Ok((_, _, outcome)) = self.ends.try_recv() {
            return exit_code(outcome);
        }
        Ok(0)
    }
}

/// The exit code for the one profile's end: 0 when stopped, `already_running_exit_code` when
/// another listener took its agent.
fn exit_code(outcome: TaskEnd) -> anyhow::Result<i32> {
    match outcome? {
        ListenerEnd::Stopped => Ok(0),
        ListenerEnd::TakenByOther { .. } => Ok(super::already_running_exit_code(
            &crate::config::process_env(),
        )),
    }
}

/// Hands a command to a profile: at once when its channel has room, else from a task of its own
/// (a loop that is not draining its commands must not hold up the process).
fn deliver(tx: &mpsc::Sender<HostCommand>, cmd: HostCommand) {
    if let Err(mpsc::error::TrySendError::Full(cmd)) = tx.try_send(cmd) {
        let tx = tx.clone();
        tokio::spawn(async move {
            let _ = tx.send(cmd).await;
        });
    }
}

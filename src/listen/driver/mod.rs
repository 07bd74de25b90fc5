//! The driver: the one tokio loop around the process's state machine (`core::host::Host`, which
//! holds every profile's `core::listener::Listener`). It reads the clock once per step, feeds
//! the machine what came in (a command of the process layer, an answer of a task, a deadline),
//! and performs every effect the machine asks for (`effects`): HTTP requests and runs as tasks
//! whose answers come back on one channel, file writes at once. Nothing here decides anything
//! the machine could: this is the I/O around it.
//!
//! The process layer (`listen::host`: signals, systemd, the metrics endpoint, which profiles run)
//! adds profiles once their start is prepared (the state dir's lock held), and hears each one's
//! start and end.

pub mod convert;
mod effects;
mod policy_memory;
pub(crate) mod run;

pub use policy_memory::open_off_loop;
pub(crate) use policy_memory::{MEMORY_FILE, write_memory};

use crate::config::{self, Settings};
use crate::core::host::{Host, HostObserver, ProfileId};
use crate::core::listener::{Input, Listener, ListenerEnd, Restored};
use crate::core::pacing::PacingPolicy;
use crate::core::time::Now;
use crate::listen::metrics::Metrics;
use crate::listen::state_dir::StateDir;
use crate::log_events;
use secrecy::SecretString;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

/// One reading of the clocks per step: tokio's (paused in tests) for deadlines, the wall clock
/// for what is shown and for the run policy.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    origin: tokio::time::Instant,
}

impl Clock {
    pub fn new() -> Clock {
        Clock {
            origin: tokio::time::Instant::now(),
        }
    }

    pub fn now(&self) -> Now {
        let mono = tokio::time::Instant::now().saturating_duration_since(self.origin);
        let wall = crate::sys::time::unix_ms(SystemTime::now());
        Now::at(
            u64::try_from(mono.as_millis()).unwrap_or(u64::MAX),
            i64::try_from(wall).unwrap_or(i64::MAX),
        )
    }

    /// The instant a machine deadline (monotonic ms) stands for.
    pub fn instant(&self, mono_ms: u64) -> tokio::time::Instant {
        self.origin + Duration::from_millis(mono_ms)
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

/// A task's way to answer the machine about its profile.
#[derive(Clone, Debug)]
pub struct Io {
    id: ProfileId,
    tx: mpsc::UnboundedSender<(ProfileId, Input)>,
}

impl Io {
    pub fn send(&self, input: Input) {
        let _ = self.tx.send((self.id, input));
    }
}

/// What a profile's listener starts with (the process layer prepared it).
pub struct Start {
    pub generation: u64,
    /// Where its settings are read again (SIGHUP, a refused key).
    pub source: config::Source,
    pub settings: Settings,
    pub key: SecretString,
    pub state: StateDir,
    /// Held for the listener's life: no other can start on this state dir meanwhile.
    pub lock: crate::listen::state_dir::Lock,
    pub metrics: Arc<Metrics>,
    /// Tell systemd the state (`STATUS=`): only when this is the process's one profile.
    pub notify_status: bool,
    /// Logs of this profile carry its name (`listen --all`).
    pub span: tracing::Span,
    /// Said once the listener is started.
    pub started: oneshot::Sender<()>,
    /// Said when it ends.
    pub ended: oneshot::Sender<ListenerEnd>,
    /// Counts the steps the profile takes, for the process's watchdog.
    pub turns: Arc<AtomicU64>,
    /// The profile's history and the run policy's ledger built from it and its memory, read
    /// before the listener joins the loop (`policy_memory::open_off_loop`).
    pub opened: (crate::listen::history::Book, crate::core::policy::Ledger),
}

/// What the process layer (`listen::host`) tells a profile's listener. The listener owns no
/// signal and says nothing to systemd: the host turns signals into these, and pings the watchdog
/// only while every profile's loop turns.
#[derive(Debug, Clone)]
pub enum HostCommand {
    /// Stop gracefully (the first SIGTERM/SIGINT, or the profile left the config): the run gets
    /// its grace. The name is the cause, for the log.
    Stop(&'static str),
    /// Stop now (a second signal): the run's group is killed at once.
    StopNow(&'static str),
    /// SIGHUP: read this profile's config and texts again. `listen --all` hands each profile
    /// the settings it read once for all of them; `None`: the listener reads its own.
    Reload(Option<Box<Settings>>),
    /// SIGHUP for a profile of `listen --all` whose settings did not change: whatever keeps its
    /// runs from starting (an unusable runtime, missing texts, a refused key) is looked at now.
    Recheck,
    /// Take a step: the host's watchdog looks for a loop that does not.
    Probe,
}

/// What the process layer tells the driver.
pub enum DriverCommand {
    Add(Box<Start>),
    /// The host's daily budget (`listen --all`).
    Budget(crate::core::host::HostBudget),
    /// A command for the profile of this generation.
    To(u64, HostCommand),
}

/// One profile's I/O: what the machine does not hold.
struct ProfileIo {
    generation: u64,
    span: tracing::Span,
    source: config::Source,
    settings: Settings,
    key: SecretString,
    api: crate::client::Api,
    state: StateDir,
    metrics: Arc<Metrics>,
    _lock: crate::listen::state_dir::Lock,
    agent: crate::listen::agent_lock::AgentSlot,
    /// The connections' command channels, by the machine's id.
    conns: BTreeMap<u64, mpsc::UnboundedSender<crate::listen::socket::ConnCmd>>,
    /// Requests in flight for a cycle (tray reads, dismissals), to give up on a stop.
    requests: BTreeMap<u64, Vec<JoinHandle<()>>>,
    /// The run under way: its cycle, the way to give it SIGTERM, and its task.
    run: Option<(u64, watch::Sender<bool>, JoinHandle<()>)>,
    /// Killed runs' tasks: the profile's end waits for them (their groups are gone then).
    dying: Vec<JoinHandle<()>>,
    status_file: Option<std::fs::File>,
    notify_status: bool,
    /// Writes `policy.json` off the loop.
    memory: Option<policy_memory::MemoryWriter>,
    /// The history file (`listen::history`) and whether its writes fail.
    history: crate::listen::history::Book,
    history_failing: bool,
    invites_failing: bool,
    started: Option<oneshot::Sender<()>>,
    ended: Option<oneshot::Sender<ListenerEnd>>,
    turns: Arc<AtomicU64>,
}

/// The loop: the machine, the profiles' I/O, the channel every task answers on.
pub struct Driver {
    host: Host,
    ios: BTreeMap<ProfileId, ProfileIo>,
    by_generation: BTreeMap<u64, ProfileId>,
    /// A stop for a profile still being prepared (its listener not added yet): it stops as soon
    /// as it is.
    early_stops: BTreeMap<u64, HostCommand>,
    clock: Clock,
    tx: mpsc::UnboundedSender<(ProfileId, Input)>,
    rx: mpsc::UnboundedReceiver<(ProfileId, Input)>,
}

impl Driver {
    /// A driver whose pacer has `pacing`, with `slots` for `listen --all` (the most runs at once
    /// and the memory a run needs). `seed` makes every draw of the machine's; it is logged.
    pub fn new(
        pacing: PacingPolicy,
        slots: Option<(usize, Option<u64>)>,
        seed: u64,
        obs: Arc<dyn HostObserver>,
    ) -> Driver {
        let (tx, rx) = mpsc::unbounded_channel();
        Driver {
            host: Host::new(pacing, slots, seed, obs),
            ios: BTreeMap::new(),
            by_generation: BTreeMap::new(),
            early_stops: BTreeMap::new(),
            clock: Clock::new(),
            tx,
            rx,
        }
    }

    /// Runs until `commands` closes and every profile ended.
    pub async fn run(mut self, mut commands: mpsc::UnboundedReceiver<DriverCommand>) {
        let mut open = true;
        loop {
            self.perform_all();
            if !open && self.ios.is_empty() {
                return;
            }
            let deadline = self.host.next_deadline().map(|t| self.clock.instant(t));
            tokio::select! {
                biased;
                Some((id, input)) = self.rx.recv() => {
                    let now = self.clock.now();
                    self.step(id, |host| host.handle(now, id, input));
                }
                cmd = commands.recv(), if open => match cmd {
                    Some(cmd) => self.command(cmd),
                    None => open = false,
                },
                _ = crate::sys::wait::until(deadline) => {
                    let now = self.clock.now();
                    self.host.tick(now);
                    for io in self.ios.values() {
                        io.turns.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
    }

    /// One input for a profile, in its span, counted as a turn of its loop.
    fn step(&mut self, id: ProfileId, f: impl FnOnce(&mut Host)) {
        match self.ios.get(&id) {
            Some(io) => {
                io.turns.fetch_add(1, Ordering::Relaxed);
                let _g = io.span.clone().entered();
                f(&mut self.host);
            }
            None => f(&mut self.host),
        }
    }

    fn command(&mut self, cmd: DriverCommand) {
        match cmd {
            DriverCommand::Budget(budget) => self.host.set_budget(budget),
            DriverCommand::Add(start) => {
                let generation = start.generation;
                self.add(*start);
                if let Some(stop) = self.early_stops.remove(&generation) {
                    self.command(DriverCommand::To(generation, stop));
                }
            }
            DriverCommand::To(generation, cmd) => {
                let Some(&id) = self.by_generation.get(&generation) else {
                    if matches!(cmd, HostCommand::Stop(_) | HostCommand::StopNow(_)) {
                        self.early_stops.insert(generation, cmd);
                    }
                    return;
                };
                let now = self.clock.now();
                match cmd {
                    HostCommand::Stop(cause) => {
                        self.step(id, |h| h.handle(now, id, Input::Stop { now: false, cause }))
                    }
                    HostCommand::StopNow(cause) => {
                        self.step(id, |h| h.handle(now, id, Input::Stop { now: true, cause }))
                    }
                    HostCommand::Reload(new) => self.reload(id, new),
                    HostCommand::Recheck => self.step(id, |h| h.handle(now, id, Input::Recheck)),
                    HostCommand::Probe => {
                        if let Some(io) = self.ios.get(&id) {
                            io.turns.fetch_add(1, Ordering::Relaxed);
                        }
                        let _g = self.ios.get(&id).map(|io| io.span.clone().entered());
                        self.host.probe_one(now, id);
                        self.host.tick(now);
                    }
                }
            }
        }
    }

    /// A prepared profile joins: its listener is made from its settings and what its state dir
    /// kept (the ledger, the invite memory), and starts.
    fn add(&mut self, s: Start) {
        let _g = s.span.clone().entered();
        let now = self.clock.now();
        let api = match crate::client::Api::new(&s.settings.api_base, s.key.clone()) {
            Ok(api) => api,
            Err(e) => {
                tracing::error!(event = %log_events::HTTP_CLIENT_FAILED, error = %e, "cannot build the HTTP client");
                let _ = s.ended.send(ListenerEnd::Stopped);
                return;
            }
        };
        let cfg = convert::listener_config(&s.settings, s.notify_status, now.wall_ms);
        let (history, ledger) = s.opened;
        let restored = Restored {
            ledger,
            invites: s.state.load_invites().unwrap_or_else(|e| {
                tracing::warn!(event = %log_events::INVITE_MEMORY_DAMAGED, error = %e, "the invite memory could not be read; starting it afresh");
                Default::default()
            }),
        };
        let seed = self.host.seed();
        let obs: Arc<dyn crate::core::listener::Observer> = s.metrics.clone();
        let listener = Listener::new(cfg, restored, seed, obs, now);
        let writer = policy_memory::MemoryWriter::spawn(&s.state, s.span.clone());
        let id = self.host.add(now, listener, s.span.clone());
        self.by_generation.insert(s.generation, id);
        self.ios.insert(
            id,
            ProfileIo {
                generation: s.generation,
                span: s.span,
                source: s.source,
                settings: s.settings,
                key: s.key,
                api,
                state: s.state,
                metrics: s.metrics,
                _lock: s.lock,
                agent: Default::default(),
                conns: BTreeMap::new(),
                requests: BTreeMap::new(),
                run: None,
                dying: Vec::new(),
                status_file: None,
                notify_status: s.notify_status,
                memory: Some(writer),
                history,
                history_failing: false,
                invites_failing: false,
                started: Some(s.started),
                ended: Some(s.ended),
                turns: s.turns,
            },
        );
    }

    /// SIGHUP for one profile: its settings again (handed, or read), the endpoint's client
    /// rebuilt when the API base or key changed.
    fn reload(&mut self, id: ProfileId, new: Option<Box<Settings>>) {
        let Some(io) = self.ios.get_mut(&id) else {
            return;
        };
        let _g = io.span.clone().entered();
        let handed = new.is_some();
        let loaded = new.map_or_else(|| io.source.load(), |s| Ok(*s));
        tracing::info!(
            event = %log_events::RELOAD,
            settings = if handed { "handed" } else { "read" },
            config_reads = crate::config::file_reads(),
            "reloading configuration and texts"
        );
        let now = self.clock.now();
        let (config, endpoint_changed) = match loaded {
            Ok(mut s) => match s.api_key.clone() {
                Some(k) => {
                    if s.state_dir != io.settings.state_dir {
                        tracing::warn!(
                            event = %log_events::RELOAD_PARTIAL,
                            "the state dir cannot change while running; keeping the old one"
                        );
                    }
                    s.state_dir = io.settings.state_dir.clone();
                    let changed = s.api_base != io.settings.api_base
                        || secrecy::ExposeSecret::expose_secret(&k)
                            != secrecy::ExposeSecret::expose_secret(&io.key);
                    let usable = !changed
                        || match crate::client::Api::new(&s.api_base, k.clone()) {
                            Ok(api) => {
                                io.api = api;
                                io.key = k;
                                true
                            }
                            Err(e) => {
                                tracing::error!(event = %log_events::HTTP_CLIENT_FAILED, error = %e, "cannot build the HTTP client");
                                false
                            }
                        };
                    if usable {
                        if s.time_scale != io.settings.time_scale {
                            say_time_scale(&s);
                        }
                        let cfg = convert::listener_config(&s, io.notify_status, now.wall_ms);
                        io.settings = s;
                        (Ok(Box::new(cfg)), changed)
                    } else {
                        (Err("no client for the new endpoint".to_string()), false)
                    }
                }
                None => {
                    tracing::error!(
                        event = %log_events::RELOAD_FAILED,
                        "the new configuration has no API key; keeping the old one"
                    );
                    (Err("no API key".to_string()), false)
                }
            },
            Err(e) => {
                tracing::error!(event = %log_events::RELOAD_FAILED, error = %e, "the new configuration is invalid; keeping the old one");
                (Err(e.to_string()), false)
            }
        };
        self.host.handle(
            now,
            id,
            Input::Reload {
                config,
                endpoint_changed,
            },
        );
    }
}

/// The test time scale changed with a reload.
fn say_time_scale(s: &Settings) {
    match s.time_scale.notice() {
        Some(line) => tracing::info!(event = %log_events::TEST_TIME_SCALE, "{line}"),
        None => tracing::info!(
            event = %log_events::TEST_TIME_SCALE,
            api_base = %s.api_base,
            "the test time scale is not in effect (any more): every timer runs at contract speed"
        ),
    }
}

/// The stamp of the runtime's binary as one number (a changed binary gets a new chance).
pub fn binary_stamp(settings: &Settings) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let stamp = crate::runtime::binary_stamp(settings)?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    stamp.hash(&mut h);
    Some(h.finish())
}

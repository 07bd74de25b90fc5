//! `agentchat sim`: a faithful in-memory AgentChat server on loopback, with a control API for
//! tests and demos (`docs/local-server.md`). The simulator (`crate::simulate`) drives the same
//! store, routes and timers on a virtual clock, without sockets or tokio.
//!
//! Layout: `store`/`model` hold the data and the operations every door shares (with `verdicts`,
//! `invites`, `mutes`, `owner` (pauses and suspension), `conversations` and `reply_coord` split
//! out); `tray` builds the v1 tray; `timers` run the defer and re-wake ladders; `webhook` the wake
//! webhook (contract 3.5); `frames` the socket frames besides messages and wakes; `budget` holds
//! the poll and connect budgets; `http` routes to `api` (the agent's REST hands), `ws` (the
//! socket), `mcp` (the hosted tools) and `control` (`/_sim/`, with `restart`: a whole-server
//! restart and the refusal counts); `old_paths` plays contract 7; `texts` serves the texts;
//! `clock` scales and steps every timer.

mod api;
mod budget;
pub mod clock;
mod control;
mod conversations;
mod error;
mod frames;
pub(crate) mod http;
mod invites;
mod mcp;
pub(crate) mod model;
mod mutes;
mod old_paths;
mod owner;
mod reply_coord;
mod restart;
mod signup;
pub(crate) mod store;
mod texts;
pub(crate) mod timers;
mod tray;
mod verdicts;
mod webhook;
pub(crate) mod ws;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Run every server timer N times faster (0.001 to 1000000).
    #[arg(long, default_value_t = 1.0, value_parser = parse_time_scale)]
    pub time_scale: f64,
    /// Create @alice and @bob and print their keys.
    #[arg(long)]
    pub seed_demo: bool,
}

/// `--time-scale`: a finite number from 0.001 to 1000000. Zero, a negative number, `nan` and
/// `inf` would stop or break every timer (the clock divides by it), and a scale far below 0.001
/// overflows the longest one (24 h).
fn parse_time_scale(s: &str) -> Result<f64, String> {
    let n: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("`{s}` is not a number"))?;
    if n.is_finite() && (0.001..=1_000_000.0).contains(&n) {
        Ok(n)
    } else {
        Err(format!(
            "{s} is not a time scale: give a number from 0.001 to 1000000 (1 is real time)"
        ))
    }
}

/// Prints one JSON line (`api_base`, and the seeded agents' keys) on stdout, then logs requests
/// on stderr (never keys) until SIGINT or SIGTERM.
pub async fn run_command(args: SimArgs) -> anyhow::Result<i32> {
    let _ = tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(false)
        .with_max_level(tracing::Level::INFO)
        .try_init();
    let handle = start(SimConfig {
        listen: args.listen,
        time_scale: args.time_scale,
        seed_demo: args.seed_demo,
    })
    .await?;
    let mut line = json!({"api_base": handle.api_base});
    if args.seed_demo {
        line["agents"] = handle
            .seeded
            .iter()
            .map(|(h, k)| json!({"handle": h, "api_key": k}))
            .collect();
    }
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(out, "{line}")?;
        out.flush()?;
    }
    tracing::info!(
        "sim: listening on {} (time scale {})",
        handle.api_base,
        args.time_scale
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("sim: shutting down");
    handle.shutdown().await;
    Ok(0)
}

/// How to start the server in-process.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub listen: SocketAddr,
    pub time_scale: f64,
    pub seed_demo: bool,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            time_scale: 1.0,
            seed_demo: false,
        }
    }
}

/// A running server. Dropping it (or `shutdown`) stops it.
pub struct SimHandle {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub api_base: String,
    /// `(handle with @, api key)` of the seeded agents, when `seed_demo`.
    pub seeded: Vec<(String, String)>,
    stop: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl SimHandle {
    /// Stops the server: sockets close `1001 Server shutting down`, held requests end.
    pub async fn shutdown(mut self) {
        let _ = self.stop.send(true);
        for t in self.tasks.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
    }
}

impl Drop for SimHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Starts the server on a tokio runtime that is already running; returns once it listens.
pub async fn start(config: SimConfig) -> anyhow::Result<SimHandle> {
    if !config.listen.ip().is_loopback() {
        anyhow::bail!(
            "the local server listens on loopback only; {} is not a loopback address",
            config.listen
        );
    }
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", config.listen))?;
    let addr = listener.local_addr()?;
    let clock = clock::SimClock::new(config.time_scale);
    let mut st = store::Store::new(clock.clone());
    let mut seeded = Vec::new();
    if config.seed_demo {
        for h in ["alice", "bob"] {
            let (h, key) = st
                .create_agent(h, None)
                .map_err(|e| anyhow::anyhow!("{e}"))?;
            seeded.push((format!("@{h}"), key));
        }
    }
    let (stop, shutdown) = watch::channel(false);
    let sim: http::Sim = Arc::new(http::Shared {
        store: Mutex::new(st),
        clock,
        shutdown,
        hooks: webhook::client(),
    });
    let serve = tokio::spawn(http::serve(sim.clone(), listener));
    let ticker = tokio::spawn(tick_loop(sim));
    Ok(SimHandle {
        addr,
        api_base: format!("http://{addr}"),
        seeded,
        stop,
        tasks: vec![serve, ticker],
    })
}

/// Drives the server-owned timers (defer reminders, re-wake rungs) on the scaled clock.
async fn tick_loop(sim: http::Sim) {
    let mut shutdown = sim.shutdown.clone();
    let mut every = tokio::time::interval(Duration::from_millis(20));
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = every.tick() => tick(&sim),
            _ = shutdown.changed() => return,
        }
    }
}

/// One look at every server timer: the ticker's every 20 ms, and at once after
/// `POST /_sim/clock` steps the clock. The wake webhook attempts it finds due go out on tasks of
/// their own, the lock released.
fn tick(sim: &http::Sim) {
    let due = {
        let mut s = sim.lock();
        timers::tick(&mut s);
        s.webhook_due()
    };
    for a in due {
        tokio::spawn(webhook::deliver(sim.clone(), a));
    }
}

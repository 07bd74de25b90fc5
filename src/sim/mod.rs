//! `agentchat sim`: a faithful in-memory AgentChat server on loopback, with a control API for
//! tests and demos (design 8). Owned by the sim work (issue 3).

use std::net::SocketAddr;

#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Run every server timer N times faster.
    #[arg(long, default_value_t = 1.0)]
    pub time_scale: f64,
    /// Create @alice and @bob and print their keys.
    #[arg(long)]
    pub seed_demo: bool,
}

pub async fn run_cli(args: SimArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("agentchat sim is not built yet")
}

/// How to start the server in-process.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub listen: SocketAddr,
    pub time_scale: f64,
    pub seed_demo: bool,
}

/// A running server. Dropping it (or `shutdown`) stops it.
pub struct SimHandle {
    pub addr: SocketAddr,
    /// `http://127.0.0.1:PORT`
    pub api_base: String,
    /// `(handle with @, api key)` of the seeded agents, when `seed_demo`.
    pub seeded: Vec<(String, String)>,
}

impl SimHandle {
    pub async fn shutdown(self) {}
}

/// Starts the server on a tokio runtime that is already running; returns once it listens.
pub async fn start(config: SimConfig) -> anyhow::Result<SimHandle> {
    let _ = config;
    anyhow::bail!("agentchat sim is not built yet")
}

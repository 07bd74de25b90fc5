//! `agentchat dashboard`: the live page (`listen::page`) for the config's profiles, served on
//! loopback by a process of its own, reading the files their listeners keep (`status.json`, the
//! run history): the same page `listen --metrics-addr` serves at `/`, for a host whose listeners
//! serve none, or for a person who wants the page without metrics. It needs no key and takes no
//! lock; a listener's restart does not interrupt it.

use crate::config::ConfigArgs;
use crate::listen::metrics::{Site, is_loopback, serve_site};
use crate::listen::page::{Page, PageProfile};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Where the page is served unless `--addr` says otherwise.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8077";

#[derive(Debug, Clone, clap::Args)]
pub struct DashboardArgs {
    /// Config file (default: config.toml in the platform config dir) [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Only this profile (default: every profile of the config, and every state dir a live
    /// listener holds).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Where to serve the page (port 0: any free port, printed).
    #[arg(long, value_name = "ADDR", default_value = DEFAULT_ADDR)]
    pub addr: SocketAddr,
    /// Serve on an address beyond this machine (the page then answers anyone who reaches it).
    #[arg(long)]
    pub public: bool,
}

pub async fn run_command(args: DashboardArgs) -> anyhow::Result<i32> {
    if !is_loopback(&args.addr) && !args.public {
        anyhow::bail!(
            "{} is not a loopback address: the page shows your agents' runs to whoever reaches it; add --public to serve it there anyway",
            args.addr
        );
    }
    let config = ConfigArgs {
        config: args.config.clone(),
        ..ConfigArgs::default()
    };
    let profiles: Vec<PageProfile> = crate::status::profile_dirs(&config)?
        .into_iter()
        .filter(|p| args.profile.as_ref().is_none_or(|only| *only == p.name))
        .map(|p| PageProfile {
            name: p.name,
            state_dir: Some(p.state_dir),
            error: p.error,
        })
        .collect();
    if profiles.is_empty() {
        match &args.profile {
            Some(p) => anyhow::bail!("the config names no profile {p:?}"),
            None => anyhow::bail!("the config names no profile"),
        }
    }
    let listener = tokio::net::TcpListener::bind(args.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot serve the page on {}: {e}", args.addr))?;
    let local = listener.local_addr()?;
    println!(
        "agentchat dashboard: http://{local}/ ({} profile{}; Ctrl-C stops)",
        profiles.len(),
        if profiles.len() == 1 { "" } else { "s" }
    );
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let site = Arc::new(Site::Dashboard {
        page: Page::new(),
        profiles,
    });
    let server = tokio::spawn(serve_site(site, listener, stopped));
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = interrupt.recv() => {}
        _ = terminate.recv() => {}
    }
    let _ = stop.send(true);
    let _ = server.await;
    Ok(0)
}

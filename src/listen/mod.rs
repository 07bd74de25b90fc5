//! `agentchat listen`: the resident listener (design 2-7). Owned by the listener work (issue 4).

pub mod runner;

use crate::config::ConfigArgs;

#[derive(Debug, Clone, clap::Args)]
pub struct ListenArgs {
    #[command(flatten)]
    pub config: ConfigArgs,
    /// Connect, run at most one cycle if something waits, then exit.
    #[arg(long)]
    pub once: bool,
    /// text | json.
    #[arg(long, value_name = "FORMAT")]
    pub log_format: Option<String>,
}

pub async fn run_cli(args: ListenArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("agentchat listen is not built yet")
}

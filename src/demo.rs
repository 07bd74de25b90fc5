//! `agentchat demo`: the whole loop on the local server, no account, no network. Owned by the
//! listener work (issue 4).

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {}

pub async fn run_cli(args: DemoArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("agentchat demo is not built yet")
}

/// Hidden: the small agent the demo's listener runs as its script runtime.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoAgentArgs {}

pub async fn run_agent_cli(args: DemoAgentArgs) -> anyhow::Result<i32> {
    let _ = args;
    anyhow::bail!("the demo agent is not built yet")
}

//! The `agentchat` binary: parses the command line (defined in `agentchat::cli`) and hands each
//! command to its module. Errors become one line on stderr and exit code 1 here, at the edge.

use agentchat::cli::{Cli, Command};
use clap::Parser;

fn main() {
    let cli = Cli::parse();
    agentchat::sys::tls::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("agentchat: cannot start the async runtime: {e}");
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Listen(a) => agentchat::listen::run_command(a).await,
            Command::Status(a) => agentchat::status::run_command(a).await,
            Command::Sim(a) => agentchat::sim::run_command(a).await,
            Command::Service(a) => agentchat::service::run_command(a).await,
            Command::Doctor(a) => agentchat::doctor::run_command(a).await,
            Command::Demo(a) => agentchat::demo::run_command(a).await,
            Command::Completions(a) => agentchat::cli::run_completions(a),
            Command::Man(a) => agentchat::cli::run_man(a),
            Command::DemoAgent(a) => agentchat::demo::run_agent_command(a).await,
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("agentchat: {e:#}");
            std::process::exit(1);
        }
    }
}

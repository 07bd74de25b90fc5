//! The `agentchat` binary: parses the command line (defined in `agentchat::cli`) and hands each
//! command to its module. Errors become one line on stderr and exit code 1 here, at the edge.

use agentchat::cli::{Cli, Command};
use clap::Parser;

fn main() {
    let cli = Cli::try_parse().unwrap_or_else(|e| exit_on_usage_error(e));
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

/// Prints clap's message and exits. `listen` runs under service managers, so a flag it cannot
/// use (`--runtime gpt`, `--log-format xml`) is a config error like any other: EX_CONFIG, which
/// the systemd unit does not restart (or 0 under launchd); other commands keep clap's code.
fn exit_on_usage_error(e: clap::Error) -> ! {
    let _ = e.print();
    let listen = std::env::args_os().nth(1).is_some_and(|a| a == "listen");
    let code = if listen && e.use_stderr() {
        agentchat::listen::config_error_exit_code(&agentchat::config::process_env())
    } else {
        e.exit_code()
    };
    std::process::exit(code)
}

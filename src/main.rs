//! The `agentchat` binary: parses the command line (defined in `agentchat::cli`) and hands each
//! command to its module. Errors become one line on stderr and exit code 1 here, at the edge.
//!
//! Every fatal error, a usage error included, is one line `agentchat <command>: <what>` (as
//! `listen` prints when it cannot start), each cause once (docs/operating.md, "When something is
//! wrong").

use agentchat::cli::{Cli, Command};
use clap::CommandFactory;

fn main() {
    let cli = agentchat::cli::try_parse().unwrap_or_else(|e| exit_on_usage_error(e));
    if matches!(
        cli.command,
        Command::Status(_)
            | Command::Runs(_)
            | Command::Doctor(_)
            | Command::Service(_)
            | Command::Completions(_)
            | Command::Man(_)
            | Command::CompleteProfiles(_)
    ) {
        end_quietly_on_a_closed_pipe();
    }
    agentchat::sys::tls::install_crypto_provider();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("{}: cannot start the async runtime: {e}", error_prefix());
            std::process::exit(1);
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Listen(a) => agentchat::listen::run_command(a).await,
            Command::Status(a) => agentchat::status::run_command(a).await,
            Command::Runs(a) => agentchat::runs::run_command(a).await,
            Command::Dashboard(a) => agentchat::dashboard::run_command(a).await,
            Command::Sim(a) => agentchat::sim::run_command(a).await,
            Command::Service(a) => agentchat::service::run_command(a).await,
            Command::Doctor(a) => agentchat::doctor::run_command(a).await,
            Command::Demo(a) => agentchat::demo::run_command(a).await,
            Command::Setup(a) => agentchat::setup::run_command(a).await,
            Command::Uninstall(a) => agentchat::setup::run_uninstall(a).await,
            Command::Mcp(a) => agentchat::mcp::run_command(a).await,
            Command::Completions(a) => agentchat::cli::run_completions(a),
            Command::Man(a) => agentchat::cli::run_man(a),
            Command::DemoAgent(a) => agentchat::demo::run_agent_command(a).await,
            Command::CompleteProfiles(a) => agentchat::cli::run_complete_profiles(a),
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("{}: {e:#}", error_prefix());
            std::process::exit(1);
        }
    }
}

/// Rust starts every program with SIGPIPE ignored, so writing to a pipe whose reader has gone
/// (`agentchat man | head -5`) fails with EPIPE, and `println!` panics on it. The commands that
/// print a report and exit take the default action back: they end silently, as `cat` does.
/// `listen`, `sim` and `demo` keep it ignored: they write to their children's pipes and sockets
/// and must outlive a reader that went away (doctor's probes get no stdin; sockets are written
/// with MSG_NOSIGNAL).
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: signal(2) with SIG_DFL, before any thread is started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Prints clap's message and exits. `listen` runs under service managers, so a flag it cannot
/// use (`--runtime gpt`, `--log-format xml`) is a config error like any other: EX_CONFIG, which
/// the systemd unit does not restart (or 0 under launchd: `listen::start::exit_code`); other
/// commands keep clap's code. A usage error starts `agentchat <command>: ` like every other error
/// (clap's own `error: ` is replaced); help and version go out as clap prints them.
fn exit_on_usage_error(e: clap::Error) -> ! {
    if e.use_stderr() {
        let text = e.render().to_string();
        let what = text.strip_prefix("error: ").unwrap_or(&text);
        eprint!("{}: {what}", error_prefix());
    } else {
        let _ = e.print();
    }
    let code = if failed_in(&e).as_deref() == Some("listen") {
        agentchat::listen::start::exit_code(
            agentchat::core::exit::Exit::Config,
            &agentchat::config::process_env(),
        )
    } else {
        e.exit_code()
    };
    std::process::exit(code)
}

/// The command whose arguments clap was parsing when it refused them, `None` for the top level's
/// own errors and for help and version: clap's error says what went wrong but not where, so the
/// same arguments are parsed again with errors ignored, as far as clap gets.
fn failed_in(e: &clap::Error) -> Option<String> {
    use clap::error::ErrorKind;
    let top_level = matches!(
        e.kind(),
        ErrorKind::InvalidSubcommand
            | ErrorKind::MissingSubcommand
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    );
    if !e.use_stderr() || top_level {
        return None;
    }
    let lenient = agentchat::cli::command()
        .ignore_errors(true)
        .try_get_matches();
    lenient.ok()?.subcommand_name().map(str::to_string)
}

/// `agentchat <command>` for the command named on the command line (its first argument, when
/// clap knows it as one), else `agentchat`. Read from the arguments, not the parsed command, so
/// a usage error gets the same prefix; an argument that is not UTF-8 names no command. Only an
/// error asks: a start pays nothing for it.
fn error_prefix() -> String {
    std::env::args_os()
        .nth(1)
        .and_then(|first| {
            Cli::command()
                .find_subcommand(first.to_str()?)
                .map(|c| format!("agentchat {}", c.get_name()))
        })
        .unwrap_or_else(|| "agentchat".to_string())
}

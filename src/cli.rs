//! The command line: the one clap definition of `agentchat` and its commands. `main.rs` parses it
//! and dispatches; `agentchat completions` and `agentchat man` render it; tests inspect it. So the
//! shell completions, the man pages and `--help` can never disagree with what the binary accepts.
//!
//! The environment variables and exit codes of each command are listed in its `--help` (and so in
//! its man page) here, next to the definition, because config reads the variables itself rather
//! than through clap (an empty variable counts as unset, and flags win over the environment).

use clap::{CommandFactory, Parser, Subcommand};
use std::io::Write;
use std::path::PathBuf;

/// The environment variables that choose the profile and its files (config's own layer), as
/// macros so `concat!` can join them with each command's own lines.
macro_rules! profile_env {
    () => {
        "Environment (an empty variable counts as unset; a flag wins over its variable):
  AGENTCHAT_CONFIG      the config file (--config)
  AGENTCHAT_PROFILE     the profile (--profile)
  AGENTCHAT_STATE_DIR   the profile's state dir (--state-dir)"
    };
}

/// The variables that choose the runtime, the server and the key.
macro_rules! server_env {
    () => {
        "
  AGENTCHAT_RUNTIME     claude-code | codex | script (--runtime)
  AGENTCHAT_API_BASE    the server (--api-base)
  AGENTCHAT_API_KEY     the API key (else api_key_file, else api_key in the config)
  AGENTCHAT_ALLOW_CLEARTEXT  1: allow a plain http:// api_base beyond this machine"
    };
}

const LISTEN_HELP: &str = concat!(
    profile_env!(),
    server_env!(),
    "
  AGENTCHAT_LOG         log level or filter, e.g. debug (else log_level in the config)
  AGENTCHAT_LOG_FORMAT  text | json (--log-format)
  AGENTCHAT_METRICS_ADDR  serve /metrics, /healthz, /readyz here (--metrics-addr)
  AGENTCHAT_INTEGRATION off: exit 0 at once without listening

Exit codes:
  0   stopped by SIGTERM/SIGINT; AGENTCHAT_INTEGRATION=off; --once: nothing waited or the run
      completed
  1   --once: could not connect, read the tray or find texts, a handle mismatch, or the run failed
  75  another listener holds the profile's lock, or serves the same agent on this machine
      (EX_TEMPFAIL; the systemd unit does not restart)
  78  the config cannot work (EX_CONFIG; the systemd unit does not restart on it)
  Under launchd 75 and 78 exit 0 instead, or KeepAlive would restart them.

Signals: SIGHUP reloads the config and texts and retries a refused key or unusable runtime."
);

const STATUS_HELP: &str = concat!(
    profile_env!(),
    "

Exit codes:
  0  a listener is running and its main loop turns
  3  none is running (never ran, stopped, died, or stuck)
  1  the config or the status file cannot be read"
);

const DOCTOR_HELP: &str = concat!(
    profile_env!(),
    server_env!(),
    "

Exit codes:
  0  no check failed (a WARN is worth a look but does not stop the listener)
  1  at least one check failed"
);

const SERVICE_HELP: &str = "\
Environment:
  AGENTCHAT_PROFILE      the profile (--profile)
  AGENTCHAT_CONFIG       the config file the unit passes to `listen --config` (--config)
  AGENTCHAT_SERVICE_DIR  write and remove units in this directory; never call systemctl/launchctl
  PATH, XDG_CONFIG_HOME, XDG_STATE_HOME  copied into the unit (PATH without duplicates)

Exit codes:
  0  done (status: whatever the service's state)
  1  it could not be done: the reason, and what to do, on stderr";

const TOP_HELP: &str = "\
Start with `agentchat demo` (no account needed), then `agentchat doctor`.

Exit codes (each command's --help lists its own):
  0   done (listen: stopped by a signal)
  1   it could not be done: what, and what to do, on stderr
  2   a usage error: an unknown flag or a bad value (listen: 78)
  3   status: no listener is running
  75  listen: another listener holds the profile's lock
  78  listen: the config cannot work (EX_CONFIG)";

const SIM_HELP: &str = "\
Prints one JSON line on stdout when ready: {\"api_base\":\"http://127.0.0.1:PORT\"}.

Exit codes:
  0  stopped by SIGINT/SIGTERM
  1  it could not start (for example the address is taken or not loopback)";

const DEMO_HELP: &str = "\
Exit codes:
  0  the whole loop ran and every check passed
  1  something failed: what, and the listener's last log lines, on stderr";

#[derive(Debug, Parser)]
#[command(
    name = "agentchat",
    version,
    about = "The resident listener for AgentChat, and a local AgentChat server",
    after_help = TOP_HELP
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Hold the AgentChat socket and start the agent's run whenever something waits.
    #[command(after_help = LISTEN_HELP)]
    Listen(crate::listen::ListenArgs),
    /// Show what the profile's listener is doing (from its status.json).
    #[command(after_help = STATUS_HELP)]
    Status(crate::status::StatusArgs),
    /// Run a faithful local AgentChat server (in memory, loopback only).
    #[command(after_help = SIM_HELP)]
    Sim(crate::sim::SimArgs),
    /// Install, remove or inspect the listener as a per-user service (systemd or launchd).
    #[command(after_help = SERVICE_HELP)]
    Service(crate::service::ServiceArgs),
    /// Check config, key, server, state dir, runtime and service: PASS/WARN/FAIL per check.
    #[command(after_help = DOCTOR_HELP)]
    Doctor(crate::doctor::DoctorArgs),
    /// Show the whole loop on the local server: no account, no network.
    #[command(after_help = DEMO_HELP)]
    Demo(crate::demo::DemoArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout, or write every command's page into a directory.
    Man(ManArgs),
    /// The demo's built-in agent (used by `demo` as its script runtime).
    #[command(hide = true)]
    DemoAgent(crate::demo::DemoAgentArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Clone, clap::Args)]
pub struct ManArgs {
    /// Write agentchat.1 and one page per command (agentchat-listen.1, ...) into DIR instead.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
}

/// The whole CLI as a `clap::Command`, for completions, man pages and tests.
pub fn command() -> clap::Command {
    Cli::command()
}

/// Writes the completion script for `shell` to `out`. Hidden commands (the demo's internal
/// `demo-agent`) are left out: clap_complete's bash script would offer them.
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    let full = command();
    let mut shown = clap::Command::new("agentchat")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .subcommands(full.get_subcommands().filter(|c| !c.is_hide_set()).cloned());
    clap_complete::generate(shell, &mut shown, "agentchat", out);
}

/// Writes the top-level man page, `agentchat(1)`, to `out`.
pub fn write_man_page(out: &mut dyn Write) -> std::io::Result<()> {
    // As `generate_to` does for the other pages: no page for clap's `help` subcommand.
    clap_mangen::Man::new(command().disable_help_subcommand(true)).render(out)
}

/// Writes `agentchat.1` and one page per visible command into `dir`; returns the files written.
pub fn write_man_pages(dir: &std::path::Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    clap_mangen::generate_to(command(), dir)?;
    let mut pages: Vec<PathBuf> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("agentchat") && n.ends_with(".1"))
        })
        .collect();
    pages.sort();
    Ok(pages)
}

pub fn run_completions(args: CompletionsArgs) -> anyhow::Result<i32> {
    let mut out = std::io::stdout().lock();
    write_completions(args.shell, &mut out);
    out.flush()?;
    Ok(0)
}

pub fn run_man(args: ManArgs) -> anyhow::Result<i32> {
    use anyhow::Context;
    match args.dir {
        None => {
            let mut out = std::io::stdout().lock();
            write_man_page(&mut out)?;
            out.flush()?;
        }
        Some(dir) => {
            for page in write_man_pages(&dir)
                .with_context(|| format!("cannot write man pages into {}", dir.display()))?
            {
                println!("wrote {}", page.display());
            }
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cli_definition_passes_claps_own_consistency_checks() {
        command().debug_assert();
    }

    #[test]
    fn the_completion_scripts_leave_out_hidden_commands_but_keep_the_rest() {
        let mut out = Vec::new();
        write_completions(clap_complete::Shell::Bash, &mut out);
        let script = String::from_utf8(out).unwrap();
        assert!(!script.contains("demo-agent"));
        for cmd in command().get_subcommands().filter(|c| !c.is_hide_set()) {
            assert!(
                script.contains(cmd.get_name()),
                "{} missing",
                cmd.get_name()
            );
        }
    }
}

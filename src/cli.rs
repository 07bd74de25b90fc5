//! The command line: the one clap definition of `agentchat` and its commands. `main.rs` parses it
//! and dispatches; `agentchat completions` and `agentchat man` render it; tests inspect it. So the
//! shell completions, the man pages and `--help` can never disagree with what the binary accepts.
//!
//! The environment variables and exit codes of each command are listed in its `--help` (and so in
//! its man page) here, next to the definition, because config reads the variables itself rather
//! than through clap (an empty variable counts as unset, and flags win over the environment).

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
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
  AGENTCHAT_LOG_STREAM  stderr (the default) | stdout: where the log's lines go
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

const RUNS_HELP: &str = concat!(
    profile_env!(),
    "

Each line: when it started, how it ended, how long it took, what it cost, why it was woken, what
waited (cards and invites, by count and their senders' handles; never a message), what the tray
showed after it, and its id. The last line sums today (the machine's local day).

Exit codes:
  0  listed (also when there is nothing to list)
  1  the config or a history file cannot be read; runs show: no such run"
);

const DASHBOARD_HELP: &str = "\
The page: every profile with its handle, state, hold and today's runs and spend, sorted by what
needs attention (stuck, failing, held); a 24-hour timeline of each one's wakes, runs and holds;
the latest runs, each with its own view. It asks for news every 2 s while it is shown. Its API:
GET /api/overview, /api/runs (the lines `agentchat runs --json` prints), /api/run/ID.

Environment:
  AGENTCHAT_CONFIG  the config file (--config)

Exit codes:
  0  stopped by SIGINT/SIGTERM
  1  it could not start: the config, or the address is taken or not loopback (--public)";

const DOCTOR_HELP: &str = concat!(
    profile_env!(),
    server_env!(),
    "

Exit codes:
  0  no check failed (a WARN is worth a look but does not stop the listener); --run: the run
     started, reached the AgentChat tools and completed
  1  at least one check failed (--strict: nothing listening fails too); --run: it did not"
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
Start with `agentchat demo` (no account needed); then `agentchat setup` (it signs you up if
you have no key), `agentchat doctor` and `agentchat doctor --run`.

Exit codes (each command's --help lists its own):
  0   done (listen: stopped by a signal)
  1   it could not be done: what, and what to do, on stderr
  2   a usage error: an unknown flag or a bad value (listen: 78)
  3   status: no listener is running; setup: not yet working (its last line says what to do)
  75  listen: another listener holds the profile's lock
  78  listen: the config cannot work (EX_CONFIG)";

const SIM_HELP: &str = "\
Prints one JSON line on stdout when ready: {\"api_base\":\"http://127.0.0.1:PORT\"}.

It sends no mail: the 6-digit codes of a sign-up or a key recovery (`agentchat setup --new`,
`--recover`) are kept in its outbox, newest last:
  curl -s http://127.0.0.1:PORT/_sim/outbox      [{\"to\": ..., \"code\": \"123456\", \"purpose\": ...}]
The control API (agents, sockets, wakes; no auth, loopback only) is under /_sim/; see
docs/local-server.md.

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
    /// What the agent did: a line per run, hold and queued wait, newest first (`runs show ID`: one).
    #[command(after_help = RUNS_HELP)]
    Runs(crate::runs::RunsArgs),
    /// Serve the live page of every profile's runs and holds on loopback (what listen serves at /).
    #[command(after_help = DASHBOARD_HELP)]
    Dashboard(crate::dashboard::DashboardArgs),
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
    /// Set up an agent in one go: key, runtime, config, Claude Code / Codex wiring, service.
    #[command(after_help = crate::setup::SETUP_HELP)]
    Setup(crate::setup::SetupArgs),
    /// Remove what `setup` added for a profile (the same as `setup --undo`).
    #[command(after_help = crate::setup::UNINSTALL_HELP)]
    Uninstall(crate::setup::UninstallArgs),
    /// A stdio MCP server for Claude Code / Codex, relaying to AgentChat with the profile's key.
    #[command(after_help = crate::mcp::MCP_HELP)]
    Mcp(crate::mcp::McpArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) on stdout.
    Completions(CompletionsArgs),
    /// Print the man page (roff) on stdout, or write every command's page into a directory.
    Man(ManArgs),
    /// The demo's built-in agent (used by `demo` as its script runtime).
    #[command(hide = true)]
    DemoAgent(crate::demo::DemoAgentArgs),
    /// The config's profiles, one a line, for the shell completions of `--profile`.
    #[command(hide = true)]
    CompleteProfiles(CompleteProfilesArgs),
}

#[derive(Debug, Clone, clap::Args)]
pub struct CompleteProfilesArgs {
    /// The config file (default: AGENTCHAT_CONFIG, else the platform's).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
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

/// The whole CLI as a `clap::Command`, for parsing, completions, man pages and tests: the derived
/// definition, with `--metrics-addr` (part of the shared config flags) hidden and refused
/// everywhere but `listen`, the one command that serves metrics.
pub fn command() -> clap::Command {
    let mut cmd = Cli::command();
    let others: Vec<String> = cmd
        .get_subcommands()
        .filter(|c| c.get_name() != "listen")
        .filter(|c| c.get_arguments().any(|a| a.get_id() == "metrics_addr"))
        .map(|c| c.get_name().to_string())
        .collect();
    for name in others {
        cmd = cmd.mut_subcommand(name, |c| {
            c.mut_arg("metrics_addr", |a| {
                a.hide(true)
                    .value_parser(|_: &str| -> Result<String, String> {
                        Err("only `agentchat listen` serves metrics".to_string())
                    })
            })
        });
    }
    cmd
}

/// Parses the process's arguments with [`command`].
pub fn try_parse() -> Result<Cli, clap::Error> {
    let matches = command().try_get_matches()?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command()))
}

/// The levels `--log-level` offers in completions (it also takes a filter such as
/// `agentchat=debug,info`, which no completion can list).
const LOG_LEVELS: [&str; 5] = ["error", "warn", "info", "debug", "trace"];

/// A stand-in candidate for `--profile` in the generated script, replaced by each shell's call of
/// `agentchat complete-profiles` ([`dynamic_profiles`]).
const PROFILES_MARK: &str = "AGENTCHAT__PROFILES";

/// Writes the completion script for `shell` to `out`. Hidden commands (the demo's internal
/// `demo-agent`) are left out: clap_complete's bash script would offer them.
pub fn write_completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    let full = command();
    let dynamic = matches!(
        shell,
        clap_complete::Shell::Bash | clap_complete::Shell::Zsh | clap_complete::Shell::Fish
    );
    let subcommands = full
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .map(|c| with_value_candidates(c.clone(), dynamic));
    let mut shown = clap::Command::new("agentchat")
        .version(env!("CARGO_PKG_VERSION"))
        .about(full.get_about().cloned().unwrap_or_default())
        .subcommands(subcommands);
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut shown, "agentchat", &mut script);
    let script = String::from_utf8_lossy(&script);
    let _ = out.write_all(dynamic_profiles(shell, &script).as_bytes());
}

/// `cmd` (and its subcommands) for the completion generator only: `--log-level` offers the
/// levels, and `--profile` the [`PROFILES_MARK`] when `dynamic` (bash, zsh, fish) so the script
/// can ask for the config's profiles. Parsing never sees these value lists.
fn with_value_candidates(cmd: clap::Command, dynamic: bool) -> clap::Command {
    // A hidden flag (doctor's `--metrics-addr`) is left out: clap_complete's bash script would
    // offer it.
    let cmd = if cmd.get_arguments().any(|a| a.is_hide_set()) {
        clap::Command::new(cmd.get_name().to_string())
            .about(cmd.get_about().cloned().unwrap_or_default())
            .args(cmd.get_arguments().filter(|a| !a.is_hide_set()).cloned())
            .subcommands(cmd.get_subcommands().cloned())
    } else {
        cmd
    };
    let ids: Vec<String> = cmd
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let mut cmd = cmd;
    for id in ids {
        cmd = match id.as_str() {
            "log_level" => cmd.mut_arg(id, |a| {
                a.value_parser(clap::builder::PossibleValuesParser::new(LOG_LEVELS))
            }),
            "profile" if dynamic => cmd.mut_arg(id, |a| {
                a.value_parser(clap::builder::PossibleValuesParser::new([PROFILES_MARK]))
            }),
            _ => cmd,
        };
    }
    let names: Vec<String> = cmd
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    for name in names {
        cmd = cmd.mut_subcommand(name, |c| with_value_candidates(c, dynamic));
    }
    cmd
}

/// Replaces [`PROFILES_MARK`] in a generated script with the shell's call of the binary's
/// hidden `complete-profiles` (which reads the config named by a `--config` already typed, else
/// `AGENTCHAT_CONFIG`, else the default file).
fn dynamic_profiles(shell: clap_complete::Shell, script: &str) -> String {
    match shell {
        clap_complete::Shell::Bash => {
            let helper = r#"_agentchat_profiles() {
    local i config=()
    for ((i = 1; i < ${#COMP_WORDS[@]} - 1; i++)); do
        if [[ ${COMP_WORDS[i]} == --config ]]; then config=(--config "${COMP_WORDS[i+1]}"); fi
    done
    "${COMP_WORDS[0]}" complete-profiles "${config[@]}" 2>/dev/null
}
"#;
            let body = script.replace(
                &format!("\"{PROFILES_MARK}\""),
                "\"$(_agentchat_profiles)\"",
            );
            format!("{helper}{body}")
        }
        clap_complete::Shell::Zsh => script.replace(
            &format!("({PROFILES_MARK})"),
            r#"{local -a c; c=(${(f)"$(${words[1]} complete-profiles ${${(M)words:#--config=*}#--config=} 2>/dev/null)"}); compadd -a c}"#,
        ),
        clap_complete::Shell::Fish => script.replace(
            &format!("\"{PROFILES_MARK}\\t''\""),
            "\"(agentchat complete-profiles 2>/dev/null)\"",
        ),
        _ => script.to_string(),
    }
}

/// `agentchat complete-profiles`: the profiles `status --all` would show, one a line.
pub fn run_complete_profiles(args: CompleteProfilesArgs) -> anyhow::Result<i32> {
    let config = crate::config::ConfigArgs {
        config: args.config,
        ..crate::config::ConfigArgs::default()
    };
    let mut out = std::io::stdout().lock();
    for name in crate::config::ConfigFile::read(&config)?.profile_names() {
        writeln!(out, "{name}")?;
    }
    out.flush()?;
    Ok(0)
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

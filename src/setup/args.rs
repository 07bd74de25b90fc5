//! `setup`'s and `uninstall`'s flags and help.

use crate::config::RuntimeKind;
use std::path::PathBuf;

pub const SETUP_HELP: &str = "\
The key comes from --api-key-file FILE, else stdin when it is not a terminal, else
AGENTCHAT_API_KEY, else the profile's key file, else a prompt without echo. Nothing is
written before the server accepts it (GET /v1/agents/me). A plain http:// server beyond this
machine is refused before anything is sent (the key would travel in clear text), unless the
config sets allow_cleartext.

No key yet? In a terminal setup asks \"Do you have an AgentChat API key?\"; answer no to sign
up with an email and a handle: the server emails a 6-digit code, setup asks for it and stores
the new agent's key (0600, never shown). --recover gets a new key for an agent whose key is
lost (the old one stops working). A profile that has a key keeps it: --new is refused there
(sign the new agent up under another --profile).

Scripted, in two steps: --new (or --recover) mails the code and stops (exit 3), unless stdin
gives the code; then --code CODE finishes (the server, email and handle are remembered; the
code is good for 10 minutes). Run again, --new mails no second code while the first is good.

A setup stopped halfway (Ctrl-C) is resumed by running it again: the server and the key it
stored are proposed. After a change to the config, a listener that runs for the profile is
reloaded (SIGHUP to the pid its lock names).

Examples:
  agentchat setup                                   ask for everything on the terminal
  agentchat setup --yes --profile work < work.key   scripted: key on stdin, proposals taken
  agentchat setup --yes --new --email me@example.com --handle my-agent   sign up: mails a code
  agentchat setup --yes --code 123456               ... then finish it with the code
  agentchat setup --yes --recover --email me@example.com --handle my-agent
  agentchat setup --runtime script -- /home/me/bin/agent --verbose
  agentchat setup --undo --profile work             remove what setup added

Environment: AGENTCHAT_CONFIG, AGENTCHAT_PROFILE, AGENTCHAT_STATE_DIR (as every command);
  AGENTCHAT_API_KEY (the key, when neither --api-key-file nor stdin gives one);
  HOME, CLAUDE_CONFIG_DIR, CODEX_HOME (where Claude Code and Codex keep their config).

Exit codes:
  0  everything asked for works (the last line says \"@handle answers on this machine\")
  1  it could not be done: a refused key, a refused sign-up, a config that cannot be read
     (said before anything is asked), \"Go ahead? n\", an undo step that failed
  3  setup wrote what it could, but something asked for does not work yet: the last line
     (\"not yet: ...\") says what is missing and what to do; or a sign-up waits for its code";

pub const UNINSTALL_HELP: &str = "\
Removes what `agentchat setup` recorded for the profile in its state dir (setup.json): the MCP
entries through the CLIs' own `mcp remove` (Codex's config.toml is put back byte for byte, mode
included, while it is as setup left it), the identity block, the service (a profile setup added
to the one-process unit is taken out of the running host), the keys setup set in the config
(what you added yourself stays), and the key file if setup wrote it. A listener that still runs
for the profile (in a terminal, found by its lock) is stopped first; one that will not stop
within 30 s is said, and nothing else is removed. Everything else stays byte for byte. A line
ending in `...` is said as a wait starts, with its limit.

A key setup got by sign-up or recovery is the only copy there is (it was never shown): undo
keeps it unless --delete-key is given (on a terminal it asks), and says how to use it again.

  $ agentchat uninstall --profile work
  == undo for profile `work`
  listener: pid 4242 stopped (SIGTERM): it ran for this profile outside the service
  Claude Code: running `claude mcp remove` (at most 60 s)...
  Claude Code: MCP server `agentchat` removed (`claude mcp remove`)
  Claude Code: removed ~/.claude/CLAUDE.md (setup created it)
  Codex: ~/.codex/config.toml restored byte for byte (as before setup)
  Codex: removed ~/.codex/AGENTS.md (setup created it)
  config: removed ~/.config/agentchat/config.toml (setup created it)
  key: removed ~/.config/agentchat/work.key (setup wrote it)

Exit codes:
  0  done, or setup never ran for the profile
  1  a step failed, or the listener would not stop (the manifest is kept, so it can be run
     again)";

#[derive(Debug, Clone, Default, clap::Args)]
#[command(group(clap::ArgGroup::new("account").args(["new", "recover"])))]
pub struct SetupArgs {
    /// Config file to add the profile to (default: config.toml in the platform config dir)
    /// [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The profile to set up (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The agent's runtime (default: the logged-in CLI found on PATH). `script` takes its
    /// command after `--`.
    #[arg(long, value_name = "RUNTIME", value_parser = crate::config::value::runtime_parser(), ignore_case = true)]
    pub runtime: Option<RuntimeKind>,
    /// The AgentChat server (default: the profile's, else <https://api.agentchat.me>).
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// Use the key in FILE (0600) instead of reading it from stdin or asking.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["new", "recover", "code"])]
    pub api_key_file: Option<PathBuf>,
    /// Sign up a new agent (--email, --handle): the server emails a 6-digit code, read from
    /// the terminal or stdin; the new key is stored 0600 and never shown.
    #[arg(long, conflicts_with = "recover")]
    pub new: bool,
    /// Get a new key for an agent whose key is lost (--email, --handle): by an emailed code,
    /// like --new. The old key stops working.
    #[arg(long)]
    pub recover: bool,
    /// The email for --new and --recover (where the code is sent).
    #[arg(long, value_name = "EMAIL", requires = "account")]
    pub email: Option<String>,
    /// The agent's handle for --new and --recover.
    #[arg(long, value_name = "HANDLE", requires = "account")]
    pub handle: Option<String>,
    /// Finish the sign-up (or recovery) that --new (or --recover) started: the 6-digit code
    /// the server emailed. Its server, email and handle are the ones --new was given.
    #[arg(long, value_name = "CODE")]
    pub code: Option<String>,
    /// At the end, one real run now (`agentchat doctor --run --yes`): costs one model call. On
    /// a terminal setup offers it instead.
    #[arg(long)]
    pub run: bool,
    /// Do not install the service.
    #[arg(long)]
    pub no_service: bool,
    /// Do not register the MCP server with Claude Code / Codex or write the identity block.
    #[arg(long)]
    pub no_wire: bool,
    /// Ask nothing: take the proposals.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Wire Claude Code / Codex for this profile even where another profile is wired.
    #[arg(long)]
    pub rewire: bool,
    /// Remove what setup added for this profile (the same as `agentchat uninstall`).
    #[arg(long)]
    pub undo: bool,
    /// With --undo: also delete a key file setup got by sign-up or recovery, the key's only
    /// copy (without it undo keeps it, and asks on a terminal).
    #[arg(long, requires = "undo")]
    pub delete_key: bool,
    /// The script runtime's command: `-- PROGRAM ARGS...`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct UninstallArgs {
    /// Config file setup edited [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The profile to remove (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Also delete a key file setup got by sign-up or recovery, the key's only copy (without
    /// it the file is kept, and on a terminal undo asks).
    #[arg(long)]
    pub delete_key: bool,
}

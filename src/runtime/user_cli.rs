//! The user's own Claude Code and Codex: where each keeps its user-scope MCP servers and the file
//! it loads every session, which `agentchat` entry is there, and the CLIs' own `mcp add` /
//! `mcp remove`, which are the only way setup changes their config.
//!
//! The entry setup adds runs `agentchat mcp --profile P` (src/mcp.rs), so neither CLI's config
//! ever holds the key.

use crate::runtime::probe::{Probe, probe, sanitize};
use crate::sys::capped::{self as files, FileError};
use crate::sys::process::{GroupChild, ProcessEnd};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The MCP server's name in both CLIs (tools show as `mcp__agentchat__<tool>`, contract 3.6).
pub const SERVER_NAME: &str = "agentchat";
/// How long one `mcp add`/`mcp remove` may take.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cli {
    Claude,
    Codex,
}

impl Cli {
    pub const ALL: [Cli; 2] = [Cli::Claude, Cli::Codex];

    pub fn name(self) -> &'static str {
        match self {
            Cli::Claude => "Claude Code",
            Cli::Codex => "Codex",
        }
    }

    pub fn program(self) -> &'static str {
        match self {
            Cli::Claude => "claude",
            Cli::Codex => "codex",
        }
    }

    /// The runtime whose texts (`GET /v1/texts?runtime=`) give its identity block.
    pub fn texts_runtime(self) -> &'static str {
        match self {
            Cli::Claude => "claude-code",
            Cli::Codex => "codex",
        }
    }

    pub fn runtime(self) -> crate::config::RuntimeKind {
        match self {
            Cli::Claude => crate::config::RuntimeKind::ClaudeCode,
            Cli::Codex => crate::config::RuntimeKind::Codex,
        }
    }
}

/// Where one CLI keeps what setup touches.
#[derive(Debug, Clone)]
pub struct Home {
    pub cli: Cli,
    /// The file that lists its user-scope MCP servers (read only; written by the CLI).
    pub mcp_store: PathBuf,
    /// The file it loads every session: `CLAUDE.md` or `AGENTS.md`.
    pub identity_file: PathBuf,
}

/// The homes as the CLIs find them: `$CLAUDE_CONFIG_DIR` (else `~/.claude` for CLAUDE.md and
/// `~/.claude.json` for the servers), `$CODEX_HOME` (else `~/.codex`).
pub fn home(cli: Cli, env: &HashMap<String, String>) -> Option<Home> {
    let get = |k: &str| env.get(k).filter(|v| !v.is_empty()).map(PathBuf::from);
    let user = get("HOME")?;
    Some(match cli {
        Cli::Claude => match get("CLAUDE_CONFIG_DIR") {
            Some(dir) => Home {
                cli,
                mcp_store: dir.join(".claude.json"),
                identity_file: dir.join("CLAUDE.md"),
            },
            None => Home {
                cli,
                mcp_store: user.join(".claude.json"),
                identity_file: user.join(".claude").join("CLAUDE.md"),
            },
        },
        Cli::Codex => {
            let dir = get("CODEX_HOME").unwrap_or_else(|| user.join(".codex"));
            Home {
                cli,
                mcp_store: dir.join("config.toml"),
                identity_file: dir.join("AGENTS.md"),
            }
        }
    })
}

/// The `agentchat` entry a CLI has now.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    None,
    /// A stdio server: its command and arguments.
    Argv(Vec<String>),
    /// Something else (an HTTP entry, say): described for the user.
    Other(String),
}

/// Reads the entry from the CLI's own file (read only); a file it cannot read gives none.
pub fn current_entry(home: &Home) -> Entry {
    entry_of(read_entry(home).ok().flatten().as_ref())
}

/// The `agentchat` entry as the CLI's file holds it (`None`: no file, or no such entry), read
/// capped; a file that is not UTF-8 or over its cap is an error, never "no entry".
pub fn read_entry(home: &Home) -> Result<Option<serde_json::Value>, FileError> {
    let cap = match home.cli {
        Cli::Claude => files::CLAUDE_JSON_CAP,
        Cli::Codex => files::TEXT_CAP,
    };
    let Some(text) = files::read_text(&home.mcp_store, cap)? else {
        return Ok(None);
    };
    // Both files' entries have the same shape (`command`, `args`, `url`); Codex's TOML is read
    // as the same JSON value so one reader serves both.
    Ok(match home.cli {
        Cli::Claude => serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v.pointer(&format!("/mcpServers/{SERVER_NAME}")).cloned()),
        Cli::Codex => text
            .parse::<toml::Table>()
            .ok()
            .and_then(|t| {
                t.get("mcp_servers")?
                    .get(SERVER_NAME)
                    .filter(|e| e.is_table())
                    .cloned()
            })
            .and_then(|e| serde_json::to_value(e).ok()),
    })
}

/// What an entry read by `read_entry` is.
pub fn entry_of(value: Option<&serde_json::Value>) -> Entry {
    match value {
        Some(e) => argv_of(e),
        None => Entry::None,
    }
}

fn argv_of(e: &serde_json::Value) -> Entry {
    let command = e.get("command").and_then(|c| c.as_str());
    let url = e.get("url").and_then(|u| u.as_str());
    match (command, url) {
        (Some(c), _) => {
            let mut argv = vec![c.to_string()];
            let args = e.get("args").and_then(|a| a.as_array());
            argv.extend(
                args.into_iter()
                    .flatten()
                    .filter_map(|x| x.as_str().map(str::to_string)),
            );
            Entry::Argv(argv)
        }
        (None, Some(u)) => Entry::Other(format!("an HTTP server at {u}")),
        (None, None) => Entry::Other("an entry without a command".into()),
    }
}

/// The profile an `agentchat mcp --profile P` entry serves; `None` for anything else.
pub fn profile_of(argv: &[String]) -> Option<String> {
    let program = Path::new(argv.first()?).file_name()?.to_str()?;
    if !program.starts_with("agentchat") || argv.get(1).map(String::as_str) != Some("mcp") {
        return None;
    }
    let i = argv.iter().position(|a| a == "--profile")?;
    argv.get(i + 1).cloned()
}

/// What an entry is, for the user: which profile it serves or what it is.
pub fn describe(entry: &Entry) -> String {
    match entry {
        Entry::None => "no agentchat server".into(),
        Entry::Argv(a) => match profile_of(a) {
            Some(p) => format!("profile `{p}`"),
            None => format!("another program (`{}`)", a.join(" ")),
        },
        Entry::Other(what) => what.clone(),
    }
}

/// Runs one `mcp add`/`remove` as `probe` runs a CLI (its own process group, a time limit,
/// capped output), but tied to setup's life: the child gets SIGKILL when setup ends, so a setup
/// stopped by Ctrl-C or `kill -9` mid-`mcp add` leaves no CLI writing its config on. The key's
/// variable is not passed on (the entry runs `agentchat mcp`, which reads the key file).
async fn run_child(binary: &Path, args: &[&str]) -> Probe {
    let mut cmd = tokio::process::Command::new(binary);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .env_remove("AGENTCHAT_API_KEY")
        .kill_on_drop(true);
    crate::sys::process::die_with_parent(&mut cmd);
    let ended = |end| Probe {
        end,
        stdout: String::new(),
        stderr: String::new(),
    };
    let mut group = match GroupChild::spawn(&mut cmd) {
        Ok(g) => g,
        Err(e) => return ended(ProcessEnd::SpawnFailed(e.to_string())),
    };
    let (out, err) = (group.child.stdout.take(), group.child.stderr.take());
    // Kept outside the time limit's future, so what a CLI said before it hung is still shown.
    let (mut out_kept, mut err_kept) = (Vec::new(), Vec::new());
    let waited = tokio::time::timeout(CLI_TIMEOUT, async {
        let (_, _, status) = tokio::join!(
            kept(out, &mut out_kept),
            kept(err, &mut err_kept),
            group.child.wait()
        );
        status
    })
    .await;
    drop(group);
    let end = match waited {
        Ok(Ok(status)) => ProcessEnd::from_status(status),
        Ok(Err(e)) => ProcessEnd::SpawnFailed(e.to_string()),
        Err(_) => ProcessEnd::TimedOut,
    };
    Probe {
        end,
        stdout: String::from_utf8_lossy(&out_kept).into_owned(),
        stderr: String::from_utf8_lossy(&err_kept).into_owned(),
    }
}

/// Reads `pipe` to its end, keeping its first `OUTPUT_CAP` bytes in `kept` (the rest is read
/// and dropped, so a talkative CLI never blocks on a full pipe). Chunk by chunk (a read is
/// cancel-safe), so what came before a time-out stays in `kept`.
async fn kept(pipe: Option<impl tokio::io::AsyncRead + Unpin>, kept: &mut Vec<u8>) {
    use tokio::io::AsyncReadExt;
    let Some(mut pipe) = pipe else { return };
    let mut chunk = [0u8; 4096];
    while let Ok(n @ 1..) = pipe.read(&mut chunk).await {
        let room = OUTPUT_CAP.saturating_sub(kept.len());
        kept.extend(chunk.iter().take(n.min(room)));
    }
}

/// The most of an `mcp add`/`remove`'s stdout or stderr kept (a line or two is what they say).
const OUTPUT_CAP: usize = 64 * 1024;

async fn run_cli(cli: Cli, binary: &Path, args: &[&str]) -> Result<Probe, String> {
    // Said before the wait, so a CLI that hangs is not a silent minute.
    crate::sys::text::progress(&format!(
        "{}: running `{} {}` (at most {} s)...",
        cli.name(),
        cli.program(),
        args.iter().take(2).copied().collect::<Vec<_>>().join(" "),
        CLI_TIMEOUT.as_secs()
    ));
    let p = run_child(binary, args).await;
    if p.end == ProcessEnd::Exited(0) {
        return Ok(p);
    }
    let end = match &p.end {
        ProcessEnd::TimedOut => format!("timed out after {} s", CLI_TIMEOUT.as_secs()),
        end => end.to_string(),
    };
    Err(format!(
        "`{} {}` {end}: {}",
        binary.display(),
        args.join(" "),
        what_it_said(&p.stderr, &p.stdout)
    ))
}

/// The most of a failed CLI's output shown: its first lines that say something.
const SAID_LINES: usize = 4;

/// What a failed CLI said, bounded and made safe to show: the first `SAID_LINES` lines that say
/// something, stderr first, joined on one line. Its own warnings about helper aliases and a
/// backtrace of frames without names (Codex: `9: <unknown>`) are not what went wrong.
fn what_it_said(stderr: &str, stdout: &str) -> String {
    let lines: Vec<String> = stderr
        .lines()
        .chain(stdout.lines())
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with("WARNING: proceeding") && *l != "Caused by:")
        .take_while(|l| !l.starts_with("Stack backtrace:"))
        .take(SAID_LINES)
        .map(sanitize)
        .collect();
    if lines.is_empty() {
        "it said nothing".to_string()
    } else {
        lines.join(" / ")
    }
}

/// `claude mcp add --scope user agentchat -- ARGV` / `codex mcp add agentchat -- ARGV`.
pub async fn add(cli: Cli, binary: &Path, argv: &[String]) -> Result<(), String> {
    let mut args: Vec<&str> = match cli {
        Cli::Claude => vec!["mcp", "add", "--scope", "user", SERVER_NAME, "--"],
        Cli::Codex => vec!["mcp", "add", SERVER_NAME, "--"],
    };
    args.extend(argv.iter().map(String::as_str));
    run_cli(cli, binary, &args).await.map(drop)
}

/// `claude mcp remove --scope user agentchat` / `codex mcp remove agentchat`.
pub async fn remove(cli: Cli, binary: &Path) -> Result<(), String> {
    let args: &[&str] = match cli {
        Cli::Claude => &["mcp", "remove", "--scope", "user", SERVER_NAME],
        Cli::Codex => &["mcp", "remove", SERVER_NAME],
    };
    run_cli(cli, binary, args).await.map(drop)
}

/// Puts the user's own entry (as `read_entry` read it) back: `claude mcp add-json --scope user`,
/// or for Codex `codex mcp add` with its command, arguments and environment (Codex's file is
/// put back byte for byte instead when it is still as setup left it).
pub async fn restore(cli: Cli, binary: &Path, entry: &serde_json::Value) -> Result<(), String> {
    match cli {
        Cli::Claude => {
            let json = entry.to_string();
            run_cli(
                cli,
                binary,
                &["mcp", "add-json", "--scope", "user", SERVER_NAME, &json],
            )
            .await
            .map(drop)
        }
        Cli::Codex => {
            let Entry::Argv(argv) = argv_of(entry) else {
                return Err("it was not a command, which `codex mcp add` cannot write".into());
            };
            let env: Vec<String> = entry
                .get("env")
                .and_then(|e| e.as_object())
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| v.as_str().map(|v| format!("{k}={v}")))
                .collect();
            let mut args = vec!["mcp", "add", SERVER_NAME];
            for e in &env {
                args.push("--env");
                args.push(e);
            }
            args.push("--");
            args.extend(argv.iter().map(String::as_str));
            run_cli(cli, binary, &args).await.map(drop)
        }
    }
}

/// The CLI on PATH, as the listener finds it.
pub fn find(cli: Cli) -> Option<PathBuf> {
    crate::runtime::agent_cli::resolve_binary(None, cli.program(), cli.program(), "PATH").ok()
}

/// Whether the CLI is logged in, and doctor's words for it.
pub async fn login(cli: Cli, binary: &Path) -> (bool, String) {
    let Some(args) = cli.runtime().descriptor().login_check else {
        return (true, String::new());
    };
    let p = probe(binary, args, &[], &[], crate::runtime::probe::PROBE_TIMEOUT).await;
    match cli {
        Cli::Claude => crate::runtime::probe::judge_claude_login(&p),
        Cli::Codex => crate::runtime::probe::judge_codex_login(&p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_failed_cli_shows_its_error_and_cause_not_its_backtrace() {
        let codex = "WARNING: proceeding, even though we could not create PATH aliases\n\
            Error: failed to load bootstrap configuration\n\nCaused by:\n    \
            0: /h/.codex/config.toml:2:8: unclosed table, expected `]`\n    \
            1: TOML parse error at line 2, column 8\n         |\n\n\
            Stack backtrace:\n   0: <unknown>\n   9: <unknown>\n";
        let said = what_it_said(codex, "");
        assert!(said.starts_with("Error: failed to load bootstrap configuration / "));
        assert!(
            said.contains("/h/.codex/config.toml:2:8: unclosed table"),
            "{said}"
        );
        assert!(
            !said.contains("<unknown>") && !said.contains("WARNING"),
            "{said}"
        );
        assert_eq!(what_it_said("", "\n \n"), "it said nothing");
        let long = "x\n".repeat(100);
        assert_eq!(what_it_said(&long, "").matches('x').count(), SAID_LINES);
    }

    #[tokio::test]
    async fn what_a_cli_said_before_it_hung_is_kept_past_the_time_limit() {
        use tokio::io::AsyncWriteExt;
        let (mut tx, rx) = tokio::io::duplex(64);
        tx.write_all(b"Error: waiting for the keyring\n")
            .await
            .unwrap();
        let mut said = Vec::new();
        // The writer stays open: the read never ends by itself, as with a hung CLI.
        let ended =
            tokio::time::timeout(Duration::from_millis(100), kept(Some(rx), &mut said)).await;
        assert!(ended.is_err());
        assert_eq!(said, b"Error: waiting for the keyring\n");
        drop(tx);
    }

    #[test]
    fn the_homes_follow_the_clis_own_variables() {
        let h = home(Cli::Claude, &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(h.mcp_store, Path::new("/h/.claude.json"));
        assert_eq!(h.identity_file, Path::new("/h/.claude/CLAUDE.md"));
        let h = home(
            Cli::Claude,
            &env(&[("HOME", "/h"), ("CLAUDE_CONFIG_DIR", "/c")]),
        )
        .unwrap();
        assert_eq!(h.mcp_store, Path::new("/c/.claude.json"));
        assert_eq!(h.identity_file, Path::new("/c/CLAUDE.md"));
        let h = home(Cli::Codex, &env(&[("HOME", "/h")])).unwrap();
        assert_eq!(h.identity_file, Path::new("/h/.codex/AGENTS.md"));
        let h = home(Cli::Codex, &env(&[("HOME", "/h"), ("CODEX_HOME", "/x")])).unwrap();
        assert_eq!(h.mcp_store, Path::new("/x/config.toml"));
    }

    #[test]
    fn an_entry_names_its_profile_only_when_it_is_agentchat_mcp() {
        let a = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            profile_of(&a(&["/usr/bin/agentchat", "mcp", "--profile", "work"])),
            Some("work".into())
        );
        assert_eq!(profile_of(&a(&["npx", "mcp", "--profile", "work"])), None);
        assert_eq!(
            profile_of(&a(&["/bin/agentchat", "listen", "--profile", "w"])),
            None
        );
        assert_eq!(profile_of(&a(&["/bin/agentchat", "mcp"])), None);
    }

    #[test]
    fn entries_are_read_from_both_clis_files() {
        let d = tempfile::tempdir().unwrap();
        let e = env(&[("HOME", d.path().to_str().unwrap())]);
        let claude = home(Cli::Claude, &e).unwrap();
        assert_eq!(current_entry(&claude), Entry::None);
        std::fs::write(
            &claude.mcp_store,
            r#"{"mcpServers":{"agentchat":{"type":"stdio","command":"/b/agentchat","args":["mcp","--profile","a"]}}}"#,
        )
        .unwrap();
        assert_eq!(
            current_entry(&claude),
            Entry::Argv(vec![
                "/b/agentchat".into(),
                "mcp".into(),
                "--profile".into(),
                "a".into()
            ])
        );
        let codex = home(Cli::Codex, &e).unwrap();
        std::fs::create_dir_all(codex.mcp_store.parent().unwrap()).unwrap();
        std::fs::write(
            &codex.mcp_store,
            "[mcp_servers.agentchat]\nurl = \"https://x/mcp\"\n",
        )
        .unwrap();
        assert!(matches!(current_entry(&codex), Entry::Other(w) if w.contains("https://x/mcp")));
    }
}

//! Which runtime the listener starts: `claude` and `codex` found on PATH and whether each is
//! logged in (doctor's own probes), one proposed, or `script` with a command.

use super::tty;
use crate::config::RuntimeKind;
use crate::runtime::user_cli::{self, Cli};
use std::path::PathBuf;

/// One CLI found on PATH.
#[derive(Debug, Clone)]
pub struct Found {
    pub cli: Cli,
    pub binary: PathBuf,
    pub logged_in: bool,
    pub login: String,
}

/// The CLIs setup needs to know about: the runtime's (when it is one), and both when it wires
/// them or must propose one. `--no-wire --runtime script` needs none.
pub fn needed(runtime: Option<RuntimeKind>, no_wire: bool) -> Vec<Cli> {
    Cli::ALL
        .into_iter()
        .filter(|c| !no_wire || runtime.is_none_or(|r| r == c.runtime()))
        .collect()
}

/// The CLIs of `which` found on PATH, with their login state.
pub async fn detect(which: Vec<Cli>) -> Vec<Found> {
    let mut out = Vec::new();
    for cli in which {
        if let Some(binary) = user_cli::find(cli) {
            let (logged_in, login) = user_cli::login(cli, &binary).await;
            out.push(Found {
                cli,
                binary,
                logged_in,
                login,
            });
        }
    }
    out
}

/// What the login probes may create in a fresh home (`claude auth status` writes
/// `~/.claude.json` and `~/.claude/backups`; Codex may make its home): the paths among them that
/// do not exist before the probes run, so that "Go ahead? n" can leave the home as it found it.
pub fn absent_before_probes(env: &std::collections::HashMap<String, String>) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    if let Some(h) = user_cli::home(Cli::Claude, env) {
        paths.push(h.mcp_store.clone());
        paths.extend(h.identity_file.parent().map(std::path::Path::to_path_buf));
    }
    if let Some(h) = user_cli::home(Cli::Codex, env) {
        paths.extend(h.mcp_store.parent().map(std::path::Path::to_path_buf));
    }
    paths.retain(|p| std::fs::symlink_metadata(p).is_err());
    paths
}

/// Removes what the probes created of `absent` (nothing else existed there before them).
pub fn remove_probe_leftovers(absent: &[PathBuf]) {
    for p in absent {
        let _ = match std::fs::symlink_metadata(p) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(p),
            Ok(_) => std::fs::remove_file(p),
            Err(_) => Ok(()),
        };
    }
}

/// The one to propose: the first logged in, else the first found.
pub fn propose(found: &[Found]) -> Option<RuntimeKind> {
    found
        .iter()
        .find(|f| f.logged_in)
        .or(found.first())
        .map(|f| f.cli.runtime())
}

/// The runtime and (for `script`) its command, from the flags, the profile's current runtime,
/// the proposal, or the user's answer.
pub fn choose(
    flag: Option<RuntimeKind>,
    command: &[String],
    current: Option<(RuntimeKind, Vec<String>)>,
    found: &[Found],
    ask: bool,
) -> anyhow::Result<(RuntimeKind, Vec<String>)> {
    let fallback = current.as_ref().map(|(k, _)| *k).or_else(|| propose(found));
    let kind = match flag {
        Some(k) => k,
        None if ask => loop {
            let default = fallback.map(RuntimeKind::as_str).unwrap_or("script");
            let a = tty::ask("Runtime (claude-code, codex or script)", default)?;
            match RuntimeKind::from_name(a.trim()) {
                Some(k) => break k,
                None => println!("`{a}` is not one of claude-code, codex, script."),
            }
        },
        None => fallback.ok_or_else(|| {
            anyhow::anyhow!(
                "neither `claude` nor `codex` is on PATH: install one, or give \
                 `--runtime script -- COMMAND ARGS…` (your own agent program)"
            )
        })?,
    };
    let mut argv = command.to_vec();
    if kind == RuntimeKind::Script && argv.is_empty() {
        if let Some((RuntimeKind::Script, cmd)) = &current {
            argv = cmd.clone();
        }
        if argv.is_empty() && ask {
            let line = tty::ask("The script's command (program and arguments)", "")?;
            argv = line.split_whitespace().map(str::to_string).collect();
        }
        if argv.is_empty() {
            anyhow::bail!(
                "the script runtime needs a command: `agentchat setup --runtime script -- \
                 PROGRAM ARGS…`"
            );
        }
    }
    if kind != RuntimeKind::Script {
        argv.clear();
    }
    Ok((kind, argv))
}

/// One line per CLI found, for the screen. A login problem is said in the probe's own words,
/// which say how to log in (`runtime::probe`): one instruction per CLI on the screen.
pub fn describe(found: &[Found]) -> Vec<String> {
    if found.is_empty() {
        return vec!["runtimes: neither `claude` nor `codex` is on PATH".into()];
    }
    found
        .iter()
        .map(|f| {
            let until = if f.logged_in {
                ""
            } else {
                "; it cannot answer until then"
            };
            format!(
                "runtime {}: {} ({}){until}",
                f.cli.runtime(),
                f.binary.display(),
                f.login
            )
        })
        .collect()
}

/// How to log a CLI in, in setup's last line: the same instruction as the login check's
/// (`runtime::probe`), which doctor and the runtime line above say.
pub fn login_hint(cli: Cli) -> &'static str {
    match cli {
        Cli::Claude => {
            "log in as the listener's user (`claude auth login`), or give the listener \
             ANTHROPIC_API_KEY; then `agentchat doctor`"
        }
        Cli::Codex => {
            "run `codex login` as the listener's user, or give the listener a provider key; \
             then `agentchat doctor`"
        }
    }
}

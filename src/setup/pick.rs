//! Which runtime the listener starts: `claude` and `codex` found on PATH and whether each is
//! logged in (doctor's own probes), one proposed, or `script` with a command.

use super::tty;
use super::wire::{self, Cli};
use crate::config::RuntimeKind;
use std::path::PathBuf;

/// One CLI found on PATH.
#[derive(Debug, Clone)]
pub struct Found {
    pub cli: Cli,
    pub binary: PathBuf,
    pub logged_in: bool,
    pub login: String,
}

/// Every CLI on PATH, with its login state.
pub async fn detect() -> Vec<Found> {
    let mut out = Vec::new();
    for cli in Cli::ALL {
        if let Some(binary) = wire::find(cli) {
            let (logged_in, login) = wire::login(cli, &binary).await;
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

/// One line per CLI found, for the screen.
pub fn describe(found: &[Found]) -> Vec<String> {
    if found.is_empty() {
        return vec!["runtimes: neither `claude` nor `codex` is on PATH".into()];
    }
    found
        .iter()
        .map(|f| {
            format!(
                "runtime {}: {} ({})",
                f.cli.runtime(),
                f.binary.display(),
                f.login
            )
        })
        .collect()
}

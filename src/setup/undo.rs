//! `agentchat setup --undo` / `agentchat uninstall`: removes what the profile's manifest says
//! setup added, and nothing else. An MCP entry goes only while it is still this profile's (the
//! argv setup registered), through the CLI's own `mcp remove`; the identity block only while it is
//! the block setup wrote (`anchor`); the config keys get their earlier values back; the key file
//! goes only if setup wrote it. A file still exactly as setup left it gets its earlier bytes back.

use super::manifest::{CliRecord, Manifest};
use super::wire::{self, Cli, Entry};
use super::{Place, anchor, config_edit, service_step};
use std::path::Path;

pub async fn run(config: Option<&Path>, profile: Option<&str>) -> anyhow::Result<i32> {
    let place = Place::find(config, profile)?;
    let Some(m) = Manifest::load(&place.state_dir)? else {
        println!(
            "agentchat setup --undo: setup has not run for profile `{}` (no {} in {}); nothing \
             to undo",
            place.profile,
            super::manifest::FILE,
            place.state_dir.display()
        );
        return Ok(0);
    };
    let mut lines = Vec::new();
    let mut failed = false;
    if m.service {
        lines.push(service_step::uninstall(&place.profile));
    }
    for (cli, rec) in [(Cli::Claude, &m.claude), (Cli::Codex, &m.codex)] {
        if let Some(rec) = rec {
            failed |= undo_cli(cli, rec, &place, &mut lines).await;
        }
    }
    if let Some(c) = &m.config {
        match undo_config(c) {
            Ok(line) => lines.push(line),
            Err(e) => {
                failed = true;
                lines.push(format!("config: not restored: {e:#}"));
            }
        }
    }
    if let Some(k) = &m.key_file {
        match std::fs::remove_file(k) {
            Ok(()) => lines.push(format!("key: removed {} (setup wrote it)", k.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                failed = true;
                lines.push(format!("key: cannot remove {}: {e}", k.display()));
            }
        }
    }
    if failed {
        lines.push(format!(
            "Some steps failed; the manifest {} is kept so `agentchat setup --undo` can try again.",
            place.state_dir.join(super::manifest::FILE).display()
        ));
    } else {
        let _ = std::fs::remove_file(place.state_dir.join(super::manifest::FILE));
        let mut dirs = m.created_dirs.clone();
        dirs.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
        for d in dirs {
            // Only empty ones: anything the listener or the user put there stays.
            let _ = std::fs::remove_dir(&d);
        }
        // The state base (`…/agentchat`) holds only profiles' state dirs: once the last one is
        // gone it goes too, whichever profile's setup created it.
        if let Some(base) = crate::config::default_state_base(&place.env)
            && place.state_dir.parent() == Some(base.as_path())
        {
            let _ = std::fs::remove_dir(&base);
        }
    }
    println!("== undo for profile `{}`", place.profile);
    for l in &lines {
        println!("{l}");
    }
    Ok(i32::from(failed))
}

/// Returns whether something failed.
async fn undo_cli(cli: Cli, rec: &CliRecord, place: &Place, lines: &mut Vec<String>) -> bool {
    let mut failed = false;
    let Some(home) = wire::home(cli, &place.env) else {
        lines.push(format!("{}: HOME is not set; nothing undone", cli.name()));
        return true;
    };
    if rec.mcp_added {
        let entry = wire::current_entry(&home);
        if entry == Entry::Argv(rec.mcp_command.clone()) {
            match wire::find(cli) {
                Some(binary) => match wire::remove(cli, &binary).await {
                    Ok(()) => lines.push(format!(
                        "{}: MCP server `agentchat` removed (`{} mcp remove`)",
                        cli.name(),
                        cli.program()
                    )),
                    Err(e) => {
                        failed = true;
                        lines.push(format!("{}: MCP server not removed: {e}", cli.name()));
                    }
                },
                None => {
                    failed = true;
                    lines.push(format!(
                        "{}: `{}` is no longer on PATH, so its `mcp remove` cannot run; the \
                         entry stays in {}",
                        cli.name(),
                        cli.program(),
                        home.mcp_store.display()
                    ));
                }
            }
        } else {
            lines.push(format!(
                "{}: MCP server left alone: it is now {}, not this profile's",
                cli.name(),
                wire::describe(&entry)
            ));
        }
        if let Some(what) = &rec.replaced {
            lines.push(format!(
                "{}: before setup it was wired for {what}; `agentchat setup --rewire` for that \
                 one wires it again",
                cli.name()
            ));
        }
    }
    if let Some(id) = &rec.identity {
        let current = std::fs::read_to_string(&id.file).ok();
        // After a rewire the earlier text names the other agent, whose entry is gone: take out
        // only this block rather than put that one back.
        let earlier_is_clean = id
            .before
            .as_deref()
            .is_none_or(|b| anchor::block_in(b).is_none());
        let verdict = anchor::undo(
            id,
            current.as_deref(),
            rec.replaced.is_none() || earlier_is_clean,
        );
        let file = id.file.display();
        match verdict {
            anchor::Undo::Write(text) => {
                match crate::sys::fs::write_keeping_mode(&id.file, text.as_bytes()) {
                    Ok(()) => lines.push(format!(
                        "{}: identity block removed from {file}",
                        cli.name()
                    )),
                    Err(e) => {
                        failed = true;
                        lines.push(format!("{}: cannot write {file}: {e}", cli.name()));
                    }
                }
            }
            anchor::Undo::Delete => match std::fs::remove_file(&id.file) {
                Ok(()) => lines.push(format!("{}: removed {file} (setup created it)", cli.name())),
                Err(e) => {
                    failed = true;
                    lines.push(format!("{}: cannot remove {file}: {e}", cli.name()));
                }
            },
            anchor::Undo::NotOurs => lines.push(format!(
                "{}: identity block in {file} left alone: it is not the one setup wrote",
                cli.name()
            )),
        }
    }
    failed
}

fn undo_config(c: &super::manifest::ConfigRecord) -> anyhow::Result<String> {
    let path = c.path.display();
    let current = match std::fs::read_to_string(&c.path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(format!("config: {path} is gone; nothing to restore"));
        }
        Err(e) => anyhow::bail!("cannot read {path}: {e}"),
    };
    let restored = if current == c.after {
        c.before.clone()
    } else {
        let text = config_edit::revert(&current, &c.keys, &c.created_tables)?;
        (c.before.is_some() || !text.trim().is_empty()).then_some(text)
    };
    match restored {
        Some(text) => {
            crate::sys::fs::write_keeping_mode(&c.path, text.as_bytes())
                .map_err(|e| anyhow::anyhow!("cannot write {path}: {e}"))?;
            Ok(format!("config: the profile's keys taken out of {path}"))
        }
        None => {
            std::fs::remove_file(&c.path)
                .map_err(|e| anyhow::anyhow!("cannot remove {path}: {e}"))?;
            Ok(format!("config: removed {path} (setup created it)"))
        }
    }
}

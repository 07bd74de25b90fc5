//! `agentchat setup --undo` / `agentchat uninstall`: removes what the profile's manifest says
//! setup added, and nothing else. An MCP entry goes only while it is still this profile's (the
//! argv setup registered), through the CLI's own `mcp remove`; the identity block only while it is
//! the block setup wrote (`anchor`); the config keys get their earlier values back; the key file
//! goes only if setup wrote it. A file still exactly as setup left it gets its earlier bytes back.

use super::manifest::{CliRecord, IdentityRecord, Manifest, StoreRecord};
use super::{Place, anchor, config_edit, live, service_step, tty};
use crate::runtime::user_cli::{self, Cli, Entry};
use crate::sys::capped as files;
use std::path::Path;

pub async fn run(
    config: Option<&Path>,
    profile: Option<&str>,
    delete_key: bool,
) -> anyhow::Result<i32> {
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
    // Said first: the steps' own waits (`mcp remove`) are said as they start.
    println!("== undo for profile `{}`", place.profile);
    // Asked before anything is undone, so the answer is not lost among the steps' lines.
    let delete_key = delete_key || m.key_only_copy && ask_delete_key(&m)?;
    let mut lines = Vec::new();
    let mut failed = false;
    if m.service {
        lines.push(service_step::uninstall(&place.profile));
    }
    // The profile's listener outside the service (a terminal, your own supervisor) is stopped
    // before the key and the config it runs with go; one in a `listen --all` process with other
    // profiles drops the profile when the config no longer names it (below).
    let agent = m.api_base.as_deref().zip(m.handle.as_deref());
    let mut shared = None;
    if let Some(l) = live::for_profile(&place.state_dir, &place.profile, agent) {
        if l.shared {
            shared = Some(l);
        } else {
            crate::sys::text::progress(&format!(
                "listener: stopping {} (at most {} s)...",
                l.describe(),
                live::STOP_WAIT.as_secs()
            ));
            match live::stop(&l).await {
                Ok(line) => lines.push(line),
                Err(why) => {
                    for l in &lines {
                        println!("{l}");
                    }
                    println!("listener: {why}");
                    println!(
                        "Nothing else was undone while it runs: the manifest {} is kept.",
                        place.state_dir.join(super::manifest::FILE).display()
                    );
                    return Ok(1);
                }
            }
        }
    }
    for (cli, rec) in [(Cli::Claude, &m.claude), (Cli::Codex, &m.codex)] {
        if let Some(rec) = rec {
            failed |= undo_cli(cli, rec, &place, &mut lines).await;
        }
    }
    if let Some(c) = &m.config {
        let in_host = service_step::host_runs(place.config_flag());
        match undo_config(c) {
            Ok(line) => {
                lines.push(line);
                if in_host {
                    lines.extend(service_step::out_of_host(
                        &place.profile,
                        place.config_flag(),
                    ));
                }
            }
            Err(e) => {
                failed = true;
                lines.push(format!("config: not restored: {e:#}"));
            }
        }
    }
    if let Some(l) = &shared {
        match live::leave_host(l).await {
            Ok(line) => lines.push(line),
            Err(why) => {
                failed = true;
                lines.push(format!("listener: {why}"));
            }
        }
    }
    // The listener's copy of the key for Claude Code runs (src/runtime/claude.rs writes it).
    let mcp_config = place
        .state_dir
        .join(crate::runtime::claude::MCP_CONFIG_FILE);
    match std::fs::remove_file(&mcp_config) {
        Ok(()) => lines.push(format!(
            "key: removed {} (the listener's copy for Claude Code runs)",
            mcp_config.display()
        )),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            failed = true;
            lines.push(format!("key: cannot remove {}: {e}", mcp_config.display()));
        }
    }
    if let Some(k) = &m.key_file {
        if m.key_only_copy && !delete_key {
            lines.push(kept_key(&m, k));
        } else {
            match std::fs::remove_file(k) {
                Ok(()) => lines.push(removed_key(&m, k)),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    failed = true;
                    lines.push(format!("key: cannot remove {}: {e}", k.display()));
                }
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
    for l in &lines {
        println!("{l}");
    }
    Ok(i32::from(failed))
}

/// Returns whether something failed.
async fn undo_cli(cli: Cli, rec: &CliRecord, place: &Place, lines: &mut Vec<String>) -> bool {
    let mut failed = false;
    let Some(home) = user_cli::home(cli, &place.env) else {
        lines.push(format!("{}: HOME is not set; nothing undone", cli.name()));
        return true;
    };
    if rec.mcp_added {
        failed |= undo_entry(cli, rec, place, &home, lines).await;
    }
    if let Some(id) = &rec.identity {
        failed |= undo_identity(cli, id, lines);
    }
    failed
}

/// The MCP entry: Codex's file put back byte for byte while it is as setup left it, else the
/// CLI's own `mcp remove`, then the user's own entry that `--rewire` replaced put back.
async fn undo_entry(
    cli: Cli,
    rec: &CliRecord,
    place: &Place,
    home: &user_cli::Home,
    lines: &mut Vec<String>,
) -> bool {
    if let Some(store) = &rec.store {
        match restore_store(store) {
            Ok(true) => {
                lines.push(format!(
                    "{}: {} restored byte for byte (as before setup)",
                    cli.name(),
                    store.path.display()
                ));
                advise(cli, rec, place, lines);
                return false;
            }
            Ok(false) => {}
            Err(e) => {
                lines.push(format!("{}: {e}", cli.name()));
                return true;
            }
        }
    }
    let mut failed = false;
    let entry = user_cli::current_entry(home);
    let binary = user_cli::find(cli);
    if entry == Entry::Argv(rec.mcp_command.clone()) {
        match &binary {
            Some(binary) => match user_cli::remove(cli, binary).await {
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
                    "{}: `{}` is no longer on PATH, so its `mcp remove` cannot run; the entry \
                     stays in {}",
                    cli.name(),
                    cli.program(),
                    home.mcp_store.display()
                ));
            }
        }
    } else if entry == Entry::None {
        lines.push(format!(
            "{}: MCP server `agentchat` is not there; nothing to remove",
            cli.name()
        ));
    } else {
        lines.push(format!(
            "{}: MCP server left alone: it is now {}, not this profile's",
            cli.name(),
            user_cli::describe(&entry)
        ));
    }
    if let Some(store) = &rec.store {
        tidy_store(cli, store, lines);
    }
    if let Some(user) = &rec.replaced_entry
        && !failed
        && user_cli::current_entry(home) == Entry::None
    {
        let put_back = match &binary {
            Some(binary) => user_cli::restore(cli, binary, user).await,
            None => Err(format!("`{}` is not on PATH", cli.program())),
        };
        match put_back {
            Ok(()) => lines.push(format!(
                "{}: your own MCP server `agentchat` ({}) put back",
                cli.name(),
                user_cli::describe(&user_cli::entry_of(Some(user)))
            )),
            Err(e) => {
                failed = true;
                lines.push(format!(
                    "{}: your own MCP server `agentchat` not put back: {e}",
                    cli.name()
                ));
            }
        }
        return failed;
    }
    advise(cli, rec, place, lines);
    failed
}

/// After a rewire over another profile: how to wire that one again, while it exists and the CLI
/// is not wired for it already (a rewire stopped before it changed the CLI, or a file put back).
fn advise(cli: Cli, rec: &CliRecord, place: &Place, lines: &mut Vec<String>) {
    let Some(what) = &rec.replaced else {
        return;
    };
    if rec.replaced_entry.is_some() {
        return;
    }
    let now = user_cli::home(cli, &place.env).map(|h| user_cli::current_entry(&h));
    let wired_for = match &now {
        Some(Entry::Argv(a)) => user_cli::profile_of(a),
        _ => None,
    };
    if wired_for.is_some() && wired_for == rec.replaced_profile {
        return;
    }
    match &rec.replaced_profile {
        Some(p) if profile_exists(place, p) => lines.push(format!(
            "{}: before setup it was wired for {what}; `agentchat setup --profile {p} \
             --rewire` wires it for that profile again",
            cli.name()
        )),
        Some(_) => lines.push(format!(
            "{}: before setup it was wired for {what}, which is set up no more",
            cli.name()
        )),
        None => lines.push(format!(
            "{}: before setup it was wired for {what}; `agentchat setup --rewire` for that \
             one wires it again",
            cli.name()
        )),
    }
}

/// The profile still has a setup manifest or a place in the config.
fn profile_exists(place: &Place, profile: &str) -> bool {
    let by_setup = Place::find(place.config_flag(), Some(profile))
        .ok()
        .and_then(|p| Manifest::load(&p.state_dir).ok().flatten())
        .is_some();
    by_setup
        || files::read_text(&place.config_path, files::TEXT_CAP)
            .ok()
            .flatten()
            .is_some_and(|t| config_edit::profiles_in(&t).iter().any(|n| n == profile))
}

/// Puts a CLI's own file back as it was before setup, when it is still as setup left it:
/// `Ok(false)` when it has changed since (or setup never saw it after its `mcp add`).
fn restore_store(store: &StoreRecord) -> Result<bool, String> {
    let Some(after) = &store.after_sha256 else {
        return Ok(false);
    };
    let now = match files::read_text(&store.path, files::TEXT_CAP) {
        Ok(Some(t)) => t,
        Ok(None) => return Ok(false),
        Err(e) => return Err(e.to_string()),
    };
    if &files::sha256(now.as_bytes()) != after {
        return Ok(false);
    }
    let path = &store.path;
    let cannot = |e: std::io::Error| format!("cannot restore {}: {e}", path.display());
    match (&store.before, &store.link) {
        (None, _) => std::fs::remove_file(path).map_err(cannot)?,
        (Some(text), Some(link)) => {
            // The CLI's rename replaced the user's link with a file: the target gets the bytes
            // and the link comes back.
            let target = match path.parent() {
                Some(dir) if link.is_relative() => dir.join(link),
                _ => link.clone(),
            };
            let target = crate::sys::fs::link_target(&target).map_err(cannot)?;
            crate::sys::fs::write_with_mode(&target, text.as_bytes(), store.mode.unwrap_or(0o644))
                .map_err(cannot)?;
            let is_link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
            if !is_link {
                std::fs::remove_file(path).map_err(cannot)?;
                std::os::unix::fs::symlink(link, path).map_err(cannot)?;
            }
        }
        (Some(text), None) => {
            crate::sys::fs::write_with_mode(path, text.as_bytes(), store.mode.unwrap_or(0o600))
                .map_err(cannot)?
        }
    }
    Ok(true)
}

/// After the CLI's own `mcp remove`: a file that did not exist before setup and holds nothing
/// now goes, and one that did gets its mode back.
fn tidy_store(cli: Cli, store: &StoreRecord, lines: &mut Vec<String>) {
    let path = &store.path;
    match &store.before {
        None => {
            if let Ok(Some(t)) = files::read_text(path, files::TEXT_CAP)
                && t.trim().is_empty()
                && std::fs::remove_file(path).is_ok()
            {
                lines.push(format!(
                    "{}: removed {} (setup's `mcp add` created it)",
                    cli.name(),
                    path.display()
                ));
            }
        }
        Some(_) => {
            if let Some(mode) = store.mode
                && files::mode_of(path) != Some(mode)
            {
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode));
            }
        }
    }
}

/// The identity block: taken out while it is the one setup wrote. Returns whether it failed.
fn undo_identity(cli: Cli, id: &IdentityRecord, lines: &mut Vec<String>) -> bool {
    let file = id.file.display();
    let current = match files::read_text(&id.file, files::TEXT_CAP) {
        Ok(t) => t,
        Err(e) => {
            lines.push(format!("{}: identity block left in place: {e}", cli.name()));
            return true;
        }
    };
    match anchor::undo(id, current.as_deref()) {
        anchor::Undo::Write(text) => {
            let written = files::check_writable(&id.file)
                .map_err(|e| e.to_string())
                .and_then(|()| {
                    crate::sys::fs::write_through_links(&id.file, text.as_bytes())
                        .map_err(|e| format!("cannot write {file}: {e}"))
                });
            match written {
                Ok(()) => lines.push(format!(
                    "{}: identity block removed from {file}",
                    cli.name()
                )),
                Err(e) => {
                    lines.push(format!("{}: identity block left in place: {e}", cli.name()));
                    return true;
                }
            }
        }
        anchor::Undo::Delete => {
            // Through a link, the file behind it goes and the link stays as the user made it.
            let target = crate::sys::fs::link_target(&id.file).unwrap_or_else(|_| id.file.clone());
            match std::fs::remove_file(&target) {
                Ok(()) => lines.push(format!("{}: removed {file} (setup created it)", cli.name())),
                Err(e) => {
                    lines.push(format!("{}: cannot remove {file}: {e}", cli.name()));
                    return true;
                }
            }
        }
        anchor::Undo::NotOurs => lines.push(format!(
            "{}: identity block in {file} left alone: it is not the one setup wrote",
            cli.name()
        )),
    }
    false
}

fn undo_config(c: &super::manifest::ConfigRecord) -> anyhow::Result<String> {
    let path = c.path.display();
    let Some(current) = files::read_text(&c.path, files::TEXT_CAP)? else {
        return Ok(format!("config: {path} is gone; nothing to restore"));
    };
    let restored = if current == c.after && !c.edited {
        c.before.clone()
    } else {
        Some(config_edit::revert(&current, &c.keys, &c.created_tables)?)
    };
    // A file setup created (this profile's or another's) that holds nothing else now goes: no
    // 0-byte config.toml is left behind.
    let created = c.before.is_none() || c.created;
    match restored.filter(|t| !(created && t.trim().is_empty())) {
        Some(text) => {
            files::check_writable(&c.path)?;
            crate::sys::fs::write_through_links(&c.path, text.as_bytes())
                .map_err(|e| anyhow::anyhow!("cannot write {path}: {e}"))?;
            Ok(format!("config: the profile's keys taken out of {path}"))
        }
        None => {
            let target = crate::sys::fs::link_target(&c.path).unwrap_or_else(|_| c.path.clone());
            std::fs::remove_file(&target)
                .map_err(|e| anyhow::anyhow!("cannot remove {path}: {e}"))?;
            Ok(format!("config: removed {path} (setup created it)"))
        }
    }
}

/// On a terminal: whether to delete the key setup got by sign-up or recovery (default no).
fn ask_delete_key(m: &Manifest) -> anyhow::Result<bool> {
    let (Some(k), true) = (&m.key_file, tty::interactive()) else {
        return Ok(false);
    };
    if !k.exists() {
        return Ok(false);
    }
    tty::confirm(
        &format!(
            "{} holds {}'s key, which setup got by email code and never showed: it is the only \
             copy. Delete it too?",
            k.display(),
            who(m)
        ),
        false,
    )
}

fn who(m: &Manifest) -> String {
    m.handle
        .as_deref()
        .map_or_else(|| "the agent".to_string(), |h| format!("@{h}"))
}

/// How to get the agent's key back after undo: `setup --recover` by emailed code.
fn recover_line(m: &Manifest) -> String {
    let handle = m.handle.as_deref().unwrap_or("HANDLE");
    format!(
        "`agentchat setup --recover --email EMAIL --handle {handle}` gets a new key by emailed code"
    )
}

fn kept_key(m: &Manifest, k: &Path) -> String {
    let base = m
        .api_base
        .as_deref()
        .map(|b| format!(" --api-base {b}"))
        .unwrap_or_default();
    format!(
        "key: kept {}: the only copy of {}'s key (setup got it by email code and never showed \
         it; `--delete-key` deletes it). `agentchat setup --api-key-file {}{base}` uses it \
         again; `rm` it once you no longer want the agent; if it is lost, {}",
        k.display(),
        who(m),
        k.display(),
        recover_line(m)
    )
}

fn removed_key(m: &Manifest, k: &Path) -> String {
    if m.key_only_copy {
        format!(
            "key: removed {} (setup wrote it; {}'s key has no other copy: {})",
            k.display(),
            who(m),
            recover_line(m)
        )
    } else {
        format!("key: removed {} (setup wrote it)", k.display())
    }
}

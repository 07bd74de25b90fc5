//! Wiring one CLI for interactive sessions: the `agentchat` MCP entry (through the CLI's own
//! `mcp add`) and the identity block in the file it loads every session. A CLI's home serves one
//! agent at a time: one wired for another profile (or another `agentchat` server) is left alone
//! unless `--rewire` asks for it.

use super::anchor;
use super::manifest::{CliRecord, IdentityRecord, Manifest, StoreRecord};
use crate::client::Api;
use crate::runtime::user_cli::{self, Cli, Entry, Home};
use crate::sys::capped as files;
use std::collections::HashMap;
use std::path::Path;

/// What wiring a CLI for one profile needs: the entry to register, the agent's handle for the
/// identity block, and where setup records what it did.
pub struct WiringRequest<'a> {
    pub profile: &'a str,
    /// The entry's argv: `agentchat mcp --profile P [--config F]`.
    pub argv: Vec<String>,
    pub rewire: bool,
    pub handle: &'a str,
    pub api: &'a Api,
    pub env: &'a HashMap<String, String>,
    /// The config named with `--config`, to find another profile's state dir.
    pub config: Option<&'a Path>,
    /// The profile's state dir: the manifest is saved there before each change, so a setup
    /// stopped halfway leaves a record of all it may have done.
    pub state_dir: &'a Path,
}

/// What wiring one CLI did, for the screen.
pub struct Done {
    pub lines: Vec<String>,
    pub changed: bool,
    /// Why the identity block could not be written (the file refused, the texts not read, the
    /// write failed): setup's verdict counts it as missing.
    pub block_unwritten: Option<String>,
}

fn record_mut(manifest: &mut Manifest, cli: Cli) -> &mut Option<CliRecord> {
    match cli {
        Cli::Claude => &mut manifest.claude,
        Cli::Codex => &mut manifest.codex,
    }
}

/// The identity block's text for this CLI: the served `identity_line_template` with the handle
/// (contract 3.6; never a copy of our own).
async fn rendered_block(w: &WiringRequest<'_>, cli: Cli) -> Result<String, String> {
    let (texts, _) = w
        .api
        .texts(cli.texts_runtime())
        .await
        .map_err(|e| format!("cannot read the texts for {}: {e}", cli.texts_runtime()))?;
    let template = texts
        .identity_line_template
        .ok_or("the server's texts have no identity_line_template")?;
    Ok(crate::core::identity::render(&template, w.handle))
}

/// How long the texts read may take (src/client.rs: a 10 s connect inside a 30 s request).
const TEXTS_WAIT_SECS: u64 = 40;

fn not_wired(cli: Cli, mut lines: Vec<String>, why: impl std::fmt::Display) -> Done {
    lines.push(format!("{}: not wired: {why}", cli.name()));
    Done {
        lines,
        changed: false,
        block_unwritten: None,
    }
}

pub async fn wire(w: &WiringRequest<'_>, cli: Cli, binary: &Path, manifest: &mut Manifest) -> Done {
    let mut lines = Vec::new();
    let Some(home) = user_cli::home(cli, w.env) else {
        return not_wired(cli, lines, "HOME is not set");
    };
    let ours = record_mut(manifest, cli).clone().unwrap_or_default();
    // Every file is read before anything changes; one that cannot be read whole as UTF-8 is
    // never taken for "no file".
    let entry_value = match user_cli::read_entry(&home) {
        Ok(v) => v,
        Err(e) => return not_wired(cli, lines, e),
    };
    let entry = user_cli::entry_of(entry_value.as_ref());
    let store_before = match cli {
        Cli::Codex => match files::read_text(&home.mcp_store, files::TEXT_CAP) {
            Ok(t) => t,
            Err(e) => return not_wired(cli, lines, e),
        },
        Cli::Claude => None,
    };
    // The identity file: a problem with it refuses only the block, said as such.
    let (current_text, identity_problem) =
        match files::read_text(&home.identity_file, files::TEXT_CAP).and_then(|t| {
            if t.is_some() {
                files::check_writable(&home.identity_file)?;
            }
            Ok(t)
        }) {
            Ok(t) => (t, None),
            Err(e) => (None, Some(e.to_string())),
        };
    let current_block = current_text.as_deref().and_then(anchor::block_in);
    let block_is_ours = |b: &String| ours.identity.as_ref().is_some_and(|r| &r.block == b);
    let entry_is_ours = match &entry {
        Entry::Argv(a) => user_cli::profile_of(a).as_deref() == Some(w.profile),
        _ => false,
    };
    let foreign = match &entry {
        Entry::None => current_block
            .as_ref()
            .filter(|b| !block_is_ours(b))
            .map(|_| {
                format!(
                    "an identity block for another agent in {}",
                    home.identity_file.display()
                )
            }),
        _ if entry_is_ours => None,
        e => Some(user_cli::describe(e)),
    };
    let mut block_unwritten = None;
    let rendered = match &identity_problem {
        Some(why) => {
            lines.push(format!("{}: identity block not written: {why}", cli.name()));
            block_unwritten = Some(why.clone());
            None
        }
        None => {
            crate::sys::text::progress(&format!(
                "{}: reading the identity text from the server (at most {TEXTS_WAIT_SECS} s)...",
                cli.name()
            ));
            match rendered_block(w, cli).await {
                Ok(r) => Some(r),
                Err(why) => {
                    lines.push(format!("{}: identity block not written: {why}", cli.name()));
                    block_unwritten = Some(why);
                    None
                }
            }
        }
    };
    if let Some(f) = &foreign {
        // The same agent's block (another profile with this handle) is no conflict of its own.
        let same_block = rendered.as_ref().is_some_and(|r| {
            current_block.as_deref() == Some(crate::core::identity::block(r, "\n").as_str())
        });
        if !(w.rewire || same_block && matches!(entry, Entry::None)) {
            lines.push(format!(
                "{}: left alone: it is wired for {f}. One agent per CLI home: \
                 `agentchat setup --profile {} --rewire` wires it for this profile instead \
                 (the other loses it in interactive sessions).",
                cli.name(),
                w.profile
            ));
            return Done {
                lines,
                changed: false,
                block_unwritten: None,
            };
        }
    }
    let mut record = ours.clone();
    let mut changed = false;
    let mut inherited: Option<(bool, String)> = None;
    if entry == Entry::Argv(w.argv.clone()) {
        lines.push(format!(
            "{}: MCP server `agentchat` already runs `{}`",
            cli.name(),
            w.argv.join(" ")
        ));
        // This profile's entry without a record of it: a setup stopped between its `mcp add` and
        // its manifest. It is setup's, so undo removes it.
        if !record.mcp_added {
            record.mcp_added = true;
            record.mcp_command = w.argv.clone();
        }
    } else {
        let mut other_store = None;
        if !entry_is_ours && entry != Entry::None {
            record.replaced = foreign.clone();
            record.replaced_profile = None;
            record.replaced_entry = None;
            match &entry {
                Entry::Argv(a) => match user_cli::profile_of(a) {
                    // Taking over another profile's home: its setup's record of what was there
                    // before it is this one's too, so undo can give the user's own bytes back.
                    Some(other) => {
                        if let Some(rec) = other_record(w, cli, &other) {
                            inherited = rec
                                .identity
                                .filter(|id| Some(id.block.as_str()) == current_block.as_deref())
                                .map(|id| (id.created, id.separator));
                            other_store = rec.store;
                        }
                        record.replaced_profile = Some(other);
                    }
                    None => record.replaced_entry = entry_value.clone(),
                },
                _ => record.replaced_entry = entry_value.clone(),
            }
        }
        // Another profile's record of the file stands for it only once this setup has made
        // its own change: a rewire stopped before that leaves the file that profile's.
        let took_over = cli == Cli::Codex && record.store.is_none() && other_store.is_some();
        if cli == Cli::Codex && record.store.is_none() {
            record.store = Some(other_store.unwrap_or_else(|| StoreRecord {
                path: home.mcp_store.clone(),
                before: store_before.clone(),
                mode: files::mode_of(&home.mcp_store),
                link: std::fs::read_link(&home.mcp_store).ok(),
                after_sha256: None,
            }));
        }
        // The recorded earlier bytes still stand for the file only while it is as setup left
        // it (or they were taken just now): else undo must not put them back over others'
        // changes.
        let store_holds = record.store.as_ref().is_none_or(|st| {
            st.after_sha256.is_none()
                || st.after_sha256 == store_before.as_deref().map(|t| files::sha256(t.as_bytes()))
        });
        if took_over && let Some(st) = &mut record.store {
            st.after_sha256 = None;
        }
        // Intent first: the manifest says setup adds this entry before the CLI is asked to, so a
        // setup stopped in between (Ctrl-C, `kill -9`) leaves one that undo still removes.
        record.mcp_added = true;
        record.mcp_command = w.argv.clone();
        *record_mut(manifest, cli) = Some(record.clone());
        if let Err(e) = manifest.save(w.state_dir) {
            *record_mut(manifest, cli) = Some(ours);
            return not_wired(cli, lines, format!("{e:#}"));
        }
        // Codex refuses a CODEX_HOME that does not exist yet.
        if cli == Cli::Codex
            && let Some(dir) = home.mcp_store.parent()
            && let Err(e) = super::manifest::create_dirs(dir, manifest, false)
        {
            return not_wired(cli, lines, format!("{e:#}"));
        }
        if entry != Entry::None
            && let Err(e) = user_cli::remove(cli, binary).await
        {
            return not_wired(cli, lines, e);
        }
        match user_cli::add(cli, binary, &w.argv).await {
            Ok(()) => {
                changed = true;
                // The CLI's own file as setup leaves it, so undo can tell it untouched since
                // (only after setup's own change: a file changed by anyone else is never taken
                // for setup's).
                if let Some(store) = &mut record.store {
                    store.after_sha256 = files::read_text(&home.mcp_store, files::TEXT_CAP)
                        .ok()
                        .flatten()
                        .filter(|_| store_holds)
                        .map(|now| files::sha256(now.as_bytes()));
                }
                let scope = match cli {
                    Cli::Claude => "user scope",
                    Cli::Codex => "global",
                };
                lines.push(format!(
                    "{}: MCP server `agentchat` added ({scope}): `{}`",
                    cli.name(),
                    w.argv.join(" ")
                ));
            }
            Err(e) => {
                lines.push(format!("{}: MCP server not added: {e}", cli.name()));
                return Done {
                    lines,
                    changed,
                    block_unwritten: None,
                };
            }
        }
    }
    *record_mut(manifest, cli) = Some(record);
    if let Some(rendered) = rendered {
        match write_block(
            w,
            &home,
            current_text.as_deref(),
            &rendered,
            manifest,
            cli,
            inherited,
        ) {
            Ok(true) => {
                changed = true;
                lines.push(format!(
                    "{}: identity block (@{}) written to {}",
                    cli.name(),
                    w.handle,
                    home.identity_file.display()
                ));
            }
            Ok(false) => lines.push(format!(
                "{}: identity block already current in {}",
                cli.name(),
                home.identity_file.display()
            )),
            Err(e) => {
                lines.push(format!("{}: identity block not written: {e:#}", cli.name()));
                block_unwritten = Some(format!("{e:#}"));
            }
        }
    }
    Done {
        lines,
        changed,
        block_unwritten,
    }
}

/// Upserts the block (anchor rules) and records what undo needs to take it out: the block, the
/// separator before it, whether setup created the file (`inherited`: another profile's record
/// of the same block, taken over by `--rewire`). The record is saved before the file is written.
fn write_block(
    w: &WiringRequest<'_>,
    home: &Home,
    current: Option<&str>,
    rendered: &str,
    manifest: &mut Manifest,
    cli: Cli,
    inherited: Option<(bool, String)>,
) -> anyhow::Result<bool> {
    let new = anchor::upsert(current, rendered)?;
    if current == Some(new.as_str()) {
        return Ok(false);
    }
    if let Some(dir) = home.identity_file.parent() {
        super::manifest::create_dirs(dir, manifest, false)?;
    }
    let block = anchor::block_in(&new).unwrap_or_default();
    let rec = record_mut(manifest, cli).get_or_insert_with(CliRecord::default);
    let earlier = rec.identity.clone();
    let (created, separator) = match (&earlier, inherited) {
        (Some(old), _) if old.file == home.identity_file => (old.created, old.separator.clone()),
        (_, Some(i)) => i,
        _ => (
            current.is_none(),
            anchor::separator(current, &new).to_string(),
        ),
    };
    rec.identity = Some(IdentityRecord {
        file: home.identity_file.clone(),
        created,
        separator,
        block,
        after_sha256: files::sha256(new.as_bytes()),
        ..IdentityRecord::default()
    });
    manifest.save(w.state_dir)?;
    // Through a symbolic link (dotfiles): the link stays, its target gets the block.
    if let Err(e) = crate::sys::fs::write_through_links(&home.identity_file, new.as_bytes()) {
        if let Some(rec) = record_mut(manifest, cli) {
            rec.identity = earlier;
        }
        let _ = manifest.save(w.state_dir);
        anyhow::bail!("cannot write {}: {e}", home.identity_file.display());
    }
    Ok(true)
}

/// `other`'s setup record for this CLI, when that profile's manifest can be read.
fn other_record(w: &WiringRequest<'_>, cli: Cli, other: &str) -> Option<CliRecord> {
    let place = super::Place::find(w.config, Some(other)).ok()?;
    let m = Manifest::load(&place.state_dir).ok()??;
    match cli {
        Cli::Claude => m.claude,
        Cli::Codex => m.codex,
    }
}

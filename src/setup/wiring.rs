//! Wiring one CLI for interactive sessions: the `agentchat` MCP entry (through the CLI's own
//! `mcp add`) and the identity block in the file it loads every session. A CLI's home serves one
//! agent at a time: one wired for another profile (or another `agentchat` server) is left alone
//! unless `--rewire` asks for it.

use super::anchor;
use super::manifest::{CliRecord, IdentityRecord, Manifest};
use super::wire::{self, Cli, Entry, Home};
use crate::client::Api;
use std::collections::HashMap;
use std::path::Path;

pub struct Wiring<'a> {
    pub profile: &'a str,
    /// The entry's argv: `agentchat mcp --profile P [--config F]`.
    pub argv: Vec<String>,
    pub rewire: bool,
    pub handle: &'a str,
    pub api: &'a Api,
    pub env: &'a HashMap<String, String>,
    /// The config named with `--config`, to find another profile's state dir.
    pub config: Option<&'a Path>,
}

/// What wiring one CLI did, for the screen.
pub struct Done {
    pub lines: Vec<String>,
    pub changed: bool,
}

fn record_mut(manifest: &mut Manifest, cli: Cli) -> &mut Option<CliRecord> {
    match cli {
        Cli::Claude => &mut manifest.claude,
        Cli::Codex => &mut manifest.codex,
    }
}

/// The identity block's text for this CLI: the served `identity_line_template` with the handle
/// (contract 3.6; never a copy of our own).
async fn rendered_block(w: &Wiring<'_>, cli: Cli) -> Result<String, String> {
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

pub async fn wire(w: &Wiring<'_>, cli: Cli, binary: &Path, manifest: &mut Manifest) -> Done {
    let mut lines = Vec::new();
    let Some(home) = wire::home(cli, w.env) else {
        return Done {
            lines: vec![format!("{}: not wired: HOME is not set", cli.name())],
            changed: false,
        };
    };
    let ours = record_mut(manifest, cli).clone().unwrap_or_default();
    let entry = wire::current_entry(&home);
    let current_text = std::fs::read_to_string(&home.identity_file).ok();
    let current_block = current_text.as_deref().and_then(anchor::block_in);
    let block_is_ours = |b: &String| ours.identity.as_ref().is_some_and(|r| &r.block == b);
    let entry_is_ours = match &entry {
        Entry::Argv(a) => wire::profile_of(a).as_deref() == Some(w.profile),
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
        e => Some(wire::describe(e)),
    };
    let rendered = match rendered_block(w, cli).await {
        Ok(r) => Some(r),
        Err(why) => {
            lines.push(format!("{}: identity block not written: {why}", cli.name()));
            None
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
            };
        }
    }
    let mut record = ours.clone();
    let mut changed = false;
    let mut inherited_before: Option<Option<String>> = None;
    if entry == Entry::Argv(w.argv.clone()) {
        lines.push(format!(
            "{}: MCP server `agentchat` already runs `{}`",
            cli.name(),
            w.argv.join(" ")
        ));
    } else {
        if entry != Entry::None
            && let Err(e) = wire::remove(cli, binary).await
        {
            lines.push(format!("{}: not wired: {e}", cli.name()));
            return Done { lines, changed };
        }
        if !entry_is_ours && entry != Entry::None {
            record.replaced = foreign.clone();
            // Taking over another profile's home: its setup's record of the file before any
            // block is this one's too, so undo can give the user's own text back.
            if let Entry::Argv(a) = &entry
                && let Some(other) = wire::profile_of(a)
                && let Some(before) = earlier_text(w, cli, &other, current_block.as_deref())
            {
                inherited_before = Some(before);
            }
        }
        // Codex refuses a CODEX_HOME that does not exist yet.
        if cli == Cli::Codex
            && let Some(dir) = home.mcp_store.parent()
            && let Err(e) = super::manifest::create_dirs(dir, manifest, false)
        {
            lines.push(format!("{}: not wired: {e:#}", cli.name()));
            return Done { lines, changed };
        }
        match wire::add(cli, binary, &w.argv).await {
            Ok(()) => {
                record.mcp_added = true;
                record.mcp_command = w.argv.clone();
                changed = true;
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
                *record_mut(manifest, cli) = Some(record);
                return Done { lines, changed };
            }
        }
    }
    *record_mut(manifest, cli) = Some(record);
    if let Some(rendered) = rendered {
        match write_block(
            &home,
            current_text.as_deref(),
            &rendered,
            manifest,
            cli,
            inherited_before,
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
            Err(e) => lines.push(format!("{}: identity block not written: {e:#}", cli.name())),
        }
    }
    Done { lines, changed }
}

/// Upserts the block (anchor rules) and records the file's text before and after.
fn write_block(
    home: &Home,
    current: Option<&str>,
    rendered: &str,
    manifest: &mut Manifest,
    cli: Cli,
    inherited_before: Option<Option<String>>,
) -> anyhow::Result<bool> {
    let new = anchor::upsert(current, rendered)?;
    if current == Some(new.as_str()) {
        return Ok(false);
    }
    if let Some(dir) = home.identity_file.parent() {
        super::manifest::create_dirs(dir, manifest, false)?;
    }
    crate::sys::fs::write_keeping_mode(&home.identity_file, new.as_bytes())
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", home.identity_file.display()))?;
    let block = anchor::block_in(&new).unwrap_or_default();
    let rec = record_mut(manifest, cli).get_or_insert_with(CliRecord::default);
    let before = match (&rec.identity, inherited_before) {
        (Some(old), _) if old.file == home.identity_file => old.before.clone(),
        (_, Some(before)) => before,
        _ => current.map(str::to_string),
    };
    rec.identity = Some(IdentityRecord {
        file: home.identity_file.clone(),
        before,
        after: new,
        block,
    });
    Ok(true)
}

/// The text `other`'s setup recorded for this CLI's identity file before it wrote its block,
/// when the block there now is still the one it wrote.
fn earlier_text(
    w: &Wiring<'_>,
    cli: Cli,
    other: &str,
    block_now: Option<&str>,
) -> Option<Option<String>> {
    let place = super::Place::find(w.config, Some(other)).ok()?;
    let m = Manifest::load(&place.state_dir).ok()??;
    let rec = match cli {
        Cli::Claude => m.claude,
        Cli::Codex => m.codex,
    }?;
    let id = rec.identity?;
    (Some(id.block.as_str()) == block_now).then_some(id.before)
}

//! The start of a run's step 5, shared by a cycle and `doctor --run` so both start a run the same
//! way: the working directory, and the identity block in the file the runtime loads there.

use super::state_dir::StateDir;
use crate::config::Settings;
use crate::core::texts::Texts;
use crate::log_events;
use crate::sys::fs;
use std::path::PathBuf;

/// Creates the run's working directory and keeps the identity block in it current (when
/// `listen.identity_block` is on and texts are loaded). The directory, or it and why it could
/// not be created.
pub fn prepare(
    settings: &Settings,
    state: &StateDir,
    texts: Option<&Texts>,
    handle: &str,
    cycle_id: &str,
) -> Result<PathBuf, (PathBuf, std::io::Error)> {
    let workdir = state.workdir(settings.listen.workdir.as_deref());
    // The default workdir is in the state dir: a state dir deleted while the listener runs is
    // made again private (0700), as at the start (issue 38 item 8). A workdir the user named is
    // theirs, made as their own tools would.
    let made = match settings.listen.workdir {
        None => fs::create_private_dir(&workdir),
        Some(_) => std::fs::create_dir_all(&workdir),
    };
    if let Err(e) = made {
        return Err((workdir, e));
    }
    if settings.listen.identity_block
        && let Some(texts) = texts
    {
        keep_identity_block(settings, texts, handle, &workdir, cycle_id);
    }
    Ok(workdir)
}

/// Keeps the identity block (which handle this agent is, from the served
/// `identity_line_template`) current in the file the runtime loads every turn inside `workdir`:
/// `CLAUDE.md` for Claude Code, `AGENTS.md` for Codex; nothing for scripts. Every byte outside
/// the marked block stays as it was; a damaged block is left alone with a warning.
fn keep_identity_block(
    settings: &Settings,
    texts: &Texts,
    handle: &str,
    workdir: &std::path::Path,
    cycle_id: &str,
) {
    let Some(file) = settings.listen.runtime.identity_file() else {
        return;
    };
    let Some(template) = texts.identity_line_template.as_deref() else {
        tracing::debug!(event = %log_events::IDENTITY_SKIPPED, cycle_id = %cycle_id, "the texts have no identity_line_template");
        return;
    };
    let path = workdir.join(file);
    let current = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(e) => {
            tracing::warn!(event = %log_events::IDENTITY_FAILED, cycle_id = %cycle_id, path = %path.display(), error = %e, "cannot read the file for the identity block");
            return;
        }
    };
    let rendered = crate::core::identity::render(template, &crate::core::handle::normalize(handle));
    match crate::core::identity::upsert(&current, &rendered) {
        Ok(next) if next == current => {}
        Ok(next) => {
            if let Err(e) = fs::write_keeping_mode(&path, next.as_bytes()) {
                tracing::warn!(event = %log_events::IDENTITY_FAILED, cycle_id = %cycle_id, path = %path.display(), error = %e, "cannot write the identity block");
            } else {
                tracing::info!(event = %log_events::IDENTITY_UPDATED, cycle_id = %cycle_id, path = %path.display(), "identity block updated");
            }
        }
        Err(e) => {
            tracing::warn!(event = %log_events::IDENTITY_FAILED, cycle_id = %cycle_id, path = %path.display(), error = %e, "identity block left as it is")
        }
    }
}

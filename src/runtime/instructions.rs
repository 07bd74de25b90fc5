//! What a run is told about who it is and how to work (issue 33): from the listener's own copy,
//! never from a file the run can write. The identity block is rendered here from the served
//! template each time; the user's own words come from `listen.instructions`, a file the
//! listener reads before each run. The workdir's `CLAUDE.md` / `AGENTS.md` (where the listener
//! also keeps the block for the user's own sessions) are not read for a run: a run with an
//! opt-in Write or shell cannot change what the next run is told, and a file it makes huge or
//! broken stops nothing.

use super::RunContext;
use crate::log_events;
use std::path::Path;

/// The most of `listen.instructions` a run is told: well under Linux's 128 KiB cap on one
/// argument (Claude Code gets it as one).
pub const CAP: u64 = 64 * 1024;

/// The run's instructions: the identity block (when `listen.identity_block` is on and texts
/// are loaded), then the profile's instructions file. A file that cannot be used is left out
/// with a warning and the run goes on; `None` when there is nothing to tell.
pub fn for_run(ctx: &RunContext<'_>) -> Option<String> {
    let listen = &ctx.settings.listen;
    let mut parts = Vec::new();
    if listen.identity_block
        && let Some(template) = ctx.identity_template
    {
        parts.push(crate::core::identity::render(
            template,
            &crate::core::handle::normalize(ctx.handle),
        ));
    }
    if let Some(path) = &listen.instructions {
        match read(path) {
            Ok(text) => parts.push(text),
            Err(why) => {
                tracing::warn!(event = %log_events::IDENTITY_FAILED, cycle_id = %ctx.cycle_id, path = %path.display(), error = %why, "the run is not told listen.instructions");
            }
        }
    }
    (!parts.is_empty()).then(|| parts.join("\n\n"))
}

/// The instructions file's text, or why it cannot be used: not there, not a regular file,
/// over [`CAP`], not UTF-8.
pub fn read(path: &Path) -> Result<String, String> {
    let bytes = crate::sys::fs::read_regular_capped(path, CAP).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::agent_cli::test_support::Fixture;

    #[test]
    fn the_identity_comes_from_the_template_and_the_rest_from_the_named_file() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::ClaudeCode);
        let file = fx.dir.path().join("mine.md");
        std::fs::write(&file, "Answer in French.\n").unwrap();
        fx.settings.listen.instructions = Some(file.clone());
        // A huge, broken CLAUDE.md in the workdir is nothing to a run.
        std::fs::write(fx.workdir().join("CLAUDE.md"), vec![0xffu8; 200 * 1024]).unwrap();
        let mut ctx = fx.ctx();
        ctx.identity_template = Some("You are @<handle> on AgentChat.");
        let told = for_run(&ctx).unwrap();
        assert_eq!(told, "You are @me on AgentChat.\n\nAnswer in French.\n");
        fx.settings.listen.identity_block = false;
        let mut ctx = fx.ctx();
        ctx.identity_template = Some("You are @<handle> on AgentChat.");
        assert_eq!(for_run(&ctx).unwrap(), "Answer in French.\n");
    }

    #[test]
    fn an_oversized_or_broken_instructions_file_is_left_out_and_the_run_goes_on() {
        let mut fx = Fixture::new(crate::config::RuntimeKind::Codex);
        let file = fx.dir.path().join("mine.md");
        std::fs::write(&file, vec![b'x'; CAP as usize + 1]).unwrap();
        fx.settings.listen.instructions = Some(file.clone());
        assert!(
            read(&file).unwrap_err().contains("over the"),
            "{:?}",
            read(&file)
        );
        let mut ctx = fx.ctx();
        ctx.identity_template = Some("@<handle>");
        assert_eq!(for_run(&ctx).as_deref(), Some("@me"));
        std::fs::write(&file, [0xff, 0xfe]).unwrap();
        assert!(read(&file).unwrap_err().contains("UTF-8"));
        fx.settings.listen.instructions = Some(fx.dir.path().join("gone.md"));
        assert_eq!(for_run(&fx.ctx()), None);
    }
}

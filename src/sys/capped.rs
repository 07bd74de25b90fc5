//! The one way setup and its undo read and check the user's files they edit (CLAUDE.md,
//! AGENTS.md, `config.toml`, Codex's `config.toml`): capped, through symbolic links, and never
//! taking a file it cannot read as "no file" (a file that is not UTF-8 would otherwise be
//! overwritten, then deleted by undo as "created by setup").

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// The most of a CLAUDE.md, AGENTS.md, Codex `config.toml` or agentchat config setup reads (a
/// session loads the first two every turn: a larger one is no instruction file setup should
/// edit; the last is the config's own cap, `CONFIG_FILE_CAP` in src/config/load.rs).
pub const TEXT_CAP: u64 = 1024 * 1024;
/// Claude Code's own `~/.claude.json` grows with its project history; only its `mcpServers` are
/// read.
pub const CLAUDE_JSON_CAP: u64 = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {}: {why}", path.display())]
    Read { path: PathBuf, why: String },
    #[error(
        "{} is not UTF-8 text; setup edits only UTF-8 files and leaves it as it is",
        path.display()
    )]
    NotUtf8 { path: PathBuf },
    #[error(
        "{} is read-only (mode {mode:04o}); setup leaves it as it is: make it writable \
         (`chmod u+w`) and run this again",
        path.display()
    )]
    ReadOnly { path: PathBuf, mode: u32 },
}

/// The file's text (`None`: there is no file; a dangling link is no file either). Anything else
/// that keeps it from being read whole as UTF-8 is an error naming the file, never its content.
pub fn read_text(path: &Path, cap: u64) -> Result<Option<String>, FileError> {
    match crate::sys::fs::read_regular_capped(path, cap) {
        Ok(bytes) => String::from_utf8(bytes)
            .map(Some)
            .map_err(|_| FileError::NotUtf8 {
                path: path.to_path_buf(),
            }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FileError::Read {
            path: path.to_path_buf(),
            why: e.to_string(),
        }),
    }
}

/// A file that exists must be writable by its owner: setup's atomic rename would replace a
/// read-only one without a word, so a mode the user set to protect it is honoured instead.
pub fn check_writable(path: &Path) -> Result<(), FileError> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path) {
        Ok(m) if m.mode() & 0o200 == 0 => Err(FileError::ReadOnly {
            path: path.to_path_buf(),
            mode: m.mode() & 0o7777,
        }),
        _ => Ok(()),
    }
}

/// The SHA-256 of `bytes` in hex: how the manifest recognises a file still as setup left it
/// without keeping a copy of it.
pub fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The file's mode bits, when it exists (through links).
pub fn mode_of(path: &Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(path).ok().map(|m| m.mode() & 0o7777)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_file_that_is_not_utf8_is_an_error_not_no_file() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("CLAUDE.md");
        assert!(read_text(&f, TEXT_CAP).unwrap().is_none());
        std::fs::write(&f, b"caf\xe9\n").unwrap();
        let e = read_text(&f, TEXT_CAP).unwrap_err();
        assert!(matches!(e, FileError::NotUtf8 { .. }), "{e}");
        assert!(e.to_string().contains("not UTF-8"), "{e}");
        std::fs::write(&f, b"0123456789").unwrap();
        let e = read_text(&f, 4).unwrap_err();
        assert!(e.to_string().contains("over the 4 B cap"), "{e}");
    }

    #[test]
    fn a_read_only_file_is_refused_and_a_missing_one_is_not() {
        let d = tempfile::tempdir().unwrap();
        let f = d.path().join("AGENTS.md");
        check_writable(&f).unwrap();
        std::fs::write(&f, b"x").unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        let e = check_writable(&f).unwrap_err();
        assert!(e.to_string().contains("read-only (mode 0444)"), "{e}");
        assert_eq!(sha256(b"").len(), 64);
    }
}

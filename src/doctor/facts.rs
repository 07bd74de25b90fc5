//! Gathering the facts the checks judge: the state dir on disk, `status.json`, the service unit,
//! and the server's answers (each call under one time limit). Who holds the lock is
//! `sys::flock`'s one answer.

use crate::client::{Api, ApiError};
use crate::core::status::Status;
use crate::listen::state_dir::StateDir;
use std::path::Path;
use std::time::Duration;

/// How long the server checks may take in all (each call).
pub const SERVER_TIMEOUT: Duration = Duration::from_secs(15);

/// The facts `check_texts` needs from one `GET /v1/texts`.
#[derive(Debug, Clone)]
pub struct TextsFacts {
    pub version: String,
    pub has_wake_instruction: bool,
    pub has_invite_prompt: bool,
}

/// What the state dir looks like on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StateDirFacts {
    Missing,
    NotADir,
    Present {
        mode: u32,
        /// The dir's owner and the user doctor runs as.
        owner: u32,
        you: u32,
        /// `Err` with the reason when a file could not be created in it.
        writable: Result<(), String>,
    },
    Unreadable(String),
}

pub fn state_dir_facts(path: &Path) -> StateDirFacts {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return StateDirFacts::Missing,
        Err(e) => return StateDirFacts::Unreadable(e.to_string()),
    };
    if !meta.is_dir() {
        return StateDirFacts::NotADir;
    }
    let me = crate::sys::process::current_uid();
    let probe = path.join(format!(".doctor-{}", std::process::id()));
    let writable = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map(|_| {
            let _ = std::fs::remove_file(&probe);
        })
        .map_err(|e| e.to_string());
    StateDirFacts::Present {
        mode: meta.permissions().mode(),
        owner: meta.uid(),
        you: me,
        writable,
    }
}

/// The program a unit runs: the first word of its `ExecStart=` (systemd, double-quoted by
/// `service`) or the first `<string>` of `ProgramArguments` (launchd), unquoted.
pub fn unit_program(text: &str) -> Option<String> {
    if let Some(line) = text
        .lines()
        .rev()
        .find(|l| l.starts_with("ExecStart=") && l.len() > "ExecStart=".len())
    {
        let rest = line.strip_prefix("ExecStart=")?;
        let word = match rest.strip_prefix('"') {
            Some(q) => q.split('"').next()?.replace("$$", "$").replace("%%", "%"),
            None => rest.split_whitespace().next()?.to_string(),
        };
        return Some(word);
    }
    let after = text.split("<key>ProgramArguments</key>").nth(1)?;
    let first = after.split("<string>").nth(1)?.split("</string>").next()?;
    Some(
        first
            .replace("&lt;", "<")
            .replace("&gt;", ">")
            .replace("&quot;", "\"")
            .replace("&apos;", "'")
            .replace("&amp;", "&"),
    )
}

/// A server call under the one time limit for doctor's server checks; past it, a network error.
pub async fn with_timeout<T>(
    fut: impl std::future::Future<Output = Result<T, ApiError>>,
) -> Result<T, ApiError> {
    tokio::time::timeout(SERVER_TIMEOUT, fut)
        .await
        .unwrap_or_else(|_| {
            Err(ApiError::Network(format!(
                "no answer within {} s",
                SERVER_TIMEOUT.as_secs()
            )))
        })
}

/// The permission bits (`0o777`) of the file at `path` (symlinks followed), when it can be read.
pub fn file_mode(path: &Path) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path)
        .ok()
        .map(|m| m.permissions().mode() & 0o777)
}

/// `None` when `path` does not exist; else what `read` made of it, or why it could not be read.
fn read_present<T>(
    path: &Path,
    read: impl FnOnce(&Path) -> std::io::Result<T>,
) -> Option<Result<T, String>> {
    match read(path) {
        Ok(v) => Some(Ok(v)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => Some(Err(e.to_string())),
    }
}

/// `status.json` of the state dir `state_dir`, typed (`StateDir::read_status`, the reader
/// `agentchat status` uses too); `None` when there is none.
pub fn read_status(state_dir: &Path) -> Option<Result<Status, String>> {
    StateDir::at(state_dir)
        .read_status()
        .transpose()
        .map(|read| read.map_err(|e| e.to_string()))
}

/// The text of an installed unit file; `None` when there is none.
pub fn read_if_present(path: &Path) -> Option<Result<String, String>> {
    read_present(path, |p| std::fs::read_to_string(p))
}

/// The facts `check_texts` needs, from `GET /v1/texts` for `runtime`.
pub async fn texts_facts(api: &Api, runtime: &str) -> Result<TextsFacts, String> {
    with_timeout(api.texts(runtime))
        .await
        .map(|(t, _)| TextsFacts {
            version: t.version,
            has_wake_instruction: t.wake_instruction.is_some_and(|s| !s.trim().is_empty()),
            has_invite_prompt: t.invite_prompt.is_some_and(|s| !s.trim().is_empty()),
        })
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_units_program_is_read_from_exec_start_or_program_arguments() {
        let unit = "[Service]\nExecStart=\"/opt/a b/agentchat\" \"listen\"\n";
        assert_eq!(unit_program(unit).as_deref(), Some("/opt/a b/agentchat"));
        let plist = "<key>ProgramArguments</key>\n<array>\n<string>/x/a&amp;b</string>";
        assert_eq!(unit_program(plist).as_deref(), Some("/x/a&b"));
        assert_eq!(unit_program("[Service]\n"), None);
    }
}

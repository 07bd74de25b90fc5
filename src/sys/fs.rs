//! Files the listener writes: atomic replacement (temp file + rename) at 0600 or keeping the
//! user's mode, and private (0600) appends. Nothing here knows what the files hold.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// Writes `bytes` to a temp file beside `path` (0600) and renames it over `path`, so a reader
/// never sees half a file.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, 0o600, Sync::Yes).map(drop)
}

/// `write_atomic` without the `fsync`, for a file rewritten often that a crash may leave at its
/// previous version (the listener's `status.json`, which a new listener writes again at start): a
/// reader still never sees half a file, and the writer never waits for the disk. Returns the new
/// file, still open, so its writer can touch it later (`File::set_modified`) without a path
/// lookup.
pub fn write_atomic_unsynced(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    write_atomic_mode(path, bytes, 0o600, Sync::No)
}

/// Whether an atomic write waits for the data to reach the disk before the rename.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sync {
    Yes,
    No,
}

/// `write_atomic` for a file of the user's (the identity block's file, a service unit): keeps
/// its mode, 0644 when new.
pub fn write_keeping_mode(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mode = std::fs::metadata(path)
        .map(|m| m.mode() & 0o7777)
        .unwrap_or(0o644);
    write_atomic_mode(path, bytes, mode, Sync::Yes).map(drop)
}

fn write_atomic_mode(path: &Path, bytes: &[u8], mode: u32, sync: Sync) -> std::io::Result<File> {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "file".into());
    let tmp = path.with_file_name(format!(
        ".{name}.{}.{:08x}.tmp",
        std::process::id(),
        fastrand::u32(..)
    ));
    let written = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        if sync == Sync::Yes {
            f.sync_all()?;
        }
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        std::fs::rename(&tmp, path)?;
        Ok(f)
    })();
    if written.is_err() {
        // A full disk or a failed rename must not leave a temp file behind on every retry.
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Creates `dir` and its missing parents, each new one 0700. An existing dir keeps its mode.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Opens `path` for appending, creating it 0600 (and a missing parent 0700); an existing file is
/// narrowed to 0600 too. For files that may hold what only the user should read (run logs).
pub fn open_append_private(path: &Path) -> std::io::Result<File> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty())
        && !parent.exists()
    {
        create_private_dir(parent)?;
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_atomic_write_is_an_error_and_leaves_no_temp_file() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("status.json");
        // A non-empty directory in the way: the rename fails, even for root.
        std::fs::create_dir(&target).unwrap();
        std::fs::write(target.join("keep"), b"").unwrap();
        assert!(write_atomic(&target, b"{}").is_err());
        let names: Vec<String> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["status.json"]);
    }
}

//! Files the listener writes: atomic replacement (temp file + rename) at 0600 or keeping the
//! user's mode, and private (0600) appends; and the one way to read a file the user names
//! (config, key): regular files only, with a size cap, never blocking on a FIFO or a device.
//! Nothing here knows what the files hold.

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

/// `write_atomic` with the mode given: for putting back a file of the user's as it was (setup's
/// undo restores Codex's `config.toml` with the mode it had, which Codex's own writes narrow).
pub fn write_with_mode(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    write_atomic_mode(path, bytes, mode & 0o7777, Sync::Yes).map(drop)
}

/// The file a write to `path` must replace so that a symbolic link stays one (a dotfiles
/// checkout links `CLAUDE.md` or `config.toml` into a repository): `path` itself unless it is a
/// link, else where its chain of links ends, each relative target taken from its link's dir. A
/// dangling link gives its target, so the first write creates the file behind the link.
pub fn link_target(path: &Path) -> std::io::Result<std::path::PathBuf> {
    let mut p = path.to_path_buf();
    // As the kernel's own limit on a path's links (ELOOP).
    for _ in 0..40 {
        match std::fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = std::fs::read_link(&p)?;
                p = match p.parent() {
                    Some(dir) if target.is_relative() => dir.join(target),
                    _ => target,
                };
            }
            _ => return Ok(p),
        }
    }
    Err(std::io::Error::other(format!(
        "{}: too many levels of symbolic links",
        path.display()
    )))
}

/// `write_keeping_mode` through symbolic links: the link stays, the file it points to gets the
/// bytes (with its own mode).
pub fn write_through_links(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_keeping_mode(&link_target(path)?, bytes)
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

/// Reads the file at `path` (symlinks followed) when it is a regular file of at most `cap` bytes.
/// Opened with `O_NONBLOCK`, so a FIFO or a device named by mistake (or a symlink to
/// `/dev/zero`) is refused after an `fstat` instead of blocking the thread or filling memory; a
/// regular file ignores the flag. The errors say what the file is (`is a FIFO, not a regular
/// file`) or how large (`is 2.0 MiB, over the 1 MiB cap`), never what it holds. A file that grows
/// past `cap` while being read is refused the same way.
pub fn read_regular_capped(path: &Path, cap: u64) -> std::io::Result<Vec<u8>> {
    let (file, meta) = open_regular(path)?;
    read_capped(file, &meta, cap)
}

/// Opens `path` for reading (symlinks followed) with `O_NONBLOCK` and `fstat`s what it opened:
/// an error saying what it is unless it is a regular file (`is a FIFO, not a regular file`). For
/// a caller that judges the metadata (a key file's mode) before reading with [`read_capped`].
pub fn open_regular(path: &Path) -> std::io::Result<(File, std::fs::Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{}, not a regular file", what_it_is(&meta.file_type())),
        ));
    }
    Ok((file, meta))
}

/// Reads a file [`open_regular`] opened, refusing more than `cap` bytes (by its size, and again
/// if it grows while being read).
pub fn read_capped(file: File, meta: &std::fs::Metadata, cap: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    if meta.len() > cap {
        return Err(too_large(meta.len(), cap));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(cap.saturating_add(1)).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > cap {
        return Err(too_large(bytes.len() as u64, cap));
    }
    Ok(bytes)
}

fn too_large(size: u64, cap: u64) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::FileTooLarge,
        format!(
            "is {}, over the {} cap for this file",
            show_size(size),
            show_size(cap)
        ),
    )
}

/// `is a FIFO`, `is a directory`, … for a file that is not a regular one.
pub fn what_it_is(t: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if t.is_dir() {
        "is a directory"
    } else if t.is_fifo() {
        "is a FIFO"
    } else if t.is_char_device() {
        "is a character device"
    } else if t.is_block_device() {
        "is a block device"
    } else if t.is_socket() {
        "is a socket"
    } else if t.is_symlink() {
        "is a symbolic link"
    } else if t.is_file() {
        "is a regular file"
    } else {
        "is not a file"
    }
}

/// A byte count for messages: `512 B`, `64 KiB`, `1.5 MiB`.
pub fn show_size(n: u64) -> String {
    const KIB: u64 = 1024;
    const MIB: u64 = 1024 * 1024;
    match n {
        n if n >= MIB && n % MIB == 0 => format!("{} MiB", n / MIB),
        n if n >= MIB => format!("{:.1} MiB", n as f64 / MIB as f64),
        n if n >= KIB && n % KIB == 0 => format!("{} KiB", n / KIB),
        n if n >= KIB => format!("{:.1} KiB", n as f64 / KIB as f64),
        n => format!("{n} B"),
    }
}

/// Raises this process's soft limit on open descriptors to its hard limit (systemd and most
/// shells start at a soft 1024 under a far higher hard limit), so what the listener holds (the
/// socket, a run's pipes and logs, the metrics endpoint's few connections) never meets the soft
/// limit first. The limits after, soft and hard; an error leaves them as they were.
pub fn raise_open_files_limit() -> std::io::Result<(u64, u64)> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct passed by pointer.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        lim = raised;
    }
    Ok((lim.rlim_cur, lim.rlim_max))
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

    #[test]
    fn a_write_through_a_link_keeps_the_link_and_changes_its_target() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().join("dotfiles/CLAUDE.md");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::write(&real, b"old").unwrap();
        let link = tmp.path().join("CLAUDE.md");
        std::os::unix::fs::symlink("dotfiles/CLAUDE.md", &link).unwrap();
        let twice = tmp.path().join("twice.md");
        std::os::unix::fs::symlink(&link, &twice).unwrap();
        write_through_links(&twice, b"new").unwrap();
        assert!(
            std::fs::symlink_metadata(&link)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert!(
            std::fs::symlink_metadata(&twice)
                .unwrap()
                .file_type()
                .is_symlink()
        );
        assert_eq!(std::fs::read(&real).unwrap(), b"new");
        let dangling = tmp.path().join("dangling");
        std::os::unix::fs::symlink("made-later", &dangling).unwrap();
        write_through_links(&dangling, b"x").unwrap();
        assert_eq!(std::fs::read(tmp.path().join("made-later")).unwrap(), b"x");
        let lp = tmp.path().join("loop");
        std::os::unix::fs::symlink("loop", &lp).unwrap();
        assert!(link_target(&lp).is_err());
    }

    #[test]
    fn only_a_regular_file_under_its_cap_is_read_and_a_fifo_never_blocks() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("config.toml");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_regular_capped(&file, 3).unwrap(), b"abc");
        let e = read_regular_capped(&file, 2).unwrap_err();
        assert_eq!(e.to_string(), "is 3 B, over the 2 B cap for this file");
        let fifo = tmp.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: a blocking open would wait for ever.
        let e = read_regular_capped(&fifo, 1024).unwrap_err();
        assert_eq!(e.to_string(), "is a FIFO, not a regular file");
        let zero = tmp.path().join("zero");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = read_regular_capped(&zero, 1024).unwrap_err();
        assert_eq!(e.to_string(), "is a character device, not a regular file");
        let e = read_regular_capped(tmp.path(), 1024).unwrap_err();
        assert_eq!(e.to_string(), "is a directory, not a regular file");
        assert_eq!(show_size(1024 * 1024), "1 MiB");
        assert_eq!(show_size(1536), "1.5 KiB");
    }
}

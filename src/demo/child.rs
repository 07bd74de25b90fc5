//! The demo's listener child: its scratch dir, its config, its process group and its stop.

use crate::sys::process::{GroupChild, Termination};
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A directory removed when dropped (the binary has no tempfile crate).
pub(super) struct ScratchDir(pub(super) PathBuf);

impl ScratchDir {
    pub(super) fn new() -> anyhow::Result<ScratchDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!(
            "agentchat-demo-{}-{:08x}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        Ok(ScratchDir(path))
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The listener child, in its own process group. Dropping it SIGKILLs the group, so no path
/// leaves the listener behind.
pub(super) struct Listener(pub(super) GroupChild);

impl Listener {
    /// SIGTERM (the listener's graceful stop: its run gets the grace), then SIGKILL after `grace`.
    pub(super) async fn stop(
        &mut self,
        grace: Duration,
    ) -> anyhow::Result<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.0.child.try_wait() {
            return Ok(status);
        }
        match self.0.terminate(grace).await {
            (status, Termination::WithinGrace) => Ok(status?),
            (status, Termination::Killed) => {
                let status = status?;
                bail!("the listener did not stop within {grace:?} of SIGTERM; killed it ({status})")
            }
        }
    }
}

/// Asks the kernel to SIGTERM the listener when the demo dies, so a demo killed outright (where
/// no `Drop` runs) still stops its listener, and the listener in turn its run. The death signal
/// follows the spawning thread, which is the runtime's `block_on` thread for the demo's whole life.
#[cfg(target_os = "linux")]
pub(super) fn stop_with_parent(cmd: &mut tokio::process::Command) {
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (prctl, getppid, raise); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The demo may have died before prctl took effect.
            if u32::try_from(libc::getppid()).ok() != Some(parent) {
                libc::raise(libc::SIGTERM);
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) fn stop_with_parent(_cmd: &mut tokio::process::Command) {}

/// The listener's config for the demo: the script runtime is this binary's `demo-agent` (or
/// `script`, the user's program), and the coalescer's windows are short so the demo moves
/// quickly. The agent's failure switch is passed by name: a run inherits nothing else of the
/// listener's environment (`core::run_env`).
pub(super) fn write_config(dir: &Path, script: Option<&Path>) -> anyhow::Result<PathBuf> {
    let argv = match script {
        Some(s) => vec![toml::Value::String(
            std::path::absolute(s)
                .with_context(|| format!("cannot find {}", s.display()))?
                .to_string_lossy()
                .into_owned(),
        )],
        None => {
            let exe = std::env::current_exe().context("cannot find this program's own path")?;
            vec![
                toml::Value::String(exe.to_string_lossy().into_owned()),
                toml::Value::String("demo-agent".into()),
            ]
        }
    };
    let argv = toml::Value::Array(argv);
    let text = format!(
        "# written by `agentchat demo`\n[listen]\nruntime = \"script\"\ncommand = {argv}\n\
         quiet_window = \"300ms\"\nmax_delay = \"2s\"\nrun_timeout = \"20s\"\nkill_grace = \"2s\"\n\
         identity_block = false\nenv_pass = [\"{}\"]\n",
        super::agent::FAIL_ENV
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(path)
}

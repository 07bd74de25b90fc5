//! Starts a run in its own process group and supervises it: output to a per-run log file (0600),
//! a time limit (SIGTERM to the group, a grace, SIGKILL to the group), and the same on shutdown.
//! No process of the run's group outlives it.

use crate::runtime::{ProcessEnd, RunSpec};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, Clone, Copy)]
pub struct RunLimits {
    pub timeout: Duration,
    pub grace: Duration,
}

#[derive(Debug, Clone)]
pub struct RunReport {
    pub end: ProcessEnd,
    pub pid: Option<u32>,
    pub log_path: PathBuf,
    pub duration: Duration,
}

/// Runs `spec` to its end. `cancel` turning true ends the run early (SIGTERM, grace, SIGKILL).
pub async fn run(
    spec: &RunSpec,
    limits: RunLimits,
    log_path: &Path,
    cancel: tokio::sync::watch::Receiver<bool>,
) -> RunReport {
    let _ = (spec, limits, cancel);
    todo!("ops: runner {}", log_path.display())
}

/// Keeps the newest `keep` run logs in `dir`.
pub fn prune_logs(dir: &Path, keep: usize) -> std::io::Result<()> {
    let _ = (dir, keep);
    todo!("ops: prune_logs")
}

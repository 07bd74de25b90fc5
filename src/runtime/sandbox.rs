//! The facts a run's kernel line is drawn from (`core::sandbox`): the run's scratch folder, its
//! program's install, the environment's endpoints and proxies, the profile's own additions.
//! Each runtime adds its login files (`claude`, `codex`); `doctor` prints the plan a run of the
//! profile would get, from this same code.

use super::{ListenerEnv, RunContext, RuntimeError};
use crate::core::sandbox::{self, Access, Plan};
use std::path::{Path, PathBuf};

/// The run's scratch folder in the state dir: its `TMPDIR` (`tmp/`) and, for Codex, the CLI's
/// home for the run. One run of a profile at a time, so each run starts with it new and the
/// supervisor removes it when the run ends.
pub const SCRATCH_DIR: &str = "scratch";

/// Makes the run's scratch folder anew (0700), with `tmp/` in it; returns the folder:
/// `<state dir>/scratch`, or, when that cannot be made (a state dir turned full or read-only
/// costs logs, not runs: docs/decisions.md), a new folder of a random name in the listener's
/// `TMPDIR` (`/tmp`), made only if it was not there.
pub fn fresh_scratch(state_dir: &Path, listener: &ListenerEnv) -> Result<PathBuf, RuntimeError> {
    let dir = state_dir.join(SCRATCH_DIR);
    remove_scratch(&dir);
    let made = crate::sys::fs::create_private_dir(&dir).map(|()| dir.clone());
    let dir = made
        .or_else(|e| {
            use std::os::unix::fs::DirBuilderExt;
            let tmp = Path::new(listener.var("TMPDIR").unwrap_or("/tmp"));
            let other = tmp.join(format!("agentchat-scratch-{:016x}", fastrand::u64(..)));
            let made = std::fs::DirBuilder::new().mode(0o700).create(&other);
            made.map(|()| other).map_err(|_| e)
        })
        .map_err(|e| {
            std::io::Error::new(
                e.kind(),
                format!(
                    "cannot make the run's scratch folder {}: {e}",
                    dir.display()
                ),
            )
        })?;
    std::fs::create_dir(dir.join("tmp"))?;
    Ok(dir)
}

/// Removes a run's scratch folder and all in it (a missing one is fine).
pub fn remove_scratch(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// The variables that point a run's temporary files into its scratch folder.
pub fn tmp_env(scratch: &Path) -> Vec<(String, String)> {
    let tmp = scratch.join("tmp").display().to_string();
    ["TMPDIR", "TMP", "TEMP"]
        .iter()
        .map(|v| (v.to_string(), tmp.clone()))
        .collect()
}

/// What every run gets: the system, its workdir and scratch folder (read and write), the
/// profile's `sandbox_read` and `sandbox_write`; TCP to the AgentChat API, the proxies the run
/// inherits and the profile's `sandbox_ports`.
pub fn base_plan(ctx: &RunContext<'_>, env: &ListenerEnv, scratch: &Path) -> Plan {
    let listen = &ctx.settings.listen;
    let mut plan = Plan::default();
    sandbox::system(&mut plan);
    plan.add(ctx.workdir, Access::ReadWrite, "the workdir");
    plan.add(
        scratch,
        Access::ReadWrite,
        "the run's scratch folder (TMPDIR)",
    );
    for p in &listen.sandbox_read {
        plan.add(p, Access::Read, "listen.sandbox_read");
    }
    for p in &listen.sandbox_write {
        plan.add(p, Access::ReadWrite, "listen.sandbox_write");
    }
    add_url_port(&mut plan, &ctx.settings.api_base);
    for var in sandbox::PROXY_VARS {
        if let Some(url) = env.var(var) {
            add_url_port(&mut plan, url);
        }
    }
    for port in &listen.sandbox_ports {
        plan.add_port(*port);
    }
    plan
}

pub fn add_url_port(plan: &mut Plan, url: &str) {
    if let Some(port) = sandbox::url_port(url) {
        plan.add_port(port);
    }
}

/// A program and what it needs of its install to start: the install root of the path as named
/// and as resolved (`core::sandbox::install_root`), and the same for the program its `#!` line
/// names (`node` for an npm-installed CLI), looked up on the listener's `PATH`.
pub fn add_program(plan: &mut Plan, program: &Path, env: &ListenerEnv) {
    let home = env.home();
    let mut paths = vec![program.to_path_buf()];
    if let Ok(real) = std::fs::canonicalize(program) {
        if let Some(interpreter) = interpreter(&real, env) {
            // A version manager's shim (pyenv, rbenv, asdf, mise: `<root>/shims/python3`) is a
            // script that runs the manager to find the real program: the manager's root is what
            // it reads (`~/.pyenv`: its versions and its own code, no secrets).
            if let Some(root) = shims_root(&interpreter) {
                plan.add(root, Access::Read, "the interpreter's version manager");
            }
            paths.push(interpreter.clone());
            if let Ok(real) = std::fs::canonicalize(&interpreter) {
                paths.push(real);
            }
        }
        paths.push(real);
    }
    for p in &paths {
        plan.add(p, Access::Read, "the program");
        if let Some(root) = sandbox::install_root(p, home.as_deref()) {
            plan.add(root, Access::Read, "the program's install");
        }
    }
}

/// The root of the version manager whose shim `program` is: the folder above a `shims` folder.
fn shims_root(program: &Path) -> Option<PathBuf> {
    let dir = program.parent()?;
    (dir.file_name()? == "shims").then(|| dir.parent().map(Path::to_path_buf))?
}

/// The program a script's `#!` line runs, found on `PATH` when it is a bare name.
fn interpreter(script: &Path, env: &ListenerEnv) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(script).ok()?.read(&mut head).ok()?;
    let name = sandbox::shebang_program(head.get(..n)?)?;
    if name.contains('/') {
        return Some(PathBuf::from(name));
    }
    super::agent_cli::search_path(Path::new(&name), env.var_os("PATH"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A script whose `#!/usr/bin/env python3` finds a version manager's shim (pyenv's
    /// `~/.pyenv/shims/python3`) may read the manager's root, which the shim runs.
    #[test]
    fn a_version_managers_shim_lets_the_run_read_the_managers_root() {
        assert_eq!(
            shims_root(Path::new("/home/u/.pyenv/shims/python3")),
            Some(PathBuf::from("/home/u/.pyenv"))
        );
        assert_eq!(shims_root(Path::new("/usr/bin/python3")), None);
    }

    #[test]
    fn a_state_dir_that_cannot_be_written_gets_the_scratch_folder_made_in_tmpdir_instead() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let state = d.path().join("state");
        std::fs::create_dir(&state).unwrap();
        let listener = ListenerEnv::from_vars([("TMPDIR", d.path().join("tmp"))]);
        std::fs::create_dir(d.path().join("tmp")).unwrap();
        let dir = fresh_scratch(&state, &listener).unwrap();
        assert_eq!(dir, state.join(SCRATCH_DIR));
        // A file where the folder would go stands for a state dir that cannot be written (the
        // tests run as root, whom a read-only mode does not stop).
        remove_scratch(&dir);
        let blocked = d.path().join("blocked");
        std::fs::write(&blocked, "").unwrap();
        let dir = fresh_scratch(&blocked, &listener).unwrap();
        assert!(dir.starts_with(d.path().join("tmp")), "{}", dir.display());
        assert!(dir.join("tmp").is_dir());
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // Neither: the error names the state dir's folder.
        let nowhere = ListenerEnv::from_vars([("TMPDIR", blocked.clone())]);
        let err = fresh_scratch(&blocked, &nowhere).unwrap_err().to_string();
        assert!(err.contains("blocked/scratch"), "{err}");
    }
}

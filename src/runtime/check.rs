//! Whether the configured runtime can work now, without starting a run: what `doctor` checks,
//! for the listener ([`presence`] at start, [`usable`] while the runtime is unusable,
//! `core::recheck`). The program
//! must be there (the script's `command[0]`, found as a run would find it; the CLI's binary),
//! and a CLI must say it is logged in (`claude auth status`, `codex login status`).

use super::probe::{PROBE_TIMEOUT, judge_claude_login, judge_codex_login, probe};
use crate::config::{RuntimeKind, Settings};
use crate::sys::process::ProcessEnd;
use std::path::{Path, PathBuf};

/// Why the runtime cannot work now, in a line (never a key, never the CLI's raw output).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotUsable {
    /// The program is not there, or cannot be run.
    Missing(String),
    /// The CLI's login check did not pass.
    Login(String),
}

impl NotUsable {
    pub fn why(&self) -> &str {
        match self {
            NotUsable::Missing(w) | NotUsable::Login(w) => w,
        }
    }
}

/// The program the runtime would start, found now as a run would find it (`workdir` for a
/// relative script path, `PATH` for a bare name). No process is started.
pub fn presence(settings: &Settings, workdir: &Path) -> Result<PathBuf, NotUsable> {
    let missing = |e: super::RuntimeError| NotUsable::Missing(e.to_string());
    let path = match settings.listen.runtime {
        RuntimeKind::Script => {
            let Some(first) = settings.listen.command.first() else {
                return Err(NotUsable::Missing(
                    "the script runtime has no program to run: set `command` under [listen]".into(),
                ));
            };
            let path_var = std::env::var_os("PATH");
            super::script::locate(first, workdir, path_var.as_deref()).map_err(missing)?
        }
        kind => super::cli_binary(settings, kind).map_err(missing)?,
    };
    if !super::agent_cli::is_executable(&path) {
        return Err(NotUsable::Missing(format!(
            "{} is not an executable file",
            path.display()
        )));
    }
    if let Some(interpreter) = missing_interpreter(&path) {
        return Err(NotUsable::Missing(format!(
            "{} names the interpreter {} on its `#!` line, which is not an executable file",
            path.display(),
            interpreter.display()
        )));
    }
    Ok(path)
}

/// The most bytes of a program read for its `#!` line.
const SHEBANG_MAX: u64 = 256;

/// The interpreter a script's `#!` line names, when it names one by full path that cannot run
/// (the kernel then refuses the script with `ENOENT` or `EACCES`, as for a missing program).
fn missing_interpreter(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let mut head = Vec::new();
    std::fs::File::open(program)
        .ok()?
        .take(SHEBANG_MAX)
        .read_to_end(&mut head)
        .ok()?;
    let line = head.strip_prefix(b"#!")?.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let interpreter = PathBuf::from(line.split_whitespace().next()?);
    (interpreter.is_absolute() && !super::agent_cli::is_executable(&interpreter))
        .then_some(interpreter)
}

/// A run whose program could not be started, for a reason that stays until someone fixes it
/// (`ENOENT`, `EACCES`, `ENOEXEC`, a missing interpreter): the runtime is unusable, with the
/// listener's re-check and recovery wake, as for a program moved away. `None` for any other end,
/// or a spawn that failed for a passing reason (no memory, too many processes): that run failed.
/// The reason is what the re-check sees now ([`presence`]), else the spawn's own error.
pub fn unstartable(settings: &Settings, workdir: &Path, end: &ProcessEnd) -> Option<String> {
    let ProcessEnd::SpawnFailed(error) = end else {
        return None;
    };
    if let Err(e) = presence(settings, workdir) {
        return Some(e.why().to_string());
    }
    const LASTING: [&str; 3] = ["(os error 2)", "(os error 13)", "(os error 8)"];
    (LASTING.iter().any(|code| error.contains(code)) || super::agent_cli::spawn_unfixable(end))
        .then(|| format!("the program could not be started: {error}"))
}

/// [`presence`], then for Claude Code and Codex their login check, run as `doctor` runs it
/// (no stdin, its own process group, 10 s at most, without the nested-session variables or
/// the AgentChat key). `Ok` says what passed.
pub async fn usable(settings: &Settings, workdir: &Path) -> Result<String, NotUsable> {
    let path = presence(settings, workdir)?;
    let kind = settings.listen.runtime;
    let Some(args) = kind.descriptor().login_check else {
        return Ok(format!("{} is there", path.display()));
    };
    let mut removed = super::cli_env_remove();
    removed.push("AGENTCHAT_API_KEY".into());
    let remove: Vec<&str> = removed.iter().map(String::as_str).collect();
    let set = [("DISABLE_AUTOUPDATER", "1")];
    let p = probe(&path, args, &remove, &set, PROBE_TIMEOUT).await;
    let (ok, reason) = match kind {
        RuntimeKind::Codex => judge_codex_login(&p),
        _ => judge_claude_login(&p),
    };
    if ok {
        Ok(reason)
    } else {
        Err(NotUsable::Login(reason))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigArgs, resolve};
    use std::collections::HashMap;

    fn settings(toml: &str) -> Settings {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        resolve(
            &ConfigArgs::default(),
            &env,
            Some((Path::new("/etc/agentchat/config.toml"), toml)),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn a_script_is_usable_while_its_program_is_there_and_missing_while_it_is_not() {
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("agent");
        let s = settings(&format!(
            "[listen]\nruntime = \"script\"\ncommand = [\"{}\"]\n",
            prog.display()
        ));
        assert!(matches!(
            usable(&s, d.path()).await,
            Err(NotUsable::Missing(_))
        ));
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        assert!(
            matches!(presence(&s, d.path()), Err(NotUsable::Missing(w)) if w.contains("not an executable"))
        );
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(usable(&s, d.path()).await.is_ok());
    }

    #[test]
    fn a_script_that_cannot_start_for_a_lasting_reason_is_unusable_and_a_passing_one_is_not() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let prog = d.path().join("agent");
        let s = settings(&format!(
            "[listen]\nruntime = \"script\"\ncommand = [\"{}\"]\n",
            prog.display()
        ));
        std::fs::write(&prog, "#!/bin/sh\n").unwrap();
        let refused = ProcessEnd::SpawnFailed("Permission denied (os error 13)".into());
        // The exec bit gone: the re-check sees it and says so.
        let why = unstartable(&s, d.path(), &refused).unwrap();
        assert!(why.contains("not an executable"), "{why}");
        std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
        // A script whose interpreter is gone.
        std::fs::write(&prog, "#!/nonexistent/interp -e\n").unwrap();
        let why = unstartable(
            &s,
            d.path(),
            &ProcessEnd::SpawnFailed("No such file or directory (os error 2)".into()),
        )
        .unwrap();
        assert!(why.contains("/nonexistent/interp"), "{why}");
        assert!(presence(&s, d.path()).is_err(), "the re-check sees it too");
        // A program the kernel cannot run (no `#!`, no known format).
        std::fs::write(&prog, "echo hi\n").unwrap();
        let format = ProcessEnd::SpawnFailed("Exec format error (os error 8)".into());
        assert!(unstartable(&s, d.path(), &format).is_some());
        // A passing failure, and an ordinary end, are no unusable runtime.
        let busy = ProcessEnd::SpawnFailed("Resource temporarily unavailable (os error 11)".into());
        assert_eq!(unstartable(&s, d.path(), &busy), None);
        assert_eq!(unstartable(&s, d.path(), &ProcessEnd::Exited(1)), None);
    }

    #[tokio::test]
    async fn a_cli_whose_login_check_fails_is_not_usable_for_its_login() {
        let d = tempfile::tempdir().unwrap();
        let cli = d.path().join("claude");
        std::fs::write(&cli, "#!/bin/sh\necho '{\"loggedIn\": false}'\nexit 1\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = settings(&format!(
            "[listen]\nruntime = \"claude-code\"\n[listen.claude]\nbinary = \"{}\"\n",
            cli.display()
        ));
        match usable(&s, d.path()).await {
            Err(NotUsable::Login(why)) => assert!(why.starts_with("not logged in"), "{why}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(&cli, "#!/bin/sh\necho '{\"loggedIn\": true}'\n").unwrap();
        assert!(usable(&s, d.path()).await.is_ok());
    }
}

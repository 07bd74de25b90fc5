//! Whether the configured runtime can work now, without starting a run: what `doctor` checks,
//! for the listener ([`presence`] at start, [`usable`] while the runtime is unusable,
//! `core::recheck`). The program
//! must be there (the script's `command[0]`, found as a run would find it; the CLI's binary),
//! and a CLI must say it is logged in (`claude auth status`, `codex login status`).

use super::probe::{PROBE_TIMEOUT, judge_claude_login, judge_codex_login, probe};
use crate::config::{RuntimeKind, Settings};
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
    Ok(path)
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

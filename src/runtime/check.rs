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

/// What the runtime shows at start without starting a process ([`at_start`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartLook {
    /// The program is there and, for Claude Code, something shows a login (or cannot show one
    /// without the CLI: a macOS keychain).
    Ready(PathBuf),
    /// Claude Code is there and nothing shows a login ([`claude_login_shows`]): only its own
    /// check ([`usable`], `claude auth status`) can say whether it is logged in, so the caller
    /// runs it (off its loop) before the first message can start a run that fails.
    CheckLogin(PathBuf),
}

/// At start (and after a reload): [`presence`], then for Claude Code a look for a login that
/// starts no process, so a listener whose user is logged in pays nothing and one whose user is
/// not is found before a message starts a run that fails (and counts toward the run caps).
pub fn at_start(settings: &Settings, workdir: &Path) -> Result<StartLook, NotUsable> {
    let path = presence(settings, workdir)?;
    if settings.listen.runtime != RuntimeKind::ClaudeCode {
        return Ok(StartLook::Ready(path));
    }
    let env: std::collections::HashMap<String, String> = std::env::vars().collect();
    Ok(if claude_login_shows(&env) {
        StartLook::Ready(path)
    } else {
        StartLook::CheckLogin(path)
    })
}

/// The variables that log Claude Code in by themselves (a run inherits `ANTHROPIC_*` and
/// `CLAUDE_CODE_*`: `core::run_env`).
const CLAUDE_LOGIN_VARIABLES: [&str; 6] = [
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_AUTH_TOKEN",
    "CLAUDE_CODE_OAUTH_TOKEN",
    "CLAUDE_CODE_USE_BEDROCK",
    "CLAUDE_CODE_USE_VERTEX",
    "CLAUDE_CODE_USE_FOUNDRY",
];
/// The most of a Claude Code file read for the words that show a login.
const CLAUDE_FILE_CAP: u64 = 8 << 20;

/// Whether anything in `env` and Claude Code's files shows a login: one of
/// [`CLAUDE_LOGIN_VARIABLES`], `.credentials.json` in its config dir (`CLAUDE_CONFIG_DIR`, else
/// `~/.claude`), an `oauthAccount` or `primaryApiKey` in its `.claude.json`, an `apiKeyHelper`
/// in its `settings.json`. On macOS the login may be in the keychain, which no file shows:
/// always true there. A false "no" costs one `claude auth status`, never a wrong verdict.
pub fn claude_login_shows(env: &std::collections::HashMap<String, String>) -> bool {
    if cfg!(target_os = "macos") {
        return true;
    }
    let set = |k: &str| env.get(k).is_some_and(|v| !v.trim().is_empty());
    if CLAUDE_LOGIN_VARIABLES.iter().any(|k| set(k)) {
        return true;
    }
    let home = env.get("HOME").filter(|h| !h.is_empty()).map(PathBuf::from);
    let (dir, state) = match env.get("CLAUDE_CONFIG_DIR").filter(|d| !d.is_empty()) {
        Some(d) => (
            Some(PathBuf::from(d)),
            Some(PathBuf::from(d).join(".claude.json")),
        ),
        None => (
            home.as_ref().map(|h| h.join(".claude")),
            home.as_ref().map(|h| h.join(".claude.json")),
        ),
    };
    let holds = |file: Option<PathBuf>, words: &[&str]| {
        file.and_then(|f| crate::sys::fs::read_regular_capped(&f, CLAUDE_FILE_CAP).ok())
            .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
            .is_some_and(|text| words.iter().any(|w| text.contains(w)))
    };
    dir.as_ref()
        .is_some_and(|d| d.join(".credentials.json").is_file())
        || holds(state, &["\"oauthAccount\"", "\"primaryApiKey\""])
        || holds(dir.map(|d| d.join("settings.json")), &["\"apiKeyHelper\""])
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

    #[test]
    fn a_claude_login_shows_in_a_variable_or_a_file_and_its_absence_asks_for_the_cli() {
        if cfg!(target_os = "macos") {
            return;
        }
        let d = tempfile::tempdir().unwrap();
        let home = d.path().to_str().unwrap().to_string();
        let env = |extra: &[(&str, &str)]| {
            let mut e = HashMap::from([("HOME".to_string(), home.clone())]);
            e.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            e
        };
        assert!(!claude_login_shows(&env(&[])), "an empty home");
        assert!(!claude_login_shows(&env(&[("ANTHROPIC_API_KEY", " ")])));
        assert!(claude_login_shows(&env(&[("ANTHROPIC_API_KEY", "sk-x")])));
        assert!(claude_login_shows(&env(&[(
            "CLAUDE_CODE_USE_BEDROCK",
            "1"
        )])));
        // What `claude auth status` writes into a fresh home shows no login.
        std::fs::write(d.path().join(".claude.json"), r#"{"numStartups":1}"#).unwrap();
        assert!(!claude_login_shows(&env(&[])));
        std::fs::write(
            d.path().join(".claude.json"),
            r#"{"oauthAccount":{"emailAddress":"x"}}"#,
        )
        .unwrap();
        assert!(claude_login_shows(&env(&[])));
        let other = d.path().join("cfg");
        std::fs::create_dir_all(&other).unwrap();
        let in_other = env(&[("CLAUDE_CONFIG_DIR", other.to_str().unwrap())]);
        assert!(!claude_login_shows(&in_other), "the config dir moved");
        std::fs::write(other.join(".credentials.json"), "{}").unwrap();
        assert!(claude_login_shows(&in_other));
    }

    #[test]
    fn at_start_asks_for_claudes_own_check_only_when_nothing_shows_a_login() {
        let d = tempfile::tempdir().unwrap();
        let cli = d.path().join("claude");
        std::fs::write(&cli, "#!/bin/sh\n").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&cli, std::fs::Permissions::from_mode(0o755)).unwrap();
        let s = settings(&format!(
            "[listen]\nruntime = \"claude-code\"\n[listen.claude]\nbinary = \"{}\"\n",
            cli.display()
        ));
        let env: HashMap<String, String> = std::env::vars().collect();
        let look = at_start(&s, d.path()).unwrap();
        match claude_login_shows(&env) {
            true => assert_eq!(look, StartLook::Ready(cli.clone())),
            false => assert_eq!(look, StartLook::CheckLogin(cli.clone())),
        }
        let script = settings("[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n");
        assert!(matches!(
            at_start(&script, d.path()),
            Ok(StartLook::Ready(_))
        ));
    }
}

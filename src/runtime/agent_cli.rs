//! Helpers shared by the Claude Code and Codex runtimes: finding the binary, the MCP endpoint,
//! reading a run log's JSON lines, and keeping failure reasons short and free of secrets.

use super::{RunOutcome, RuntimeError};
use crate::sys::process::ProcessEnd;
use crate::sys::text::ellipsize;
use std::path::{Path, PathBuf};

/// The configured binary, else `default_name` on `PATH`. A missing binary makes the runtime
/// unusable (a retry cannot fix it), with a message naming the config key to set.
pub fn resolve_binary(
    configured: Option<&Path>,
    default_name: &str,
    runtime: &str,
    config_key: &str,
) -> Result<PathBuf, RuntimeError> {
    let path_var = std::env::var_os("PATH");
    resolve_binary_in(
        configured,
        default_name,
        runtime,
        config_key,
        path_var.as_deref(),
    )
}

/// `resolve_binary` with the search path passed in, so it is testable without touching the
/// process environment.
pub fn resolve_binary_in(
    configured: Option<&Path>,
    default_name: &str,
    runtime: &str,
    config_key: &str,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, RuntimeError> {
    match configured {
        Some(p) if p.components().count() > 1 || p.is_absolute() => match not_a_program(p) {
            None => Ok(p.to_path_buf()),
            Some(why) => Err(RuntimeError::Unusable(format!(
                "the {runtime} runtime's binary {} (from {config_key}) {why}",
                p.display()
            ))),
        },
        Some(name) => search_path(name, path_var).ok_or_else(|| {
            RuntimeError::Unusable(format!(
                "the {runtime} runtime's binary `{}` (from {config_key}) was not found on PATH",
                name.display()
            ))
        }),
        None => search_path(Path::new(default_name), path_var).ok_or_else(|| {
            RuntimeError::Unusable(format!(
                "the {runtime} runtime needs `{default_name}`, which was not found on PATH; \
                 install it or set {config_key} to its full path"
            ))
        }),
    }
}

/// The first executable file `name` in the directories of `path_var`. Empty entries are skipped:
/// they would mean the listener's own working directory, which no run uses. Shared with the
/// script runtime.
pub(crate) fn search_path(name: &Path, path_var: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    let path_var = path_var?;
    std::env::split_paths(path_var)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// `p` as a regular file (symlinks followed), or why it is not one, as the end of a sentence
/// about it: `does not exist`, `is a directory, not a program`, `is not a regular file`. Shared
/// with the script runtime.
pub(crate) fn regular_file(p: &Path) -> Result<std::fs::Metadata, String> {
    match std::fs::metadata(p) {
        Ok(m) if m.is_file() => Ok(m),
        Ok(m) if m.is_dir() => Err("is a directory, not a program".into()),
        Ok(_) => Err("is not a regular file".into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err("does not exist".into()),
        Err(e) => Err(format!("cannot be looked at: {e}")),
    }
}

/// Why `p` cannot be run as a program (`regular_file`'s reasons, or `is not executable`);
/// `None` for an executable file.
pub fn not_a_program(p: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    match regular_file(p) {
        Err(why) => Some(why),
        Ok(m) if m.permissions().mode() & 0o111 == 0 => {
            Some("is not executable (`chmod +x` it)".into())
        }
        Ok(_) => None,
    }
}

/// An existing file with an execute bit (for anyone): what a runtime can start.
pub fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// What the runtime's binary is on disk (the resolved file, symlinks followed): installing,
/// updating or replacing the CLI changes it, which gives an unusable runtime a new chance
/// (`docs/runtimes.md`, "Unusable until fixed").
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BinaryStamp {
    pub path: PathBuf,
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
}

/// The stamp of the file at `path`, or `None` if it cannot be read.
pub fn stamp(path: &Path) -> Option<BinaryStamp> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some(BinaryStamp {
        path: path.to_path_buf(),
        dev: m.dev(),
        ino: m.ino(),
        size: m.size(),
        mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
    })
}

/// The hosted MCP endpoint: the configured URL, else `<api_base>/mcp`.
pub fn mcp_url(api_base: &str, configured: Option<&str>) -> String {
    match configured {
        Some(url) => url.to_string(),
        None => format!("{}/mcp", api_base.trim_end_matches('/')),
    }
}

/// The JSON objects among a run log's lines (stdout and stderr interleaved, plus the
/// supervisor's header); everything that is not a JSON object is skipped.
pub fn json_lines(output: &[u8]) -> impl Iterator<Item = serde_json::Value> + '_ {
    output.split(|b| *b == b'\n').filter_map(|line| {
        let line = line.trim_ascii();
        if line.first() != Some(&b'{') {
            return None;
        }
        match serde_json::from_slice::<serde_json::Value>(line) {
            Ok(v @ serde_json::Value::Object(_)) => Some(v),
            _ => None,
        }
    })
}

/// A failure reason for how the process ended, when the end alone decides it.
pub fn end_failure(end: &ProcessEnd) -> Option<String> {
    match end {
        ProcessEnd::Exited(0) => None,
        ProcessEnd::Exited(c) => Some(format!("exited with {c}")),
        ProcessEnd::Signalled(s) => Some(format!("killed by signal {s}")),
        ProcessEnd::TimedOut => Some("time limit reached".into()),
        ProcessEnd::Cancelled => Some("stopped with the listener".into()),
        ProcessEnd::SpawnFailed(e) => Some(format!("could not start: {}", clip(e))),
    }
}

/// `Unusable` when the CLI could not even be started because its binary is gone or cannot run
/// (a retry will not help); `cli` names it (`Claude Code`, `Codex`).
pub fn unstartable(cli: &str, end: &ProcessEnd) -> Option<RunOutcome> {
    spawn_unfixable(end).then(|| {
        RunOutcome::Unusable(format!(
            "{cli} could not be started ({})",
            end_failure(end).unwrap_or_default()
        ))
    })
}

/// Whether a spawn error means the binary is gone or cannot run (a retry will not help).
pub fn spawn_unfixable(end: &ProcessEnd) -> bool {
    match end {
        ProcessEnd::SpawnFailed(e) => {
            let e = e.to_ascii_lowercase();
            e.contains("no such file") || e.contains("not found") || e.contains("permission denied")
        }
        _ => false,
    }
}

/// Makes a CLI's own diagnostic safe and short for the status file and the log: bearer
/// tokens and key-looking words are replaced, control characters dropped, at most 200 chars.
pub fn clip(s: &str) -> String {
    let mut out = Vec::new();
    let mut redact_next = false;
    for word in s.split_whitespace() {
        let bare = word.trim_matches(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-');
        if redact_next {
            out.push("[redacted]".to_string());
            redact_next = false;
            continue;
        }
        if bare.eq_ignore_ascii_case("bearer") {
            redact_next = true;
            out.push(word.to_string());
            continue;
        }
        let lower = bare.to_ascii_lowercase();
        let keyish = lower.starts_with("ac_")
            || lower.starts_with("sk-")
            || lower.starts_with("api_key=")
            || lower.contains("key=");
        if keyish && bare.len() > 8 {
            out.push("[redacted]".to_string());
        } else {
            out.push(word.chars().filter(|c| !c.is_control()).collect());
        }
    }
    ellipsize(out.join(" "), 200)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn exe(dir: &Path, name: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    #[test]
    fn binary_found_on_the_given_path() {
        let d = tempfile::tempdir().unwrap();
        let p = exe(d.path(), "claude");
        let got = resolve_binary_in(
            None,
            "claude",
            "claude-code",
            "k",
            Some(d.path().as_os_str()),
        );
        assert_eq!(got.unwrap(), p);
    }

    #[test]
    fn missing_binary_is_unusable_and_names_the_config_key() {
        let d = tempfile::tempdir().unwrap();
        let err = resolve_binary_in(
            None,
            "claude",
            "claude-code",
            "listen.claude.binary",
            Some(d.path().as_os_str()),
        )
        .unwrap_err();
        match err {
            RuntimeError::Unusable(m) => {
                assert!(m.contains("listen.claude.binary"), "{m}");
                assert!(m.contains("`claude`"), "{m}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn configured_path_must_exist_and_be_executable() {
        let d = tempfile::tempdir().unwrap();
        let plain = d.path().join("notexec");
        std::fs::write(&plain, "x").unwrap();
        let says = |p: &Path| match resolve_binary_in(Some(p), "codex", "codex", "k", None) {
            Err(RuntimeError::Unusable(m)) => m,
            other => panic!("{other:?}"),
        };
        assert!(says(&plain).ends_with("is not executable (`chmod +x` it)"));
        assert!(says(&d.path().join("gone")).ends_with("does not exist"));
        assert!(says(d.path()).ends_with("is a directory, not a program"));
        let good = exe(d.path(), "mycodex");
        assert_eq!(
            resolve_binary_in(Some(&good), "codex", "codex", "k", None).unwrap(),
            good
        );
        // A bare configured name is looked up on PATH.
        assert_eq!(
            resolve_binary_in(
                Some(Path::new("mycodex")),
                "codex",
                "codex",
                "k",
                Some(d.path().as_os_str())
            )
            .unwrap(),
            good
        );
    }

    #[test]
    fn stamp_changes_when_the_binary_is_replaced_or_rewritten() {
        let d = tempfile::tempdir().unwrap();
        assert_eq!(stamp(&d.path().join("absent")), None);
        let p = exe(d.path(), "claude");
        let first = stamp(&p).unwrap();
        assert_eq!(stamp(&p), Some(first.clone()));
        // An update that writes a new file and renames it over the old one (npm, installers).
        let tmp = d.path().join("claude.new");
        std::fs::write(&tmp, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        let second = stamp(&p).unwrap();
        assert_ne!(second, first);
        // An in-place rewrite of another size.
        std::fs::write(&p, "#!/bin/sh\n# v2\nexit 0\n").unwrap();
        assert_ne!(stamp(&p).unwrap(), second);
    }

    #[test]
    fn mcp_url_defaults_to_api_base_slash_mcp() {
        assert_eq!(mcp_url("http://h:1/", None), "http://h:1/mcp");
        assert_eq!(mcp_url("http://h:1", Some("http://x/y")), "http://x/y");
    }

    #[test]
    fn json_lines_skips_header_and_plain_text() {
        let log = b"== run c1 started\nnot json\n{\"type\":\"a\"}\n[1,2]\n{broken\n  {\"type\":\"b\"}  \n";
        let types: Vec<String> = json_lines(log)
            .map(|v| v["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(types, ["a", "b"]);
    }

    #[test]
    fn clip_redacts_tokens_and_caps_length() {
        let s =
            clip("failed: Authorization: Bearer ac_live_abcdefghijkl and sk-ant-123456789 \x07ok");
        assert!(!s.contains("ac_live_abcdefghijkl"), "{s}");
        assert!(!s.contains("sk-ant-123456789"), "{s}");
        assert!(s.contains("ok"));
        assert!(clip(&"x ".repeat(300)).chars().count() <= 201);
    }
}

/// A settings + context fixture for the runtimes' unit tests: a temp dir holding the state dir,
/// the workdir and an executable stand-in for the CLI (never run; only its path is checked).
#[cfg(test)]
pub(crate) mod test_support {
    use crate::config::{ConfigArgs, RuntimeKind, Settings, resolve};
    use crate::core::decision::RunKind;
    use crate::runtime::{ListenerEnv, RunContext, RunSpec, RuntimeError};
    use secrecy::SecretString;
    use std::collections::HashMap;
    use std::os::unix::fs::PermissionsExt;
    use std::path::{Path, PathBuf};

    pub struct Fixture {
        pub dir: tempfile::TempDir,
        pub settings: Settings,
        pub binary: PathBuf,
        key: SecretString,
        reasons: Vec<String>,
    }

    impl Fixture {
        pub const KEY: &'static str = "ac_test_key_0123456789abcdef";
        pub const PROMPT: &'static str = "AgentChat woke you: read your tray.";

        pub fn new(runtime: RuntimeKind) -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("state")).unwrap();
            std::fs::create_dir(dir.path().join("work")).unwrap();
            let binary = dir.path().join("bin-cli");
            std::fs::write(&binary, "#!/bin/sh\nexit 0\n").unwrap();
            std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
            let extra = vec!["--model".to_string(), "x".to_string()];
            // The config layer's defaults (no file), then what these tests need: a new setting
            // never needs an edit here.
            let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
            let args = ConfigArgs {
                state_dir: Some(dir.path().join("state")),
                ..ConfigArgs::default()
            };
            let mut settings = resolve(&args, &env, None).unwrap();
            settings.api_base = "http://127.0.0.1:9".into();
            settings.listen.runtime = runtime;
            settings.listen.claude.binary = Some(binary.clone());
            settings.listen.claude.extra_args = extra.clone();
            settings.listen.codex.binary = Some(binary.clone());
            settings.listen.codex.extra_args = extra;
            Fixture {
                dir,
                settings,
                binary,
                key: SecretString::from(Self::KEY.to_string()),
                reasons: vec!["message".into()],
            }
        }

        pub fn state_dir(&self) -> PathBuf {
            self.dir.path().join("state")
        }

        pub fn workdir(&self) -> PathBuf {
            self.dir.path().join("work")
        }

        pub fn ctx(&self) -> RunContext<'_> {
            RunContext {
                settings: &self.settings,
                kind: RunKind::Wake,
                prompt: Self::PROMPT,
                handle: "@me",
                cycle_id: "c1",
                wake_reasons: &self.reasons,
                api_key: &self.key,
                state_dir: leak_path(self.dir.path(), "state"),
                workdir: leak_path(self.dir.path(), "work"),
                identity_template: None,
            }
        }

        /// The listener's environment the fixture's runs are prepared in: a `HOME` of the
        /// fixture's own (empty unless a test writes there), never the home of whoever runs the
        /// tests.
        pub fn listener(&self) -> ListenerEnv {
            ListenerEnv::from_vars([("HOME", self.dir.path().join("home"))])
        }

        /// The spec of a run of the fixture's profile.
        pub fn prepare(&self) -> Result<RunSpec, RuntimeError> {
            crate::runtime::prepare_in(&self.ctx(), &self.listener())
        }
    }

    /// Test-only: a `&'static Path` for a fixture's subdir (a few bytes per test).
    fn leak_path(base: &Path, sub: &str) -> &'static Path {
        Box::leak(base.join(sub).into_boxed_path())
    }
}

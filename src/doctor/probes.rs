//! Probes: the runtime's CLI run briefly (`--version`, the login check) in its own process group
//! under a time limit, and what its output may show: a verdict and a sanitized reason.

use crate::sys::process::{GroupChild, ProcessEnd};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// How long `--version` and the login probes may take before they count as hung.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// How a probe (`--version`, a login check) ended, with its output.
#[derive(Debug, Clone)]
pub struct Probe {
    pub end: ProcessEnd,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `program args…` with no stdin, its own process group and a time limit; the group is
/// killed afterwards, so nothing it started is left behind.
pub async fn probe(
    program: &Path,
    args: &[&str],
    env_remove: &[&str],
    env_set: &[(&str, &str)],
    timeout: Duration,
) -> Probe {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    for k in env_remove {
        cmd.env_remove(k);
    }
    for (k, v) in env_set {
        cmd.env(k, v);
    }
    let ended = |end| Probe {
        end,
        stdout: String::new(),
        stderr: String::new(),
    };
    let group = match GroupChild::spawn(&mut cmd) {
        Ok(g) => g,
        Err(e) => return ended(ProcessEnd::SpawnFailed(e.to_string())),
    };
    let mut group = group;
    let (stdout, stderr) = (group.child.stdout.take(), group.child.stderr.take());
    // Each stream is kept up to `PROBE_OUTPUT_CAP` and the rest drained unkept, so a CLI that
    // floods its output neither fills memory nor blocks on a full pipe. A probe past its time is
    // dropped with its group (`GroupChild` kills it).
    let waited = tokio::time::timeout(timeout, async {
        let (out, err, status) =
            tokio::join!(kept_output(stdout), kept_output(stderr), group.child.wait());
        status.map(|status| (status, out, err))
    })
    .await;
    drop(group);
    match waited {
        Ok(Ok((status, out, err))) => Probe {
            end: ProcessEnd::from_status(status),
            stdout: String::from_utf8_lossy(&out).into_owned(),
            stderr: String::from_utf8_lossy(&err).into_owned(),
        },
        Ok(Err(e)) => ended(ProcessEnd::SpawnFailed(e.to_string())),
        Err(_) => ended(ProcessEnd::TimedOut),
    }
}

/// The most of a probe's stdout or stderr kept: a version line or a login status is a few lines.
pub const PROBE_OUTPUT_CAP: usize = 64 * 1024;

/// Reads `pipe` to its end, keeping the first `PROBE_OUTPUT_CAP` bytes.
async fn kept_output(pipe: Option<impl tokio::io::AsyncRead + Unpin>) -> Vec<u8> {
    use tokio::io::AsyncReadExt;
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else { return kept };
    let mut buf = [0u8; 8192];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let room = PROBE_OUTPUT_CAP.saturating_sub(kept.len());
        kept.extend_from_slice(buf.get(..n.min(room)).unwrap_or_default());
    }
    kept
}

/// `` `what` exited with 1 ``, ... : how a probe ended, for a check's detail.
pub(super) fn describe(end: &ProcessEnd, what: &str) -> String {
    match end {
        ProcessEnd::Exited(c) => format!("`{what}` exited with {c}"),
        ProcessEnd::Signalled(_) => format!("`{what}` was killed by a signal"),
        ProcessEnd::TimedOut => format!(
            "`{what}` did not answer within {} s",
            PROBE_TIMEOUT.as_secs()
        ),
        ProcessEnd::Cancelled => format!("`{what}` was stopped"),
        ProcessEnd::SpawnFailed(e) => format!("`{what}` could not start: {}", sanitize(e)),
    }
}

/// Makes a line of CLI output safe to show: `runtime::agent_cli::clip` (bearer tokens, key-looking
/// words), then any long token-like word is redacted too, at most 120 characters.
pub fn sanitize(s: &str) -> String {
    let clipped = crate::runtime::agent_cli::clip(s);
    let words: Vec<String> = clipped
        .split(' ')
        .map(|w| {
            let tokenish = w
                .chars()
                .filter(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
                .count()
                >= 24
                && !w.contains('/');
            if tokenish {
                "[redacted]".to_string()
            } else {
                w.to_string()
            }
        })
        .collect();
    crate::sys::text::ellipsize(words.join(" "), 120)
}

/// Keeps only a short word-like value (an auth method name), never free text.
fn word(s: &str) -> String {
    s.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, ' ' | '.' | '_' | '-'))
        .take(40)
        .collect::<String>()
        .trim()
        .to_string()
}

/// Judges `claude auth status`: exit 0 (and `loggedIn: true`) is logged in. Only `loggedIn` and
/// the `authMethod` name are read from its JSON.
pub fn judge_claude_login(probe: &Probe) -> (bool, String) {
    let v: Option<Value> = serde_json::from_str(probe.stdout.trim()).ok();
    let logged = v
        .as_ref()
        .and_then(|v| v.get("loggedIn"))
        .and_then(Value::as_bool);
    let method = v
        .as_ref()
        .and_then(|v| v.get("authMethod"))
        .and_then(Value::as_str)
        .map(word)
        .filter(|m| !m.is_empty() && m != "none");
    let ok = probe.end == ProcessEnd::Exited(0) && logged != Some(false);
    let reason = if ok {
        match method {
            Some(m) => format!("logged in ({m})"),
            None => "logged in".into(),
        }
    } else if logged == Some(false) {
        format!(
            "not logged in ({}); log in as the listener's user (`claude auth login`), or give the \
             listener ANTHROPIC_API_KEY",
            describe(&probe.end, "claude auth status")
        )
    } else {
        format!(
            "cannot tell whether Claude Code is logged in: {}",
            describe(&probe.end, "claude auth status")
        )
    };
    (ok, reason)
}

/// Judges `codex login status`: exit 0 is logged in; the method is the words after
/// `Logged in using`, cut before ` - ` (Codex prints a masked key there).
pub fn judge_codex_login(probe: &Probe) -> (bool, String) {
    let all = format!("{}\n{}", probe.stdout, probe.stderr);
    let ok = probe.end == ProcessEnd::Exited(0);
    if ok {
        let method = all
            .lines()
            .find_map(|l| l.trim().strip_prefix("Logged in using"))
            .map(|rest| word(rest.split(" - ").next().unwrap_or("")))
            .filter(|m| !m.is_empty());
        let reason = match method {
            Some(m) => format!("logged in (using {m})"),
            None => "logged in".into(),
        };
        return (true, reason);
    }
    let not_logged = all
        .lines()
        .any(|l| l.trim().eq_ignore_ascii_case("not logged in"));
    let reason = if not_logged {
        format!(
            "not logged in ({}); run `codex login` as the listener's user, or give the listener a provider key",
            describe(&probe.end, "codex login status")
        )
    } else {
        format!(
            "cannot tell whether Codex is logged in: {}",
            describe(&probe.end, "codex login status")
        )
    };
    (false, reason)
}

/// A finished probe, for the checks' tests.
#[cfg(test)]
pub(crate) fn probe_of(end: ProcessEnd, stdout: &str, stderr: &str) -> Probe {
    Probe {
        end,
        stdout: stdout.into(),
        stderr: stderr.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeKind;
    use crate::doctor::Level;
    use crate::doctor::checks::check_login;

    #[test]
    fn claude_login_reads_only_logged_in_and_the_method() {
        let no = probe_of(
            ProcessEnd::Exited(1),
            r#"{"loggedIn": false, "authMethod": "none", "apiProvider": "firstParty"}"#,
            "",
        );
        let (ok, reason) = judge_claude_login(&no);
        assert!(!ok);
        let c = check_login(RuntimeKind::ClaudeCode, &no);
        assert_eq!(c.level, Level::Fail);
        assert_eq!(c.facts["exit_code"], 1);
        assert!(
            !c.detail.contains("firstParty"),
            "raw output is never shown"
        );
        assert!(reason.starts_with("not logged in"), "{reason}");
        let yes = probe_of(
            ProcessEnd::Exited(0),
            r#"{"loggedIn": true, "authMethod": "claude.ai", "email": "me@example.com"}"#,
            "",
        );
        let (ok, reason) = judge_claude_login(&yes);
        assert!(ok);
        assert_eq!(reason, "logged in (claude.ai)");
        let hung = probe_of(ProcessEnd::TimedOut, "", "");
        let (ok, reason) = judge_claude_login(&hung);
        assert!(!ok);
        assert!(reason.contains("did not answer"), "{reason}");
    }

    #[test]
    fn codex_login_method_never_includes_the_masked_key() {
        let yes = probe_of(
            ProcessEnd::Exited(0),
            "",
            "Logged in using an API key - sk-proj-***ABCDE\n",
        );
        let (ok, reason) = judge_codex_login(&yes);
        assert!(ok);
        assert_eq!(reason, "logged in (using an API key)");
        let no = probe_of(
            ProcessEnd::Exited(1),
            "",
            "WARNING: something\nNot logged in\n",
        );
        let (ok, reason) = judge_codex_login(&no);
        assert!(!ok);
        assert!(reason.starts_with("not logged in"), "{reason}");
    }

    #[test]
    fn sanitize_redacts_tokens_and_clips() {
        let s = sanitize(
            "Authorization: Bearer abc.def.ghi and token eyJhbGciOiJIUzI1NiJ9xxxxxxxx end",
        );
        assert!(!s.contains("abc.def.ghi") && !s.contains("eyJhbGci"), "{s}");
        assert!(s.ends_with("end"));
        assert!(sanitize(&"word ".repeat(100)).chars().count() <= 121);
        assert_eq!(sanitize("2.1.197 (Claude Code)"), "2.1.197 (Claude Code)");
    }

    #[tokio::test]
    async fn a_hung_probe_times_out_and_leaves_no_process_behind() {
        let d = tempfile::tempdir().unwrap();
        let pidfile = d.path().join("pid");
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let p = probe(
            Path::new("/bin/sh"),
            &["-c", &script],
            &[],
            &[],
            Duration::from_millis(500),
        )
        .await;
        assert_eq!(p.end, ProcessEnd::TimedOut);
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild was killed with its group: gone, or a zombie awaiting its reaper.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok();
            let dead = match &stat {
                None => true,
                Some(s) => s
                    .rsplit(')')
                    .next()
                    .is_some_and(|r| r.trim_start().starts_with('Z')),
            };
            if dead || !cfg!(target_os = "linux") {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "grandchild {pid} still alive"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn a_probe_returns_exit_code_and_output() {
        let p = probe(
            Path::new("/bin/sh"),
            &["-c", "echo out; echo err >&2; exit 3"],
            &[],
            &[],
            PROBE_TIMEOUT,
        )
        .await;
        assert_eq!(p.end, ProcessEnd::Exited(3));
        assert_eq!(p.stdout, "out\n");
        assert_eq!(p.stderr, "err\n");
        let missing = probe(Path::new("/nonexistent/x"), &[], &[], &[], PROBE_TIMEOUT).await;
        assert!(matches!(missing.end, ProcessEnd::SpawnFailed(_)));
    }
}

//! Probes: the runtime's CLI run briefly (`--version`, the login check) in its own process group
//! under a time limit, and what its output may show: a verdict and a sanitized reason. Shared by
//! `doctor` and the listener's re-check of an unusable runtime (`runtime::check`).

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
pub fn describe(end: &ProcessEnd, what: &str) -> String {
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

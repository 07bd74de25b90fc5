//! Probes: the runtime's CLI run briefly, and what its output may show. The code lives a layer
//! down in `runtime::probe`, which the listener shares; the checks' test helpers stay here.

pub use crate::runtime::probe::{
    PROBE_TIMEOUT, Probe, describe, judge_claude_login, judge_codex_login, probe, sanitize,
};
#[cfg(test)]
use crate::sys::process::ProcessEnd;
#[cfg(test)]
use std::path::Path;
#[cfg(test)]
use std::time::Duration;

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

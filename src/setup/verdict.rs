//! Setup's last line, which is the truth, and the exit code that follows it: "@alice answers on
//! this machine (claude-code, service running)", or "not yet: …" with what is missing and what
//! to do (one `missing:` line each above it). Pure: the facts are gathered by the caller.

use super::pick::Found;
use crate::config::RuntimeKind;
use crate::doctor::{Level, Report};

/// Everything asked for works.
pub const EXIT_OK: i32 = 0;
/// Setup wrote what it could, but something asked for does not work yet.
pub const EXIT_NOT_YET: i32 = 3;

/// What the service is, as the manager says after setup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Service {
    /// `--no-service`, or "no" to the question.
    NotWanted,
    Running,
    /// `AGENTCHAT_SERVICE_DIR` is set: the unit is written and no manager was asked.
    Written,
    /// Wanted, and not running: the manager's words.
    NotRunning(String),
}

/// The facts the verdict is drawn from.
pub struct Facts<'a> {
    pub profile: &'a str,
    pub handle: &'a str,
    pub runtime: RuntimeKind,
    /// The CLIs found, with their login (`pick::detect`).
    pub found: &'a [Found],
    /// The CLIs that were to be wired and have no `agentchat` entry at all.
    pub unwired: Vec<&'static str>,
    /// The CLIs whose identity block could not be written, and why.
    pub blocks_unwritten: Vec<(&'static str, String)>,
    pub service: Service,
    /// A listener that runs for the profile now, however it was started (`live`).
    pub listener: Option<Listening>,
    /// A running listener that did not take the new config, and what to do.
    pub not_taken: Vec<String>,
    pub doctor: &'a Report,
}

/// The listener running for the profile, as the verdict needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listening {
    /// `pid 4242` (`live::Live::describe`).
    pub who: String,
    /// Why it cannot answer, in `agentchat status`'s words; `None` when it can.
    pub problem: Option<String>,
}

/// The `missing:` lines and the last line, and the exit code.
pub struct Verdict {
    pub missing: Vec<String>,
    pub line: String,
    pub code: i32,
}

fn profile_flag(profile: &str) -> String {
    if profile == crate::config::DEFAULT_PROFILE {
        String::new()
    } else {
        format!(" --profile {profile}")
    }
}

pub fn judge(f: &Facts<'_>) -> Verdict {
    let mut missing = Vec::new();
    let p = profile_flag(f.profile);
    let cli = f.found.iter().find(|c| c.cli.runtime() == f.runtime);
    let runtime_cli = f.runtime != RuntimeKind::Script;
    match cli {
        Some(c) if runtime_cli && !c.logged_in => missing.push(format!(
            "`{}` is not logged in, so no run can answer: {}",
            c.cli.program(),
            super::pick::login_hint(c.cli)
        )),
        None if runtime_cli => missing.push(format!(
            "the runtime {} has no CLI on PATH: install it, or `agentchat setup{p} --runtime \
             script -- PROGRAM`",
            f.runtime
        )),
        _ => {}
    }
    for c in &f.doctor.checks {
        // The login is said above, with how to log in.
        if c.level == Level::Fail && !(c.name == "login" && runtime_cli) {
            missing.push(format!(
                "doctor: {}: {} (`agentchat doctor{p}`)",
                c.name, c.detail
            ));
        }
    }
    for name in &f.unwired {
        missing.push(format!(
            "{name} has no `agentchat` MCP entry: its wiring failed (see the lines above); run \
             `agentchat setup{p}` again"
        ));
    }
    for (name, why) in &f.blocks_unwritten {
        missing.push(format!(
            "{name}'s identity block is not written ({why}), so its sessions do not know they \
             are @{}: fix that file, then run `agentchat setup{p}` again",
            f.handle
        ));
    }
    missing.extend(f.not_taken.iter().cloned());
    if let Some(Listening {
        who,
        problem: Some(why),
    }) = &f.listener
    {
        missing.push(format!("the listener ({who}) runs, but {why}"));
    }
    // Any listener that runs for the profile answers, the service's or one in a terminal.
    let answering = f.listener.as_ref().filter(|l| l.problem.is_none());
    let service = match (&f.service, answering) {
        (Service::Running, _) => "service running".to_string(),
        (_, Some(l)) => format!("listener running: {}", l.who),
        (Service::Written, None) => "service unit written; AGENTCHAT_SERVICE_DIR is set, so no \
                                     manager was asked to start it"
            .to_string(),
        (Service::NotWanted, None) => format!(
            "no service: it answers while `agentchat listen{p}` runs, or after `agentchat \
             service install{p}`"
        ),
        (Service::NotRunning(why), None) => {
            missing.push(format!(
                "the service is not running ({why}): `agentchat service status{p}` says why; \
                 until then run `agentchat listen{p}`"
            ));
            String::new()
        }
    };
    if !missing.is_empty() {
        let line = format!(
            "not yet: @{} cannot answer on this machine: {}",
            f.handle,
            missing.join("; ")
        );
        return Verdict {
            missing,
            line,
            code: EXIT_NOT_YET,
        };
    }
    let verb = if f.service == Service::Running || answering.is_some() {
        "answers"
    } else {
        "is ready"
    };
    Verdict {
        missing,
        line: format!(
            "@{} {verb} on this machine ({}, {service})",
            f.handle, f.runtime
        ),
        code: EXIT_OK,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Check;
    use crate::runtime::user_cli::Cli;
    use std::path::PathBuf;

    fn claude(logged_in: bool) -> Vec<Found> {
        vec![Found {
            cli: Cli::Claude,
            binary: PathBuf::from("/bin/claude"),
            logged_in,
            login: String::new(),
        }]
    }

    fn facts<'a>(found: &'a [Found], doctor: &'a Report, service: Service) -> Facts<'a> {
        Facts {
            profile: "default",
            handle: "alice",
            runtime: RuntimeKind::ClaudeCode,
            found,
            unwired: Vec::new(),
            blocks_unwritten: Vec::new(),
            service,
            listener: None,
            not_taken: Vec::new(),
            doctor,
        }
    }

    #[test]
    fn everything_working_answers_with_exit_0() {
        let (found, doctor) = (claude(true), Report::default());
        let v = judge(&facts(&found, &doctor, Service::Running));
        assert_eq!(
            v.line,
            "@alice answers on this machine (claude-code, service running)"
        );
        assert_eq!(v.code, EXIT_OK);
        assert!(v.missing.is_empty());
    }

    #[test]
    fn a_runtime_not_logged_in_is_not_yet_with_how_to_log_in() {
        let (found, mut doctor) = (claude(false), Report::default());
        doctor
            .checks
            .push(Check::fail("login", "not logged in (exit 1)"));
        let v = judge(&facts(&found, &doctor, Service::Running));
        assert_eq!(v.code, EXIT_NOT_YET);
        assert!(v.line.starts_with("not yet: "), "{}", v.line);
        assert_eq!(v.missing.len(), 1, "doctor's login FAIL is not said twice");
        assert!(
            v.missing[0].contains("claude auth login"),
            "{:?}",
            v.missing
        );
    }

    #[test]
    fn a_service_that_does_not_run_and_a_doctor_fail_are_each_missing() {
        let (found, mut doctor) = (claude(true), Report::default());
        doctor.checks.push(Check::fail("texts", "no texts"));
        let v = judge(&facts(
            &found,
            &doctor,
            Service::NotRunning("inactive".into()),
        ));
        assert_eq!(v.code, EXIT_NOT_YET);
        assert_eq!(v.missing.len(), 2, "{:?}", v.missing);
        assert!(v.line.contains("agentchat listen"), "{}", v.line);
        assert!(!v.line.ends_with(':'), "{}", v.line);
    }

    #[test]
    fn an_identity_block_not_written_is_not_yet_with_what_to_do() {
        let (found, doctor) = (claude(true), Report::default());
        let mut f = facts(&found, &doctor, Service::Running);
        f.blocks_unwritten = vec![("Claude Code", "/h/CLAUDE.md is read-only".into())];
        let v = judge(&f);
        assert_eq!(v.code, EXIT_NOT_YET);
        assert_eq!(v.missing.len(), 1, "{:?}", v.missing);
        assert!(
            v.missing[0].contains("/h/CLAUDE.md is read-only"),
            "{:?}",
            v.missing
        );
        assert!(
            v.missing[0].contains("run `agentchat setup` again"),
            "{:?}",
            v.missing
        );
    }

    #[test]
    fn no_service_asked_for_is_ready_but_never_says_answers() {
        let (found, doctor) = (claude(true), Report::default());
        let v = judge(&facts(&found, &doctor, Service::NotWanted));
        assert_eq!(v.code, EXIT_OK);
        assert!(v.line.starts_with("@alice is ready"), "{}", v.line);
        assert!(v.line.contains("agentchat listen"), "{}", v.line);
    }

    #[test]
    fn a_listener_running_without_the_service_answers_and_one_that_cannot_is_missing() {
        let (found, doctor) = (claude(true), Report::default());
        let mut f = facts(
            &found,
            &doctor,
            Service::NotRunning("no service manager answers".into()),
        );
        f.listener = Some(Listening {
            who: "pid 42".into(),
            problem: None,
        });
        let v = judge(&f);
        assert_eq!(v.code, EXIT_OK, "{:?}", v.missing);
        assert_eq!(
            v.line,
            "@alice answers on this machine (claude-code, listener running: pid 42)"
        );
        f.listener = Some(Listening {
            who: "pid 42".into(),
            problem: Some("the server refuses the API key".into()),
        });
        let v = judge(&f);
        assert_eq!(v.code, EXIT_NOT_YET);
        assert_eq!(v.missing.len(), 2, "{:?}", v.missing);
        assert!(v.missing[0].contains("pid 42"), "{:?}", v.missing);
    }
}

//! `reach`: what a woken run of this profile can touch beyond AgentChat (`docs/runtimes.md`, "What
//! a woken run can touch"): tools, directories, environment variables passed by name, other MCP
//! servers. WARN whenever a run can read or write files, run commands or reach another MCP
//! server, naming them; FAIL when `listen.tools` names what the runtime cannot be given.

use super::Check;
use crate::core::sandbox::{Access, Plan};
use crate::runtime::confine::Reach;
use crate::runtime::landlock::Support;
use std::path::Path;

/// `reach` from a run of the profile built by the same code as a real one (`runtime::dry_run`):
/// what it is offered (`check_reach`), then the kernel's line it would start in: the paths it
/// may read and write beyond the system's, the TCP ports, and how far this kernel holds them.
/// When the run cannot be built, the reason (a FAIL when the profile's own `extra_args` or
/// `tools` are why; else the `runtime` check says it).
pub fn check_run_reach(
    settings: &crate::config::Settings,
    workdir: &Path,
    support: Support,
) -> Check {
    let reach = crate::runtime::confine::reach(settings);
    let mut c = check_reach(&reach, workdir, who_wakes(&settings.listen.policy));
    if reach.problem.is_some() {
        return c;
    }
    match crate::runtime::dry_run(settings, workdir, None) {
        Ok((spec, scratch_state)) => {
            let line = match &spec.sandbox {
                Some(plan) => describe_plan(plan, &scratch_state, support),
                None => "the kernel's line: none (listen.sandbox_script = false)".into(),
            };
            c.detail = format!("{}; {line}", c.detail);
            if let Some(plan) = &spec.sandbox {
                c = c
                    .with("read", paths(plan, Access::Read, &scratch_state))
                    .with("write", paths(plan, Access::ReadWrite, &scratch_state))
                    .with(
                        "write_in_place",
                        paths(plan, Access::ReadWriteFile, &scratch_state),
                    )
                    .with(
                        "ports",
                        plan.ports.iter().map(|p| u64::from(*p)).collect::<Vec<_>>(),
                    );
            }
            let env: Vec<String> = spec.env.iter().map(|(k, _)| k.clone()).collect();
            c.with("env_set", env)
        }
        Err(e) => {
            c.detail = format!(
                "{}; the kernel's line: not drawn, as no run can start: {e}",
                c.detail
            );
            c
        }
    }
}

/// The plan's paths with `access` beyond the system's, the dry run's state dir said as the
/// profile's, each existing one once.
fn paths(plan: &Plan, access: Access, dry_state: &Path) -> Vec<String> {
    let system = |p: &Path| {
        crate::core::sandbox::SYSTEM_READ
            .iter()
            .chain(crate::core::sandbox::DEVICES_WRITE)
            .any(|s| Path::new(s) == p)
    };
    plan.with_access(access)
        .filter(|p| !system(p))
        .filter(|p| p.starts_with(dry_state) || p.exists())
        .map(|p| match p.strip_prefix(dry_state) {
            Ok(rest) => Path::new("<state dir>").join(rest).display().to_string(),
            Err(_) => p.display().to_string(),
        })
        .collect()
}

fn describe_plan(plan: &Plan, dry_state: &Path, support: Support) -> String {
    let list = |v: Vec<String>| {
        if v.is_empty() {
            "nothing else".to_string()
        } else {
            v.join(", ")
        }
    };
    let ports = if !support.ports() {
        "any TCP port (this kernel cannot hold them)".to_string()
    } else {
        plan.ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(other) = plan.files_left_to {
        return format!(
            "the kernel's line ({}): files are left to {other}; connects to TCP ports {ports}",
            support.describe()
        );
    }
    format!(
        "the kernel's line ({}): beyond the system it reads {}, writes {}, rewrites in place {}, \
         connects to TCP ports {ports}",
        support.describe(),
        list(paths(plan, Access::Read, dry_state)),
        list(paths(plan, Access::ReadWrite, dry_state)),
        list(paths(plan, Access::ReadWriteFile, dry_state)),
    )
}

/// `confine`: how far this kernel holds a run (`runtime::landlock`): PASS with Landlock, WARN
/// without (docs/runtimes.md says what then holds a run) or for a script run unconfined.
pub fn check_confine(settings: &crate::config::Settings, support: Support) -> Check {
    let c = match support {
        Support::None => Check::warn(
            "confine",
            "this kernel has no Landlock: a woken run is held only by its CLI's own switches \
             (docs/runtimes.md, \"The kernel's line\")",
        ),
        Support::Abi(_) if !support.ports() => Check::warn("confine", support.describe()),
        Support::Abi(_) => Check::pass("confine", support.describe()),
    };
    if settings.listen.runtime == crate::config::RuntimeKind::Script
        && !settings.listen.sandbox_script
    {
        return Check::warn(
            "confine",
            "listen.sandbox_script = false: the script's runs are not confined by the kernel",
        );
    }
    match support {
        Support::Abi(v) => c.with("landlock_abi", i64::from(v)),
        Support::None => c.with("landlock_abi", serde_json::Value::Null),
    }
}

/// Whose message can start a run, as the profile's `[listen.policy]` says (issue 38 item 8):
/// `allow`'s handles, else a contact's under `first_contact = "wait"`, else anyone's.
pub fn who_wakes(policy: &crate::core::policy::Policy) -> String {
    use crate::core::policy::FirstContact;
    match (&policy.allow, policy.first_contact) {
        (Some(_), _) => "a message from a handle `listen.policy.allow` lists".into(),
        (None, FirstContact::Wait) => {
            "a contact's message (a stranger's waits: `listen.policy.first_contact`)".into()
        }
        (None, FirstContact::Wake) => "a stranger's message".into(),
    }
}

/// `reach` from what a run is offered; `who` is whose message can start one ([`who_wakes`]).
pub fn check_reach(reach: &Reach, workdir: &Path, who: String) -> Check {
    let env = if reach.env_pass.is_empty() {
        "the allowlist only (docs/runtimes.md)".to_string()
    } else {
        format!(
            "the allowlist and, by `listen.env_pass`, {}",
            reach.env_pass.join(", ")
        )
    };
    let facts = |c: Check| {
        c.with("tools", reach.tools.clone())
            .with("env_pass", reach.env_pass.clone())
            .with("other_mcp", reach.other_mcp.clone())
            .with("reads", reach.reads)
            .with("writes", reach.writes)
            .with("commands", reach.commands)
    };
    if let Some(problem) = &reach.problem {
        return facts(Check::fail("reach", problem.clone()));
    }
    if !reach.beyond_agentchat() {
        return facts(Check::pass(
            "reach",
            format!(
                "a woken run is offered the AgentChat tools only: no file, shell, web or \
                 sub-agent tool, no other MCP server, no directory; environment: {env}"
            ),
        ));
    }
    let mut can = Vec::new();
    let dir = workdir.display();
    let tools = if reach.tools.is_empty() {
        String::new()
    } else {
        format!(" ({})", reach.tools.join(", "))
    };
    if reach.commands && reach.tools.is_empty() {
        can.push("run your own program, which can do whatever your user can".to_string());
    } else if reach.commands {
        can.push(format!(
            "run commands{tools} that write only in {dir} but can read any file your user can"
        ));
    } else {
        if reach.reads {
            can.push(format!("read files in {dir}{tools}"));
        }
        if reach.writes {
            can.push(format!("write files in {dir}"));
        }
    }
    if let Some(mcp) = &reach.other_mcp {
        can.push(format!("reach {mcp}"));
    }
    facts(Check::warn(
        "reach",
        format!(
            "{who} starts runs that can {}; environment: {env}",
            can.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Level;

    fn stranger() -> String {
        who_wakes(&crate::core::policy::Policy::default())
    }

    /// Issue 38 item 8: the WARN says whose message starts those runs as the policy has it.
    #[test]
    fn the_warn_names_whose_message_starts_a_run_by_the_policys_first_contact_and_allow() {
        use crate::core::policy::{FirstContact, HandlePattern, Policy};
        let r = Reach {
            tools: vec!["Read".into()],
            reads: true,
            ..Reach::default()
        };
        let said = |p: &Policy| check_reach(&r, Path::new("/w"), who_wakes(p)).detail;
        assert!(said(&Policy::default()).starts_with("a stranger's message starts runs"));
        let waits = Policy {
            first_contact: FirstContact::Wait,
            ..Policy::default()
        };
        assert!(
            said(&waits).starts_with("a contact's message (a stranger's waits"),
            "{}",
            said(&waits)
        );
        let allow = Policy {
            allow: Some(vec![HandlePattern::parse("@alice").unwrap()]),
            ..waits
        };
        assert!(said(&allow).starts_with("a message from a handle `listen.policy.allow` lists"));
    }

    #[test]
    fn the_default_passes_and_says_agentchat_only() {
        let c = check_reach(&Reach::default(), Path::new("/w"), stranger());
        assert_eq!(c.level, Level::Pass);
        assert!(c.detail.contains("AgentChat tools only"), "{}", c.detail);
    }

    #[test]
    fn file_tools_commands_and_other_servers_warn_naming_them() {
        let r = Reach {
            tools: vec!["Read".into(), "Edit".into()],
            reads: true,
            writes: true,
            env_pass: vec!["GITHUB_TOKEN".into()],
            ..Reach::default()
        };
        let c = check_reach(&r, Path::new("/repo"), stranger());
        assert_eq!(c.level, Level::Warn);
        for word in [
            "read files in /repo (Read, Edit)",
            "write files in /repo",
            "GITHUB_TOKEN",
        ] {
            assert!(c.detail.contains(word), "{word}: {}", c.detail);
        }
        let r = Reach {
            other_mcp: Some("every MCP server of yours".into()),
            ..Reach::default()
        };
        let c = check_reach(&r, Path::new("/w"), stranger());
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail.contains("every MCP server of yours"),
            "{}",
            c.detail
        );
        let r = Reach {
            tools: vec!["shell".into()],
            reads: true,
            writes: true,
            commands: true,
            ..Reach::default()
        };
        assert!(
            check_reach(&r, Path::new("/w"), stranger())
                .detail
                .contains("run commands (shell)")
        );
    }

    #[test]
    fn a_tool_the_runtime_cannot_be_given_fails() {
        let r = Reach {
            problem: Some("`listen.tools` names `Bash`".into()),
            ..Reach::default()
        };
        assert_eq!(
            check_reach(&r, Path::new("/w"), stranger()).level,
            Level::Fail
        );
    }
}

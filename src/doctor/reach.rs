//! `reach`: what a woken run of this profile can touch beyond AgentChat (`docs/runtimes.md`, "What
//! a woken run can touch"): tools, directories, environment variables passed by name, other MCP
//! servers. WARN whenever a run can read or write files, run commands or reach another MCP
//! server, naming them; FAIL when `listen.tools` names what the runtime cannot be given.

use super::Check;
use crate::runtime::confine::Reach;
use std::path::Path;

pub fn check_reach(reach: &Reach, workdir: &Path) -> Check {
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
            "a stranger's message starts runs that can {}; environment: {env}",
            can.join("; ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Level;

    #[test]
    fn the_default_passes_and_says_agentchat_only() {
        let c = check_reach(&Reach::default(), Path::new("/w"));
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
        let c = check_reach(&r, Path::new("/repo"));
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
        let c = check_reach(&r, Path::new("/w"));
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
            check_reach(&r, Path::new("/w"))
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
        assert_eq!(check_reach(&r, Path::new("/w")).level, Level::Fail);
    }
}

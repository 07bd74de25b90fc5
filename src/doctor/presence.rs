//! Whether anything answers for the profile: `listening` (a listener holds the profile's lock;
//! nothing listening is a WARN, a FAIL under `--strict`) and `mcp_claude` / `mcp_codex` (the
//! user's own Claude Code and Codex have an `agentchat` entry that runs this binary's bridge for
//! this profile, as `agentchat setup` writes it). Pure verdicts from facts.

use super::{Check, Level};
use crate::sys::flock::LockHolder;
use std::path::Path;

fn profile_flag(profile: &str) -> String {
    if profile == crate::config::DEFAULT_PROFILE {
        String::new()
    } else {
        format!(" --profile {profile}")
    }
}

/// `listening`: a listener runs for this profile, or nothing answers its messages.
pub fn check_listening(profile: &str, lock: &LockHolder, strict: bool) -> Check {
    let p = profile_flag(profile);
    match lock {
        LockHolder::Held { pid } => Check::pass(
            "listening",
            match pid {
                Some(pid) => format!("a listener runs for this profile (pid {pid})"),
                None => "a listener runs for this profile".to_string(),
            },
        )
        .with("listening", true),
        LockHolder::Unknown(e) => Check::warn(
            "listening",
            format!("cannot tell whether a listener runs: {e}"),
        )
        .with("listening", false),
        LockHolder::Free | LockHolder::NoFile => Check::new(
            "listening",
            if strict { Level::Fail } else { Level::Warn },
            format!(
                "no listener runs for this profile: messages wait unanswered. Start it always-on \
                 with `agentchat service install{p}` (or `agentchat listen{p}` in a terminal); \
                 first time here: `agentchat setup{p}`"
            ),
        )
        .with("listening", false),
    }
}

/// What one CLI's `agentchat` MCP entry is, read from its own file.
pub enum McpFacts {
    /// Neither the CLI nor its file is here: nothing to judge.
    Absent,
    /// The CLI is here and has no `agentchat` entry.
    NoEntry,
    /// A stdio entry: its command and arguments.
    Argv(Vec<String>),
    /// Something else (an HTTP entry, say), described.
    Other(String),
}

/// `mcp_claude` / `mcp_codex`: the entry exists, runs `agentchat mcp` for this profile, and its
/// program is this binary (`this`, as setup names it) or at least exists.
pub fn check_mcp(
    name: &'static str,
    cli: &str,
    profile: &str,
    facts: &McpFacts,
    this: &Path,
) -> Option<Check> {
    let p = profile_flag(profile);
    let fix = format!("`agentchat setup{p}` wires it (`--rewire` to take it over)");
    let c = match facts {
        McpFacts::Absent => return None,
        McpFacts::NoEntry => Check::warn(
            name,
            format!(
                "{cli} has no `agentchat` MCP server: in {cli} the agent cannot reach AgentChat; \
                 `agentchat setup{p}` wires it"
            ),
        ),
        McpFacts::Other(what) => Check::warn(
            name,
            format!("{cli}'s `agentchat` MCP server is not this bridge ({what}); {fix}"),
        ),
        McpFacts::Argv(argv) => {
            let program = argv.first().map(String::as_str).unwrap_or("");
            let runs_bridge = argv.get(1).map(String::as_str) == Some("mcp");
            let its_profile = argv
                .iter()
                .position(|a| a == "--profile")
                .and_then(|i| argv.get(i + 1))
                .map(String::as_str)
                .unwrap_or(crate::config::DEFAULT_PROFILE);
            if !runs_bridge {
                Check::warn(
                    name,
                    format!(
                        "{cli}'s `agentchat` MCP server runs `{program}`, not `agentchat mcp`; {fix}"
                    ),
                )
            } else if its_profile != profile {
                Check::warn(
                    name,
                    format!(
                        "{cli}'s `agentchat` MCP server is profile `{its_profile}`'s, not this \
                         one's; `agentchat setup{p} --rewire` to switch it"
                    ),
                )
            } else if !Path::new(program).is_file() {
                Check::fail(
                    name,
                    format!(
                        "{cli}'s `agentchat` MCP server runs {program}, which does not exist \
                         (moved or upgraded?): {fix}"
                    ),
                )
            } else if Path::new(program) != this {
                Check::warn(
                    name,
                    format!(
                        "{cli}'s `agentchat` MCP server runs {program}, not this binary ({}): \
                         {fix}",
                        this.display()
                    ),
                )
            } else {
                Check::pass(
                    name,
                    format!("{cli} runs `agentchat mcp` for this profile ({program})"),
                )
            }
        }
    };
    Some(c.with("cli", cli))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(a: &[&str]) -> McpFacts {
        McpFacts::Argv(a.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn nothing_listening_warns_and_fails_under_strict_naming_what_to_run() {
        let c = check_listening("work", &LockHolder::Free, false);
        assert_eq!(c.level, Level::Warn);
        assert!(
            c.detail
                .contains("agentchat service install --profile work")
        );
        assert!(c.detail.contains("agentchat setup --profile work"));
        assert_eq!(
            check_listening("work", &LockHolder::NoFile, true).level,
            Level::Fail
        );
        assert_eq!(
            check_listening("w", &LockHolder::Held { pid: Some(7) }, true).level,
            Level::Pass
        );
    }

    #[test]
    fn an_mcp_entry_passes_only_when_it_runs_this_binary_for_this_profile() {
        let this = std::env::current_exe().unwrap();
        let me = this.to_str().unwrap();
        let check = |f: &McpFacts| check_mcp("mcp_claude", "Claude Code", "work", f, &this);
        assert!(check(&McpFacts::Absent).is_none());
        assert_eq!(check(&McpFacts::NoEntry).unwrap().level, Level::Warn);
        let ok = check(&argv(&[me, "mcp", "--profile", "work"])).unwrap();
        assert_eq!(ok.level, Level::Pass, "{}", ok.detail);
        let other = check(&argv(&[me, "mcp", "--profile", "home"])).unwrap();
        assert!(other.level == Level::Warn && other.detail.contains("`home`"));
        let gone = check(&argv(&[
            "/nonexistent/agentchat",
            "mcp",
            "--profile",
            "work",
        ]))
        .unwrap();
        assert_eq!(gone.level, Level::Fail);
        let default = check_mcp("mcp_codex", "Codex", "default", &argv(&[me, "mcp"]), &this);
        assert_eq!(default.unwrap().level, Level::Pass);
    }
}

//! `agentchat doctor --run`: one real run of the profile's runtime now, on the current tray and
//! with the served text (`wake_instruction`), as a cycle would start it (`runtime::prepare`,
//! `runtime::supervisor`). It reports whether the run started, reached the AgentChat tools (its
//! output names one: Claude Code's and Codex's event streams do) and completed. It costs one
//! model call, so it asks first unless `--yes`. It holds the profile's lock for the run, so it
//! never runs beside a listener that could start a run of its own.

use crate::client::Api;
use crate::config::{self, RuntimeKind};
use crate::core::status::RunKind;
use crate::listen::state_dir::{LockAttempt, StateDir};
use crate::runtime::supervisor::{self, RunLimits};
use crate::runtime::{self, RunContext, RunOutcome};
use std::io::Read;

/// Most bytes of the run's log read back to judge it.
const MAX_LOG_READ: u64 = 4 * 1024 * 1024;

/// Whether a run's output shows a call to one of the AgentChat tools: Claude Code's stream-json
/// names the tool `mcp__agentchat__agentchat_<tool>` in a `tool_use`; Codex's events name the
/// server `agentchat` and the tool `agentchat_<tool>` in an `mcp_tool_call`. `None`: a script's
/// output is its own, so it cannot be told.
pub fn reached_tools(runtime: RuntimeKind, output: &[u8]) -> Option<bool> {
    let text = String::from_utf8_lossy(output);
    match runtime {
        RuntimeKind::Script => None,
        RuntimeKind::ClaudeCode => Some(
            text.lines()
                .any(|l| l.contains("\"tool_use\"") && l.contains("mcp__agentchat__agentchat_")),
        ),
        RuntimeKind::Codex => Some(
            text.lines()
                .any(|l| l.contains("mcp_tool_call") && l.contains("agentchat_")),
        ),
    }
}

fn ask_first(runtime: RuntimeKind, yes: bool) -> anyhow::Result<bool> {
    let what = match runtime {
        RuntimeKind::Script => "your own program",
        _ => "it costs one model call",
    };
    println!("doctor --run starts one real run of {runtime} now, on this agent's tray ({what}).");
    if yes {
        return Ok(true);
    }
    if !(std::io::IsTerminal::is_terminal(&std::io::stdin())
        && std::io::IsTerminal::is_terminal(&std::io::stdout()))
    {
        anyhow::bail!("not a terminal, so not asked: give --yes to start the run");
    }
    Ok(crate::sys::text::confirm("Start it?", false)?)
}

/// What would keep the run from starting, checked before anything is asked or spent: a listener
/// holding the profile (it starts runs itself), a runtime that cannot run (its program missing,
/// its CLI not logged in: `runtime::check::usable`, as the listener's re-check).
async fn cannot_run(settings: &config::Settings, p: &str) -> Option<String> {
    let state = StateDir::at(&settings.state_dir);
    let lock = crate::sys::flock::holder(&state.path(crate::listen::state_dir::LOCK_FILE));
    if let crate::sys::flock::LockHolder::Held { pid } = lock {
        return Some(format!(
            "a listener runs for this profile{}: it starts runs itself, so doctor --run does \
             not; send the agent a message to see one (`agentchat status{p}` shows it), or stop \
             that listener first",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        ));
    }
    let workdir = state.workdir(settings.listen.workdir.as_deref());
    match runtime::check::usable(settings, &workdir).await {
        Ok(_) => None,
        Err(e) => Some(format!(
            "{} cannot run now: {}; then `agentchat doctor{p}`",
            settings.listen.runtime,
            e.why()
        )),
    }
}

/// Runs it and prints one line per stage; exit 0 when the run started and completed (and,
/// for Claude Code and Codex, reached the tools), else 1.
pub async fn run_command(config: &config::ConfigArgs, yes: bool) -> anyhow::Result<i32> {
    let settings = config::ConfigFile::read(config)?.settings(None, config::KeyFile::Read)?;
    let p = if settings.profile == config::DEFAULT_PROFILE {
        String::new()
    } else {
        format!(" --profile {}", settings.profile)
    };
    let Some(key) = settings.api_key.clone() else {
        anyhow::bail!(
            "no API key for profile `{}`: run `agentchat setup{p}` first",
            settings.profile
        );
    };
    let runtime_kind = settings.listen.runtime;
    if let Some(why) = cannot_run(&settings, &p).await {
        println!("doctor --run: no run was started: {why}");
        return Ok(1);
    }
    if !ask_first(runtime_kind, yes)? {
        println!("No run was started.");
        return Ok(1);
    }
    let api = Api::new(&settings.api_base, key.clone())?;
    let handle = api
        .me()
        .await
        .map_err(|e| anyhow::anyhow!("the server did not take the key (GET /v1/agents/me): {e}"))?;
    let (texts, _) = api
        .texts(runtime_kind.texts_runtime())
        .await
        .map_err(|e| anyhow::anyhow!("cannot fetch the served texts: {e}"))?;
    let prompt = crate::core::decision::prompt_for(RunKind::Wake, &texts)
        .ok_or_else(|| anyhow::anyhow!("the served texts have no wake_instruction"))?
        .to_string();
    let state = StateDir::open(&settings.state_dir)?;
    let _lock = match state.lock()? {
        LockAttempt::Acquired(l) => l,
        LockAttempt::Held { pid } => anyhow::bail!(
            "a listener runs for this profile{}: it starts runs itself; send the agent a \
             message to see one, or stop it first",
            pid.map(|p| format!(" (pid {p})")).unwrap_or_default()
        ),
    };
    let cycle_id = format!(
        "doctor-c{:x}-{:04x}",
        crate::sys::time::unix_ms(std::time::SystemTime::now()),
        fastrand::u16(..)
    );
    // The cycle's own start of a run: the workdir and the identity block in it.
    let workdir =
        crate::listen::workdir::prepare(&settings, &state, Some(&texts), &handle, &cycle_id)
            .map_err(|(dir, e)| anyhow::anyhow!("cannot create {}: {e}", dir.display()))?;
    std::fs::create_dir_all(state.runs_dir())?;
    let handle_at = format!("@{}", crate::core::handle::normalize(&handle));
    let reasons = ["doctor".to_string()];
    let ctx = RunContext {
        settings: &settings,
        kind: RunKind::Wake,
        prompt: &prompt,
        handle: &handle_at,
        cycle_id: &cycle_id,
        wake_reasons: &reasons,
        api_key: &key,
        state_dir: &state.root,
        workdir: &workdir,
        identity_template: texts.identity_line_template.as_deref(),
    };
    let spec = match runtime::prepare(&ctx) {
        Ok(s) => s,
        Err(e) => {
            println!("started: no: {e}");
            return Ok(1);
        }
    };
    let log_path = state.runs_dir().join(supervisor::log_file_name(&cycle_id));
    let limits = RunLimits {
        timeout: settings.listen.run_timeout,
        grace: settings.listen.kill_grace,
        log_max: settings.listen.run_log_max_bytes,
    };
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);
    println!(
        "run: {runtime_kind} as @{handle}, up to {} s; its log: {}",
        limits.timeout.as_secs(),
        log_path.display()
    );
    let report = supervisor::run(&spec, limits, &log_path, cancel, || {}).await;
    let mut output = Vec::new();
    if let Ok(f) = std::fs::File::open(&log_path) {
        let _ = f.take(MAX_LOG_READ).read_to_end(&mut output);
    }
    let started = report.pid.is_some();
    println!(
        "started: {}",
        if started {
            "yes".to_string()
        } else {
            format!("no: {}", report.end.word())
        }
    );
    let tools = reached_tools(runtime_kind, &output);
    let outcome = runtime::judge(runtime_kind, &report.end, &output);
    let completed = outcome == RunOutcome::Completed;
    println!(
        "reached the AgentChat tools: {}",
        match tools {
            Some(true) => "yes",
            Some(false) if completed => {
                "no (its MCP server did not answer, or the model did not call it)"
            }
            Some(false) => "no: the run did not complete (below)",
            None => "not told (a script's output is its own)",
        }
    );
    match &outcome {
        RunOutcome::Completed => {
            println!("completed: yes, in {:.1} s", report.duration.as_secs_f64())
        }
        RunOutcome::Failed(why) | RunOutcome::Unusable(why) => {
            println!("completed: no: {why}")
        }
    }
    let ok = started && completed && tools != Some(false);
    let log = log_path.display();
    println!(
        "{}",
        match &outcome {
            _ if ok && tools.is_none() => format!(
                "@{handle}'s run started and completed (whether a script reached AgentChat is \
                 not told)"
            ),
            _ if ok => format!("@{handle} answers: a run started, reached AgentChat and completed"),
            RunOutcome::Failed(why) | RunOutcome::Unusable(why) => format!(
                "not yet: the run did not complete: {why}; its log: {log}; then `agentchat \
                 doctor{p}`"
            ),
            RunOutcome::Completed => format!(
                "not yet: the run completed without calling the AgentChat tools (its MCP server \
                 did not answer, or the model did not call them); its log: {log}; then \
                 `agentchat doctor{p}`"
            ),
        }
    );
    Ok(if ok { 0 } else { 1 })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_is_told_from_each_clis_event_stream() {
        let claude = br#"{"type":"assistant","message":{"content":[{"type":"tool_use","name":"mcp__agentchat__agentchat_inbox","input":{}}]}}"#;
        assert_eq!(reached_tools(RuntimeKind::ClaudeCode, claude), Some(true));
        let none = br#"{"type":"result","subtype":"success","result":"done"}"#;
        assert_eq!(reached_tools(RuntimeKind::ClaudeCode, none), Some(false));
        let codex = br#"{"type":"item.completed","item":{"type":"mcp_tool_call","server":"agentchat","tool":"agentchat_inbox"}}"#;
        assert_eq!(reached_tools(RuntimeKind::Codex, codex), Some(true));
        assert_eq!(reached_tools(RuntimeKind::Script, claude), None);
    }
}

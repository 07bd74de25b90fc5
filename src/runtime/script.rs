//! The script runtime: the configured argv, the prompt on stdin, the key in `AGENTCHAT_API_KEY`
//! unless switched off (it is the user's own program).

use super::{ProcessEnd, RunContext, RunOutcome, RunSpec, RuntimeError};

pub fn prepare(ctx: &RunContext<'_>) -> Result<RunSpec, RuntimeError> {
    let _ = ctx;
    todo!("listen: script runtime")
}

pub fn judge(end: &ProcessEnd) -> RunOutcome {
    match end {
        ProcessEnd::Exited(0) => RunOutcome::Completed,
        ProcessEnd::Exited(c) => RunOutcome::Failed(format!("exited with {c}")),
        ProcessEnd::Signalled(s) => RunOutcome::Failed(format!("killed by signal {s}")),
        ProcessEnd::TimedOut => RunOutcome::Failed("time limit reached".into()),
        ProcessEnd::Cancelled => RunOutcome::Failed("stopped with the listener".into()),
        ProcessEnd::SpawnFailed(e) => RunOutcome::Failed(format!("could not start: {e}")),
    }
}

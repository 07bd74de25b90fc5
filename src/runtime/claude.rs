//! The claude runtime (design 5). Owned by the runtimes work (issue 5).

use super::{ProcessEnd, RunContext, RunOutcome, RunSpec, RuntimeError};

pub fn prepare(ctx: &RunContext<'_>) -> Result<RunSpec, RuntimeError> {
    let _ = ctx;
    Err(RuntimeError::Unusable("the claude runtime is not built yet".into()))
}

pub fn judge(end: &ProcessEnd, output: &[u8]) -> RunOutcome {
    let _ = output;
    super::script::judge(end)
}

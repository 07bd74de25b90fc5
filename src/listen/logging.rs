//! Logs: `tracing` to stderr with timestamps, text or JSON, the level from `AGENTCHAT_LOG` or the
//! config's `log_level` (a `Targets` spec such as `debug` or `agentchat=debug,info`). Log lines
//! carry an `event` field so tests and the demo can follow them; never a key, never message text.

use crate::config::LogFormat;
use std::str::FromStr;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

pub fn init(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let level = if level.trim().is_empty() {
        "info"
    } else {
        level.trim()
    };
    let targets = Targets::from_str(level).map_err(|e| {
        anyhow::anyhow!("bad log level `{level}` (AGENTCHAT_LOG or log_level): {e}")
    })?;
    let registry = tracing_subscriber::registry().with(targets);
    let result = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .json()
                    .flatten_event(true)
                    .with_current_span(false)
                    .with_span_list(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_ansi(false)
                    .with_writer(std::io::stderr),
            )
            .try_init(),
    };
    // Already initialised (tests in one process): keep the first.
    let _ = result;
    Ok(())
}

//! Logs: `tracing` to stderr with timestamps, text or JSON. The filter is the settings'
//! `log_level` (`AGENTCHAT_LOG` over the config's `log_level`, checked by
//! `config::value::log_filter`: a level such as `debug`, or `target=level` directives such as
//! `agentchat=debug,info`). Log lines carry an `event` field so tests and the demo can follow
//! them; never a key, never message text.

use crate::config::LogFormat;
use std::str::FromStr;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Starts logging with `filter` (a `log_level` from the settings; a filter that did not come
/// through config is checked here too).
pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let filter = match filter.trim() {
        "" => "info",
        f => f,
    };
    let targets = Targets::from_str(filter).map_err(|e| {
        anyhow::anyhow!("bad log filter `{filter}` (AGENTCHAT_LOG or log_level): {e}")
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

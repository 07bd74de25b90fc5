//! Logs: `tracing` to stderr (or stdout: `AGENTCHAT_LOG_STREAM`), text for people or JSON for machines. The filter is the settings'
//! `log_level` (`--log-level`/`-v`/`-q` over `AGENTCHAT_LOG` over the config's `log_level`,
//! checked by `config::value::log_filter`: a level such as `debug`, or `target=level` directives
//! such as `agentchat=debug,info`). Every line the listener writes carries an `event` field so
//! tests and the demo can follow them; never a key, never message text (CONTRIBUTING.md,
//! Conventions).
//!
//! - **Which lines.** A bare level up to `info` (the default, `warn`, `error`, `off`) shows the
//!   listener's own lines only: those with an `event` field. Library lines (hyper, reqwest,
//!   rustls, tokio) and lines without an `event` appear when the filter asks for more: `debug`,
//!   `trace`, or a `target=level` directive.
//! - **`text`** ([`PeopleFormat`]): the time (UTC, milliseconds), the level, what happened (the
//!   line's message), then the fields that say more, as plain `key=value` (a value with spaces in
//!   double quotes). Not shown: the `event` name, empty values, and fields the message already
//!   says ([`TEXT_HIDDEN`]). A library line shown on request names its target.
//! - **Under journald** (`JOURNAL_STREAM` names the device and inode stderr is, as systemd sets it
//!   for a unit's output): the text format without its time (journald stamps every line) and with
//!   the line's syslog priority in front, `<3>` errors, `<4>` warnings, `<6>` info, `<7>` debug
//!   and trace (sd-daemon(3)'s convention), so `journalctl -p warning` finds the warnings.
//! - **`json`**: one object per line, every field, flattened (for machines and `agentchat demo`).

use crate::config::LogFormat;
use std::fmt::Write as _;
use std::str::FromStr;
use tracing::field::{Field, Visit};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{FilterFn, LevelFilter, Targets};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::util::SubscriberInitExt;

/// The target of every line the listener writes: this crate's name, or its pure crate's
/// (`agentchat_core`, where the state machines log), which the same prefix covers.
const OWN_TARGET: &str = "agentchat";

/// Whether `target` is one of the listener's own crates' (`agentchat`, `agentchat_core`).
fn is_own_target(target: &str) -> bool {
    target == OWN_TARGET
        || target.starts_with("agentchat::")
        || target == "agentchat_core"
        || target.starts_with("agentchat_core::")
}

/// Fields the text format leaves out of one event's line because its message already says them,
/// or because they say nothing there. `"*0"` hides the event's numeric fields that are zero.
/// JSON keeps them all.
pub const TEXT_HIDDEN: &[(&str, &[&str])] = &[
    // "run completed" / "run failed".
    ("run_end", &["outcome"]),
    // The outcome says whether a run started.
    ("cycle_end", &["run_started"]),
    // "now <state>".
    ("state", &["state"]),
    // A burst's counts: only the frame types that came.
    ("frames", &["*0"]),
];

/// Starts logging with `filter` (a `log_level` from the settings; a filter that did not come
/// through config is checked here too).
/// Where the log's lines go: stderr (the default, what systemd and launchd collect), or stdout
/// (`AGENTCHAT_LOG_STREAM=stdout`: a container whose engine reads the log from stdout).
pub const LOG_STREAM: &str = "AGENTCHAT_LOG_STREAM";

/// Whether `AGENTCHAT_LOG_STREAM` asks for stdout: unset, empty or `stderr` is stderr, `stdout` is
/// stdout, anything else is an error naming the variable.
pub fn to_stdout(env: &std::collections::HashMap<String, String>) -> anyhow::Result<bool> {
    match env
        .get(LOG_STREAM)
        .map(|v| v.trim().to_ascii_lowercase())
        .as_deref()
    {
        None | Some("") | Some("stderr") => Ok(false),
        Some("stdout") => Ok(true),
        Some(_) => anyhow::bail!("bad {LOG_STREAM}: expected stdout or stderr"),
    }
}

/// The writer for the log's lines: stdout or stderr, one type for both layers.
fn writer(stdout: bool) -> tracing_subscriber::fmt::writer::BoxMakeWriter {
    if stdout {
        tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stdout)
    } else {
        tracing_subscriber::fmt::writer::BoxMakeWriter::new(std::io::stderr)
    }
}

pub fn init(format: LogFormat, filter: &str) -> anyhow::Result<()> {
    let stdout = to_stdout(&crate::config::process_env())?;
    let filter = match filter.trim() {
        "" => "info",
        f => f,
    };
    let targets = Targets::from_str(filter).map_err(|e| {
        anyhow::anyhow!("bad log filter `{filter}` (AGENTCHAT_LOG or log_level): {e}")
    })?;
    let registry = tracing_subscriber::registry()
        .with(targets)
        .with(own_lines(filter))
        .with(ProfileLayer);
    let result = match format {
        LogFormat::Json => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(ProfileJson(
                        tracing_subscriber::fmt::format()
                            .json()
                            .flatten_event(true)
                            .with_current_span(false)
                            .with_span_list(false),
                    ))
                    .with_writer(writer(stdout)),
            )
            .try_init(),
        LogFormat::Text => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .event_format(PeopleFormat {
                        journal: !stdout && stderr_is_journal(),
                    })
                    .with_writer(writer(stdout)),
            )
            .try_init(),
    };
    // Already initialised (tests in one process): keep the first.
    let _ = result;
    Ok(())
}

/// Whether `filter` keeps to the listener's own lines: a bare level up to `info`. `debug`,
/// `trace` and any `target=level` directive ask for more.
pub fn shows_only_own_lines(filter: &str) -> bool {
    match LevelFilter::from_str(filter.trim()) {
        Ok(level) => level <= LevelFilter::INFO,
        Err(_) => false,
    }
}

/// Keeps to the listener's own lines when `filter` is a bare level up to `info`; else lets all
/// through (to the `Targets` filter).
fn own_lines(filter: &str) -> FilterFn<impl Fn(&Metadata<'_>) -> bool + use<>> {
    let own_only = shows_only_own_lines(filter);
    FilterFn::new(move |m: &Metadata<'_>| !own_only || is_own_line(m))
}

/// A line of the listener's own: its target is this crate and it has an `event` field. Spans
/// (none are made here) pass, so a library's span never hides our lines.
fn is_own_line(m: &Metadata<'_>) -> bool {
    if m.is_span() {
        return true;
    }
    is_own_target(m.target()) && m.fields().field("event").is_some()
}

/// What goes before a line written to stderr without `tracing` (a start that fails before
/// logging is up): journald's `<3>` when stderr is the journal, else nothing.
pub fn error_prefix() -> &'static str {
    if stderr_is_journal() { "<3>" } else { "" }
}

/// Whether stderr is the journal's stream: `JOURNAL_STREAM` is `<device>:<inode>` of it
/// (systemd.exec(5)), compared with what stderr is now (a redirect since would not match).
fn stderr_is_journal() -> bool {
    let Some(named) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    journal_stream_matches(&named.to_string_lossy(), stderr_dev_ino())
}

/// Pure: whether `JOURNAL_STREAM`'s `<device>:<inode>` is `actual`.
fn journal_stream_matches(named: &str, actual: Option<(u64, u64)>) -> bool {
    let Some((dev, ino)) = named.trim().split_once(':') else {
        return false;
    };
    matches!((dev.parse::<u64>(), ino.parse::<u64>(), actual),
        (Ok(d), Ok(i), Some((ad, ai))) if d == ad && i == ai)
}

/// The device and inode of file descriptor 2.
fn stderr_dev_ino() -> Option<(u64, u64)> {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let fd = std::io::stderr().as_fd().try_clone_to_owned().ok()?;
    let meta = std::fs::File::from(fd).metadata().ok()?;
    Some((meta.dev(), meta.ino()))
}

/// The profile a span names: `listen::host` runs each profile of `listen --all` in a span with a
/// `profile` field, kept here by [`ProfileLayer`] so that every line logged inside it (its
/// socket's, its cycles', its runs') says `profile=<name>`, in both formats.
struct ProfileName(String);

/// Keeps a new span's `profile` field in its extensions ([`ProfileName`]).
struct ProfileLayer;

impl<S> tracing_subscriber::Layer<S> for ProfileLayer
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: tracing_subscriber::layer::Context<'_, S>,
    ) {
        struct Profile(Option<String>);
        impl Visit for Profile {
            fn record_str(&mut self, field: &Field, value: &str) {
                if field.name() == "profile" {
                    self.0 = Some(value.to_string());
                }
            }
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                if field.name() == "profile" {
                    self.0 = Some(format!("{value:?}"));
                }
            }
        }
        let mut p = Profile(None);
        attrs.record(&mut p);
        if let (Some(name), Some(span)) = (p.0, ctx.span(id)) {
            span.extensions_mut().insert(ProfileName(name));
        }
    }
}

/// The profile of the span an event is logged in, unless the event names one itself.
fn span_profile<S, N>(ctx: &FmtContext<'_, S, N>, event: &Event<'_>) -> Option<String>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    if event.metadata().fields().field("profile").is_some() {
        return None;
    }
    ctx.event_scope()?
        .from_root()
        .find_map(|span| span.extensions().get::<ProfileName>().map(|p| p.0.clone()))
}

/// The JSON format with the span's `profile` as a field of the line's object, first.
struct ProfileJson<F>(F);

impl<S, N, F> FormatEvent<S, N> for ProfileJson<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let Some(profile) = span_profile(ctx, event) else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::with_capacity(256);
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let name = serde_json::Value::String(profile).to_string();
                write!(writer, "{{\"profile\":{name},{rest}")
            }
            None => writer.write_str(&line),
        }
    }
}

/// The text format for people (see the module's doc). `journal`: stderr is journald's stream.
pub struct PeopleFormat {
    pub journal: bool,
}

impl<S, N> FormatEvent<S, N> for PeopleFormat
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> std::fmt::Result {
        let profile = span_profile(ctx, event);
        let level = *event.metadata().level();
        let prefix = if self.journal {
            format!("<{}>", syslog_priority(level))
        } else {
            format!(
                "{} ",
                crate::sys::time::rfc3339(std::time::SystemTime::now())
            )
        };
        let line = people_line(&prefix, event.metadata(), |v| {
            if let Some(p) = profile {
                v.fields.push(("profile", Value::Text(p)));
            }
            event.record(v)
        });
        writer.write_str(&line)?;
        writer.write_char('\n')
    }
}

/// One event's fields, in order, each rendered as text.
#[derive(Default)]
struct Fields {
    message: String,
    event: Option<String>,
    fields: Vec<(&'static str, Value)>,
}

enum Value {
    Text(String),
    /// Integers, so that a zero can be left out (`"*0"` in [`TEXT_HIDDEN`]).
    Number(i128),
}

impl Fields {
    fn push(&mut self, field: &Field, value: Value) {
        match (field.name(), value) {
            ("message", Value::Text(t)) => self.message = t,
            ("event", Value::Text(t)) => self.event = Some(t),
            (name, value) => self.fields.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.push(field, Value::Number(i128::from(value)));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.push(field, Value::Number(i128::from(value)));
    }
    fn record_i128(&mut self, field: &Field, value: i128) {
        self.push(field, Value::Number(value));
    }
    fn record_u128(&mut self, field: &Field, value: u128) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.push(field, Value::Text(value.to_string()));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.push(field, Value::Text(value.to_string()));
    }
    // `%value` arrives here wrapped so that `Debug` prints its `Display`; the message too.
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.push(field, Value::Text(format!("{value:?}")));
    }
}

/// Pure: the text line (without its newline) for an event with `metadata`, whose fields `record`
/// visits, after `prefix` (the time and a space, or the journal's `<priority>`).
fn people_line(prefix: &str, metadata: &Metadata<'_>, record: impl FnOnce(&mut Fields)) -> String {
    let mut f = Fields::default();
    record(&mut f);
    let mut out = String::with_capacity(120);
    out.push_str(prefix);
    let _ = write!(out, "{:<5} ", level_word(*metadata.level()));
    if f.event.is_none() && !is_own_target(metadata.target()) {
        out.push_str(metadata.target());
        out.push_str(": ");
    }
    out.push_str(f.message.trim());
    let hidden: &[&str] = f
        .event
        .as_deref()
        .and_then(|ev| TEXT_HIDDEN.iter().find(|(e, _)| *e == ev))
        .map_or(&[], |(_, h)| h);
    let mut first = true;
    for (name, value) in &f.fields {
        if hidden.contains(name) {
            continue;
        }
        let text = match value {
            Value::Number(0) if hidden.contains(&"*0") => continue,
            Value::Number(n) => n.to_string(),
            Value::Text(t) => t.clone(),
        };
        if text.trim().is_empty() {
            continue;
        }
        out.push_str(if first { "  " } else { " " });
        first = false;
        out.push_str(name);
        out.push('=');
        push_value(&mut out, &text);
    }
    out
}

/// The syslog priority journald reads from a `<N>` prefix (sd-daemon(3)).
fn syslog_priority(level: Level) -> u8 {
    match level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 6,
        Level::DEBUG | Level::TRACE => 7,
    }
}

fn level_word(level: Level) -> &'static str {
    match level {
        Level::ERROR => "ERROR",
        Level::WARN => "WARN",
        Level::INFO => "INFO",
        Level::DEBUG => "DEBUG",
        Level::TRACE => "TRACE",
    }
}

/// A value as written: plain, or in double quotes (`"` and `\` escaped, line breaks as `\n`)
/// when it has spaces, quotes or `=` in it, so each `key=value` stays one token.
fn push_value(out: &mut String, text: &str) {
    let plain = !text
        .chars()
        .any(|c| c.is_whitespace() || c == '"' || c == '=' || c.is_control());
    if plain {
        out.push_str(text);
        return;
    }
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push(' '),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_stream_is_stderr_unless_stdout_is_asked_for_and_anything_else_is_named() {
        let env =
            |v: &str| std::collections::HashMap::from([(LOG_STREAM.to_string(), v.to_string())]);
        assert!(!to_stdout(&Default::default()).unwrap());
        assert!(!to_stdout(&env("")).unwrap());
        assert!(!to_stdout(&env("stderr")).unwrap());
        assert!(to_stdout(&env("STDOUT")).unwrap());
        let e = to_stdout(&env("journal")).unwrap_err().to_string();
        assert!(
            e.contains("AGENTCHAT_LOG_STREAM") && e.contains("stdout or stderr"),
            "{e}"
        );
    }
    use std::sync::{Arc, Mutex};
    use tracing_subscriber::fmt::MakeWriter;

    /// Collects what a subscriber writes.
    #[derive(Clone, Default)]
    struct Buffer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buffer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().expect("buffer").extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Buffer {
        type Writer = Buffer;
        fn make_writer(&'a self) -> Buffer {
            self.clone()
        }
    }

    /// What `emit` writes through the text format under `filter` (`journal`: for journald).
    fn raw_lines(filter: &str, journal: bool, emit: impl FnOnce()) -> Vec<String> {
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(Targets::from_str(filter).expect("filter"))
            .with(own_lines(filter))
            .with(ProfileLayer)
            .with(
                tracing_subscriber::fmt::layer()
                    .event_format(PeopleFormat { journal })
                    .with_writer(buffer.clone()),
            );
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        text.lines().map(str::to_string).collect()
    }

    #[test]
    fn under_journald_a_line_has_its_syslog_priority_and_no_time() {
        let lines = raw_lines("debug", true, || {
            tracing::error!(event = "e", "broke");
            tracing::warn!(event = "w", "odd");
            tracing::info!(event = "i", "fine");
            tracing::debug!(event = "d", "detail");
        });
        assert_eq!(
            lines,
            [
                "<3>ERROR broke",
                "<4>WARN  odd",
                "<6>INFO  fine",
                "<7>DEBUG detail"
            ]
        );
    }

    #[test]
    fn a_line_inside_a_profiles_span_names_the_profile_in_text_and_json() {
        let emit = || {
            let span = tracing::error_span!("profile", profile = %"alice");
            let _in = span.enter();
            tracing::info!(event = %"state", state = "connected", "now connected");
            tracing::info!(event = %"listener_start", profile = %"bob", "listener starting");
        };
        assert_eq!(
            text_lines("info", emit),
            [
                "INFO  now connected  profile=alice",
                "INFO  listener starting  profile=bob"
            ]
        );
        let buffer = Buffer::default();
        let subscriber = tracing_subscriber::registry()
            .with(Targets::from_str("info").expect("filter"))
            .with(ProfileLayer)
            .with(
                tracing_subscriber::fmt::layer()
                    .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
                    .event_format(ProfileJson(
                        tracing_subscriber::fmt::format()
                            .json()
                            .flatten_event(true)
                            .with_current_span(false)
                            .with_span_list(false),
                    ))
                    .with_writer(buffer.clone()),
            );
        tracing::subscriber::with_default(subscriber, emit);
        let text = String::from_utf8(buffer.0.lock().expect("buffer").clone()).expect("utf-8");
        let profiles: Vec<String> = text
            .lines()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).expect("one JSON object a line");
                v["profile"].as_str().expect("profile").to_string()
            })
            .collect();
        assert_eq!(profiles, ["alice", "bob"]);
    }

    #[test]
    fn journal_stream_must_name_stderrs_own_device_and_inode() {
        assert!(journal_stream_matches("8:12345", Some((8, 12345))));
        assert!(!journal_stream_matches("8:12345", Some((8, 999))));
        assert!(!journal_stream_matches("8:12345", None));
        assert!(!journal_stream_matches("garbage", Some((8, 12345))));
        assert!(!journal_stream_matches("", Some((0, 0))));
    }

    /// The lines `emit` writes through the text format under `filter`, without their time.
    fn text_lines(filter: &str, emit: impl FnOnce()) -> Vec<String> {
        raw_lines(filter, false, emit)
            .into_iter()
            .map(|l| {
                let (time, rest) = l.split_once(' ').expect("a time first");
                assert!(
                    humantime::parse_rfc3339(time).is_ok(),
                    "not an RFC 3339 time: {l}"
                );
                rest.to_string()
            })
            .collect()
    }

    #[test]
    fn a_text_line_is_the_level_the_message_and_plain_fields_without_module_paths() {
        let lines = text_lines("info", || {
            let end = crate::sys::process::ProcessEnd::Exited(0);
            tracing::info!(event = %"run_end", cycle_id = %"c1", outcome = "completed", end = end.word(), exit_code = end.exit_code(), signal = end.signal(), duration_ms = 6u64, "run completed");
            tracing::warn!(event = %"run_end", cycle_id = %"c2", outcome = "failed", why = %"exited with code 3", duration_ms = 7u64, "run failed");
        });
        assert_eq!(
            lines,
            [
                "INFO  run completed  cycle_id=c1 end=exited exit_code=0 duration_ms=6",
                "WARN  run failed  cycle_id=c2 why=\"exited with code 3\" duration_ms=7",
            ]
        );
    }

    #[test]
    fn empty_and_absent_values_and_what_the_message_says_are_left_out() {
        let lines = text_lines("info", || {
            let none: Option<&str> = None;
            tracing::info!(event = %"cycle_end", cycle_id = %"c1", run_started = true, outcome = Some("completed"), no_run_reason = none, "cycle ended");
            tracing::info!(event = %"hello", capabilities = "", "pre-v1 server: no capabilities listed");
            tracing::info!(event = %"frames", frames = 2u64, message_new = 1u64, wake = 0u64, acked = 1u64, wakes = %"message:1", "frames handled");
            tracing::info!(event = %"state", state = "connected", "now connected");
        });
        assert_eq!(
            lines,
            [
                "INFO  cycle ended  cycle_id=c1 outcome=completed",
                "INFO  pre-v1 server: no capabilities listed",
                "INFO  frames handled  frames=2 message_new=1 acked=1 wakes=message:1",
                "INFO  now connected",
            ]
        );
    }

    #[test]
    fn at_the_default_level_only_the_listeners_own_lines_with_an_event_show() {
        let emit = || {
            tracing::info!(event = %"listener_start", pid = 7u64, "listener starting");
            tracing::info!("a line of ours without an event");
            tracing::info!(target: "hyper::proto", "a library's line");
            tracing::warn!(target: "rustls", "a library's warning");
            tracing::debug!(event = %"ack", message_id = %"m1", "acked");
        };
        for filter in ["info", "warn", "INFO"] {
            let lines = text_lines(&filter.to_ascii_lowercase(), emit);
            assert!(
                lines
                    .iter()
                    .all(|l| !l.contains("library") && !l.contains("without")),
                "{filter}: {lines:?}"
            );
        }
        assert_eq!(text_lines("info", emit), ["INFO  listener starting  pid=7"]);
        // `debug` asks for everything at debug, the libraries' lines with their target.
        let debug = text_lines("debug", emit);
        assert!(
            debug.contains(&"INFO  hyper::proto: a library's line".to_string()),
            "{debug:?}"
        );
        assert!(
            debug.contains(&"DEBUG acked  message_id=m1".to_string()),
            "{debug:?}"
        );
        // A directive shows what it names.
        let directive = text_lines("rustls=warn,agentchat=info", emit);
        assert!(
            directive.contains(&"WARN  rustls: a library's warning".to_string()),
            "{directive:?}"
        );
        assert!(
            !directive.iter().any(|l| l.contains("hyper")),
            "{directive:?}"
        );
    }

    #[test]
    fn a_value_with_spaces_quotes_or_line_breaks_stays_one_token() {
        let mut out = String::new();
        push_value(&mut out, "a \"b\"\nc=d");
        assert_eq!(out, "\"a \\\"b\\\"\\nc=d\"");
        let mut out = String::new();
        push_value(&mut out, "http://127.0.0.1:9/x");
        assert_eq!(out, "http://127.0.0.1:9/x");
    }

    #[test]
    fn only_a_bare_level_up_to_info_keeps_to_the_listeners_own_lines() {
        for f in ["info", "warn", "error", "off", " info "] {
            assert!(shows_only_own_lines(f), "{f}");
        }
        for f in ["debug", "trace", "agentchat=info", "agentchat=debug,info"] {
            assert!(!shows_only_own_lines(f), "{f}");
        }
    }
}

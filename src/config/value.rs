//! One rule per setting, shared by every source that can set it (the file, the environment, the
//! flags): each parser takes the raw text and returns the value or the problem, and the caller
//! names the key, variable or flag. Problems name what was expected; the key's value is never
//! echoed (only values that cannot be secret: a URL, a duration, a name from a fixed list).

use super::{LogFormat, McpMode, RuntimeKind};
use clap::ValueEnum;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// A runtime's name as clap lists and parses it: `claude-code`, `codex`, `script`, from
/// `core::runtime_kind`'s table, so `--help`, the file and the environment list and accept the
/// same names. A wrapper, because `RuntimeKind` lives in the pure crate, which knows no clap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RuntimeName(pub RuntimeKind);

const RUNTIME_NAMES: [RuntimeName; 3] = {
    let [a, b, c] = RuntimeKind::ALL;
    [RuntimeName(a), RuntimeName(b), RuntimeName(c)]
};

impl ValueEnum for RuntimeName {
    fn value_variants<'a>() -> &'a [Self] {
        &RUNTIME_NAMES
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.as_str()))
    }
}

/// A runtime's name from the file or the environment: [`choice`] of [`RuntimeName`].
pub fn runtime(raw: &str) -> Result<RuntimeKind, String> {
    choice::<RuntimeName>(raw).map(|r| r.0)
}

/// The `--runtime` flag's parser: the names of [`RuntimeName`], in any case.
pub fn runtime_parser() -> impl clap::builder::TypedValueParser<Value = RuntimeKind> {
    use clap::builder::TypedValueParser;
    clap::builder::EnumValueParser::<RuntimeName>::new().map(|r| r.0)
}

/// What a choice is called in a message (`` `gpt` is not a runtime ``).
pub trait Choice: ValueEnum {
    const WHAT: &'static str;
}

impl Choice for RuntimeName {
    const WHAT: &'static str = "a runtime";
}

impl Choice for LogFormat {
    const WHAT: &'static str = "a log format";
}

impl Choice for McpMode {
    const WHAT: &'static str = "an MCP mode";
}

/// `a, b or c` from a choice's names.
pub fn names<T: ValueEnum>() -> String {
    let names: Vec<String> = T::value_variants()
        .iter()
        .filter_map(|v| v.to_possible_value())
        .map(|p| p.get_name().to_string())
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// The one rule for every choice (runtime, log format, MCP mode) from every source: one of the
/// listed names, in any case, surrounding spaces ignored. Flags use the same names through clap
/// (`ignore_case`), which also lists them in `--help`.
pub fn choice<T: Choice>(raw: &str) -> Result<T, String> {
    let name = raw.trim();
    T::from_str(name, true)
        .map_err(|_| format!("`{name}` is not {}; use {}", T::WHAT, names::<T>()))
}

/// A flag's value as clap parsed it (`--runtime`: its choices are `choice`'s, through
/// `ValueEnum`).
pub fn given<T: Clone>(v: &T) -> Result<T, String> {
    Ok(v.clone())
}

/// The levels a log filter may name.
const LEVELS: [&str; 6] = ["off", "error", "warn", "info", "debug", "trace"];

/// `log_level` and `AGENTCHAT_LOG`: a level (`info`), or a `tracing` filter of comma-separated
/// `target=level` directives with at most one bare level as the default for the rest
/// (`agentchat=debug`, `agentchat=debug,warn`). Levels are case-insensitive and come back lower
/// case. A bare word that is not a level is refused: `tracing` would read it as a target shown
/// at every level, which is never what a typo meant.
pub fn log_filter(raw: &str) -> Result<String, String> {
    let problem = |what: &str| {
        format!(
            "{what}; use a level (error, warn, info, debug, trace or off) or a filter such as \
             `agentchat=debug,info`"
        )
    };
    let spec = raw.trim();
    if spec.is_empty() {
        return Err(problem("an empty filter shows nothing"));
    }
    let mut directives = Vec::new();
    for directive in spec.split(',').map(str::trim) {
        let (target, level) = match directive.rsplit_once('=') {
            Some((target, level)) => (Some(target.trim()), level.trim()),
            None => (None, directive),
        };
        let level = level.to_ascii_lowercase();
        if !LEVELS.contains(&level.as_str()) {
            return Err(problem(&format!(
                "`{directive}` is not a level or a `target=level` directive"
            )));
        }
        directives.push(match target {
            Some("") => return Err(problem(&format!("`{directive}` names no target"))),
            Some(t) => format!("{t}={level}"),
            None => level,
        });
    }
    let normalized = directives.join(",");
    tracing_subscriber::filter::Targets::from_str(&normalized)
        .map_err(|e| problem(&format!("`{spec}` is not a filter ({e})")))?;
    Ok(normalized)
}

/// An API base URL (`api_base`, `AGENTCHAT_API_BASE`, `--api-base`, the MCP URLs): http or
/// https with a host; trailing slashes dropped so `{api_base}/v1/...` joins cleanly. A bare
/// host is the common slip, so the message suggests the URL it probably meant.
pub fn api_base(raw: &str) -> Result<String, String> {
    let trimmed = raw.trim().trim_end_matches('/');
    if !trimmed.contains("://") && !trimmed.is_empty() && !trimmed.contains(char::is_whitespace) {
        let suggestion = format!("https://{trimmed}");
        if reqwest::Url::parse(&suggestion)
            .is_ok_and(|u| u.host_str().is_some_and(|h| !h.is_empty()))
        {
            return Err(format!(
                "`{trimmed}` has no scheme: write `{suggestion}` (or http:// for a local server)"
            ));
        }
    }
    let url = reqwest::Url::parse(trimmed).map_err(|e| format!("`{raw}` is not a URL: {e}"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!(
            "`{raw}` must start with https:// (or http:// for a local server)"
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{raw}` has no host"));
    }
    Ok(trimmed.to_string())
}

/// A yes/no variable (`AGENTCHAT_ALLOW_CLEARTEXT`): `1`, `true`, `yes`, `on` or `0`, `false`,
/// `no`, `off`, in any case.
pub fn switch(raw: &str) -> Result<bool, String> {
    match raw.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!("`{raw}` is not a yes or no; write 1 or 0")),
    }
}

/// `api_base` without a trailing `/v1` (or `/v1/`): the client adds `/v1/...` to every path
/// itself, so `https://host/v1` would ask for `/v1/v1/agents/me` (docs/decisions.md). `None` when
/// there is nothing to drop.
pub fn api_base_without_v1(api_base: &str) -> Option<String> {
    let url = reqwest::Url::parse(api_base).ok()?;
    if url.query().is_some() || url.fragment().is_some() {
        return None;
    }
    let trimmed = api_base.trim_end_matches('/');
    let stripped = trimmed.strip_suffix("/v1")?;
    // Still a URL with a host: `https://v1` has no path to drop.
    reqwest::Url::parse(stripped)
        .ok()
        .filter(|u| u.host_str().is_some_and(|h| !h.is_empty()))
        .map(|_| stripped.to_string())
}

/// Whether a request to `api_base` would carry the key in clear text: plain `http` to a host
/// that is not this machine (`is_loopback`).
pub fn is_cleartext_beyond_loopback(api_base: &str) -> bool {
    reqwest::Url::parse(api_base).is_ok_and(|u| u.scheme() == "http") && !is_loopback(api_base)
}

/// An `ip:port` to serve on (`listen.metrics_addr`: `127.0.0.1:9464`, `[::1]:9464`).
pub fn socket_addr(raw: &str) -> Result<std::net::SocketAddr, String> {
    raw.trim()
        .parse()
        .map_err(|_| format!("`{raw}` is not an address with a port, like 127.0.0.1:9464"))
}

/// Whether `api_base` points at this machine: a loopback IP address (127.0.0.0/8, ::1, or ::1's
/// IPv4-mapped forms) or `localhost`. What `agentchat demo` and the tests use; never a real
/// AgentChat server.
pub fn is_loopback(api_base: &str) -> bool {
    let Ok(url) = reqwest::Url::parse(api_base) else {
        return false;
    };
    let Some(host) = url.host_str() else {
        return false;
    };
    // IPv6 hosts come bracketed (`[::1]`).
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => ip.is_loopback(),
        Ok(std::net::IpAddr::V6(ip)) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Err(_) => bare.eq_ignore_ascii_case("localhost"),
    }
}

/// A duration in humantime (`"500ms"`, `"3s"`, `"15m"`, `"1h 30m"`). Problems say what a
/// duration looks like, and what was wrong when it can be told (a sign, a unit, a size).
pub fn duration(raw: &str) -> Result<Duration, String> {
    let text = raw.trim();
    humantime::parse_duration(text).map_err(|e| {
        let why = match e {
            _ if text.is_empty() => "it is empty".to_string(),
            _ if text.starts_with('-') => "a duration cannot be negative".to_string(),
            humantime::DurationError::UnknownUnit { unit, .. } => {
                format!("`{unit}` is not a unit; use ms, s, m, h or d")
            }
            humantime::DurationError::NumberOverflow => "the number is too large".to_string(),
            _ => "write a number and a unit".to_string(),
        };
        format!("`{text}` is not a duration ({why}); write e.g. \"3s\", \"15m\" or \"1h 30m\"")
    })
}

/// A duration key under `[listen]`: its default and the range it must fall in, each bound with
/// the reason it follows from. The listener refuses a value outside, naming the bound.
#[derive(Debug, Clone, Copy)]
pub struct DurationRule {
    /// The key under `[listen]`.
    pub key: &'static str,
    pub default: Duration,
    pub min: Duration,
    /// Why a shorter value cannot work.
    pub why_min: &'static str,
    pub max: Duration,
    /// Why a longer value cannot be meant.
    pub why_max: &'static str,
    /// The minimum is a contract timer's consequence, so a test server whose timers run faster
    /// (an honoured `AGENTCHAT_TEST_TIME_SCALE`) shrinks it by the same factor.
    pub min_follows_test_scale: bool,
}

const fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// `listen.run_timeout`: a run's time limit.
pub const RUN_TIMEOUT: DurationRule = DurationRule {
    key: "run_timeout",
    default: secs(15 * 60),
    min: secs(1),
    why_min: "a shorter limit stops every run before it can start",
    max: secs(24 * 60 * 60),
    why_max: "runs go one at a time, so a longer limit lets one stuck run hold every wake for more than a day",
    min_follows_test_scale: false,
};

/// `listen.kill_grace`: SIGTERM to SIGKILL for a run's group.
pub const KILL_GRACE: DurationRule = DurationRule {
    key: "kill_grace",
    default: secs(10),
    min: Duration::ZERO,
    why_min: "",
    max: secs(5 * 60),
    why_max: "the service's stop timeout is the grace plus 30 s, and a stop that waits longer looks hung to systemd and launchd",
    min_follows_test_scale: false,
};

/// `listen.quiet_window`: how long wakes settle before a cycle.
pub const QUIET_WINDOW: DurationRule = DurationRule {
    key: "quiet_window",
    default: secs(3),
    min: Duration::ZERO,
    why_min: "",
    max: secs(60),
    why_max: "the server re-wakes an unanswered card after 1 minute (contract 5); settling longer only delays the answer",
    min_follows_test_scale: false,
};

/// `listen.max_delay`: the longest a wake waits for its cycle.
pub const MAX_DELAY: DurationRule = DurationRule {
    key: "max_delay",
    default: secs(15),
    min: secs(1),
    why_min: "a burst of messages needs a moment to become one cycle",
    max: secs(10 * 60),
    why_max: "past 10 minutes the server's own re-wakes (1, 5 and 30 minutes, contract 5) come before the cycle does",
    min_follows_test_scale: false,
};

/// `listen.idle_timeout`: no inbound traffic for this long drops the socket.
pub const IDLE_TIMEOUT: DurationRule = DurationRule {
    key: "idle_timeout",
    default: secs(100),
    min: secs(90),
    why_min: "the server sends a heartbeat every 45 s (contract 3.4); under two intervals a healthy socket is dropped",
    max: secs(10 * 60),
    why_max: "a dead socket goes unnoticed, and its wakes are lost, for this long",
    min_follows_test_scale: true,
};

/// Every duration key, for the docs and their test.
pub const DURATION_RULES: [DurationRule; 5] = [
    RUN_TIMEOUT,
    KILL_GRACE,
    QUIET_WINDOW,
    MAX_DELAY,
    IDLE_TIMEOUT,
];

impl DurationRule {
    /// The minimum in force: divided by the test time scale where it follows a contract timer.
    pub fn min_at(&self, test_scale: f64) -> Duration {
        if self.min_follows_test_scale && test_scale > 1.0 {
            Duration::from_secs_f64(self.min.as_secs_f64() / test_scale)
        } else {
            self.min
        }
    }

    /// `d` if it is inside the bounds, else the problem naming the bound and its reason.
    pub fn check(&self, d: Duration, test_scale: f64) -> Result<Duration, String> {
        let min = self.min_at(test_scale);
        let show = |d: Duration| humantime::format_duration(d).to_string();
        if d < min {
            let head = if d.is_zero() {
                "must be longer than zero".to_string()
            } else {
                format!("{} is too short", show(d))
            };
            return Err(format!("{head}: at least {} ({})", show(min), self.why_min));
        }
        if d > self.max {
            return Err(format!(
                "{} is too long: at most {} ({})",
                show(d),
                show(self.max),
                self.why_max
            ));
        }
        Ok(d)
    }
}

/// `listen.run_log_max_bytes`: the default (2 MiB) and the bounds (64 KiB to 64 MiB).
pub const DEFAULT_RUN_LOG_MAX_BYTES: u64 = 2 * 1024 * 1024;

/// `listen.run_log_max_bytes`: half of it is held in memory while a run writes past the first
/// half (`runtime::supervisor`), so it is bounded on both sides.
pub fn run_log_max_bytes(n: i64) -> Result<u64, String> {
    const MIN: i64 = 64 * 1024;
    const MAX: i64 = 64 * 1024 * 1024;
    if !(MIN..=MAX).contains(&n) {
        return Err(format!(
            "{n} is out of bounds; keep between {MIN} and {MAX} bytes (half of it is held in \
             memory while a run writes past the first half)"
        ));
    }
    u64::try_from(n).map_err(|_| "is too large".to_string())
}

/// `listen.run_logs_keep`: at least one run log, at most 10,000 files in the state dir.
pub fn run_logs_keep(n: i64) -> Result<usize, String> {
    const MAX: i64 = 10_000;
    if n < 1 {
        return Err(format!("{n} is too small; keep at least 1 run log"));
    }
    if n > MAX {
        return Err(format!(
            "{n} is too large; keep at most {MAX} run logs (each is a file in the state dir)"
        ));
    }
    usize::try_from(n).map_err(|_| "is too large".to_string())
}

/// `listen.max_concurrent_runs`: at least one run, at most 10,000 (more than any machine runs).
pub fn max_concurrent_runs(n: i64) -> Result<usize, String> {
    const MAX: i64 = 10_000;
    if !(1..=MAX).contains(&n) {
        return Err(format!(
            "{n} is out of bounds; allow between 1 and {MAX} runs at once"
        ));
    }
    usize::try_from(n).map_err(|_| "is too large".to_string())
}

/// A size in bytes (`listen.min_available_memory`): a whole number with an optional unit, `B`,
/// `KiB`, `MiB`, `GiB`, `TiB` (powers of 1024; `K`, `M`, `G`, `T` and `KB`, `MB`, `GB`, `TB`
/// mean the same here), e.g. `"1GiB"`, `"512 MiB"`.
pub fn byte_size(raw: &str) -> Result<u64, String> {
    let text = raw.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at_checked(split).unwrap_or((text, ""));
    let shape = || format!("`{raw}` is not a size like \"1GiB\", \"512MiB\" or a number of bytes");
    let n: u64 = digits.parse().map_err(|_| shape())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(shape()),
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("`{raw}` is too large"))
}

/// `AGENTCHAT_TEST_TIME_SCALE`: a number above zero.
pub fn time_scale(raw: &str) -> Result<f64, String> {
    let text = raw.trim();
    match text.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!(
            "`{text}` is not a time scale; use a number above zero, such as 20"
        )),
    }
}

/// `~` and `~/x` use `HOME`; other relative paths are relative to `base` (the config file's
/// folder).
pub fn path(
    raw: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<PathBuf, String> {
    if raw.trim().is_empty() {
        return Err("must not be empty".into());
    }
    let path = if raw == "~" || raw.starts_with("~/") {
        let home = env
            .get("HOME")
            .filter(|h| !h.is_empty())
            .ok_or("starts with ~ but HOME is not set (or is not valid UTF-8)")?;
        PathBuf::from(home).join(raw.trim_start_matches('~').trim_start_matches('/'))
    } else {
        PathBuf::from(raw)
    };
    Ok(match base {
        Some(b) if path.is_relative() => b.join(path),
        _ => path,
    })
}

/// A program: looked up on `PATH` when bare (`claude`), else expanded like any path.
pub fn program(
    raw: &str,
    base: Option<&Path>,
    env: &HashMap<String, String>,
) -> Result<PathBuf, String> {
    if raw.contains('/') {
        path(raw, base, env)
    } else if raw.trim().is_empty() {
        Err("must not be empty".into())
    } else {
        Ok(PathBuf::from(raw))
    }
}

/// Profile names become directory names: letters, digits, `-`, `_` and `.`, at most 64, not
/// starting with `.`.
pub fn profile_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "`{name}` is not a usable profile name (letters, digits, '-', '_' and '.', at most 64, not starting with '.')"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_size_takes_binary_units_and_refuses_anything_else() {
        assert_eq!(byte_size("1GiB"), Ok(1 << 30));
        assert_eq!(byte_size(" 512 MiB "), Ok(512 << 20));
        assert_eq!(byte_size("2g"), Ok(2 << 30));
        assert_eq!(byte_size("4096"), Ok(4096));
        for bad in [
            "",
            "GiB",
            "1.5GiB",
            "-1GiB",
            "1 parsec",
            "99999999999999TiB",
        ] {
            assert!(byte_size(bad).is_err(), "{bad}");
        }
        assert_eq!(max_concurrent_runs(1), Ok(1));
        assert!(max_concurrent_runs(0).is_err());
        assert!(max_concurrent_runs(10_001).is_err());
    }
}

//! The environment: read once from the process without panicking, then treated as a plain map
//! so that `resolve` stays pure. `std::env::vars()` panics on the first variable that is not
//! UTF-8, even one that has nothing to do with us (`FOO=$'a\xffb'`), so every command reads the
//! environment here instead.

use super::keys::{ClaudeLayer, CodexLayer, Layer, ListenLayer};
use super::{ConfigError, DOORBELL_REMOVAL_DATE, IntegrationSwitch, value};
use std::collections::HashMap;

/// Every variable the config reads. A value of one of these that is not UTF-8 is a config error
/// naming it; any other variable that is not UTF-8 is skipped.
pub const VARIABLES: &[&str] = &[
    "AGENTCHAT_API_BASE",
    "AGENTCHAT_API_KEY",
    "AGENTCHAT_CONFIG",
    "AGENTCHAT_PROFILE",
    "AGENTCHAT_STATE_DIR",
    "AGENTCHAT_RUNTIME",
    "AGENTCHAT_LOG",
    "AGENTCHAT_LOG_FORMAT",
    "AGENTCHAT_LOG_STREAM",
    "AGENTCHAT_METRICS_ADDR",
    ALLOW_CLEARTEXT,
    "AGENTCHAT_INTEGRATION",
    "AGENTCHAT_DOORBELL",
    TEST_TIME_SCALE,
];

/// Allows an `http://` `api_base` beyond loopback (`allow_cleartext`): `1`/`true` or `0`/`false`.
pub const ALLOW_CLEARTEXT: &str = "AGENTCHAT_ALLOW_CLEARTEXT";

/// Test-only: divides the listener's own fixed timers, honoured only against a loopback
/// `api_base` (`TestTimeScale`).
pub const TEST_TIME_SCALE: &str = "AGENTCHAT_TEST_TIME_SCALE";

/// The process environment as UTF-8 text. Variables whose name or value is not UTF-8 are left
/// out (`HOME` among them: then it counts as unset); the second list names those of
/// [`VARIABLES`], which the config must not silently ignore.
pub fn read_process_env() -> (HashMap<String, String>, Vec<String>) {
    let mut vars = HashMap::new();
    let mut ours_not_utf8 = Vec::new();
    for (name, value) in std::env::vars_os() {
        match (name.into_string(), value.into_string()) {
            (Ok(name), Ok(value)) => {
                vars.insert(name, value);
            }
            (Ok(name), Err(_)) if VARIABLES.contains(&name.as_str()) => ours_not_utf8.push(name),
            _ => {}
        }
    }
    ours_not_utf8.sort();
    (vars, ours_not_utf8)
}

/// The process environment as UTF-8 text, skipping what is not: for commands that read a
/// variable or two besides the config (which reports ours through `load`).
pub fn process_env() -> HashMap<String, String> {
    read_process_env().0
}

/// The process environment for the config: an error naming the first of our variables that is
/// not UTF-8.
pub(super) fn config_env() -> Result<HashMap<String, String>, ConfigError> {
    let (vars, ours_not_utf8) = read_process_env();
    match ours_not_utf8.into_iter().next() {
        Some(name) => Err(ConfigError::NotUnicode { name }),
        None => Ok(vars),
    }
}

/// A variable's value, trimmed; empty counts as unset.
pub(super) fn get<'a>(env: &'a HashMap<String, String>, name: &str) -> Option<&'a str> {
    env.get(name).map(|s| s.trim()).filter(|s| !s.is_empty())
}

/// A variable's value by a setting's rule, when set; an error names the variable.
pub(super) fn parse<T>(
    env: &HashMap<String, String>,
    name: &str,
    rule: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, ConfigError> {
    get(env, name)
        .map(|v| {
            rule(v).map_err(|problem| ConfigError::BadValue {
                key: name.to_string(),
                problem,
            })
        })
        .transpose()
}

/// The environment's layer: the variables the keys' lines in `config::keys` name, each through
/// the same rule as the file's key. The key, the profile, the config file and the state dir are
/// handled apart (`resolve`).
pub(super) fn layer(env: &HashMap<String, String>) -> Result<Layer, ConfigError> {
    Ok(Layer {
        listen: Some(ListenLayer::from_env(env)?),
        claude: Some(ClaudeLayer::from_env(env)?),
        codex: Some(CodexLayer::from_env(env)?),
        ..Layer::from_env(env)?
    })
}

/// `AGENTCHAT_TEST_TIME_SCALE`, when set.
pub(super) fn test_time_scale(env: &HashMap<String, String>) -> Result<Option<f64>, ConfigError> {
    get(env, TEST_TIME_SCALE)
        .map(|v| {
            value::time_scale(v).map_err(|problem| ConfigError::BadValue {
                key: TEST_TIME_SCALE.to_string(),
                problem,
            })
        })
        .transpose()
}

/// Reads the integration switch from an environment map, on `today` (UTC, `YYYY-MM-DD`).
pub fn integration_switch(env: &HashMap<String, String>, today: &str) -> IntegrationSwitch {
    let is_off = |name: &str| get(env, name).is_some_and(|v| v.eq_ignore_ascii_case("off"));
    if is_off("AGENTCHAT_INTEGRATION") {
        return IntegrationSwitch::Off;
    }
    if is_off("AGENTCHAT_DOORBELL") {
        // ISO dates compare correctly as strings.
        return if today < DOORBELL_REMOVAL_DATE {
            IntegrationSwitch::OffDeprecated(format!(
                "AGENTCHAT_DOORBELL=off is deprecated and stops working on {DOORBELL_REMOVAL_DATE}; \
                 set AGENTCHAT_INTEGRATION=off instead"
            ))
        } else {
            IntegrationSwitch::IgnoredDeprecated(format!(
                "AGENTCHAT_DOORBELL=off is ignored since {DOORBELL_REMOVAL_DATE}; \
                 set AGENTCHAT_INTEGRATION=off to switch the integration off"
            ))
        };
    }
    IntegrationSwitch::On
}

//! The config file's layer. The TOML's shape is serde types with `deny_unknown_fields` on every
//! table, read through `serde_path_to_error` so every error carries its key path
//! (`profiles.work.listen.max_delay`). Each value is read as any TOML value first and then
//! converted by the rule in `value`, so a type error names the type it found (never the value:
//! a key pasted into the wrong field must not reach a log) and a bad value says what would do.
//! Paths are made absolute against the file's folder last.

use super::keys::{ClaudeLayer, CodexLayer, Layer, ListenLayer, ListenTable, SettingsTable};
use super::layer::Sourced;
use super::{ConfigError, DEFAULT_PROFILE, LogFormat, McpMode, RuntimeKind, value};
use secrecy::SecretString;
use serde::de::{self, Deserialize, Deserializer, MapAccess, Visitor};
use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::time::Duration;

/// [`layer_of_table`] from the file's text, for the tests.
#[cfg(test)]
fn layer(
    path: &Path,
    text: &str,
    profile: &str,
    env: &HashMap<String, String>,
) -> Result<Layer, ConfigError> {
    layer_of_table(path, parse_toml(path, text)?, profile, env)
}

/// The file's layer for `profile` from its TOML (`parse_toml`): `[profiles.<profile>]` over the
/// top level. Every profile table is checked, so a typo in a profile not in use is still
/// reported. A profile other than `default` must have its table: a typo must not start a second
/// listener for the same agent.
pub(super) fn layer_of_table(
    path: &Path,
    table: toml::Table,
    profile: &str,
    env: &HashMap<String, String>,
) -> Result<Layer, ConfigError> {
    let mut file = shape(table)?;
    let base = path.parent();
    let profiles = file.profiles.take().map(|p| p.0).unwrap_or_default();
    for name in profiles.keys() {
        value::profile_name(name).map_err(|problem| ConfigError::BadValue {
            key: format!("profiles.{name}"),
            problem,
        })?;
    }
    let top = Paths { base, env }.layer(file, "")?;
    // A profile not in use is not read, but its policy is checked: a mistake there would
    // otherwise surface only when that profile starts (issue 38 item 8).
    for (name, t) in profiles.iter().filter(|(name, _)| *name != profile) {
        if let Some(policy) = policy_table(&t.0) {
            policy_layer(policy, &format!("profiles.{name}.listen.policy"))?;
        }
    }
    if profile == DEFAULT_PROFILE {
        return Ok(top);
    }
    let known: Vec<String> = profiles.keys().cloned().collect();
    let Some(table) = profiles.into_iter().find(|(name, _)| name == profile) else {
        return Err(ConfigError::UnknownProfile {
            name: profile.to_string(),
            file: Some(path.to_path_buf()),
            known,
        });
    };
    let chosen = Paths { base, env }.layer(table.1.0, &format!("profiles.{profile}."))?;
    Ok(chosen.over(top))
}

/// A `policy` table found at `prefix` (`listen.policy`, `profiles.<name>.listen.policy`) as a
/// layer, every mistake named by its full path, the zone looked up on this system (a
/// `timezone` the system does not have fails here, named where it is set).
fn policy_layer(
    table: toml::Table,
    prefix: &str,
) -> Result<crate::core::policy::PolicyLayer, ConfigError> {
    use crate::core::policy::{PolicyError, PolicyLayer};
    let layer = PolicyLayer::from_toml(table, prefix).map_err(|e| match e {
        PolicyError::UnknownKey(k) => ConfigError::UnknownKey(k),
        PolicyError::BadValue { key, problem } => ConfigError::BadValue { key, problem },
    })?;
    if let Some(zone) = &layer.timezone {
        crate::sys::tz::named(zone).map_err(|e| ConfigError::BadValue {
            key: format!("{prefix}.timezone"),
            problem: e.to_string(),
        })?;
    }
    Ok(layer)
}

/// A profile's `listen.policy` table, when its (already shaped) settings hold one.
fn policy_table<P>(t: &SettingsTable<P>) -> Option<toml::Table> {
    t.listen
        .as_ref()
        .and_then(|l| l.0.policy.as_ref())
        .map(|p| p.0.clone())
}

/// The layer of one profile of `listen --all` (`config::ConfigFile::all`): `own`, the profile's
/// name and its own table, over `top`, the top level without `profiles`. No other profile's
/// table is read, so another profile's mistake is never this one's; this one's are named by
/// their full path (`profiles.<name>.listen.max_delay`).
pub(super) fn layer_of_profile(
    path: &Path,
    top: toml::Table,
    own: Option<(&str, toml::Value)>,
    env: &HashMap<String, String>,
) -> Result<Layer, ConfigError> {
    let paths = Paths {
        base: path.parent(),
        env,
    };
    let top: SettingsTable<NoProfiles> = shape_as(toml::Value::Table(top), "")?;
    let top = paths.layer(top, "")?;
    let Some((name, own)) = own else {
        return Ok(top);
    };
    let prefix = format!("profiles.{name}.");
    let own: Table<ProfileTable> = shape_as(own, &prefix)?;
    Ok(paths.layer(own.0, &prefix)?.over(top))
}

/// The text as the file's tables: TOML syntax first (the line and column, never the line's
/// text), then the shape.
#[cfg(test)]
fn parse(path: &Path, text: &str) -> Result<FileTable, ConfigError> {
    shape(parse_toml(path, text)?)
}

/// The text as TOML (syntax only): the line and column of a mistake, never the line's text.
pub(super) fn parse_toml(path: &Path, text: &str) -> Result<toml::Table, ConfigError> {
    toml::from_str(text).map_err(|e| {
        // The message only: toml's full rendering quotes the offending line, which may hold the key.
        let message = match e.span() {
            Some(span) => {
                let (line, col) = line_col(text, span.start);
                let what = e.message().trim();
                match (what, super::hint::duplicate_named(text, span)) {
                    ("duplicate key", Some(name)) => {
                        format!("line {line}, column {col}: {name}")
                    }
                    _ => format!("line {line}, column {col}: {what}"),
                }
            }
            None => e.message().trim().to_string(),
        };
        ConfigError::Toml {
            path: path.to_path_buf(),
            message,
        }
    })
}

/// The TOML as the file's tables, every error naming its key path.
fn shape(table: toml::Table) -> Result<FileTable, ConfigError> {
    shape_as(toml::Value::Table(table), "")
}

/// A TOML value found at `prefix` (`""`, or `profiles.<name>.`) as `T`, every error naming its
/// full key path.
fn shape_as<T: de::DeserializeOwned>(v: toml::Value, prefix: &str) -> Result<T, ConfigError> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let key = match e.path().to_string() {
            // The value itself (a profile's table that is not a table): its own path.
            at if at == "." && !prefix.is_empty() => prefix.trim_end_matches('.').to_string(),
            at => format!("{prefix}{at}"),
        };
        let message = e.inner().message().trim().to_string();
        // serde's `deny_unknown_fields` error: "unknown field `x`, expected one of ...".
        if message.starts_with("unknown field `") {
            ConfigError::UnknownKey(key)
        } else {
            ConfigError::BadValue {
                key,
                problem: message,
            }
        }
    })
}

/// Line and column (1-based) of a byte offset, for TOML errors. An offset inside a multi-byte
/// character counts as that character (slicing there would panic on the user's file).
fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let mut end = offset.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let before = &text[..end];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

// ---------------------------------------------------------------------------------------------
// The file's shape
// ---------------------------------------------------------------------------------------------

/// The whole file: the top level (the profile `default`) and the profiles' tables.
type FileTable = SettingsTable<Table<BTreeMap<String, Table<ProfileTable>>>>;

/// A `[profiles.<name>]` table: the top level's keys, profiles excepted.
type ProfileTable = SettingsTable<NoProfiles>;

/// `profiles` inside a profile's table: an unknown key there, like any other.
struct NoProfiles;

impl<'de> Deserialize<'de> for NoProfiles {
    fn deserialize<D: Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(de::Error::unknown_field("profiles", &[]))
    }
}

// ---------------------------------------------------------------------------------------------
// From the tables to a layer: paths resolved, every key named by its full path
// ---------------------------------------------------------------------------------------------

/// What relative paths and `~` resolve against.
#[derive(Clone, Copy)]
pub(super) struct Paths<'a> {
    base: Option<&'a Path>,
    env: &'a HashMap<String, String>,
}

impl Paths<'_> {
    /// One settings table as a layer; `prefix` is `""` or `profiles.<name>.`.
    fn layer<P>(self, mut t: SettingsTable<P>, prefix: &str) -> Result<Layer, ConfigError> {
        let mut layer = Layer::take(&mut t, self, prefix)?;
        if let Some(listen) = t.listen {
            self.listen(listen.0, &format!("{prefix}listen."), &mut layer)?;
        }
        Ok(layer)
    }

    fn listen(
        self,
        mut t: ListenTable,
        prefix: &str,
        layer: &mut Layer,
    ) -> Result<(), ConfigError> {
        let key = |name: &str| format!("{prefix}{name}");
        layer.listen = Some(ListenLayer::take(&mut t, self, prefix)?);
        if let Some(p) = t.policy {
            layer.policy = Some(policy_layer(p.0, &key("policy"))?);
        }
        if let Some(mut c) = t.claude {
            layer.claude = Some(ClaudeLayer::take(&mut c.0, self, &key("claude."))?);
        }
        if let Some(mut c) = t.codex {
            layer.codex = Some(CodexLayer::take(&mut c.0, self, &key("codex."))?);
        }
        Ok(())
    }

    /// The rules of `config::keys`: each takes the file's value and the key's full path.
    pub(super) fn plain<T: Into<U>, U>(self, v: T, _key: &str) -> Result<U, ConfigError> {
        Ok(v.into())
    }

    /// A value kept with its key, for the bounds checked after the merge.
    pub(super) fn sourced<T>(self, value: T, key: &str) -> Result<Sourced<T>, ConfigError> {
        Ok(Sourced {
            value,
            key: key.to_string(),
        })
    }

    pub(super) fn path(self, raw: String, key: &str) -> Result<std::path::PathBuf, ConfigError> {
        value::path(&raw, self.base, self.env).map_err(|p| bad(key, p))
    }

    /// A list of paths, each resolved as `path` resolves one.
    pub(super) fn paths(
        self,
        raw: Vec<String>,
        key: &str,
    ) -> Result<Vec<std::path::PathBuf>, ConfigError> {
        raw.iter().map(|r| self.path(r.clone(), key)).collect()
    }

    /// `env_pass`: each item a `NAME` or `PREFIX_*` pattern (`core::run_env`).
    pub(super) fn env_pass(self, v: Vec<String>, key: &str) -> Result<Vec<String>, ConfigError> {
        match v
            .iter()
            .find_map(|p| crate::core::run_env::pattern_problem(p))
        {
            Some(problem) => Err(bad(key, problem)),
            None => Ok(v),
        }
    }

    pub(super) fn socket_addr(
        self,
        v: String,
        key: &str,
    ) -> Result<std::net::SocketAddr, ConfigError> {
        value::socket_addr(&v).map_err(|p| bad(key, p))
    }

    pub(super) fn byte_size(self, v: String, key: &str) -> Result<u64, ConfigError> {
        value::byte_size(&v).map_err(|p| bad(key, p))
    }

    pub(super) fn program(self, raw: String, key: &str) -> Result<std::path::PathBuf, ConfigError> {
        value::program(&raw, self.base, self.env).map_err(|p| bad(key, p))
    }

    /// `command`'s program is found like `binary`: bare names on PATH at run time, paths made
    /// absolute against the config file's folder; its arguments stay as written.
    pub(super) fn command(
        self,
        mut argv: Vec<String>,
        key: &str,
    ) -> Result<Vec<String>, ConfigError> {
        if let Some(first) = argv.first_mut() {
            if first.trim().is_empty() {
                return Err(bad(key, "the program (first item) must not be empty"));
            }
            *first = self
                .program(std::mem::take(first), key)?
                .to_string_lossy()
                .into_owned();
        }
        Ok(argv)
    }
}

fn bad(key: &str, problem: impl Into<String>) -> ConfigError {
    ConfigError::BadValue {
        key: key.to_string(),
        problem: problem.into(),
    }
}

// ---------------------------------------------------------------------------------------------
// Values: read as any TOML value, then converted with a message of our own
// ---------------------------------------------------------------------------------------------

/// A value read as any TOML value, then converted by its [`FromToml`] rule. serde's own type
/// errors quote the value (`invalid type: string "ac_...", expected ...`); this names only the
/// TOML type it found.
pub(super) struct Value<T>(pub(super) T);

/// How a value is taken from TOML: the problem is a sentence without the value's text (unless
/// the value cannot be secret).
pub(super) trait FromToml: Sized {
    fn from_toml(v: &toml::Value) -> Result<Self, String>;
}

impl<'de, T: FromToml> Deserialize<'de> for Value<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = toml::Value::deserialize(d)?;
        T::from_toml(&v).map(Value).map_err(de::Error::custom)
    }
}

fn want_str(v: &toml::Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, found {}", v.type_str()))
}

impl FromToml for String {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        want_str(v).map(str::to_string)
    }
}

impl FromToml for bool {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        v.as_bool()
            .ok_or_else(|| format!("expected true or false, found {}", v.type_str()))
    }
}

impl FromToml for Vec<String> {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let items = v
            .as_array()
            .ok_or_else(|| format!("expected an array of strings, found {}", v.type_str()))?;
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                item.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("item {i} is {}, expected a string", item.type_str()))
            })
            .collect()
    }
}

/// A list of TCP ports, each 1 to 65535.
impl FromToml for Vec<u16> {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let items = v
            .as_array()
            .ok_or_else(|| format!("expected an array of port numbers, found {}", v.type_str()))?;
        items
            .iter()
            .map(|i| {
                i.as_integer()
                    .and_then(|n| u16::try_from(n).ok())
                    .filter(|n| *n > 0)
                    .ok_or_else(|| format!("expected a port number (1 to 65535), found {i}"))
            })
            .collect()
    }
}

/// The humantime adapter: a duration is a string such as `"3s"`, checked by `value::duration`.
impl FromToml for Duration {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let s = v.as_str().ok_or_else(|| {
            format!(
                "expected a duration string such as \"3s\" or \"15m\", found {}",
                v.type_str()
            )
        })?;
        value::duration(s)
    }
}

impl FromToml for RuntimeKind {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        value::runtime(want_str(v)?)
    }
}

impl FromToml for LogFormat {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        value::choice(want_str(v)?)
    }
}

impl FromToml for McpMode {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        value::choice(want_str(v)?)
    }
}

/// `api_base` and the MCP URLs.
pub(super) struct ApiBase(String);

impl From<ApiBase> for String {
    fn from(v: ApiBase) -> String {
        v.0
    }
}

impl FromToml for ApiBase {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        value::api_base(want_str(v)?).map(ApiBase)
    }
}

/// `log_level`: a level or a filter.
pub(super) struct LogFilter(String);

impl From<LogFilter> for String {
    fn from(v: LogFilter) -> String {
        v.0
    }
}

impl FromToml for LogFilter {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        value::log_filter(want_str(v)?).map(LogFilter)
    }
}

/// `api_key`: a non-empty string, kept secret from here on.
pub(super) struct Secret(SecretString);

impl From<Secret> for SecretString {
    fn from(v: Secret) -> SecretString {
        v.0
    }
}

impl FromToml for Secret {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let s = want_str(v)?.trim();
        if s.is_empty() {
            return Err("must not be empty".into());
        }
        Ok(Secret(SecretString::from(s.to_string())))
    }
}

/// `run_logs_keep`: a whole number in `value::run_logs_keep`'s range.
pub(super) struct RunLogsKeep(usize);

impl From<RunLogsKeep> for usize {
    fn from(v: RunLogsKeep) -> usize {
        v.0
    }
}

impl FromToml for RunLogsKeep {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let n = v
            .as_integer()
            .ok_or_else(|| format!("expected a number, found {}", v.type_str()))?;
        value::run_logs_keep(n).map(RunLogsKeep)
    }
}

/// `run_log_max_bytes`: a whole number in `value::run_log_max_bytes`'s range.
pub(super) struct RunLogMaxBytes(u64);

impl From<RunLogMaxBytes> for u64 {
    fn from(v: RunLogMaxBytes) -> u64 {
        v.0
    }
}

/// `listen.max_concurrent_runs`: a whole number of runs, at least 1.
pub(super) struct MaxConcurrentRuns(usize);

impl From<MaxConcurrentRuns> for usize {
    fn from(v: MaxConcurrentRuns) -> usize {
        v.0
    }
}

impl FromToml for MaxConcurrentRuns {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let n = v
            .as_integer()
            .ok_or_else(|| format!("expected a number, found {}", v.type_str()))?;
        value::max_concurrent_runs(n).map(MaxConcurrentRuns)
    }
}

/// `host_max_runs_per_day`: a whole number from 0 (no cap) up.
pub(super) struct HostRuns(u32);

impl From<HostRuns> for u32 {
    fn from(v: HostRuns) -> u32 {
        v.0
    }
}

impl FromToml for HostRuns {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let n = v
            .as_integer()
            .ok_or_else(|| format!("expected a whole number, found {}", v.type_str()))?;
        if n < 0 {
            return Err("expected a whole number from 0 (no cap) up".into());
        }
        u32::try_from(n)
            .map(HostRuns)
            .map_err(|_| format!("expected at most {} (0 is no cap)", u32::MAX))
    }
}

/// `host_max_cost_per_day_usd`: a sum in US dollars from 0 (no cap) up.
pub(super) struct Dollars(f64);

impl From<Dollars> for f64 {
    fn from(v: Dollars) -> f64 {
        v.0
    }
}

impl FromToml for Dollars {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        crate::core::policy::dollars_of(v).map(Dollars)
    }
}

impl FromToml for RunLogMaxBytes {
    fn from_toml(v: &toml::Value) -> Result<Self, String> {
        let n = v
            .as_integer()
            .ok_or_else(|| format!("expected a number, found {}", v.type_str()))?;
        value::run_log_max_bytes(n).map(RunLogMaxBytes)
    }
}

// ---------------------------------------------------------------------------------------------
// Tables: a non-table names its type; a table's keys keep their path
// ---------------------------------------------------------------------------------------------

/// A TOML table deserialized as `T`. serde's own error for a non-table quotes the value; this
/// one names its type. The table's own map is handed on, so `serde_path_to_error` still tracks
/// the keys inside it.
pub(super) struct Table<T>(pub(super) T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Table<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(TableVisitor(PhantomData))
    }
}

struct TableVisitor<T>(PhantomData<T>);

macro_rules! not_a_table {
    ($($method:ident($ty:ty) => $found:literal),* $(,)?) => {
        $(fn $method<E: de::Error>(self, _: $ty) -> Result<Self::Value, E> {
            Err(E::custom(concat!("expected a table, found ", $found)))
        })*
    };
}

impl<'de, T: Deserialize<'de>> Visitor<'de> for TableVisitor<T> {
    type Value = Table<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a table")
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
        T::deserialize(de::value::MapAccessDeserializer::new(map)).map(Table)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Self::Value, A::Error> {
        Err(de::Error::custom("expected a table, found array"))
    }

    not_a_table! {
        visit_bool(bool) => "boolean",
        visit_i64(i64) => "integer",
        visit_u64(u64) => "integer",
        visit_f64(f64) => "float",
        visit_str(&str) => "string",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The "expected one of" list serde gives for an unknown key in `toml`'s table.
    fn serde_keys(toml: &str) -> Vec<String> {
        let table: toml::Table = toml::from_str(toml).unwrap();
        let Err(e) = serde_path_to_error::deserialize::<_, FileTable>(toml::Value::Table(table))
        else {
            panic!("{toml} parsed")
        };
        let message = e.inner().message().to_string();
        let list = message.split("expected one of ").nth(1).unwrap();
        list.split(", ")
            .map(|k| k.trim_matches('`').to_string())
            .collect()
    }

    #[test]
    fn the_key_lists_for_did_you_mean_are_the_shapes_own() {
        for (toml, keys) in [
            ("bogus = 1", crate::config::keys::TOP_KEYS),
            ("[listen]\nbogus = 1", crate::config::keys::LISTEN_KEYS),
            (
                "[listen.claude]\nbogus = 1",
                crate::config::keys::CLAUDE_KEYS,
            ),
            ("[listen.codex]\nbogus = 1", crate::config::keys::CODEX_KEYS),
        ] {
            assert_eq!(serde_keys(toml), keys, "{toml}");
        }
    }

    #[test]
    fn a_duplicate_key_or_table_is_named_by_its_path() {
        let err = |text: &str| parse(Path::new("/c.toml"), text).err().unwrap().to_string();
        let e =
            err("log_level = \"info\"\n[listen]\nquiet_window = \"1s\"\nquiet_window = \"2s\"\n");
        assert!(
            e.contains("line 4, column 1: duplicate key `listen.quiet_window`"),
            "{e}"
        );
        let e = err("api_base = \"http://a\"\napi_base = \"http://b\"\n");
        assert!(
            e.contains("line 2, column 1: duplicate key `api_base`"),
            "{e}"
        );
        let e = err("[listen]\n[profiles.w]\n[listen]\n");
        assert!(e.contains("duplicate table `[listen]`"), "{e}");
        // A name that is not a bare key is not quoted: it might be a value in the wrong place.
        let e = err("\"ac_live secret\" = 1\n\"ac_live secret\" = 2\n");
        assert!(e.contains("duplicate key") && !e.contains("secret"), "{e}");
    }

    #[test]
    fn a_profiles_policy_goes_over_the_top_levels_key_by_key() {
        let text = "[listen.policy]\nmax_runs_per_hour = 12\ndeny = [\"@noisy\"]\n\
                    [profiles.w.listen.policy]\nmax_runs_per_hour = 3\nfirst_contact = \"wait\"\n";
        let env = HashMap::new();
        let policy = |profile: &str| {
            let layer = layer(Path::new("/c.toml"), text, profile, &env).unwrap();
            layer.policy.unwrap_or_default().resolve()
        };
        let top = policy("default");
        assert_eq!(top.max_runs_per_hour, Some(12));
        assert_eq!(top.first_contact, crate::core::policy::FirstContact::Wake);
        let w = policy("w");
        assert_eq!(w.max_runs_per_hour, Some(3));
        assert_eq!(w.first_contact, crate::core::policy::FirstContact::Wait);
        assert_eq!(w.deny, top.deny, "the top level's deny reaches the profile");
    }

    #[test]
    fn a_policy_mistake_is_named_by_its_full_path_in_any_table() {
        let env = HashMap::new();
        let err = |text: &str| {
            layer(Path::new("/c.toml"), text, "w", &env)
                .err()
                .unwrap()
                .to_string()
        };
        let e = err("[profiles.w.listen.policy]\nmax_runs_per_hour = -1\n");
        assert!(
            e.contains("`profiles.w.listen.policy.max_runs_per_hour`"),
            "{e}"
        );
        let e = err("[profiles.w]\n[listen.policy]\nquiet_hourz = \"22:00-07:00\"\n");
        assert!(
            e.contains("unknown config key `listen.policy.quiet_hourz`"),
            "{e}"
        );
        // Issue 38 item 8: a profile's zone is named by its own path.
        let e = err("[profiles.w.listen.policy]\ntimezone = \"Mars/Olympus_Mons\"\n");
        assert!(e.contains("`profiles.w.listen.policy.timezone`"), "{e}");
    }

    /// Issue 38 item 8: the policy of a profile not in use is checked too, so a mistake there
    /// does not wait for the day that profile starts.
    #[test]
    fn a_policy_mistake_in_a_profile_not_in_use_is_found() {
        let env = HashMap::new();
        let text = "[profiles.work.listen.policy]\nbogus = 1\n";
        let e = layer(Path::new("/c.toml"), text, DEFAULT_PROFILE, &env)
            .err()
            .unwrap()
            .to_string();
        assert!(
            e.contains("unknown config key `profiles.work.listen.policy.bogus`"),
            "{e}"
        );
        let text = "[profiles.work.listen.policy]\ntimezone = \"Mars/Olympus_Mons\"\n\
                    [profiles.home]\n";
        let e = layer(Path::new("/c.toml"), text, "home", &env)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("`profiles.work.listen.policy.timezone`"), "{e}");
    }

    /// Issue 38 item 8: a profile can clear the top level's `allow` (every handle wakes its
    /// runs); the top level's own empty list is still refused.
    #[test]
    fn a_profile_clears_the_top_levels_allow_with_an_empty_list() {
        let env = HashMap::new();
        let text =
            "[listen.policy]\nallow = [\"@alice\"]\n[profiles.open.listen.policy]\nallow = []\n";
        let policy = |profile: &str| {
            let layer = layer(Path::new("/c.toml"), text, profile, &env).unwrap();
            layer.policy.unwrap_or_default().resolve()
        };
        assert!(policy("default").allow.is_some());
        assert_eq!(policy("open").allow, None);
        let e = layer(
            Path::new("/c.toml"),
            "[listen.policy]\nallow = []\n",
            DEFAULT_PROFILE,
            &env,
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains("`listen.policy.allow`: lists no handle"), "{e}");
    }

    #[test]
    fn line_col_of_an_offset_inside_a_multibyte_character_does_not_panic() {
        // 'é' is two bytes: offset 1 falls inside it.
        assert_eq!(line_col("é\nx", 1), (1, 1));
        assert_eq!(line_col("a\né = 1", 4), (2, 2));
        assert_eq!(line_col("a\nb", 99), (2, 2));
    }
}

//! `[listen.policy]` from the config file's TOML: the shape as serde types with
//! `deny_unknown_fields`, read through `serde_path_to_error` so every error names its key path,
//! each value read as any TOML value and converted by a rule of its own whose problem never
//! quotes the value (as `config::file` does for the other keys). `config::file` hands this the
//! `policy` table of `[listen]` and of each `[profiles.<name>.listen]`, then
//! [`PolicyLayer::over`] the top level's; [`PolicyLayer::resolve`] fills what no table set from
//! [`DEFAULTS`].

use super::{FirstContact, Groups, HandlePattern, LoopGuard, Policy, QuietRange};
use serde::Deserialize;

/// The bounds every profile has until its config says otherwise (issue 38: safe spend by
/// default). Chosen so that ordinary use never meets them and a loop between two agents does at
/// once; the reasons are in docs/decisions.md ("Run policy"). `0` lifts a cap; `loop_guard =
/// { runs = 0 }` turns the guard off.
pub struct Defaults {
    pub max_runs_per_hour: u32,
    pub max_runs_per_day: u32,
    pub loop_guard: LoopGuard,
}

pub const DEFAULTS: Defaults = Defaults {
    max_runs_per_hour: 60,
    max_runs_per_day: 500,
    loop_guard: LoopGuard {
        runs: 30,
        within_ms: 3_600_000,
    },
};

/// The keys of a `policy` table, for "did you mean" (`config::hint`).
pub const KEYS: &[&str] = &[
    "quiet_hours",
    "timezone",
    "max_runs_per_hour",
    "max_runs_per_day",
    "max_cost_per_day_usd",
    "max_tokens_per_day",
    "max_cost_per_run_usd",
    "first_contact",
    "groups",
    "allow",
    "deny",
    "loop_guard",
];

/// A mistake in `[listen.policy]`, naming the key by its full path. Never quotes a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown config key `{0}`")]
    UnknownKey(String),
    #[error("bad value for `{key}`: {problem}")]
    BadValue { key: String, problem: String },
}

/// The longest `loop_guard.within`: the ledger keeps conversation lists that long.
pub const MAX_LOOP_WINDOW_MS: i64 = 24 * 3_600_000;

/// One table's keys as set there (`None`: not set), before the top level fills the gaps.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PolicyLayer {
    pub quiet_hours: Option<Vec<QuietRange>>,
    pub timezone: Option<String>,
    pub max_runs_per_hour: Option<u32>,
    pub max_runs_per_day: Option<u32>,
    pub max_cost_per_day_usd: Option<f64>,
    pub max_tokens_per_day: Option<u64>,
    pub max_cost_per_run_usd: Option<f64>,
    pub first_contact: Option<FirstContact>,
    pub groups: Option<Groups>,
    /// `Some(None)`: a profile's `allow = []`, which clears the top level's list.
    pub allow: Option<Option<Vec<HandlePattern>>>,
    pub deny: Option<Vec<HandlePattern>>,
    pub loop_guard: Option<Option<LoopGuard>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyTable {
    quiet_hours: Option<toml::Value>,
    timezone: Option<toml::Value>,
    max_runs_per_hour: Option<toml::Value>,
    max_runs_per_day: Option<toml::Value>,
    max_cost_per_day_usd: Option<toml::Value>,
    max_tokens_per_day: Option<toml::Value>,
    max_cost_per_run_usd: Option<toml::Value>,
    first_contact: Option<toml::Value>,
    groups: Option<toml::Value>,
    allow: Option<toml::Value>,
    deny: Option<toml::Value>,
    loop_guard: Option<LoopGuardValue>,
}

/// `loop_guard`: an inline table `{ runs = 6, within = "30m" }` (or `[listen.policy.loop_guard]`).
struct LoopGuardValue(toml::Table);

impl<'de> Deserialize<'de> for LoopGuardValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match toml::Value::deserialize(d)? {
            toml::Value::Table(t) => {
                if let Some(k) = t.keys().find(|k| *k != "runs" && *k != "within") {
                    return Err(serde::de::Error::custom(format_args!(
                        "unknown field `{k}`"
                    )));
                }
                Ok(LoopGuardValue(t))
            }
            other => Err(serde::de::Error::custom(format_args!(
                "expected a table such as {{ runs = 6, within = \"30m\" }}, found {}",
                other.type_str()
            ))),
        }
    }
}

impl PolicyLayer {
    /// One `policy` table; `prefix` is its path (`listen.policy`, `profiles.work.listen.policy`).
    pub fn from_toml(table: toml::Table, prefix: &str) -> Result<PolicyLayer, PolicyError> {
        let t: PolicyTable =
            serde_path_to_error::deserialize(toml::Value::Table(table)).map_err(|e| {
                let path = e.path().to_string();
                let message = e.inner().message().trim().to_string();
                let key = |p: &str| format!("{prefix}.{p}");
                match message.strip_prefix("unknown field `") {
                    Some(rest) if path.ends_with("loop_guard") => {
                        let name = rest.split('`').next().unwrap_or_default();
                        PolicyError::UnknownKey(format!("{}.{name}", key(&path)))
                    }
                    Some(_) => PolicyError::UnknownKey(key(&path)),
                    None => PolicyError::BadValue {
                        key: key(&path),
                        problem: message,
                    },
                }
            })?;
        let key = |name: &str| format!("{prefix}.{name}");
        fn read<T>(
            v: Option<toml::Value>,
            key: String,
            rule: impl Fn(&toml::Value) -> Result<T, String>,
        ) -> Result<Option<T>, PolicyError> {
            v.map(|v| {
                rule(&v).map_err(|problem| PolicyError::BadValue {
                    key: key.clone(),
                    problem,
                })
            })
            .transpose()
        }
        Ok(PolicyLayer {
            quiet_hours: read(t.quiet_hours, key("quiet_hours"), quiet_hours)?,
            timezone: read(t.timezone, key("timezone"), timezone)?,
            max_runs_per_hour: read(t.max_runs_per_hour, key("max_runs_per_hour"), count)?,
            max_runs_per_day: read(t.max_runs_per_day, key("max_runs_per_day"), count)?,
            max_cost_per_day_usd: read(
                t.max_cost_per_day_usd,
                key("max_cost_per_day_usd"),
                dollars_of,
            )?,
            max_tokens_per_day: read(t.max_tokens_per_day, key("max_tokens_per_day"), tokens)?,
            max_cost_per_run_usd: read(
                t.max_cost_per_run_usd,
                key("max_cost_per_run_usd"),
                dollars_of,
            )?,
            first_contact: read(t.first_contact, key("first_contact"), first_contact)?,
            groups: read(t.groups, key("groups"), groups)?,
            allow: read(t.allow, key("allow"), |v| {
                allow(v, prefix.starts_with("profiles."))
            })?,
            deny: read(t.deny, key("deny"), handles)?,
            loop_guard: t
                .loop_guard
                .map(|g| loop_guard(g.0, &key("loop_guard")))
                .transpose()?,
        })
    }

    /// This table's keys over `lower`'s (a profile's over the top level's): key by key, a list
    /// replacing a list whole.
    pub fn over(self, lower: PolicyLayer) -> PolicyLayer {
        PolicyLayer {
            quiet_hours: self.quiet_hours.or(lower.quiet_hours),
            timezone: self.timezone.or(lower.timezone),
            max_runs_per_hour: self.max_runs_per_hour.or(lower.max_runs_per_hour),
            max_runs_per_day: self.max_runs_per_day.or(lower.max_runs_per_day),
            max_cost_per_day_usd: self.max_cost_per_day_usd.or(lower.max_cost_per_day_usd),
            max_tokens_per_day: self.max_tokens_per_day.or(lower.max_tokens_per_day),
            max_cost_per_run_usd: self.max_cost_per_run_usd.or(lower.max_cost_per_run_usd),
            first_contact: self.first_contact.or(lower.first_contact),
            groups: self.groups.or(lower.groups),
            allow: self.allow.or(lower.allow),
            deny: self.deny.or(lower.deny),
            loop_guard: self.loop_guard.or(lower.loop_guard),
        }
    }

    /// The policy, [`DEFAULTS`] filling what no table set: runs an hour and a day and the loop
    /// guard bounded, no other rule. A cap of 0 is no cap.
    pub fn resolve(self) -> Policy {
        let nonzero_u32 = |v: u32| Some(v).filter(|n| *n > 0);
        let positive = |v: Option<f64>| v.filter(|n| *n > 0.0);
        Policy {
            quiet_hours: self.quiet_hours.unwrap_or_default(),
            timezone: self.timezone,
            max_runs_per_hour: nonzero_u32(
                self.max_runs_per_hour.unwrap_or(DEFAULTS.max_runs_per_hour),
            ),
            max_runs_per_day: nonzero_u32(
                self.max_runs_per_day.unwrap_or(DEFAULTS.max_runs_per_day),
            ),
            max_cost_per_day_usd: positive(self.max_cost_per_day_usd),
            max_tokens_per_day: self.max_tokens_per_day.filter(|n| *n > 0),
            max_cost_per_run_usd: positive(self.max_cost_per_run_usd),
            first_contact: self.first_contact.unwrap_or_default(),
            groups: self.groups.unwrap_or_default(),
            allow: self.allow.flatten(),
            deny: self.deny.unwrap_or_default(),
            loop_guard: self.loop_guard.unwrap_or(Some(DEFAULTS.loop_guard)),
        }
    }
}

impl Policy {
    /// One `[listen.policy]` table alone, resolved (a test, a fixture, `--once`).
    pub fn from_toml(table: toml::Table, prefix: &str) -> Result<Policy, PolicyError> {
        PolicyLayer::from_toml(table, prefix).map(PolicyLayer::resolve)
    }
}

fn want_str(v: &toml::Value) -> Result<&str, String> {
    v.as_str()
        .ok_or_else(|| format!("expected a string, found {}", v.type_str()))
}

/// `quiet_hours`: `"HH:MM-HH:MM"` or a list of them, local time; a range whose end is before
/// its start spans midnight. A range that is empty, and ranges that leave no minute of the day,
/// are refused: a hold must end.
fn quiet_hours(v: &toml::Value) -> Result<Vec<QuietRange>, String> {
    let items: Vec<&toml::Value> = match v {
        toml::Value::String(_) => vec![v],
        toml::Value::Array(items) => items.iter().collect(),
        other => {
            return Err(format!(
                "expected a list of \"HH:MM-HH:MM\" ranges, found {}",
                other.type_str()
            ));
        }
    };
    let mut ranges = Vec::with_capacity(items.len());
    for (i, item) in items.into_iter().enumerate() {
        let text = item
            .as_str()
            .ok_or_else(|| format!("item {i} is {}, expected a string", item.type_str()))?;
        ranges.push(QuietRange::parse(text).map_err(|why| format!("item {i}: {why}"))?);
    }
    if (0..1440u16).all(|m| ranges.iter().any(|r| r.contains(m))) {
        return Err("the ranges leave no minute of the day for runs".into());
    }
    Ok(ranges)
}

/// `timezone`: an IANA zone name (`Europe/Berlin`, `UTC`). Only its form is checked here; that the
/// zone exists on the machine is for the loader (it reads the zone's rules).
fn timezone(v: &toml::Value) -> Result<String, String> {
    let name = want_str(v)?.trim();
    let part_ok = |p: &str| {
        !p.is_empty()
            && p != "."
            && p != ".."
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '+'))
    };
    if name.is_empty() || name.len() > 64 || !name.split('/').all(part_ok) {
        return Err("expected a time zone name such as \"Europe/Berlin\" or \"UTC\"".into());
    }
    Ok(name.to_string())
}

fn whole(v: &toml::Value) -> Result<i64, String> {
    v.as_integer()
        .ok_or_else(|| format!("expected a whole number, found {}", v.type_str()))
}

/// A whole number from 0 up to `T`'s largest, each end said when it is missed.
fn bounded<T: TryFrom<i64> + std::fmt::Display>(v: &toml::Value, max: T) -> Result<T, String> {
    let n = whole(v)?;
    if n < 0 {
        return Err("expected a whole number from 0 (no cap) up".into());
    }
    T::try_from(n).map_err(|_| format!("expected at most {max} (0 is no cap)"))
}

fn count(v: &toml::Value) -> Result<u32, String> {
    bounded(v, u32::MAX)
}

fn tokens(v: &toml::Value) -> Result<u64, String> {
    // TOML's integers are i64: any that is not negative fits.
    bounded(v, u64::MAX)
}

/// A sum in US dollars: a number (`5`, `0.5`) from 0 (no cap) up. The config's other dollar
/// keys (`[listen] daily_budget_usd`) read it the same way.
pub fn dollars_of(v: &toml::Value) -> Result<f64, String> {
    let n = match v {
        toml::Value::Integer(i) => *i as f64,
        toml::Value::Float(f) => *f,
        other => {
            return Err(format!(
                "expected a number of dollars, found {}",
                other.type_str()
            ));
        }
    };
    if !n.is_finite() || n < 0.0 {
        return Err("expected a number of dollars from 0 (no cap) up".into());
    }
    Ok(n)
}

fn first_contact(v: &toml::Value) -> Result<FirstContact, String> {
    match want_str(v)?.trim().to_ascii_lowercase().as_str() {
        "wake" => Ok(FirstContact::Wake),
        "wait" => Ok(FirstContact::Wait),
        _ => Err("expected \"wake\" or \"wait\"".into()),
    }
}

fn groups(v: &toml::Value) -> Result<Groups, String> {
    match want_str(v)?.trim().to_ascii_lowercase().as_str() {
        "all" => Ok(Groups::All),
        "mentions" => Ok(Groups::Mentions),
        _ => Err("expected \"all\" or \"mentions\"".into()),
    }
}

/// `allow`: at the top level an empty list would let no card wake a run, which is stopping the
/// listener by another name: refused, with what to do. In a profile's table it clears the top
/// level's list (issue 38 item 8): every handle may wake that profile's runs.
fn allow(v: &toml::Value, in_profile: bool) -> Result<Option<Vec<HandlePattern>>, String> {
    let empty = v.as_array().is_some_and(Vec::is_empty);
    match (empty, in_profile) {
        (true, true) => Ok(None),
        (true, false) => Err(
            "lists no handle, so nothing could wake a run; leave `allow` out to let every handle \
             wake one, or stop the listener"
                .into(),
        ),
        (false, _) => handles(v).map(Some),
    }
}

/// `allow` / `deny`: handles, `*` matching any run of characters.
fn handles(v: &toml::Value) -> Result<Vec<HandlePattern>, String> {
    let items = v
        .as_array()
        .ok_or_else(|| format!("expected a list of handles, found {}", v.type_str()))?;
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            let text = item
                .as_str()
                .ok_or_else(|| format!("item {i} is {}, expected a string", item.type_str()))?;
            HandlePattern::parse(text).map_err(|why| format!("item {i}: {why}"))
        })
        .collect()
}

/// `loop_guard = { runs = 6, within = "30m" }`; `runs = 0` turns it off (and needs no window).
fn loop_guard(t: toml::Table, prefix: &str) -> Result<Option<LoopGuard>, PolicyError> {
    let bad = |name: &str, problem: String| PolicyError::BadValue {
        key: format!("{prefix}.{name}"),
        problem,
    };
    let runs = match t.get("runs") {
        Some(v) => count(v).map_err(|p| bad("runs", p))?,
        None => return Err(bad("runs", "is required: how many runs".into())),
    };
    if runs == 0 && !t.contains_key("within") {
        return Ok(None);
    }
    let within = match t.get("within") {
        Some(v) => within(v).map_err(|p| bad("within", p))?,
        None => {
            return Err(bad(
                "within",
                "is required: a window such as \"30m\"".into(),
            ));
        }
    };
    Ok((runs > 0).then_some(LoopGuard {
        runs,
        within_ms: within,
    }))
}

fn within(v: &toml::Value) -> Result<i64, String> {
    let text = v.as_str().ok_or_else(|| {
        format!(
            "expected a duration string such as \"30m\", found {}",
            v.type_str()
        )
    })?;
    let d = humantime::parse_duration(text.trim())
        .map_err(|_| "expected a duration such as \"30m\" or \"2h\"".to_string())?;
    let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
    if !(1000..=MAX_LOOP_WINDOW_MS).contains(&ms) {
        return Err("expected a window from 1s to 24h".into());
    }
    Ok(ms)
}

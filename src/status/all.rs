//! `agentchat status --all`: a row per profile the config names (and per state dir a live
//! listener holds), with its service unit: the profile's own, or the one-process unit that runs
//! it (`service install --all --one-process`, src/service/host.rs).

use super::zone::{self, MachineZone, PolicyZone};
use super::{JSON_VERSION, Liveness, StatusArgs, assess, parse_time, relative};
use crate::config::{ConfigFile, KeyFile};
use crate::core::policy::{Offsets, Totals, held_line, today_line};
use crate::core::status::{Held, UsageTotals};
use crate::listen::state_dir::StateDir;
use crate::sys::process::pid_alive;
use serde_json::json;
use std::time::SystemTime;

/// State dirs under the default state base whose lock a live process holds
/// (`sys::flock::holder`): the listeners running for profiles the config does not (or no
/// longer) name.
fn locked_state_dirs() -> Vec<(String, std::path::PathBuf)> {
    let env = crate::config::process_env();
    let Some(base) = crate::config::default_state_base(&env) else {
        return Vec::new();
    };
    let Ok(entries) = std::fs::read_dir(&base) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in entries.flatten() {
        let dir = e.path();
        let lock = dir.join(crate::listen::state_dir::LOCK_FILE);
        if let crate::sys::flock::LockHolder::Held { .. } = crate::sys::flock::holder(&lock)
            && let Some(name) = dir.file_name().and_then(|n| n.to_str())
        {
            out.push((name.to_string(), dir.clone()));
        }
    }
    out.sort();
    out
}

/// One row of `status --all`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub profile: String,
    /// Named by the config (else found by its live lock only).
    pub configured: bool,
    pub state_dir: std::path::PathBuf,
    pub running: bool,
    pub stale: bool,
    pub handle: Option<String>,
    pub state: Option<String>,
    pub since: Option<String>,
    /// The last cycle's outcome (`completed`, `failed`, `unusable`, `no_run`).
    pub last_outcome: Option<String>,
    /// The profile's systemd unit or launchd label.
    pub unit: String,
    /// Where its unit file is, when `service install` wrote one.
    pub unit_file: Option<std::path::PathBuf>,
    /// The unit in a few words: `not installed`, `enabled, running`, `disabled, inactive`,
    /// `installed, manager not asked`, `installed, no manager answers` (the manager's reason is
    /// said once for the whole table: `service_manager`).
    pub service: String,
    /// Why the row could not be read (a config error for this profile, a damaged status file).
    pub error: Option<String>,
    /// `status.held`: runs held by `[listen.policy]`, or `None`.
    pub held: Option<Held>,
    /// `status.usage.today`: today's runs and what they cost; `None` when it never ran.
    pub today: Option<UsageTotals>,
    /// The profile's `listen.policy.timezone`, its hold's end told in it; not in the JSON.
    #[serde(skip)]
    pub zone: Option<PolicyZone>,
}

/// The unit that runs `profile`: its own when `service install` wrote one, else the one-process
/// unit when that is written and `listen --all` runs the profile (`hosted`: src/service/host.rs);
/// with the way to ask the manager about it.
fn unit_of(
    profile: &str,
    hosted: bool,
) -> (
    String,
    Option<std::path::PathBuf>,
    Box<dyn FnOnce() -> crate::service::ManagerView>,
) {
    use crate::service::{ServiceKind, host_manager_view, host_unit, host_unit_path, manager_view};
    let kind = ServiceKind::native();
    let own = match kind {
        ServiceKind::Systemd => crate::service::systemd_unit_name(profile),
        ServiceKind::Launchd => crate::service::launchd_label(profile),
    };
    if let Some(file) = crate::service::unit_path(kind, profile)
        .ok()
        .filter(|p| p.is_file())
    {
        let profile = profile.to_string();
        return (
            own,
            Some(file),
            Box::new(move || manager_view(kind, &profile)),
        );
    }
    match host_unit_path(kind).ok().filter(|p| hosted && p.is_file()) {
        Some(file) => (
            host_unit(kind),
            Some(file),
            Box::new(move || host_manager_view(kind)),
        ),
        None => (own, None, Box::new(move || manager_view(kind, ""))),
    }
}

/// The row, and the service manager's error if it was asked and did not answer.
fn row_for(
    profile: &str,
    configured: bool,
    state_dir: std::path::PathBuf,
    error: Option<String>,
    hosted: bool,
    zone: Option<PolicyZone>,
) -> (Row, Option<String>) {
    let (status, error) = match StateDir::at(&state_dir).read_status() {
        Ok(s) => (s, error),
        Err(e) => (None, error.or(Some(e.to_string()))),
    };
    let liveness = status
        .as_ref()
        .map(|s| assess(s, pid_alive(u64::from(s.pid)), SystemTime::now()));
    let (unit, unit_file, view) = unit_of(profile, hosted);
    // No unit file, nothing to ask the manager about: that keeps its error (a user manager that
    // does not run) out of every row of a machine that never installed one.
    let (service, manager_error) = match &unit_file {
        None => ("not installed".to_string(), None),
        Some(_) => match view() {
            crate::service::ManagerView::NotAsked => {
                ("installed, manager not asked".to_string(), None)
            }
            crate::service::ManagerView::Unreachable(why) => {
                ("installed, no manager answers".to_string(), Some(why))
            }
            crate::service::ManagerView::Answered {
                enabled_word,
                active_word,
                ..
            } => (format!("{enabled_word}, {active_word}"), None),
        },
    };
    let row = Row {
        profile: profile.to_string(),
        configured,
        state_dir,
        running: liveness == Some(Liveness::Running),
        stale: liveness == Some(Liveness::Stale),
        handle: status.as_ref().and_then(|s| s.handle.clone()),
        state: status.as_ref().map(|s| s.state.as_str().to_string()),
        since: status
            .as_ref()
            .map(|s| s.since.clone())
            .filter(|s| !s.is_empty()),
        last_outcome: status
            .as_ref()
            .and_then(|s| s.last_cycle.as_ref())
            .and_then(|c| c.outcome)
            .map(|o| o.as_str().to_string()),
        unit,
        unit_file,
        service,
        error,
        held: status.as_ref().and_then(|s| s.held.clone()),
        today: status.as_ref().map(|s| s.usage.today.clone()),
        zone,
    };
    (row, manager_error)
}

/// Pure: the run queue of `listen --all` (`listen::admission`) under the table: the running
/// profiles whose state is `queued`, in the order they joined it (first come, first served: the
/// order they start in), each with how long it has waited. `None` when nobody waits.
fn queue_line(rows: &[Row], now: SystemTime) -> Option<String> {
    let mut waiting: Vec<(SystemTime, &str)> = rows
        .iter()
        .filter(|r| r.running && r.state.as_deref() == Some("queued"))
        .filter_map(|r| Some((parse_time(r.since.as_deref()?)?, r.profile.as_str())))
        .collect();
    if waiting.is_empty() {
        return None;
    }
    waiting.sort();
    let places: Vec<String> = waiting
        .iter()
        .enumerate()
        .map(|(i, (since, p))| format!("{}. {p} (since {})", i + 1, relative(*since, now)))
        .collect();
    Some(format!(
        "run queue ({} waiting for a run slot, first come, first served): {}",
        places.len(),
        places.join(", ")
    ))
}

/// Pure: the `TODAY` cell, `14 runs, $0.83` (tokens when the runs reported no cost).
fn today_cell(today: Option<&UsageTotals>) -> String {
    let Some(t) = today else {
        return "-".into();
    };
    let line = today_line(&Totals {
        runs: t.runs,
        cost_usd: t.cost_usd,
        tokens: t.tokens,
        estimated: t.estimated,
    });
    line.strip_prefix("today: ").unwrap_or(&line).to_string()
}

/// Pure: the table `status --all` prints: columns as wide as their widest cell, two spaces
/// apart, every header in capitals; under a row, its error and its hold (the end in the row's
/// policy zone, named when it is not the machine's, else in `machine`'s local time);
/// `manager_error` (the service manager's reason for not answering, asked only about installed
/// units) once under the table.
pub fn render_rows(
    rows: &[Row],
    manager_error: Option<&str>,
    now: SystemTime,
    machine: &dyn Offsets,
) -> String {
    let header = [
        "PROFILE", "HANDLE", "LISTENER", "STATE", "SINCE", "LAST RUN", "TODAY", "SERVICE",
    ];
    let mut table: Vec<Vec<String>> = vec![header.iter().map(|h| h.to_string()).collect()];
    for r in rows {
        let listener = if r.running {
            "running"
        } else if r.stale {
            "stuck"
        } else {
            "stopped"
        };
        let mut profile = r.profile.clone();
        if !r.configured {
            profile.push('*');
        }
        let since = r.since.as_deref().and_then(parse_time);
        table.push(vec![
            profile,
            r.handle.clone().unwrap_or_else(|| "-".into()),
            listener.to_string(),
            r.state.clone().unwrap_or_else(|| "never ran".into()),
            since.map_or_else(|| "-".into(), |t| relative(t, now)),
            r.last_outcome.clone().unwrap_or_else(|| "-".into()),
            today_cell(r.today.as_ref()),
            r.service.clone(),
        ]);
    }
    let now_ms = i64::try_from(crate::sys::time::unix_ms(now)).unwrap_or(i64::MAX);
    let mut widths = [0usize; 8];
    for line in &table {
        for (w, cell) in widths.iter_mut().zip(line) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = Vec::new();
    for (i, line) in table.iter().enumerate() {
        let cells: Vec<String> = line
            .iter()
            .zip(widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        out.push(cells.join("  ").trim_end().to_string());
        let row = i.checked_sub(1).and_then(|r| rows.get(r));
        let name = line.first().map_or("", String::as_str);
        if let Some(e) = row.and_then(|r| r.error.as_ref()) {
            out.push(format!("  {name}: {e}"));
        }
        if let Some(r) = row
            && let Some(h) = &r.held
        {
            let zone = zone::shown(r.zone.as_ref(), machine);
            out.push(format!("  {name}: {}", held_line(h, now_ms, zone)));
        }
    }
    if rows.iter().any(|r| !r.configured) {
        out.push("* not in the config: found by the live lock in its state dir".to_string());
    }
    out.extend(queue_line(rows, now));
    if let Some(why) = manager_error {
        out.push(format!(
            "service manager: no service manager answers ({why})"
        ));
    }
    out.join("\n")
}

/// A profile `status --all` shows (and `runs --all` and the page read): its state dir, and its
/// settings when they resolve.
pub struct ProfileDir {
    pub name: String,
    /// Named by the config (else found by its live lock only).
    pub configured: bool,
    pub state_dir: std::path::PathBuf,
    pub settings: Option<crate::config::Settings>,
    /// Why its settings do not resolve.
    pub error: Option<String>,
    /// `listen --all` runs it (the one-process unit would).
    pub hosted: bool,
}

/// Every configured profile, then every state dir with a live lock that no configured profile
/// uses.
pub fn profile_dirs(args: &crate::config::ConfigArgs) -> anyhow::Result<Vec<ProfileDir>> {
    // The one read of the config file; every profile asks it.
    let file = ConfigFile::read(args)?;
    // `default` is listed as `listen --all` takes it (`ConfigFile::runs_default`): not when the
    // config's top level names no key of its own (a listener running for it anyway is found by
    // its lock), and, without a config file, as the one profile there is (no one-process unit
    // runs it).
    let default_of_all = file.runs_default();
    let mut out = Vec::new();
    for name in file.profile_names() {
        let hosted = name != crate::config::DEFAULT_PROFILE || default_of_all == Some(true);
        if default_of_all == Some(false) && name == crate::config::DEFAULT_PROFILE {
            continue;
        }
        let (state_dir, settings, error) = match file.settings(Some(&name), KeyFile::Named) {
            Ok(settings) => (settings.state_dir.clone(), Some(settings), None),
            Err(e) => {
                let dir = crate::config::default_state_base(file.env())
                    .unwrap_or_default()
                    .join(&name);
                (dir, None, Some(e.to_string()))
            }
        };
        out.push(ProfileDir {
            name,
            configured: true,
            state_dir,
            settings,
            error,
            hosted,
        });
    }
    for (name, state_dir) in locked_state_dirs() {
        if !out.iter().any(|p| p.state_dir == state_dir) {
            out.push(ProfileDir {
                name,
                configured: false,
                state_dir,
                settings: None,
                error: None,
                hosted: false,
            });
        }
    }
    Ok(out)
}

/// `status --all`: a row per configured profile, then per state dir with a live lock that no
/// configured profile uses. Exit 0 only when every configured profile's listener runs.
pub(super) fn run_all(args: &StatusArgs) -> anyhow::Result<i32> {
    if args.state_dir.is_some()
        || std::env::var_os("AGENTCHAT_STATE_DIR").is_some_and(|v| !v.is_empty())
    {
        anyhow::bail!(
            "--all reads each profile's own state dir; drop --state-dir and unset AGENTCHAT_STATE_DIR"
        );
    }
    let now_ms = i64::try_from(crate::sys::time::unix_ms(SystemTime::now())).unwrap_or(i64::MAX);
    let rows: Vec<(Row, Option<String>)> = profile_dirs(&args.config_args())?
        .into_iter()
        .map(|p| {
            let zone = p.settings.as_ref().and_then(|s| PolicyZone::of(s, now_ms));
            row_for(&p.name, p.configured, p.state_dir, p.error, p.hosted, zone)
        })
        .collect();
    let manager_error = rows.iter().find_map(|(_, e)| e.clone());
    let rows: Vec<Row> = rows.into_iter().map(|(r, _)| r).collect();
    // A config that gives `listen --all` no profile has nothing running as configured.
    let all_running = rows.iter().any(|r| r.configured)
        && rows.iter().filter(|r| r.configured).all(|r| r.running);
    if args.json {
        let out = json!({
            "version": JSON_VERSION,
            "all_running": all_running,
            "service_manager_error": manager_error,
            "profiles": rows,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        let now = SystemTime::now();
        println!(
            "{}",
            render_rows(&rows, manager_error.as_deref(), now, &MachineZone)
        );
        if !rows.iter().any(|r| r.configured) {
            println!(
                "no profile: the config names no [profiles.<name>] table and its top level no \
                 api_key_file of its own (listen --all would run none)"
            );
        }
    }
    Ok(if all_running { 0 } else { 3 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(profile: &str, handle: &str, service: &str, error: Option<&str>) -> Row {
        Row {
            profile: profile.into(),
            configured: profile != "extra",
            state_dir: "/s".into(),
            running: true,
            stale: false,
            handle: Some(handle.into()),
            state: Some("connected".into()),
            since: Some("2026-11-30T11:57:00.123Z".into()),
            last_outcome: Some("completed".into()),
            unit: format!("agentchat-listen-{profile}.service"),
            unit_file: None,
            service: service.into(),
            error: error.map(String::from),
            held: None,
            today: Some(UsageTotals {
                runs: 3,
                cost_usd: 0.25,
                tokens: 0,
                ..UsageTotals::default()
            }),
            zone: None,
        }
    }

    const UTC: crate::core::policy::FixedOffset = crate::core::policy::FixedOffset(0);

    #[test]
    fn the_run_queue_is_listed_under_the_table_in_the_order_it_was_joined() {
        let now = SystemTime::now();
        let at = |ago: u64| crate::sys::time::rfc3339(now - std::time::Duration::from_secs(ago));
        let mut a = row("a", "@a", "not installed", None);
        let mut b = row("b", "@b", "not installed", None);
        let c = row("c", "@c", "not installed", None);
        assert!(!render_rows(&[a.clone(), b.clone()], None, now, &UTC).contains("run queue"));
        for (r, ago) in [(&mut a, 5), (&mut b, 20)] {
            r.state = Some("queued".into());
            r.since = Some(at(ago));
        }
        let text = render_rows(&[a, b, c], None, now, &UTC);
        let last = text.lines().last().unwrap();
        assert!(
            last.starts_with("run queue (2 waiting")
                && last.contains("1. b (since 20 s ago), 2. a (since 5 s ago)"),
            "{text}"
        );
    }

    #[test]
    fn the_all_table_aligns_every_column_and_says_the_managers_error_once() {
        let now = humantime::parse_rfc3339("2026-11-30T12:00:00Z").unwrap();
        let rows = [
            row(
                "default",
                "@a-very-long-handle-indeed",
                "not installed",
                None,
            ),
            row(
                "work",
                "@b",
                "installed, no manager answers",
                Some("bad file"),
            ),
            row("extra", "@c", "not installed", None),
        ];
        let text = render_rows(&rows, Some("Failed to connect to bus"), now, &UTC);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("PROFILE  HANDLE"), "{text}");
        assert_eq!(lines[0], lines[0].to_uppercase(), "{text}");
        // Every column starts where its header does.
        for header in [
            "HANDLE", "LISTENER", "STATE", "SINCE", "LAST RUN", "TODAY", "SERVICE",
        ] {
            let col = lines[0].find(header).unwrap();
            for line in [lines[1], lines[2], lines[4]] {
                let before = line.get(..col).unwrap();
                assert!(before.ends_with("  "), "{header} in {line:?}\n{text}");
                assert_ne!(line.get(col..col + 1), Some(" "), "{header}\n{text}");
            }
        }
        assert!(lines[1].contains("  2 min ago  "), "{text}");
        assert_eq!(lines[3], "  work: bad file");
        assert!(lines[4].starts_with("extra*"), "{text}");
        assert_eq!(
            text.matches("Failed to connect to bus").count(),
            1,
            "{text}"
        );
        assert!(
            text.ends_with(
                "service manager: no service manager answers (Failed to connect to bus)"
            )
        );
    }

    #[test]
    fn a_held_profile_says_its_hold_under_its_row_and_every_row_todays_runs() {
        let now = humantime::parse_rfc3339("2026-11-30T11:30:00Z").unwrap();
        let mut work = row("work", "@w", "not installed", None);
        work.held = Some(Held {
            reason: "quiet_hours".into(),
            key: "quiet_hours".into(),
            until: Some("2026-11-30T12:00:00Z".into()),
            ..Held::default()
        });
        work.today = Some(UsageTotals {
            runs: 2,
            cost_usd: 0.0,
            tokens: 1_500,
            ..UsageTotals::default()
        });
        let mut never = row("new", "@n", "not installed", None);
        never.today = None;
        let rows = [row("default", "@d", "not installed", None), work, never];
        let east = crate::core::policy::FixedOffset(2 * 3600);
        let text = render_rows(&rows, None, now, &east);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[1].contains("  3 runs, $0.25  "), "{text}");
        assert!(lines[2].contains("  2 runs, 1500 tokens  "), "{text}");
        assert_eq!(
            lines[3], "  work: runs wait: quiet hours, until 14:00",
            "{text}"
        );
        assert!(
            lines[4].starts_with("new ") && lines[4].contains("  -  "),
            "{text}"
        );
        assert_eq!(
            lines.len(),
            5,
            "one hold line, for the held row only:\n{text}"
        );
    }

    #[test]
    fn each_held_row_tells_its_end_in_its_own_policy_zone() {
        let now = humantime::parse_rfc3339("2026-11-30T11:30:00Z").unwrap();
        let held = Held {
            reason: "quiet_hours".into(),
            key: "quiet_hours".into(),
            until: Some("2026-11-30T12:00:00Z".into()),
            ..Held::default()
        };
        let zoned = |profile: &str, zone: Option<(&str, i32)>| Row {
            held: Some(held.clone()),
            zone: zone.map(|(name, offset)| PolicyZone {
                name: name.into(),
                offsets: crate::core::policy::OffsetTable::new(offset, vec![]),
            }),
            ..row(profile, "@x", "not installed", None)
        };
        let rows = [
            zoned("berlin", Some(("Europe/Berlin", 3600))),
            zoned("same", Some(("Africa/Cairo", 2 * 3600))),
            zoned("mine", None),
        ];
        let east = crate::core::policy::FixedOffset(2 * 3600);
        let text = render_rows(&rows, None, now, &east);
        for needle in [
            "  berlin: runs wait: quiet hours, until 13:00 Europe/Berlin",
            "  same: runs wait: quiet hours, until 14:00\n",
            "  mine: runs wait: quiet hours, until 14:00",
        ] {
            assert!(text.contains(needle), "missing {needle:?} in\n{text}");
        }
    }
}

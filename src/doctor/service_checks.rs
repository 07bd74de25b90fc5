//! The service checks of `doctor`: whether the installed unit is the one `service install` would
//! write now, and what the user's service manager says of it (`service::ManagerView`).

use super::Check;
use crate::service;
use std::path::{Path, PathBuf};

/// The first line where two unit texts differ, named by its key (`ExecStart=`), never its value
/// (the PATH line is long and may be private).
pub fn first_difference(installed: &str, current: &str) -> Option<String> {
    let mut a = installed.lines();
    let mut b = current.lines();
    loop {
        match (a.next(), b.next()) {
            (None, None) => return (installed != current).then(|| "line endings".to_string()),
            (x, y) if x == y => continue,
            (x, y) => {
                let line = x.or(y).unwrap_or("").trim();
                let key = if let Some((k, _)) = line.split_once('=') {
                    format!("{}=", k.trim())
                } else if line.starts_with('<') {
                    line.chars().take(40).collect()
                } else if line.is_empty() {
                    "an empty line".into()
                } else {
                    line.chars().take(40).collect()
                };
                return Some(key);
            }
        }
    }
}

/// `service`: whether the unit for this profile is installed, and whether it is what
/// `agentchat service print` renders now.
/// "Written" is only the file: `manager` says whether it is enabled and running.
pub fn check_service(
    profile: &str,
    config: Option<&Path>,
    path: &Result<PathBuf, String>,
    installed: Option<&Result<String, String>>,
    current: &Result<String, String>,
    manager: &service::ManagerView,
) -> Check {
    let mut reinstall = "agentchat service install".to_string();
    if profile != "default" {
        reinstall.push_str(&format!(" --profile {profile}"));
    }
    if let Some(c) = config {
        reinstall.push_str(&format!(" --config {}", c.display()));
    }
    let unit = service::systemd_unit_name(profile);
    check_unit(&reinstall, &unit, config, path, installed, current, manager)
}

/// `service` for a profile without a unit of its own while the one-process unit is written: that
/// unit (it runs every profile of its config) against what `service print --one-process` renders.
pub fn check_host_service(
    config: Option<&Path>,
    path: &Result<PathBuf, String>,
    installed: Option<&Result<String, String>>,
    current: &Result<String, String>,
    manager: &service::ManagerView,
) -> Check {
    let mut reinstall = "agentchat service install --all --one-process".to_string();
    if let Some(c) = config {
        reinstall.push_str(&format!(" --config {}", c.display()));
    }
    check_unit(
        &reinstall,
        service::HOST_UNIT,
        config,
        path,
        installed,
        current,
        manager,
    )
    .with("one_process", true)
}

/// The verdict on one written unit: `reinstall` is the command that writes it, `unit` the
/// manager's name for it.
fn check_unit(
    reinstall: &str,
    unit: &str,
    config: Option<&Path>,
    path: &Result<PathBuf, String>,
    installed: Option<&Result<String, String>>,
    current: &Result<String, String>,
    manager: &service::ManagerView,
) -> Check {
    let path = match path {
        Ok(p) => p,
        Err(e) => {
            return Check::warn(
                "service",
                format!("cannot tell where the unit would be: {e}"),
            );
        }
    };
    let p = path.display();
    let c = match installed {
        None => Check::pass(
            "service",
            format!("not installed ({p}); `{reinstall}` runs the listener at login"),
        )
        .with("installed", false),
        Some(Err(e)) => Check::warn(
            "service",
            format!("cannot read the installed unit {p}: {e}"),
        )
        .with("installed", true),
        Some(Ok(text)) => match current {
            Ok(now) if now == text => manager_check(reinstall, unit, &p.to_string(), manager)
                .with("installed", true)
                .with("current", true),
            Ok(now) => {
                let diff = first_difference(text, now).unwrap_or_default();
                let hint = if config.is_none()
                    && (diff.starts_with("ExecStart") || diff.starts_with("<string>"))
                {
                    " (if it was installed with --config, give doctor the same --config)"
                } else {
                    ""
                };
                Check::warn(
                    "service",
                    format!(
                        "written at {p} but it differs from what `agentchat service print` \
                         renders now (first difference: `{diff}`); reinstall: `{reinstall}`{hint}"
                    ),
                )
            }
            .with("installed", true)
            .with("current", false),
            Err(e) => Check::warn(
                "service",
                format!("written at {p}; cannot render the current unit: {e}"),
            )
            .with("installed", true),
        },
    };
    c.with("path", p.to_string())
}

/// A written, current unit: PASS only when the manager runs it (or was not asked); facts
/// `enabled` and `running` are what the manager said (absent when it was not asked).
fn manager_check(reinstall: &str, unit: &str, path: &str, manager: &service::ManagerView) -> Check {
    use service::ManagerView;
    match manager {
        ManagerView::NotAsked => Check::pass(
            "service",
            format!("written and current ({path}); {}", manager.describe()),
        ),
        ManagerView::Unreachable(why) => Check::warn(
            "service",
            format!(
                "written at {path} but no service manager answers ({why}), so it is not \
                 running; run `agentchat listen` in a terminal, or see `agentchat service status`"
            ),
        ),
        ManagerView::Answered {
            enabled, running, ..
        } => {
            let facts = |c: Check| c.with("enabled", *enabled).with("running", *running);
            let detail = format!("{path}; {}", manager.describe());
            facts(match (enabled, running) {
                (true, true) => Check::pass(
                    "service",
                    format!("written, enabled and running ({detail})"),
                ),
                (_, false) => Check::warn(
                    "service",
                    format!(
                        "written but not running ({detail}): see `agentchat service status` and \
                         the listener's log (`journalctl --user -u {unit}`)"
                    ),
                ),
                (false, true) => Check::warn(
                    "service",
                    format!(
                        "running but not enabled, so it will not start at login ({detail}): \
                         `{reinstall}` again"
                    ),
                ),
            })
        }
    }
}

//! What the service manager says about a profile's unit: `service status`, and the view doctor
//! and `status` report.

use super::systemd::{booted_with_systemd, systemctl_word, systemd_user_manager};
use super::{
    ServiceKind, file_name, install::run_manager, launchd_label, systemd_unit_name, target,
};
use crate::service::no_user_manager_advice;
use std::process::Command;

/// What the service manager says about a profile's unit: the three things `service status` and
/// `doctor` tell apart from "the unit file is written".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManagerView {
    /// `AGENTCHAT_SERVICE_DIR` is set: the manager is never asked.
    NotAsked,
    /// No service manager answered; why, as its tool said it.
    Unreachable(String),
    /// The manager's answer. `enabled`: it starts at login (systemd `is-enabled`; launchd: the
    /// agent is loaded). `running`: the listener runs now. The words are the manager's own.
    Answered {
        enabled: bool,
        running: bool,
        enabled_word: String,
        active_word: String,
    },
}

impl ManagerView {
    /// `enabled: …` and `running: …` lines for `service status` (and doctor's detail).
    pub fn describe(&self) -> String {
        match self {
            ManagerView::NotAsked => {
                "service manager not asked (AGENTCHAT_SERVICE_DIR is set)".to_string()
            }
            ManagerView::Unreachable(why) => format!("no service manager answers ({why})"),
            ManagerView::Answered {
                enabled,
                running,
                enabled_word,
                active_word,
            } => format!(
                "enabled: {} ({enabled_word}); running: {} ({active_word})",
                if *enabled { "yes" } else { "no" },
                if *running { "yes" } else { "no" },
            ),
        }
    }
}

/// Asks the service manager about `profile`'s unit (nothing when `AGENTCHAT_SERVICE_DIR` is set).
pub fn manager_view(kind: ServiceKind, profile: &str) -> ManagerView {
    view_of(kind, &unit_of(kind, profile))
}

/// Asks the service manager about the one-process unit (`service install --all --one-process`).
pub fn host_manager_view(kind: ServiceKind) -> ManagerView {
    view_of(kind, &super::host::host_unit(kind))
}

/// The profile's systemd unit or launchd label.
fn unit_of(kind: ServiceKind, profile: &str) -> String {
    match kind {
        ServiceKind::Systemd => systemd_unit_name(profile),
        ServiceKind::Launchd => launchd_label(profile),
    }
}

/// Asks the service manager about `unit` (a systemd unit, or a launchd label).
fn view_of(kind: ServiceKind, unit: &str) -> ManagerView {
    if std::env::var_os("AGENTCHAT_SERVICE_DIR").is_some() {
        return ManagerView::NotAsked;
    }
    match kind {
        ServiceKind::Systemd => {
            if let Err(why) = systemd_user_manager() {
                return ManagerView::Unreachable(why);
            }
            let enabled_word = systemctl_word("is-enabled", unit);
            let active_word = systemctl_word("is-active", unit);
            ManagerView::Answered {
                enabled: matches!(enabled_word.as_str(), "enabled" | "enabled-runtime"),
                running: matches!(active_word.as_str(), "active" | "reloading"),
                enabled_word,
                active_word,
            }
        }
        ServiceKind::Launchd => {
            let domain = format!("gui/{}", crate::sys::process::current_uid());
            if let Err(e) = run_manager("launchctl", &["print", &domain]) {
                return ManagerView::Unreachable(format!("{e:#}"));
            }
            match run_manager("launchctl", &["print", &format!("{domain}/{unit}")]) {
                Ok(text) => {
                    let running = text.lines().any(|l| l.trim() == "state = running");
                    ManagerView::Answered {
                        enabled: true,
                        running,
                        enabled_word: "loaded".into(),
                        active_word: if running { "running" } else { "not running" }.into(),
                    }
                }
                Err(_) => ManagerView::Answered {
                    enabled: false,
                    running: false,
                    enabled_word: "not loaded".into(),
                    active_word: "not running".into(),
                },
            }
        }
    }
}

/// `service status`: whether the unit is written, enabled and running, then the manager's own view.
/// A profile without a unit of its own, while the one-process unit is written, is shown that unit
/// (it runs the profile, if the config names it).
///
/// Exit codes follow `systemctl status` (and LSB): 0 running, 3 not running (written, or enabled,
/// but nothing runs it, or no manager answers to run it), 4 no such unit (not written).
pub(super) fn status(kind: ServiceKind, profile: &str) -> anyhow::Result<i32> {
    let target = target(kind)?;
    let own = target.dir.join(file_name(kind, profile));
    let host = target.dir.join(super::host::host_file_name(kind));
    if !own.exists() && host.exists() {
        println!(
            "profile {profile}: no unit of its own; the one-process unit runs every profile of \
             its config:"
        );
        return host_status(kind);
    }
    status_of(kind, &own, &unit_of(kind, profile))
}

/// `service status --one-process`: the one-process unit's status, as a profile's.
pub(super) fn host_status(kind: ServiceKind) -> anyhow::Result<i32> {
    let target = target(kind)?;
    let path = target.dir.join(super::host::host_file_name(kind));
    status_of(kind, &path, &super::host::host_unit(kind))
}

/// The status of the unit written at `path` whose manager's name is `unit`.
fn status_of(kind: ServiceKind, path: &std::path::Path, unit: &str) -> anyhow::Result<i32> {
    let is_written = path.exists();
    let written = if is_written { "written" } else { "not written" };
    println!("unit: {} ({written})", path.display());
    let view = view_of(kind, unit);
    match &view {
        ManagerView::Answered {
            enabled,
            running,
            enabled_word,
            active_word,
        } => {
            let yes = |b: &bool| if *b { "yes" } else { "no" };
            println!("enabled: {} ({enabled_word})", yes(enabled));
            println!("running: {} ({active_word})", yes(running));
        }
        other => println!("manager: {}", other.describe()),
    }
    if let ManagerView::Unreachable(_) = view
        && kind == ServiceKind::Systemd
    {
        println!("{}", no_user_manager_advice(booted_with_systemd()));
    }
    let code = status_code(is_written, &view);
    if !matches!(view, ManagerView::Answered { .. }) {
        return Ok(code);
    }
    let answer = match kind {
        ServiceKind::Systemd => Command::new("systemctl")
            .args(["--user", "status", "--no-pager", unit])
            .output(),
        ServiceKind::Launchd => Command::new("launchctl")
            .args([
                "print",
                &format!("gui/{}/{unit}", crate::sys::process::current_uid()),
            ])
            .output(),
    };
    match answer {
        Ok(out) => print!("{}", String::from_utf8_lossy(&out.stdout)),
        Err(e) => println!("cannot ask the service manager: {e}"),
    }
    Ok(code)
}

/// `service status`'s exit code (see [`status`]). Without a manager to ask
/// (`AGENTCHAT_SERVICE_DIR`), a written unit is all there is to tell: 0.
pub fn status_code(written: bool, view: &ManagerView) -> i32 {
    match view {
        _ if !written => 4,
        ManagerView::NotAsked => 0,
        ManagerView::Answered { running: true, .. } => 0,
        ManagerView::Answered { .. } | ManagerView::Unreachable(_) => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_follow_systemctl_three_not_running_four_no_such_unit() {
        let answered = |running| ManagerView::Answered {
            enabled: true,
            running,
            enabled_word: "enabled".into(),
            active_word: "x".into(),
        };
        assert_eq!(status_code(true, &answered(true)), 0);
        assert_eq!(status_code(true, &answered(false)), 3);
        assert_eq!(
            status_code(true, &ManagerView::Unreachable("no bus".into())),
            3
        );
        assert_eq!(status_code(false, &answered(false)), 4);
        assert_eq!(status_code(false, &ManagerView::NotAsked), 4);
        assert_eq!(status_code(true, &ManagerView::NotAsked), 0);
    }
}

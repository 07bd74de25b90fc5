//! The always-on service: `agentchat service install` for the profile (the command itself, so its
//! checks and its undo of a refused install apply), then a check that the manager runs it. Where
//! no user manager runs, setup says what to do instead and goes on.

use super::manifest::Manifest;
use crate::service::{self, ManagerView, ServiceKind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How long setup waits for the manager to say the listener runs.
const COME_UP: Duration = Duration::from_secs(15);

/// The path the user ran agentchat by (`service::stable_program`): the subprocess gets it as its
/// `argv[0]`, so the unit it writes is the one `service print` and `doctor` render from a shell.
fn exe() -> anyhow::Result<PathBuf> {
    crate::service::stable_exe()
}

fn profile_args<'a>(profile: &'a str, config: Option<&'a Path>) -> Vec<String> {
    let mut args = vec!["--profile".to_string(), profile.to_string()];
    if let Some(c) = config {
        args.push("--config".into());
        args.push(c.display().to_string());
    }
    args
}

/// Whether the unit on disk is the one `service install` would write now, and the manager runs it.
fn already_installed(profile: &str, config: Option<&Path>) -> bool {
    let kind = ServiceKind::native();
    let (Ok(path), Ok(text)) = (
        service::unit_path(kind, profile),
        service::render_current(kind, profile, config.map(Path::to_path_buf)),
    ) else {
        return false;
    };
    let current = std::fs::read_to_string(path).is_ok_and(|t| t == text);
    current
        && match service::manager_view(kind, profile) {
            ManagerView::NotAsked => true,
            ManagerView::Answered { running, .. } => running,
            ManagerView::Unreachable(_) => false,
        }
}

/// Installs (or finds installed) the profile's service: its own unit, or, where the one-process
/// unit runs this config (`service install --all --one-process`), that unit with the profile
/// added. Returns the screen's lines and whether anything changed.
pub fn install(
    profile: &str,
    config: Option<&Path>,
    manifest: &mut Manifest,
) -> (Vec<String>, bool) {
    match service::host_runs_config(ServiceKind::native(), config) {
        Ok(None) => {}
        Ok(Some(true)) => return into_host(profile, config),
        Ok(Some(false)) => {
            return (
                vec![
                    format!(
                        "service: not installed: the one-process unit ({}) runs another \
                         config's profiles, and a unit of this profile's own beside it would be \
                         a second listener",
                        service::host_unit(ServiceKind::native())
                    ),
                    format!(
                        "  Until then run the listener yourself: `agentchat listen --profile \
                         {profile}`"
                    ),
                ],
                false,
            );
        }
        Err(e) => return (vec![format!("service: not installed: {e:#}")], false),
    }
    if already_installed(profile, config) {
        return (
            vec!["service: already installed and current".to_string()],
            false,
        );
    }
    let out = exe().and_then(|exe| {
        Ok(std::process::Command::new(exe)
            .arg("service")
            .arg("install")
            .args(profile_args(profile, config))
            .stdin(std::process::Stdio::null())
            .output()?)
    });
    let out = match out {
        Ok(o) => o,
        Err(e) => return (vec![format!("service: not installed: {e:#}")], false),
    };
    if !out.status.success() {
        let mut lines = vec![format!(
            "service: not installed (setup goes on without it). `agentchat service install` said:"
        )];
        lines.extend(said(&out.stderr));
        lines.push(format!(
            "  Until then run the listener yourself: `agentchat listen --profile {profile}`"
        ));
        return (lines, false);
    }
    manifest.service = true;
    let mut lines = vec!["service: installed".to_string()];
    lines.extend(said(&out.stdout));
    lines.push(came_up(profile));
    (lines, true)
}

/// The one-process unit runs this config: `service install --all --one-process` again, which
/// rewrites it for the profiles the config names now (this one included: the config step wrote
/// it) and reloads a running host, so the profile starts in that process. Undo takes the profile
/// out of the config and does the same again (`out_of_host`), so the manifest records no service
/// of the profile's own.
fn into_host(profile: &str, config: Option<&Path>) -> (Vec<String>, bool) {
    let kind = ServiceKind::native();
    let unit = service::host_unit(kind);
    let current = service::render_host_current(kind, config.map(Path::to_path_buf))
        .ok()
        .zip(
            service::host_unit_path(kind)
                .ok()
                .and_then(|p| std::fs::read_to_string(p).ok()),
        )
        .is_some_and(|(now, written)| now == written);
    let running = match service::host_manager_view(kind) {
        ManagerView::NotAsked => true,
        ManagerView::Answered { running, .. } => running,
        ManagerView::Unreachable(_) => false,
    };
    if current && running {
        return (
            vec![format!(
                "service: profile `{profile}` runs in the one-process unit {unit}, already current"
            )],
            false,
        );
    }
    let out = match install_host(config) {
        Ok(o) => o,
        Err(e) => return (vec![format!("service: not added to {unit}: {e:#}")], false),
    };
    if !out.status.success() {
        let mut lines = vec![format!(
            "service: profile `{profile}` not added to the one-process unit {unit} (setup goes \
             on without it). `agentchat service install --all --one-process` said:"
        )];
        lines.extend(said(&out.stderr));
        return (lines, false);
    }
    let mut lines = vec![format!(
        "service: profile `{profile}` added to the one-process unit {unit}"
    )];
    lines.extend(said(&out.stdout));
    lines.extend(said(&out.stderr));
    lines.push(match service::host_manager_view(kind) {
        ManagerView::NotAsked => {
            "  not checked: AGENTCHAT_SERVICE_DIR is set (no manager asked)".into()
        }
        ManagerView::Answered { running: true, .. } => {
            "  running: the manager runs the host".into()
        }
        view => format!(
            "  the host is not running: {}; see `agentchat service status --one-process`",
            view.describe()
        ),
    });
    (lines, true)
}

/// `agentchat service install --all --one-process [--config F]`: the one-process unit rewritten
/// for the profiles the config names now, and a running host reloaded.
fn install_host(config: Option<&Path>) -> anyhow::Result<std::process::Output> {
    let mut argv = vec!["service", "install", "--all", "--one-process"];
    let named = config.map(|c| c.display().to_string());
    if let Some(c) = &named {
        argv.extend(["--config", c]);
    }
    Ok(std::process::Command::new(exe()?)
        .args(&argv)
        .stdin(std::process::Stdio::null())
        .output()?)
}

/// Whether the one-process unit runs this config, asked before undo changes the config (a
/// config undo removes entirely can no longer be compared).
pub fn host_runs(config: Option<&Path>) -> bool {
    matches!(
        service::host_runs_config(ServiceKind::native(), config),
        Ok(Some(true))
    )
}

/// Undo's half of `into_host`: after the config lost the profile, the one-process unit that
/// runs it is installed again the same way, so the running host drops the profile now rather
/// than at its next reload. A failure is said with what to do; the undo itself stands.
pub fn out_of_host(profile: &str, config: Option<&Path>) -> Vec<String> {
    let unit = service::host_unit(ServiceKind::native());
    match install_host(config) {
        Ok(out) if out.status.success() => {
            let mut lines = vec![format!(
                "service: profile `{profile}` taken out of the one-process unit {unit} (reloaded)"
            )];
            lines.extend(said(&out.stdout));
            lines.extend(said(&out.stderr));
            lines
        }
        Ok(out) => {
            let mut lines = vec![format!(
                "service: the one-process unit {unit} was not reloaded; it runs profile \
                 `{profile}` until its next reload or stop (`agentchat service uninstall --all \
                 --one-process` when no profile is left). `agentchat service install --all \
                 --one-process` said:"
            )];
            lines.extend(said(&out.stderr));
            lines
        }
        Err(e) => vec![format!(
            "service: the one-process unit {unit} was not reloaded: {e:#}"
        )],
    }
}

/// A subprocess's output as indented lines, without its `agentchat service: ` prefix.
fn said(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes)
        .lines()
        .map(|l| format!("  {}", l.trim_start_matches("agentchat service: ")))
        .collect()
}

/// Waits (briefly) for the manager to run the listener.
fn came_up(profile: &str) -> String {
    let kind = ServiceKind::native();
    let deadline = Instant::now() + COME_UP;
    loop {
        match service::manager_view(kind, profile) {
            ManagerView::NotAsked => {
                return "  not checked: AGENTCHAT_SERVICE_DIR is set (no manager asked)".into();
            }
            ManagerView::Answered { running: true, .. } => {
                return "  running: the manager started the listener".into();
            }
            view if Instant::now() >= deadline => {
                return format!(
                    "  not running after {} s: {}; see `agentchat service status --profile \
                     {profile}`",
                    COME_UP.as_secs(),
                    view.describe()
                );
            }
            _ => std::thread::sleep(Duration::from_millis(250)),
        }
    }
}

/// `agentchat service uninstall` for the profile.
pub fn uninstall(profile: &str) -> String {
    let out = exe().and_then(|exe| {
        Ok(std::process::Command::new(exe)
            .args(["service", "uninstall", "--profile", profile])
            .stdin(std::process::Stdio::null())
            .output()?)
    });
    match out {
        Ok(o) if o.status.success() => format!(
            "service: {}",
            String::from_utf8_lossy(&o.stdout)
                .trim()
                .replace('\n', "; ")
        ),
        Ok(o) => format!(
            "service: could not uninstall: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        ),
        Err(e) => format!("service: could not uninstall: {e:#}"),
    }
}

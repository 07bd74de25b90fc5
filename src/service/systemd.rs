//! The systemd user unit: a template, `agentchat-listen@.service` (the instance is the profile),
//! written as shipped, and per profile a drop-in with what is that install's own (the binary's
//! path, the config, PATH and XDG_*, the stop timeout); quoting for a command line and
//! `Environment=`; and whether a user manager answers, and lingers, to run it.

use super::UnitSpec;
use std::path::Path;
use std::process::Command;

/// The template unit, written unchanged by every install.
pub const TEMPLATE: &str = include_str!("../../systemd/agentchat-listen@.service");
/// Its file name.
pub const TEMPLATE_NAME: &str = "agentchat-listen@.service";
const DROP_IN_TEMPLATE: &str = include_str!("../../systemd/install.conf");
/// The drop-in's name inside `agentchat-listen@<profile>.service.d/`.
pub const DROP_IN_NAME: &str = "install.conf";

/// `agentchat-listen@<profile>.service`.
pub fn systemd_unit_name(profile: &str) -> String {
    format!("agentchat-listen@{profile}.service")
}

/// The drop-in's path below the unit dir: `agentchat-listen@<profile>.service.d/install.conf`.
pub fn drop_in_file(profile: &str) -> String {
    format!("{}.d/{DROP_IN_NAME}", systemd_unit_name(profile))
}

/// The profile of a drop-in dir's name (`agentchat-listen@<profile>.service.d`), if it is one.
pub fn profile_of_drop_in_dir(name: &str) -> Option<&str> {
    name.strip_prefix("agentchat-listen@")?
        .strip_suffix(".service.d")
        .filter(|p| !p.is_empty())
}

/// The unit file of earlier versions, one per profile (`agentchat-listen.service`,
/// `agentchat-listen-<profile>.service`), which `install` replaces.
pub fn legacy_unit_name(profile: &str) -> String {
    if profile == "default" {
        "agentchat-listen.service".into()
    } else {
        format!("agentchat-listen-{profile}.service")
    }
}

/// Quotes one argument for a systemd command line: always double-quoted, with `\`, `"` escaped and
/// `$`/`%` doubled so systemd expands nothing.
pub(super) fn systemd_quote(arg: &str) -> String {
    quote_for_systemd(arg, true)
}

/// Quotes one `Environment=` assignment: double-quoted with `\` and `"` escaped and `%` doubled
/// (specifiers are expanded there). Unlike a command line, `$` means nothing in `Environment=`
/// (systemd.exec(5)), so it stays single.
pub(super) fn systemd_env_quote(assignment: &str) -> String {
    quote_for_systemd(assignment, false)
}

/// The one quoting both use; `double_dollar` is what tells a command line from `Environment=`.
fn quote_for_systemd(text: &str, double_dollar: bool) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '$' if double_dollar => out.push_str("$$"),
            '%' => out.push_str("%%"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The drop-in's text for `spec`.
pub(super) fn render(spec: &UnitSpec) -> String {
    let exec: Vec<String> = spec
        .listen_args()
        .iter()
        .map(|a| systemd_quote(a))
        .collect();
    DROP_IN_TEMPLATE
        .replace("{{PROFILE}}", &spec.profile)
        .replace("{{UNIT}}", &systemd_unit_name(&spec.profile))
        .replace("{{EXEC_START}}", &exec.join(" "))
        .replace(
            "{{TIMEOUT_STOP_SEC}}",
            &spec.stop_timeout_secs().to_string(),
        )
        .replace(
            "{{ENVIRONMENT}}",
            &spec
                .environment()
                .iter()
                .map(|(k, v)| format!("Environment={}", systemd_env_quote(&format!("{k}={v}"))))
                .collect::<Vec<_>>()
                .join("\n"),
        )
}

/// Whether this machine was booted with systemd (sd_booted(3): `/run/systemd/system` exists).
pub(super) fn booted_with_systemd() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Whether the user's systemd manager answers (`systemctl --user show-environment`, which any
/// running manager answers and which changes nothing). The error is systemctl's own words.
pub(super) fn systemd_user_manager() -> Result<(), String> {
    match Command::new("systemctl")
        .args(["--user", "show-environment"])
        .output()
    {
        Ok(out) if out.status.success() => Ok(()),
        // Not stdout: it lists the manager's environment, which is not ours to print.
        Ok(out) => Err(match String::from_utf8_lossy(&out.stderr).trim() {
            "" => format!("`systemctl --user` exited with {}", out.status),
            why => format!("`systemctl --user`: {why}"),
        }),
        Err(e) => Err(format!("cannot run systemctl: {e}")),
    }
}

/// What to do when no systemd user manager answers. `booted`: whether the machine runs systemd
/// at all (without it no user manager can ever run, so only the terminal is left).
pub fn no_user_manager_advice(booted: bool) -> String {
    if booted {
        "A user service needs your systemd user manager, which starts with a login session. \
         Run `loginctl enable-linger $USER` to keep it running without one, log in again \
         (ssh or `machinectl shell $USER@`: `su` and `sudo` do not reach it; if the manager \
         runs, `export XDG_RUNTIME_DIR=/run/user/$(id -u)` does), then `agentchat service \
         install` again. Or run `agentchat listen` in a terminal instead."
            .to_string()
    } else {
        "This machine does not run systemd (no /run/systemd/system), so there is no user \
         service manager to install into. Run `agentchat listen` in a terminal (or under tmux, \
         screen or your own supervisor) instead."
            .to_string()
    }
}

/// Whether the user's manager lingers (`loginctl show-user UID -p Linger`): `Some(false)` means
/// it stops, and the listener with it, when the user's last session ends. `None`: logind did
/// not answer.
pub fn linger() -> Option<bool> {
    let uid = crate::sys::process::current_uid().to_string();
    let out = Command::new("loginctl")
        .args(["show-user", &uid, "--property=Linger", "--value"])
        .output()
        .ok()?;
    match String::from_utf8_lossy(&out.stdout).trim() {
        "yes" => Some(true),
        "no" => Some(false),
        // logind knows no session of this user ("not logged in or lingering"), or did not
        // answer: its own record on disk says, where systemd runs.
        _ => booted_with_systemd().then(|| linger_file_exists(&uid)),
    }
}

/// logind's record of a lingering user: `/var/lib/systemd/linger/<user name>`.
fn linger_file_exists(uid: &str) -> bool {
    let name = std::env::var("USER")
        .ok()
        .or_else(|| std::env::var("LOGNAME").ok())
        .unwrap_or_else(|| uid.to_string());
    Path::new("/var/lib/systemd/linger").join(name).exists()
}

/// What to tell the user when their manager does not linger.
pub fn linger_advice() -> String {
    "linger is off: your systemd user manager, and the listener with it, stops when your last \
     session ends (logout, the end of an ssh session); to keep it running, run `loginctl \
     enable-linger $USER`"
        .to_string()
}

/// A systemctl query whose answer is one word on stdout (`is-enabled`, `is-active`); the word,
/// or `unknown` when it printed none.
pub(super) fn systemctl_word(verb: &str, unit: &str) -> String {
    Command::new("systemctl")
        .args(["--user", verb, unit])
        .output()
        .ok()
        .and_then(|out| {
            let word = String::from_utf8_lossy(&out.stdout).trim().to_string();
            (!word.is_empty()).then_some(word)
        })
        .unwrap_or_else(|| "unknown".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_assignment_keeps_dollars_and_escapes_what_systemd_unquotes() {
        assert_eq!(
            systemd_env_quote(r#"PATH=/opt/a$b:/x"y\z:/100%"#),
            r#""PATH=/opt/a$b:/x\"y\\z:/100%%""#
        );
    }

    #[test]
    fn the_advice_without_a_user_manager_fits_whether_systemd_runs_at_all() {
        let booted = no_user_manager_advice(true);
        assert!(booted.contains("loginctl enable-linger"), "{booted}");
        assert!(booted.contains("agentchat listen"), "{booted}");
        let not_booted = no_user_manager_advice(false);
        assert!(not_booted.contains("does not run systemd"), "{not_booted}");
        assert!(!not_booted.contains("loginctl"), "{not_booted}");
        assert!(not_booted.contains("agentchat listen"), "{not_booted}");
    }
}

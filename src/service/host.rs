//! The one unit for the host: `agentchat listen --all` (every profile of the config in one
//! process) as one non-template unit, `agentchat-host.service` (launchd: the agent
//! `me.agentchat.listen-host`), written by `service install --all --one-process`.
//!
//! It and the per-profile units (`agentchat-listen@<profile>.service`) never run side by side:
//! each would hold a listener for the same agents, and the second to start would exit 75 on the
//! agent's lock (one listener per agent per machine). So installing either refuses while the other
//! is written or running, and says how to switch (docs/decisions.md).

use super::systemd::{systemd_env_quote, systemd_quote};
use super::{ServiceKind, Target, launchd_label, systemd_unit_name};
use crate::config::LAUNCHD_LABEL_PREFIX;
use std::path::{Path, PathBuf};

const SYSTEMD_TEMPLATE: &str = include_str!("../../systemd/agentchat-host.service");
const LAUNCHD_TEMPLATE: &str = include_str!("../../launchd/me.agentchat.listen-host.plist");

/// The host's systemd unit.
pub const HOST_UNIT: &str = "agentchat-host.service";

/// The open-files limit is never set above this: systemd's default hard limit for services
/// (since 240), which a user manager cannot raise.
const NOFILE_CEILING: u64 = 524_288;

/// `me.agentchat.listen-host`: it starts with the listener's prefix, so the listener knows it runs
/// under launchd (`core::exit::code`), and no profile's label
/// (`me.agentchat.listen.<profile>`) can be it.
pub fn host_label() -> String {
    format!("{LAUNCHD_LABEL_PREFIX}-host")
}

/// The host's unit name for `kind`: the systemd unit, or the launchd label.
pub fn host_unit(kind: ServiceKind) -> String {
    match kind {
        ServiceKind::Systemd => HOST_UNIT.to_string(),
        ServiceKind::Launchd => host_label(),
    }
}

/// The host's file below the unit dir.
pub fn host_file_name(kind: ServiceKind) -> String {
    match kind {
        ServiceKind::Systemd => HOST_UNIT.to_string(),
        ServiceKind::Launchd => format!("{}.plist", host_label()),
    }
}

/// Everything the host's unit needs; `render` turns it into the file's text.
#[derive(Debug, Clone)]
pub struct HostSpec {
    /// Absolute path of the `agentchat` binary (as `UnitSpec::program`).
    pub program: PathBuf,
    pub config: Option<PathBuf>,
    pub path_env: String,
    pub xdg_env: Vec<(String, String)>,
    /// The profiles the config names now (the host re-reads them on SIGHUP).
    pub profiles: Vec<String>,
    /// The largest `listen.kill_grace` of those profiles, in whole seconds.
    pub kill_grace_secs: u64,
    /// launchd's log file.
    pub log_path: PathBuf,
}

impl HostSpec {
    pub fn listen_args(&self) -> Vec<String> {
        let mut args = vec![
            self.program.display().to_string(),
            "listen".into(),
            "--all".into(),
        ];
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.display().to_string());
        }
        args
    }

    pub fn environment(&self) -> Vec<(String, String)> {
        super::unit_environment(&self.path_env, &self.xdg_env)
    }

    /// What the systemd unit's ExecReload runs before its SIGHUP: `install --all --one-process
    /// --refresh` for the same config.
    pub fn refresh_args(&self) -> Vec<String> {
        let mut args = vec![
            self.program.display().to_string(),
            "service".into(),
            "install".into(),
            "--all".into(),
            "--one-process".into(),
            "--refresh".into(),
        ];
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.display().to_string());
        }
        args
    }

    /// The largest run grace plus the room a profile's unit leaves (`super::stop_timeout_secs`).
    pub fn stop_timeout_secs(&self) -> u64 {
        super::stop_timeout_secs(self.kill_grace_secs)
    }

    pub fn limit_nofile(&self) -> u64 {
        limit_nofile(self.profiles.len())
    }
}

/// The open-files limit for `profiles` profiles: each holds its socket, two lock files and a
/// pooled REST connection, and a run adds stdin, stdout, stderr and its log files; 16 per profile
/// leaves room for both, 1024 is the process's own (the metrics endpoint's clients, the journal,
/// the runtime). Rounded up to a multiple of 1024, at least 8192 so profiles added by a reload
/// fit, at most `NOFILE_CEILING`. The listener raises its soft limit to the hard one.
pub fn limit_nofile(profiles: usize) -> u64 {
    let wanted = u64::try_from(profiles)
        .unwrap_or(u64::MAX)
        .saturating_mul(16)
        .saturating_add(1024);
    wanted
        .div_ceil(1024)
        .saturating_mul(1024)
        .clamp(8192, NOFILE_CEILING)
}

/// The host's unit text for `kind`.
pub fn render(kind: ServiceKind, spec: &HostSpec) -> String {
    match kind {
        ServiceKind::Systemd => {
            let exec: Vec<String> = spec
                .listen_args()
                .iter()
                .map(|a| systemd_quote(a))
                .collect();
            let env = spec
                .environment()
                .iter()
                .map(|(k, v)| format!("Environment={}", systemd_env_quote(&format!("{k}={v}"))))
                .collect::<Vec<_>>()
                .join("\n");
            let refresh: Vec<String> = spec
                .refresh_args()
                .iter()
                .map(|a| systemd_quote(a))
                .collect();
            SYSTEMD_TEMPLATE
                .replace("{{EXEC_START}}", &exec.join(" "))
                .replace("{{REFRESH}}", &refresh.join(" "))
                .replace(
                    "{{TIMEOUT_STOP_SEC}}",
                    &spec.stop_timeout_secs().to_string(),
                )
                .replace("{{PROFILES}}", &spec.profiles.len().to_string())
                .replace("{{LIMIT_NOFILE}}", &spec.limit_nofile().to_string())
                .replace("{{ENVIRONMENT}}", &env)
        }
        ServiceKind::Launchd => {
            let x = super::launchd::xml_escape;
            let args: Vec<String> = spec
                .listen_args()
                .iter()
                .map(|a| format!("    <string>{}</string>", x(a)))
                .collect();
            let env = spec
                .environment()
                .iter()
                .map(|(k, v)| format!("    <key>{}</key>\n    <string>{}</string>", x(k), x(v)))
                .collect::<Vec<_>>()
                .join("\n");
            LAUNCHD_TEMPLATE
                .replace("{{PROFILES}}", &spec.profiles.len().to_string())
                .replace("{{LABEL}}", &x(&host_label()))
                .replace("{{PROGRAM_ARGUMENTS}}", &args.join("\n"))
                .replace("{{ENVIRONMENT}}", &env)
                .replace("{{EXIT_TIMEOUT}}", &spec.stop_timeout_secs().to_string())
                .replace("{{LIMIT_NOFILE}}", &spec.limit_nofile().to_string())
                .replace("{{LOG_PATH}}", &x(&spec.log_path.display().to_string()))
        }
    }
}

/// The host's spec for the config `config` (the `--config` flag): the install's facts as a
/// profile's unit takes them, the profiles `listen --all` will run (`config::ConfigFile::all`: every
/// `[profiles.<name>]`, and `default` when the top level names a key of its own), and their
/// largest run grace. Beside it, what would keep a profile from starting, one line each.
pub(super) fn host_spec(config: Option<&Path>) -> anyhow::Result<(HostSpec, Vec<String>)> {
    let unit = super::UnitConfig::read(config)?;
    let base = super::spec_for(crate::config::DEFAULT_PROFILE, &unit)?;
    let set = unit.file()?.all()?;
    let mut problems = Vec::new();
    let mut grace = None;
    for (name, settings) in &set.profiles {
        match settings {
            Ok(s) => {
                grace = grace.max(Some(s.listen.kill_grace));
                if s.key_source == crate::config::KeySource::Missing {
                    problems.push(format!(
                        "profile `{name}` has no API key (set its `api_key_file`): it will not \
                         start"
                    ));
                }
            }
            Err(e) => problems.push(format!("profile `{name}` will not start: {e}")),
        }
    }
    let kill_grace_secs = grace.map_or(base.kill_grace_secs, super::whole_secs);
    let log_path = base.log_path.with_file_name("agentchat-host.log");
    let spec = HostSpec {
        program: base.program,
        config: base.config,
        path_env: base.path_env,
        xdg_env: base.xdg_env,
        profiles: set.profiles.into_iter().map(|(name, _)| name).collect(),
        kill_grace_secs,
        log_path,
    };
    Ok((spec, problems))
}

/// Whether the host's unit is in the way of a profile's own unit: written in the unit dir, or
/// (when the manager is asked) loaded and not inactive. What is in the way, for the message.
pub(super) fn host_in_the_way(kind: ServiceKind, target: &Target) -> Option<String> {
    let path = target.dir.join(host_file_name(kind));
    if path.exists() {
        return Some(format!("{} is written", path.display()));
    }
    if !target.dry_run && kind == ServiceKind::Systemd {
        let active = super::systemd::systemctl_word("is-active", HOST_UNIT);
        if matches!(
            active.as_str(),
            "active" | "activating" | "reloading" | "deactivating"
        ) {
            return Some(format!("{HOST_UNIT} is {active}"));
        }
    }
    None
}

/// The per-profile units of `profiles` that are written in the unit dir or (when the manager is
/// asked) running: each would be a second listener beside the host's.
pub(super) fn profile_units_in_the_way(
    kind: ServiceKind,
    target: &Target,
    profiles: &[String],
) -> Vec<String> {
    let mut found = Vec::new();
    for p in profiles {
        let own = target.dir.join(super::file_name(kind, p));
        let legacy = target.dir.join(super::systemd::legacy_unit_name(p));
        if own.exists() || (kind == ServiceKind::Systemd && legacy.exists()) {
            found.push(match kind {
                ServiceKind::Systemd => systemd_unit_name(p),
                ServiceKind::Launchd => launchd_label(p),
            });
        }
    }
    if !target.dry_run && kind == ServiceKind::Systemd {
        // One question for all of them: a running instance whose drop-in is gone (or a package's
        // template in /usr/lib) still holds its agent's lock.
        let listed = std::process::Command::new("systemctl")
            .args([
                "--user",
                "list-units",
                "--no-legend",
                "--plain",
                "--state=active,activating,reloading,deactivating",
                "agentchat-listen*",
            ])
            .output();
        if let Ok(out) = listed {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                let Some(unit) = line.split_whitespace().next() else {
                    continue;
                };
                let named = profiles.iter().any(|p| {
                    unit == systemd_unit_name(p) || unit == super::systemd::legacy_unit_name(p)
                });
                if named && !found.iter().any(|f| f == unit) {
                    found.push(unit.to_string());
                }
            }
        }
    }
    found
}

/// What to say when one kind of unit is in the way of the other.
pub(super) fn switch_advice(to_one_process: bool) -> String {
    let (what, then) = if to_one_process {
        (
            "one process for every profile",
            "install --all --one-process",
        )
    } else {
        ("a unit per profile", "install --all")
    };
    format!(
        "two listeners for one agent cannot both run (the second would exit 75 on the agent's \
         lock). To switch to {what}: `agentchat service uninstall --all`, then `agentchat \
         service {then}`"
    )
}

/// `service install --all --one-process`: the config's profiles as `listen --all` reads them (a
/// profile that would not start is a warning naming it: the host runs the others; none that would
/// start is an error), no per-profile unit of those profiles in the way, then the unit written and
/// started as a profile's is (and put back when refused).
pub(super) fn install_host(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<i32> {
    let (spec, problems) = host_spec(config)?;
    if spec.profiles.is_empty() {
        anyhow::bail!(
            "cannot install the one-process unit: the config names no profile for `listen --all` \
             (each `[profiles.<name>]` table, and `default` when the top level names its own \
             `api_key_file`); nothing was written"
        );
    }
    if problems.len() >= spec.profiles.len() {
        anyhow::bail!(
            "cannot install the one-process unit: no profile of the config would start; nothing \
             was written:\n{}",
            problems.join("\n")
        );
    }
    // The host runs the others and reports these in their status.
    let warnings = problems;
    let target = super::target(kind)?;
    super::install::require_user_manager(kind, &target)?;
    let in_the_way = profile_units_in_the_way(kind, &target, &spec.profiles);
    if !in_the_way.is_empty() {
        anyhow::bail!(
            "cannot install the one-process unit: profiles of this config have units of their \
             own ({}); nothing was written. {}",
            in_the_way.join(", "),
            switch_advice(true)
        );
    }
    let text = render(kind, &spec);
    let path = target.dir.join(host_file_name(kind));
    let before = std::fs::read_to_string(&path).ok();
    // Run again (profiles added since, `agentchat setup` adding one), the unit is rewritten with
    // the profiles' count and largest grace; a running host then re-reads the config (a reload).
    let was_running = before.is_some()
        && !target.dry_run
        && kind == ServiceKind::Systemd
        && super::systemd::systemctl_word("is-active", HOST_UNIT) == "active";
    println!(
        "one process for {} profiles: {}",
        spec.profiles.len(),
        spec.profiles.join(", ")
    );
    let files = vec![(host_file_name(kind), text)];
    let code =
        super::install::write_and_start(kind, &target, &files, &host_unit(kind), warnings, || {})?;
    if code != 0 {
        return Ok(code);
    }
    if was_running {
        super::install::run_manager("systemctl", &["--user", "reload", HOST_UNIT])?;
        println!(
            "reloaded {HOST_UNIT}: profiles added to the config start in it, removed ones stop"
        );
    }
    if let Some(note) = before
        .as_deref()
        .and_then(|b| super::host_refresh::limit_note(b, spec.limit_nofile(), was_running))
    {
        println!("{note}");
    }
    Ok(0)
}

/// `service uninstall --one-process`: stop and disable the host's unit, then remove its file.
pub(super) fn uninstall_host(kind: ServiceKind) -> anyhow::Result<i32> {
    let target = super::target(kind)?;
    let path = target.dir.join(host_file_name(kind));
    if !target.dry_run {
        let _ = match kind {
            ServiceKind::Systemd => {
                super::install::run_manager("systemctl", &["--user", "disable", "--now", HOST_UNIT])
            }
            ServiceKind::Launchd => super::install::run_manager(
                "launchctl",
                &[
                    "bootout",
                    &format!(
                        "gui/{}/{}",
                        crate::sys::process::current_uid(),
                        host_label()
                    ),
                ],
            ),
        };
    }
    match std::fs::remove_file(&path) {
        Ok(()) => println!("removed {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no unit at {}", path.display())
        }
        Err(e) => {
            return Err(anyhow::Error::from(e).context(format!("cannot remove {}", path.display())));
        }
    }
    if !target.dry_run && kind == ServiceKind::Systemd {
        let _ = super::install::run_manager("systemctl", &["--user", "daemon-reload"]);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_open_files_limit_grows_with_the_profiles_between_its_floor_and_ceiling() {
        assert_eq!(limit_nofile(0), 8192);
        assert_eq!(limit_nofile(3), 8192);
        assert_eq!(limit_nofile(448), 8192);
        assert_eq!(limit_nofile(449), 9216);
        assert_eq!(limit_nofile(1000), 17408);
        assert!(limit_nofile(1000) >= 1000 * 4 + 1024);
        assert_eq!(limit_nofile(usize::MAX), NOFILE_CEILING);
    }

    #[test]
    fn the_host_label_is_no_profiles_label_and_keeps_the_listeners_prefix() {
        let label = host_label();
        assert!(label.starts_with(LAUNCHD_LABEL_PREFIX));
        assert!(!label.starts_with(&format!("{LAUNCHD_LABEL_PREFIX}.")));
        assert_eq!(
            host_file_name(ServiceKind::Launchd),
            format!("{label}.plist")
        );
    }
}

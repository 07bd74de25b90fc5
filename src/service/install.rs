//! `service install` and `uninstall`: the config check, the write, the manager's start, and the
//! undo when the manager refuses.

use super::systemd::{booted_with_systemd, systemd_user_manager};
use super::{
    ServiceKind, UnitConfig, file_name, launchd_label, no_user_manager_advice, spec_for,
    systemd_unit_name, target, unit_files,
};
use anyhow::{Context, bail};
use std::path::Path;
use std::process::Command;

pub(super) fn run_manager(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    if !out.status.success() {
        bail!("`{program} {}` failed: {}", args.join(" "), text.trim());
    }
    Ok(text)
}

pub(super) fn write_unit(path: &Path, text: impl AsRef<[u8]>) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::sys::fs::write_keeping_mode(path, text.as_ref())
        .with_context(|| format!("cannot write {}", path.display()))
}

/// The config the unit's listener will read must exist and load as the service will see it: its
/// file, the key file it names, and none of the installing shell's `AGENTCHAT_*` variables (the
/// manager passes none on). Returns a warning to print when the service would have no key.
pub(super) fn check_unit_config(
    profile: &str,
    unit: &UnitConfig,
) -> anyhow::Result<Option<String>> {
    if let Some(c) = &unit.path
        && !c.is_file()
    {
        bail!(
            "the config file {} does not exist (or is not a file); `agentchat service install \
             --config FILE` needs the file the listener will read",
            c.display()
        );
    }
    let settings = unit
        .settings(profile, crate::config::KeyFile::Read)
        .with_context(|| {
            "the listener could not start with the config the service would use; fix it \
         (`agentchat doctor` shows the same), then install again"
        })?;
    Ok(
        (settings.key_source == crate::config::KeySource::Missing).then(|| {
            "the service will have no API key: the manager does not pass this shell's \
             AGENTCHAT_API_KEY on; set `api_key_file` in the config"
                .to_string()
        }),
    )
}

/// `service install`: checks the config and the service manager, writes the unit's files (systemd:
/// the template and the profile's drop-in), and has the manager start it; when the manager
/// refuses, every file is put back as it was.
pub(super) fn install(
    kind: ServiceKind,
    profile: &str,
    config: Option<&Path>,
) -> anyhow::Result<i32> {
    install_with(kind, profile, &UnitConfig::read(config)?)
}

/// [`install`] with the config read: `install --all` reads it once for every profile.
fn install_with(kind: ServiceKind, profile: &str, unit: &UnitConfig) -> anyhow::Result<i32> {
    let spec = spec_for(profile, unit)?;
    let warning = check_unit_config(profile, unit)?;
    let target = target(kind)?;
    require_user_manager(kind, &target)?;
    if let Some(what) = super::host::host_in_the_way(kind, &target) {
        bail!(
            "cannot install the unit of profile `{profile}`: the one-process unit runs every              profile of its config ({what}); nothing was written. {}",
            super::host::switch_advice(false)
        );
    }
    let files = unit_files(kind, &spec);
    let start = match kind {
        ServiceKind::Systemd => systemd_unit_name(profile),
        ServiceKind::Launchd => launchd_label(profile),
    };
    write_and_start(
        kind,
        &target,
        &files,
        &start,
        warning.into_iter().collect(),
        || {
            if kind == ServiceKind::Systemd {
                replace_legacy_unit(&target.dir, profile, target.dry_run);
            }
        },
    )
}

/// Without `AGENTCHAT_SERVICE_DIR`, a systemd install needs a user manager that answers; nothing
/// is written without one.
pub(super) fn require_user_manager(
    kind: ServiceKind,
    target: &super::Target,
) -> anyhow::Result<()> {
    if !target.dry_run
        && kind == ServiceKind::Systemd
        && let Err(why) = systemd_user_manager()
    {
        bail!(
            "cannot install the service: no systemd user manager answers ({why}); nothing was \
             written.\n{}",
            no_user_manager_advice(booted_with_systemd())
        );
    }
    Ok(())
}

/// Writes `files` into the unit dir (each one's earlier bytes kept), runs `after_write`, prints
/// `warnings`, and has the manager start `unit` (a systemd unit, or the launchd label whose plist
/// is the last file); when the manager refuses, every file is put back as it was.
pub(super) fn write_and_start(
    kind: ServiceKind,
    target: &super::Target,
    files: &[(String, String)],
    unit: &str,
    warnings: Vec<String>,
    after_write: impl FnOnce(),
) -> anyhow::Result<i32> {
    let mut previous = Vec::new();
    for (name, _) in files {
        let path = target.dir.join(name);
        previous.push(match std::fs::read(&path) {
            Ok(bytes) => Some(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
        });
    }
    for (i, (name, text)) in files.iter().enumerate() {
        let file = target.dir.join(name);
        if let Err(e) = write_unit(&file, text) {
            // What was written before this one goes back as it was.
            for ((done, _), before) in files.iter().zip(&previous).take(i) {
                undo_write(&target.dir.join(done), before.as_deref());
            }
            return Err(e);
        }
        println!("wrote {}", file.display());
    }
    after_write();
    for warning in warnings {
        eprintln!("agentchat service: warning: {warning}");
    }
    if target.dry_run {
        println!("AGENTCHAT_SERVICE_DIR is set: not calling the service manager");
        return Ok(0);
    }
    let started = match kind {
        ServiceKind::Systemd => run_manager("systemctl", &["--user", "daemon-reload"])
            .and_then(|_| run_manager("systemctl", &["--user", "enable", "--now", unit]))
            .map(|_| {
                let linger = match super::systemd::linger() {
                    Some(true) => {
                        "linger is on: it keeps running while you are logged out".to_string()
                    }
                    Some(false) => super::systemd::linger_advice(),
                    None => "to keep it running while you are logged out: loginctl \
                             enable-linger $USER"
                        .to_string(),
                };
                format!("started {unit}; logs: journalctl --user -u {unit}\n{linger}")
            }),
        ServiceKind::Launchd => {
            let domain = format!("gui/{}", crate::sys::process::current_uid());
            let plist = files
                .last()
                .map(|(name, _)| target.dir.join(name))
                .unwrap_or_default();
            // A previous copy must be booted out first, or bootstrap refuses.
            let _ = run_manager("launchctl", &["bootout", &format!("{domain}/{unit}")]);
            run_manager(
                "launchctl",
                &["bootstrap", &domain, &plist.display().to_string()],
            )
            .map(|_| format!("started {unit}"))
        }
    };
    match started {
        Ok(message) => {
            println!("{message}");
            Ok(0)
        }
        Err(e) => {
            let undone = files
                .iter()
                .zip(&previous)
                .map(|((name, _), before)| undo_write(&target.dir.join(name), before.as_deref()))
                .collect::<Vec<_>>()
                .join(", ");
            if kind == ServiceKind::Systemd {
                let _ = run_manager("systemctl", &["--user", "daemon-reload"]);
            }
            let advice = match kind {
                ServiceKind::Systemd => no_user_manager_advice(booted_with_systemd()),
                ServiceKind::Launchd => "A launchd agent needs your login session on the Mac \
                                         (gui/<uid>). Or run `agentchat listen` in a terminal \
                                         instead."
                    .to_string(),
            };
            bail!("cannot install the service: {e:#}; {undone}.\n{advice}")
        }
    }
}

/// Puts a file back as it was before `install` wrote it (removes it when it was not there); what
/// was done, for the error message.
fn undo_write(path: &Path, before: Option<&[u8]>) -> String {
    match before {
        Some(bytes) => {
            write_unit(path, bytes).map(|()| format!("put the previous {} back", path.display()))
        }
        None => std::fs::remove_file(path)
            .map(|()| {
                remove_empty_dir(path);
                format!("removed {}", path.display())
            })
            .map_err(anyhow::Error::from),
    }
    .unwrap_or_else(|e| format!("could not undo the write of {}: {e:#}", path.display()))
}

/// Removes the drop-in dir a removed drop-in leaves empty (never the unit dir itself).
fn remove_empty_dir(file: &Path) {
    if let Some(dir) = file.parent()
        && dir.extension().is_some_and(|e| e == "d")
    {
        let _ = std::fs::remove_dir(dir);
    }
}

/// An earlier version's unit for this profile (one file per profile) would run a second listener
/// beside the template's instance: it is stopped, disabled and removed.
fn replace_legacy_unit(dir: &Path, profile: &str, dry_run: bool) {
    let name = super::systemd::legacy_unit_name(profile);
    let path = dir.join(&name);
    if !path.is_file() {
        return;
    }
    if !dry_run {
        let _ = run_manager("systemctl", &["--user", "disable", "--now", &name]);
    }
    match std::fs::remove_file(&path) {
        Ok(()) => println!("removed {} (replaced by the template unit)", path.display()),
        Err(e) => eprintln!(
            "agentchat service: warning: cannot remove the earlier unit {}: {e}",
            path.display()
        ),
    }
}

/// `service install --all`: a unit per profile the config names, each through [`install`] (its
/// checks and its undo). One that fails does not stop the others; the exit code is 1 if any did.
pub(super) fn install_all(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<i32> {
    let unit = UnitConfig::read(config)?;
    let profiles = unit.file()?.profile_names();
    let target = target(kind)?;
    if let Some(what) = super::host::host_in_the_way(kind, &target) {
        // Said once, not once per profile.
        bail!(
            "cannot install a unit per profile: the one-process unit runs every profile of its \
             config ({what}); nothing was written. {}",
            super::host::switch_advice(false)
        );
    }
    let mut failed = Vec::new();
    for profile in profiles {
        println!("== profile {profile}");
        match install_with(kind, &profile, &unit) {
            Ok(0) => {}
            Ok(_) => failed.push(profile),
            Err(e) => {
                eprintln!("agentchat service install --all: profile `{profile}`: {e:#}");
                failed.push(profile);
            }
        }
    }
    if failed.is_empty() {
        Ok(0)
    } else {
        eprintln!(
            "agentchat service install --all: not installed: {}",
            failed.join(", ")
        );
        Ok(1)
    }
}

/// `service uninstall --all`: every profile the config names, and every profile whose unit is
/// written in the unit dir (a profile since removed from the config), each through [`uninstall`].
pub(super) fn uninstall_all(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<i32> {
    let args = crate::config::ConfigArgs {
        config: config.map(Path::to_path_buf),
        ..Default::default()
    };
    let mut profiles = crate::config::ConfigFile::read(&args)
        .map(|file| file.profile_names())
        .unwrap_or_default();
    if let Ok(entries) = std::fs::read_dir(&target(kind)?.dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if let Some(p) = profile_of_file(kind, &name)
                && !profiles.contains(&p)
            {
                profiles.push(p);
            }
        }
    }
    let mut failed = Vec::new();
    for profile in &profiles {
        println!("== profile {profile}");
        if let Err(e) = uninstall(kind, profile) {
            eprintln!("agentchat service uninstall --all: profile `{profile}`: {e:#}");
            failed.push(profile.clone());
        }
    }
    if target(kind)?
        .dir
        .join(super::host::host_file_name(kind))
        .exists()
    {
        println!("== the one-process unit");
        if let Err(e) = super::host::uninstall_host(kind) {
            eprintln!("agentchat service uninstall --all: the one-process unit: {e:#}");
            failed.push(super::host::host_unit(kind));
        }
    }
    Ok(i32::from(!failed.is_empty()))
}

/// The template stays while any profile's drop-in is installed; after the last, it goes too.
fn remove_template_if_unused(dir: &Path) -> anyhow::Result<()> {
    let in_use = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            super::systemd::profile_of_drop_in_dir(&e.file_name().to_string_lossy()).is_some()
                && e.path().join(super::systemd::DROP_IN_NAME).exists()
        });
    let template = dir.join(super::systemd::TEMPLATE_NAME);
    if in_use || !template.exists() {
        return Ok(());
    }
    std::fs::remove_file(&template)
        .with_context(|| format!("cannot remove {}", template.display()))?;
    println!("removed {}", template.display());
    Ok(())
}

/// The profile whose unit file is named `name` (the inverse of `file_name`), if it is one.
fn profile_of_file(kind: ServiceKind, name: &str) -> Option<String> {
    let profile = match kind {
        ServiceKind::Systemd => super::systemd::profile_of_drop_in_dir(name)?,
        ServiceKind::Launchd => {
            let label = name.strip_suffix(".plist")?;
            if label == launchd_label("default") {
                "default"
            } else {
                label.strip_prefix(&format!("{}.", launchd_label("default")))?
            }
        }
    };
    let own = match kind {
        ServiceKind::Systemd => format!("{}.d", systemd_unit_name(profile)),
        ServiceKind::Launchd => file_name(kind, profile),
    };
    (own == name && super::check_profile_name(profile).is_ok()).then(|| profile.to_string())
}

/// `service uninstall`: stop and disable the unit, then remove its file.
pub(super) fn uninstall(kind: ServiceKind, profile: &str) -> anyhow::Result<i32> {
    let target = target(kind)?;
    let path = target.dir.join(file_name(kind, profile));
    if !target.dry_run {
        match kind {
            ServiceKind::Systemd => {
                let unit = systemd_unit_name(profile);
                let _ = run_manager("systemctl", &["--user", "disable", "--now", &unit]);
            }
            ServiceKind::Launchd => {
                let service = format!(
                    "gui/{}/{}",
                    crate::sys::process::current_uid(),
                    launchd_label(profile)
                );
                let _ = run_manager("launchctl", &["bootout", &service]);
            }
        }
    }
    match std::fs::remove_file(&path) {
        Ok(()) => {
            remove_empty_dir(&path);
            println!("removed {}", path.display())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no unit at {}", path.display())
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove {}", path.display()));
        }
    }
    if kind == ServiceKind::Systemd {
        remove_template_if_unused(&target.dir)?;
    }
    if !target.dry_run && kind == ServiceKind::Systemd {
        let _ = run_manager("systemctl", &["--user", "daemon-reload"]);
    }
    Ok(0)
}

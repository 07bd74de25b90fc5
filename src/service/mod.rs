//! `agentchat service`: installs the listener as a per-user service, on Linux an instance of the
//! systemd template unit `agentchat-listen@.service` (the instance is the profile) with a drop-in
//! of that install's own facts, on macOS a launchd agent per profile. The files are templates
//! compiled in from `systemd/` and `launchd/`; rendering is pure so tests check the exact text
//! with the real `systemd-analyze verify` and a real plist parser, and the live suite
//! (`tests/it/live_systemd/`) runs the unit under a real systemd.
//!
//! `install` checks first what would make the service fail (the config it will read, a systemd
//! user manager to run it) and writes nothing then; when the manager refuses the unit, the file is
//! put back as it was, so a unit on disk is never taken for an installed service. `status` and
//! `doctor` tell the three states apart: written, enabled, running ([`ManagerView`]).
//!
//! `AGENTCHAT_SERVICE_DIR` redirects install and uninstall to a scratch directory and skips
//! `systemctl`/`launchctl`, so tests never touch the machine's services.
//!
//! Modules: `systemd` (the template, the drop-in's text, the user manager, linger), `launchd` (the agent's plist),
//! `install` (install, uninstall, the config check and the undo), `unit_config` (the config as
//! the unit's listener will read it, read once per command), `manager` (what the service
//! manager says: `status` and doctor's view), `host` (the one-process unit) and `host_refresh`
//! (keeping it current as profiles are added).

mod host;
mod host_refresh;
mod install;
mod launchd;
mod manager;
mod systemd;
mod unit_config;

pub use host::{HOST_UNIT, HostSpec, host_label, host_unit, limit_nofile};
pub use host_refresh::host_runs_config;
pub use launchd::launchd_label;
pub use manager::{ManagerView, host_manager_view, manager_view};
pub use systemd::{linger, linger_advice, no_user_manager_advice, systemd_unit_name};

use anyhow::Context;
use std::path::{Path, PathBuf};
pub(crate) use unit_config::UnitConfig;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceKind {
    Systemd,
    Launchd,
}

impl ServiceKind {
    /// The word `--kind` takes.
    pub fn word(self) -> &'static str {
        match self {
            ServiceKind::Systemd => "systemd",
            ServiceKind::Launchd => "launchd",
        }
    }

    /// The kind this platform uses.
    pub fn native() -> ServiceKind {
        if cfg!(target_os = "macos") {
            ServiceKind::Launchd
        } else {
            ServiceKind::Systemd
        }
    }
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum ServiceAction {
    /// Write the unit for this profile and start it now and at login.
    Install {
        /// Install a unit for every profile the config names (`default` and each
        /// `[profiles.<name>]`), one after the other; exit 1 if any failed.
        #[arg(long, conflicts_with = "profile")]
        all: bool,
        /// With --all: one unit for every profile in one process (`agentchat listen --all`,
        /// agentchat-host.service) instead of a unit per profile. Refused while a profile of
        /// the config has a unit of its own.
        #[arg(long, requires = "all")]
        one_process: bool,
        /// With --one-process: only bring the written unit's stop timeout and open-files limit
        /// up to the profiles the config names now (what the unit's ExecReload runs).
        #[arg(long, requires = "one_process", hide = true)]
        refresh: bool,
    },
    /// Stop the service and remove its unit.
    Uninstall {
        /// Uninstall the unit of every profile the config names, of every profile whose unit is
        /// written, and the one-process unit; exit 1 if any failed.
        #[arg(long, conflicts_with = "profile")]
        all: bool,
        /// Uninstall the one-process unit (`install --all --one-process`).
        #[arg(long, conflicts_with = "profile")]
        one_process: bool,
    },
    /// Show what the service manager says about it. Exit codes as `systemctl status`: 0 running,
    /// 3 not running, 4 no such unit.
    Status {
        /// The one-process unit's status (a profile without a unit of its own shows it too).
        #[arg(long, conflicts_with = "profile")]
        one_process: bool,
    },
    /// Print the unit this profile would get, without installing it.
    Print {
        /// Print the one-process unit `install --all --one-process` would write.
        #[arg(long, conflicts_with = "profile")]
        one_process: bool,
        /// With --one-process: accepted, as `install --all --one-process` spells it.
        #[arg(long, requires = "one_process")]
        all: bool,
    },
}

#[derive(Debug, Clone, clap::Args)]
pub struct ServiceArgs {
    #[command(subcommand)]
    pub action: ServiceAction,
    /// Profile the service runs (`agentchat listen --profile P`; default "default"), chosen as
    /// every other command chooses it [env: AGENTCHAT_PROFILE].
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// systemd or launchd (default: this platform's).
    #[arg(long, value_enum, global = true)]
    pub kind: Option<ServiceKind>,
    /// Config file the service passes to `listen --config` [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
}

/// Everything a unit needs; `render` turns it into the file's text.
#[derive(Debug, Clone)]
pub struct UnitSpec {
    pub profile: String,
    /// Absolute path of the `agentchat` binary.
    pub program: PathBuf,
    pub config: Option<PathBuf>,
    /// PATH captured from the installing shell, so `claude`/`codex` are found under the manager
    /// (see [`unit_path_env`]).
    pub path_env: String,
    /// `XDG_CONFIG_HOME`/`XDG_STATE_HOME` of the installing shell, when set (see [`xdg_env`]), so
    /// the service reads the same config and state dir as the user's `agentchat status`.
    pub xdg_env: Vec<(String, String)>,
    /// The listener's run grace; the manager's stop timeout must be longer.
    pub kill_grace_secs: u64,
    /// launchd's log file (systemd logs to the journal).
    pub log_path: PathBuf,
}

impl UnitSpec {
    pub fn listen_args(&self) -> Vec<String> {
        let mut args = vec![self.program.display().to_string(), "listen".into()];
        if self.profile != "default" {
            args.push("--profile".into());
            args.push(self.profile.clone());
        }
        if let Some(config) = &self.config {
            args.push("--config".into());
            args.push(config.display().to_string());
        }
        args
    }

    /// The variables the unit sets for the listener: PATH, then the XDG base dirs.
    pub fn environment(&self) -> Vec<(String, String)> {
        unit_environment(&self.path_env, &self.xdg_env)
    }

    pub fn stop_timeout_secs(&self) -> u64 {
        stop_timeout_secs(self.kill_grace_secs)
    }
}

/// The variables a unit (a profile's or the one-process unit) sets for the listener: PATH, then
/// the XDG base dirs.
pub(crate) fn unit_environment(
    path_env: &str,
    xdg_env: &[(String, String)],
) -> Vec<(String, String)> {
    let mut env = vec![("PATH".to_string(), path_env.to_string())];
    env.extend(xdg_env.iter().cloned());
    env
}

/// Stop timeout: the run's grace plus room for the socket close and status write.
/// Saturating: a grace of "1000 years" must not overflow (a panic in debug builds).
pub(crate) fn stop_timeout_secs(kill_grace_secs: u64) -> u64 {
    kill_grace_secs.saturating_add(30)
}

/// The unit's PATH: the installing shell's entries in their order, each once, without empty
/// entries (an empty entry means the working directory, which under a service manager is not the
/// user's shell's).
pub fn unit_path_env(path: &str) -> String {
    let mut seen = std::collections::HashSet::new();
    path.split(':')
        .filter(|entry| !entry.is_empty() && seen.insert(*entry))
        .collect::<Vec<_>>()
        .join(":")
}

/// The XDG base dirs to carry into the unit, from `get` (the installing shell's environment):
/// each one that is set and absolute. The XDG spec says a relative value is to be ignored, and
/// config's own lookup ignores it, so carrying it would change nothing but the unit's text.
pub fn xdg_env(get: impl Fn(&str) -> Option<String>) -> Vec<(String, String)> {
    ["XDG_CONFIG_HOME", "XDG_STATE_HOME"]
        .into_iter()
        .filter_map(|name| {
            get(name)
                .filter(|v| Path::new(v).is_absolute())
                .map(|v| (name.to_string(), v))
        })
        .collect()
}

/// Renders the unit file's text for `kind`.
pub fn render(kind: ServiceKind, spec: &UnitSpec) -> String {
    match kind {
        ServiceKind::Systemd => systemd::render(spec),
        ServiceKind::Launchd => launchd::render(spec),
    }
}

/// Where the unit goes, and whether the service manager is to be called.
pub(super) struct Target {
    pub(super) dir: PathBuf,
    pub(super) dry_run: bool,
}

pub(super) fn target(kind: ServiceKind) -> anyhow::Result<Target> {
    if let Some(dir) = std::env::var_os("AGENTCHAT_SERVICE_DIR") {
        return Ok(Target {
            dir: PathBuf::from(dir),
            dry_run: true,
        });
    }
    let base = directories::BaseDirs::new().context("cannot find the home directory")?;
    let dir = match kind {
        ServiceKind::Systemd => base.config_dir().join("systemd/user"),
        ServiceKind::Launchd => base.home_dir().join("Library/LaunchAgents"),
    };
    Ok(Target {
        dir,
        dry_run: false,
    })
}

pub(super) fn file_name(kind: ServiceKind, profile: &str) -> String {
    match kind {
        ServiceKind::Systemd => systemd::drop_in_file(profile),
        ServiceKind::Launchd => format!("{}.plist", launchd_label(profile)),
    }
}

/// Every file `install` writes for `profile` below the unit dir, with its text: for systemd the
/// template (shared by every profile) and the profile's drop-in; for launchd the plist.
pub(super) fn unit_files(kind: ServiceKind, spec: &UnitSpec) -> Vec<(String, String)> {
    match kind {
        ServiceKind::Systemd => vec![
            (
                systemd::TEMPLATE_NAME.to_string(),
                systemd::TEMPLATE.to_string(),
            ),
            (file_name(kind, &spec.profile), render(kind, spec)),
        ],
        ServiceKind::Launchd => vec![(file_name(kind, &spec.profile), render(kind, spec))],
    }
}

/// The files as `service print` shows them: each after a `# --- <path> ---` line.
fn print_files(files: &[(String, String)]) -> String {
    files
        .iter()
        .map(|(name, text)| format!("# --- {name} ---\n{text}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Where the systemd template goes (respecting `AGENTCHAT_SERVICE_DIR`), for doctor.
pub fn template_path() -> anyhow::Result<PathBuf> {
    Ok(target(ServiceKind::Systemd)?
        .dir
        .join(systemd::TEMPLATE_NAME))
}

/// The template's text as `install` writes it.
pub fn template_text() -> &'static str {
    systemd::TEMPLATE
}

/// Profile names become parts of unit names and labels. The rule is config's own (letters,
/// digits, `-`, `_`, `.`; not starting with `.`), which is safe in both, so every profile `listen`
/// accepts can be installed and no other.
pub fn check_profile_name(profile: &str) -> anyhow::Result<()> {
    Ok(crate::config::check_profile_name(profile)?)
}

/// A duration in whole seconds, rounded up (a stop timeout must not fall short of it).
fn whole_secs(d: std::time::Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The path the user runs the binary by, for `ExecStart`: `argv[0]` when it names a path, else
/// the first `PATH` entry that holds it, as long as it is the running binary (`exe`); else `exe`.
/// Not the symlink's target: with Homebrew, nix or a versioned install dir the target moves on
/// the next upgrade and the stable name stays.
pub fn stable_program(
    exe: &Path,
    argv0: Option<&std::ffi::OsStr>,
    path: Option<&std::ffi::OsStr>,
) -> PathBuf {
    let Ok(real) = std::fs::canonicalize(exe) else {
        return exe.to_path_buf();
    };
    let is_this = |p: &Path| std::fs::canonicalize(p).is_ok_and(|c| c == real);
    let argv0 = argv0.map(Path::new);
    let named: Vec<PathBuf> = match argv0 {
        Some(a) if a.components().count() > 1 => std::path::absolute(a).into_iter().collect(),
        Some(a) => path
            .map(|p| {
                std::env::split_paths(p)
                    .filter(|dir| dir.is_absolute())
                    .map(|dir| dir.join(a))
                    .collect()
            })
            .unwrap_or_default(),
        None => Vec::new(),
    };
    named
        .into_iter()
        .find(|p| is_this(p))
        .unwrap_or_else(|| exe.to_path_buf())
}

/// The unit for `profile` (already chosen by [`chosen_profile`]) with the config `unit` names.
pub(super) fn spec_for(profile: &str, unit: &UnitConfig) -> anyhow::Result<UnitSpec> {
    check_profile_name(profile)?;
    let exe = std::env::current_exe().context("cannot find the agentchat binary's path")?;
    let program = stable_program(
        &exe,
        std::env::args_os().next().as_deref(),
        std::env::var_os("PATH").as_deref(),
    );
    let config = unit.path.clone();
    let kill_grace_secs = unit.kill_grace_secs(profile);
    let log_dir = directories::BaseDirs::new()
        .map(|b| b.home_dir().join("Library/Logs"))
        .unwrap_or_else(std::env::temp_dir);
    Ok(UnitSpec {
        profile: profile.to_string(),
        program,
        config,
        path_env: unit_path_env(
            &std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
        ),
        xdg_env: xdg_env(|name| std::env::var(name).ok()),
        kill_grace_secs,
        log_path: log_dir.join(format!("agentchat-listen-{profile}.log")),
    })
}

/// The profile as config chooses it for every command: `--profile` (trimmed), else a non-empty
/// `AGENTCHAT_PROFILE`, else `default`; validated by config's rule.
fn chosen_profile(flag: Option<&str>) -> anyhow::Result<String> {
    let env = crate::config::process_env();
    let args = crate::config::ConfigArgs {
        profile: flag.map(str::to_string),
        ..Default::default()
    };
    Ok(crate::config::profile_name(&args, &env)?)
}

pub async fn run_command(args: ServiceArgs) -> anyhow::Result<i32> {
    let profile = chosen_profile(args.profile.as_deref())?;
    let kind = args.kind.unwrap_or_else(ServiceKind::native);
    if kind != ServiceKind::native()
        && std::env::var_os("AGENTCHAT_SERVICE_DIR").is_none()
        && matches!(
            args.action,
            ServiceAction::Install { .. } | ServiceAction::Uninstall { .. }
        )
    {
        // Writing a plist where no launchd will read it (or a unit where no systemd runs) can only
        // leave files behind; `service print` shows the text, and AGENTCHAT_SERVICE_DIR writes it.
        anyhow::bail!(
            "--kind {} is not this platform's service manager: nothing was written. `agentchat \
             service print --kind {0}` shows the file; AGENTCHAT_SERVICE_DIR=DIR writes it there",
            kind.word()
        );
    }
    match args.action {
        ServiceAction::Print {
            one_process: true, ..
        } => {
            print!(
                "{}",
                host::render(kind, &host::host_spec(args.config.as_deref())?.0)
            );
            Ok(0)
        }
        ServiceAction::Print { .. } => {
            let spec = spec_for(&profile, &UnitConfig::read(args.config.as_deref())?)?;
            match kind {
                ServiceKind::Systemd => print!("{}", print_files(&unit_files(kind, &spec))),
                ServiceKind::Launchd => print!("{}", render(kind, &spec)),
            }
            Ok(0)
        }
        ServiceAction::Install { refresh: true, .. } => {
            host_refresh::refresh_host(kind, args.config.as_deref())
        }
        ServiceAction::Install {
            one_process: true, ..
        } => host::install_host(kind, args.config.as_deref()),
        ServiceAction::Install { all: false, .. } => {
            install::install(kind, &profile, args.config.as_deref())
        }
        ServiceAction::Install { all: true, .. } => {
            install::install_all(kind, args.config.as_deref())
        }
        ServiceAction::Uninstall { all: true, .. } => {
            install::uninstall_all(kind, args.config.as_deref())
        }
        ServiceAction::Uninstall {
            one_process: true, ..
        } => host::uninstall_host(kind),
        ServiceAction::Uninstall { .. } => install::uninstall(kind, &profile),
        ServiceAction::Status { one_process: true } => manager::host_status(kind),
        ServiceAction::Status { .. } => manager::status(kind, &profile),
    }
}

/// Where `service install` puts this profile's unit (respecting `AGENTCHAT_SERVICE_DIR`). For
/// `doctor`, which checks whether it is installed.
pub fn unit_path(kind: ServiceKind, profile: &str) -> anyhow::Result<PathBuf> {
    Ok(target(kind)?.dir.join(file_name(kind, profile)))
}

/// Where `service install --all --one-process` puts the one-process unit (respecting
/// `AGENTCHAT_SERVICE_DIR`), for `doctor`.
pub fn host_unit_path(kind: ServiceKind) -> anyhow::Result<PathBuf> {
    Ok(target(kind)?.dir.join(host::host_file_name(kind)))
}

/// The one-process unit's text as `install --all --one-process` would write it now, for `doctor`.
pub fn render_host_current(kind: ServiceKind, config: Option<PathBuf>) -> anyhow::Result<String> {
    Ok(host::render(kind, &host::host_spec(config.as_deref())?.0))
}

/// The text of the profile's own file (the systemd drop-in, the launchd plist) as `install` would
/// write it now, so `doctor` can byte-compare it with the installed one.
pub fn render_current(
    kind: ServiceKind,
    profile: &str,
    config: Option<PathBuf>,
) -> anyhow::Result<String> {
    Ok(render(
        kind,
        &spec_for(profile, &UnitConfig::read(config.as_deref())?)?,
    ))
}

/// The path the user runs agentchat by (a symlink on PATH, not its versioned target), as the
/// unit's `ExecStart` names it: what the MCP entries and the service subprocess run.
pub fn stable_exe() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(stable_program(
        &exe,
        std::env::args_os().next().as_deref(),
        std::env::var_os("PATH").as_deref(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stop_timeout_adds_room_to_the_grace_and_never_overflows() {
        let mut spec = UnitSpec {
            profile: "default".into(),
            program: "/usr/bin/agentchat".into(),
            config: None,
            path_env: "/usr/bin".into(),
            xdg_env: Vec::new(),
            kill_grace_secs: 10,
            log_path: "/tmp/l.log".into(),
        };
        assert_eq!(spec.stop_timeout_secs(), 40);
        spec.kill_grace_secs = u64::MAX;
        assert_eq!(spec.stop_timeout_secs(), u64::MAX);
    }

    #[test]
    fn exec_start_keeps_the_name_on_path_not_the_symlinks_target() {
        let d = tempfile::tempdir().unwrap();
        let real = d.path().join("Cellar/agentchat/1.2/bin/agentchat");
        std::fs::create_dir_all(real.parent().unwrap()).unwrap();
        std::fs::write(&real, "").unwrap();
        let bin = d.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(&real, bin.join("agentchat")).unwrap();
        let other = d.path().join("other");
        std::fs::create_dir_all(&other).unwrap();
        std::fs::write(other.join("agentchat"), "").unwrap();
        let path = std::env::join_paths([other.clone(), bin.clone()]).unwrap();
        // By PATH: the first entry that is this binary, not a different `agentchat` before it.
        assert_eq!(
            stable_program(&real, Some("agentchat".as_ref()), Some(&path)),
            bin.join("agentchat")
        );
        // By a path in argv[0].
        let argv0 = bin.join("agentchat");
        assert_eq!(
            stable_program(&real, Some(argv0.as_os_str()), None),
            bin.join("agentchat")
        );
        // A name that is some other binary: the running one's own path.
        assert_eq!(
            stable_program(&real, Some(other.join("agentchat").as_os_str()), None),
            real
        );
    }

    #[test]
    fn the_units_path_keeps_the_first_of_each_entry_and_drops_empty_ones() {
        assert_eq!(
            unit_path_env("/home/u/.cargo/bin:/usr/bin::/bin:/usr/bin:/home/u/.cargo/bin:"),
            "/home/u/.cargo/bin:/usr/bin:/bin"
        );
        assert_eq!(unit_path_env("/usr/bin"), "/usr/bin");
        assert_eq!(unit_path_env(""), "");
    }

    #[test]
    fn only_set_absolute_xdg_dirs_are_carried_into_the_unit() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(
            xdg_env(env(&[("XDG_CONFIG_HOME", "/c"), ("XDG_STATE_HOME", "/s")])),
            [
                ("XDG_CONFIG_HOME".to_string(), "/c".to_string()),
                ("XDG_STATE_HOME".to_string(), "/s".to_string())
            ]
        );
        assert!(xdg_env(env(&[("XDG_CONFIG_HOME", "rel/c"), ("XDG_STATE_HOME", "")])).is_empty());
        assert!(xdg_env(env(&[])).is_empty());
    }
}

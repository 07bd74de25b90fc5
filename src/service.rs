//! `agentchat service`: installs the listener as a per-user service (a systemd user unit on Linux,
//! a launchd agent on macOS), one per profile. The unit files are templates compiled in from
//! `systemd/` and `launchd/`; rendering is pure so tests check the exact text with the real
//! `systemd-analyze verify` and a real plist parser.
//!
//! `install` checks first what would make the service fail (the config it will read, a systemd
//! user manager to run it) and writes nothing then; when the manager refuses the unit, the file is
//! put back as it was, so a unit on disk is never taken for an installed service. `status` and
//! `doctor` tell the three states apart: written, enabled, running ([`ManagerView`]).
//!
//! `AGENTCHAT_SERVICE_DIR` redirects install and uninstall to a scratch directory and skips
//! `systemctl`/`launchctl`, so tests never touch the machine's services.

use crate::config::LAUNCHD_LABEL_PREFIX;
use anyhow::{Context, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

const SYSTEMD_TEMPLATE: &str = include_str!("../systemd/agentchat-listen.service");
const LAUNCHD_TEMPLATE: &str = include_str!("../launchd/me.agentchat.listen.plist");

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ServiceKind {
    Systemd,
    Launchd,
}

impl ServiceKind {
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
    },
    /// Stop the service and remove its unit.
    Uninstall,
    /// Show what the service manager says about it.
    Status,
    /// Print the unit this profile would get, without installing it.
    Print,
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
        let mut env = vec![("PATH".to_string(), self.path_env.clone())];
        env.extend(self.xdg_env.iter().cloned());
        env
    }

    /// Stop timeout: the run's grace plus room for the socket close and status write.
    /// Saturating: a grace of "1000 years" must not overflow (a panic in debug builds).
    pub fn stop_timeout_secs(&self) -> u64 {
        self.kill_grace_secs.saturating_add(30)
    }
}

/// `agentchat-listen.service`, or `agentchat-listen-<profile>.service` for other profiles.
pub fn systemd_unit_name(profile: &str) -> String {
    if profile == "default" {
        "agentchat-listen.service".into()
    } else {
        format!("agentchat-listen-{profile}.service")
    }
}

/// `me.agentchat.listen`, or `me.agentchat.listen.<profile>` (see [`LAUNCHD_LABEL_PREFIX`]).
pub fn launchd_label(profile: &str) -> String {
    if profile == "default" {
        LAUNCHD_LABEL_PREFIX.into()
    } else {
        format!("{LAUNCHD_LABEL_PREFIX}.{profile}")
    }
}

/// Quotes one argument for a systemd command line: always double-quoted, with `\`, `"` escaped and
/// `$`/`%` doubled so systemd expands nothing.
fn systemd_quote(arg: &str) -> String {
    quote_for_systemd(arg, true)
}

/// Quotes one `Environment=` assignment: double-quoted with `\` and `"` escaped and `%` doubled
/// (specifiers are expanded there). Unlike a command line, `$` means nothing in `Environment=`
/// (systemd.exec(5)), so it stays single.
fn systemd_env_quote(assignment: &str) -> String {
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

fn xml_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&apos;")
}

/// Renders the unit file's text for `kind`.
pub fn render(kind: ServiceKind, spec: &UnitSpec) -> String {
    match kind {
        ServiceKind::Systemd => {
            let exec: Vec<String> = spec
                .listen_args()
                .iter()
                .map(|a| systemd_quote(a))
                .collect();
            SYSTEMD_TEMPLATE
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
                        .map(|(k, v)| {
                            format!("Environment={}", systemd_env_quote(&format!("{k}={v}")))
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
        }
        ServiceKind::Launchd => {
            let args: Vec<String> = spec
                .listen_args()
                .iter()
                .map(|a| format!("    <string>{}</string>", xml_escape(a)))
                .collect();
            LAUNCHD_TEMPLATE
                .replace("{{PROFILE}}", &xml_escape(&spec.profile))
                .replace("{{LABEL}}", &xml_escape(&launchd_label(&spec.profile)))
                .replace("{{PROGRAM_ARGUMENTS}}", &args.join("\n"))
                .replace(
                    "{{ENVIRONMENT}}",
                    &spec
                        .environment()
                        .iter()
                        .map(|(k, v)| {
                            format!(
                                "    <key>{}</key>\n    <string>{}</string>",
                                xml_escape(k),
                                xml_escape(v)
                            )
                        })
                        .collect::<Vec<_>>()
                        .join("\n"),
                )
                .replace("{{EXIT_TIMEOUT}}", &spec.stop_timeout_secs().to_string())
                .replace(
                    "{{LOG_PATH}}",
                    &xml_escape(&spec.log_path.display().to_string()),
                )
        }
    }
}

/// Where the unit goes, and whether the service manager is to be called.
struct Target {
    dir: PathBuf,
    dry_run: bool,
}

fn target(kind: ServiceKind) -> anyhow::Result<Target> {
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

fn file_name(kind: ServiceKind, profile: &str) -> String {
    match kind {
        ServiceKind::Systemd => systemd_unit_name(profile),
        ServiceKind::Launchd => format!("{}.plist", launchd_label(profile)),
    }
}

/// Profile names become parts of unit names and labels. The rule is config's own (letters,
/// digits, `-`, `_`, `.`; not starting with `.`), which is safe in both, so every profile `listen`
/// accepts can be installed and no other.
pub fn check_profile_name(profile: &str) -> anyhow::Result<()> {
    Ok(crate::config::check_profile_name(profile)?)
}

/// The config file the unit passes to `listen --config`: `--config`, else the installing shell's
/// `AGENTCHAT_CONFIG` (the manager would not pass that variable on), made absolute.
fn unit_config(flag: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    let env = std::env::var_os("AGENTCHAT_CONFIG").filter(|v| !v.is_empty());
    match flag.map(Path::to_path_buf).or(env.map(PathBuf::from)) {
        Some(c) => Ok(Some(
            std::path::absolute(&c).context("cannot make the config path absolute")?,
        )),
        None => Ok(None),
    }
}

/// The run grace the profile's listener will use, in whole seconds rounded up: its config's
/// `listen.kill_grace`, or the default when the config cannot be loaded (the listener itself
/// reports why when it starts).
fn kill_grace_secs(profile: &str, config: Option<&Path>) -> u64 {
    let args = crate::config::ConfigArgs {
        config: config.map(Path::to_path_buf),
        profile: Some(profile.to_string()),
        ..Default::default()
    };
    let grace = crate::config::load_unkeyed(&args)
        .map(|s| s.listen.kill_grace)
        .unwrap_or(crate::config::DEFAULT_KILL_GRACE);
    grace
        .as_secs()
        .saturating_add(u64::from(grace.subsec_nanos() > 0))
}

/// The unit for `profile` (already chosen by [`chosen_profile`]) with the `--config` flag `config`.
fn spec_for(profile: &str, config: Option<&Path>) -> anyhow::Result<UnitSpec> {
    check_profile_name(profile)?;
    let program = std::env::current_exe().context("cannot find the agentchat binary's path")?;
    let config = unit_config(config)?;
    let kill_grace_secs = kill_grace_secs(profile, config.as_deref());
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

fn run_manager(program: &str, args: &[&str]) -> anyhow::Result<String> {
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

fn write_unit(path: &Path, text: impl AsRef<[u8]>) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::sys::fs::write_keeping_mode(path, text.as_ref())
        .with_context(|| format!("cannot write {}", path.display()))
}

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

/// Whether this machine was booted with systemd (sd_booted(3): `/run/systemd/system` exists).
fn booted_with_systemd() -> bool {
    Path::new("/run/systemd/system").is_dir()
}

/// Whether the user's systemd manager answers (`systemctl --user show-environment`, which any
/// running manager answers and which changes nothing). The error is systemctl's own words.
fn systemd_user_manager() -> Result<(), String> {
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

/// A systemctl query whose answer is one word on stdout (`is-enabled`, `is-active`); the word,
/// or `unknown` when it printed none.
fn systemctl_word(verb: &str, unit: &str) -> String {
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

/// Asks the service manager about `profile`'s unit (nothing when `AGENTCHAT_SERVICE_DIR` is set).
pub fn manager_view(kind: ServiceKind, profile: &str) -> ManagerView {
    if std::env::var_os("AGENTCHAT_SERVICE_DIR").is_some() {
        return ManagerView::NotAsked;
    }
    match kind {
        ServiceKind::Systemd => {
            if let Err(why) = systemd_user_manager() {
                return ManagerView::Unreachable(why);
            }
            let unit = systemd_unit_name(profile);
            let enabled_word = systemctl_word("is-enabled", &unit);
            let active_word = systemctl_word("is-active", &unit);
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
            match run_manager(
                "launchctl",
                &["print", &format!("{domain}/{}", launchd_label(profile))],
            ) {
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

/// The config the unit's listener will read must exist and load as the service will see it: its
/// file, the key file it names, and none of the installing shell's `AGENTCHAT_*` variables (the
/// manager passes none on). Returns a warning to print when the service would have no key.
fn check_unit_config(profile: &str, config: Option<&Path>) -> anyhow::Result<Option<String>> {
    if let Some(c) = config
        && !c.is_file()
    {
        bail!(
            "the config file {} does not exist (or is not a file); `agentchat service install \
             --config FILE` needs the file the listener will read",
            c.display()
        );
    }
    let env: std::collections::HashMap<String, String> =
        ["HOME", "XDG_CONFIG_HOME", "XDG_STATE_HOME"]
            .into_iter()
            .filter_map(|k| std::env::var(k).ok().map(|v| (k.to_string(), v)))
            .collect();
    let args = crate::config::ConfigArgs {
        config: config.map(Path::to_path_buf),
        profile: Some(profile.to_string()),
        ..Default::default()
    };
    let settings = crate::config::load_with_env(&args, &env).with_context(|| {
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

/// `service install`: checks the config and the service manager, writes the unit, and has the
/// manager start it; when the manager refuses, the unit file is put back as it was.
fn install(kind: ServiceKind, profile: &str, config: Option<&Path>) -> anyhow::Result<i32> {
    let spec = spec_for(profile, config)?;
    let warning = check_unit_config(profile, spec.config.as_deref())?;
    let target = target(kind)?;
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
    let path = target.dir.join(file_name(kind, profile));
    let previous = match std::fs::read(&path) {
        Ok(bytes) => Some(bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", path.display())),
    };
    write_unit(&path, render(kind, &spec))?;
    println!("wrote {}", path.display());
    if let Some(warning) = warning {
        eprintln!("agentchat service: warning: {warning}");
    }
    if target.dry_run {
        println!("AGENTCHAT_SERVICE_DIR is set: not calling the service manager");
        return Ok(0);
    }
    let started = match kind {
        ServiceKind::Systemd => {
            let unit = systemd_unit_name(profile);
            run_manager("systemctl", &["--user", "daemon-reload"])
                .and_then(|_| run_manager("systemctl", &["--user", "enable", "--now", &unit]))
                .map(|_| {
                    format!(
                        "started {unit}; logs: journalctl --user -u {unit}\n\
                         to keep it running while you are logged out: loginctl enable-linger $USER"
                    )
                })
        }
        ServiceKind::Launchd => {
            let domain = format!("gui/{}", crate::sys::process::current_uid());
            // A previous copy must be booted out first, or bootstrap refuses.
            let _ = run_manager(
                "launchctl",
                &["bootout", &format!("{domain}/{}", launchd_label(profile))],
            );
            run_manager(
                "launchctl",
                &["bootstrap", &domain, &path.display().to_string()],
            )
            .map(|_| format!("started {}", launchd_label(profile)))
        }
    };
    match started {
        Ok(message) => {
            println!("{message}");
            Ok(0)
        }
        Err(e) => {
            let undone = match &previous {
                Some(bytes) => write_unit(&path, bytes)
                    .map(|()| format!("put the previous {} back", path.display())),
                None => std::fs::remove_file(&path)
                    .map(|()| format!("removed {}", path.display()))
                    .map_err(anyhow::Error::from),
            }
            .unwrap_or_else(|e| format!("could not undo the write of {}: {e:#}", path.display()));
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
    match args.action {
        ServiceAction::Print => {
            print!(
                "{}",
                render(kind, &spec_for(&profile, args.config.as_deref())?)
            );
            Ok(0)
        }
        ServiceAction::Install { all: false } => install(kind, &profile, args.config.as_deref()),
        ServiceAction::Install { all: true } => install_all(kind, args.config.as_deref()),
        ServiceAction::Uninstall => uninstall(kind, &profile),
        ServiceAction::Status => status(kind, &profile),
    }
}

/// `service install --all`: a unit per profile the config names, each through [`install`] (its
/// checks and its undo). One that fails does not stop the others; the exit code is 1 if any did.
fn install_all(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<i32> {
    let args = crate::config::ConfigArgs {
        config: config.map(Path::to_path_buf),
        ..Default::default()
    };
    let mut failed = Vec::new();
    for profile in crate::status::configured_profiles(&args)? {
        println!("== profile {profile}");
        match install(kind, &profile, config) {
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

/// `service uninstall`: stop and disable the unit, then remove its file.
fn uninstall(kind: ServiceKind, profile: &str) -> anyhow::Result<i32> {
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
        Ok(()) => println!("removed {}", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            println!("no unit at {}", path.display())
        }
        Err(e) => {
            return Err(e).with_context(|| format!("cannot remove {}", path.display()));
        }
    }
    if !target.dry_run && kind == ServiceKind::Systemd {
        let _ = run_manager("systemctl", &["--user", "daemon-reload"]);
    }
    Ok(0)
}

/// `service status`: whether the unit is written, enabled and running, then the manager's own view.
fn status(kind: ServiceKind, profile: &str) -> anyhow::Result<i32> {
    let target = target(kind)?;
    let path = target.dir.join(file_name(kind, profile));
    let written = if path.exists() {
        "written"
    } else {
        "not written"
    };
    println!("unit: {} ({written})", path.display());
    let view = manager_view(kind, profile);
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
    if !matches!(view, ManagerView::Answered { .. }) {
        return Ok(0);
    }
    let answer = match kind {
        ServiceKind::Systemd => Command::new("systemctl")
            .args([
                "--user",
                "status",
                "--no-pager",
                &systemd_unit_name(profile),
            ])
            .output(),
        ServiceKind::Launchd => Command::new("launchctl")
            .args([
                "print",
                &format!(
                    "gui/{}/{}",
                    crate::sys::process::current_uid(),
                    launchd_label(profile)
                ),
            ])
            .output(),
    };
    match answer {
        Ok(out) => print!("{}", String::from_utf8_lossy(&out.stdout)),
        Err(e) => println!("cannot ask the service manager: {e}"),
    }
    Ok(0)
}

/// Where `service install` puts this profile's unit (respecting `AGENTCHAT_SERVICE_DIR`). For
/// `doctor`, which checks whether it is installed.
pub fn unit_path(kind: ServiceKind, profile: &str) -> anyhow::Result<PathBuf> {
    Ok(target(kind)?.dir.join(file_name(kind, profile)))
}

/// The text `service print --profile P [--config F]` renders now, so `doctor` can byte-compare
/// it with the installed unit.
pub fn render_current(
    kind: ServiceKind,
    profile: &str,
    config: Option<PathBuf>,
) -> anyhow::Result<String> {
    Ok(render(kind, &spec_for(profile, config.as_deref())?))
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

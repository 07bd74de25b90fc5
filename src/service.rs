//! `agentchat service`: installs the listener as a per-user service (a systemd user unit on Linux,
//! a launchd agent on macOS), one per profile. The unit files are templates compiled in from
//! `systemd/` and `launchd/`; rendering is pure so tests check the exact text with the real
//! `systemd-analyze verify` and a real plist parser.
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
    Install,
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
    /// Profile the service runs (`agentchat listen --profile P`); default: env AGENTCHAT_PROFILE,
    /// else "default", exactly as every other command chooses it.
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// systemd or launchd (default: this platform's).
    #[arg(long, value_enum, global = true)]
    pub kind: Option<ServiceKind>,
    /// Config file the service passes to `listen --config`.
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
    /// PATH captured from the installing shell, so `claude`/`codex` are found under the manager.
    pub path_env: String,
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
    let mut out = String::with_capacity(arg.len() + 2);
    out.push('"');
    for c in arg.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '$' => out.push_str("$$"),
            '%' => out.push_str("%%"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
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
                    "{{ENV_PATH}}",
                    &systemd_quote(&format!("PATH={}", spec.path_env)),
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
                .replace("{{PATH}}", &xml_escape(&spec.path_env))
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
        path_env: std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into()),
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

fn uid() -> u32 {
    // SAFETY: getuid has no preconditions and cannot fail.
    unsafe { libc::getuid() }
}

fn write_unit(path: &Path, text: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    crate::sys::fs::write_keeping_mode(path, text.as_bytes())
        .with_context(|| format!("cannot write {}", path.display()))
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
        ServiceAction::Install => {
            let spec = spec_for(&profile, args.config.as_deref())?;
            let target = target(kind)?;
            let path = target.dir.join(file_name(kind, &profile));
            write_unit(&path, &render(kind, &spec))?;
            println!("wrote {}", path.display());
            if target.dry_run {
                println!("AGENTCHAT_SERVICE_DIR is set: not calling the service manager");
                return Ok(0);
            }
            match kind {
                ServiceKind::Systemd => {
                    let unit = systemd_unit_name(&profile);
                    run_manager("systemctl", &["--user", "daemon-reload"])?;
                    run_manager("systemctl", &["--user", "enable", "--now", &unit])?;
                    println!("started {unit}; logs: journalctl --user -u {unit}");
                    println!(
                        "to keep it running while you are logged out: loginctl enable-linger $USER"
                    );
                }
                ServiceKind::Launchd => {
                    let domain = format!("gui/{}", uid());
                    let plist = path.display().to_string();
                    // A previous copy must be booted out first, or bootstrap refuses.
                    let _ = run_manager(
                        "launchctl",
                        &["bootout", &format!("{domain}/{}", launchd_label(&profile))],
                    );
                    run_manager("launchctl", &["bootstrap", &domain, &plist])?;
                    println!("started {}", launchd_label(&profile));
                }
            }
            Ok(0)
        }
        ServiceAction::Uninstall => {
            let target = target(kind)?;
            let path = target.dir.join(file_name(kind, &profile));
            if !target.dry_run {
                match kind {
                    ServiceKind::Systemd => {
                        let unit = systemd_unit_name(&profile);
                        let _ = run_manager("systemctl", &["--user", "disable", "--now", &unit]);
                    }
                    ServiceKind::Launchd => {
                        let service = format!("gui/{}/{}", uid(), launchd_label(&profile));
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
        ServiceAction::Status => {
            let target = target(kind)?;
            let path = target.dir.join(file_name(kind, &profile));
            println!(
                "unit: {} ({})",
                path.display(),
                if path.exists() {
                    "installed"
                } else {
                    "not installed"
                }
            );
            if target.dry_run {
                return Ok(0);
            }
            let answer = match kind {
                ServiceKind::Systemd => Command::new("systemctl")
                    .args([
                        "--user",
                        "status",
                        "--no-pager",
                        &systemd_unit_name(&profile),
                    ])
                    .output(),
                ServiceKind::Launchd => Command::new("launchctl")
                    .args([
                        "print",
                        &format!("gui/{}/{}", uid(), launchd_label(&profile)),
                    ])
                    .output(),
            };
            match answer {
                Ok(out) => print!("{}", String::from_utf8_lossy(&out.stdout)),
                Err(e) => println!("cannot ask the service manager: {e}"),
            }
            Ok(0)
        }
    }
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
            kill_grace_secs: 10,
            log_path: "/tmp/l.log".into(),
        };
        assert_eq!(spec.stop_timeout_secs(), 40);
        spec.kill_grace_secs = u64::MAX;
        assert_eq!(spec.stop_timeout_secs(), u64::MAX);
    }
}

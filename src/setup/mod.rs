//! `agentchat setup`: from nothing to a working agent in one command (docs/operating.md, "Setting
//! up"). Interactive on a terminal, fully scriptable with flags, idempotent:
//!
//! 1. the key (`key`): a prompt without echo, stdin or `--api-key-file`, checked with
//!    `GET /v1/agents/me` before anything is written;
//! 2. the runtime (`pick`): `claude`/`codex` on PATH and their login, or `script`;
//! 3. the profile in `config.toml` (`config_edit`, format-preserving), its diff printed;
//! 4. the user's own Claude Code and Codex (`wiring`, `wire`, `anchor`): the `agentchat mcp`
//!    bridge registered through their own CLIs, the identity block in CLAUDE.md / AGENTS.md;
//! 5. the service (`service_step`);
//! 6. `doctor`, and one screen saying what was done and how to undo it.
//!
//! What it did is recorded in the profile's state dir (`manifest`), so `setup --undo` (`undo`)
//! removes exactly that and nothing of another profile's.

mod anchor;
mod config_edit;
mod files;
mod key;
mod manifest;
mod pick;
mod service_step;
mod tty;
mod undo;
mod wire;
mod wiring;

use crate::config::{self, ConfigArgs, RuntimeKind};
use manifest::{ConfigRecord, Manifest};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const SETUP_HELP: &str = "\
The key comes from --api-key-file FILE, else stdin when it is not a terminal, else
AGENTCHAT_API_KEY, else the profile's key file, else a prompt without echo. Nothing is
written before the server accepts it (GET /v1/agents/me).

Examples:
  agentchat setup                                   ask for everything on the terminal
  agentchat setup --yes --profile work < work.key   scripted: key on stdin, proposals taken
  agentchat setup --runtime script -- /home/me/bin/agent --verbose
  agentchat setup --undo --profile work             remove what setup added

Environment: AGENTCHAT_CONFIG, AGENTCHAT_PROFILE, AGENTCHAT_STATE_DIR (as every command);
  AGENTCHAT_API_KEY (the key, when neither --api-key-file nor stdin gives one);
  HOME, CLAUDE_CONFIG_DIR, CODEX_HOME (where Claude Code and Codex keep their config).

Exit codes:
  0  done, or nothing to do (the screen says which)
  1  it could not be done: a refused key, an unreadable config, an undo step that failed";

pub const UNINSTALL_HELP: &str = "\
Removes what `agentchat setup` recorded for the profile in its state dir (setup.json): the MCP
entries through the CLIs' own `mcp remove`, the identity block, the service, the profile's keys
in the config, and the key file if setup wrote it. Everything else stays byte for byte.

Exit codes:
  0  done, or setup never ran for the profile
  1  a step failed (the manifest is kept, so it can be run again)";

#[derive(Debug, Clone, Default, clap::Args)]
pub struct SetupArgs {
    /// Config file to add the profile to (default: config.toml in the platform config dir)
    /// [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The profile to set up (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The agent's runtime (default: the logged-in CLI found on PATH). `script` takes its
    /// command after `--`.
    #[arg(long, value_name = "RUNTIME", value_enum, ignore_case = true)]
    pub runtime: Option<RuntimeKind>,
    /// The AgentChat server (default: the profile's, else https://api.agentchat.me).
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// Use the key in FILE (0600) instead of reading it from stdin or asking.
    #[arg(long, value_name = "FILE")]
    pub api_key_file: Option<PathBuf>,
    /// Do not install the service.
    #[arg(long)]
    pub no_service: bool,
    /// Do not register the MCP server with Claude Code / Codex or write the identity block.
    #[arg(long)]
    pub no_wire: bool,
    /// Ask nothing: take the proposals.
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Wire Claude Code / Codex for this profile even where another profile is wired.
    #[arg(long)]
    pub rewire: bool,
    /// Remove what setup added for this profile (the same as `agentchat uninstall`).
    #[arg(long)]
    pub undo: bool,
    /// The script runtime's command: `-- PROGRAM ARGS...`.
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

#[derive(Debug, Clone, Default, clap::Args)]
pub struct UninstallArgs {
    /// Config file setup edited [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The profile to remove (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

/// The profile, its config file and its state dir, as every other command finds them.
pub(crate) struct Place {
    pub profile: String,
    pub config_path: PathBuf,
    /// The config was named (`--config`, `AGENTCHAT_CONFIG`): the bridge and the unit get it too.
    pub config_explicit: bool,
    pub state_dir: PathBuf,
    pub env: HashMap<String, String>,
}

impl Place {
    pub fn find(config: Option<&Path>, profile: Option<&str>) -> anyhow::Result<Place> {
        let env = config::process_env();
        let args = ConfigArgs {
            config: config.map(Path::to_path_buf),
            profile: profile.map(str::to_string),
            ..Default::default()
        };
        let profile = config::profile_name(&args, &env)?;
        let (path, explicit) = config::config_file_path(&args, &env)
            .ok_or_else(|| anyhow::anyhow!("no config dir: HOME is not set; give --config FILE"))?;
        let config_path = std::path::absolute(path)?;
        let state_dir = match env.get("AGENTCHAT_STATE_DIR").filter(|v| !v.is_empty()) {
            Some(d) => PathBuf::from(d),
            None => config::default_state_base(&env)
                .ok_or_else(|| anyhow::anyhow!("no state dir: HOME is not set"))?
                .join(&profile),
        };
        Ok(Place {
            profile,
            config_path,
            config_explicit: explicit,
            state_dir,
            env,
        })
    }

    pub fn config_flag(&self) -> Option<&Path> {
        self.config_explicit.then_some(self.config_path.as_path())
    }
}

/// The path the user runs agentchat by (a symlink on PATH, not its versioned target), as the
/// unit's `ExecStart` names it: what the MCP entries and the service subprocess run.
pub(crate) fn stable_exe() -> anyhow::Result<PathBuf> {
    let exe = std::env::current_exe()?;
    Ok(crate::service::stable_program(
        &exe,
        std::env::args_os().next().as_deref(),
        std::env::var_os("PATH").as_deref(),
    ))
}

pub async fn run_command(args: SetupArgs) -> anyhow::Result<i32> {
    if args.undo {
        return undo::run(args.config.as_deref(), args.profile.as_deref()).await;
    }
    run_setup(args).await
}

pub async fn run_uninstall(args: UninstallArgs) -> anyhow::Result<i32> {
    undo::run(args.config.as_deref(), args.profile.as_deref()).await
}

/// What the profile has now, when the config defines it: its server, key file and runtime.
struct Current {
    api_base: String,
    key: Option<(PathBuf, secrecy::SecretString)>,
    runtime: Option<(RuntimeKind, Vec<String>)>,
}

fn current(place: &Place, config_text: Option<&str>, defined: bool) -> Current {
    let mut env = place.env.clone();
    env.remove("AGENTCHAT_API_KEY");
    let args = ConfigArgs {
        config: Some(place.config_path.clone()),
        profile: Some(place.profile.clone()),
        ..Default::default()
    };
    let loaded = config_text
        .and_then(|t| config::resolve(&args, &env, Some((place.config_path.as_path(), t))).ok());
    let api_base = loaded
        .as_ref()
        .map(|s| s.api_base.clone())
        .or_else(|| env.get("AGENTCHAT_API_BASE").cloned())
        .unwrap_or_else(|| config::DEFAULT_API_BASE.to_string());
    let key = loaded.as_ref().and_then(|s| match &s.key_source {
        config::KeySource::File(p) => config::read_key_file(p).ok().map(|k| (p.clone(), k)),
        _ => None,
    });
    let runtime = loaded
        .filter(|_| defined)
        .map(|s| (s.listen.runtime, s.listen.command));
    Current {
        api_base,
        key,
        runtime,
    }
}

async fn run_setup(args: SetupArgs) -> anyhow::Result<i32> {
    let place = Place::find(args.config.as_deref(), args.profile.as_deref())?;
    let ask = tty::interactive() && !args.yes;
    let profile = place.profile.clone();
    let earlier = Manifest::load(&place.state_dir)?;
    let config_text = files::read_text(&place.config_path, files::TEXT_CAP)?;
    let defined = profile == config::DEFAULT_PROFILE && config_text.is_some()
        || config_edit::profiles_in(config_text.as_deref().unwrap_or("")).contains(&profile);
    let now = current(&place, config_text.as_deref(), defined);
    println!(
        "agentchat setup: profile `{profile}`, config {}",
        place.config_path.display()
    );

    // 1. Server and key, checked before anything is written.
    let api_base = match &args.api_base {
        Some(b) => {
            Some(config::value::api_base(b).map_err(|p| anyhow::anyhow!("--api-base: {p}"))?)
        }
        None if ask => {
            let b = tty::ask("AgentChat server", &now.api_base)?;
            (b != now.api_base)
                .then(|| config::value::api_base(&b).map_err(|p| anyhow::anyhow!("server: {p}")))
                .transpose()?
        }
        None => None,
    };
    let base = api_base.clone().unwrap_or_else(|| now.api_base.clone());
    let target = key::default_key_file(&place.config_path, &profile);
    let existing = now.key.as_ref().map(|(p, k)| (p.as_path(), k));
    let env_key = place
        .env
        .get("AGENTCHAT_API_KEY")
        .filter(|k| !k.is_empty())
        .map(|k| secrecy::SecretString::from(k.clone()));
    let key = key::obtain(
        args.api_key_file.as_deref(),
        existing,
        env_key,
        &target,
        ask,
    )?;
    let handle = key::check(&base, &key.key).await?;
    println!("key: accepted by {base}: you are @{handle}");

    // 2. Runtime.
    let found = pick::detect().await;
    for line in pick::describe(&found) {
        println!("{line}");
    }
    let (runtime, command) = pick::choose(
        args.runtime,
        &args.command,
        now.runtime.clone(),
        &found,
        ask,
    )?;
    println!("runtime: {runtime}");

    // 3. Config: the plan, shown before it is written.
    let wanted = config_edit::Wanted {
        api_base: api_base.filter(|b| b != &now.api_base || !defined),
        api_key_file: Some(key.file.display().to_string()),
        runtime: Some(runtime.as_str().to_string()),
        command: (runtime == RuntimeKind::Script).then_some(command),
    };
    let keys = config_edit::keys_for(&profile, &wanted);
    let before = config_text.clone().unwrap_or_default();
    let (after, records, created_tables) = config_edit::apply(&before, &keys)?;
    let config_changes = after != before || config_text.is_none();
    if config_changes {
        files::check_writable(&place.config_path)?;
    }
    if config_changes {
        println!("config: {} will change:", place.config_path.display());
        print!("{}", config_edit::diff(&before, &after));
    } else {
        println!("config: profile `{profile}` is already as wanted");
    }
    let wire_clis = !args.no_wire
        && (!ask
            || tty::confirm(
                "Register AgentChat with your own Claude Code / Codex and write the identity block?",
                true,
            )?);
    let want_service = !args.no_service
        && (!ask || tty::confirm("Install the always-on service for this profile?", true)?);
    if ask && !tty::confirm("Go ahead?", true)? {
        println!("Nothing was written.");
        return Ok(1);
    }

    // Writes start here.
    let mut m = earlier.clone().unwrap_or_else(|| Manifest::new(&profile));
    let mut changed = false;
    let mut done: Vec<String> = Vec::new();
    if key::store(&key, &mut m)? {
        changed = true;
        done.push(format!("key: stored in {} (0600)", key.file.display()));
    } else {
        done.push(format!("key: {} (unchanged)", key.file.display()));
    }
    manifest::create_dirs(&place.state_dir, &mut m, true)?;
    if config_changes {
        if let Some(dir) = place.config_path.parent() {
            manifest::create_dirs(dir, &mut m, true)?;
        }
        crate::sys::fs::write_through_links(&place.config_path, after.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", place.config_path.display()))?;
        merge_config(
            &mut m,
            &place.config_path,
            config_text,
            after,
            records,
            created_tables,
        );
        changed = true;
        done.push(format!(
            "config: profile `{profile}` written to {}",
            place.config_path.display()
        ));
    } else {
        done.push(format!("config: profile `{profile}` unchanged"));
    }
    manifest::inherit(&mut m, &place.state_dir, &place.config_path);
    m.save(&place.state_dir)?;

    // 4. Wiring.
    if wire_clis {
        let exe = stable_exe()?;
        let mut argv = vec![
            exe.display().to_string(),
            "mcp".into(),
            "--profile".into(),
            profile.clone(),
        ];
        if let Some(c) = place.config_flag() {
            argv.push("--config".into());
            argv.push(c.display().to_string());
        }
        let api = crate::client::Api::new(&base, key.key.clone())?;
        let w = wiring::Wiring {
            profile: &profile,
            argv,
            rewire: args.rewire,
            handle: &handle,
            api: &api,
            env: &place.env,
            config: place.config_flag(),
            state_dir: &place.state_dir,
        };
        if found.is_empty() {
            done.push("wiring: neither `claude` nor `codex` is on PATH; nothing to wire".into());
        }
        for f in &found {
            let d = wiring::wire(&w, f.cli, &f.binary, &mut m).await;
            changed |= d.changed;
            done.extend(d.lines);
            m.save(&place.state_dir)?;
        }
    } else {
        done.push("wiring: skipped (--no-wire)".into());
    }

    // 5. Service.
    if want_service {
        let (lines, c) = service_step::install(&profile, place.config_flag(), &mut m);
        changed |= c;
        done.extend(lines);
        m.save(&place.state_dir)?;
    } else {
        done.push("service: skipped (--no-service)".into());
    }

    // 6. Check, and the one screen.
    let report = crate::doctor::run(&crate::doctor::DoctorArgs {
        config: ConfigArgs {
            config: place.config_flag().map(Path::to_path_buf),
            profile: Some(profile.clone()),
            ..Default::default()
        },
        json: false,
    })
    .await;
    println!("\n== doctor");
    print!("{}", report.render_text());
    println!("\n== setup for profile `{profile}` (@{handle})");
    for line in &done {
        println!("{line}");
    }
    if changed {
        println!("Done.");
    } else {
        println!("Nothing changed: profile `{profile}` was already set up this way.");
    }
    let undo = match &args.profile {
        Some(p) => format!("agentchat setup --undo --profile {p}"),
        None => "agentchat setup --undo".to_string(),
    };
    println!("To undo all of it: `{undo}` (or `agentchat uninstall`, same flags).");
    Ok(0)
}

/// Records the config edit, keeping the first run's "before" for every key.
fn merge_config(
    m: &mut Manifest,
    path: &Path,
    before: Option<String>,
    after: String,
    records: Vec<manifest::KeyRecord>,
    created: Vec<Vec<String>>,
) {
    match &mut m.config {
        Some(c) if c.path == path => {
            for r in records {
                if !c.keys.iter().any(|k| k.path == r.path) {
                    c.keys.push(r);
                }
            }
            for t in created {
                if !c.created_tables.contains(&t) {
                    c.created_tables.push(t);
                }
            }
            c.after = after;
        }
        _ => {
            m.config = Some(ConfigRecord {
                path: path.to_path_buf(),
                before,
                after,
                keys: records,
                created_tables: created,
                ..ConfigRecord::default()
            })
        }
    }
}

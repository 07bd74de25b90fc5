//! `agentchat setup`: from nothing to a working agent in one command (docs/operating.md, "Setting
//! up"). Interactive on a terminal, fully scriptable with flags, idempotent:
//!
//! 1. the key (`key`): a prompt without echo, stdin or `--api-key-file`, checked with
//!    `GET /v1/agents/me` before anything is written;
//! 2. the runtime (`pick`): `claude`/`codex` on PATH and their login, or `script`;
//! 3. the profile in `config.toml` (`config_edit`, format-preserving), its diff printed;
//! 4. the user's own Claude Code and Codex (`wiring`, `user_cli`, `anchor`): the `agentchat mcp`
//!    bridge registered through their own CLIs, the identity block in CLAUDE.md / AGENTS.md;
//! 5. the service (`service_step`);
//! 6. `doctor`, and one screen saying what was done and how to undo it.
//!
//! What it did is recorded in the profile's state dir (`manifest`), so `setup --undo` (`undo`)
//! removes exactly that and nothing of another profile's.

mod account;
mod anchor;
mod config_edit;
mod files;
mod finish;
mod key;
mod manifest;
mod pick;
mod service_step;
mod signup;
mod tty;
mod undo;
pub(crate) mod user_cli;
mod verdict;
mod wiring;

use crate::config::{self, ConfigArgs, RuntimeKind};
pub(crate) use finish::confirm;
use manifest::{ConfigRecord, Manifest};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub const SETUP_HELP: &str = "\
The key comes from --api-key-file FILE, else stdin when it is not a terminal, else
AGENTCHAT_API_KEY, else the profile's key file, else a prompt without echo. Nothing is
written before the server accepts it (GET /v1/agents/me).

No key yet? In a terminal setup asks \"Do you have an AgentChat API key?\"; answer no to sign
up with an email and a handle: the server emails a 6-digit code, setup asks for it and stores
the new agent's key (0600, never shown). --recover gets a new key for an agent whose key is
lost (the old one stops working). Scripted, the code is read from stdin.

Examples:
  agentchat setup                                   ask for everything on the terminal
  agentchat setup --yes --profile work < work.key   scripted: key on stdin, proposals taken
  agentchat setup --yes --new --email me@example.com --handle my-agent   sign up; code on stdin
  agentchat setup --yes --recover --email me@example.com --handle my-agent
  agentchat setup --runtime script -- /home/me/bin/agent --verbose
  agentchat setup --undo --profile work             remove what setup added

Environment: AGENTCHAT_CONFIG, AGENTCHAT_PROFILE, AGENTCHAT_STATE_DIR (as every command);
  AGENTCHAT_API_KEY (the key, when neither --api-key-file nor stdin gives one);
  HOME, CLAUDE_CONFIG_DIR, CODEX_HOME (where Claude Code and Codex keep their config).

Exit codes:
  0  everything asked for works (the last line says \"@handle answers on this machine\")
  1  it could not be done: a refused key, a refused sign-up, an unreadable config, \"Go
     ahead? n\", an undo step that failed
  3  setup wrote what it could, but something asked for does not work yet: the last line
     (\"not yet: ...\") says what is missing and what to do";

pub const UNINSTALL_HELP: &str = "\
Removes what `agentchat setup` recorded for the profile in its state dir (setup.json): the MCP
entries through the CLIs' own `mcp remove` (Codex's config.toml is put back byte for byte, mode
included, while it is as setup left it), the identity block, the service (a profile setup added
to the one-process unit is taken out of the running host), the profile's keys in the config,
and the key file if setup wrote it. Everything else stays byte for byte. A line ending in
`...` is said as a wait starts, with its limit.

  $ agentchat uninstall --profile work
  == undo for profile `work`
  Claude Code: running `claude mcp remove` (at most 60 s)...
  Claude Code: MCP server `agentchat` removed (`claude mcp remove`)
  Claude Code: removed ~/.claude/CLAUDE.md (setup created it)
  Codex: ~/.codex/config.toml restored byte for byte (as before setup)
  Codex: removed ~/.codex/AGENTS.md (setup created it)
  config: removed ~/.config/agentchat/config.toml (setup created it)
  key: removed ~/.config/agentchat/work.key (setup wrote it)

Exit codes:
  0  done, or setup never ran for the profile
  1  a step failed (the manifest is kept, so it can be run again)";

#[derive(Debug, Clone, Default, clap::Args)]
#[command(group(clap::ArgGroup::new("account").args(["new", "recover"])))]
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
    #[arg(long, value_name = "RUNTIME", value_parser = crate::config::value::runtime_parser(), ignore_case = true)]
    pub runtime: Option<RuntimeKind>,
    /// The AgentChat server (default: the profile's, else <https://api.agentchat.me>).
    #[arg(long, value_name = "URL")]
    pub api_base: Option<String>,
    /// Use the key in FILE (0600) instead of reading it from stdin or asking.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["new", "recover"])]
    pub api_key_file: Option<PathBuf>,
    /// Sign up a new agent (--email, --handle): the server emails a 6-digit code, read from
    /// the terminal or stdin; the new key is stored 0600 and never shown.
    #[arg(long, conflicts_with = "recover")]
    pub new: bool,
    /// Get a new key for an agent whose key is lost (--email, --handle): by an emailed code,
    /// like --new. The old key stops working.
    #[arg(long)]
    pub recover: bool,
    /// The email for --new and --recover (where the code is sent).
    #[arg(long, value_name = "EMAIL", requires = "account")]
    pub email: Option<String>,
    /// The agent's handle for --new and --recover.
    #[arg(long, value_name = "HANDLE", requires = "account")]
    pub handle: Option<String>,
    /// At the end, one real run now (`agentchat doctor --run --yes`): costs one model call. On
    /// a terminal setup offers it instead.
    #[arg(long)]
    pub run: bool,
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
        let state_dir = config::state_dir(&args, &env, &profile)?;
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
    let loaded = config_text.and_then(|t| {
        config::ConfigFile::parse(&args, env.clone(), &place.config_path, t)
            .and_then(|file| file.settings(None, config::KeyFile::Named))
            .ok()
    });
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
    // The key is in `place.env` now; no child setup starts (`claude auth status`, `mcp add`,
    // `service install`) gets it from the environment.
    // SAFETY: the runtime is current-thread (src/main.rs) and setup has started no thread yet,
    // so nothing reads or writes the environment concurrently.
    unsafe { std::env::remove_var("AGENTCHAT_API_KEY") };
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
    // Trimmed as doctor and the listener read it: a stray newline or space is not the key's.
    let env_key = place
        .env
        .get("AGENTCHAT_API_KEY")
        .map(|k| k.trim())
        .filter(|k| !k.is_empty())
        .map(|k| secrecy::SecretString::from(k.to_string()));
    let mut m = earlier.clone().unwrap_or_else(|| Manifest::new(&profile));
    let mut changed = false;
    let mut done: Vec<String> = Vec::new();
    let flow = if args.new {
        Some(signup::Flow::Register)
    } else if args.recover {
        Some(signup::Flow::Recover)
    } else if tty::interactive()
        && args.api_key_file.is_none()
        && existing.is_none()
        && env_key.is_none()
    {
        account::ask_for_flow()?
    } else {
        None
    };
    let key = match flow {
        Some(flow) => {
            let k = account::obtain(
                &base,
                flow,
                &args,
                now.key.as_ref().map(|(p, _)| p.as_path()),
                &target,
                earlier.as_ref(),
            )
            .await?;
            // Stored at once: the server shows a new key only once.
            key::store(&k, &mut m)?;
            manifest::create_dirs(&place.state_dir, &mut m, true)?;
            m.save(&place.state_dir)?;
            changed = true;
            done.push(format!("key: stored in {} (0600)", k.file.display()));
            println!("key: the new key is stored in {} (0600)", k.file.display());
            k
        }
        None => key::obtain(
            args.api_key_file.as_deref(),
            existing,
            env_key,
            &target,
            ask,
        )?,
    };
    wiring::progress(&format!(
        "key: checking it with {base} (GET /v1/agents/me, at most {} s)...",
        key::CHECK_WAIT.as_secs()
    ));
    let handle = key::check(&base, &key.key).await?;
    println!("key: accepted by {base}: you are @{handle}");

    // 2. Runtime: only the CLIs setup will use or wire are asked whether they are logged in
    // (`claude auth status` writes into a fresh home).
    let absent = pick::absent_before_probes(&place.env);
    let found = pick::detect(pick::needed(args.runtime, args.no_wire)).await;
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
        pick::remove_probe_leftovers(&absent);
        match flow {
            Some(_) => println!(
                "Nothing else was written: the new key is in {}.",
                key.file.display()
            ),
            None => println!("Nothing was written."),
        }
        return Ok(1);
    }

    // Writes start here (a key from sign-up or recovery is stored already).
    if flow.is_none() {
        if key::store(&key, &mut m)? {
            changed = true;
            done.push(format!("key: stored in {} (0600)", key.file.display()));
        } else {
            done.push(format!("key: {} (unchanged)", key.file.display()));
        }
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
    let mut blocks_unwritten = Vec::new();
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
        let w = wiring::WiringRequest {
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
            if let Some(why) = d.block_unwritten {
                blocks_unwritten.push((f.cli.name(), why));
            }
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
    wiring::progress(&format!(
        "doctor: checking the key and the texts with {base} (at most {} s), then the runtime...",
        2 * crate::doctor::facts::SERVER_TIMEOUT.as_secs()
    ));
    let report = crate::doctor::run(&crate::doctor::DoctorArgs {
        config: ConfigArgs {
            config: place.config_flag().map(Path::to_path_buf),
            profile: Some(profile.clone()),
            ..Default::default()
        },
        json: false,
        strict: false,
        run: false,
        yes: false,
    })
    .await;
    println!("\n== doctor");
    print!("{}", report.render_text());
    println!("\n== setup for profile `{profile}` (@{handle})");
    for line in &done {
        println!("{line}");
    }
    // No "Done." here: the verdict below is the only line that says whether it worked
    // (issue 28, "the last line is the truth").
    if !changed {
        println!("Nothing changed: profile `{profile}` was already set up this way.");
    }
    let undo = match &args.profile {
        Some(p) => format!("agentchat setup --undo --profile {p}"),
        None => "agentchat setup --undo".to_string(),
    };
    println!("To undo all of it: `{undo}` (or `agentchat uninstall`, same flags).");
    let v = verdict::judge(&verdict::Facts {
        profile: &profile,
        handle: &handle,
        runtime,
        found: &found,
        unwired: if wire_clis {
            finish::unwired(&found, &place.env)
        } else {
            Vec::new()
        },
        blocks_unwritten,
        service: if want_service {
            finish::service_now(&profile)
        } else {
            verdict::Service::NotWanted
        },
        doctor: &report,
    });
    for line in &v.missing {
        println!("missing: {line}");
    }
    println!("{}", v.line);
    if v.code != verdict::EXIT_OK {
        return Ok(v.code);
    }
    finish::first_run(&args, &place, &handle, ask).await
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

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
mod args;
mod bounds;
mod config_edit;
mod finish;
mod key;
mod live;
mod manifest;
mod now;
mod pick;
mod server;
mod service_step;
mod signup;
mod tty;
mod undo;
mod verdict;
mod wiring;

use crate::config::{self, ConfigArgs, RuntimeKind};
use crate::sys::capped as files;
pub use args::{SETUP_HELP, SetupArgs, UNINSTALL_HELP, UninstallArgs};
use manifest::{ConfigRecord, Manifest};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

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

pub async fn run_command(args: SetupArgs) -> anyhow::Result<i32> {
    if args.undo {
        return undo::run(
            args.config.as_deref(),
            args.profile.as_deref(),
            args.delete_key,
        )
        .await;
    }
    run_setup(args).await
}

pub async fn run_uninstall(args: UninstallArgs) -> anyhow::Result<i32> {
    undo::run(
        args.config.as_deref(),
        args.profile.as_deref(),
        args.delete_key,
    )
    .await
}

/// `agentchat setup` for this profile and config, as the user would type it again.
fn again(args: &SetupArgs) -> String {
    let mut line = "agentchat setup".to_string();
    if let Some(p) = &args.profile {
        line.push_str(&format!(" --profile {p}"));
    }
    if let Some(c) = &args.config {
        line.push_str(&format!(" --config {}", c.display()));
    }
    line
}

/// The server for this run: `--api-base`, else the answer on a terminal, else the profile's.
/// `Some` when the config must say it (it differs, or a stopped setup's server is resumed).
fn choose_server(
    args: &SetupArgs,
    ask: bool,
    now: &now::Current,
) -> anyhow::Result<Option<String>> {
    let resumed = now.base_resumed;
    Ok(match &args.api_base {
        Some(b) => Some(server::parse(b, "--api-base")?),
        None if ask => {
            let b = tty::ask("AgentChat server", &now.api_base)?;
            (b != now.api_base || resumed)
                .then(|| server::parse(&b, "server"))
                .transpose()?
        }
        None => resumed.then(|| now.api_base.clone()),
    })
}

/// Which flow gets the key when there is none: sign-up, recovery, or none (a key is given).
fn choose_flow(
    args: &SetupArgs,
    m: &Manifest,
    base: &str,
    has_key: bool,
) -> anyhow::Result<Option<signup::Flow>> {
    let waiting = account::waiting(m, None, base);
    Ok(if args.code.is_some() {
        Some(match waiting {
            Some(p) if p.recover => signup::Flow::Recover,
            _ if args.recover => signup::Flow::Recover,
            _ => signup::Flow::Register,
        })
    } else if args.new {
        Some(signup::Flow::Register)
    } else if args.recover {
        Some(signup::Flow::Recover)
    } else if tty::interactive() && args.api_key_file.is_none() && !has_key {
        account::ask_for_flow(waiting)?
    } else {
        None
    })
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
    println!(
        "agentchat setup: profile `{profile}`, config {}",
        place.config_path.display()
    );
    // 0. The config as the listener reads it, before any question.
    let target = key::default_key_file(&place.config_path, &profile);
    let now = now::read(
        &place,
        config_text.as_deref(),
        defined,
        args.api_base.as_deref(),
        earlier.as_ref(),
        &target,
    )?;
    for line in &now.resumed {
        println!("{line}");
    }

    // 1. Server and key, checked before anything is sent or written.
    let api_base = choose_server(&args, ask, &now)?;
    let base = api_base.clone().unwrap_or_else(|| now.api_base.clone());
    server::refuse_cleartext(&base, now.allow_cleartext)?;
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
    let flow = choose_flow(&args, &m, &base, existing.is_some() || env_key.is_some())?;
    if let (Some(signup::Flow::Register), Some((file, _))) = (flow, existing) {
        anyhow::bail!(
            "profile `{profile}` already has an API key ({}): a sign-up would put another \
             agent's key in its place, so nothing was asked of the server. Sign the new agent \
             up under a profile of its own (`agentchat setup --profile NAME --new …`); to \
             replace this profile's agent, move {} away first (keep it: it is the only way to \
             that agent, besides `--recover`)",
            file.display(),
            file.display()
        );
    }
    let key = match flow {
        Some(flow) => {
            let again = again(&args);
            let request = account::Request {
                base: &base,
                flow,
                args: &args,
                existing: now.key.as_ref().map(|(p, _)| p.as_path()),
                target: &target,
                state_dir: &place.state_dir,
                again: &again,
            };
            let k = match account::obtain(&request, &mut m).await? {
                account::Obtained::Key(k) => k,
                account::Obtained::Waiting(line) => {
                    println!("{line}");
                    return Ok(verdict::EXIT_NOT_YET);
                }
            };
            // Stored at once: the server shows a new key only once.
            key::store(&k, &mut m)?;
            m.key_only_copy = true;
            m.api_base = Some(base.clone());
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
    crate::sys::text::progress(&format!(
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
    // The bounds on runs it will have (issue 38), and whether to keep them.
    let policy = bounds::choose(&now.policy, ask)?;

    // 3. Config: the plan, shown before it is written.
    let wanted = config_edit::Wanted {
        api_base: api_base.filter(|b| b != &now.api_base || !defined),
        api_key_file: Some(key.file.display().to_string()),
        runtime: Some(runtime.as_str().to_string()),
        command: (runtime == RuntimeKind::Script).then_some(command),
        policy,
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
    let key_written = flow.is_some() || key::store(&key, &mut m)?;
    if flow.is_none() {
        if key_written {
            changed = true;
            done.push(format!("key: stored in {} (0600)", key.file.display()));
        } else {
            done.push(format!("key: {} (unchanged)", key.file.display()));
        }
    }
    m.api_base = Some(base.clone());
    m.handle = Some(handle.clone());
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
    // A listener that runs for the profile reads the config only at start and on SIGHUP.
    let mut not_taken = Vec::new();
    if (config_changes || key_written)
        && let Some(l) = live::for_profile(&place.state_dir, &profile, None)
    {
        match live::reload(&l, runtime.as_str()).await {
            Ok(line) => done.push(line),
            Err(why) => not_taken.push(why),
        }
    }

    // 4. Wiring.
    let mut blocks_unwritten = Vec::new();
    if wire_clis {
        let exe = crate::service::stable_exe()?;
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
    crate::sys::text::progress(&format!(
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
    let listener =
        live::for_agent(&place.state_dir, (&base, &handle)).map(|l| verdict::Listening {
            who: l.describe(),
            problem: l.problem(&profile),
        });
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
        listener,
        not_taken,
        doctor: &report,
    });
    for line in &v.missing {
        println!("missing: {line}");
    }
    println!("{}", v.line);
    if v.code != verdict::EXIT_OK {
        return Ok(v.code);
    }
    finish::first_run(&args, &place, &handle, runtime, ask).await
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
            // Not as setup left it: someone else wrote to it since.
            c.edited |= before.as_deref() != Some(c.after.as_str());
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

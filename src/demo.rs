//! `agentchat demo`: the whole loop on the local server, no account, no network.
//!
//! It starts the sim in-process with its timers scaled, takes its two seeded agents, and runs the
//! real `agentchat listen` (this same binary) as a child for @bob, with `agentchat demo-agent` as
//! the script runtime and the key only in `AGENTCHAT_API_KEY`. @alice then sends messages and an
//! invite through the ordinary REST routes. The timeline comes from the listener's JSON log lines
//! (stderr), the demo agent's lines in each run log, and the demo's own checks on the server.
//! Every path stops the listener (SIGTERM, then SIGKILL) and removes the temporary state dir.

mod agent;
mod child;
mod rest;
pub mod timeline;

use crate::sys::process::GroupChild;
use anyhow::{Context, anyhow, bail};
use child::{Listener, ScratchDir, stop_with_parent, write_config};
use rest::{Rest, list_of, str_at};
use secrecy::SecretString;
use serde_json::{Value, json};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncBufReadExt;
use tokio::sync::mpsc;

/// The sim's timers run this many times faster.
const SIM_TIME_SCALE: f64 = 60.0;
/// The listener's invite pace (60 s between the two counting runs) is divided by this.
const LISTENER_TIME_SCALE: f64 = 120.0;
/// No single step of the demo may take longer than this.
const STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// The whole demo must be over within this.
const DEMO_TIMEOUT: Duration = Duration::from_secs(28);

#[derive(Debug, Clone, clap::Args)]
pub struct DemoArgs {
    /// Also print every listener log line as it comes.
    #[arg(long)]
    pub verbose: bool,
    /// Run this program as the agent instead of the built-in one: a `script` runtime's program,
    /// such as `examples/agent.py` (it prints its steps as `agent: ...` lines).
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
}

/// Hidden: the small agent the demo's listener runs as its script runtime.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoAgentArgs {}

pub async fn run_agent_command(args: DemoAgentArgs) -> anyhow::Result<i32> {
    let _ = args;
    agent::run().await
}

/// Prints timeline lines with the time since the demo started.
#[derive(Clone, Copy)]
struct Clock(Instant);

impl Clock {
    fn say(&self, who: &str, what: &str) {
        println!(
            "{:>6.2}s  {:<9} {what}",
            self.0.elapsed().as_secs_f64(),
            who
        );
    }
}

/// What the log reader hands the scenario: a parsed line, or the end of the listener's stderr.
type LogRx = mpsc::UnboundedReceiver<Value>;

/// Everything the scenario works with.
struct Demo {
    clock: Clock,
    alice: Rest,
    bob: Rest,
    bob_handle: String,
    alice_handle: String,
    /// The sim's control API (no key).
    control: Rest,
    logs: LogRx,
    recent: Arc<Mutex<VecDeque<String>>>,
}

pub async fn run_command(args: DemoArgs) -> anyhow::Result<i32> {
    crate::sys::tls::install_crypto_provider();
    let clock = Clock(Instant::now());
    println!(
        "agentchat demo: the resident listener on a local AgentChat server (no account, no network)\n"
    );

    let sim = crate::sim::start(crate::sim::SimConfig {
        listen: ([127, 0, 0, 1], 0).into(),
        time_scale: SIM_TIME_SCALE,
        seed_demo: true,
    })
    .await
    .context("cannot start the local server")?;
    let outcome = with_server(&args, clock, &sim.api_base, &sim.seeded).await;
    sim.shutdown().await;
    match outcome {
        Ok(()) => {
            println!(
                "\ndemo finished in {:.1}s: every message answered, the invite dismissed, the tray empty.",
                clock.0.elapsed().as_secs_f64()
            );
            Ok(0)
        }
        Err(e) => {
            eprintln!("\nagentchat demo: the demo failed: {e:#}");
            Ok(1)
        }
    }
}

async fn with_server(
    args: &DemoArgs,
    clock: Clock,
    api_base: &str,
    seeded: &[(String, String)],
) -> anyhow::Result<()> {
    let find = |h: &str| {
        seeded
            .iter()
            .find(|(handle, _)| handle.trim_start_matches('@').eq_ignore_ascii_case(h))
            .map(|(handle, key)| (handle.clone(), key.clone()))
            .ok_or_else(|| anyhow!("the local server did not seed @{h}"))
    };
    let (alice_handle, alice_key) = find("alice")?;
    let (bob_handle, bob_key) = find("bob")?;
    clock.say(
        "server",
        &format!(
            "local AgentChat at {api_base}: {alice_handle} sends, {bob_handle} is listened for"
        ),
    );

    let scratch = ScratchDir::new()?;
    let config = write_config(&scratch.0, args.script.as_deref())?;
    let exe = std::env::current_exe().context("cannot find this program's own path")?;
    let mut cmd = tokio::process::Command::new(&exe);
    cmd.arg("listen")
        .arg("--config")
        .arg(&config)
        .arg("--state-dir")
        .arg(scratch.0.join("state"))
        .arg("--api-base")
        .arg(api_base)
        .arg("--runtime")
        .arg("script")
        .arg("--log-format")
        .arg("json")
        // The key travels in the environment only: argv is visible to every user.
        .env("AGENTCHAT_API_KEY", &bob_key)
        .env("AGENTCHAT_TEST_TIME_SCALE", LISTENER_TIME_SCALE.to_string())
        // Each wake is a debug line of the socket's (at info a burst is one summary line); the
        // timeline shows every wake, so the demo asks for the socket's debug lines too.
        .env(
            "AGENTCHAT_LOG",
            "info,agentchat_core::listener::socket=debug",
        )
        .env_remove("AGENTCHAT_INTEGRATION")
        .env_remove("AGENTCHAT_DOORBELL")
        .env_remove("AGENTCHAT_PROFILE")
        .env_remove("AGENTCHAT_CONFIG")
        .env_remove("NOTIFY_SOCKET")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    stop_with_parent(&mut cmd);
    let mut group = GroupChild::spawn(&mut cmd).context("cannot start agentchat listen")?;
    let pid = group
        .id()
        .ok_or_else(|| anyhow!("the listener exited at once"))?;
    let stderr = group
        .child
        .stderr
        .take()
        .ok_or_else(|| anyhow!("no stderr from the listener"))?;
    let mut listener = Listener(group);
    clock.say(
        "listener",
        &format!("agentchat listen spawned for {bob_handle} (pid {pid})"),
    );

    let recent = Arc::new(Mutex::new(VecDeque::new()));
    let (tx, rx) = mpsc::unbounded_channel();
    let reader = tokio::spawn(read_logs(stderr, tx, clock, args.verbose, recent.clone()));

    let mut demo = Demo {
        clock,
        alice: Rest::new(api_base, Some(SecretString::from(alice_key)))?,
        bob: Rest::new(api_base, Some(SecretString::from(bob_key)))?,
        bob_handle: bob_handle.clone(),
        alice_handle: alice_handle.clone(),
        control: Rest::new(api_base, None)?,
        logs: rx,
        recent: recent.clone(),
    };
    let result = tokio::select! {
        r = tokio::time::timeout(DEMO_TIMEOUT, scenario(&mut demo)) => match r {
            Ok(r) => r,
            Err(_) => Err(anyhow!("the demo took longer than {DEMO_TIMEOUT:?}")),
        },
        // Ctrl-C still stops the listener and removes the scratch dir.
        _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
    };

    let stopped = listener.stop(Duration::from_secs(8)).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), reader).await;
    match &stopped {
        Ok(status) if status.success() => clock.say("listener", "exited 0"),
        Ok(status) => clock.say("listener", &format!("exited: {status}")),
        Err(e) => clock.say("listener", &format!("{e:#}")),
    }
    if result.is_err() {
        let lines = recent.lock().map(|r| r.clone()).unwrap_or_default();
        if !lines.is_empty() {
            eprintln!("\nthe listener's last log lines:");
            for l in lines {
                eprintln!("  {l}");
            }
        }
    }
    result?;
    match stopped {
        Ok(s) if s.success() => Ok(()),
        Ok(s) => bail!("the listener did not exit cleanly: {s}"),
        Err(e) => Err(e),
    }
}

/// Reads the listener's stderr: prints each line the timeline knows (and the demo agent's lines
/// from a finished run's log), keeps the last lines for a failure report, and forwards every JSON
/// line to the scenario.
async fn read_logs(
    stderr: tokio::process::ChildStderr,
    tx: mpsc::UnboundedSender<Value>,
    clock: Clock,
    verbose: bool,
    recent: Arc<Mutex<VecDeque<String>>>,
) {
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    let mut run_log: Option<PathBuf> = None;
    while let Ok(Some(line)) = lines.next_line().await {
        if let Ok(mut r) = recent.lock() {
            if r.len() >= 30 {
                r.pop_front();
            }
            r.push_back(line.clone());
        }
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            clock.say("listener", &line);
            continue;
        };
        match timeline::event(&v) {
            Some("run_start") => {
                run_log = timeline::field_str(&v, "log").map(PathBuf::from);
            }
            Some("run_end") => {
                if let Some(p) = run_log.take() {
                    for l in std::fs::read_to_string(&p).unwrap_or_default().lines() {
                        if let Some(rest) = l.strip_prefix(agent::LINE_PREFIX) {
                            clock.say("run", rest);
                        }
                    }
                }
            }
            _ => {}
        }
        if verbose {
            clock.say("log", &line);
        } else if let Some(text) = timeline::describe(&v) {
            clock.say("listener", &text);
        }
        if tx.send(v).is_err() {
            // The scenario is gone; keep draining so the listener never blocks on a full pipe.
        }
    }
}

impl Demo {
    /// Waits for the listener line `pred` accepts.
    async fn wait_for(
        &mut self,
        what: &str,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        loop {
            match tokio::time::timeout_at(deadline, self.logs.recv()).await {
                Ok(Some(v)) if pred(&v) => return Ok(v),
                Ok(Some(_)) => continue,
                Ok(None) => bail!("the listener exited while the demo waited for {what}"),
                Err(_) => bail!("no {what} within {STEP_TIMEOUT:?}"),
            }
        }
    }

    /// The next listener line, or `None` once `until` passes.
    async fn next_event_until(
        &mut self,
        until: tokio::time::Instant,
    ) -> anyhow::Result<Option<Value>> {
        match tokio::time::timeout_at(until, self.logs.recv()).await {
            Ok(Some(v)) => Ok(Some(v)),
            Ok(None) => bail!("the listener exited while the demo was waiting on it"),
            Err(_) => Ok(None),
        }
    }

    async fn wait_event(&mut self, name: &str) -> anyhow::Result<Value> {
        self.wait_for(&format!("`{name}` from the listener"), |v| {
            timeline::event(v) == Some(name)
        })
        .await
    }

    /// Waits for the end of the next run; a failed run fails the demo.
    async fn wait_run(&mut self) -> anyhow::Result<Value> {
        let end = self.wait_event("run_end").await?;
        if timeline::field_str(&end, "outcome") != Some("completed") {
            bail!(
                "the demo agent's run failed: {}",
                timeline::field_str(&end, "why").unwrap_or("no reason logged")
            );
        }
        Ok(end)
    }

    async fn send(&self, text: &str, n: u32) -> anyhow::Result<String> {
        let body = json!({
            "to": self.bob_handle,
            "client_msg_id": format!("demo-alice-{n}-{:08x}", fastrand::u32(..)),
            "content": { "text": text },
        });
        let sent = self.alice.post("/v1/messages", &body).await?;
        let id = str_at(&sent, &["id"])
            .or_else(|| str_at(&sent, &["message", "id"]))
            .unwrap_or("?")
            .to_string();
        self.clock.say(
            "alice",
            &format!("sent a message to {} ({id})", self.bob_handle),
        );
        Ok(id)
    }

    async fn bob_tray(&self) -> anyhow::Result<Value> {
        Ok(self.bob.get("/v1/inbox?invites=1&limit=50").await?)
    }
}

/// The story: messages answered by one run; an invite left by two runs and dismissed.
async fn scenario(d: &mut Demo) -> anyhow::Result<()> {
    // The connect itself is a wake; with nothing waiting its cycle runs nothing.
    d.wait_event("socket_connected").await?;
    d.wait_event("cycle_end").await?;
    answer_a_burst(d).await?;
    let invite_id = invite(d).await?;
    wait_for_dismissal(d, &invite_id).await?;
    d.wait_event("cycle_end").await?;
    tray_is_empty(d).await
}

/// Step 1, two messages in a burst: one cycle, one run that answers both; alice gets the answer.
async fn answer_a_burst(d: &mut Demo) -> anyhow::Result<()> {
    d.send("Hi Bob! Are you around?", 1).await?;
    d.send("I have a question about Friday's benchmark.", 2)
        .await?;
    // Normally one run answers both. On a loaded machine the second message can land after that
    // run read the tray; its wake then earns one more cycle, which answers it.
    let mut runs = 0;
    loop {
        d.wait_run().await?;
        d.wait_event("cycle_end").await?;
        runs += 1;
        let cards = list_of(&d.bob_tray().await?, "conversations").len();
        if cards == 0 {
            break;
        }
        if runs >= 2 {
            bail!(
                "after {runs} runs {} still has {cards} conversation(s) waiting",
                d.bob_handle
            );
        }
    }
    d.clock.say(
        "server",
        &format!(
            "{}'s tray is empty: the answer went out and `reply` is recorded",
            d.bob_handle
        ),
    );
    let alice_tray = d.alice.get("/v1/inbox?invites=1&limit=50").await?;
    if list_of(&alice_tray, "conversations").is_empty() {
        bail!("alice never received the demo agent's answer");
    }
    d.clock.say("alice", "received the answer");
    Ok(())
}

/// Step 2, an invite: each run leaves it alone. The listener counts the first run that left it
/// pending and dismisses it when a second one, at least 60 s (scaled) later, leaves it too.
/// The second run comes from the server's unanswered re-wake; the demo asks the server for it
/// once the pace has passed, so it never waits on the server's ladder.
async fn wait_for_dismissal(d: &mut Demo, invite_id: &str) -> anyhow::Result<()> {
    let pace = Duration::from_secs_f64(60.0 / LISTENER_TIME_SCALE) + Duration::from_millis(200);
    let give_up = tokio::time::Instant::now() + STEP_TIMEOUT;
    // When set: if the invite is not dismissed by then, ask the server for a re-wake.
    let mut poke_at: Option<tokio::time::Instant> = None;
    let mut counted = false;
    loop {
        let until = poke_at.map_or(give_up, |p| p.min(give_up));
        let Some(v) = d.next_event_until(until).await? else {
            if poke_at.is_some_and(|p| tokio::time::Instant::now() >= p) {
                poke_at = None;
                ask_for_rewake(d).await?;
                continue;
            }
            bail!("the listener did not dismiss invite {invite_id} within {STEP_TIMEOUT:?}");
        };
        match timeline::event(&v) {
            Some("invite_dismissed") => return Ok(()),
            Some("invite_counted") => {
                counted = true;
                invite_still_pending(d, invite_id).await?;
            }
            // A wake is in: its cycle is coming, so no re-wake is needed yet.
            Some("wake" | "cycle_start") => poke_at = None,
            // A cycle ended without the dismissal: re-wake once the pace has passed.
            Some("cycle_end") if counted => {
                poke_at = Some(tokio::time::Instant::now() + pace);
            }
            _ => {}
        }
    }
}

/// Asks the server (its control API) to re-wake bob as its unanswered ladder would.
async fn ask_for_rewake(d: &mut Demo) -> anyhow::Result<()> {
    let path = format!("/_sim/agents/{}/wake", d.bob_handle.trim_start_matches('@'));
    d.control
        .post(&path, &json!({ "reason": "unanswered" }))
        .await?;
    d.clock.say(
        "demo",
        &format!(
            "asks the server to re-wake {} now (the invite is unanswered)",
            d.bob_handle
        ),
    );
    Ok(())
}

/// After a counted run the invite must still be in bob's tray: the agent leaves invites alone.
async fn invite_still_pending(d: &mut Demo, invite_id: &str) -> anyhow::Result<()> {
    let pending = list_of(&d.bob_tray().await?, "invites")
        .iter()
        .any(|i| str_at(i, &["invite_id"]) == Some(invite_id));
    if !pending {
        bail!(
            "the invite {invite_id} left the tray after one run; the agent should have left it alone"
        );
    }
    d.clock.say(
        "server",
        &format!("invite {invite_id} still pending: the run left it alone"),
    );
    Ok(())
}

/// Step 3, the end: no conversation and no invite left in bob's tray.
async fn tray_is_empty(d: &mut Demo) -> anyhow::Result<()> {
    let tray = d.bob_tray().await?;
    let cards = list_of(&tray, "conversations").len();
    let invites = list_of(&tray, "invites").len();
    if cards != 0 || invites != 0 {
        bail!(
            "{}'s tray still shows {cards} conversation(s) and {invites} invite(s)",
            d.bob_handle
        );
    }
    d.clock.say(
        "server",
        &format!(
            "{}'s tray is empty: no conversation, no invite",
            d.bob_handle
        ),
    );
    let _ = &d.recent;
    Ok(())
}

/// Alice invites Bob to a new group (through the sim's control API: the hosted API has no route
/// to create a group with a pending invite); returns the invite's id.
async fn invite(d: &mut Demo) -> anyhow::Result<String> {
    let made = d
        .control
        .post(
            "/_sim/groups",
            &json!({
                "owner": d.alice_handle,
                "name": "demo-crew",
                "members": [],
                "invite": [d.bob_handle],
            }),
        )
        .await?;
    let id = list_of(&made, "invites")
        .iter()
        .find_map(|i| str_at(i, &["invite_id"]).map(str::to_string))
        .ok_or_else(|| anyhow!("the local server made no invite for {}", d.bob_handle))?;
    d.clock.say(
        "alice",
        &format!("invited {} to group demo-crew ({id})", d.bob_handle),
    );
    Ok(id)
}

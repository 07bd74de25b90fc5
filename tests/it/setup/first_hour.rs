//! Issue 34, "the first hour loses nothing": setup, undo and uninstall as a new user meets them,
//! each through the real binary in a fresh home against the sim (interactive ones in a
//! pseudo-terminal): no key sent in clear text, no key replaced or deleted unasked, no line of the
//! user's config lost, no listener left answering after uninstall, a sign-up that resumes and
//! that a script can finish in two steps, and last lines that tell the truth without systemd.

use super::signup::{SCRIPT, code_for, in_pty, in_pty_at, last_line, setup_with_code, whoami};
use super::*;
use std::time::Duration;

fn status_file(w: &World, profile: &str) -> PathBuf {
    w.home()
        .join(".local/state/agentchat")
        .join(profile)
        .join("status.json")
}

/// The profile's `status.json`, when there is one that parses.
fn status_of(w: &World, profile: &str) -> Option<serde_json::Value> {
    serde_json::from_slice(&std::fs::read(status_file(w, profile)).ok()?).ok()
}

/// Polls `f` every 50 ms until it gives something, for at most `secs`.
async fn until<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{what}: not within {secs} s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `agentchat listen ARGS` in the world's environment, in the foreground as a user without a
/// service manager runs it; killed when dropped.
struct Foreground {
    child: tokio::process::Child,
    pid: u32,
}

impl Foreground {
    /// Started, and connected as its `status.json` says.
    async fn start(w: &World, profile: &str) -> Foreground {
        let log =
            std::fs::File::create(w.dir.path().join(format!("listen-{profile}.log"))).unwrap();
        let mut cmd = w.command(Path::new(BIN), &["listen", "--profile", profile]);
        cmd.stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(log);
        let child = cmd.spawn().unwrap();
        let pid = child.id().unwrap();
        until("the foreground listener connected", 60, || {
            let s = status_of(w, profile)?;
            (s["pid"] == pid && s["state"] == "connected").then_some(())
        })
        .await;
        Foreground { child, pid }
    }

    /// Whether it has exited, waiting at most `secs`.
    async fn exits_within(&mut self, secs: u64) -> bool {
        tokio::time::timeout(Duration::from_secs(secs), self.child.wait())
            .await
            .is_ok()
    }
}

/// The world's environment with no service manager to be found (no `AGENTCHAT_SERVICE_DIR`, no
/// user bus): `service install` fails as on a machine without systemd.
fn without_manager(w: &World, cmd: &mut tokio::process::Command) {
    let run = w.dir.path().join("no-user-bus");
    std::fs::create_dir_all(&run).unwrap();
    cmd.env_remove("AGENTCHAT_SERVICE_DIR")
        .env("XDG_RUNTIME_DIR", &run)
        .env(
            "DBUS_SESSION_BUS_ADDRESS",
            format!("unix:path={}/bus", run.display()),
        );
}

/// Runs `agentchat ARGS` with `stdin`, `tune` applied to the command first.
async fn run_with(
    w: &World,
    args: &[&str],
    stdin: Option<&str>,
    tune: impl FnOnce(&mut tokio::process::Command),
) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut cmd = w.command(Path::new(BIN), args);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    tune(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut pipe = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        // A command that refuses at once exits before it reads its stdin.
        let _ = pipe.write_all(s.as_bytes()).await;
    }
    drop(pipe);
    tokio::time::timeout(Duration::from_secs(180), child.wait_with_output())
        .await
        .expect("agentchat did not finish within 180 s")
        .unwrap()
}

/// A loopback HTTP proxy that answers nothing and counts the connections it gets: with
/// `HTTP_PROXY` pointing at it, any request to a plain `http://` server goes here first.
async fn counting_proxy() -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", l.local_addr().unwrap());
    let n = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let seen = n.clone();
    tokio::spawn(async move {
        while let Ok((sock, _)) = l.accept().await {
            seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            drop(sock);
        }
    });
    (url, n)
}

/// Item 1: `setup` refuses a plain `http://` server beyond this machine before any byte leaves:
/// neither the key check nor a sign-up reaches the network (a proxy every such request would
/// go through sees no connection), and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_refuses_a_cleartext_server_beyond_loopback_before_any_byte_leaves() {
    let w = World::new().await;
    let (proxy, connections) = counting_proxy().await;
    let before = w.snapshot();
    let far = "http://192.0.2.2:7999";
    let key = format!("{}\n", w.key());
    for (args, stdin) in [
        (
            vec![
                "setup",
                "--yes",
                "--api-base",
                far,
                "--no-wire",
                "--no-service",
            ],
            Some(key.as_str()),
        ),
        (
            vec![
                "setup",
                "--yes",
                "--api-base",
                far,
                "--new",
                "--email",
                "me@example.com",
                "--handle",
                "newbie",
                "--no-wire",
            ],
            Some("123456\n"),
        ),
    ] {
        let out = run_with(&w, &args, stdin, |c| {
            for v in ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"] {
                c.env(v, &proxy);
            }
        })
        .await;
        let text = show(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert!(text.contains("clear text"), "{text}");
        assert!(text.contains("allow_cleartext"), "no way out named: {text}");
        assert_eq!(
            connections.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "{args:?} sent a request towards {far}:\n{text}"
        );
    }
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "a refused setup wrote:\n{}",
        diff.join("\n")
    );
}

/// `agentchat setup --yes --api-base BASE --new` for @newbie (me@example.com), a script runtime.
fn scripted_sign_up(base: &str) -> Vec<&str> {
    let mut args = vec![
        "setup",
        "--yes",
        "--api-base",
        base,
        "--new",
        "--email",
        "me@example.com",
        "--handle",
        "newbie",
    ];
    args.extend_from_slice(&SCRIPT);
    args
}

/// Item 2: `setup --yes --new` on a profile that has a key refuses before asking the server
/// anything, and the old key stays where it was, still the profile's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sign_up_on_a_profile_with_a_key_refuses_and_keeps_the_key() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let key_file = w.home().join(".config/agentchat/default.key");
    let config = read(&w.config());
    let out = w
        .agentchat(&scripted_sign_up(w.sim.api_base()), Some("000000\n"))
        .await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("already has an API key") && text.contains(&key_file.display().to_string()),
        "{text}"
    );
    assert!(text.contains("--profile"), "no other way named: {text}");
    assert_eq!(read(&key_file).trim(), w.key());
    assert_eq!(read(&w.config()), config);
    assert!(
        outbox(w.sim.api_base()).await.is_empty(),
        "the server was asked: {text}"
    );
}

/// Item 3: a table the user added by hand between two setups survives the undo, though setup
/// created the file: undo takes out only the keys setup wrote.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_keeps_what_the_user_added_by_hand_between_two_setups() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let mut config = read(&w.config());
    config.push_str("\n# mine\n[listen.policy]\nmax_runs_per_day = 5\n");
    std::fs::write(w.config(), &config).unwrap();
    w.setup(&[
        "--no-wire",
        "--no-service",
        "--runtime",
        "script",
        "--",
        "/bin/echo",
    ])
    .await;
    let undone = w.undo(&[]).await;
    assert!(!undone.contains("config: removed"), "{undone}");
    let left = read(&w.config());
    assert!(
        left.contains("# mine\n[listen.policy]\nmax_runs_per_day = 5\n"),
        "the user's table is gone:\n{left}\n---\n{undone}"
    );
    for k in ["api_key_file", "runtime", "command", "api_base"] {
        assert!(!left.contains(k), "setup's `{k}` is left:\n{left}");
    }
}

/// Item 4: `uninstall` stops the profile's listener that runs in a terminal (found by its lock),
/// so nothing answers with a key file that is gone; `status` then says it does not run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uninstall_stops_the_profiles_foreground_listener() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let mut listener = Foreground::start(&w, "default").await;
    let out = w.agentchat(&["uninstall"], None).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(
        text.contains(&format!("pid {}", listener.pid)) && text.contains("stopped"),
        "{text}"
    );
    assert!(
        listener.exits_within(5).await,
        "the listener still runs after uninstall:\n{text}"
    );
    let status = w.agentchat(&["status"], None).await;
    assert_eq!(status.status.code(), Some(3), "{}", show(&status));
}

/// Item 5: the key setup got by sign-up is the only copy there is (never shown): undo keeps it
/// unless told to delete it, and says how to use it again and how to get a new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_never_deletes_the_only_copy_of_a_signed_up_key_unasked() {
    let w = World::new().await;
    let mut args = vec!["--new", "--email", "me@example.com", "--handle", "newbie"];
    args.extend_from_slice(&SCRIPT);
    let out = setup_with_code(&w, &args, "me@example.com", "register").await;
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let key_file = w.home().join(".config/agentchat/default.key");
    let key = read(&key_file);
    let undone = w.agentchat(&["uninstall"], None).await;
    let text = show(&undone);
    assert_eq!(undone.status.code(), Some(0), "{text}");
    assert_eq!(
        read(&key_file),
        key,
        "the only copy of the key is gone:\n{text}"
    );
    assert!(
        text.contains("kept") && text.contains("--recover") && text.contains("--api-key-file"),
        "{text}"
    );
    assert_eq!(whoami(&w, key.trim()).await, Ok("newbie".to_string()));
    // Asked to, it goes (a second agent, signed up the same way).
    let w = World::new().await;
    let out = setup_with_code(&w, &args, "me@example.com", "register").await;
    assert_eq!(out.status.code(), Some(0), "{}", show(&out));
    let gone = w.agentchat(&["uninstall", "--delete-key"], None).await;
    let text = show(&gone);
    assert_eq!(gone.status.code(), Some(0), "{text}");
    assert!(
        !w.home().join(".config/agentchat/default.key").exists(),
        "{text}"
    );
    assert!(text.contains("--recover"), "{text}");
}

/// The steps of an interactive sign-up up to the runtime question, on the sim at `base`.
fn sign_up_steps(base: &str, code: &str) -> Vec<serde_json::Value> {
    vec![
        serde_json::json!(["AgentChat server [https://api.agentchat.me]: ", base]),
        serde_json::json!(["Do you have an AgentChat API key? [Y/n]: ", "n"]),
        serde_json::json!(["Lost the key of an agent you already have? [y/N]: ", ""]),
        serde_json::json!(["Email (the code goes there): ", "me@example.com"]),
        serde_json::json!([
            "Handle (3-30 lowercase letters, digits, dashes): ",
            "newbie"
        ]),
        serde_json::json!(["The 6-digit code emailed to me@example.com", code]),
    ]
}

/// The rest of an interactive setup from the runtime question: a script, nothing wired, no
/// service, no first run.
fn script_steps() -> Vec<serde_json::Value> {
    vec![
        serde_json::json!(["Runtime (claude-code, codex or script) [", "script"]),
        serde_json::json!([
            "The script's command (program and arguments): ",
            "/bin/true"
        ]),
        serde_json::json!(["Keep these bounds on runs? [Y/n]: ", ""]),
        serde_json::json!(["write the identity block? [Y/n]: ", "n"]),
        serde_json::json!([
            "Install the always-on service for this profile? [Y/n]: ",
            "n"
        ]),
        serde_json::json!(["Go ahead? [Y/n]: ", "y"]),
        serde_json::json!(["Try one real run now", "n"]),
    ]
}

async fn outbox(base: &str) -> Vec<serde_json::Value> {
    reqwest::get(format!("{base}/_sim/outbox"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Item 6: Ctrl-C after sign-up (the key is stored, nothing else yet): the next setup proposes
/// the sim it signed up with and the key it stored, and finishes without a second sign-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_stopped_after_sign_up_resumes_with_its_server_and_key() {
    let w = World::new().await;
    let mut steps = sign_up_steps(w.sim.api_base(), "@CODE");
    steps.push(serde_json::json!([
        "Runtime (claude-code, codex or script) [",
        "^C"
    ]));
    let (first, _) = in_pty(&w, serde_json::Value::Array(steps), &[BIN, "setup"]).await;
    let key_file = w.home().join(".config/agentchat/default.key");
    assert!(key_file.exists(), "no key stored before Ctrl-C:\n{first}");
    let mut steps = vec![
        serde_json::json!([format!("AgentChat server [{}]: ", w.sim.api_base()), ""]),
        serde_json::json!([
            format!("Keep the API key in {}? [Y/n]: ", key_file.display()),
            ""
        ]),
    ];
    steps.extend(script_steps());
    let (second, code) = in_pty(&w, serde_json::Value::Array(steps), &[BIN, "setup"]).await;
    println!("{first}\n----\n{second}");
    assert_eq!(code, 0, "{second}");
    assert!(
        second.contains("@newbie is ready on this machine (script"),
        "{second}"
    );
    assert_eq!(outbox(w.sim.api_base()).await.len(), 1, "signed up twice");
}

/// Item 7: with no service manager, a listener running in a terminal for the profile is what
/// answers: setup's last line says so (with its pid) and exits 0, as doctor's `listening` does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_line_counts_a_foreground_listener_where_no_service_manager_runs() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let listener = Foreground::start(&w, "default").await;
    let out = run_with(
        &w,
        &[
            "setup",
            "--yes",
            "--api-base",
            w.sim.api_base(),
            "--no-wire",
            "--runtime",
            "script",
            "--",
            "/bin/true",
        ],
        Some(&format!("{}\n", w.key())),
        |c| without_manager(&w, c),
    )
    .await;
    let text = show(&out);
    assert!(
        text.contains("service: not installed"),
        "a service manager was found here: {text}"
    );
    assert_eq!(out.status.code(), Some(0), "{text}");
    let last = last_line(&text);
    assert!(
        last.starts_with("@alice answers on this machine (script")
            && last.contains(&format!("pid {}", listener.pid)),
        "{text}"
    );
}

/// Item 8: the scripted sign-up in two steps: `--new` mails one code and stops (exit 3, saying
/// how to finish); run again it mails no second code; `--code CODE` then finishes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sign_up_mails_one_code_and_finishes_with_code() {
    let w = World::new().await;
    let start = scripted_sign_up(w.sim.api_base());
    for round in 0..2 {
        let out = w.agentchat(&start, None).await;
        let text = show(&out);
        assert_eq!(out.status.code(), Some(3), "round {round}: {text}");
        assert!(text.contains("--code"), "round {round}: {text}");
        assert_eq!(
            outbox(w.sim.api_base()).await.len(),
            1,
            "round {round} mailed another code: {text}"
        );
    }
    let code = code_for(&w, "me@example.com", "register").await;
    let mut finish = vec!["setup", "--yes", "--code", code.as_str()];
    finish.extend_from_slice(&SCRIPT);
    let out = w.agentchat(&finish, None).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let key = read(&w.home().join(".config/agentchat/default.key"));
    assert_eq!(whoami(&w, key.trim()).await, Ok("newbie".to_string()));
    assert!(!text.contains(key.trim()), "the key was shown:\n{text}");
    assert!(
        last_line(&text).starts_with("@newbie is ready on this machine (script"),
        "{text}"
    );
}

/// Item 9: a config.toml that is not TOML is said first: on a terminal before any question, and
/// scripted as what it is, not as a missing key. Nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_is_said_before_any_question() {
    let w = World::new().await;
    std::fs::create_dir_all(w.config().parent().unwrap()).unwrap();
    std::fs::write(w.config(), "[listen\nruntime = \"script\"\n").unwrap();
    let before = w.snapshot();
    let steps = serde_json::json!([["AgentChat server [", w.sim.api_base()]]);
    let (transcript, _) = in_pty(&w, steps, &[BIN, "setup"]).await;
    // The driver names the prompt it waited for in vain; setup's own prompt has its default.
    assert!(
        !transcript.contains("AgentChat server [https://"),
        "asked before saying the config is broken:\n{transcript}"
    );
    assert!(
        transcript.contains(&w.config().display().to_string()) && transcript.contains("TOML"),
        "{transcript}"
    );
    let out = w
        .agentchat(
            &[
                "setup",
                "--yes",
                "--api-base",
                w.sim.api_base(),
                "--no-wire",
            ],
            Some(&format!("{}\n", w.key())),
        )
        .await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains("TOML") && !text.contains("no API key"),
        "{text}"
    );
    let diff = differences(&before, &w.snapshot());
    assert!(diff.is_empty(), "{}", diff.join("\n"));
}

/// Item 10: setup that changes the runtime of a profile whose listener runs reloads it (SIGHUP
/// to the pid its lock names) and says so; the listener then runs the new runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_reloads_the_running_listener_after_changing_its_runtime() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let listener = Foreground::start(&w, "default").await;
    assert_eq!(status_of(&w, "default").unwrap()["runtime"], "script");
    let out = w
        .agentchat(
            &[
                "setup",
                "--yes",
                "--api-base",
                w.sim.api_base(),
                "--no-wire",
                "--no-service",
                "--runtime",
                "codex",
            ],
            Some(&format!("{}\n", w.key())),
        )
        .await;
    let text = show(&out);
    assert!(
        text.contains(&format!("pid {}", listener.pid)) && text.contains("reloaded"),
        "{text}"
    );
    assert_eq!(
        status_of(&w, "default").unwrap()["runtime"],
        "codex",
        "the listener still runs the old runtime:\n{text}"
    );
}

/// Item 11: a typo in config.toml does not hide the listener that runs: `status` shows it and
/// names the config's error (exit 1: the config cannot be read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_the_running_listener_beside_a_config_error() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let listener = Foreground::start(&w, "default").await;
    let config = read(&w.config());
    std::fs::write(w.config(), format!("bogus_key = 1\n{config}")).unwrap();
    let out = w.agentchat(&["status"], None).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!("running (pid {})", listener.pid)),
        "the listener is hidden:\n{text}"
    );
    assert!(text.contains("bogus_key"), "{text}");
    let out = w.agentchat(&["status", "--json"], None).await;
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["running"], true, "{v}");
    assert!(
        v["config_error"].as_str().unwrap().contains("bogus_key"),
        "{v}"
    );
}

/// Item 12: a listener whose runtime's CLI is not logged in says so at start (state
/// `runtime_unusable`), before any message could start a run that fails. The look that finds it
/// without a process is `runtime::check::at_start`; the listener's daemon must call it at start
/// and on reload, which is the daemon's owners' change (issue 34's resolution names it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_not_logged_in_is_found_at_start() {
    let w = World::new().await;
    w.setup(&["--no-wire", "--no-service", "--runtime", "claude-code"])
        .await;
    let log = std::fs::File::create(w.dir.path().join("listen.log")).unwrap();
    let mut cmd = w.command(Path::new(BIN), &["listen"]);
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    let child = cmd.spawn().unwrap();
    let pid = child.id().unwrap();
    let state = until("the listener's first status", 60, || {
        let s = status_of(&w, "default")?;
        (s["pid"] == pid && s["state"] != "starting").then_some(s)
    })
    .await;
    let settled = until("the listener settled", 30, || {
        let s = status_of(&w, "default")?;
        (s["state"] == "runtime_unusable").then_some(s)
    })
    .await;
    assert!(
        settled["detail"]
            .as_str()
            .unwrap_or("")
            .contains("not logged in"),
        "{state}\n{settled}"
    );
    assert_eq!(settled["counters"]["runs"], 0, "{settled}");
}

/// Item 13: `doctor --run` checks before it asks, and names the real cause: a listener holding
/// the profile, or a runtime not logged in (never the MCP server); no run is started.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn doctor_run_checks_before_asking_and_names_the_real_cause() {
    let w = World::new().await;
    w.setup(&SCRIPT).await;
    let listener = Foreground::start(&w, "default").await;
    let out = w.agentchat(&["doctor", "--run"], None).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains(&format!("pid {}", listener.pid)), "{text}");
    assert!(!text.contains("--yes"), "asked for --yes first:\n{text}");
    drop(listener);
    let w = World::new().await;
    w.setup(&["--no-wire", "--no-service", "--runtime", "claude-code"])
        .await;
    for args in [&["doctor", "--run"][..], &["doctor", "--run", "--yes"][..]] {
        let out = w.agentchat(args, None).await;
        let text = show(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {text}");
        assert!(text.contains("not logged in"), "{args:?}: {text}");
        assert!(
            !text.contains("MCP server") && !text.contains("started: yes"),
            "{args:?}: {text}"
        );
    }
}

/// Item 14: on a terminal a refused email is asked again (as a handle or a code is), and a code
/// past its life offers to send a new one (a sim whose timers run 200 times faster: 3 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_email_is_asked_again_and_an_expired_code_offers_a_new_one() {
    let w = World::new().await;
    let mut steps = sign_up_steps(w.sim.api_base(), "@CODE");
    steps[3] = serde_json::json!(["Email (the code goes there): ", "not-an-email"]);
    steps.insert(
        4,
        serde_json::json!(["Email (the code goes there): ", "me@example.com"]),
    );
    steps.extend(script_steps());
    let (transcript, code) = in_pty(&w, serde_json::Value::Array(steps), &[BIN, "setup"]).await;
    assert_eq!(code, 0, "{transcript}");
    assert!(transcript.contains("@newbie is ready"), "{transcript}");

    let fast = agentchat::sim::start(agentchat::sim::SimConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        time_scale: 200.0,
        seed_demo: false,
    })
    .await
    .unwrap();
    let w = World::new().await;
    let mut steps = sign_up_steps(&fast.api_base, "@EXPIRED:4");
    steps.push(serde_json::json!([
        "Send a new code to me@example.com? [Y/n]: ",
        "y"
    ]));
    steps.push(serde_json::json!([
        "The 6-digit code emailed to me@example.com",
        "@CODE"
    ]));
    steps.extend(script_steps());
    let (transcript, code) = in_pty_at(
        &w,
        &fast.api_base,
        serde_json::Value::Array(steps),
        &[BIN, "setup"],
    )
    .await;
    assert_eq!(code, 0, "{transcript}");
    assert!(transcript.contains("expired"), "{transcript}");
    assert_eq!(outbox(&fast.api_base).await.len(), 2, "{transcript}");
}

/// A CLI wrapper in the world's `bin`: `mcp remove` hangs (its pid written to `pid_file`)
/// before doing anything; everything else runs the real CLI.
fn hang_on_remove(w: &World, name: &str, real: &Path, pid_file: &Path) {
    let p = w.dir.path().join("bin").join(name);
    std::fs::remove_file(&p).unwrap();
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nif [ \"$1 $2\" = \"mcp remove\" ]; then\n  echo $$ > \"{pid}.tmp\" && \
             mv \"{pid}.tmp\" \"{pid}\"\n  exec sleep 300\nfi\nexec \"{real}\" \"$@\"\n",
            real = real.display(),
            pid = pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
}

/// `setup --profile b --rewire` with bob's key, killed while `pid_file`'s CLI hangs.
async fn rewire_killed(w: &World, pid_file: &Path) {
    let args = [
        "--profile",
        "b",
        "--runtime",
        "codex",
        "--no-service",
        "--rewire",
    ];
    let mut setup = w.spawn_setup(&w.sim.peer.1, &args).await;
    until("the hanging `mcp remove`", 150, || {
        pid_file.exists().then_some(())
    })
    .await;
    setup.start_kill().unwrap();
    setup.wait().await.unwrap();
    std::fs::remove_file(pid_file).unwrap();
}

/// Item 15: a `--rewire` stopped before it changed a CLI leaves that CLI wired for the other
/// profile: undo leaves it so (Codex's file is not put back to before that profile's setup) and
/// gives no advice to wire it again; a CLI it did take over gets the advice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_after_an_interrupted_rewire_leaves_the_other_profile_wired_and_says_so() {
    let w = World::new().await;
    w.setup(&[
        "--profile",
        "work",
        "--runtime",
        "claude-code",
        "--no-service",
    ])
    .await;
    let pid_file = w.dir.path().join("remove.pid");
    let claude_json = w.home().join(".claude.json");
    let codex_toml = w.home().join(".codex/config.toml");
    // Claude Code's `mcp remove` hangs: the rewire never changed either CLI.
    hang_on_remove(&w, "claude", &claude_bin(), &pid_file);
    rewire_killed(&w, &pid_file).await;
    std::fs::remove_file(w.dir.path().join("bin/claude")).unwrap();
    std::os::unix::fs::symlink(claude_bin(), w.dir.path().join("bin/claude")).unwrap();
    let undone = w.undo(&["--profile", "b"]).await;
    assert!(
        !undone.contains("wires it for that profile again"),
        "{undone}"
    );
    assert!(read(&claude_json).contains("\"work\""), "{undone}");
    // Codex's `mcp remove` hangs: Claude Code was taken over, Codex was not.
    hang_on_remove(&w, "codex", &codex_bin(), &pid_file);
    rewire_killed(&w, &pid_file).await;
    std::fs::remove_file(w.dir.path().join("bin/codex")).unwrap();
    std::os::unix::fs::symlink(codex_bin(), w.dir.path().join("bin/codex")).unwrap();
    let undone = w.undo(&["--profile", "b"]).await;
    let codex = read(&codex_toml);
    assert!(
        codex.contains("[mcp_servers.agentchat]") && codex.contains("\"work\""),
        "Codex lost profile work's entry:\n{codex}\n---\n{undone}"
    );
    assert!(
        !undone.contains("Codex: before setup it was wired"),
        "{undone}"
    );
    assert!(
        undone.contains(
            "Claude Code: before setup it was wired for profile `work`; `agentchat setup \
             --profile work --rewire` wires it for that profile again"
        ),
        "{undone}"
    );
}

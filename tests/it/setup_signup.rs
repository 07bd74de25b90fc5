//! `agentchat setup` without a key: sign-up (`--new`) and recovery (`--recover`) by the code the
//! sim "emails" (read back from `GET /_sim/outbox`), scripted and in a pseudo-terminal; and the
//! key step's defects of issue 28: the key from the environment (trimmed, never passed on to the
//! CLIs), Ctrl-C at the hidden prompt under `sh`, and no `claude auth status` where no CLI is
//! needed or the user said no. A child module of `setup`, for its `World`.

use super::{BIN, World, differences, read, show};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// The newest code the sim emailed to `to` for `purpose`, waited for.
pub(super) async fn code_for(w: &World, to: &str, purpose: &str) -> String {
    let url = format!("{}/_sim/outbox", w.sim.api_base());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let box_: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        let found = box_
            .as_array()
            .unwrap()
            .iter()
            .rev()
            .find(|m| m["to"] == to && m["purpose"] == purpose)
            .map(|m| m["code"].as_str().unwrap().to_string());
        if let Some(c) = found {
            return c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no {purpose} code for {to}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The handle a key authenticates as on the sim, or the HTTP status.
pub(super) async fn whoami(w: &World, key: &str) -> Result<String, u16> {
    let r = reqwest::Client::new()
        .get(format!("{}/v1/agents/me", w.sim.api_base()))
        .bearer_auth(key)
        .send()
        .await
        .unwrap();
    if !r.status().is_success() {
        return Err(r.status().as_u16());
    }
    let v: serde_json::Value = r.json().await.unwrap();
    Ok(v["handle"].as_str().unwrap().to_string())
}

/// `agentchat setup --yes --api-base SIM ARGS`, answering the emailed code (for `to`,
/// `purpose`) on stdin once the server has sent it.
pub(super) async fn setup_with_code(w: &World, args: &[&str], to: &str, purpose: &str) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut all = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
    all.extend_from_slice(args);
    let mut cmd = w.command(Path::new(BIN), &all);
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let code = code_for(w, to, purpose).await;
    stdin
        .write_all(format!("{code}\n").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    tokio::time::timeout(Duration::from_secs(120), child.wait_with_output())
        .await
        .expect("setup did not finish within 120 s")
        .unwrap()
}

pub(super) fn last_line(text: &str) -> &str {
    text.trim_end().lines().last().unwrap_or("")
}

pub(super) const SCRIPT: [&str; 6] = [
    "--no-wire",
    "--no-service",
    "--runtime",
    "script",
    "--",
    "/bin/true",
];

/// Sign-up with flags and the code on stdin: the key lands 0600 in the profile's key file, is
/// the new agent's, is never printed; `--no-wire --runtime script` runs no `claude auth status`
/// (nothing of Claude Code's or Codex's appears in the fresh home); the last line is the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sign_up_reads_the_emailed_code_on_stdin_and_stores_the_key_unseen() {
    let w = World::new().await;
    let mut args = vec!["--new", "--email", "me@example.com", "--handle", "newbie"];
    args.extend_from_slice(&SCRIPT);
    let out = setup_with_code(&w, &args, "me@example.com", "register").await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let key_file = w.home().join(".config/agentchat/default.key");
    let key = read(&key_file).trim().to_string();
    assert_eq!(whoami(&w, &key).await, Ok("newbie".to_string()));
    assert!(!text.contains(&key), "the key was printed:\n{text}");
    let mode = std::fs::metadata(&key_file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        read(&w.config()).contains("default.key"),
        "{}",
        read(&w.config())
    );
    assert!(
        last_line(&text).starts_with("@newbie is ready on this machine (script, no service"),
        "{text}"
    );
    for p in [".claude.json", ".claude", ".codex"] {
        assert!(
            !w.home().join(p).exists(),
            "{p} appeared: a CLI was run\n{text}"
        );
    }
}

/// `--recover` for that agent: a new key replaces the old one in the same key file, and the old
/// key is refused by the server from then on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_puts_a_new_key_in_the_profiles_key_file_and_the_old_one_stops_working() {
    let w = World::new().await;
    let mut args = vec!["--new", "--email", "me@example.com", "--handle", "newbie"];
    args.extend_from_slice(&SCRIPT);
    let first = setup_with_code(&w, &args, "me@example.com", "register").await;
    assert!(first.status.success(), "{}", show(&first));
    let key_file = w.home().join(".config/agentchat/default.key");
    let old = read(&key_file).trim().to_string();
    let mut args = vec![
        "--recover",
        "--email",
        "me@example.com",
        "--handle",
        "newbie",
    ];
    args.extend_from_slice(&SCRIPT);
    let out = setup_with_code(&w, &args, "me@example.com", "recover").await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let new = read(&key_file).trim().to_string();
    assert_ne!(new, old);
    assert!(!text.contains(&new) && !text.contains(&old), "{text}");
    assert_eq!(whoami(&w, &new).await, Ok("newbie".to_string()));
    assert_eq!(whoami(&w, &old).await, Err(401));
}

/// A refused sign-up (the handle is taken) says so in words, exits 1, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_up_for_a_taken_handle_says_so_and_writes_nothing() {
    let w = World::new().await;
    w.fill().await;
    let before = w.snapshot();
    let mut all = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
    all.extend_from_slice(&[
        "--new",
        "--email",
        "me@example.com",
        "--handle",
        "alice",
        "--no-service",
    ]);
    let out = w.agentchat(&all, None).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("@alice is taken"), "{text}");
    assert!(!text.trim_end().ends_with(':'), "{text}");
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "a refused sign-up wrote:\n{}",
        diff.join("\n")
    );
}

/// Defect 10: `AGENTCHAT_API_KEY` with a stray space and newline is trimmed (as doctor reads
/// it), stored trimmed, and never reaches `claude` or `codex` (`auth status`, `mcp add`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_from_the_environment_is_trimmed_and_never_reaches_the_clis() {
    let w = World::new().await;
    let log = w.dir.path().join("cli-env.log");
    for (name, real) in [
        ("claude", crate::model_server::cli::claude_bin()),
        ("codex", crate::model_server::cli::codex_bin()),
    ] {
        let p = w.dir.path().join("bin").join(name);
        std::fs::remove_file(&p).unwrap();
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"$0 $1 $2: $(env | cut -d= -f1 | tr '\\n' ' ')\" >> '{}'\nexec '{}' \"$@\"\n",
                log.display(),
                real.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let key = w.key().to_string();
    let mut cmd = w.command(
        Path::new(BIN),
        &[
            "setup",
            "--yes",
            "--api-base",
            w.sim.api_base(),
            "--runtime",
            "claude-code",
            "--no-service",
        ],
    );
    cmd.env("AGENTCHAT_API_KEY", format!(" {key}\n"))
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(180), cmd.output())
        .await
        .unwrap()
        .unwrap();
    let text = show(&out);
    assert!(
        !text.contains("failed to parse header value"),
        "the untrimmed key was used:\n{text}"
    );
    assert!(text.contains("you are @alice"), "{text}");
    assert_eq!(
        read(&w.home().join(".config/agentchat/default.key")),
        format!("{key}\n")
    );
    let seen = read(&log);
    assert!(
        seen.contains("auth status") && seen.contains("mcp add"),
        "the CLIs ran: {seen}"
    );
    assert!(
        !seen.contains("AGENTCHAT_API_KEY"),
        "a CLI got the key's variable:\n{seen}"
    );
}

/// Drives a command in a pseudo-terminal, as `setup.rs`'s driver does, plus: an answer `@CODE`
/// is the newest code in `$OUTBOX` (the sim's outbox), `@EXPIRED:S` the same code once the
/// outbox's stamp says it was sent S seconds ago (a code past its life on a time-scaled sim),
/// `^C` types Ctrl-C (no Enter). At the end
/// it prints whether the terminal echoes (`ECHO=on`/`ECHO=off`) and exits with the command's
/// status (128+N for a signal).
const PTY_DRIVER: &str = r#"
import datetime, json, os, pty, select, sys, termios, time, urllib.request
steps = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[2], sys.argv[2:])
seen = b""
def read_some(timeout):
    global seen
    r, _, _ = select.select([fd], [], [], timeout)
    if not r:
        return False
    try:
        data = os.read(fd, 4096)
    except OSError:
        return None
    if not data:
        return None
    seen += data
    return True
for prompt, answer in steps:
    deadline = time.time() + 120
    while prompt.encode() not in seen:
        if time.time() > deadline or read_some(1) is None:
            sys.stdout.write(seen.decode(errors="replace"))
            sys.stdout.write("\n[pty driver: no prompt %r]\n" % prompt)
            sys.exit(99)
    idx = seen.index(prompt.encode()) + len(prompt)
    head, seen = seen[:idx], seen[idx:]
    sys.stdout.write(head.decode(errors="replace"))
    if answer == "^C":
        time.sleep(0.3)
        os.write(fd, b"\x03")
        continue
    if answer == "@CODE" or answer.startswith("@EXPIRED:"):
        box = json.load(urllib.request.urlopen(os.environ["OUTBOX"]))
        if answer.startswith("@EXPIRED:"):
            sent = datetime.datetime.fromisoformat(box[-1]["at"].replace("Z", "+00:00"))
            time.sleep(max(0.0, sent.timestamp() + float(answer[9:]) - time.time()))
        answer = box[-1]["code"]
    os.write(fd, answer.encode() + b"\r")
deadline = time.time() + 180
while time.time() < deadline and read_some(1) is not None:
    pass
sys.stdout.write(seen.decode(errors="replace"))
# The terminal closed (or the time is up): the command exits now, or is killed as hung.
deadline = time.time() + 10
while True:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done != 0:
        break
    if time.time() > deadline:
        sys.stdout.write("\n[pty driver: still running after its output; killed]\n")
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        sys.exit(98)
    time.sleep(0.05)
echo = termios.tcgetattr(fd)[3] & termios.ECHO
sys.stdout.write("\nECHO=%s\n" % ("on" if echo else "off"))
code = os.waitstatus_to_exitcode(status)
sys.exit(128 - code if code < 0 else code)
"#;

/// Runs `argv` under the PTY driver with `steps`; returns the transcript and the exit code.
pub(super) async fn in_pty(w: &World, steps: serde_json::Value, argv: &[&str]) -> (String, i32) {
    in_pty_at(w, w.sim.api_base(), steps, argv).await
}

/// [`in_pty`] with the codes read from the sim at `sim_base`.
pub(super) async fn in_pty_at(
    w: &World,
    sim_base: &str,
    steps: serde_json::Value,
    argv: &[&str],
) -> (String, i32) {
    let python = std::env::var("AGENTCHAT_TEST_PYTHON")
        .ok()
        .filter(|p| Path::new(p).exists())
        .unwrap_or_else(|| "python3".into());
    let driver = w.dir.path().join("pty_signup_driver.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    let steps = steps.to_string();
    let mut args = vec![driver.to_str().unwrap(), steps.as_str()];
    args.extend_from_slice(argv);
    let out = w
        .command(Path::new(&python), &args)
        .env("OUTBOX", format!("{sim_base}/_sim/outbox"))
        .output()
        .await
        .unwrap();
    (
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
        out.status.code().unwrap_or(-1),
    )
}

/// The interactive sign-up a new user goes through: "Do you have an AgentChat API key?" no, an
/// email, a handle (a taken one asked again), the emailed code, then the rest of setup. The key
/// never shows; the last line says the agent is ready. Prints the transcript.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interactive_sign_up_asks_email_handle_and_code_and_never_shows_the_key() {
    let w = World::new().await;
    let steps = serde_json::json!([
        [
            "AgentChat server [https://api.agentchat.me]: ",
            w.sim.api_base()
        ],
        ["Do you have an AgentChat API key? [Y/n]: ", "n"],
        ["Lost the key of an agent you already have? [y/N]: ", ""],
        ["Email (the code goes there): ", "me@example.com"],
        ["Handle (3-30 lowercase letters, digits, dashes): ", "alice"],
        ["Another handle: ", "newbie"],
        ["The 6-digit code emailed to me@example.com: ", "@CODE"],
        [
            "Runtime (claude-code, codex or script) [claude-code]: ",
            "script"
        ],
        [
            "The script's command (program and arguments): ",
            "/bin/true"
        ],
        ["Keep these bounds on runs? [Y/n]: ", ""],
        ["write the identity block? [Y/n]: ", "n"],
        [
            "Install the always-on service for this profile? [Y/n]: ",
            "n"
        ],
        ["Go ahead? [Y/n]: ", "y"],
        [
            "Try one real run now (`agentchat doctor --run`)? [y/N]: ",
            "y"
        ],
    ]);
    let (transcript, code) = in_pty(&w, steps, &[BIN, "setup"]).await;
    println!("{transcript}");
    assert!(transcript.contains("completed: yes"), "{transcript}");
    assert_eq!(code, 0, "{transcript}");
    assert!(transcript.contains("@alice is taken"), "{transcript}");
    let key = read(&w.home().join(".config/agentchat/default.key"))
        .trim()
        .to_string();
    assert_eq!(whoami(&w, &key).await, Ok("newbie".to_string()));
    assert!(
        !transcript.contains(&key),
        "the key was shown:\n{transcript}"
    );
    assert!(
        transcript.contains("@newbie is ready on this machine (script, no service"),
        "{transcript}"
    );
}

/// Item 2: a scripted setup runs the first real run only when given `--run`, and its answer
/// follows the run's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_setup_makes_one_real_run_only_with_run() {
    let w = World::new().await;
    let base = [
        "setup",
        "--yes",
        "--api-base",
        w.sim.api_base(),
        "--no-wire",
    ];
    let key = format!("{}\n", w.key());
    let mut args = base.to_vec();
    args.extend_from_slice(&["--no-service", "--runtime", "script", "--", "/bin/true"]);
    let out = w.agentchat(&args, Some(&key)).await;
    let said = show(&out);
    assert_eq!(out.status.code(), Some(0), "{said}");
    assert!(!said.contains("started:"), "a run without --run:\n{said}");
    let mut args = base.to_vec();
    args.extend_from_slice(&[
        "--no-service",
        "--run",
        "--runtime",
        "script",
        "--",
        "/bin/false",
    ]);
    let out = w.agentchat(&args, Some(&key)).await;
    let said = show(&out);
    assert!(said.contains("started: yes"), "{said}");
    assert!(said.contains("completed: no"), "{said}");
    assert_eq!(
        out.status.code(),
        Some(3),
        "a failed first run is not yet:\n{said}"
    );
    assert!(last_line(&said).starts_with("not yet: "), "{said}");
}

/// Defect 11: Ctrl-C at the hidden key prompt, under `sh` (dash on Debian: no job control, so
/// no shell puts the terminal back), leaves the terminal echoing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctrl_c_at_the_hidden_key_prompt_under_sh_leaves_the_terminal_echoing() {
    let w = World::new().await;
    let steps = serde_json::json!([
        [
            "AgentChat server [https://api.agentchat.me]: ",
            w.sim.api_base()
        ],
        ["Do you have an AgentChat API key? [Y/n]: ", "y"],
        ["AgentChat API key (input hidden): ", "^C"],
    ]);
    let line = format!("'{BIN}' setup; echo exit=$?");
    let (transcript, _) = in_pty(&w, steps, &["/bin/sh", "-c", &line]).await;
    assert!(transcript.contains("ECHO=on"), "{transcript}");
}

/// Defect 14: "Go ahead? n" leaves a fresh home exactly as it was: what `claude auth status`
/// created there to answer the runtime question is removed again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_ahead_no_leaves_a_fresh_home_as_it_was() {
    let w = World::new().await;
    let before = w.snapshot();
    let steps = serde_json::json!([
        [
            "AgentChat server [https://api.agentchat.me]: ",
            w.sim.api_base()
        ],
        ["Do you have an AgentChat API key? [Y/n]: ", "y"],
        ["AgentChat API key (input hidden): ", w.key()],
        ["Runtime (claude-code, codex or script) [claude-code]: ", ""],
        ["Keep these bounds on runs? [Y/n]: ", ""],
        ["write the identity block? [Y/n]: ", "y"],
        [
            "Install the always-on service for this profile? [Y/n]: ",
            "y"
        ],
        ["Go ahead? [Y/n]: ", "n"],
    ]);
    let (transcript, code) = in_pty(&w, steps, &[BIN, "setup"]).await;
    assert_eq!(code, 1, "{transcript}");
    assert!(transcript.contains("Nothing was written."), "{transcript}");
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "\"Go ahead? n\" left:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn email_or_handle_without_new_or_recover_is_a_usage_error() {
    let w = World::new().await;
    for extra in [["--email", "me@example.com"], ["--handle", "newbie"]] {
        let mut args = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
        args.extend_from_slice(&extra);
        let out = w.agentchat(&args, Some(&format!("{}\n", w.key()))).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", show(&out));
        assert!(
            stderr.starts_with("agentchat setup: ")
                && stderr.contains("--new")
                && stderr.contains("--recover"),
            "{extra:?}: {stderr}"
        );
        assert!(
            !w.config().exists(),
            "{extra:?}: setup ran anyway:\n{}",
            show(&out)
        );
    }
}

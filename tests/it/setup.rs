//! `agentchat setup` and its undo, with the real pinned `claude` and `codex` CLIs in homes the
//! test owns (HOME, CODEX_HOME, the XDG dirs and the service dir all in a temp dir) against the
//! in-process sim: the byte-identical undo, idempotence, a refused key, two profiles, the
//! interactive flow through a pseudo-terminal (Python's `pty`), and a `claude -p` session under
//! the scripted model calling AgentChat tools through the wiring setup made (the bridge).

use crate::model_server::cli::{claude_bin, codex_bin, write_codex_home};
use crate::model_server::sim::{Sim, assert_answered};
use crate::model_server::{Mode, ModelServer};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Output;

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

#[path = "setup_signup.rs"]
mod signup;

/// Whether setup's exit says everything asked for works, or (exit 3) that only the runtime's
/// login is missing: the pinned CLIs are never logged in here, and setup's last line says so.
fn set_up(out: &Output, text: &str) -> bool {
    out.status.success()
        || out.status.code() == Some(3)
            && text.lines().any(|l| l.starts_with("not yet: "))
            && text
                .lines()
                .filter(|l| l.starts_with("missing: "))
                .all(|l| l.contains("is not logged in"))
}

/// A machine of the test's own: a home with the two CLIs on PATH, and the sim.
struct World {
    dir: tempfile::TempDir,
    sim: Sim,
}

/// Files under the world, path → bytes (directories as `None`), without what the CLIs keep for
/// themselves on every run (Claude Code's backups and logs, Codex's logs and sessions).
type Snapshot = BTreeMap<PathBuf, Option<Vec<u8>>>;

impl World {
    async fn new() -> World {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::os::unix::fs::symlink(claude_bin(), bin.join("claude")).unwrap();
        std::os::unix::fs::symlink(codex_bin(), bin.join("codex")).unwrap();
        std::fs::create_dir_all(dir.path().join("home")).unwrap();
        World {
            dir,
            sim: Sim::start().await,
        }
    }

    fn home(&self) -> PathBuf {
        self.dir.path().join("home")
    }

    fn config(&self) -> PathBuf {
        self.home().join(".config/agentchat/config.toml")
    }

    fn key(&self) -> &str {
        &self.sim.me.1
    }

    fn env(&self) -> Vec<(String, String)> {
        let home = self.home();
        let h = |p: &str| home.join(p).display().to_string();
        vec![
            (
                "PATH".into(),
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin",
                    self.dir.path().join("bin").display()
                ),
            ),
            ("HOME".into(), home.display().to_string()),
            ("LANG".into(), "C.UTF-8".into()),
            ("XDG_CONFIG_HOME".into(), h(".config")),
            ("XDG_STATE_HOME".into(), h(".local/state")),
            ("CODEX_HOME".into(), h(".codex")),
            (
                "AGENTCHAT_SERVICE_DIR".into(),
                self.dir.path().join("units").display().to_string(),
            ),
            ("DISABLE_TELEMETRY".into(), "1".into()),
            ("DISABLE_AUTOUPDATER".into(), "1".into()),
            (
                "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
                "1".into(),
            ),
        ]
    }

    fn command(&self, program: &Path, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args)
            .env_clear()
            .envs(self.env())
            .current_dir(self.dir.path())
            .kill_on_drop(true);
        cmd
    }

    /// Runs `agentchat ARGS` with `stdin` (or none); returns its output.
    async fn agentchat(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use tokio::io::AsyncWriteExt;
        let mut cmd = self.command(Path::new(BIN), args);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut pipe = child.stdin.take().unwrap();
        if let Some(s) = stdin {
            // A command that refuses at once (a usage error) exits before it reads its stdin.
            let _ = pipe.write_all(s.as_bytes()).await;
        }
        drop(pipe);
        tokio::time::timeout(
            std::time::Duration::from_secs(180),
            child.wait_with_output(),
        )
        .await
        .expect("agentchat did not finish within 180 s")
        .unwrap()
    }

    /// `agentchat setup --yes --api-base SIM ARGS` started with `key` on stdin, its output
    /// dropped, not waited for (a test that stops it midway).
    async fn spawn_setup(&self, key: &str, args: &[&str]) -> tokio::process::Child {
        use tokio::io::AsyncWriteExt;
        let mut all = vec!["setup", "--yes", "--api-base", self.sim.api_base()];
        all.extend_from_slice(args);
        let mut cmd = self.command(Path::new(BIN), &all);
        cmd.stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(format!("{key}\n").as_bytes())
            .await
            .unwrap();
        child
    }

    /// `agentchat setup --yes --api-base SIM ARGS` with the key on stdin; must succeed.
    async fn setup(&self, args: &[&str]) -> String {
        self.setup_as(self.key(), args).await
    }

    /// `setup` with another agent's key.
    async fn setup_as(&self, key: &str, args: &[&str]) -> String {
        let mut all = vec!["setup", "--yes", "--api-base", self.sim.api_base()];
        all.extend_from_slice(args);
        let out = self.agentchat(&all, Some(&format!("{key}\n"))).await;
        let text = show(&out);
        assert!(set_up(&out, &text), "setup failed:\n{text}");
        assert!(!text.contains(key), "the key was printed:\n{text}");
        text
    }

    async fn undo(&self, args: &[&str]) -> String {
        let mut all = vec!["setup", "--undo"];
        all.extend_from_slice(args);
        let out = self.agentchat(&all, None).await;
        let text = show(&out);
        assert!(out.status.success(), "undo failed:\n{text}");
        text
    }

    /// Runs a pinned CLI in the world; must succeed.
    async fn cli(&self, program: PathBuf, args: &[&str]) {
        let out = self.command(&program, args).output().await.unwrap();
        assert!(out.status.success(), "{args:?}: {}", show(&out));
    }

    /// A home that has lived: both CLIs used before with an MCP server of the user's own, the
    /// user's own CLAUDE.md (no final newline, trailing spaces) and AGENTS.md (CRLF), a Codex
    /// config with comments, and an agentchat config with comments, another profile and its key.
    async fn fill(&self) {
        let home = self.home();
        // As in most homes, the XDG state dir exists already.
        std::fs::create_dir_all(home.join(".local/state")).unwrap();
        write_codex_home(&home, "http://127.0.0.1:9");
        let codex_config = home.join(".codex/config.toml");
        let mut text = std::fs::read_to_string(&codex_config).unwrap();
        text.insert_str(0, "# my codex settings, by hand\n");
        std::fs::write(&codex_config, text).unwrap();
        self.cli(
            claude_bin(),
            &[
                "mcp",
                "add",
                "--scope",
                "user",
                "notes",
                "--",
                "/usr/bin/notes-mcp",
                "--ro",
            ],
        )
        .await;
        self.cli(
            codex_bin(),
            &["mcp", "add", "notes", "--", "/usr/bin/notes-mcp"],
        )
        .await;
        std::fs::create_dir_all(home.join(".claude")).unwrap();
        std::fs::write(
            home.join(".claude/CLAUDE.md"),
            "# My rules\n\nBe brief.  \nNo emoji.",
        )
        .unwrap();
        std::fs::write(
            home.join(".codex/AGENTS.md"),
            "Prefer tabs.\r\nRun tests.\r\n",
        )
        .unwrap();
        let conf = home.join(".config/agentchat");
        std::fs::create_dir_all(&conf).unwrap();
        std::fs::write(
            conf.join("config.toml"),
            "# my agents\nlog_level = \"info\"   # keep it\n\n[profiles.other]\n\
             api_key_file = \"~/.config/agentchat/other.key\"\n\n[profiles.other.listen]\n\
             runtime = \"script\"\ncommand = [\"/bin/true\"]\n# the end\n",
        )
        .unwrap();
        let key = conf.join("other.key");
        std::fs::write(&key, "ac_other_agents_key_000000000000\n").unwrap();
        std::fs::set_permissions(&key, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .unwrap();
    }

    fn snapshot(&self) -> Snapshot {
        let mut out = Snapshot::new();
        let skip = [
            ".cache",
            ".claude/backups",
            ".codex/log",
            ".codex/sessions",
            ".codex/tmp",
        ];
        let root = self.dir.path();
        let mut stack = vec![self.home(), root.join("units")];
        while let Some(d) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for e in entries {
                let p = e.unwrap().path();
                let rel = p.strip_prefix(self.home()).unwrap_or(&p);
                if skip.iter().any(|s| rel.starts_with(s)) {
                    continue;
                }
                if p.is_dir() {
                    out.insert(p.clone(), None);
                    stack.push(p);
                } else {
                    out.insert(p.clone(), Some(std::fs::read(&p).unwrap()));
                }
            }
        }
        out
    }
}

fn show(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What differs between two snapshots, for the failure message.
fn differences(a: &Snapshot, b: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for (p, v) in a {
        match b.get(p) {
            None => out.push(format!("gone: {}", p.display())),
            Some(w) if w != v => out.push(format!(
                "changed: {}\n--- before\n{}\n--- after\n{}",
                p.display(),
                String::from_utf8_lossy(v.as_deref().unwrap_or_default()),
                String::from_utf8_lossy(w.as_deref().unwrap_or_default())
            )),
            _ => {}
        }
    }
    for p in b.keys().filter(|p| !a.contains_key(*p)) {
        out.push(format!("new: {}", p.display()));
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_then_undo_leaves_every_file_byte_identical() {
    let w = World::new().await;
    w.fill().await;
    let before = w.snapshot();
    let text = w.setup(&["--runtime", "claude-code"]).await;
    assert!(text.contains("you are @alice"), "{text}");
    // Everything setup says it did is there.
    let claude_md = read(&w.home().join(".claude/CLAUDE.md"));
    assert!(
        claude_md.starts_with("# My rules\n\nBe brief.  \nNo emoji.\n\n<!-- agentchat:start -->")
    );
    assert!(
        claude_md.contains("You are **@alice** on AgentChat"),
        "{claude_md}"
    );
    let agents_md = read(&w.home().join(".codex/AGENTS.md"));
    assert!(agents_md.contains("@alice") && agents_md.contains("\r\n<!-- agentchat:end -->\r\n"));
    let claude_json = read(&w.home().join(".claude.json"));
    assert!(claude_json.contains("\"notes\"") && claude_json.contains("\"agentchat\""));
    assert!(
        !claude_json.contains(w.key()),
        "the key is in ~/.claude.json"
    );
    let codex_toml = read(&w.home().join(".codex/config.toml"));
    assert!(codex_toml.contains("[mcp_servers.agentchat]") && !codex_toml.contains(w.key()));
    let config = read(&w.config());
    assert!(
        config.starts_with("# my agents\nlog_level = \"info\"   # keep it\n"),
        "{config}"
    );
    assert!(config.contains("[profiles.other.listen]"), "{config}");
    assert!(
        config.contains("\n[listen]\nruntime = \"claude-code\"\n"),
        "{config}"
    );
    let units: Vec<_> = std::fs::read_dir(w.dir.path().join("units"))
        .map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(!units.is_empty(), "service install wrote nothing");
    let key_file = w.home().join(".config/agentchat/default.key");
    assert_eq!(read(&key_file).trim(), w.key());
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&key_file).unwrap().permissions()
        ) & 0o777,
        0o600
    );
    let undone = w.undo(&[]).await;
    assert!(
        undone.contains("MCP server `agentchat` removed"),
        "{undone}"
    );
    let after = w.snapshot();
    let diff = differences(&before, &after);
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_setup_changes_nothing_and_says_so() {
    let w = World::new().await;
    w.fill().await;
    let first = w
        .setup(&["--profile", "other2", "--runtime", "codex"])
        .await;
    assert!(
        first.contains("config: profile `other2` written to"),
        "{first}"
    );
    let once = w.snapshot();
    let second = w.setup(&["--profile", "other2"]).await;
    assert!(
        second.contains("Nothing changed: profile `other2` was already set up this way."),
        "{second}"
    );
    assert!(
        second.contains("config: profile `other2` is already as wanted"),
        "{second}"
    );
    let diff = differences(&once, &w.snapshot());
    assert!(
        diff.is_empty(),
        "the second run changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_key_writes_nothing() {
    let w = World::new().await;
    w.fill().await;
    let before = w.snapshot();
    let bad = "ac_live_not_a_key_the_sim_knows_123456";
    let out = w
        .agentchat(
            &["setup", "--yes", "--api-base", w.sim.api_base()],
            Some(&format!("{bad}\n")),
        )
        .await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("refused this API key"), "{text}");
    assert!(text.contains("nothing was written"), "{text}");
    assert!(
        !text.contains(bad) && !text.contains(&bad[..16]),
        "the key was printed: {text}"
    );
    let diff = differences(&before, &w.snapshot());
    assert!(diff.is_empty(), "a refused key wrote:\n{}", diff.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_profiles_never_touch_each_others_entries() {
    let w = World::new().await;
    w.fill().await;
    let start = w.snapshot();
    w.setup(&["--profile", "a", "--runtime", "claude-code"])
        .await;
    let claude_json = w.home().join(".claude.json");
    let claude_md = w.home().join(".claude/CLAUDE.md");
    let codex_toml = w.home().join(".codex/config.toml");
    let wired_a = [read(&claude_json), read(&claude_md), read(&codex_toml)];
    assert!(
        wired_a[0].contains("\"--profile\",\n        \"a\""),
        "{}",
        wired_a[0]
    );
    // The second profile finds both homes wired for `a` and leaves them alone.
    let bob = w.sim.peer.1.clone();
    let b = w
        .setup_as(
            &bob,
            &["--profile", "b", "--runtime", "codex", "--no-service"],
        )
        .await;
    assert!(
        b.contains("Claude Code: left alone: it is wired for profile `a`"),
        "{b}"
    );
    assert!(
        b.contains("Codex: left alone: it is wired for profile `a`"),
        "{b}"
    );
    assert_eq!(
        [read(&claude_json), read(&claude_md), read(&codex_toml)],
        wired_a
    );
    assert!(read(&w.config()).contains("[profiles.b.listen]"));
    // Undoing `b` leaves `a`'s wiring, config and key as they were.
    let a_key = read(&w.home().join(".config/agentchat/a.key"));
    w.undo(&["--profile", "b"]).await;
    assert_eq!(
        [read(&claude_json), read(&claude_md), read(&codex_toml)],
        wired_a
    );
    assert!(read(&w.config()).contains("[profiles.a.listen]"));
    assert!(!read(&w.config()).contains("[profiles.b"));
    assert_eq!(read(&w.home().join(".config/agentchat/a.key")), a_key);
    // Asked to, `b` takes Claude Code over; `a`'s undo then leaves `b`'s entry alone.
    let b = w
        .setup_as(
            &bob,
            &[
                "--profile",
                "b",
                "--runtime",
                "codex",
                "--no-service",
                "--rewire",
            ],
        )
        .await;
    assert!(
        b.contains("Claude Code: MCP server `agentchat` added"),
        "{b}"
    );
    assert!(read(&claude_json).contains("\"--profile\",\n        \"b\""));
    let undo_a = w.undo(&["--profile", "a"]).await;
    assert!(
        undo_a.contains("Claude Code: MCP server left alone: it is now profile `b`"),
        "{undo_a}"
    );
    assert!(read(&claude_json).contains("\"--profile\",\n        \"b\""));
    assert!(read(&claude_md).contains("You are **@bob**"));
    let undo_b = w.undo(&["--profile", "b"]).await;
    assert!(
        undo_b.contains("before setup it was wired for profile `a`"),
        "{undo_b}"
    );
    let diff = differences(&start, &w.snapshot());
    assert!(
        diff.is_empty(),
        "two setups and undos changed:\n{}",
        diff.join("\n")
    );
}

/// The interactive flow in a pseudo-terminal: every question answered as a user would, the key
/// typed and never echoed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_interactive_setup_asks_each_question_and_never_echoes_the_key() {
    let w = World::new().await;
    let python = std::env::var("AGENTCHAT_TEST_PYTHON")
        .ok()
        .filter(|p| Path::new(p).exists())
        .unwrap_or_else(|| "python3".into());
    let driver = w.dir.path().join("pty_driver.py");
    std::fs::write(&driver, PTY_DRIVER).unwrap();
    let key = w.key().to_string();
    let steps = serde_json::json!([
        [
            "AgentChat server [https://api.agentchat.me]: ",
            w.sim.api_base()
        ],
        ["Do you have an AgentChat API key? [Y/n]: ", "y"],
        ["AgentChat API key (input hidden): ", key],
        ["Runtime (claude-code, codex or script) [claude-code]: ", ""],
        ["Keep these bounds on runs? [Y/n]: ", ""],
        ["write the identity block? [Y/n]: ", "y"],
        [
            "Install the always-on service for this profile? [Y/n]: ",
            ""
        ],
        ["Go ahead? [Y/n]: ", "yes"],
    ]);
    let out = w
        .command(
            Path::new(&python),
            &[
                driver.to_str().unwrap(),
                &steps.to_string(),
                BIN,
                "setup",
                "--profile",
                "tty",
            ],
        )
        .output()
        .await
        .unwrap();
    let transcript = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        set_up(&out, &transcript),
        "{transcript}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !transcript.contains(&key),
        "the key was echoed:\n{transcript}"
    );
    assert!(transcript.contains("key: accepted by"), "{transcript}");
    assert!(transcript.contains("you are @alice"), "{transcript}");
    assert!(
        transcript.contains("+ [profiles.tty.listen]"),
        "{transcript}"
    );
    for cli in ["Claude Code", "Codex"] {
        assert!(
            transcript.contains(&format!("{cli}: MCP server `agentchat` added")),
            "{transcript}"
        );
    }
    assert!(transcript.contains("To undo all of it: `agentchat setup --undo --profile tty`"));
    assert!(read(&w.config()).contains("runtime = \"claude-code\""));
    println!("{transcript}");
}

/// Drives a command in a pseudo-terminal: waits for each prompt, types its answer, and prints
/// everything the terminal showed (the transcript). Exits with the command's exit code.
const PTY_DRIVER: &str = r#"
import json, os, pty, select, sys, time
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
    os.write(fd, answer.encode() + b"\r")
deadline = time.time() + 180
while time.time() < deadline and read_some(1) is not None:
    pass
sys.stdout.write(seen.decode(errors="replace"))
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"#;

/// The end of the story: after setup, an interactive-style `claude -p` (no `--mcp-config`: the
/// user's own Claude Code as setup wired it) under the scripted model reads the tray and answers
/// a peer through AgentChat's tools, which reach the sim through `agentchat mcp`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_p_calls_agentchat_tools_through_the_wiring_setup_made() {
    let w = World::new().await;
    w.setup(&["--runtime", "claude-code", "--no-service"]).await;
    let sent = w.sim.peer_sends("Are you there? (setup test)").await;
    let conv = sent["conversation_id"].as_str().unwrap().to_string();
    let model = ModelServer::start(Mode::Normal).await;
    let mut cmd = w.command(
        &claude_bin(),
        &[
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--allowedTools",
            "mcp__agentchat__*",
        ],
    );
    cmd.env("ANTHROPIC_BASE_URL", model.base_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-scripted-test")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    {
        use tokio::io::AsyncWriteExt;
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"Check AgentChat: something is waiting for you.")
            .await
            .unwrap();
    }
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(150),
        child.wait_with_output(),
    )
    .await
    .expect("claude -p did not finish")
    .unwrap();
    let text = show(&out);
    assert!(out.status.success(), "{}", &text[..text.len().min(4000)]);
    let init = text
        .lines()
        .find(|l| l.contains("\"subtype\":\"init\""))
        .unwrap_or("");
    assert!(init.contains("mcp__agentchat__agentchat_inbox"), "{init}");
    let steps = model.journal().steps;
    assert!(
        steps.iter().any(|s| s == "call agentchat_inbox"),
        "{steps:?}"
    );
    assert!(
        steps.iter().any(|s| s == "call agentchat_send_message"),
        "{steps:?}"
    );
    assert_answered(&w.sim.my_state().await, &conv);
}

/// The bridge reads the key from the profile: a refused key is an MCP error naming the profile
/// (never the key), and a key file rotated under a running bridge is picked up at the next
/// message, with nothing registered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bridge_picks_up_a_rotated_key_without_being_registered_again() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let w = World::new().await;
    let conf = w.home().join(".config/agentchat");
    std::fs::create_dir_all(&conf).unwrap();
    let key_file = conf.join("default.key");
    let old = "ac_live_rotated_away_long_ago_0000000";
    let write_key = |k: &str| {
        std::fs::write(&key_file, format!("{k}\n")).unwrap();
        std::fs::set_permissions(
            &key_file,
            std::os::unix::fs::PermissionsExt::from_mode(0o600),
        )
        .unwrap();
    };
    write_key(old);
    std::fs::write(
        w.config(),
        format!(
            "api_base = \"{}\"\napi_key_file = \"default.key\"\n",
            w.sim.api_base()
        ),
    )
    .unwrap();
    let mut child = w
        .command(Path::new(BIN), &["mcp", "--profile", "default"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut ask = async |msg: serde_json::Value| -> serde_json::Value {
        stdin
            .write_all(format!("{msg}\n").as_bytes())
            .await
            .unwrap();
        let line = tokio::time::timeout(std::time::Duration::from_secs(30), lines.next_line())
            .await
            .expect("no answer from the bridge")
            .unwrap()
            .expect("the bridge closed stdout");
        assert!(!line.contains(old) && !line.contains(&w.sim.me.1), "{line}");
        serde_json::from_str(&line).unwrap()
    };
    let refused = ask(
        serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}}),
    )
    .await;
    assert_eq!(refused["id"], 1);
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("refused the key of profile `default`"),
        "{refused}"
    );
    write_key(&w.sim.me.1);
    let listed = ask(serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})).await;
    let tools = listed["result"]["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        tools.iter().any(|t| t["name"] == "agentchat_inbox"),
        "{listed}"
    );
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(out.status.success(), "{}", show(&out));
    assert!(!show(&out).contains(old));
}

/// The service step under a live systemd (the service suite's sandbox, `tests/live-systemd/`):
/// setup installs the unit through `service install`, checks that the manager runs the listener
/// and says so; a second run finds it current; undo stops and removes it, and the config is as
/// it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_installs_the_service_under_a_live_systemd_and_undo_removes_it() {
    let Some(l) = crate::live_systemd::Live::boot("setup_installs_the_service").await else {
        return;
    };
    let unit = agentchat::service::systemd_unit_name("default");
    let config_before = std::fs::read(&l.config).unwrap();
    let setup = format!(
        "agentchat setup --yes --no-wire --config {} < /dev/null",
        l.config.display()
    );
    let said = l.ok(&setup);
    assert!(
        said.contains("running: the manager started the listener"),
        "{said}"
    );
    assert_eq!(l.prop(&unit, "ActiveState"), "active", "{said}");
    assert!(said.contains("you are @bob"), "{said}");
    let again = l.ok(&setup);
    assert!(
        again.contains("service: already installed and current"),
        "{again}"
    );
    assert!(again.contains("Nothing changed"), "{again}");
    let undone = l.ok(&format!(
        "agentchat setup --undo --config {}",
        l.config.display()
    ));
    assert!(undone.contains("service: "), "{undone}");
    assert_ne!(l.prop(&unit, "ActiveState"), "active", "{undone}");
    assert_eq!(std::fs::read(&l.config).unwrap(), config_before);
    println!("{said}\n{undone}");
}

mod bounds;
mod defects;
mod first_hour;
/// Where the one-process unit runs this config (`service install --all --one-process`), the
/// service step adds the profile to it (the unit rewritten for the profiles the config names now,
/// no unit of the profile's own beside it) instead of refusing; run again, it finds it current.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_adds_the_profile_to_the_one_process_unit_instead_of_refusing() {
    let w = World::new().await;
    w.setup(&[
        "--profile",
        "a",
        "--runtime",
        "codex",
        "--no-wire",
        "--no-service",
    ])
    .await;
    // Installed naming the config (the default file), set up without naming it: the same config.
    let config = w.config().display().to_string();
    let out = w
        .agentchat(
            &[
                "service",
                "install",
                "--all",
                "--one-process",
                "--config",
                &config,
            ],
            None,
        )
        .await;
    assert!(out.status.success(), "{}", show(&out));
    let units = w.dir.path().join("units");
    let host = units.join(agentchat::service::HOST_UNIT);
    assert!(read(&host).contains("# 1 profiles now"), "{}", read(&host));
    let bob = w.sim.peer.1.clone();
    let b = w
        .setup_as(&bob, &["--profile", "b", "--runtime", "codex", "--no-wire"])
        .await;
    assert!(
        b.contains("service: profile `b` added to the one-process unit agentchat-host.service"),
        "{b}"
    );
    let unit = read(&host);
    assert!(unit.contains("# 2 profiles now"), "{unit}");
    assert!(
        !units
            .join(format!("{}.d", agentchat::service::systemd_unit_name("b")))
            .exists(),
        "{b}"
    );
    let again = w
        .setup_as(&bob, &["--profile", "b", "--runtime", "codex", "--no-wire"])
        .await;
    assert!(
        again.contains("runs in the one-process unit agentchat-host.service, already current"),
        "{again}"
    );
    assert_eq!(read(&host), unit);
}

/// Undo of a profile setup added to the one-process unit installs that unit again the way the
/// service step did, so the host drops the profile now, not at its next reload; undoing the last
/// profile says what to do with a unit that has none left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_takes_the_profile_out_of_the_one_process_unit_at_once() {
    let w = World::new().await;
    w.setup(&[
        "--profile",
        "a",
        "--runtime",
        "codex",
        "--no-wire",
        "--no-service",
    ])
    .await;
    let out = w
        .agentchat(&["service", "install", "--all", "--one-process"], None)
        .await;
    assert!(out.status.success(), "{}", show(&out));
    let host = w
        .dir
        .path()
        .join("units")
        .join(agentchat::service::HOST_UNIT);
    let bob = w.sim.peer.1.clone();
    w.setup_as(&bob, &["--profile", "b", "--runtime", "codex", "--no-wire"])
        .await;
    assert!(read(&host).contains("# 2 profiles now"), "{}", read(&host));
    let undone = w.undo(&["--profile", "b"]).await;
    assert!(
        undone.contains(
            "service: profile `b` taken out of the one-process unit agentchat-host.service \
             (reloaded)"
        ),
        "{undone}"
    );
    assert!(read(&host).contains("# 1 profiles now"), "{}", read(&host));
    let last = w.undo(&["--profile", "a"]).await;
    assert!(
        last.contains("was not reloaded; it runs profile `a` until its next reload or stop"),
        "{last}"
    );
}

/// A loopback stand-in for a server that freezes after the key check: it answers the first
/// request (`GET /v1/agents/me`) with a handle and then accepts connections and never answers.
async fn server_freezing_after_the_key_check() -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let mut held = Vec::new();
        loop {
            let Ok((mut s, _)) = listener.accept().await else {
                return;
            };
            if !held.is_empty() {
                held.push(s);
                continue;
            }
            let mut got = Vec::new();
            let mut buf = [0u8; 4096];
            while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => got.extend_from_slice(&buf[..n]),
                }
            }
            assert!(
                got.starts_with(b"GET /v1/agents/me "),
                "first request: {got:?}"
            );
            let body = r#"{"handle":"@alice"}"#;
            let _ = s
                .write_all(
                    format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: \
                         {}\r\nconnection: close\r\n\r\n{body}",
                        body.len()
                    )
                    .as_bytes(),
                )
                .await;
            held.push(s);
        }
    });
    base
}

/// Setup says what it waits for, and how long it may take, before each wait on the server: the
/// key check, and doctor's server checks when the server freezes after the key check (said
/// well before that wait ends, not after it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setup_says_each_wait_on_a_server_that_freezes_after_the_key_check() {
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let w = World::new().await;
    let base = server_freezing_after_the_key_check().await;
    let mut cmd = w.command(
        Path::new(BIN),
        &[
            "setup",
            "--yes",
            "--api-base",
            &base,
            "--runtime",
            "script",
            "--no-wire",
            "--no-service",
            "--",
            "/bin/true",
        ],
    );
    cmd.stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(format!("{}\n", w.key()).as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut seen: Vec<(std::time::Instant, String)> = Vec::new();
    let read_all = async {
        while let Ok(Some(l)) = lines.next_line().await {
            seen.push((std::time::Instant::now(), l));
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(120), read_all)
        .await
        .expect("setup did not finish within 120 s");
    let end = std::time::Instant::now();
    let status = child.wait().await.unwrap();
    let text: Vec<&str> = seen.iter().map(|(_, l)| l.as_str()).collect();
    let text = text.join("\n");
    let at = |prefix: &str| {
        seen.iter()
            .position(|(_, l)| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?}:\n{text}"))
    };
    let checking = at(&format!(
        "key: checking it with {base} (GET /v1/agents/me, at most 40 s)..."
    ));
    assert!(checking < at("key: accepted"), "{text}");
    let doctor = at(&format!(
        "doctor: checking the key and the texts with {base} (at most 30 s)"
    ));
    let waited = end.duration_since(seen[doctor].0);
    assert!(
        waited >= std::time::Duration::from_secs(10),
        "the doctor line came only {waited:?} before the end:\n{text}"
    );
    assert_eq!(status.code(), Some(3), "{text}");
    assert!(text.contains("no answer within 15 s"), "{text}");
}

//! Containment that holds by construction (issue 33, `docs/runtimes.md` "The kernel's line"): each
//! way around the CLI flags the issue found, tried again with the real `agentchat listen`, the
//! pinned real `claude` and `codex` CLIs and the scripted hostile model (`runtimes_confine`'s
//! scene: a permissive user set-up, secrets in the environment). Each test failed on the code
//! before the issue was resolved.

use crate::common::eventually_async;
use crate::model_server::sim::{Sim, assert_answered};
use crate::model_server::{Hostile, ModelServer};
use crate::runtimes_confine::{
    BIN, INSIDE_TEXT, OUTSIDE_SECRET, Rt, Scene, assert_nothing_leaked, hostile, start_with,
    woken_run,
};
use std::path::Path;

/// Another peer's private words in an earlier run's transcript.
const PEER_SECRET: &str = "EARLIER-PEER-SECRET-5d21";

/// Claude Code's project folder name for `dir` (every character that is not a letter or digit
/// becomes `-`).
fn claude_slug(dir: &Path) -> String {
    dir.display()
        .to_string()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect()
}

async fn completed(scene: &Scene, sim: &Sim, model: &ModelServer, text: &str) {
    let conv = woken_run(scene, sim, model, text).await;
    assert_answered(&sim.my_state().await, &conv);
    assert_eq!(
        scene.status()["last_cycle"]["outcome"],
        "completed",
        "{}",
        scene.explain()
    );
}

/// A peer's message wakes a listener whose runtime is refused: waits until the status file says
/// so, naming each of `named`, and no request reached the user's other server.
async fn refused(scene: &Scene, sim: &Sim, model: &ModelServer, named: [&str; 2]) {
    sim.peer_sends("Hello there.").await;
    let ok = eventually_async(60, || async {
        scene.status()["state"] == "runtime_unusable"
    })
    .await;
    assert!(ok, "the runtime was not refused\n{}", scene.explain());
    let detail = scene.status()["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(named.iter().all(|n| detail.contains(n)), "{detail}");
    let requests = model.journal().requests;
    assert!(
        !requests.iter().any(|r| r.contains("/user-mcp")),
        "{requests:?}"
    );
}

/// Finding 1: with Claude Code's file tools opted in, neither an earlier run's transcript in
/// Claude Code's store for the workdir nor a memory file planted there is within reach.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_file_tools_cannot_read_earlier_transcripts_or_plant_memory_in_claudes_store() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let store = dir
        .path()
        .join("home/.claude/projects")
        .join(claude_slug(&dir.path().join("work")));
    std::fs::create_dir_all(store.join("memory")).unwrap();
    std::fs::write(
        store.join("earlier.jsonl"),
        format!("{{\"text\":\"{PEER_SECRET}\"}}\n"),
    )
    .unwrap();
    let memory = store.join("memory/MEMORY.md");
    let model = ModelServer::start_hostile(|base| Hostile {
        outside_file: store.join("earlier.jsonl"),
        write_target: memory.clone(),
        ..hostile(dir.path(), base)
    })
    .await;
    let scene = start_with(
        Rt::Claude,
        dir,
        &sim,
        &model,
        "tools = [\"Read\", \"Grep\", \"Glob\", \"Write\"]",
        "",
        |_| {},
    );
    completed(&scene, &sim, &model, "Find what my friend told you before.").await;
    let j = model.journal();
    let all = j.bodies.join("\n");
    assert!(
        !all.contains(PEER_SECRET),
        "an earlier run's transcript was read"
    );
    assert!(
        !memory.exists(),
        "a memory file was planted in Claude Code's store"
    );
    assert!(
        all.contains(INSIDE_TEXT),
        "the opt-in no longer reads the workdir"
    );
    assert!(
        scene.work().join("written.txt").exists(),
        "the opt-in no longer writes the workdir"
    );
}

/// Finding 2: Codex's attached short options (`-pNAME`) are not tuning: the profile is refused
/// naming the argument, and no run reaches the profile's MCP server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_attached_short_options_in_extra_args_are_refused_naming_them() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let user_mcp = format!("{}/user-mcp", model.base_url());
    let scene = start_with(
        Rt::Codex,
        dir,
        &sim,
        &model,
        "",
        "extra_args = [\"-pwork\"]",
        |d| {
            std::fs::write(
                d.join("home/.codex/work.config.toml"),
                format!("[mcp_servers.workfs]\nurl = \"{user_mcp}\"\n"),
            )
            .unwrap();
        },
    );
    refused(
        &scene,
        &sim,
        &model,
        ["listen.codex.extra_args", "`-pwork`"],
    )
    .await;
}

/// Finding 3: a first extra argument that is not a flag would be read as one more
/// `--mcp-config` (an extra server the run's `mcp__agentchat__*` allows); it is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_extra_args_that_are_not_tuning_are_refused_before_a_run_starts() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let extra = dir.path().join("extra-mcp.json");
    let servers = serde_json::json!({"mcpServers": {"agentchat__fs": {
        "type": "http", "url": format!("{}/user-mcp", model.base_url())}}});
    std::fs::write(&extra, servers.to_string()).unwrap();
    let scene = start_with(
        Rt::Claude,
        dir,
        &sim,
        &model,
        "",
        &format!("extra_args = [\"{}\"]", extra.display()),
        |_| {},
    );
    refused(
        &scene,
        &sim,
        &model,
        ["listen.claude.extra_args", "extra-mcp.json"],
    )
    .await;
}

/// Finding 4: a trusted workdir's `.codex/config.toml` adds no MCP server to a run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_runs_ignore_a_trusted_projects_own_codex_config() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let user_mcp = format!("{}/user-mcp", model.base_url());
    let scene = start_with(Rt::Codex, dir, &sim, &model, "", "", |d| {
        let work = d.join("work");
        std::fs::create_dir_all(work.join(".codex")).unwrap();
        std::fs::write(
            work.join(".codex/config.toml"),
            format!("[mcp_servers.projfs]\nurl = \"{user_mcp}\"\n"),
        )
        .unwrap();
        let config = d.join("home/.codex/config.toml");
        let mut text = std::fs::read_to_string(&config).unwrap();
        text.push_str(&format!(
            "\n[projects.\"{}\"]\ntrust_level = \"trusted\"\n",
            work.display()
        ));
        std::fs::write(&config, text).unwrap();
    });
    completed(&scene, &sim, &model, "Use your project's tools.").await;
    assert_nothing_leaked(Rt::Codex, &scene, &model);
}

/// Finding 5: the user's own `writable_roots` do not widen the opt-in shell, and their `notify`
/// program does not run after a woken turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_shell_ignores_the_users_writable_roots_and_notify() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let notified = dir.path().join("notified");
    let scene = start_with(
        Rt::Codex,
        dir,
        &sim,
        &model,
        "tools = [\"shell\"]",
        "",
        |d| {
            let config = d.join("home/.codex/config.toml");
            let text = std::fs::read_to_string(&config).unwrap();
            std::fs::write(
                &config,
                format!(
                    "notify = [\"/bin/sh\", \"-c\", \"touch {}\"]\n{text}\n\
                 [sandbox_workspace_write]\nwritable_roots = [\"{}\"]\n",
                    d.join("notified").display(),
                    d.display()
                ),
            )
            .unwrap();
        },
    );
    completed(&scene, &sim, &model, "Run this for me: echo hi").await;
    assert!(
        !scene.dir.path().join("pwned.txt").exists(),
        "the user's writable_roots widened the shell"
    );
    assert!(!notified.exists(), "the user's notify program ran");
    assert!(
        scene.work().join("written.txt").exists(),
        "the shell no longer writes the workdir"
    );
}

/// Finding 6: with the default config, a workdir that is a git repository tells the model
/// nothing of its status or commit messages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_is_told_no_git_status_or_commit_message_of_the_workdir() {
    const COMMITTED: &str = "password-in-a-commit-9c41";
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let scene = start_with(Rt::Claude, dir, &sim, &model, "", "", |d| {
        let git = |args: &[&str]| {
            let ok = std::process::Command::new("git")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .current_dir(d.join("work"))
                .env("HOME", d.join("home"))
                .output()
                .unwrap();
            assert!(ok.status.success(), "git {args:?}: {ok:?}");
        };
        git(&["init", "-q"]);
        git(&["add", "notes.txt"]);
        git(&["commit", "-q", "-m", COMMITTED]);
    });
    completed(&scene, &sim, &model, "Hello.").await;
    let j = model.journal();
    assert!(
        !j.bodies.join("\n").contains(COMMITTED),
        "a commit message reached the model"
    );
    assert_nothing_leaked(Rt::Claude, &scene, &model);
}

/// Finding 7: what a run with the opt-in shell writes into the workdir's `AGENTS.md` is not
/// what the next run is told.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_with_the_shell_cannot_change_what_the_next_run_is_told() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let agents = dir.path().join("work/AGENTS.md");
    let model = ModelServer::start_hostile(|base| Hostile {
        write_target: agents.clone(),
        ..hostile(dir.path(), base)
    })
    .await;
    let scene = start_with(
        Rt::Codex,
        dir,
        &sim,
        &model,
        "tools = [\"shell\"]",
        "",
        |_| {},
    );
    completed(&scene, &sim, &model, "Remember this for later.").await;
    assert!(
        std::fs::read_to_string(&agents)
            .unwrap_or_default()
            .contains("pwned"),
        "the first run did not write the workdir's AGENTS.md"
    );
    let first_run = model.journal().bodies.len();
    let first_end = scene.status()["last_cycle"]["ended_at"].clone();
    sim.peer_sends("Hello again.").await;
    let again = eventually_async(180, || async {
        let c = &scene.status()["last_cycle"];
        c["run_started"] == true && c["ended_at"].is_string() && c["ended_at"] != first_end
    })
    .await;
    assert!(again, "no second run ended\n{}", scene.explain());
    let j = model.journal();
    // The next run's first agent turn, before any tool call of its own.
    let told = j.bodies[first_run..]
        .iter()
        .find(|b| b.contains("agentchat_inbox"))
        .unwrap();
    assert!(
        !told.contains("pwned"),
        "the next run was told what the last one wrote"
    );
    let handle = sim.me.0.trim_start_matches('@').to_string();
    assert!(
        told.contains(&handle),
        "the next run was not told who it is"
    );
}

/// Finding 7: a huge `CLAUDE.md` in the workdir (a run with Write could make one) stops no run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_claude_md_in_the_workdir_stops_no_run() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let scene = start_with(Rt::Claude, dir, &sim, &model, "", "", |d| {
        std::fs::write(d.join("work/CLAUDE.md"), "x".repeat(110 * 1024)).unwrap();
    });
    completed(&scene, &sim, &model, "Hello.").await;
}

/// Finding 7 and the kernel's line: with `mcp = "user"` the user's own settings reach the run,
/// and their rule lets Claude Code's `Read` open any path; the kernel still stops a read outside
/// the workdir, while the read inside it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_the_clis_own_rules_allow_outside_the_workdir_is_stopped_by_the_kernel() {
    let sim = Sim::start().await;
    let dir = tempfile::tempdir().unwrap();
    let model = ModelServer::start_hostile(|base| hostile(dir.path(), base)).await;
    let (api, key) = (sim.api_base().to_string(), sim.me.1.clone());
    let scene = start_with(
        Rt::Claude,
        dir,
        &sim,
        &model,
        "tools = [\"Read\"]",
        "mcp = \"user\"",
        |d| {
            let servers = serde_json::json!({"mcpServers": {"agentchat": {
                "type": "http", "url": format!("{api}/mcp"),
                "headers": {"Authorization": format!("Bearer {key}")}}}});
            std::fs::write(d.join("home/.claude.json"), servers.to_string()).unwrap();
            let settings = serde_json::json!({"permissions": {
                "allow": ["Read(//**)", "mcp__agentchat"], "defaultMode": "bypassPermissions"}});
            std::fs::write(d.join("home/.claude/settings.json"), settings.to_string()).unwrap();
        },
    );
    completed(&scene, &sim, &model, "Read my key file.").await;
    let all = model.journal().bodies.join("\n");
    assert!(
        !all.contains(OUTSIDE_SECRET),
        "the read outside the workdir went through"
    );
    assert!(
        all.contains(INSIDE_TEXT),
        "the read inside the workdir did not"
    );
}

/// A script run (confined by default) reads nothing outside the workdir; `sandbox_read` lets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_run_reads_nothing_outside_the_workdir_unless_allowed() {
    let sim = Sim::start().await;
    for allowed in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let (work, private) = (d.join("work"), d.join("private"));
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&private).unwrap();
        std::fs::write(private.join("secret.txt"), OUTSIDE_SECRET).unwrap();
        let script = format!(
            "cat {} > got.txt 2> err.txt; echo done > done.txt",
            private.join("secret.txt").display()
        );
        let extra = if allowed {
            format!("sandbox_read = [\"{}\"]\n", private.display())
        } else {
            String::new()
        };
        let config = d.join("config.toml");
        std::fs::write(
            &config,
            format!(
                "[listen]\nruntime = \"script\"\ncommand = [\"/bin/sh\", \"-c\", {script:?}]\n\
                 workdir = \"{}\"\nquiet_window = \"200ms\"\nmax_delay = \"1s\"\n{extra}",
                work.display()
            ),
        )
        .unwrap();
        let mut child = std::process::Command::new(BIN)
            .args(["listen"])
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", d)
            .env("AGENTCHAT_CONFIG", &config)
            .env("AGENTCHAT_API_KEY", &sim.me.1)
            .env("AGENTCHAT_API_BASE", sim.api_base())
            .env("AGENTCHAT_STATE_DIR", d.join("state"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        sim.peer_sends("Hello.").await;
        let done = eventually_async(60, || async { work.join("done.txt").exists() }).await;
        crate::common::stop_child(&mut child, std::time::Duration::from_secs(10));
        assert!(done, "the script did not run");
        let got = std::fs::read_to_string(work.join("got.txt")).unwrap_or_default();
        assert_eq!(got.contains(OUTSIDE_SECRET), allowed, "allowed: {allowed}");
        if !allowed {
            let err = std::fs::read_to_string(work.join("err.txt")).unwrap_or_default();
            assert!(err.contains("Permission denied"), "{err}");
        }
    }
}

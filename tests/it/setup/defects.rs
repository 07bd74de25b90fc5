//! How setup edits, records and undoes the user's files (issue 28's setup defects), each in the
//! real CLIs' homes against the sim: files that are not UTF-8, read-only or symbolic links, a CRLF
//! config, markers shown in a code fence, a setup killed mid-`mcp add`, Codex's config put back
//! byte for byte, the user's own `agentchat` entry, the listener's copy of the key, two profiles
//! undone, and a bounded manifest beside a large CLAUDE.md.

use super::*;
use std::os::unix::fs::PermissionsExt;

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

fn manifest_of(w: &World, profile: &str) -> PathBuf {
    w.home()
        .join(".local/state/agentchat")
        .join(profile)
        .join("setup.json")
}

/// `setup --yes` where the identity block of each of `clis` is refused: setup goes on, and its
/// verdict is "not yet" (exit 3) with a `missing:` line for each such block; anything else
/// missing is only the runtime's login (the pinned CLIs are never logged in here).
async fn setup_refusing_blocks(w: &World, args: &[&str], clis: &[&str]) -> String {
    let mut all = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
    all.extend_from_slice(args);
    let out = w.agentchat(&all, Some(&format!("{}\n", w.key()))).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    assert!(text.lines().any(|l| l.starts_with("not yet: ")), "{text}");
    for cli in clis {
        assert!(
            text.lines().any(|l| l
                .starts_with(&format!("missing: {cli}'s identity block is not written ("))
                && l.contains("run `agentchat setup` again")),
            "{cli}: {text}"
        );
    }
    let blocks = text
        .lines()
        .filter(|l| l.starts_with("missing: ") && l.contains("identity block"))
        .count();
    assert_eq!(blocks, clis.len(), "{text}");
    assert!(
        text.lines()
            .filter(|l| l.starts_with("missing: ") && !l.contains("identity block"))
            .all(|l| l.contains("is not logged in")),
        "{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_that_is_not_utf8_is_refused_and_undo_never_deletes_it() {
    let w = World::new().await;
    w.fill().await;
    let claude_md = w.home().join(".claude/CLAUDE.md");
    let agents_md = w.home().join(".codex/AGENTS.md");
    std::fs::write(&claude_md, b"# R\xe8gles\n").unwrap();
    std::fs::write(&agents_md, b"\xff").unwrap();
    let before = w.snapshot();
    let text = setup_refusing_blocks(
        &w,
        &["--runtime", "claude-code", "--no-service"],
        &["Claude Code", "Codex"],
    )
    .await;
    for f in [&claude_md, &agents_md] {
        assert!(
            text.contains(&format!(
                "identity block not written: {} is not UTF-8 text",
                f.display()
            )),
            "{text}"
        );
    }
    assert_eq!(std::fs::read(&claude_md).unwrap(), b"# R\xe8gles\n");
    assert_eq!(std::fs::read(&agents_md).unwrap(), b"\xff");
    w.undo(&[]).await;
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_identity_file_is_refused_with_a_message() {
    let w = World::new().await;
    w.fill().await;
    let claude_md = w.home().join(".claude/CLAUDE.md");
    std::fs::set_permissions(&claude_md, std::fs::Permissions::from_mode(0o444)).unwrap();
    let before = std::fs::read(&claude_md).unwrap();
    let text = setup_refusing_blocks(
        &w,
        &["--runtime", "claude-code", "--no-service"],
        &["Claude Code"],
    )
    .await;
    assert!(
        text.contains(&format!(
            "Claude Code: identity block not written: {} is read-only (mode 0444)",
            claude_md.display()
        )),
        "{text}"
    );
    assert_eq!(std::fs::read(&claude_md).unwrap(), before);
    assert_eq!(mode(&claude_md), 0o444);
    // The other CLI's file is writable and gets its block.
    assert!(read(&w.home().join(".codex/AGENTS.md")).contains("@alice"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinked_files_stay_links_through_setup_and_undo() {
    let w = World::new().await;
    w.fill().await;
    let dots = w.home().join("dotfiles");
    std::fs::create_dir_all(&dots).unwrap();
    let links = [
        (w.home().join(".claude/CLAUDE.md"), "CLAUDE.md"),
        (w.home().join(".codex/AGENTS.md"), "AGENTS.md"),
        (w.config(), "agentchat.toml"),
        (w.home().join(".codex/config.toml"), "codex.toml"),
    ];
    for (path, name) in &links {
        std::fs::rename(path, dots.join(name)).unwrap();
        std::os::unix::fs::symlink(dots.join(name), path).unwrap();
    }
    let before = w.snapshot();
    w.setup(&["--runtime", "claude-code", "--no-service"]).await;
    for (path, name) in &links[..3] {
        assert!(
            std::fs::symlink_metadata(path)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{} is no longer a link",
            path.display()
        );
        assert_eq!(read(path), read(&dots.join(name)));
    }
    assert!(read(&dots.join("CLAUDE.md")).contains("@alice"));
    assert!(read(&dots.join("agentchat.toml")).contains("runtime = \"claude-code\""));
    w.undo(&[]).await;
    for (path, _) in &links {
        assert!(
            std::fs::symlink_metadata(path)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{} is no longer a link after undo",
            path.display()
        );
    }
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setup_killed_after_mcp_add_leaves_no_child_and_undo_removes_the_entry() {
    let w = World::new().await;
    // `claude mcp add` that has added the entry and then hangs: setup is killed in between.
    let bin = w.dir.path().join("bin");
    let pid_file = w.dir.path().join("add.pid");
    std::fs::remove_file(bin.join("claude")).unwrap();
    std::fs::write(
        bin.join("claude"),
        format!(
            "#!/bin/sh\nif [ \"$1 $2\" = \"mcp add\" ]; then\n  \"{real}\" \"$@\" || exit $?\n  \
             echo $$ > \"{pid}.tmp\" && mv \"{pid}.tmp\" \"{pid}\"\n  exec sleep 300\nfi\n\
             exec \"{real}\" \"$@\"\n",
            real = claude_bin().display(),
            pid = pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(bin.join("claude"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut setup = w
        .spawn_setup(w.key(), &["--runtime", "claude-code", "--no-service"])
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(150);
    while !pid_file.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "`claude mcp add` never ran"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let child: i32 = read(&pid_file).trim().parse().unwrap();
    assert!(read(&w.home().join(".claude.json")).contains("\"agentchat\""));
    setup.start_kill().unwrap();
    setup.wait().await.unwrap();
    // The CLI goes with setup (a zombie waiting for its new parent counts as gone).
    let gone = || {
        std::fs::read_to_string(format!("/proc/{child}/stat"))
            .map(|s| {
                s.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !gone() {
        assert!(
            std::time::Instant::now() < deadline,
            "`claude mcp add` (pid {child}) outlived the killed setup"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let undone = w.undo(&[]).await;
    assert!(
        undone.contains("Claude Code: MCP server `agentchat` removed"),
        "{undone}"
    );
    assert!(!read(&w.home().join(".claude.json")).contains("\"agentchat\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undo_removes_the_listeners_copy_of_the_key() {
    let w = World::new().await;
    w.setup(&["--runtime", "claude-code", "--no-service", "--no-wire"])
        .await;
    let state = w.home().join(".local/state/agentchat/default");
    // As the listener writes it before a Claude Code run.
    let copy =
        agentchat::runtime::claude::write_mcp_config(&state, "http://127.0.0.1:9/mcp", w.key())
            .unwrap();
    assert!(read(&copy).contains(w.key()));
    let undone = w.undo(&[]).await;
    assert!(undone.contains("key: removed"), "{undone}");
    assert!(
        !copy.exists(),
        "{} is still there:\n{undone}",
        copy.display()
    );
    assert!(!state.exists(), "the state dir is left:\n{undone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewire_over_the_users_own_entry_puts_it_back_on_undo() {
    let w = World::new().await;
    w.fill().await;
    w.cli(
        claude_bin(),
        &[
            "mcp",
            "add",
            "--scope",
            "user",
            "agentchat",
            "--env",
            "MINE=1",
            "--",
            "/opt/my-agentchat",
            "--serve",
        ],
    )
    .await;
    w.cli(
        codex_bin(),
        &[
            "mcp",
            "add",
            "agentchat",
            "--",
            "/opt/my-agentchat",
            "--serve",
        ],
    )
    .await;
    let entry = |text: String| {
        serde_json::from_str::<serde_json::Value>(&text).unwrap()["mcpServers"]["agentchat"].clone()
    };
    let claude_json = w.home().join(".claude.json");
    let mine = entry(read(&claude_json));
    assert_eq!(mine["command"], "/opt/my-agentchat");
    let before = w.snapshot();
    let text = w
        .setup(&["--runtime", "claude-code", "--no-service", "--rewire"])
        .await;
    assert!(
        text.contains("Claude Code: MCP server `agentchat` added"),
        "{text}"
    );
    assert_eq!(entry(read(&claude_json))["args"][0], "mcp");
    let undone = w.undo(&[]).await;
    assert!(
        undone.contains("Claude Code: your own MCP server `agentchat`"),
        "{undone}"
    );
    assert_eq!(entry(read(&claude_json)), mine, "{undone}");
    // Codex's file comes back byte for byte, the user's entry in it.
    let diff = differences(&before, &w.snapshot());
    let diff: Vec<_> = diff
        .into_iter()
        .filter(|d| !d.starts_with(&format!("changed: {}", claude_json.display())))
        .collect();
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rewire_advice_names_the_profile_and_only_while_it_exists() {
    let w = World::new().await;
    w.setup(&[
        "--profile",
        "work",
        "--runtime",
        "claude-code",
        "--no-service",
    ])
    .await;
    let bob = w.sim.peer.1.clone();
    let rewire = [
        "--profile",
        "b",
        "--runtime",
        "codex",
        "--no-service",
        "--rewire",
    ];
    w.setup_as(&bob, &rewire).await;
    let undo_b = w.undo(&["--profile", "b"]).await;
    assert!(
        undo_b
            .contains("`agentchat setup --profile work --rewire` wires it for that profile again"),
        "{undo_b}"
    );
    // Rewired over again, and `work` undone first: the advice is not given for it.
    w.setup(&["--profile", "work"]).await;
    w.setup_as(&bob, &rewire).await;
    w.undo(&["--profile", "work"]).await;
    let undo_b = w.undo(&["--profile", "b"]).await;
    assert!(!undo_b.contains("--profile work"), "{undo_b}");
    assert!(undo_b.contains("which is set up no more"), "{undo_b}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_config_comes_back_byte_for_byte_with_its_mode() {
    let w = World::new().await;
    w.fill().await;
    let codex_toml = w.home().join(".codex/config.toml");
    let mut text = read(&codex_toml);
    text.push_str("\n# tuned by hand\n[tui]   # the screen\nanimations = false # calm\n");
    std::fs::write(&codex_toml, &text).unwrap();
    std::fs::set_permissions(&codex_toml, std::fs::Permissions::from_mode(0o644)).unwrap();
    w.setup(&["--runtime", "codex", "--no-service"]).await;
    assert!(read(&codex_toml).contains("[mcp_servers.agentchat]"));
    let undone = w.undo(&[]).await;
    assert!(undone.contains("restored byte for byte"), "{undone}");
    assert_eq!(read(&codex_toml), text);
    assert_eq!(mode(&codex_toml), 0o644);
    // A fresh home: no config.toml is left behind.
    let fresh = World::new().await;
    fresh
        .setup(&["--runtime", "script", "--no-service", "--", "/bin/true"])
        .await;
    let codex_toml = fresh.home().join(".codex/config.toml");
    assert!(read(&codex_toml).contains("[mcp_servers.agentchat]"));
    fresh.undo(&[]).await;
    assert!(!codex_toml.exists(), "{}", read(&codex_toml));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn undoing_every_profile_leaves_no_empty_config_or_directories() {
    let w = World::new().await;
    let args = |p: &'static str| {
        vec![
            "--profile",
            p,
            "--no-wire",
            "--no-service",
            "--runtime",
            "script",
            "--",
            "/bin/true",
        ]
    };
    w.setup(&args("a")).await;
    let bob = w.sim.peer.1.clone();
    w.setup_as(&bob, &args("b")).await;
    w.undo(&["--profile", "a"]).await;
    w.undo(&["--profile", "b"]).await;
    assert!(!w.config().exists(), "config left: {:?}", read(&w.config()));
    for d in [".config/agentchat", ".local/state"] {
        assert!(!w.home().join(d).exists(), "{d} left behind");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crlf_config_stays_crlf_and_markers_in_a_fence_are_no_block() {
    let w = World::new().await;
    w.fill().await;
    let crlf = read(&w.config()).replace('\n', "\r\n");
    std::fs::write(w.config(), &crlf).unwrap();
    let claude_md = w.home().join(".claude/CLAUDE.md");
    let shown = "# Rules\n\nThe block looks like this:\n\n```markdown\n<!-- agentchat:start -->\n\
                 You are @someone.\n<!-- agentchat:end -->\n```\n";
    std::fs::write(&claude_md, shown).unwrap();
    let before = w.snapshot();
    let text = w.setup(&["--runtime", "claude-code", "--no-service"]).await;
    assert!(!text.contains("Claude Code: left alone"), "{text}");
    let config = read(&w.config());
    assert!(
        config.contains("runtime = \"claude-code\"\r\n"),
        "{config:?}"
    );
    assert_eq!(
        config.matches('\n').count(),
        config.matches("\r\n").count(),
        "{config:?}"
    );
    let md = read(&claude_md);
    assert!(md.starts_with(shown), "{md}");
    assert!(md[shown.len()..].contains("You are **@alice**"), "{md}");
    // Again with --rewire: the fence is still never written into.
    w.setup(&["--runtime", "claude-code", "--no-service", "--rewire"])
        .await;
    assert_eq!(read(&claude_md), md);
    w.undo(&[]).await;
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_manifest_stays_small_beside_a_large_claude_md_and_a_huge_one_is_refused() {
    let w = World::new().await;
    w.fill().await;
    let claude_md = w.home().join(".claude/CLAUDE.md");
    let agents_md = w.home().join(".codex/AGENTS.md");
    let large = "Be brief.\n".repeat(90_000);
    std::fs::write(&claude_md, &large).unwrap();
    let huge = "x".repeat(3 * 1024 * 1024);
    std::fs::write(&agents_md, &huge).unwrap();
    let before = w.snapshot();
    let text = setup_refusing_blocks(
        &w,
        &["--runtime", "claude-code", "--no-service"],
        &["Codex"],
    )
    .await;
    // Setup says what it waits for before each long wait.
    assert!(
        text.contains("Claude Code: running `claude mcp add` (at most 60 s)..."),
        "{text}"
    );
    assert!(
        text.contains("reading the identity text from the server (at most"),
        "{text}"
    );
    assert!(read(&claude_md).contains("@alice"));
    assert!(
        text.contains("Codex: identity block not written:") && text.contains("over the 1 MiB cap"),
        "{text}"
    );
    assert_eq!(read(&agents_md), huge);
    let size = std::fs::metadata(manifest_of(&w, "default")).unwrap().len();
    assert!(size < 32 * 1024, "setup.json is {size} bytes");
    w.undo(&[]).await;
    let diff = differences(&before, &w.snapshot());
    assert!(
        diff.is_empty(),
        "setup then undo changed:\n{}",
        diff.join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_codex_config_is_said_in_codexs_own_words_and_is_not_yet() {
    let w = World::new().await;
    w.fill().await;
    let codex_toml = w.home().join(".codex/config.toml");
    std::fs::write(&codex_toml, "# mine\n[tui\n").unwrap();
    let mut all = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
    all.extend_from_slice(&["--runtime", "claude-code", "--no-service"]);
    let out = w.agentchat(&all, Some(&format!("{}\n", w.key()))).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("Codex: MCP server not added: "))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("exited with code") && line.contains("config.toml:2:5: unclosed table"),
        "{line}"
    );
    assert!(!line.contains("<unknown>"), "{line}");
    assert!(
        text.contains("missing: Codex has no `agentchat` MCP entry"),
        "{text}"
    );
    assert_eq!(read(&codex_toml), "# mine\n[tui\n");
}

/// Issue 28, "the last line is the truth": a setup that ends `not yet` says nothing before its
/// verdict that claims it worked (it used to print "Done." just above `not yet`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_not_yet_setup_claims_no_success_before_its_verdict() {
    let w = World::new().await;
    w.fill().await;
    let mut all = vec!["setup", "--yes", "--api-base", w.sim.api_base()];
    // The pinned CLIs are never logged in here, so the runtime cannot answer: `not yet`.
    all.extend_from_slice(&["--runtime", "claude-code", "--no-service"]);
    let out = w.agentchat(&all, Some(&format!("{}\n", w.key()))).await;
    let text = show(&out);
    assert_eq!(out.status.code(), Some(3), "{text}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    let (last, before) = lines.split_last().unwrap_or_else(|| panic!("{text}"));
    assert!(last.starts_with("not yet: "), "{text}");
    // It did write things, so this is the run that used to say "Done.".
    assert!(
        text.contains("config: profile `default` written to"),
        "{text}"
    );
    for line in before {
        assert!(
            !matches!(line.trim(), "Done." | "Done" | "OK" | "Success")
                && !line.contains("answers on this machine")
                && !line.contains("is ready on this machine"),
            "a success claim before the `not yet` verdict: {line:?}\n{text}"
        );
    }
}

//! The command line as users meet it outside `--help`: the bash completion loaded into a real
//! `bash` and asked to complete, and the man pages rendered by the real `groff` (or `man -l`) with
//! every warning turned on. Both come from the one clap definition in `src/cli.rs`.

use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

fn agentchat(args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .output()
        .expect("run agentchat")
}

fn stdout_of(args: &[&str]) -> String {
    let out = agentchat(args);
    assert!(
        out.status.success(),
        "agentchat {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn every_commands_fatal_error_is_one_line_agentchat_command_colon() {
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("absent.toml");
    let missing = missing.to_str().unwrap();
    for (args, start) in [
        (
            vec!["listen", "--bogus"],
            "agentchat listen: unexpected argument '--bogus'",
        ),
        (
            vec!["listen", "--runtime", "gpt"],
            "agentchat listen: invalid value 'gpt'",
        ),
        (
            vec!["status", "--runtime", "claude"],
            "agentchat status: unexpected argument '--runtime'",
        ),
        (vec!["frob"], "agentchat: unrecognized subcommand 'frob'"),
        (
            vec!["listen", "--config", missing],
            "agentchat listen: cannot read the config file",
        ),
        (
            vec!["status", "--config", missing],
            "agentchat status: cannot read the config file",
        ),
        (
            vec!["sim", "--listen", "192.0.2.1:0"],
            "agentchat sim: the local server listens on loopback only",
        ),
    ] {
        let out = Command::new(BIN)
            .args(&args)
            .env_clear()
            .env("HOME", tmp.path())
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("AGENTCHAT_API_KEY", "ac_live_unused_0123456789")
            .env("AGENTCHAT_STATE_DIR", tmp.path().join("state"))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?}: {stderr}");
        assert!(stderr.starts_with(start), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("error: ") && !stderr.contains("agentchat: agentchat"),
            "{args:?}: {stderr}"
        );
        // Each cause once.
        assert!(
            stderr.matches("os error").count() <= 1,
            "{args:?}: {stderr}"
        );
    }
}

/// Runs `script` in a real, non-interactive `bash` with `agentchat`'s bash completion loaded
/// exactly as a user's rc file would load it; returns stdout (the script must succeed).
fn in_bash_with_completion(script: &str) -> String {
    in_bash_with_completion_env(script, &[])
}

/// [`in_bash_with_completion`] with extra environment variables; the binary's folder is first
/// on `PATH`, so the script's own calls of `agentchat` (the profiles) reach this build.
fn in_bash_with_completion_env(script: &str, env: &[(&str, &str)]) -> String {
    let full = format!("source <(\"$AGENTCHAT_BIN\" completions bash) || exit 9\n{script}");
    let dir = Path::new(BIN).parent().unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .args(["--norc", "--noprofile", "-c", &full])
        .env("AGENTCHAT_BIN", BIN)
        .env("PATH", path)
        .envs(env.iter().copied())
        .output()
        .expect("bash is needed for this test");
    assert!(
        out.status.success(),
        "bash: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What bash's completion function offers for the words typed so far (the last one being
/// completed), one candidate per line, the way bash itself calls it on TAB.
fn complete(words: &[&str]) -> Vec<String> {
    complete_env(words, &[])
}

fn complete_env(words: &[&str], env: &[(&str, &str)]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let cword = words.len() - 1;
    let cur = words[cword];
    let prev = if cword > 0 { words[cword - 1] } else { "" };
    let script = format!(
        "COMP_WORDS=({words}); COMP_CWORD={cword}; COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}\n\
         _agentchat agentchat '{cur}' '{prev}'\n\
         printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        words = quoted.join(" "),
        line = words.join(" "),
    );
    in_bash_with_completion_env(&script, env)
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_bash_completion_loads_in_a_real_bash_and_registers_for_agentchat() {
    let registered = in_bash_with_completion("complete -p agentchat");
    assert!(
        registered.contains("-F _agentchat") && registered.trim_end().ends_with(" agentchat"),
        "{registered}"
    );
}

#[test]
fn bash_completes_subcommands_their_actions_and_flags_but_not_hidden_ones() {
    assert_eq!(complete(&["agentchat", "se"]), ["service", "setup"]);
    assert_eq!(complete(&["agentchat", "li"]), ["listen"]);
    // `demo-agent` is the demo's internal helper and is hidden from users.
    assert_eq!(complete(&["agentchat", "dem"]), ["demo"]);
    let actions = complete(&["agentchat", "service", ""]);
    for action in ["install", "uninstall", "status", "print"] {
        assert!(actions.iter().any(|a| a == action), "{actions:?}");
    }
    let flags = complete(&["agentchat", "listen", "--"]);
    for flag in [
        "--once",
        "--profile",
        "--config",
        "--log-format",
        "--log-level",
        "--verbose",
    ] {
        assert!(flags.iter().any(|f| f == flag), "{flags:?}");
    }
    let shells = complete(&["agentchat", "completions", ""]);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        assert!(shells.iter().any(|s| s == shell), "{shells:?}");
    }
}

#[test]
fn every_shell_the_help_names_gets_a_script_that_knows_the_commands() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        for word in ["listen", "doctor", "service", "log-format"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
        assert!(
            !script.contains("demo-agent"),
            "{shell} offers the hidden demo-agent"
        );
    }
    let out = agentchat(&["completions", "tcsh"]);
    assert!(!out.status.success(), "an unknown shell was accepted");
}

/// Renders a man page for a terminal with every warning on: `groff -man -ww`, else man-db's
/// `man --warnings -l`. Returns (diagnostics, text); diagnostics empty means clean. `None` when
/// neither tool is installed.
fn render(page: &Path) -> Option<(String, String)> {
    let mut cmd = if have("groff") {
        let mut c = Command::new("groff");
        c.args(["-man", "-Tutf8", "-ww"]);
        c
    } else if have("man") {
        let mut c = Command::new("man");
        c.args(["--warnings=w", "-l"]).env("MANPAGER", "cat");
        c
    } else {
        return None;
    };
    let out = cmd.arg(page).output().unwrap();
    let mut diagnostics = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        diagnostics.push_str(&format!("exit status {}", out.status));
    }
    // A terminal rendering bolds by overstriking (`N\x08N`): keep only the characters shown.
    let mut text = String::new();
    for c in String::from_utf8_lossy(&out.stdout).chars() {
        if c == '\x08' {
            text.pop();
        } else {
            text.push(c);
        }
    }
    Some((diagnostics, text))
}

#[test]
fn the_man_pages_render_without_warnings_and_name_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let top = dir.path().join("stdout.1");
    std::fs::write(&top, stdout_of(&["man"])).unwrap();
    let pages = dir.path().join("pages");
    let listing = stdout_of(&["man", "--dir", pages.to_str().unwrap()]);
    let mut names: Vec<String> = std::fs::read_dir(&pages)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in [
        "agentchat.1",
        "agentchat-listen.1",
        "agentchat-status.1",
        "agentchat-doctor.1",
        "agentchat-service.1",
        "agentchat-service-install.1",
        "agentchat-sim.1",
        "agentchat-demo.1",
    ] {
        assert!(names.iter().any(|n| n == name), "no {name} in {names:?}");
        assert!(listing.contains(name), "`man --dir` did not report {name}");
    }
    assert!(!names.iter().any(|n| n.contains("demo-agent")), "{names:?}");
    assert_eq!(
        std::fs::read_to_string(&top).unwrap(),
        std::fs::read_to_string(pages.join("agentchat.1")).unwrap(),
        "`agentchat man` and `man --dir` disagree on agentchat.1"
    );

    if render(&top).is_none() {
        eprintln!(
            "skipping the rendering check: neither groff nor man is installed \
             (Debian: apt-get install groff-base)"
        );
        return;
    }
    for name in &names {
        let (diagnostics, text) = render(&pages.join(name)).unwrap();
        assert!(diagnostics.is_empty(), "{name}: {diagnostics}");
        assert!(text.contains("NAME"), "{name} rendered to:\n{text}");
    }
    let (_, listen) = render(&pages.join("agentchat-listen.1")).unwrap();
    for needed in [
        "--once",
        "--log-level",
        "AGENTCHAT_API_KEY",
        "75",
        "78",
        "SIGHUP",
    ] {
        assert!(
            listen.contains(needed),
            "agentchat-listen(1) lacks {needed}"
        );
    }
}

#[test]
fn help_lists_each_commands_environment_variables_and_exit_codes() {
    let listen = stdout_of(&["listen", "--help"]);
    for needed in [
        "AGENTCHAT_CONFIG",
        "AGENTCHAT_PROFILE",
        "AGENTCHAT_STATE_DIR",
        "AGENTCHAT_RUNTIME",
        "AGENTCHAT_API_BASE",
        "AGENTCHAT_API_KEY",
        "AGENTCHAT_LOG",
        "AGENTCHAT_LOG_FORMAT",
        "Exit codes:",
        "78",
    ] {
        assert!(listen.contains(needed), "listen --help lacks {needed}");
    }
    let status = stdout_of(&["status", "--help"]);
    assert!(status.contains("Exit codes:") && status.contains("  3  none is running"));
    for cmd in ["doctor", "service", "sim", "demo"] {
        let help = stdout_of(&[cmd, "--help"]);
        assert!(
            help.contains("Exit codes:"),
            "{cmd} --help lists no exit codes"
        );
    }
}

/// Issue 34: `sim --help` says where the sign-up codes it "emails" go, and `setup --help` how a
/// script signs up in two steps.
#[test]
fn sim_help_says_where_sign_up_codes_go_and_setup_help_the_two_scripted_steps() {
    let sim = stdout_of(&["sim", "--help"]);
    assert!(sim.contains("/_sim/outbox"), "{sim}");
    let setup = stdout_of(&["setup", "--help"]);
    assert!(setup.contains("--code CODE"), "{setup}");
}

/// Every variable config reads (`agentchat::config::VARIABLES`) and the flag that stands for it,
/// if any. A variable added there without a row here fails the test below.
const FLAG_OF: &[(&str, Option<&str>)] = &[
    ("AGENTCHAT_API_BASE", Some("--api-base")),
    ("AGENTCHAT_API_KEY", None),
    ("AGENTCHAT_CONFIG", Some("--config")),
    ("AGENTCHAT_PROFILE", Some("--profile")),
    ("AGENTCHAT_STATE_DIR", Some("--state-dir")),
    ("AGENTCHAT_RUNTIME", Some("--runtime")),
    ("AGENTCHAT_LOG", Some("--log-level")),
    ("AGENTCHAT_LOG_FORMAT", Some("--log-format")),
    ("AGENTCHAT_METRICS_ADDR", Some("--metrics-addr")),
    ("AGENTCHAT_INTEGRATION", None),
    ("AGENTCHAT_DOORBELL", None),
    ("AGENTCHAT_TEST_TIME_SCALE", None),
    ("AGENTCHAT_ALLOW_CLEARTEXT", None),
    ("AGENTCHAT_LOG_STREAM", None),
];

/// The help line of `flag` in `help` (clap writes one line per option).
fn option_line<'a>(help: &'a str, flag: &str) -> Option<&'a str> {
    help.lines().find(|l| {
        let l = l.trim_start();
        l.starts_with(&format!("{flag} ")) || l.contains(&format!(", {flag} "))
    })
}

#[test]
fn every_flag_that_has_a_variable_names_it_in_help() {
    let mut listed: Vec<&str> = FLAG_OF.iter().map(|(v, _)| *v).collect();
    let mut variables = agentchat::config::VARIABLES.to_vec();
    listed.sort();
    variables.sort();
    assert_eq!(listed, variables, "FLAG_OF and config's VARIABLES differ");

    let mut checked = 0;
    for cmd in [
        &["listen"][..],
        &["status"],
        &["doctor"],
        &["service", "install"],
        &["service", "status"],
    ] {
        let help = stdout_of(&[cmd, &["--help"]].concat());
        for (variable, flag) in FLAG_OF {
            let Some(flag) = flag else { continue };
            if let Some(line) = option_line(&help, flag) {
                assert!(
                    line.contains(&format!("[env: {variable}]")),
                    "{cmd:?} --help: {flag} does not name {variable}: {line}"
                );
                checked += 1;
            }
        }
    }
    // listen takes every flag of the table; status three, doctor five, service two each.
    assert_eq!(checked, 8 + 3 + 5 + 2 + 2);
    let listen = stdout_of(&["listen", "--help"]);
    for (_, flag) in FLAG_OF {
        if let Some(flag) = flag {
            assert!(option_line(&listen, flag).is_some(), "listen lacks {flag}");
        }
    }
}

#[test]
fn the_top_level_help_and_listens_list_the_exit_codes() {
    let top = stdout_of(&["--help"]);
    let listen = stdout_of(&["listen", "--help"]);
    for help in [&top, &listen] {
        assert!(help.contains("Exit codes"), "{help}");
        for code in ["0", "1", "75", "78"] {
            assert!(
                help.lines()
                    .any(|l| l.trim_start().starts_with(&format!("{code} "))),
                "no exit code {code}:\n{help}"
            );
        }
    }
    for code in ["2", "3"] {
        assert!(
            top.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code} "))),
            "no exit code {code}:\n{top}"
        );
    }
}

#[test]
fn bash_completes_the_configs_profiles_and_the_log_levels_not_file_names() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("agentchat.toml");
    std::fs::write(&config, "[profiles.work]\n[profiles.ops]\n").unwrap();
    let config = config.to_str().unwrap();
    // A `--config` typed before `--profile` is the file read.
    let mut got = complete(&["agentchat", "listen", "--config", config, "--profile", ""]);
    got.sort();
    assert_eq!(got, ["default", "ops", "work"]);
    assert_eq!(
        complete(&["agentchat", "status", "--config", config, "--profile", "w"]),
        ["work"]
    );
    // Else AGENTCHAT_CONFIG, as every command reads it.
    let mut got = complete_env(
        &["agentchat", "doctor", "--profile", ""],
        &[("AGENTCHAT_CONFIG", config)],
    );
    got.sort();
    assert_eq!(got, ["default", "ops", "work"]);
    let got = complete(&["agentchat", "listen", "--log-level", ""]);
    assert_eq!(got, ["error", "warn", "info", "debug", "trace"]);
    assert_eq!(
        complete(&["agentchat", "listen", "--log-level", "de"]),
        ["debug"]
    );
}

#[test]
fn the_zsh_and_fish_scripts_ask_the_binary_for_profiles_and_offer_the_levels() {
    let zsh = stdout_of(&["completions", "zsh"]);
    let fish = stdout_of(&["completions", "fish"]);
    for script in [&zsh, &fish] {
        assert!(script.contains("complete-profiles"), "{script}");
        assert!(!script.contains("AGENTCHAT__PROFILES"), "{script}");
        assert!(!script.contains("complete-profiles\t"), "{script}");
    }
    assert!(
        zsh.contains(":LEVEL:(error warn info debug trace)"),
        "{zsh}"
    );
    assert!(
        fish.lines()
            .any(|l| l.contains("-l log-level") && l.contains("error")),
        "{fish}"
    );
    for shell in ["elvish", "powershell"] {
        let script = stdout_of(&["completions", shell]);
        assert!(!script.contains("AGENTCHAT__PROFILES"), "{shell}");
    }
    // The helper itself: the profiles of the file named, default first.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, "[profiles.b]\n[profiles.a]\n").unwrap();
    let listed = stdout_of(&["complete-profiles", "--config", config.to_str().unwrap()]);
    assert_eq!(listed, "default\na\nb\n");
}

/// Runs `agentchat args` with stdout a pipe whose reader is already gone.
fn into_a_closed_pipe(args: &[&str], home: &Path) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    Command::new(BIN)
        .args(args)
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env_remove("AGENTCHAT_CONFIG")
        .env_remove("AGENTCHAT_STATE_DIR")
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap()
}

#[test]
fn a_command_whose_reader_goes_away_ends_quietly_like_cat() {
    use std::os::unix::process::ExitStatusExt;
    let home = tempfile::tempdir().unwrap();
    for args in [
        &["man"][..],
        &["completions", "bash"],
        &["status"],
        &["status", "--json"],
        &["service", "print"],
        &["--help"],
        &["doctor", "--help"],
    ] {
        let out = into_a_closed_pipe(args, home.path());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.is_empty(), "{args:?} said: {stderr}");
        assert!(
            out.status.signal() == Some(libc::SIGPIPE) || out.status.success(),
            "{args:?}: {}",
            out.status
        );
    }
}

#[test]
fn doctor_shows_and_takes_only_the_flags_it_uses() {
    let doctor = stdout_of(&["doctor", "--help"]);
    assert!(option_line(&doctor, "--metrics-addr").is_none(), "{doctor}");
    assert!(!doctor.contains("listen only"), "{doctor}");
    for flag in [
        "--config",
        "--profile",
        "--state-dir",
        "--runtime",
        "--api-base",
        "--json",
    ] {
        assert!(option_line(&doctor, flag).is_some(), "doctor lacks {flag}");
    }
    let listen = stdout_of(&["listen", "--help"]);
    assert!(option_line(&listen, "--metrics-addr").is_some(), "{listen}");
    let out = agentchat(&["doctor", "--metrics-addr", "127.0.0.1:9464"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("only `agentchat listen` serves metrics"),
        "{stderr}"
    );
    let man = stdout_of(&["completions", "bash"]);
    let doctor_block = man.split("agentchat__subcmd__doctor)").nth(1).unwrap();
    let doctor_opts = doctor_block.lines().find(|l| l.contains("opts=")).unwrap();
    assert!(!doctor_opts.contains("--metrics-addr"), "{doctor_opts}");
}

#[test]
fn sim_refuses_a_time_scale_that_is_zero_negative_or_not_finite() {
    for bad in [
        "0", "-1", "nan", "NaN", "inf", "-inf", "1e-9", "2e6", "fast",
    ] {
        let out = agentchat(&["sim", &format!("--time-scale={bad}")]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{bad}: {stderr}");
        assert!(
            stderr.starts_with("agentchat sim: invalid value") && stderr.contains("time scale")
                || stderr.contains("is not a number"),
            "{bad}: {stderr}"
        );
    }
}

#[test]
fn a_duplicate_or_misspelt_config_key_is_named_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let run = |text: &str| {
        let config = dir.path().join("config.toml");
        std::fs::write(&config, text).unwrap();
        let out = Command::new(BIN)
            .args(["status", "--config", config.to_str().unwrap()])
            .env("XDG_STATE_HOME", dir.path().join("state"))
            .env_remove("AGENTCHAT_STATE_DIR")
            .env_remove("AGENTCHAT_PROFILE")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        String::from_utf8(out.stderr).unwrap()
    };
    let e = run(
        "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n\n\n\nruntime = \"codex\"\n",
    );
    assert!(
        e.contains("line 7, column 1: duplicate key `listen.runtime`"),
        "{e}"
    );
    let e = run("api_key_flie = \"/k\"\n");
    assert!(
        e.contains("unknown config key `api_key_flie`; did you mean `api_key_file`?"),
        "{e}"
    );
}

//! What a user installs: `scripts/package` builds the release archive and the npm packages for
//! this platform; each is installed into a fresh prefix (the archive unpacked; `npm install -g`
//! with an empty prefix, offline, so nothing can be downloaded) and runs `agentchat --version`
//! and `agentchat demo`.
//!
//! The binary packaged is `AGENTCHAT_TEST_RELEASE_BIN` when set (scripts/test builds the release
//! binary for the live systemd suite and exports it), else this test build's own binary: the
//! layout and the installs are the same, only the binary's size and speed differ.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn packaged_binary() -> PathBuf {
    match std::env::var_os("AGENTCHAT_TEST_RELEASE_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            eprintln!(
                "packaging: AGENTCHAT_TEST_RELEASE_BIN is not set; packaging the test build's binary"
            );
            PathBuf::from(env!("CARGO_BIN_EXE_agentchat"))
        }
    }
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {tool} >/dev/null")])
        .status()
        .is_ok_and(|s| s.success())
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Runs `program args` with a home of its own and nothing of the caller's AgentChat setup.
fn run_isolated(program: &Path, args: &[&str], home: &Path) -> Output {
    let mut cmd = crate::common::isolated_command(program, &[]);
    cmd.args(args)
        .env("HOME", home)
        .env("XDG_STATE_HOME", home.join("state"))
        .env("XDG_CONFIG_HOME", home.join("config"))
        .output()
        .unwrap()
}

/// `--version` says the crate's version, and the demo runs the whole loop (exit 0).
fn assert_it_works(agentchat: &Path, home: &Path) {
    let out = run_isolated(agentchat, &["--version"], home);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("agentchat {}", env!("CARGO_PKG_VERSION"))
    );
    let out = run_isolated(agentchat, &["demo"], home);
    assert_eq!(out.status.code(), Some(0), "demo: {}", text(&out));
    // An exit code other than 0 comes through as it is: no listener ever ran in this home.
    let out = run_isolated(agentchat, &["status"], home);
    assert_eq!(out.status.code(), Some(3), "status: {}", text(&out));
}

struct Packaged {
    _dir: tempfile::TempDir,
    out: PathBuf,
    archive: PathBuf,
    npm_main: PathBuf,
    npm_platform: PathBuf,
}

fn package() -> Packaged {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("dist");
    let run = Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/package"))
        .arg("--bin")
        .arg(packaged_binary())
        .arg("--out")
        .arg(&out)
        .env("npm_config_cache", dir.path().join("npm-cache"))
        .output()
        .unwrap();
    assert!(run.status.success(), "scripts/package: {}", text(&run));
    let said = String::from_utf8_lossy(&run.stdout).into_owned();
    let mut lines = said.lines().map(PathBuf::from);
    let (archive, npm_main, npm_platform) = (
        lines.next().unwrap(),
        lines.next().unwrap(),
        lines.next().unwrap(),
    );
    for p in [&archive, &npm_main, &npm_platform] {
        assert!(
            p.is_file(),
            "scripts/package named {} but did not write it",
            p.display()
        );
    }
    Packaged {
        _dir: dir,
        out,
        archive,
        npm_main,
        npm_platform,
    }
}

#[test]
fn the_release_archive_is_laid_out_like_ripgreps_checks_out_and_runs_unpacked() {
    let p = package();
    let name = p
        .archive
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .strip_suffix(".tar.gz")
        .unwrap()
        .to_string();
    assert!(
        name.starts_with(&format!("agentchat-{}-", env!("CARGO_PKG_VERSION"))),
        "{name}"
    );
    // The checksum file checks out with the standard tool.
    let check = Command::new("sha256sum")
        .args(["-c", &format!("{name}.tar.gz.sha256")])
        .current_dir(&p.out)
        .output()
        .unwrap();
    assert!(check.status.success(), "{}", text(&check));

    let prefix = tempfile::tempdir().unwrap();
    let untar = Command::new("tar")
        .arg("-xzf")
        .arg(&p.archive)
        .arg("-C")
        .arg(prefix.path())
        .output()
        .unwrap();
    assert!(untar.status.success(), "{}", text(&untar));
    let top = prefix.path().join(&name);
    for file in [
        "agentchat",
        "README.md",
        "LICENSE-MIT",
        "LICENSE-APACHE",
        "complete/agentchat.bash",
        "complete/_agentchat",
        "complete/agentchat.fish",
        "complete/agentchat.elv",
        "complete/_agentchat.ps1",
        "doc/agentchat.1",
        "doc/agentchat-listen.1",
        "doc/agentchat-status.1",
    ] {
        assert!(top.join(file).is_file(), "{file} missing from {name}");
    }
    let units: Vec<_> = std::fs::read_dir(top.join("units/systemd"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(!units.is_empty(), "no systemd unit in the archive");
    assert!(top.join("units/launchd").is_dir());
    // The completions are the binary's own.
    let home = tempfile::tempdir().unwrap();
    let bash = run_isolated(
        &top.join("agentchat"),
        &["completions", "bash"],
        home.path(),
    );
    assert_eq!(
        bash.stdout,
        std::fs::read(top.join("complete/agentchat.bash")).unwrap()
    );
    assert_it_works(&top.join("agentchat"), home.path());
}

#[test]
fn the_npm_package_installs_offline_into_an_empty_prefix_and_runs_the_native_binary() {
    assert!(
        have("npm"),
        "npm is needed (scripts/test needs it for the pinned CLIs too)"
    );
    let p = package();
    let prefix = tempfile::tempdir().unwrap();
    let npm = |args: &[&std::ffi::OsStr]| {
        Command::new("npm")
            .args([
                "install",
                "-g",
                "--offline",
                "--no-audit",
                "--no-fund",
                "--prefix",
            ])
            .arg(prefix.path())
            .args(args)
            .env("npm_config_cache", prefix.path().join(".npm-cache"))
            .output()
            .unwrap()
    };
    // Installed alone, the launcher has no binary and says what to do.
    let alone = npm(&[p.npm_main.as_os_str()]);
    assert!(alone.status.success(), "npm install: {}", text(&alone));
    let home = tempfile::tempdir().unwrap();
    let bin = prefix.path().join("bin/agentchat");
    let out = run_isolated(&bin, &["--version"], home.path());
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.starts_with("agentchat: the agentchat binary for ") && said.contains("npm install -g"),
        "{said}"
    );

    // With this platform's package, offline: nothing is fetched, and the command runs.
    let both = npm(&[p.npm_platform.as_os_str(), p.npm_main.as_os_str()]);
    assert!(both.status.success(), "npm install: {}", text(&both));
    let link = std::fs::read_link(&bin).unwrap();
    assert!(
        link.to_string_lossy().ends_with("bin/agentchat.js"),
        "{}",
        link.display()
    );
    assert_it_works(&bin, home.path());
}

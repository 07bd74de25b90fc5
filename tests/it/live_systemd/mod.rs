//! The service under a live systemd: each scenario boots a contained system manager and root's
//! user manager with `tests/live-systemd/harness.sh up`, installs the release binary's unit with
//! `agentchat service install` inside it (`systemctl --user`), drives it against the sim on
//! 127.0.0.1 (the sandbox shares the host's network namespace) and tears it all down on drop.
//!
//! Where the harness cannot run (not root, no `unshare`, no systemd), each test says it was skipped
//! and why; with `CI` set a skip fails the test instead (`.ci/run` must not pass without them).
//! The binary: `AGENTCHAT_TEST_RELEASE_BIN` (scripts/test builds `cargo build --release` and sets
//! it); unset, the test binary's own `agentchat` (a debug build), said once per test.
//!
//! Inside the sandbox `/` is an overlay (as in a Docker container): the listener's state dir lives
//! there (`XDG_STATE_HOME=/var/lib/agentchat-live`), read back with `cat` inside. The scratch dir
//! (config, key, the recording run script and what it records) is bound from the host at the same
//! path, so the test reads the records directly.

mod scenarios;

use crate::common::eventually;
use crate::listen_support::{Agent, Sim};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

/// One sandbox at a time: each scenario measures restarts and timeouts, which two managers and
/// listeners competing for this machine's two cores would blur.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The state base inside the sandbox (on its overlayfs root).
pub const STATE_HOME: &str = "/var/lib/agentchat-live";

const HARNESS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/live-systemd/harness.sh");

/// The release binary the scenarios install, or the test build's own when none is given.
fn release_binary() -> PathBuf {
    match std::env::var_os("AGENTCHAT_TEST_RELEASE_BIN").filter(|v| !v.is_empty()) {
        Some(p) => PathBuf::from(p),
        None => {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI: AGENTCHAT_TEST_RELEASE_BIN must name the release binary (scripts/test sets it)"
            );
            eprintln!(
                "live_systemd: AGENTCHAT_TEST_RELEASE_BIN is not set; using the test build's \
                 binary (scripts/test builds and sets the release one)"
            );
            PathBuf::from(env!("CARGO_BIN_EXE_agentchat"))
        }
    }
}

/// Why the harness cannot run here, or `None` when it can.
fn why_not() -> Option<String> {
    match Command::new(HARNESS).arg("check").output() {
        Ok(out) if out.status.success() => None,
        Ok(out) => Some(String::from_utf8_lossy(&out.stdout).trim().to_string()),
        Err(e) => Some(format!("cannot run {HARNESS}: {e}")),
    }
}

/// A booted sandbox with the scene: the sim, `alice` who writes, `bob` whose listener the unit
/// runs, and a scratch dir bound into the sandbox.
pub struct Live {
    /// `harness.sh up`; closing its stdin (on drop) tears the sandbox down.
    harness: Option<Child>,
    /// The harness's state dir and cgroup on the host: both gone after teardown.
    leftovers: Vec<PathBuf>,
    pub pid1: u32,
    pub dir: tempfile::TempDir,
    /// `<dir>/bin`, first on the PATH of every command run inside: holds `agentchat`, a symlink
    /// to the release binary (so the unit must keep this path, not the symlink's target).
    pub bin_dir: PathBuf,
    pub config: PathBuf,
    pub rec: PathBuf,
    pub sim: Sim,
    pub alice: Agent,
    pub bob: Agent,
    _one: tokio::sync::MutexGuard<'static, ()>,
}

impl Live {
    /// Boots a sandbox for `test`, or says why it cannot (`None`: skipped; a panic under CI).
    pub async fn boot(test: &str) -> Option<Live> {
        if let Some(why) = why_not() {
            assert!(
                std::env::var_os("CI").is_none(),
                "live_systemd::{test}: the live systemd suite cannot run on CI: {why}"
            );
            eprintln!(
                "live_systemd::{test}: SKIPPED: the live systemd harness cannot run here: {why}"
            );
            return None;
        }
        let one = ONE_AT_A_TIME.lock().await;
        let release = release_binary();
        let dir = tempfile::tempdir().unwrap();
        let bin_dir = dir.path().join("bin");
        std::fs::create_dir_all(&bin_dir).unwrap();
        std::os::unix::fs::symlink(&release, bin_dir.join("agentchat")).unwrap();
        let rec = dir.path().join("rec");
        std::fs::create_dir_all(&rec).unwrap();
        std::fs::write(dir.path().join("run.sh"), run_script(&rec)).unwrap();

        let sim = Sim::start(1.0).await;
        let (alice, bob) = (sim.agent("alice").await, sim.agent("bob").await);
        let key = dir.path().join("bob.key");
        write_key(&key, &bob.key);
        let config = dir.path().join("config.toml");

        let release_dir = release.parent().unwrap().to_path_buf();
        let mut child = Command::new(HARNESS)
            .arg("up")
            .arg("--bind")
            .arg(dir.path())
            .arg("--bind")
            .arg(&release_dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let ready: Vec<&str> = line.split_whitespace().collect();
        let (pid1, leftovers) = match ready.as_slice() {
            ["ready", pid, state, cgroup] => (
                pid.parse().unwrap(),
                vec![PathBuf::from(state), PathBuf::from(cgroup)],
            ),
            _ => {
                let _ = child.wait();
                panic!("live_systemd::{test}: the sandbox did not boot (harness said {line:?})");
            }
        };
        let live = Live {
            harness: Some(child),
            leftovers,
            pid1,
            bin_dir,
            config,
            rec,
            sim,
            alice,
            bob,
            dir,
            _one: one,
        };
        live.write_config("A", "");
        Some(live)
    }

    /// Writes the config: bob's key file, the sim, the recording run with `marker` as its
    /// argument (so a reload's new command is told from the old one) and its records' folder in
    /// the kernel's line (`sandbox_write`), then `extra` TOML.
    pub fn write_config(&self, marker: &str, extra: &str) {
        let d = self.dir.path().display();
        std::fs::write(
            &self.config,
            format!(
                "api_base = \"{base}\"\napi_key_file = \"{d}/bob.key\"\n{extra}\n[listen]\n\
                 runtime = \"script\"\ncommand = [\"/bin/sh\", \"{d}/run.sh\", \"{marker}\"]\n\
                 sandbox_write = [\"{rec}\"]\n\
                 quiet_window = \"200ms\"\nmax_delay = \"1s\"\nkill_grace = \"3s\"\n",
                base = self.sim.api_base,
                rec = self.rec.display(),
            ),
        )
        .unwrap();
    }

    /// Runs `script` with bash inside the sandbox as root, with a clean environment: PATH with
    /// `bin_dir` first, HOME=/root, the user manager's bus, the state base on the overlay.
    pub fn sh(&self, script: &str) -> Output {
        let path = format!(
            "PATH={}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
            self.bin_dir.display()
        );
        Command::new("nsenter")
            .args(["-t", &self.pid1.to_string(), "-a", "-r", "-w"])
            .args([
                "env",
                "-i",
                &path,
                "HOME=/root",
                "USER=root",
                "LOGNAME=root",
            ])
            .args(["XDG_RUNTIME_DIR=/run/user/0"])
            .args(["DBUS_SESSION_BUS_ADDRESS=unix:path=/run/user/0/bus"])
            .arg(format!("XDG_STATE_HOME={STATE_HOME}"))
            .args(["SYSTEMD_PAGER=cat", "LANG=C.UTF-8", "timeout", "120"])
            .args(["bash", "-c", script])
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    /// `sh`, which must succeed; its stdout.
    pub fn ok(&self, script: &str) -> String {
        let out = self.sh(script);
        assert!(
            out.status.success(),
            "`{script}` failed ({}):\n{}{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// One property of a user unit (`systemctl --user show -p NAME --value`).
    pub fn prop(&self, unit: &str, name: &str) -> String {
        self.ok(&format!("systemctl --user show -p {name} --value {unit}"))
            .trim()
            .to_string()
    }

    /// Waits up to `secs` for `cond` on the unit's properties, returning whether it came.
    pub async fn until(&self, secs: u64, mut cond: impl FnMut(&Live) -> bool) -> bool {
        eventually(secs as f64, || cond(self)).await
    }

    /// What run `n` recorded as `name` (`name.n`); `n` 0 means the file `name` itself.
    pub fn record(&self, name: &str, n: usize) -> String {
        let file = if n == 0 {
            name.to_string()
        } else {
            format!("{name}.{n}")
        };
        std::fs::read_to_string(self.rec.join(file)).unwrap_or_default()
    }

    /// Makes the next runs do `what` (a file the run script reads: `sleep`, `trap`, `escape`).
    pub fn set(&self, what: &str, value: &str) {
        std::fs::write(self.rec.join(what), value).unwrap();
    }

    pub fn unset(&self, what: &str) {
        let _ = std::fs::remove_file(self.rec.join(what));
    }

    /// The journal entries (as JSON) of a process, from the system journal (root's user units
    /// log there, `journalctl --user` shows nothing for UID 0).
    pub fn journal_of_pid(&self, pid: &str) -> Vec<serde_json::Value> {
        self.ok(&format!("journalctl --no-pager -o json _PID={pid}"))
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The journal entries of a user unit.
    pub fn journal_of_unit(&self, unit: &str) -> Vec<serde_json::Value> {
        self.ok(&format!("journalctl --no-pager -o json --user-unit={unit}"))
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// The listener's `status.json` for `profile`, read inside.
    pub fn status_json(&self, profile: &str) -> serde_json::Value {
        let out = self.sh(&format!("cat {STATE_HOME}/agentchat/{profile}/status.json"));
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null)
    }

    /// Sends alice's message to bob.
    pub async fn message(&self, text: &str) {
        self.sim.send(&self.alice, &self.bob, text).await;
    }

    /// Waits for run `n` to have started (and recorded what it records at its start).
    pub async fn run_started(&self, n: usize, secs: u64) -> bool {
        self.until(secs, |l| l.rec.join(format!("started.{n}")).exists())
            .await
    }
}

impl Drop for Live {
    /// Closes the harness's stdin: it powers the manager off (every unit stopped), removes its
    /// cgroup and state dir, and says `down`.
    fn drop(&mut self) {
        if let Some(mut child) = self.harness.take() {
            drop(child.stdin.take());
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                match child.try_wait() {
                    Ok(Some(_)) => break,
                    Ok(None) if std::time::Instant::now() < deadline => {
                        std::thread::sleep(Duration::from_millis(50))
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        break;
                    }
                }
            }
        }
        // Nothing left on the host: the harness removed its cgroup and state dir (and with the
        // cgroup gone, no process can be left in it). Not asserted while a test already fails.
        if !std::thread::panicking() {
            for path in &self.leftovers {
                assert!(!path.exists(), "the harness left {} behind", path.display());
            }
        }
    }
}

/// A key file as the listener accepts it: 0600.
pub fn write_key(path: &Path, key: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, key).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The recording run. Each run `n` records its pid (its process group: the listener makes every
/// run a group leader), its cgroup and its argument, and whether the previous run's group was
/// still alive when it started. Files in the dir make a run slow (`sleep`), answer SIGTERM with a
/// second's tidy-up (`trap`), or leave a child that escaped the group with `setsid` (`escape`).
fn run_script(rec: &Path) -> String {
    format!(
        r#"#!/bin/sh
d='{d}'
n=$(( $(cat "$d/count" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$d/count.tmp" && mv "$d/count.tmp" "$d/count"
echo "$$" > "$d/pid.$n"
cat /proc/self/cgroup > "$d/cgroup.$n"
echo "$1" > "$d/arg.$n"
cat > /dev/null
# Whether a process of the previous run's group is left, read from /proc: the kernel's line
# keeps a run from signalling (so from `kill -0`) any process outside it.
if p=$(cat "$d/pid.$((n - 1))" 2>/dev/null); then
  left=gone
  for s in /proc/[0-9]*/stat; do
    fields=$(cat "$s" 2>/dev/null) || continue
    set -- ${{fields##*) }}
    [ "$3" = "$p" ] && left=alive
  done
  echo "$left" > "$d/previous.$n"
fi
: > "$d/started.$n"
if [ -f "$d/escape" ]; then
  setsid sleep 300 < /dev/null > /dev/null 2>&1 &
  echo "$!" > "$d/escapee.$n"
fi
if [ -f "$d/trap" ]; then
  trap 'echo term > "$d/term.$n"; sleep 1; echo tidy > "$d/tidy.$n"; exit 0' TERM
fi
if [ -f "$d/sleep" ]; then
  sleep "$(cat "$d/sleep")" &
  wait $!
fi
echo done > "$d/done.$n"
"#,
        d = rec.display()
    )
}

//! The listener in a container: TLS roots read only when a URL needs them (a host without a CA
//! bundle runs a plain `http://` listener, and an `https://` one is refused at start saying what
//! is missing), and the image of `Containerfile`, built from scratch and run with podman against
//! the sim on loopback (`--network host`).

use crate::listen_support::{Listener, Opts, Setup, Sim, accepted, eventually, eventually_async};

/// `SSL_CERT_FILE` and `SSL_CERT_DIR` at an empty file and an empty dir: rustls-native-certs
/// then reads those alone instead of the OS store, so the listener sees no CA certificate at
/// all, as in an image without a bundle.
fn without_ca_certificates(dir: &std::path::Path) -> Vec<(String, String)> {
    let file = dir.join("empty.pem");
    let certs = dir.join("no-certs");
    std::fs::write(&file, "").unwrap();
    std::fs::create_dir_all(&certs).unwrap();
    vec![
        ("SSL_CERT_FILE".into(), file.display().to_string()),
        ("SSL_CERT_DIR".into(), certs.display().to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_certificates_a_plain_http_listener_starts_connects_and_runs() {
    let sim = Sim::start(1.0).await;
    let (alice, bob) = (sim.agent("alice").await, sim.agent("bob").await);
    let scratch = tempfile::tempdir().unwrap();
    let opts = Opts {
        extra_env: without_ca_certificates(scratch.path()),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually_async(20.0, || async { accepted(&sim.connects(&bob).await) >= 1 }).await,
        "the listener never connected without a CA bundle:\n{}",
        l.log()
    );
    sim.send(&alice, &bob, "hello").await;
    assert!(
        eventually(20.0, || setup.rec.done(1)).await,
        "no run after a message:\n{}",
        l.log()
    );
    assert!(!l.log().contains("builder error"), "{}", l.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_certificates_an_https_listener_is_refused_at_start_saying_what_is_missing() {
    let scratch = tempfile::tempdir().unwrap();
    let key = "ac_never_shown_0123456789";
    let opts = Opts {
        extra_env: without_ca_certificates(scratch.path()),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    // Nothing listens there: the refusal must come before any connect.
    let cmd =
        crate::listen_support::listener_command_for("https://127.0.0.1:9", key, &setup, &opts);
    let mut l = Listener::spawn(cmd, &setup, "");
    let code = l.wait_exit(20.0);
    let log = l.log();
    assert_eq!(code, Some(78), "a config-level exit (EX_CONFIG):\n{log}");
    let empty = scratch.path().join("empty.pem");
    for needle in [
        "no CA certificates found".to_string(),
        format!("SSL_CERT_FILE={}", empty.display()),
        "mount a CA bundle at /etc/ssl/certs/ca-certificates.crt".to_string(),
    ] {
        assert!(log.contains(&needle), "missing {needle:?} in:\n{log}");
    }
    assert!(!log.contains("builder error"), "{log}");
    assert!(!log.contains(key) && !log.contains(&key[..12]), "{log}");
    assert!(!setup.state_dir.join("status.json").exists());
}

/// A Kubernetes Secret mounted for a non-root pod is owned by root, its group the pod's
/// `fsGroup`, with the group's read bit the kubelet adds (0440): taken when that group is the
/// listener's own; a wider mode, or another group, is still refused.
#[test]
fn a_key_file_mounted_as_a_kubernetes_secret_is_taken_and_wider_ones_are_refused() {
    if unsafe { libc::geteuid() } != 0 {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs the tests as root"
        );
        eprintln!(
            "container::a_key_file_mounted_as_a_kubernetes_secret_is_taken_and_wider_ones_are_refused: SKIPPED: not root (the file must be root's)"
        );
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("bob.key");
    std::fs::write(&key, "ac_secret_volume_key\n").unwrap();
    let own_group = unsafe { libc::getegid() };
    let with = |mode: u32, gid: u32| {
        std::os::unix::fs::chown(&key, Some(0), Some(gid)).unwrap();
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(mode)).unwrap();
        agentchat::config::read_key_file(&key).map_err(|e| e.to_string())
    };
    for mode in [0o400, 0o440, 0o640, 0o600] {
        assert!(with(mode, own_group).is_ok(), "{mode:o}");
    }
    for (mode, gid) in [
        (0o444, own_group),
        (0o460, own_group),
        (0o441, own_group),
        (0o440, own_group + 1),
    ] {
        let e = with(mode, gid).unwrap_err();
        assert!(
            e.contains("can be read by other users"),
            "{mode:o} {gid}: {e}"
        );
        assert!(!e.contains("ac_secret_volume_key"), "{e}");
    }
}

/// What podman needs on these machines, in a file of the test's own (`CONTAINERS_CONF`), so the
/// system's config is left alone: the ulimits root may set here (no CAP_SYS_RESOURCE, hard nofile
/// 20000) and runc (crun refuses hybrid cgroups).
const CONTAINERS_CONF: &str = r#"[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]
[engine]
runtime = "runc"
"#;

const BUILD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/container-build");

/// The listener's uid and gid in the image (Containerfile's `USER`).
const IMAGE_UID: u32 = 65532;

/// podman with the test's `CONTAINERS_CONF`.
struct Podman {
    conf: tempfile::TempDir,
}

impl Podman {
    /// A working podman, or why there is none (`None`: the test says SKIPPED and passes; under
    /// `CI` that is a failure: scripts/test installs podman as root).
    fn find(test: &str) -> Option<Podman> {
        let conf = tempfile::tempdir().unwrap();
        std::fs::write(conf.path().join("containers.conf"), CONTAINERS_CONF).unwrap();
        let p = Podman { conf };
        let why = match p
            .command()
            .args(["info", "--format", "{{.Host.OCIRuntime.Name}}"])
            .output()
        {
            Err(e) => Some(format!(
                "cannot run podman: {e} (Debian: apt-get install podman runc)"
            )),
            Ok(o) if !o.status.success() => Some(format!(
                "podman info failed: {}",
                String::from_utf8_lossy(&o.stderr).trim()
            )),
            Ok(_) if unsafe { libc::geteuid() } != 0 => {
                Some("not root: the test chowns the mounted files to the image's uid".into())
            }
            Ok(_) => None,
        };
        match why {
            None => Some(p),
            Some(why) => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "container::{test}: podman cannot run on CI: {why}"
                );
                eprintln!("container::{test}: SKIPPED: {why}");
                None
            }
        }
    }

    fn conf_path(&self) -> std::path::PathBuf {
        self.conf.path().join("containers.conf")
    }

    fn command(&self) -> std::process::Command {
        let mut c = std::process::Command::new("podman");
        c.env("CONTAINERS_CONF", self.conf_path());
        c
    }

    /// Runs podman to the end (at most `PODMAN_LIMIT`); its output, asserting success when `ok`.
    fn run(&self, args: &[&str], ok: bool) -> std::process::Output {
        let mut cmd = self.command();
        cmd.args(args);
        let out = bounded(cmd, PODMAN_LIMIT);
        if ok {
            assert!(
                out.status.success(),
                "podman {args:?}: {}\n{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        out
    }
}

/// The longest any one podman command (or the image build) may take before the test gives up
/// on it and kills it: a hung podman fails the test instead of holding it for ever.
const PODMAN_LIMIT: std::time::Duration = std::time::Duration::from_secs(180);

/// `cmd` run to the end, its output kept in files; killed (and the test failed) after `limit`.
fn bounded(mut cmd: std::process::Command, limit: std::time::Duration) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let (out, err) = (dir.path().join("out"), dir.path().join("err"));
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not end within {limit:?}:\n{}{}",
                std::fs::read_to_string(&out).unwrap_or_default(),
                std::fs::read_to_string(&err).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    std::process::Output {
        status,
        stdout: std::fs::read(&out).unwrap_or_default(),
        stderr: std::fs::read(&err).unwrap_or_default(),
    }
}

/// The image and container this test made, removed on drop (a failed test leaves neither).
struct Made<'a> {
    podman: &'a Podman,
    image: String,
    containers: Vec<String>,
}

impl Drop for Made<'_> {
    fn drop(&mut self) {
        for c in &self.containers {
            let _ = self.podman.run(&["rm", "-f", "-t", "0", c], false);
        }
        let _ = self.podman.run(&["rmi", "-f", &self.image], false);
    }
}

/// The binary the suite tests: the release one scripts/test built, else the test build's.
fn binary_for_the_image() -> String {
    std::env::var("AGENTCHAT_TEST_RELEASE_BIN")
        .ok()
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_agentchat").to_string())
}

/// A podman child's output files, read as the container's log.
struct Run {
    child: std::process::Child,
    out: std::path::PathBuf,
    err: std::path::PathBuf,
}

impl Run {
    fn log(&self) -> String {
        let read = |p: &std::path::Path| std::fs::read_to_string(p).unwrap_or_default();
        read(&self.out) + &read(&self.err)
    }

    fn events(&self, event: &str) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["event"] == event)
            .collect()
    }

    fn wait(&mut self, secs: f64) -> Option<i32> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs_f64(secs);
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st.code().unwrap_or(-1));
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            crate::common::stop_child(&mut self.child, std::time::Duration::from_secs(10));
        }
    }
}

fn chown(path: &std::path::Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid)).unwrap();
}

/// The image of `Containerfile`, built from scratch by scripts/container-build (the binary, its
/// `ldd` libraries and the loader; no CA bundle), run with `--network host --read-only` against
/// the sim on loopback as a Kubernetes pod would run it: the config mounted read-only, the key a
/// root-owned 0440 file of the listener's group (a Secret under `fsGroup`), the state on a volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scratch_image_runs_the_listener_as_non_root_answers_probes_wakes_a_script_run_logs_json_on_stdout_and_stops_with_0()
 {
    let test = "the_scratch_image_runs_the_listener_as_non_root_answers_probes_wakes_a_script_run_and_stops_with_0";
    let Some(podman) = Podman::find(test) else {
        return;
    };
    let tag = format!(
        "localhost/agentchat-test:{}-{}",
        std::process::id(),
        fastrand::u32(..)
    );
    let name = format!(
        "agentchat-test-{}-{}",
        std::process::id(),
        fastrand::u32(..)
    );
    let mut made = Made {
        podman: &podman,
        image: tag.clone(),
        containers: vec![],
    };

    // The build: staged by the script, FROM scratch.
    let scratch = tempfile::tempdir().unwrap();
    let binary = binary_for_the_image();
    let started = std::time::Instant::now();
    let mut build = std::process::Command::new(BUILD_SCRIPT);
    build
        .args(["--binary", &binary, "--tag", &tag])
        .env("CONTAINERS_CONF", podman.conf_path());
    let build = bounded(build, PODMAN_LIMIT);
    assert!(
        build.status.success(),
        "scripts/container-build: {}\n{}",
        String::from_utf8_lossy(&build.stdout),
        String::from_utf8_lossy(&build.stderr)
    );
    let built_in = started.elapsed();
    let inspect = |format: &str| {
        let out = podman.run(&["image", "inspect", "--format", format, &tag], true);
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(inspect("{{.Config.User}}"), "65532:65532");
    assert_eq!(
        inspect("{{json .Config.Entrypoint}}"),
        r#"["/usr/local/bin/agentchat"]"#
    );
    // One layer per COPY and nothing under them: FROM scratch.
    let layers: Vec<String> = serde_json::from_str(&inspect("{{json .RootFS.Layers}}")).unwrap();
    assert_eq!(layers.len(), 2, "{layers:?}");
    eprintln!(
        "container: image {tag} from {binary}: {} bytes, built in {:.1} s",
        inspect("{{.Size}}"),
        built_in.as_secs_f64()
    );

    // The scene: the sim on loopback, bob's listener in the container.
    let sim = Sim::start(1.0).await;
    let (alice, bob, carol) = (
        sim.agent("alice").await,
        sim.agent("bob").await,
        sim.agent("carol").await,
    );
    let (cfg, secrets, state) = (
        scratch.path().join("cfg"),
        scratch.path().join("secrets"),
        scratch.path().join("state"),
    );
    for d in [&cfg, &secrets, &state] {
        std::fs::create_dir_all(d).unwrap();
    }
    std::fs::write(
        cfg.join("config.toml"),
        format!(
            r#"api_base = "{base}"
log_format = "json"

[listen]
runtime = "script"
command = ["/usr/local/bin/agentchat", "demo-agent"]
metrics_addr = "127.0.0.1:0"
quiet_window = "200ms"
kill_grace = "2s"

[profiles.bob]
api_key_file = "/run/secrets/agentchat/bob.key"

[profiles.carol]
api_key_file = "/run/secrets/agentchat/carol.key"
"#,
            base = sim.api_base
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    for (name, agent) in [("bob", &bob), ("carol", &carol)] {
        let key_file = secrets.join(format!("{name}.key"));
        std::fs::write(&key_file, &agent.key).unwrap();
        std::fs::set_permissions(&key_file, std::fs::Permissions::from_mode(0o440)).unwrap();
        chown(&key_file, 0, IMAGE_UID);
    }
    chown(&state, IMAGE_UID, IMAGE_UID);
    let mounts = |extra: &[&str], command: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = [
            "run",
            "--rm",
            "--name",
            &name,
            "--network",
            "host",
            "--read-only",
            "--tmpfs",
            "/tmp",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for (host, inside) in [
            (&cfg, "/etc/agentchat:ro"),
            (&secrets, "/run/secrets/agentchat:ro"),
            (&state, "/var/lib/agentchat"),
        ] {
            v.push("-v".into());
            v.push(format!("{}:{inside}", host.display()));
        }
        v.extend(extra.iter().map(|s| s.to_string()));
        v.push(tag.clone());
        v.extend(command.iter().map(|s| s.to_string()));
        v
    };
    made.containers.push(name.clone());

    // No CA bundle in the image: an https api_base is refused at start, saying so (one profile).
    let refused = podman.run(
        &mounts(
            &["-e", "AGENTCHAT_API_BASE=https://127.0.0.1:9"],
            &["listen", "--profile", "bob"],
        )
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>(),
        false,
    );
    let said = String::from_utf8_lossy(&refused.stderr).to_string()
        + &String::from_utf8_lossy(&refused.stdout);
    assert_eq!(refused.status.code(), Some(78), "{said}");
    assert!(
        said.contains("no CA certificates found (looked for the OS trust store: /etc/ssl/certs/ca-certificates.crt"),
        "{said}"
    );

    // The image's own command (`listen --all`: bob and carol in one process), its log on files
    // as the container runtime collects it.
    let (out, err) = (
        scratch.path().join("run.out"),
        scratch.path().join("run.err"),
    );
    let child = podman
        .command()
        .args(mounts(&[], &[]))
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let mut run = Run { child, out, err };
    assert!(
        eventually(60.0, || !run.events("metrics_serving").is_empty()).await,
        "no metrics_serving line:\n{}",
        run.log()
    );
    // One endpoint for the whole host (the pod's one port): /healthz and /readyz answer 200,
    // and /readyz names each profile.
    let addrs: Vec<String> = run
        .events("metrics_serving")
        .iter()
        .map(|e| e["addr"].as_str().unwrap().to_string())
        .collect();
    let probe = |addr: String, path: &'static str| async move {
        match reqwest::get(format!("http://{addr}{path}")).await {
            Ok(r) => Some((r.status().as_u16(), r.text().await.unwrap_or_default())),
            Err(_) => None,
        }
    };
    assert_eq!(addrs.len(), 1, "one endpoint for the host: {addrs:?}");
    for addr in &addrs {
        for path in ["/healthz", "/readyz"] {
            assert!(
                eventually_async(30.0, || async {
                    probe(addr.clone(), path).await.is_some_and(|p| p.0 == 200)
                })
                .await,
                "{addr}{path}: {:?}\n{}",
                probe(addr.clone(), path).await,
                run.log()
            );
        }
    }
    let ready = probe(addrs[0].clone(), "/readyz").await.unwrap().1;
    assert!(
        ready.contains("bob: ") && ready.contains("carol: "),
        "{ready}"
    );
    for agent in [&bob, &carol] {
        assert!(
            eventually_async(30.0, || async { accepted(&sim.connects(agent).await) >= 1 }).await,
            "{} never connected:\n{}",
            agent.handle,
            run.log()
        );
    }

    // Non-root: the container's process, seen from the host, and the files it wrote.
    let pid = String::from_utf8_lossy(
        &podman
            .run(&["inspect", "--format", "{{.State.Pid}}", &name], true)
            .stdout,
    )
    .trim()
    .to_string();
    let proc_status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid_line = proc_status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    assert_eq!(
        uid_line.split_whitespace().skip(1).collect::<Vec<_>>(),
        ["65532"; 4],
        "{uid_line}"
    );

    // A message through the sim wakes the demo agent inside the container; it answers.
    sim.send(&alice, &bob, "are you in a container?").await;
    let status_path = state.join("bob/status.json");
    let status_of = |profile: &str| -> serde_json::Value {
        std::fs::read_to_string(state.join(profile).join("status.json"))
            .ok()
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    };
    let status = || status_of("bob");
    assert!(
        eventually_async(60.0, || async {
            crate::listen_support::as_list(&sim.tray(&alice).await, "conversations")
                .iter()
                .any(|c| c["counterparty"]["handle"] == "@bob")
        })
        .await,
        "no answer from bob:\n{}",
        run.log()
    );
    assert!(
        eventually(20.0, || status()["counters"]["runs"] == 1).await,
        "{}\n{}",
        status(),
        run.log()
    );
    assert_eq!(status()["last_cycle"]["outcome"], "completed");

    // SIGTERM (podman stop) ends it with 0; the state volume keeps its status.
    podman.run(&["stop", "-t", "20", &name], true);
    assert_eq!(run.wait(30.0), Some(0), "{}", run.log());
    assert_eq!(status()["state"], "stopped");
    assert_eq!(status_of("carol")["state"], "stopped");
    assert_eq!(status_of("carol")["counters"]["runs"], 0);
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::metadata(&status_path).unwrap().uid(), IMAGE_UID);

    // The log is on stdout (the image sets AGENTCHAT_LOG_STREAM=stdout), where a container
    // engine's log reader looks first.
    let on_stdout = std::fs::read_to_string(&run.out).unwrap_or_default();
    assert!(
        on_stdout.contains("\"event\":\"cycle_end\""),
        "no log lines on stdout:\n{}",
        run.log()
    );
    // Every log line is one JSON object, and none holds the key or the message.
    let log = run.log();
    let lines: Vec<&str> = log.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(lines.len() > 5, "{log}");
    for line in &lines {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("not a JSON line ({e}): {line}"));
        assert!(v["event"].is_string() && v["level"].is_string(), "{line}");
    }
    assert!(
        !log.contains(&bob.key)
            && !log.contains(&carol.key)
            && !log.contains("are you in a container"),
        "{log}"
    );
    assert!(!run.events("cycle_end").is_empty());
    drop(made);
}

//! Process and polling helpers shared by the test modules: waiting on an observable condition
//! with a deadline, telling a finished process from /proc, and stopping a child with SIGTERM.

pub mod settings;

use std::ffi::OsStr;

use std::path::PathBuf;
use std::process::ExitStatus;
use std::time::{Duration, Instant};

/// Polls `cond` every 50 ms until it holds or `secs` pass; returns whether it held (checked once
/// more at the deadline).
pub async fn eventually(secs: impl Into<f64>, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs.into());
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cond()
}

/// `eventually` for conditions that must be awaited (asking a server); polls every 100 ms.
pub async fn eventually_async<F, Fut>(secs: impl Into<f64>, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs_f64(secs.into());
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A process is finished when /proc no longer has it or it is a zombie (PID 1 here reaps no
/// orphans).
pub fn is_gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
    }
}

/// Waits up to `secs` for `pid` to be gone; whether it went.
pub async fn gone_within(secs: impl Into<f64>, pid: i32) -> bool {
    eventually(secs, || is_gone(pid)).await
}

/// `gone_within` for tests without an async runtime: blocks the thread while it polls.
pub fn gone_within_blocking(secs: f64, pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    while !is_gone(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    is_gone(pid)
}

/// Sends `sig` to `pid`.
pub fn signal(pid: i32, sig: i32) {
    // SAFETY: kill(2) takes plain integers; the tests signal only processes they started.
    unsafe {
        libc::kill(pid, sig);
    }
}

/// Sends SIGTERM to `pid`.
pub fn sigterm(pid: i32) {
    signal(pid, libc::SIGTERM);
}

/// Stops a child the test owns: SIGTERM, up to `grace` for it to exit, then SIGKILL. For `Drop`
/// impls, so a failed test leaves no process behind.
pub fn stop_child(child: &mut std::process::Child, grace: Duration) {
    sigterm(child.id() as i32);
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// SIGTERMs a tokio child and waits up to `secs` for its exit status (panics past that).
pub async fn sigterm_and_wait(child: &mut tokio::process::Child, secs: u64) -> ExitStatus {
    sigterm(child.id().expect("the child is still running") as i32);
    tokio::time::timeout(Duration::from_secs(secs), child.wait())
        .await
        .expect("the child exits after SIGTERM")
        .expect("waiting on the child")
}

/// A fresh temp dir holding `config.toml` with `text`; keep the dir alive as long as the path.
pub fn config_in(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text).unwrap();
    (dir, config)
}

/// The test Python (the official SDK and `prometheus_client` in it): `AGENTCHAT_TEST_PYTHON`,
/// which scripts/test sets. Outside CI it falls back to `.tools/venv`, or `None` with a line saying
/// the test is skipped; in CI a missing interpreter fails the test.
pub fn test_python() -> Option<String> {
    if let Ok(p) = std::env::var("AGENTCHAT_TEST_PYTHON") {
        return Some(p);
    }
    assert!(
        std::env::var("CI").is_err(),
        "AGENTCHAT_TEST_PYTHON must be set in CI (scripts/test sets it)"
    );
    let local = concat!(env!("CARGO_MANIFEST_DIR"), "/.tools/venv/bin/python");
    if std::path::Path::new(local).exists() {
        Some(local.to_string())
    } else {
        eprintln!("skipping: no AGENTCHAT_TEST_PYTHON and no .tools/venv (run scripts/test)");
        None
    }
}

/// A fixed-offset zone (`Etc/GMT+11` is UTC-11) where it is now between 12:00 and 13:00: a
/// policy that counts a local day, or quiet hours that leave a minute before midnight open,
/// cannot see its day end while a test runs, whenever the suite runs.
pub fn zone_at_noon() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    // Local time is UTC minus `west` hours (the Etc zones' sign is POSIX's, west positive).
    let west = ((now / 3600) % 24) as i64 - 12;
    match west {
        0 => "Etc/GMT".to_string(),
        w if w > 0 => format!("Etc/GMT+{w}"),
        w => format!("Etc/GMT-{}", -w),
    }
}

/// `http://127.0.0.1:PORT` of a port that was just free: nothing listens there.
pub fn closed_port_base() -> String {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    format!("http://127.0.0.1:{port}")
}

/// A web server that is not AgentChat: every request gets an HTML `404 Not Found` page, as a
/// wrong `api_base` (a web site, another service) answers. Counts the requests per path. Its
/// thread lives as long as the test binary.
pub struct NotAgentChat {
    pub api_base: String,
    hits: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl NotAgentChat {
    pub fn start() -> NotAgentChat {
        use std::io::{BufRead, BufReader, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let api_base = format!("http://{}", listener.local_addr().unwrap());
        let hits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = hits.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { continue };
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).is_err() {
                    continue;
                }
                // The rest of the head, up to the empty line.
                let mut line = String::new();
                while reader.read_line(&mut line).is_ok_and(|n| n > 0) && line.trim() != "" {
                    line.clear();
                }
                let path = request_line.split_whitespace().nth(1).unwrap_or("");
                seen.lock().unwrap().push(path.to_string());
                let body = "<html><body><h1>Not Found</h1></body></html>";
                let _ = write!(
                    stream,
                    "HTTP/1.1 404 Not Found\r\nContent-Type: text/html; charset=utf-8\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            }
        });
        NotAgentChat { api_base, hits }
    }

    /// How many requests asked for `path` (query included).
    pub fn hits(&self, path: &str) -> usize {
        self.hits
            .lock()
            .unwrap()
            .iter()
            .filter(|p| *p == path)
            .count()
    }
}

/// `program` with none of the test's own `AGENTCHAT_*` variables (the `AGENTCHAT_TEST_*` ones
/// included), so a child reads only what its test sets. `also` names more variables to drop, each
/// exactly or, ending in `*`, by prefix (`"NOTIFY_SOCKET"`, `"XDG_*"`). A tokio command is
/// `tokio::process::Command::from` this one.
pub fn isolated_command(program: impl AsRef<OsStr>, also: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(program);
    for (k, _) in std::env::vars_os() {
        let name = k.to_string_lossy();
        let dropped = name.starts_with("AGENTCHAT_")
            || also.iter().any(|p| match p.strip_suffix('*') {
                Some(prefix) => name.starts_with(prefix),
                None => name == *p,
            });
        if dropped {
            cmd.env_remove(&k);
        }
    }
    cmd
}

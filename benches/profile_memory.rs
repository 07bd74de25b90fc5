//! What one idle, connected profile holds on the heap, measured with a counting allocator: N
//! profiles (each its own `Metrics` in one `Registry`, its listener machine in the driver's
//! `core::host::Host`, its `Api`, texts, connection task and state dir lock) connected to one
//! `agentchat sim` (a child process, so the server's memory is not counted), then the live heap
//! and the RSS divided by N. Prints numbers; asserts nothing.
//!
//! `cargo bench --bench profile_memory -- --bench [N]` (default 200). Under `cargo test` it runs
//! with N = 3 as a smoke check so the harness cannot rot. The daemon's own state (status,
//! coalescer, flags) is not in it: `scripts/bench-host` measures the whole host's RSS.

// A benchmark may unwrap, panic and index: Cargo.toml denies those (restriction lints) in the program only.
#![allow(clippy::restriction)]

use agentchat::client::Api;
use agentchat::listen::driver::{Driver, DriverCommand, Start};
use agentchat::listen::metrics::Registry;
use agentchat::listen::state_dir::{LockAttempt, StateDir};
use secrecy::SecretString;
use std::alloc::{GlobalAlloc, Layout, System};
use std::io::BufRead;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};
use std::time::Duration;

/// The system allocator, counting the bytes live and the allocations made.
struct Counting;
static LIVE: AtomicIsize = AtomicIsize::new(0);
static ALLOCS: AtomicUsize = AtomicUsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        LIVE.fetch_add(l.size() as isize, Ordering::Relaxed);
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as isize - l.size() as isize, Ordering::Relaxed);
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

fn live() -> isize {
    LIVE.load(Ordering::Relaxed)
}

/// Resident set size in bytes (`/proc/self/statm`).
fn rss() -> isize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: isize = statm
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

fn kib(b: isize) -> String {
    format!("{:.1} KiB", b as f64 / 1024.0)
}

struct Sim {
    child: std::process::Child,
    base: String,
}

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_sim() -> Sim {
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_agentchat"))
        .args(["sim", "--listen", "127.0.0.1:0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("agentchat sim starts");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    Sim {
        child,
        base: v["api_base"].as_str().unwrap().to_string(),
    }
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let n: usize = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(if measuring { 200 } else { 3 });
    let sim = start_sim();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(run(&sim.base, n, measuring));
}

async fn run(base: &str, n: usize, measuring: bool) {
    agentchat::sys::tls::install_crypto_provider();
    let http = reqwest::Client::new();
    let mut keys = Vec::new();
    for i in 0..n {
        let a: serde_json::Value = http
            .post(format!("{base}/_sim/agents"))
            .json(&serde_json::json!({"handle": format!("p{i:04}")}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        keys.push(a["api_key"].as_str().unwrap().to_string());
    }
    drop(http);
    let registry = Registry::new();
    // The process's one client and TLS set-up, built before the count starts: shared, not per
    // profile.
    let _ = Api::new(base, SecretString::from(String::new())).unwrap();
    // What one more copy of the texts would cost, were they not shared (`listen::texts::intern`).
    let bytes = Api::new(base, SecretString::from(keys[0].clone()))
        .unwrap()
        .texts_bytes("generic")
        .await
        .unwrap();
    let before = live();
    let copy = agentchat::core::texts::Texts::parse(&bytes).unwrap();
    let texts_copy = live() - before;
    drop(copy);
    let (heap0, rss0) = (live(), rss());
    // Phase 1: each profile's registry, Api and texts, with nothing else running.
    let mut ready = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let name = format!("p{i:04}");
        let key = SecretString::from(key.clone());
        let api = Api::new(base, key.clone()).unwrap();
        let metrics = registry.profile(&name);
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let texts = agentchat::listen::texts::fetch(&api, &state, "generic")
            .await
            .unwrap();
        ready.push((key, api, metrics, texts, dir));
    }
    let heap_parts = live() - heap0;
    // Phase 2: each profile's listener in the driver, connected.
    let (driver, commands) = tokio::sync::mpsc::unbounded_channel();
    let pacing = agentchat::core::pacing::PacingPolicy::default();
    let obs = std::sync::Arc::new(agentchat::core::host::NoHostObserver);
    tokio::spawn(Driver::new(pacing, None, 1, obs).run(commands));
    let mut dirs = Vec::new();
    let mut started = Vec::new();
    let mut ended = Vec::new();
    for (i, (key, _api, metrics, _texts, dir)) in ready.into_iter().enumerate() {
        let toml = format!(
            "api_base = \"{base}\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\nidle_timeout = \"100s\"\n"
        );
        let env = std::collections::HashMap::from([
            ("HOME".to_string(), dir.path().display().to_string()),
            (
                "AGENTCHAT_STATE_DIR".to_string(),
                dir.path().display().to_string(),
            ),
        ]);
        let settings = agentchat::config::resolve(
            &agentchat::config::ConfigArgs::default(),
            &env,
            Some((std::path::Path::new("/etc/agentchat/config.toml"), &toml)),
        )
        .unwrap();
        let state = StateDir::open(dir.path()).unwrap();
        let LockAttempt::Acquired(lock) = state.lock().unwrap() else {
            panic!("a fresh state dir's lock");
        };
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let (ended_tx, ended_rx) = tokio::sync::oneshot::channel();
        let opened = agentchat::listen::driver::open_off_loop(&state, &settings).await;
        let start = Start {
            generation: i as u64,
            source: agentchat::config::Source::One(agentchat::config::ConfigArgs::default()),
            settings,
            key,
            state,
            lock,
            metrics,
            notify_status: false,
            span: tracing::Span::none(),
            started: started_tx,
            ended: ended_tx,
            turns: Default::default(),
            opened,
        };
        driver.send(DriverCommand::Add(Box::new(start))).unwrap();
        started.push(started_rx);
        ended.push(ended_rx);
        dirs.push(dir);
    }
    for s in started {
        tokio::time::timeout(Duration::from_secs(120), s)
            .await
            .expect("every profile starts")
            .unwrap();
    }
    // Connected: each status says so (a benchmark may poll).
    for dir in &dirs {
        let state = StateDir::at(dir.path());
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        loop {
            let connected =
                state.read_status().ok().flatten().is_some_and(|s| {
                    s.socket == Some(agentchat::core::status::SocketState::Connected)
                });
            if connected {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "every profile connects"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // Let the connect wakes' cycles, bursts and acks settle.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (heap, rss_now) = (live() - heap0, rss() - rss0);
    let per = |b: isize| kib(b / n as isize);
    if measuring {
        println!("profiles connected, idle:          {n}");
        println!("heap live, all profiles:           {}", kib(heap));
        println!("heap live per profile:             {}", per(heap));
        println!("  registry, Api and texts:         {}", per(heap_parts));
        println!(
            "  listener, connection, connected: {}",
            per(heap - heap_parts)
        );
        println!(
            "    the listener machine:          {}",
            kib(std::mem::size_of::<agentchat::core::listener::Listener>() as isize)
        );
        println!(
            "one more copy of the texts:        {} (shared: each profile holds an Arc)",
            kib(texts_copy)
        );
        println!("RSS grown per profile:             {}", per(rss_now));
        println!(
            "allocations made (all):            {}",
            ALLOCS.load(Ordering::Relaxed)
        );
        println!(
            "/metrics page for all profiles:    {}",
            kib(registry.render().len() as isize)
        );
    } else {
        println!(
            "profile_memory: {n} profiles connected, {} each on the heap (smoke check; `cargo bench --bench profile_memory -- --bench N` measures)",
            per(heap)
        );
    }
    for g in 0..n {
        let _ = driver.send(DriverCommand::To(
            g as u64,
            agentchat::listen::driver::HostCommand::Stop("bench over"),
        ));
    }
    for e in ended {
        let _ = tokio::time::timeout(Duration::from_secs(30), e).await;
    }
    drop(dirs);
}

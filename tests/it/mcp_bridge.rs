//! `agentchat mcp`, the stdio relay to the hosted MCP endpoint, against a scripted MCP server on
//! loopback: what a faithful server never does (a 200 with an empty body, an event stream that
//! ends without the response, a request that is never answered). The faithful path (the sim's
//! MCP endpoint, the real CLIs through the bridge) is in `setup.rs` and `integrating.rs`.

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// The scripted server: the JSON-RPC `method` of each POST chooses the answer.
struct Server {
    base: String,
    /// Requests whose body arrived whole.
    bodies: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `"method":"…"` near the start of `body`, without parsing a body that may be 8 MiB.
fn method_of(body: &[u8]) -> String {
    let head = String::from_utf8_lossy(body.get(..body.len().min(200)).unwrap_or_default());
    head.split("\"method\":\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or("")
        .to_string()
}

fn id_of(body: &[u8]) -> Value {
    serde_json::from_slice::<Value>(body).map_or(Value::Null, |v| v["id"].clone())
}

fn answer(status: u16, content_type: &str, body: String) -> Response<Full<Bytes>> {
    Response::builder()
        .status(status)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

async fn handle(req: Request<Incoming>, bodies: Arc<AtomicUsize>) -> Response<Full<Bytes>> {
    let Ok(body) = req.into_body().collect().await else {
        return answer(400, "text/plain", String::new());
    };
    let body = body.to_bytes();
    bodies.fetch_add(1, Ordering::SeqCst);
    let method = method_of(&body);
    if method == "hang" {
        std::future::pending::<()>().await;
    }
    let id = id_of(&body);
    let progress = json!({"jsonrpc": "2.0", "method": "notifications/progress",
                          "params": {"progressToken": 1, "progress": 1}});
    let result = json!({"jsonrpc": "2.0", "id": id, "result": {"ok": method}});
    match method.as_str() {
        "empty" => answer(200, "application/json", String::new()),
        "accepted" => answer(202, "application/json", String::new()),
        "stream_without_response" => answer(
            200,
            "text/event-stream",
            format!(": ping\n\nevent: message\ndata: {progress}\n\n"),
        ),
        "stream" => answer(
            200,
            "text/event-stream",
            format!("data: {progress}\n\ndata: {result}\n\n"),
        ),
        _ => answer(200, "application/json", format!("{result:#}")),
    }
}

impl Server {
    async fn start() -> Server {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let bodies = Arc::new(AtomicUsize::new(0));
        let counted = bodies.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let counted = counted.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let counted = counted.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(req, counted).await) }
                    });
                    let _ = http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        Server { base, bodies, task }
    }
}

/// `agentchat mcp` against `server`, in a home of its own, with the key from the environment.
fn bridge(home: &std::path::Path, server: &Server, scale: Option<&str>) -> tokio::process::Child {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.arg("mcp")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join("config"))
        .env("XDG_STATE_HOME", home.join("state"))
        .env("AGENTCHAT_API_BASE", &server.base)
        .env("AGENTCHAT_API_KEY", "ac_live_bridge_test_0123456789")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    if let Some(s) = scale {
        cmd.env("AGENTCHAT_TEST_TIME_SCALE", s);
    }
    cmd.spawn().unwrap()
}

fn request(id: u64, method: &str) -> String {
    format!(
        "{}\n",
        json!({"jsonrpc": "2.0", "id": id, "method": method})
    )
}

/// Every request with an id gets exactly one answer: the server's response, or an error saying
/// what came back instead (an empty 200, a 202, an event stream that ends without the response);
/// a notification gets none; what the server streams before its response is handed on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_request_gets_exactly_one_answer_whatever_the_server_sends_back() {
    let server = Server::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut child = bridge(home.path(), &server, None);
    let mut stdin = child.stdin.take().unwrap();
    let mut input = request(1, "empty");
    input += &request(2, "stream_without_response");
    input += &request(3, "stream");
    input += &request(4, "accepted");
    input += &request(5, "tools/list");
    input += "{\"jsonrpc\":\"2.0\",\"method\":\"empty\"}\n";
    stdin.write_all(input.as_bytes()).await.unwrap();
    drop(stdin);
    let out = tokio::time::timeout(Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("the bridge did not end after stdin closed")
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    let answers = |id: u64| -> Vec<&Value> { lines.iter().filter(|l| l["id"] == id).collect() };
    for id in 1..=5 {
        assert_eq!(answers(id).len(), 1, "request {id}: {text}");
    }
    let error = |id: u64| {
        answers(id)[0]["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    assert!(
        error(1).contains("answered 200 with an empty body"),
        "{text}"
    );
    assert!(
        error(2).contains("event stream ended without a response"),
        "{text}"
    );
    assert!(error(4).contains("answered 202"), "{text}");
    assert_eq!(answers(3)[0]["result"]["ok"], "stream", "{text}");
    assert_eq!(answers(5)[0]["result"]["ok"], "tools/list", "{text}");
    // Both streams' progress notifications were handed on; nothing answered the notification.
    let progress = lines
        .iter()
        .filter(|l| l["method"] == "notifications/progress")
        .count();
    assert_eq!(progress, 2, "{text}");
    assert_eq!(lines.len(), 7, "{text}");
}

/// The time-out error says how long the bridge waited (its limit is 120 s, here divided by the
/// test time scale to 3 s against a loopback server), not the listener's REST limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_the_server_never_answers_times_out_naming_the_time_waited() {
    let server = Server::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut child = bridge(home.path(), &server, Some("40"));
    let mut stdin = child.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let started = std::time::Instant::now();
    stdin
        .write_all(request(9, "hang").as_bytes())
        .await
        .unwrap();
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("no answer to a request the server never answers")
        .unwrap()
        .unwrap();
    let waited = started.elapsed();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 9, "{line}");
    let message = v["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("within 3 s"), "{line}");
    assert!(!message.contains("30 s"), "{line}");
    assert!(waited >= Duration::from_millis(2900), "{waited:?}");
}

/// `VmHWM` (peak resident set) of `pid`, in bytes.
fn peak_rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Messages of the largest size the bridge takes (just under 8 MiB: an array of zeros, the
/// costliest shape for a parsed tree), more than it relays at once, to a server that reads each
/// and never answers: the bridge holds 8 (its slots) and reads no further line, so its peak RSS
/// stays under 8 x (message in + answer out) + 32 MiB for the program, whatever the client sends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_size_messages_to_a_server_that_never_answers_keep_memory_within_the_slots() {
    const SLOTS: usize = 8;
    const MAX_MESSAGE: usize = 8 * 1024 * 1024;
    const LINES: u64 = 24;
    let server = Server::start().await;
    let home = tempfile::tempdir().unwrap();
    let mut child = bridge(home.path(), &server, None);
    let pid = child.id().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // `{"jsonrpc":"2.0","id":N,"method":"hang","params":{"z":[0,0,…]}}`, under the cap.
    let zeros = (MAX_MESSAGE - 100) / 2;
    let mut tail = "0,".repeat(zeros);
    tail.pop();
    let tail = Arc::new(format!("{tail}]}}}}\n"));
    let writer = tokio::spawn(async move {
        for id in 0..LINES {
            let head = format!(
                "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"hang\",\"params\":{{\"z\":["
            );
            if stdin.write_all(head.as_bytes()).await.is_err()
                || stdin.write_all(tail.as_bytes()).await.is_err()
            {
                return;
            }
        }
    });
    let all_in_flight =
        crate::common::eventually(120.0, || server.bodies.load(Ordering::SeqCst) >= SLOTS).await;
    assert!(
        all_in_flight,
        "only {} of {SLOTS} messages reached the server",
        server.bodies.load(Ordering::SeqCst)
    );
    let peak = peak_rss(pid);
    let bound = (2 * SLOTS * MAX_MESSAGE + 32 * 1024 * 1024) as u64;
    println!(
        "bridge peak RSS (VmHWM) with {SLOTS} max-size messages in flight: {:.1} MiB (bound {:.0} MiB)",
        peak as f64 / 1048576.0,
        bound as f64 / 1048576.0
    );
    assert!(peak < bound, "peak RSS {peak} bytes over the bound {bound}");
    // No ninth message was taken while the eight wait.
    assert_eq!(server.bodies.load(Ordering::SeqCst), SLOTS);
    writer.abort();
    let _ = child.kill().await;
}

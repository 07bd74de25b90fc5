//! A real browser for the page's tests: Debian's `chromium`, headless, driven over its DevTools
//! socket (`Runtime.evaluate`, `Page.captureScreenshot`) with the WebSocket client the listener
//! already uses. Launched as docs/operating.md's machine notes say it must be here: no sandbox
//! (root), no GPU, no QUIC, no background networking, component updates or sync (the closed
//! network refuses them), a fresh profile dir. Dropping it kills it.

use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::Duration;
use tokio_tungstenite::tungstenite::Message;

pub const CHROMIUM: &str = "/usr/bin/chromium";

type Socket =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

pub struct Browser {
    child: Child,
    _profile: tempfile::TempDir,
    socket: Socket,
    next_id: u64,
}

impl Browser {
    /// Chromium showing `url`; `None` (said on stderr) when it is not installed outside CI
    /// (scripts/test installs it; under CI its absence fails the test).
    pub async fn open(url: &str, width: u32, height: u32) -> Option<Browser> {
        if !std::path::Path::new(CHROMIUM).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{CHROMIUM} is missing: scripts/test installs Debian's chromium as root"
            );
            eprintln!("skipped: {CHROMIUM} is not installed (scripts/test installs it as root)");
            return None;
        }
        let profile = tempfile::tempdir().unwrap();
        let child = Command::new(CHROMIUM)
            .args([
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--remote-debugging-port=0",
                &format!("--window-size={width},{height}"),
                &format!("--user-data-dir={}", profile.path().display()),
                url,
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromium starts");
        // Chromium writes the port it took and its browser socket's path into the profile.
        let port_file = profile.path().join("DevToolsActivePort");
        let read_port = || {
            std::fs::read_to_string(&port_file)
                .ok()
                .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<u16>().ok()))
        };
        assert!(
            crate::common::eventually(30.0, || read_port().is_some()).await,
            "chromium wrote no DevToolsActivePort"
        );
        let port = read_port().unwrap();
        // The page's own target (not the browser's).
        let mut page_ws = None;
        for _ in 0..100 {
            let targets: Value = reqwest::get(format!("http://127.0.0.1:{port}/json/list"))
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or(Value::Null);
            page_ws = targets.as_array().into_iter().flatten().find_map(|t| {
                (t["type"] == "page")
                    .then(|| t["webSocketDebuggerUrl"].as_str().map(str::to_string))
                    .flatten()
            });
            if page_ws.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (socket, _) = tokio_tungstenite::connect_async(page_ws.expect("a page target"))
            .await
            .expect("the DevTools socket");
        Some(Browser {
            child,
            _profile: profile,
            socket,
            next_id: 0,
        })
    }

    /// One DevTools call; its `result`.
    pub async fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let msg = json!({"id": id, "method": method, "params": params}).to_string();
        self.socket.send(Message::text(msg)).await.unwrap();
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(30), self.socket.next())
                .await
                .expect("chromium answers within 30 s")
                .expect("the socket is open")
                .unwrap();
            if let Message::Text(t) = frame {
                let v: Value = serde_json::from_str(&t).unwrap();
                if v["id"] == id {
                    assert!(v.get("error").is_none(), "{method}: {v}");
                    return v["result"].clone();
                }
            }
        }
    }

    /// The value of a JavaScript expression in the page (promises awaited).
    pub async fn eval(&mut self, expr: &str) -> Value {
        let r = self
            .call(
                "Runtime.evaluate",
                json!({"expression": expr, "returnByValue": true, "awaitPromise": true}),
            )
            .await;
        assert!(r.get("exceptionDetails").is_none(), "{expr}: {r}");
        r["result"]["value"].clone()
    }

    /// Polls `expr` until it is `true`, for at most `secs`.
    pub async fn until(&mut self, secs: f64, expr: &str) -> bool {
        let end = std::time::Instant::now() + Duration::from_secs_f64(secs);
        while std::time::Instant::now() < end {
            if self.eval(expr).await == Value::Bool(true) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    /// A PNG of the page as shown, written to `path`.
    pub async fn screenshot(&mut self, path: &std::path::Path) {
        let r = self
            .call("Page.captureScreenshot", json!({"format": "png"}))
            .await;
        let png = decode_base64(r["data"].as_str().unwrap());
        assert!(png.starts_with(b"\x89PNG"), "a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::write(path, png).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Standard base64 (what DevTools sends a screenshot in).
fn decode_base64(s: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' => Some(62),
        b'/' => Some(63),
        _ => None,
    };
    let mut out = Vec::with_capacity(s.len() / 4 * 3);
    let (mut acc, mut bits) = (0u32, 0u32);
    for v in s.bytes().filter_map(value) {
        acc = (acc << 6) | u32::from(v);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    out
}

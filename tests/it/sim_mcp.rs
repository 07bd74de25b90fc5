//! The hosted MCP tools' whole hand set (issue 37 item 13), driven as a Claude Code or Codex
//! session drives them: through `agentchat mcp`, the stdio bridge, to the sim's `POST /mcp`,
//! with the official Python SDK (`agentchatme` 1.1.1) as the peer who writes.

use std::time::Duration;

use crate::sim_support::alice_and_bob;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

const BIN: &str = env!("CARGO_BIN_EXE_agentchat");

/// `agentchat mcp` for one key against one sim, spoken to line by line.
struct Bridge {
    _child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
    next: u64,
}

impl Bridge {
    fn start(base: &str, key: &str, home: &std::path::Path) -> Bridge {
        let mut cmd = crate::common::isolated_command(BIN, &[]);
        cmd.arg("mcp")
            .env("HOME", home)
            .env("XDG_CONFIG_HOME", home.join("config"))
            .env("XDG_STATE_HOME", home.join("state"))
            .env("AGENTCHAT_API_BASE", base)
            .env("AGENTCHAT_API_KEY", key)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null());
        let mut child = tokio::process::Command::from(cmd)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        Bridge {
            _child: child,
            stdin,
            lines,
            next: 1,
        }
    }
    /// Sends a request; its id.
    async fn send(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next;
        self.next += 1;
        let line = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        id
    }
    /// The answer to request `id` (30 s at most), skipping anything else.
    async fn answer(&mut self, id: u64) -> Value {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let line = tokio::time::timeout_at(deadline, self.lines.next_line())
                .await
                .expect("the bridge answers")
                .unwrap()
                .expect("the bridge stays up");
            let v: Value = serde_json::from_str(&line).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    }
    async fn call(&mut self, method: &str, params: Value) -> Value {
        let id = self.send(method, params).await;
        self.answer(id).await
    }
    /// `tools/call`: `(isError, the tool's JSON)`.
    async fn tool(&mut self, name: &str, args: Value) -> (bool, Value) {
        let v = self
            .call("tools/call", json!({"name": name, "arguments": args}))
            .await;
        tool_result(&v)
    }
}

fn tool_result(v: &Value) -> (bool, Value) {
    let r = &v["result"];
    let text = r["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("{v}"));
    (r["isError"] == true, serde_json::from_str(text).unwrap())
}

#[tokio::test]
async fn a_session_through_agentchat_mcp_waits_lists_mutes_marks_read_and_meets_the_deprecated_tools()
 {
    let (s, alice, bob) = alice_and_bob(1.0).await;
    let home = tempfile::tempdir().unwrap();
    let mut b = Bridge::start(&s.base, &bob.key, home.path());
    let init = b
        .call(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                                   "clientInfo": {"name": "sim-test", "version": "0"}}),
        )
        .await;
    assert!(
        init["result"]["capabilities"]["tools"].is_object(),
        "{init}"
    );
    let list = b.call("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, crate::sim_support::MCP_TOOLS);
    // The held sync ear: held until the Python SDK's message lands, then pulled (delivered).
    let waiting = b
        .send(
            "tools/call",
            json!({"name": "agentchat_wait", "arguments": {"wait_ms": 20000}}),
        )
        .await;
    s.wait_state(&bob, "the held wait", |st| st["held_requests"] == 1)
        .await;
    let script = r#"
alice = client(os.environ["ALICE"])
m = alice.send_message(to="bob", content={"text": "are you there?"})
print(json.dumps(m.message if hasattr(m, "message") else m))
"#;
    let Some(sent) = s.python(script, &[("ALICE", &alice.key)]).await else {
        return;
    };
    let (err, got) = tool_result(&b.answer(waiting).await);
    assert!(!err, "{got}");
    assert_eq!(got["messages"][0]["id"], sent["id"]);
    assert_eq!(got["messages"][0]["content"]["text"], "are you there?");
    assert_eq!(got["messages"][0]["status"], "delivered");
    assert_eq!(s.state(&bob).await["received"][0]["status"], "delivered");
    let conv = sent["conversation_id"].as_str().unwrap();
    // The conversations, unread and unmuted.
    let (_, l) = b.tool("agentchat_list_conversations", json!({})).await;
    let row = &l["conversations"][0];
    assert_eq!(
        (&row["conversation_id"], &row["unread"], &row["muted"]),
        (&json!(conv), &json!(1), &json!(false))
    );
    assert_eq!(row["counterparty"]["handle"], "@alice");
    // Mute for 8h: flagged on the tray, over when its time is up.
    let (err, m) = b
        .tool(
            "agentchat_mute",
            json!({"conversation_id": conv, "duration": "8h"}),
        )
        .await;
    assert!(
        !err && m["muted"] == true && m["muted_until"].is_string(),
        "{m}"
    );
    assert_eq!(s.cards(&bob).await[0]["muted"], true);
    s.advance(8 * 3_600_000).await;
    assert_eq!(s.cards(&bob).await[0]["muted"], false);
    let (_, m) = b
        .tool(
            "agentchat_mute",
            json!({"handle": "@alice", "duration": "forever"}),
        )
        .await;
    assert_eq!(
        (&m["muted"], &m["muted_until"]),
        (&json!(true), &Value::Null)
    );
    let (_, m) = b
        .tool(
            "agentchat_mute",
            json!({"handle": "alice", "duration": "off"}),
        )
        .await;
    assert_eq!(m["muted"], false);
    let (err, e) = b
        .tool(
            "agentchat_mute",
            json!({"handle": "alice", "duration": "2h"}),
        )
        .await;
    assert!(err && e["code"] == "VALIDATION_ERROR", "{e}");
    let (err, _) = b.tool("agentchat_mute", json!({"duration": "1d"})).await;
    assert!(err, "a target is needed");
    // Read without a verdict.
    let (err, r) = b
        .tool("agentchat_mark_read", json!({"conversation_id": conv}))
        .await;
    assert!(!err);
    assert_eq!(r["read"], 1);
    assert!(s.cards(&bob).await.is_empty());
    assert!(
        s.state(&bob).await["verdicts"]
            .as_array()
            .unwrap()
            .is_empty(),
        "no verdict"
    );
    let (_, me) = b.tool("agentchat_get_my_status", json!({})).await;
    assert_eq!(
        (&me["handle"], &me["paused_by_owner"]),
        (&json!("bob"), &json!("none"))
    );
    // The deprecated aliases work until their switch-off, then name their replacement.
    let g = s
        .make_group(json!({"owner": alice.handle, "name": "crew", "invite": [bob.handle]}))
        .await;
    let inv = g["invites"][0]["invite_id"].as_str().unwrap();
    let (err, joined) = b
        .tool("agentchat_accept_group_invite", json!({"invite_id": inv}))
        .await;
    assert!(!err && joined["your_role"] == "member", "{joined}");
    let (err, l) = b.tool("agentchat_list_inbox", json!({})).await;
    assert!(
        !err && l["conversations"].as_array().unwrap().len() == 2,
        "{l}"
    );
    s.post(
        None,
        "/_sim/old-paths",
        json!({"id": "tool_agentchat_list_inbox", "state": "removed"}),
    )
    .await;
    let (err, e) = b.tool("agentchat_list_inbox", json!({})).await;
    assert!(err);
    assert_eq!(
        (&e["code"], &e["details"]["replacement"]),
        (&json!("REMOVED"), &json!("agentchat_list_conversations"))
    );
}

//! The hosted MCP tools at `POST /mcp`: Streamable HTTP answered with plain `application/json`
//! JSON-RPC 2.0 (what the real `claude` and `codex` clients accept). Bearer auth.
//! Tools answer as the REST routes do: the result JSON as one text item, errors as `isError`.

use serde_json::{Value, json};

mod calls;
mod tools;

use super::error::Rejection;
use super::http::{Reply, Req, Sim};
use calls::call;
use tools::tools;

const SUPPORTED: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

pub async fn route(sim: &Sim, r: &Req) -> Reply {
    if r.method != "POST" {
        return Reply::from(Rejection::new(
            405,
            "METHOD_NOT_ALLOWED",
            "POST JSON-RPC to /mcp; no SSE stream here",
        ))
        .header("allow", "POST");
    }
    let authed = {
        let s = sim.lock();
        s.auth(r.bearer())
            .and_then(|h| s.refuse_suspended(&h).map(|()| h))
    };
    if let Ok(h) = &authed {
        sim.lock().called(h);
    }
    let me = match authed {
        Ok(h) => h,
        Err(e) => return Reply::from(e).header("www-authenticate", "Bearer"),
    };
    let body: Value = match serde_json::from_slice(&r.body) {
        Ok(v) => v,
        Err(e) => return Reply::ok(rpc_error(Value::Null, -32700, &format!("Parse error: {e}"))),
    };
    match body {
        Value::Array(batch) => {
            let mut out = Vec::new();
            for msg in batch {
                if let Some(v) = one(sim, &me, msg).await {
                    out.push(v);
                }
            }
            if out.is_empty() {
                Reply::empty(202)
            } else {
                Reply::ok(Value::Array(out))
            }
        }
        msg => match one(sim, &me, msg).await {
            Some(v) => Reply::ok(v),
            None => Reply::empty(202),
        },
    }
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// One JSON-RPC message; `None` for notifications and responses (answered `202`, no body).
async fn one(sim: &Sim, me: &str, msg: Value) -> Option<Value> {
    let id = msg.get("id").cloned();
    let method = msg.get("method").and_then(Value::as_str).unwrap_or("");
    let id = match id {
        Some(id) if !id.is_null() => id,
        _ => return None,
    };
    if method.is_empty() {
        return Some(rpc_error(id, -32600, "Invalid Request: method is required"));
    }
    let params = msg.get("params").cloned().unwrap_or(Value::Null);
    let result = match method {
        "initialize" => {
            let asked = params
                .get("protocolVersion")
                .and_then(Value::as_str)
                .unwrap_or("");
            let version = if SUPPORTED.contains(&asked) {
                asked
            } else {
                SUPPORTED[1]
            };
            json!({
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": false}},
                "serverInfo": {"name": "agentchat", "title": "AgentChat (local sim)", "version": env!("CARGO_PKG_VERSION")},
                "instructions": "AgentChat: read your tray with agentchat_inbox and answer every card and invite.",
            })
        }
        "ping" => json!({}),
        "tools/list" => json!({"tools": tools()}),
        "tools/call" => {
            let name = params.get("name").and_then(Value::as_str).unwrap_or("");
            let args = params
                .get("arguments")
                .cloned()
                .unwrap_or_else(|| json!({}));
            match call(sim, me, name, &args).await {
                Ok(v) => {
                    json!({"content": [{"type": "text", "text": v.to_string()}], "isError": false})
                }
                Err(e) => {
                    json!({"content": [{"type": "text", "text": e.body().to_string()}], "isError": true})
                }
            }
        }
        "resources/list" => json!({"resources": []}),
        "prompts/list" => json!({"prompts": []}),
        _ => {
            return Some(rpc_error(
                id,
                -32601,
                &format!("Method not found: {method}"),
            ));
        }
    };
    Some(json!({"jsonrpc": "2.0", "id": id, "result": result}))
}

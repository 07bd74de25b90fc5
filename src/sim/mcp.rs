//! The hosted MCP tools at `POST /mcp`: Streamable HTTP answered with plain `application/json`
//! JSON-RPC 2.0 (what the real `claude` and `codex` clients accept). Bearer auth.
//! Tools answer as the REST routes do: the result JSON as one text item, errors as `isError`.

use serde_json::{Value, json};

use super::api;
use super::error::{Rejection, SimResult};
use super::http::{Reply, Req, Sim};

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

fn s(args: &Value, name: &str) -> SimResult<String> {
    args.get(name)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .ok_or_else(|| Rejection::validation(format!("{name} is required")))
}

/// Checks a tool call's arguments against that tool's own `inputSchema` (required properties,
/// `string`/`integer` types, `enum`, `minimum`/`maximum`), so a tool refuses what its schema
/// refuses, with a 400-shaped error naming the property, as the REST route does. Null optional
/// properties count as absent; properties the schema does not list are ignored.
fn check_args(name: &str, args: &Value) -> SimResult<()> {
    let tools = tools();
    let Some(schema) = tools
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == name))
        .map(|t| &t["inputSchema"])
    else {
        return Ok(());
    };
    if !args.is_object() {
        return Err(Rejection::validation("arguments must be an object"));
    }
    for req in schema["required"].as_array().into_iter().flatten() {
        let key = req.as_str().unwrap_or("");
        if args.get(key).is_none_or(Value::is_null) {
            return Err(Rejection::validation(format!("{key} is required")));
        }
    }
    let Some(props) = schema["properties"].as_object() else {
        return Ok(());
    };
    for (key, p) in props {
        let Some(v) = args.get(key).filter(|v| !v.is_null()) else {
            continue;
        };
        let ok_type = match p["type"].as_str() {
            Some("string") => v.is_string(),
            Some("integer") => v.is_i64() || v.is_u64(),
            _ => true,
        };
        if !ok_type {
            return Err(Rejection::validation(format!(
                "{key} must be a{} {}",
                if p["type"] == "integer" { "n" } else { "" },
                p["type"].as_str().unwrap_or("value")
            )));
        }
        if let Some(allowed) = p["enum"].as_array()
            && !allowed.contains(v)
        {
            let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
            return Err(Rejection::validation(format!(
                "{key} must be one of {}",
                names.join(", ")
            )));
        }
        if let Some(n) = v.as_f64() {
            let (min, max) = (p["minimum"].as_f64(), p["maximum"].as_f64());
            if min.is_some_and(|m| n < m) || max.is_some_and(|m| n > m) {
                return Err(Rejection::validation(format!(
                    "{key} must be between {} and {}",
                    p["minimum"], p["maximum"]
                )));
            }
        }
    }
    Ok(())
}

/// An integer argument already range-checked by `check_args`, or its default.
fn int(args: &Value, name: &str, default: u64) -> u64 {
    args.get(name).and_then(Value::as_u64).unwrap_or(default)
}

async fn call(sim: &Sim, me: &str, name: &str, args: &Value) -> SimResult<Value> {
    check_args(name, args)?;
    match name {
        "agentchat_inbox" => {
            let (limit, wait) = (int(args, "limit", 20), int(args, "wait_ms", 0));
            api::inbox(sim, me, limit as usize, wait, true).await
        }
        "agentchat_get_conversation" => {
            let conv = s(args, "conversation_id")?;
            let limit = int(args, "limit", 50) as usize;
            let msgs = sim
                .lock()
                .conversation_messages(me, &conv, limit, None, None)?;
            Ok(json!({"conversation_id": conv, "messages": msgs}))
        }
        "agentchat_send_message" => {
            let text = s(args, "text")?;
            let mut body = json!({"content": {"text": text}});
            for k in ["to", "conversation_id", "client_msg_id"] {
                if let Some(v) = args.get(k).filter(|v| !v.is_null()) {
                    body[k] = v.clone();
                }
            }
            Ok(sim.lock().send_message(me, &body)?.1)
        }
        "agentchat_decide" => {
            let conv = s(args, "conversation_id")?;
            sim.lock().decide(me, &conv, args)
        }
        "agentchat_respond_to_invite" => {
            let id = s(args, "invite_id")?;
            let mut st = sim.lock();
            match s(args, "response")?.as_str() {
                "accept" => st.accept_invite(me, &id),
                "decline" => st.decline_invite(me, &id),
                "dismiss" => st.dismiss_invite(me, &id),
                other => Err(Rejection::validation(format!(
                    "response {other:?} is not accept, decline or dismiss"
                ))),
            }
        }
        other => Err(Rejection::not_found(
            "TOOL_NOT_FOUND",
            format!("no tool named {other}"),
        )),
    }
}

fn tools() -> Value {
    let categories = super::store::CATEGORIES;
    json!([
        {
            "name": "agentchat_inbox",
            "description": "Read your AgentChat tray: one card per conversation with unread messages, newest first, plus pending group invites and the one question to answer for each card (reply, dismiss or defer). Reading marks nothing read.",
            "inputSchema": {"type": "object", "properties": {
                "wait_ms": {"type": "integer", "minimum": 0, "maximum": 50000, "description": "Hold the read up to this long until something arrives."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many cards (default 20)."}
            }, "additionalProperties": false}
        },
        {
            "name": "agentchat_get_conversation",
            "description": "Open one conversation: its messages, oldest first. Marks them delivered, not read.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string", "description": "conv_… or grp_…"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200}
            }, "required": ["conversation_id"], "additionalProperties": false}
        },
        {
            "name": "agentchat_send_message",
            "description": "Send a message to an agent (to: its handle) or into a conversation (conversation_id). Sending marks nothing read; record the reply verdict after it.",
            "inputSchema": {"type": "object", "properties": {
                "to": {"type": "string", "description": "A handle, with or without @."},
                "conversation_id": {"type": "string"},
                "text": {"type": "string"},
                "client_msg_id": {"type": "string", "description": "Idempotency key for this send."}
            }, "required": ["text"], "additionalProperties": false}
        },
        {
            "name": "agentchat_decide",
            "description": "Record your verdict on a tray card: reply (after you sent the answer), dismiss, or defer. Pass the card's preview.message_id (or last_message_id) as through_message_id.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string"},
                "decision": {"type": "string", "enum": ["reply", "dismiss", "defer"]},
                "category": {"type": "string", "enum": categories},
                "through_message_id": {"type": "string"}
            }, "required": ["conversation_id", "decision", "category"], "additionalProperties": false}
        },
        {
            "name": "agentchat_respond_to_invite",
            "description": "Answer a pending group invite: accept, decline, or dismiss (leave it pending quietly).",
            "inputSchema": {"type": "object", "properties": {
                "invite_id": {"type": "string"},
                "response": {"type": "string", "enum": ["accept", "decline", "dismiss"]}
            }, "required": ["invite_id", "response"], "additionalProperties": false}
        }
    ])
}

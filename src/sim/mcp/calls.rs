//! The hosted tools' calls: each checked against its own `inputSchema`, then answered as the
//! REST route it stands for answers (contract 1's hands; the receiving guide's tool names).

use serde_json::{Value, json};

use super::super::api;
use super::super::error::{Rejection, SimResult};
use super::super::http::Sim;
use super::tools::tools;

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

pub async fn call(sim: &Sim, me: &str, name: &str, args: &Value) -> SimResult<Value> {
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
        "agentchat_wait" => wait(sim, me, args).await,
        "agentchat_mark_read" => {
            let conv = s(args, "conversation_id")?;
            sim.lock().mark_read(me, &conv, args)
        }
        "agentchat_mute" => mute(sim, me, args),
        "agentchat_list_conversations" => {
            let limit = int(args, "limit", 20) as usize;
            Ok(json!({"conversations": sim.lock().list_conversations(me, limit)}))
        }
        "agentchat_get_my_status" => sim.lock().me(me),
        // The deprecated aliases of contract 7: working, until their switch-off makes each an
        // error naming its replacement.
        "agentchat_list_inbox" => {
            let st = sim.lock();
            st.old_paths.check("tool_agentchat_list_inbox")?;
            let limit = int(args, "limit", 20) as usize;
            Ok(json!({"conversations": st.list_conversations(me, limit)}))
        }
        "agentchat_accept_group_invite" => {
            let mut st = sim.lock();
            st.old_paths.check("tool_agentchat_accept_group_invite")?;
            st.accept_invite(me, &s(args, "invite_id")?)
        }
        "agentchat_reject_group_invite" => {
            let mut st = sim.lock();
            st.old_paths.check("tool_agentchat_reject_group_invite")?;
            st.decline_invite(me, &s(args, "invite_id")?)
        }
        other => Err(Rejection::not_found(
            "TOOL_NOT_FOUND",
            format!("no tool named {other}"),
        )),
    }
}

/// `agentchat_wait`: the held sync ear (contract 1). New messages, oldest first, held up to
/// `wait_ms` until one lands (an invite does not end it, 3.1); what it returns is pulled, so
/// marked delivered (the receiving guide: "a pull with agentchat_wait").
async fn wait(sim: &Sim, me: &str, args: &Value) -> SimResult<Value> {
    let (limit, wait_ms) = (int(args, "limit", 100) as usize, int(args, "wait_ms", 0));
    let rows = api::sync_rows(sim, me, None, limit, wait_ms).await?;
    let mut st = sim.lock();
    if let Some(last) = rows.last().and_then(|r| r["delivery_id"].as_str()) {
        st.ack_through(me, last);
    }
    let messages: Vec<Value> = rows
        .iter()
        .filter_map(|r| r["id"].as_str())
        .map(|id| st.envelope(id, me, true))
        .collect();
    Ok(json!({"messages": messages}))
}

/// `agentchat_mute`: a conversation or an agent (by handle), for `8h`, `1d`, `3d`, `forever`,
/// or `off` (the receiving guide).
fn mute(sim: &Sim, me: &str, args: &Value) -> SimResult<Value> {
    let conv = args.get("conversation_id").and_then(Value::as_str);
    let handle = args.get("handle").and_then(Value::as_str);
    let mut body = match (conv, handle) {
        (Some(c), None) => json!({"target_kind": "conversation", "target_id": c}),
        (None, Some(h)) => json!({"target_kind": "agent", "target_handle": h}),
        _ => {
            return Err(Rejection::validation(
                "give conversation_id or handle, one of them",
            ));
        }
    };
    body["duration"] = args.get("duration").cloned().unwrap_or(Value::Null);
    let entry = sim.lock().mute(me, &body)?;
    Ok(json!({
        "target_kind": body["target_kind"],
        "target": conv.or(handle),
        "muted": !entry.is_null(),
        "muted_until": entry.get("muted_until").cloned().unwrap_or(Value::Null),
    }))
}

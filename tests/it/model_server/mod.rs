//! A scripted model server for the runtime tests: it stands in for the model provider (the one
//! thing that cannot run here) and plays the agent, so the real `claude` and `codex` CLIs can be
//! driven end to end against the real AgentChat MCP tools of `agentchat sim`.
//!
//! It speaks Anthropic Messages streaming (`POST /v1/messages`, plus `HEAD /` and
//! `count_tokens`) for Claude Code and OpenAI Responses streaming (`POST /v1/responses`) for
//! Codex. The agent is stateless: each request's history decides the next step —
//! `agentchat_inbox`, then for the first card `agentchat_get_conversation`,
//! `agentchat_send_message` (a short answer) and `agentchat_decide` (`reply` through the newest
//! message it read), then end the turn. Requests without AgentChat tools (Claude Code's side
//! calls) get plain text.
//!
//! Modes: `Normal`, `Unauthorized` (every model call answers 401, as for an invalid key),
//! `UnauthorizedOnce` (the first one does), `Hang` (model calls are never answered) and
//! `HangAfter(n)` (the agent's first `n` model calls are answered, the rest hang).

pub mod cli;
pub mod hostile;
pub mod sim;

pub use hostile::Hostile;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

/// The answer the scripted agent sends.
pub const REPLY_TEXT: &str = "Thanks, got it. (scripted test agent)";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    Unauthorized,
    Hang,
    /// The first model call answers 401 as `Unauthorized` does, every later one as `Normal`: a
    /// key refused for a moment.
    UnauthorizedOnce,
    /// The first `n` model calls that offer the AgentChat tools are answered as `Normal`, every
    /// later one as `Hang`: a run that streamed some of its usage and then never ends by itself.
    HangAfter(usize),
}

/// What the server saw and did, for assertions.
#[derive(Debug, Default, Clone)]
pub struct Journal {
    /// `METHOD path` of every request.
    pub requests: Vec<String>,
    /// The agent's steps: `call <tool>` or `say`, or `401` / `hang`, or `hostile <tool>`.
    pub steps: Vec<String>,
    /// For every model call that offered the AgentChat tools: every tool it offered, as the
    /// model sees them (`name`, or `namespace/name` for Codex's namespaced tools, or the `type`
    /// of a tool without a name).
    pub offered: Vec<Vec<String>>,
    /// Every model call's body, as text: what the model was shown.
    pub bodies: Vec<String>,
}

pub struct ModelServer {
    pub addr: SocketAddr,
    journal: Arc<Mutex<Journal>>,
    shutdown: tokio::sync::watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl ModelServer {
    /// Starts on a free loopback port, on the current tokio runtime.
    pub async fn start(mode: Mode) -> ModelServer {
        ModelServer::start_with(mode, None).await
    }

    /// A `Normal` server whose agent first calls every tool it is offered besides AgentChat's
    /// as `hostile` says, then does its AgentChat work as usual.
    /// `plan` is given the server's base URL (for the URLs the agent fetches).
    pub async fn start_hostile(plan: impl FnOnce(&str) -> Hostile) -> ModelServer {
        ModelServer::start_with(Mode::Normal, Some(Box::new(plan))).await
    }

    async fn start_with(mode: Mode, plan: Option<Box<HostilePlan<'_>>>) -> ModelServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let hostile = plan.map(|p| Arc::new(p(&format!("http://{addr}"))));
        let journal = Arc::new(Mutex::new(Journal::default()));
        let (shutdown, shutdown_rx) = tokio::sync::watch::channel(false);
        let j = journal.clone();
        let h = hostile.clone();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            let mut stop = shutdown_rx.clone();
            loop {
                tokio::select! {
                    _ = stop.changed() => break,
                    accepted = listener.accept() => {
                        let Ok((stream, _)) = accepted else { continue };
                        let j = j.clone();
                        let h = h.clone();
                        let rx = shutdown_rx.clone();
                        conns.spawn(async move {
                            let svc = service_fn(move |req| handle(req, mode, h.clone(), j.clone(), rx.clone()));
                            let _ = http1::Builder::new()
                                .serve_connection(TokioIo::new(stream), svc)
                                .await;
                        });
                    }
                }
            }
            conns.abort_all();
        });
        ModelServer {
            addr,
            journal,
            shutdown,
            task,
        }
    }

    /// `http://127.0.0.1:PORT` (Claude Code's `ANTHROPIC_BASE_URL`).
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn journal(&self) -> Journal {
        self.journal.lock().unwrap().clone()
    }
}

impl Drop for ModelServer {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

type Body = Full<Bytes>;

/// Makes the hostile plan from the server's base URL.
type HostilePlan<'a> = dyn FnOnce(&str) -> Hostile + 'a;

async fn handle(
    req: Request<Incoming>,
    mode: Mode,
    hostile: Option<Arc<Hostile>>,
    journal: Arc<Mutex<Journal>>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) -> Result<Response<Body>, std::convert::Infallible> {
    let port = req
        .headers()
        .get("host")
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.rsplit(':').next())
        .unwrap_or("0")
        .to_string();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    journal
        .lock()
        .unwrap()
        .requests
        .push(format!("{method} {}", req.uri()));
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    if let Ok(dir) = std::env::var("MODEL_SERVER_DUMP") {
        let n = journal.lock().unwrap().requests.len();
        let _ = std::fs::write(format!("{dir}/req-{port}-{n:03}.json"), &body);
    }

    let is_model_call = method == hyper::Method::POST
        && (path == "/v1/messages" || path == "/v1/responses" || path == "/responses");
    if method == hyper::Method::HEAD || (method == hyper::Method::GET && path == "/") {
        return Ok(plain(StatusCode::OK, "application/json", "{}"));
    }
    if path.ends_with("/count_tokens") {
        return Ok(plain(
            StatusCode::OK,
            "application/json",
            r#"{"input_tokens":10}"#,
        ));
    }
    if is_model_call {
        let mut j = journal.lock().unwrap();
        j.bodies.push(String::from_utf8_lossy(&body).into_owned());
        if offers_agentchat(&request["tools"]) {
            j.offered.push(tool_names(&request["tools"]));
        }
    }
    if !is_model_call {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "application/json",
            r#"{"error":"not found"}"#,
        ));
    }
    let mode = match mode {
        Mode::UnauthorizedOnce if journal.lock().unwrap().steps.iter().any(|s| s == "401") => {
            Mode::Normal
        }
        Mode::UnauthorizedOnce => Mode::Unauthorized,
        Mode::HangAfter(n) if journal.lock().unwrap().offered.len() > n => Mode::Hang,
        Mode::HangAfter(_) => Mode::Normal,
        other => other,
    };
    match mode {
        Mode::Unauthorized | Mode::UnauthorizedOnce => {
            journal.lock().unwrap().steps.push("401".into());
            let body = if path == "/v1/messages" {
                r#"{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}"#
            } else {
                r#"{"error":{"message":"Incorrect API key provided.","type":"invalid_request_error","code":"invalid_api_key"}}"#
            };
            let mut resp = plain(StatusCode::UNAUTHORIZED, "application/json", body);
            // Tells the Anthropic client not to retry (a bad key stays bad).
            resp.headers_mut()
                .insert("x-should-retry", "false".parse().unwrap());
            Ok(resp)
        }
        // Resolved above: `HangAfter` is `Normal` or `Hang` by then.
        Mode::Hang | Mode::HangAfter(_) => {
            journal.lock().unwrap().steps.push("hang".into());
            // Never answers; only the server's shutdown ends the wait.
            let _ = shutdown.wait_for(|s| *s).await;
            Ok(plain(StatusCode::SERVICE_UNAVAILABLE, "text/plain", "bye"))
        }
        Mode::Normal => {
            let hostile = hostile.as_deref();
            let (step, sse) = if path == "/v1/messages" {
                anthropic::answer(&request, hostile)
            } else {
                openai::answer(&request, hostile)
            };
            journal.lock().unwrap().steps.push(step);
            Ok(plain(StatusCode::OK, "text/event-stream", &sse))
        }
    }
}

fn plain(status: StatusCode, content_type: &str, body: &str) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", content_type.parse().unwrap());
    r
}

fn sse(events: &[Value]) -> String {
    let mut out = String::new();
    for e in events {
        let name = e["type"].as_str().unwrap_or("message");
        out.push_str(&format!("event: {name}\ndata: {e}\n\n"));
    }
    out
}

/// One tool call of the history and its result's text.
#[derive(Debug, Clone)]
pub struct Exchange {
    /// The bare tool name (`agentchat_inbox`).
    pub tool: String,
    pub result: String,
}

/// A tool the request offers: the name to call it by, its namespace (Codex) and its schema.
#[derive(Debug, Clone)]
pub struct Offered {
    pub call_name: String,
    pub namespace: Option<String>,
    pub schema: Value,
}

/// What the agent does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    Call { tool: &'static str, args: Value },
    Say(String),
}

/// The scripted agent: pure, from the history of AgentChat calls and the offered tools.
pub fn next_step(history: &[Exchange], offered: &dyn Fn(&str) -> Option<Offered>) -> Step {
    let done = |t: &str| history.iter().any(|e| e.tool == t);
    let result_of = |t: &str| {
        history
            .iter()
            .rev()
            .find(|e| e.tool == t)
            .and_then(|e| parse_tool_json(&e.result))
    };
    if !done("agentchat_inbox") {
        return Step::Call {
            tool: "agentchat_inbox",
            args: json!({}),
        };
    }
    let tray = result_of("agentchat_inbox").unwrap_or(Value::Null);
    let Some(card) = tray["conversations"]
        .as_array()
        .and_then(|c| c.first())
        .cloned()
    else {
        return Step::Say("Nothing is waiting on the tray.".into());
    };
    let conv = card["conversation_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    if !done("agentchat_get_conversation") {
        return Step::Call {
            tool: "agentchat_get_conversation",
            args: json!({ "conversation_id": conv }),
        };
    }
    if !done("agentchat_send_message") {
        let schema = offered("agentchat_send_message").map(|o| o.schema);
        let props = schema
            .as_ref()
            .and_then(|s| s.get("properties"))
            .cloned()
            .unwrap_or(Value::Null);
        let has = |k: &str| props.get(k).is_some();
        let mut args = serde_json::Map::new();
        if has("conversation_id") || !has("to") {
            args.insert("conversation_id".into(), json!(conv));
        } else {
            args.insert("to".into(), card["counterparty"]["handle"].clone());
        }
        let text_key = ["text", "content", "message", "body"]
            .into_iter()
            .find(|k| has(k))
            .unwrap_or("text");
        if text_key == "content" && props["content"]["type"] == "object" {
            args.insert("content".into(), json!({ "text": REPLY_TEXT }));
        } else {
            args.insert(text_key.into(), json!(REPLY_TEXT));
        }
        return Step::Call {
            tool: "agentchat_send_message",
            args: Value::Object(args),
        };
    }
    if !done("agentchat_decide") {
        let anchor = result_of("agentchat_get_conversation")
            .and_then(|v| newest_message_id(&v))
            .or_else(|| card["preview"]["message_id"].as_str().map(str::to_string))
            .or_else(|| card["last_message_id"].as_str().map(str::to_string))
            .unwrap_or_default();
        return Step::Call {
            tool: "agentchat_decide",
            args: json!({
                "conversation_id": conv,
                "decision": "reply",
                "category": "open_request",
                "through_message_id": anchor,
            }),
        };
    }
    Step::Say("Answered and recorded reply.".into())
}

/// The newest message (highest `seq`, else the last listed) in a conversation read.
fn newest_message_id(v: &Value) -> Option<String> {
    let mut found: Vec<(u64, usize, String)> = Vec::new();
    collect_messages(v, &mut found);
    found
        .into_iter()
        .max_by_key(|(seq, idx, _)| (*seq, *idx))
        .map(|(_, _, id)| id)
}

fn collect_messages(v: &Value, out: &mut Vec<(u64, usize, String)>) {
    match v {
        Value::Object(m) => {
            if let Some(id) = m.get("id").and_then(|i| i.as_str())
                && id.starts_with("msg_")
            {
                let seq = m.get("seq").and_then(|s| s.as_u64()).unwrap_or(0);
                let idx = out.len();
                out.push((seq, idx, id.to_string()));
            }
            m.values().for_each(|x| collect_messages(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_messages(x, out)),
        _ => {}
    }
}

/// A tool result's JSON: the whole text, the part after Codex's `Output:` line, or from the
/// first `{`.
pub fn parse_tool_json(text: &str) -> Option<Value> {
    let candidates = [
        Some(text),
        text.split_once("Output:").map(|(_, rest)| rest),
        text.find('{').map(|i| &text[i..]),
    ];
    for c in candidates.into_iter().flatten() {
        let mut stream = serde_json::Deserializer::from_str(c.trim()).into_iter::<Value>();
        if let Some(Ok(v)) = stream.next()
            && v.is_object()
        {
            return Some(v);
        }
    }
    None
}

/// A tool result's text: a plain string, or the `text` of each part joined by newlines (both
/// APIs send either); anything else as JSON, nothing for null.
fn content_text(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        Value::String(s) => s.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        other => other.to_string(),
    }
}

/// Every tool-like object (`name` plus a schema) in a request's `tools`, with its namespace.
fn offered_tools(tools: &Value) -> Vec<(String, Option<String>, Value)> {
    let mut out = Vec::new();
    for t in tools.as_array().into_iter().flatten() {
        let name = t["name"].as_str().unwrap_or_default().to_string();
        if let Some(inner) = t["tools"].as_array() {
            for f in inner {
                let schema = f
                    .get("parameters")
                    .or(f.get("input_schema"))
                    .cloned()
                    .unwrap_or(Value::Null);
                out.push((
                    f["name"].as_str().unwrap_or_default().to_string(),
                    Some(name.clone()),
                    schema,
                ));
            }
        } else {
            let schema = t
                .get("input_schema")
                .or(t.get("parameters"))
                .cloned()
                .unwrap_or(Value::Null);
            out.push((name, None, schema));
        }
    }
    out
}

/// Every tool a request offers, as the model sees it: `name`, `namespace/name`, or the `type` of
/// a tool without a name (a hosted tool), sorted.
pub fn tool_names(tools: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for t in tools.as_array().into_iter().flatten() {
        let name = t["name"].as_str();
        match (t["tools"].as_array(), name) {
            (Some(inner), ns) => {
                for f in inner {
                    out.push(format!(
                        "{}/{}",
                        ns.unwrap_or_default(),
                        f["name"].as_str().unwrap_or_default()
                    ));
                }
            }
            (None, Some(n)) => out.push(n.to_string()),
            (None, None) => out.push(t["type"].as_str().unwrap_or("?").to_string()),
        }
    }
    out.sort();
    out
}

/// The bare AgentChat tool name a called name stands for (`mcp__agentchat__agentchat_x` or
/// `agentchat_x`).
fn bare_tool(name: &str) -> Option<String> {
    // `mcp__<server>__agentchat_x` whatever the server is called (a Claude Code plugin's server
    // is `plugin_agentchat_agentchat`), or the bare name.
    let bare = name.rsplit("__").next().unwrap_or(name);
    bare.starts_with("agentchat_").then(|| bare.to_string())
}

fn finder(tools: &Value) -> impl Fn(&str) -> Option<Offered> + '_ {
    move |bare: &str| {
        offered_tools(tools)
            .into_iter()
            .find(|(n, _, _)| n == bare || n.ends_with(&format!("__{bare}")))
            .map(|(call_name, namespace, schema)| Offered {
                call_name,
                namespace,
                schema,
            })
    }
}

fn offers_agentchat(tools: &Value) -> bool {
    finder(tools)("agentchat_inbox").is_some()
}

fn step_label(step: &Step) -> String {
    match step {
        Step::Call { tool, .. } => format!("call {tool}"),
        Step::Say(_) => "say".into(),
    }
}

mod anthropic {
    use super::*;

    /// Answers one Messages request: the step's label and the SSE body.
    pub fn answer(req: &Value, hostile: Option<&Hostile>) -> (String, String) {
        let tools = &req["tools"];
        if !offers_agentchat(tools) {
            return ("side-call".into(), text_message("OK."));
        }
        let history = history(req);
        if let Some((name, _, args)) = hostile.and_then(|h| h.next_call(tools, &used(req))) {
            // Ids apart from the AgentChat calls' (`toolu_<n>` for the n-th of those).
            let n = 1000 + req["messages"].as_array().map_or(0, Vec::len);
            return (format!("hostile {name}"), tool_message(&name, &args, n));
        }
        let step = next_step(&history, &finder(tools));
        let label = step_label(&step);
        let body = match step {
            Step::Say(t) => text_message(&t),
            Step::Call { tool, args } => {
                let name = finder(tools)(tool)
                    .map(|o| o.call_name)
                    .unwrap_or_else(|| format!("mcp__agentchat__{tool}"));
                tool_message(&name, &args, history.len())
            }
        };
        (label, body)
    }

    /// Every tool name the history called, once per call.
    fn used(req: &Value) -> Vec<String> {
        req["messages"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
            .filter(|b| b["type"] == "tool_use")
            .filter_map(|b| b["name"].as_str().map(str::to_string))
            .collect()
    }

    fn history(req: &Value) -> Vec<Exchange> {
        let mut calls: Vec<(String, String)> = Vec::new(); // (id, bare tool)
        let mut results: Vec<(String, String)> = Vec::new(); // (id, text)
        for m in req["messages"].as_array().into_iter().flatten() {
            for b in m["content"].as_array().into_iter().flatten() {
                match b["type"].as_str() {
                    Some("tool_use") => {
                        if let Some(t) = b["name"].as_str().and_then(bare_tool) {
                            calls.push((b["id"].as_str().unwrap_or_default().into(), t));
                        }
                    }
                    Some("tool_result") => {
                        let text = content_text(&b["content"]);
                        results.push((b["tool_use_id"].as_str().unwrap_or_default().into(), text));
                    }
                    _ => {}
                }
            }
        }
        calls
            .into_iter()
            .filter_map(|(id, tool)| {
                let result = results.iter().find(|(rid, _)| *rid == id)?.1.clone();
                Some(Exchange { tool, result })
            })
            .collect()
    }

    fn start(n: usize) -> Value {
        json!({"type":"message_start","message":{"id":format!("msg_model_{n}"),"type":"message","role":"assistant",
            "model":"claude-scripted","content":[],"stop_reason":null,"stop_sequence":null,
            "usage":{"input_tokens":10,"output_tokens":1}}})
    }

    fn text_message(text: &str) -> String {
        sse(&[
            start(0),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":text}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":5}}),
            json!({"type":"message_stop"}),
        ])
    }

    fn tool_message(name: &str, args: &Value, n: usize) -> String {
        sse(&[
            start(n + 1),
            json!({"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":format!("toolu_{n}"),"name":name,"input":{}}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":args.to_string()}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":5}}),
            json!({"type":"message_stop"}),
        ])
    }
}

mod openai {
    use super::*;

    /// Answers one Responses request: the step's label and the SSE body.
    pub fn answer(req: &Value, hostile: Option<&Hostile>) -> (String, String) {
        let tools = &req["tools"];
        let history = history(req);
        let n = history.len();
        if !offers_agentchat(tools) {
            return ("side-call".into(), text_response("OK.", n));
        }
        if let Some((name, namespace, args)) = hostile.and_then(|h| h.next_call(tools, &used(req)))
        {
            let k = req["input"].as_array().map_or(0, Vec::len);
            let mut item = json!({
                "type": "function_call",
                "id": format!("fc_h{k}"),
                "call_id": format!("call_h{k}"),
                "name": name,
                "arguments": args.to_string(),
            });
            if let Some(ns) = namespace {
                item["namespace"] = json!(ns);
            }
            return (format!("hostile {name}"), respond(item, k));
        }
        let step = next_step(&history, &finder(tools));
        let label = step_label(&step);
        let body = match step {
            Step::Say(t) => text_response(&t, n),
            Step::Call { tool, args } => {
                let offered = finder(tools)(tool);
                let mut item = json!({
                    "type": "function_call",
                    "id": format!("fc_{n}"),
                    "call_id": format!("call_{n}"),
                    "name": offered.as_ref().map(|o| o.call_name.clone()).unwrap_or_else(|| tool.to_string()),
                    "arguments": args.to_string(),
                });
                if let Some(ns) = offered.and_then(|o| o.namespace) {
                    item["namespace"] = json!(ns);
                }
                respond(item, n)
            }
        };
        (label, body)
    }

    /// Every tool name the history called, once per call.
    fn used(req: &Value) -> Vec<String> {
        req["input"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|i| i["type"] == "function_call")
            .filter_map(|i| i["name"].as_str().map(str::to_string))
            .collect()
    }

    fn history(req: &Value) -> Vec<Exchange> {
        let items = req["input"].as_array().cloned().unwrap_or_default();
        let mut out = Vec::new();
        for call in items.iter().filter(|i| i["type"] == "function_call") {
            let Some(tool) = call["name"].as_str().and_then(bare_tool) else {
                continue;
            };
            let Some(output) = items
                .iter()
                .find(|i| i["type"] == "function_call_output" && i["call_id"] == call["call_id"])
            else {
                continue;
            };
            out.push(Exchange {
                tool,
                result: content_text(&output["output"]),
            });
        }
        out
    }

    fn respond(item: Value, n: usize) -> String {
        let id = format!("resp_{n}");
        sse(&[
            json!({"type":"response.created","response":{"id":id}}),
            json!({"type":"response.output_item.done","output_index":0,"item":item}),
            json!({"type":"response.completed","response":{"id":id,"output":[],
                "usage":{"input_tokens":10,"input_tokens_details":null,"output_tokens":5,
                         "output_tokens_details":null,"total_tokens":15}}}),
        ])
    }

    fn text_response(text: &str, n: usize) -> String {
        respond(
            json!({"type":"message","role":"assistant","id":format!("msg_out_{n}"),
                   "content":[{"type":"output_text","text":text,"annotations":[]}]}),
            n,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_tools(_: &str) -> Option<Offered> {
        None
    }

    #[test]
    fn agent_walks_inbox_conversation_send_decide_then_ends() {
        let tray = r#"{"version":1,"conversations":[{"conversation_id":"conv_1","preview":{"message_id":"msg_a"}}]}"#;
        let conv = r#"Wall time: 0.1s
Output:
{"messages":[{"id":"msg_a","seq":1},{"id":"msg_b","seq":2}]}"#;
        let mut h = vec![];
        assert_eq!(
            step_label(&next_step(&h, &no_tools)),
            "call agentchat_inbox"
        );
        h.push(Exchange {
            tool: "agentchat_inbox".into(),
            result: tray.into(),
        });
        assert_eq!(
            next_step(&h, &no_tools),
            Step::Call {
                tool: "agentchat_get_conversation",
                args: json!({"conversation_id":"conv_1"})
            }
        );
        h.push(Exchange {
            tool: "agentchat_get_conversation".into(),
            result: conv.into(),
        });
        match next_step(&h, &no_tools) {
            Step::Call {
                tool: "agentchat_send_message",
                args,
            } => {
                assert_eq!(args["conversation_id"], "conv_1");
                assert_eq!(args["text"], REPLY_TEXT);
            }
            other => panic!("{other:?}"),
        }
        h.push(Exchange {
            tool: "agentchat_send_message".into(),
            result: "{}".into(),
        });
        match next_step(&h, &no_tools) {
            Step::Call {
                tool: "agentchat_decide",
                args,
            } => {
                assert_eq!(args["decision"], "reply");
                assert_eq!(args["through_message_id"], "msg_b");
            }
            other => panic!("{other:?}"),
        }
        h.push(Exchange {
            tool: "agentchat_decide".into(),
            result: "{}".into(),
        });
        assert!(matches!(next_step(&h, &no_tools), Step::Say(_)));
    }

    #[test]
    fn called_names_map_to_bare_tools() {
        assert_eq!(
            bare_tool("mcp__agentchat__agentchat_inbox").as_deref(),
            Some("agentchat_inbox")
        );
        assert_eq!(
            bare_tool("agentchat_decide").as_deref(),
            Some("agentchat_decide")
        );
        assert_eq!(bare_tool("Bash"), None);
    }

    #[test]
    fn empty_tray_ends_the_turn() {
        let h = vec![Exchange {
            tool: "agentchat_inbox".into(),
            result: r#"{"conversations":[]}"#.into(),
        }];
        assert!(matches!(next_step(&h, &no_tools), Step::Say(_)));
    }
}

//! `agentchat mcp [--profile P] [--config F]`: a stdio MCP server for the user's own Claude Code
//! and Codex that relays every JSON-RPC message to the hosted MCP endpoint (`<api_base>/mcp`, or
//! `listen.claude.mcp_url`), with the profile's key as the bearer token.
//!
//! `agentchat setup` registers this command with the CLIs (`claude mcp add`, `codex mcp add`), so
//! the key stays in the profile's key file and never in those CLIs' config files; a rotated key
//! is read again (on start and after a 401) and needs no re-registration.
//!
//! It is a relay, not an MCP implementation (docs/decisions.md, "The MCP bridge is a relay"): one
//! line on stdin is one JSON-RPC message (the MCP stdio transport), POSTed as Streamable HTTP;
//! the answer, plain JSON or a request-scoped SSE stream, goes back as lines on stdout. The
//! session id and protocol version the server names are sent back with each later message.
//! Nothing the server starts by itself (a GET stream) is relayed.

use crate::config::{self, ConfigArgs};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::sync::Mutex;

/// Most bytes of one message from the client, and of one answer from the server.
const MAX_MESSAGE: usize = 8 * 1024 * 1024;
/// How long one message may take at the server (a tool call included).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Messages relayed at once; the next waits for a free slot.
const IN_FLIGHT: usize = 8;

pub const MCP_HELP: &str = "\
Started by Claude Code or Codex (`agentchat setup` registers it): one JSON-RPC message per line
on stdin and stdout, relayed to <api_base>/mcp with the profile's key.

Environment: AGENTCHAT_CONFIG, AGENTCHAT_PROFILE, AGENTCHAT_API_BASE, AGENTCHAT_API_KEY (as
  every command).

Exit codes:
  0  stdin ended
  1  the profile has no usable config or key (the reason on stderr)";

#[derive(Debug, Clone, clap::Args)]
pub struct McpArgs {
    /// Config file (default: config.toml in the platform config dir) [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// The profile whose server and key to use (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
}

/// Where to send and with which key; read again after a refusal.
struct Target {
    url: String,
    key: SecretString,
}

fn load_target(args: &McpArgs) -> anyhow::Result<Target> {
    let settings = config::load(&ConfigArgs {
        config: args.config.clone(),
        profile: args.profile.clone(),
        ..Default::default()
    })?;
    let Some(key) = settings.api_key else {
        anyhow::bail!(
            "profile `{}` has no API key; run `agentchat setup --profile {}`",
            settings.profile,
            settings.profile
        );
    };
    let configured = settings.listen.claude.mcp_url.as_deref().or(settings
        .listen
        .codex
        .mcp_url
        .as_deref());
    Ok(Target {
        url: crate::runtime::agent_cli::mcp_url(&settings.api_base, configured),
        key,
    })
}

/// What the server told us to send back: `Mcp-Session-Id` and the negotiated protocol version.
#[derive(Default)]
struct Session {
    id: Option<String>,
    protocol: Option<String>,
}

struct Relay {
    args: McpArgs,
    http: reqwest::Client,
    target: Mutex<Target>,
    session: Mutex<Session>,
    out: Mutex<tokio::io::Stdout>,
}

pub async fn run_command(args: McpArgs) -> anyhow::Result<i32> {
    let target = load_target(&args)?;
    let http = crate::sys::tls::http_client_builder()
        .timeout(REQUEST_TIMEOUT)
        .connect_timeout(Duration::from_secs(10))
        .user_agent(format!(
            "agentchat-mcp-bridge/{}",
            env!("CARGO_PKG_VERSION")
        ))
        .build()?;
    let relay = Arc::new(Relay {
        args,
        http,
        target: Mutex::new(target),
        session: Mutex::new(Session::default()),
        out: Mutex::new(tokio::io::stdout()),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    loop {
        let line = match read_line(&mut input).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(LineError::TooLong) => {
                relay
                    .write(&rpc_error(Value::Null, -32600, "message too large"))
                    .await;
                continue;
            }
            Err(LineError::Io(e)) => return Err(e.into()),
        };
        if line.trim().is_empty() {
            continue;
        }
        let msg: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                relay
                    .write(&rpc_error(
                        Value::Null,
                        -32700,
                        &format!("Parse error: {e}"),
                    ))
                    .await;
                continue;
            }
        };
        // `initialize` is answered before anything else is sent: its answer may name the session.
        if method_of(&msg) == Some("initialize") {
            relay.forward(msg).await;
            continue;
        }
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let relay = relay.clone();
        tasks.spawn(async move {
            relay.forward(msg).await;
            drop(permit);
        });
        while tasks.try_join_next().is_some() {}
    }
    while tasks.join_next().await.is_some() {}
    Ok(0)
}

enum LineError {
    TooLong,
    Io(std::io::Error),
}

/// One line of at most `MAX_MESSAGE` bytes (a longer one is skipped to its end); `None` at EOF.
async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> Result<Option<String>, LineError> {
    let mut buf = Vec::new();
    let mut too_long = false;
    loop {
        let chunk = r.fill_buf().await.map_err(LineError::Io)?;
        if chunk.is_empty() {
            if buf.is_empty() && !too_long {
                return Ok(None);
            }
            break;
        }
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            buf.extend_from_slice(chunk.get(..take).unwrap_or_default());
            if buf.len() > MAX_MESSAGE {
                too_long = true;
                buf = Vec::new();
            }
        }
        r.consume(take);
        if done {
            break;
        }
    }
    if too_long {
        return Err(LineError::TooLong);
    }
    Ok(Some(String::from_utf8_lossy(&buf).into_owned()))
}

fn method_of(msg: &Value) -> Option<&str> {
    msg.get("method").and_then(Value::as_str)
}

/// The id of a request (a message with a method and an id); notifications and responses have none.
fn request_id(msg: &Value) -> Option<Value> {
    method_of(msg)?;
    msg.get("id").filter(|id| !id.is_null()).cloned()
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// How one POST ended.
enum Answer {
    /// JSON-RPC messages to hand to the client (none for a 202).
    Messages(Vec<Value>),
    Refused(u16),
    Failed(String),
}

impl Relay {
    async fn write(&self, msg: &Value) {
        let mut line = msg.to_string();
        line.push('\n');
        let mut out = self.out.lock().await;
        let _ = out.write_all(line.as_bytes()).await;
        let _ = out.flush().await;
    }

    /// Sends one message and hands the answer back; a refused key is read again once.
    async fn forward(&self, msg: Value) {
        let id = request_id(&msg);
        let mut answer = self.post(&msg).await;
        if let Answer::Refused(_) = answer
            && let Ok(fresh) = load_target(&self.args)
        {
            *self.target.lock().await = fresh;
            answer = self.post(&msg).await;
        }
        let profile = self.args.profile.as_deref().unwrap_or("default");
        match answer {
            Answer::Messages(msgs) => {
                for m in &msgs {
                    self.write(m).await;
                }
            }
            Answer::Refused(status) => {
                if let Some(id) = id {
                    let what = format!(
                        "AgentChat refused the key of profile `{profile}` ({status}); run \
                         `agentchat setup --profile {profile}` with a valid key"
                    );
                    self.write(&rpc_error(id, -32001, &what)).await;
                }
            }
            Answer::Failed(why) => {
                if let Some(id) = id {
                    self.write(&rpc_error(
                        id,
                        -32000,
                        &format!("AgentChat MCP relay: {why}"),
                    ))
                    .await;
                }
            }
        }
    }

    async fn post(&self, msg: &Value) -> Answer {
        let (url, key) = {
            let t = self.target.lock().await;
            (t.url.clone(), t.key.clone())
        };
        let mut req = self
            .http
            .post(&url)
            .bearer_auth(key.expose_secret())
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(msg.to_string());
        {
            let s = self.session.lock().await;
            if let Some(id) = &s.id {
                req = req.header("mcp-session-id", id);
            }
            if let Some(p) = &s.protocol {
                req = req.header("mcp-protocol-version", p);
            }
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Answer::Failed(crate::client::network_problem(&e)),
        };
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return Answer::Refused(status);
        }
        if let Some(sid) = resp
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
        {
            self.session.lock().await.id = Some(sid.to_string());
        }
        let sse = crate::client::content_type(resp.headers())
            .is_some_and(|c| crate::client::media_type(&c) == "text/event-stream");
        let body = match read_capped(resp).await {
            Ok(b) => b,
            Err(why) => return Answer::Failed(why),
        };
        if !(200..300).contains(&status) {
            return Answer::Failed(format!("{url} answered {status}"));
        }
        let msgs = if sse {
            sse_messages(&body)
        } else if body.iter().all(u8::is_ascii_whitespace) {
            Vec::new()
        } else {
            match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Array(batch)) => batch,
                Ok(v) => vec![v],
                Err(e) => return Answer::Failed(format!("{url} answered no JSON: {e}")),
            }
        };
        if method_of(msg) == Some("initialize")
            && let Some(v) = msgs
                .iter()
                .find_map(|m| m.pointer("/result/protocolVersion").and_then(Value::as_str))
        {
            self.session.lock().await.protocol = Some(v.to_string());
        }
        Answer::Messages(msgs)
    }
}

async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_MESSAGE {
                    return Err(format!("the answer is larger than {MAX_MESSAGE} bytes"));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(crate::client::network_problem(&e)),
        }
    }
}

/// The JSON messages of an SSE body: each event's `data:` lines joined by newlines.
fn sse_messages(body: &[u8]) -> Vec<Value> {
    let text = String::from_utf8_lossy(body);
    let mut out = Vec::new();
    let mut data = String::new();
    let flush = |data: &mut String, out: &mut Vec<Value>| {
        if !data.is_empty() {
            if let Ok(v) = serde_json::from_str::<Value>(data) {
                match v {
                    Value::Array(batch) => out.extend(batch),
                    v => out.push(v),
                }
            }
            data.clear();
        }
    };
    for line in text.lines() {
        if line.is_empty() {
            flush(&mut data, &mut out);
        } else if let Some(rest) = line.strip_prefix("data:") {
            if !data.is_empty() {
                data.push('\n');
            }
            data.push_str(rest.strip_prefix(' ').unwrap_or(rest));
        }
    }
    flush(&mut data, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sse_events_become_messages_and_comments_are_skipped() {
        let body = b": ping\n\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\n\
                     data: \"id\":1,\"result\":{}}\n\ndata: [{\"a\":1},{\"b\":2}]\n";
        let msgs = sse_messages(body);
        assert_eq!(msgs.len(), 3);
        assert_eq!(msgs[0]["id"], 1);
        assert_eq!(msgs[2]["b"], 2);
    }

    #[test]
    fn only_requests_have_an_id_to_answer() {
        assert_eq!(
            request_id(&json!({"jsonrpc":"2.0","id":7,"method":"tools/list"})),
            Some(json!(7))
        );
        assert_eq!(
            request_id(&json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            None
        );
        assert_eq!(
            request_id(&json!({"jsonrpc":"2.0","id":7,"result":{}})),
            None
        );
    }

    #[tokio::test]
    async fn lines_are_read_whole_and_an_oversized_one_is_skipped() {
        let big = "x".repeat(MAX_MESSAGE + 10);
        let input = format!("{{\"a\":1}}\n{big}\nlast");
        let mut r = tokio::io::BufReader::new(input.as_bytes());
        assert_eq!(
            read_line(&mut r).await.ok().flatten().as_deref(),
            Some("{\"a\":1}\n")
        );
        assert!(matches!(read_line(&mut r).await, Err(LineError::TooLong)));
        assert_eq!(
            read_line(&mut r).await.ok().flatten().as_deref(),
            Some("last")
        );
        assert!(matches!(read_line(&mut r).await, Ok(None)));
    }
}

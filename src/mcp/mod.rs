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

mod message;

use crate::config::{self, ConfigArgs};
use message::{Id, LineError, MAX_MESSAGE, Outgoing};
use secrecy::{ExposeSecret, SecretString};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use tokio::sync::Mutex;

/// How long one message may take at the server (a tool call included). An honoured
/// `AGENTCHAT_TEST_TIME_SCALE` (a loopback `api_base`) divides it, as the listener's own timers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Messages relayed at once. A slot is taken before a line is read, so at most this many
/// messages (and their answers) are in memory: docs/integrating.md, "The MCP bridge".
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
    /// [`REQUEST_TIMEOUT`] as the profile's test time scale makes it.
    limit: Duration,
}

fn load_target(args: &McpArgs) -> anyhow::Result<Target> {
    let settings = config::ConfigFile::read(&ConfigArgs {
        config: args.config.clone(),
        profile: args.profile.clone(),
        ..Default::default()
    })?
    .settings(None, config::KeyFile::Read)?;
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
    let limit = REQUEST_TIMEOUT
        .div_f64(settings.time_scale.factor())
        .max(Duration::from_millis(100));
    Ok(Target {
        url: crate::runtime::agent_cli::mcp_url(&settings.api_base, configured),
        key,
        limit,
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
    limit: Duration,
    target: Mutex<Target>,
    session: Mutex<Session>,
    out: Mutex<tokio::io::Stdout>,
}

pub async fn run_command(args: McpArgs) -> anyhow::Result<i32> {
    let target = load_target(&args)?;
    let limit = target.limit;
    let http = crate::sys::tls::http_client_builder()
        .timeout(limit)
        .connect_timeout(Duration::from_secs(10).min(limit))
        .user_agent(format!(
            "agentchat-mcp-bridge/{}",
            env!("CARGO_PKG_VERSION")
        ))
        .build()?;
    let relay = Arc::new(Relay {
        args,
        http,
        limit,
        target: Mutex::new(target),
        session: Mutex::new(Session::default()),
        out: Mutex::new(tokio::io::stdout()),
    });
    let slots = Arc::new(tokio::sync::Semaphore::new(IN_FLIGHT));
    let mut tasks = tokio::task::JoinSet::new();
    let mut input = tokio::io::BufReader::new(tokio::io::stdin());
    loop {
        // The slot first: a line waits in the pipe, not in memory, while 8 are in flight.
        let Ok(permit) = slots.clone().acquire_owned().await else {
            break;
        };
        let line = match message::read_line(&mut input).await {
            Ok(Some(line)) => line,
            Ok(None) => break,
            Err(LineError::TooLong) => {
                let what = format!("message too large (over {MAX_MESSAGE} bytes)");
                relay.write(&rpc_error(Value::Null, -32600, &what)).await;
                continue;
            }
            Err(LineError::Io(e)) => return Err(e.into()),
        };
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let msg = match message::outgoing(line) {
            Ok(msg) => msg,
            Err(refusal) => {
                relay
                    .write(&rpc_error(Value::Null, refusal.code, &refusal.message))
                    .await;
                continue;
            }
        };
        // `initialize` is answered before anything else is sent: its answer may name the session.
        if msg.initialize {
            relay.forward(msg).await;
            continue;
        }
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

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
}

/// How one POST ended. Whatever the server sent was handed to the client as it came.
enum PostEnd {
    /// The response to the request (or, for a message without an id, any answer) was relayed.
    Answered,
    /// The server answered, but not with the response to this request: what came instead.
    NoResponse(String),
    Refused(u16),
    Failed(String),
}

/// What became of one message of the server's.
#[derive(PartialEq)]
enum Relayed {
    NotJson,
    Other,
    Response,
}

impl Relay {
    async fn write(&self, msg: &Value) {
        let mut line = msg.to_string().into_bytes();
        line.push(b'\n');
        self.write_line(&line).await;
    }

    /// `line` (one JSON text with its newline) to stdout, whole.
    async fn write_line(&self, line: &[u8]) {
        let mut out = self.out.lock().await;
        let _ = out.write_all(line).await;
        let _ = out.flush().await;
    }

    /// Hands one message of the server's (one JSON text) to the client as one line, and says
    /// whether it was the response to `id`. A text that is not JSON is dropped.
    async fn relay_answer(&self, text: Vec<u8>, id: Option<&Id>, initialize: bool) -> Relayed {
        let Some(mut line) = message::one_line(text) else {
            return Relayed::NotJson;
        };
        let responds = id.is_some_and(|id| message::responds_to(&line, id));
        if initialize
            && responds
            && let Some(v) = message::protocol_version(&line)
        {
            self.session.lock().await.protocol = Some(v);
        }
        line.push(b'\n');
        self.write_line(&line).await;
        if responds {
            Relayed::Response
        } else {
            Relayed::Other
        }
    }

    /// Sends one message; a refused key is read again once. A request gets exactly one answer:
    /// the server's response, or a JSON-RPC error saying what came back instead.
    async fn forward(&self, msg: Outgoing) {
        let mut outcome = self.post(&msg).await;
        if let PostEnd::Refused(_) = outcome
            && let Ok(fresh) = load_target(&self.args)
        {
            *self.target.lock().await = fresh;
            outcome = self.post(&msg).await;
        }
        let Some(id) = msg.id else {
            return;
        };
        let profile = self.args.profile.as_deref().unwrap_or("default");
        let (code, what) = match outcome {
            PostEnd::Answered => return,
            PostEnd::Refused(status) => (
                -32001,
                format!(
                    "AgentChat refused the key of profile `{profile}` ({status}); run \
                     `agentchat setup --profile {profile}` with a valid key"
                ),
            ),
            PostEnd::NoResponse(why) | PostEnd::Failed(why) => {
                (-32000, format!("AgentChat MCP relay: {why}"))
            }
        };
        self.write(&rpc_error(id.to_value(), code, &what)).await;
    }

    /// A network error in words; a time-out names the time the bridge actually waited (the
    /// client's words name the listener's REST limits, not this one).
    fn problem(&self, e: &reqwest::Error, url: &str, started: Instant) -> String {
        if !e.is_timeout() {
            return crate::client::network_problem(e);
        }
        let waited = whole_secs(started.elapsed());
        if e.is_connect() {
            format!("no connection to {url} within {waited} s")
        } else {
            format!(
                "no answer from {url} within {waited} s (the bridge waits at most {} s for one \
                 message)",
                whole_secs(self.limit)
            )
        }
    }

    async fn post(&self, msg: &Outgoing) -> PostEnd {
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
            .body(msg.body.clone());
        {
            let s = self.session.lock().await;
            if let Some(id) = &s.id {
                req = req.header("mcp-session-id", id);
            }
            if let Some(p) = &s.protocol {
                req = req.header("mcp-protocol-version", p);
            }
        }
        let started = Instant::now();
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return PostEnd::Failed(self.problem(&e, &url, started)),
        };
        let status = resp.status().as_u16();
        if status == 401 || status == 403 {
            return PostEnd::Refused(status);
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
        let id = msg.id.as_ref();
        if sse && (200..300).contains(&status) {
            return self
                .relay_events(resp, &url, id, msg.initialize, started)
                .await;
        }
        let body = match read_capped(resp).await {
            Ok(b) => b,
            Err(ReadError::TooLarge) => {
                return PostEnd::Failed(format!("the answer is larger than {MAX_MESSAGE} bytes"));
            }
            Err(ReadError::Network(e)) => return PostEnd::Failed(self.problem(&e, &url, started)),
        };
        let empty = body.iter().all(u8::is_ascii_whitespace);
        if !(200..300).contains(&status) {
            // An error status may still carry the JSON-RPC response (a 400 for a bad request).
            if !empty && self.relay_answer(body, id, msg.initialize).await == Relayed::Response {
                return PostEnd::Answered;
            }
            return PostEnd::Failed(format!("{url} answered {status}"));
        }
        let Some(id) = id else {
            if !empty {
                self.relay_answer(body, None, false).await;
            }
            return PostEnd::Answered;
        };
        if empty {
            return PostEnd::NoResponse(format!(
                "{url} answered {status} with an empty body, no response to this request"
            ));
        }
        match self.relay_answer(body, Some(id), msg.initialize).await {
            Relayed::Response => PostEnd::Answered,
            Relayed::NotJson => PostEnd::NoResponse(format!(
                "{url} answered {status} with a body that is not JSON, no response to this \
                 request"
            )),
            Relayed::Other => PostEnd::NoResponse(format!(
                "{url} answered {status} with JSON that is not the response to this request"
            )),
        }
    }

    /// An SSE answer: each event's message handed on as it arrives, until the response to the
    /// request (then the stream is dropped) or the stream's end.
    async fn relay_events(
        &self,
        mut resp: reqwest::Response,
        url: &str,
        id: Option<&Id>,
        initialize: bool,
        started: Instant,
    ) -> PostEnd {
        let mut sse = message::Sse::default();
        let mut events = Vec::new();
        let mut relayed = 0usize;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(chunk)) => chunk,
                Ok(None) => break,
                Err(e) => {
                    return PostEnd::Failed(format!(
                        "{} (after {relayed} messages of its event stream)",
                        self.problem(&e, url, started)
                    ));
                }
            };
            if sse.feed(&chunk, &mut events).is_err() {
                return PostEnd::Failed(format!(
                    "an event of {url}'s stream is larger than {MAX_MESSAGE} bytes"
                ));
            }
            for event in events.drain(..) {
                relayed += 1;
                if self.relay_answer(event, id, initialize).await == Relayed::Response {
                    return PostEnd::Answered;
                }
            }
        }
        sse.finish(&mut events);
        for event in events.drain(..) {
            relayed += 1;
            if self.relay_answer(event, id, initialize).await == Relayed::Response {
                return PostEnd::Answered;
            }
        }
        match id {
            None => PostEnd::Answered,
            Some(_) => PostEnd::NoResponse(format!(
                "{url}'s event stream ended without a response to this request ({relayed} \
                 other messages)"
            )),
        }
    }
}

/// `d` in whole seconds, rounded to the nearest.
fn whole_secs(d: Duration) -> u64 {
    u64::try_from(d.as_millis().saturating_add(500) / 1000).unwrap_or(u64::MAX)
}

enum ReadError {
    TooLarge,
    Network(reqwest::Error),
}

/// The body, refused past [`MAX_MESSAGE`] (a `Content-Length` over it before anything is read).
async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, ReadError> {
    let announced = resp.content_length().unwrap_or(0);
    if announced > MAX_MESSAGE as u64 {
        return Err(ReadError::TooLarge);
    }
    let mut body = Vec::with_capacity(usize::try_from(announced).unwrap_or(0));
    loop {
        match resp.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > MAX_MESSAGE {
                    return Err(ReadError::TooLarge);
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(body),
            Err(e) => return Err(ReadError::Network(e)),
        }
    }
}

//! What the bridge reads of a JSON-RPC message: its `id` and `method`, never a tree of the whole
//! message, so a message costs its own bytes and no more (docs/integrating.md, "The MCP bridge").
//! Also the stdio side's lines and the SSE side's events, each capped at [`MAX_MESSAGE`].

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_json::Value;
use std::borrow::Cow;

/// Most bytes of one message from the client, and of one answer from the server.
pub const MAX_MESSAGE: usize = 8 * 1024 * 1024;

/// A JSON-RPC id: a string or a number (`null` is no id, JSON-RPC 2.0 section 4). Read without
/// building a `Value`, so an id of another type is an invalid request, not a tree.
#[derive(Debug, Clone, PartialEq)]
pub enum Id {
    Str(String),
    Num(serde_json::Number),
}

impl Id {
    pub fn to_value(&self) -> Value {
        match self {
            Id::Str(s) => Value::String(s.clone()),
            Id::Num(n) => Value::Number(n.clone()),
        }
    }
}

impl<'de> Deserialize<'de> for Id {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Id;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Id, E> {
                Ok(Id::Str(v.to_string()))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Id, E> {
                Ok(Id::Num(v.into()))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Id, E> {
                Ok(Id::Num(v.into()))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Id, E> {
                serde_json::Number::from_f64(v)
                    .map(Id::Num)
                    .ok_or_else(|| E::custom("not a finite number"))
            }
        }
        d.deserialize_any(V)
    }
}

/// The members the relay reads; every other one is skipped unread (`IgnoredAny`).
#[derive(Deserialize)]
struct Head<'a> {
    #[serde(default, borrow)]
    method: Option<Cow<'a, str>>,
    #[serde(default)]
    id: Option<Id>,
    #[serde(default)]
    result: Option<IgnoredAny>,
    #[serde(default)]
    error: Option<IgnoredAny>,
}

/// One message from the client, ready to POST as it came.
#[derive(Debug)]
pub struct Outgoing {
    pub body: hyper::body::Bytes,
    /// A request's id: it gets exactly one answer. Notifications, responses and batches have none.
    pub id: Option<Id>,
    pub initialize: bool,
}

/// Why a line is not relayed: the JSON-RPC error to answer it with (always `id: null`).
#[derive(Debug, PartialEq)]
pub struct Refusal {
    pub code: i64,
    pub message: String,
}

fn first_byte(bytes: &[u8]) -> Option<u8> {
    bytes.iter().copied().find(|b| !b.is_ascii_whitespace())
}

/// Reads `line`'s `id` and `method` and keeps its bytes as they are. A batch (an array, MCP
/// before 2025-06-18) is checked to be JSON and relayed whole, with no id to answer.
pub fn outgoing(line: Vec<u8>) -> Result<Outgoing, Refusal> {
    let refuse = |e: serde_json::Error| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Data => Refusal {
                code: -32600,
                message: format!("Invalid Request: {e}"),
            },
            _ => Refusal {
                code: -32700,
                message: format!("Parse error: {e}"),
            },
        }
    };
    let (id, initialize) = if first_byte(&line) == Some(b'[') {
        serde_json::from_slice::<IgnoredAny>(&line).map_err(refuse)?;
        (None, false)
    } else {
        let head: Head = serde_json::from_slice(&line).map_err(refuse)?;
        let initialize = head.method.as_deref() == Some("initialize");
        // Only a request (a method and an id) is answered; a response to the server has an id too.
        (head.method.and(head.id), initialize)
    };
    Ok(Outgoing {
        body: hyper::body::Bytes::from(line),
        id,
        initialize,
    })
}

/// Whether `message` (one JSON text) is the response to the request `id`: no method, that id,
/// and a `result` or an `error`.
pub fn responds_to(message: &[u8], id: &Id) -> bool {
    serde_json::from_slice::<Head>(message).is_ok_and(|h| {
        h.method.is_none() && h.id.as_ref() == Some(id) && (h.result.is_some() || h.error.is_some())
    })
}

/// `result.protocolVersion` of an `initialize` answer.
pub fn protocol_version(message: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Answer<'a> {
        #[serde(borrow)]
        result: Option<InitResult<'a>>,
    }
    #[derive(Deserialize)]
    struct InitResult<'a> {
        #[serde(rename = "protocolVersion", borrow)]
        protocol_version: Option<Cow<'a, str>>,
    }
    let a: Answer = serde_json::from_slice(message).ok()?;
    a.result?.protocol_version.map(Cow::into_owned)
}

/// `json` as one stdio line: checked to be one JSON text, then every CR and LF (outside strings
/// they can only be whitespace, inside they must be escaped) made a space. `None` if not JSON.
pub fn one_line(mut json: Vec<u8>) -> Option<Vec<u8>> {
    serde_json::from_slice::<IgnoredAny>(&json).ok()?;
    for b in &mut json {
        if *b == b'\n' || *b == b'\r' {
            *b = b' ';
        }
    }
    Some(json)
}

/// A line on stdin longer than [`MAX_MESSAGE`] (skipped to its end).
#[derive(Debug)]
pub enum LineError {
    TooLong,
    Io(std::io::Error),
}

/// One line of at most `MAX_MESSAGE` bytes, without its newline (a longer one is skipped to its
/// end, never held); `None` at EOF.
pub async fn read_line<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> Result<Option<Vec<u8>>, LineError> {
    use tokio::io::AsyncBufReadExt;
    let mut buf = Vec::new();
    let mut too_long = false;
    let mut any = false;
    loop {
        let chunk = r.fill_buf().await.map_err(LineError::Io)?;
        if chunk.is_empty() {
            if !any {
                return Ok(None);
            }
            break;
        }
        any = true;
        let (take, done) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        if !too_long {
            let line = chunk.get(..take).unwrap_or_default();
            let line = line.strip_suffix(b"\n").unwrap_or(line);
            if buf.len() + line.len() > MAX_MESSAGE {
                too_long = true;
                buf = Vec::new();
            } else {
                buf.extend_from_slice(line);
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
    buf.shrink_to_fit();
    Ok(Some(buf))
}

/// An SSE body read as it arrives (the event stream format of the HTML standard, as MCP's
/// Streamable HTTP uses it): each event's `data:` lines joined by LF. A line or an event's data
/// over [`MAX_MESSAGE`] ends the stream.
#[derive(Default)]
pub struct Sse {
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
}

/// An SSE line or event larger than [`MAX_MESSAGE`].
#[derive(Debug)]
pub struct TooLarge;

impl Sse {
    /// Feeds `chunk`; the data of every event it completes goes to `events`.
    pub fn feed(&mut self, chunk: &[u8], events: &mut Vec<Vec<u8>>) -> Result<(), TooLarge> {
        let mut rest = chunk;
        while let Some(i) = rest.iter().position(|b| *b == b'\n') {
            let (head, tail) = rest.split_at(i);
            self.push_line_part(head)?;
            rest = tail.get(1..).unwrap_or_default();
            let line = std::mem::take(&mut self.line);
            self.end_line(&line, events)?;
        }
        self.push_line_part(rest)
    }

    /// The stream ended: an event without its blank line still counts.
    pub fn finish(&mut self, events: &mut Vec<Vec<u8>>) {
        let line = std::mem::take(&mut self.line);
        let _ = self.end_line(&line, events);
        let _ = self.end_line(b"", events);
    }

    fn push_line_part(&mut self, part: &[u8]) -> Result<(), TooLarge> {
        if self.line.len() + part.len() > MAX_MESSAGE + 16 {
            return Err(TooLarge);
        }
        self.line.extend_from_slice(part);
        Ok(())
    }

    fn end_line(&mut self, line: &[u8], events: &mut Vec<Vec<u8>>) -> Result<(), TooLarge> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.has_data {
                events.push(std::mem::take(&mut self.data));
                self.has_data = false;
            }
            return Ok(());
        }
        if let Some(value) = line.strip_prefix(b"data:") {
            let value = value.strip_prefix(b" ").unwrap_or(value);
            if self.data.len() + value.len() + 1 > MAX_MESSAGE {
                return Err(TooLarge);
            }
            if self.has_data {
                self.data.push(b'\n');
            }
            self.data.extend_from_slice(value);
            self.has_data = true;
        }
        // Comments (`:`), `event:`, `id:` and `retry:` change nothing the relay hands on.
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn events(body: &[u8], chunk: usize) -> Vec<String> {
        let mut sse = Sse::default();
        let mut out = Vec::new();
        for c in body.chunks(chunk) {
            sse.feed(c, &mut out).unwrap();
        }
        sse.finish(&mut out);
        out.into_iter()
            .map(|e| String::from_utf8(e).unwrap())
            .collect()
    }

    #[test]
    fn sse_events_are_their_data_lines_joined_in_any_chunking() {
        let body = b": ping\n\nevent: message\r\ndata: {\"jsonrpc\":\"2.0\",\r\n\
                     data: \"id\":1,\"result\":{}}\r\n\r\nid: 7\ndata: [{\"a\":1}]";
        for chunk in [1, 3, 7, body.len()] {
            assert_eq!(
                events(body, chunk),
                [
                    "{\"jsonrpc\":\"2.0\",\n\"id\":1,\"result\":{}}",
                    "[{\"a\":1}]"
                ],
                "chunk {chunk}"
            );
        }
    }

    #[test]
    fn an_sse_event_over_the_cap_ends_the_stream() {
        let mut sse = Sse::default();
        let mut out = Vec::new();
        let big = vec![b'x'; MAX_MESSAGE];
        sse.feed(b"data: ", &mut out).unwrap();
        sse.feed(&big, &mut out).unwrap();
        assert!(sse.feed(b"\n", &mut out).is_err());
        // A line that never ends is cut at the cap too, before its end is seen.
        let mut sse = Sse::default();
        assert!(sse.feed(&big, &mut out).is_ok());
        assert!(sse.feed(&[b'x'; 32], &mut out).is_err());
        assert!(out.is_empty());
    }

    #[test]
    fn only_requests_have_an_id_to_answer() {
        let id = |v: serde_json::Value| outgoing(v.to_string().into_bytes()).unwrap().id;
        assert_eq!(
            id(json!({"jsonrpc":"2.0","id":7,"method":"tools/list"})),
            Some(Id::Num(7.into()))
        );
        assert_eq!(
            id(json!({"jsonrpc":"2.0","id":"a","method":"x"})),
            Some(Id::Str("a".into()))
        );
        assert_eq!(
            id(json!({"jsonrpc":"2.0","method":"notifications/initialized"})),
            None
        );
        assert_eq!(id(json!({"jsonrpc":"2.0","id":7,"result":{}})), None);
        assert_eq!(id(json!({"jsonrpc":"2.0","id":null,"method":"x"})), None);
        assert_eq!(id(json!([{"jsonrpc":"2.0","id":1,"method":"x"}])), None);
        let init = outgoing(br#"{"id":1,"method":"initialize","params":{}}"#.to_vec()).unwrap();
        assert!(init.initialize);
    }

    #[test]
    fn a_message_is_kept_byte_for_byte_and_bad_ones_are_refused_by_kind() {
        let text = br#"{ "params": {"a": [1, 2.50, "\n"]}, "method": "x", "id": 3 }"#;
        assert_eq!(outgoing(text.to_vec()).unwrap().body.as_ref(), text);
        assert_eq!(outgoing(b"{\"id\":".to_vec()).unwrap_err().code, -32700);
        assert_eq!(outgoing(b"not json".to_vec()).unwrap_err().code, -32700);
        let bad_id = outgoing(br#"{"id":[1],"method":"x"}"#.to_vec()).unwrap_err();
        assert_eq!(bad_id.code, -32600, "{bad_id:?}");
    }

    #[test]
    fn a_response_is_recognised_by_its_id_and_a_result_or_error() {
        let one = Id::Num(1.into());
        assert!(responds_to(
            br#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            &one
        ));
        assert!(responds_to(br#"{"id":1,"error":{"code":-1}}"#, &one));
        assert!(!responds_to(br#"{"id":2,"result":{}}"#, &one));
        assert!(!responds_to(br#"{"id":"1","result":{}}"#, &one));
        assert!(!responds_to(br#"{"id":1,"method":"ping"}"#, &one));
        assert!(!responds_to(
            br#"{"method":"notifications/progress"}"#,
            &one
        ));
        assert!(!responds_to(b"", &one));
    }

    #[test]
    fn an_answer_becomes_one_line_and_not_json_is_none() {
        let pretty = b"{\r\n  \"id\": 1,\n  \"result\": {\"t\": \"a\\nb\"}\n}\n".to_vec();
        let line = one_line(pretty).unwrap();
        assert!(!line.contains(&b'\n') && !line.contains(&b'\r'));
        let v: serde_json::Value = serde_json::from_slice(&line).unwrap();
        assert_eq!(v["result"]["t"], "a\nb");
        assert_eq!(one_line(b"{\"id\":".to_vec()), None);
        assert_eq!(
            protocol_version(br#"{"id":1,"result":{"protocolVersion":"2025-06-18"}}"#).as_deref(),
            Some("2025-06-18")
        );
    }

    #[tokio::test]
    async fn lines_are_read_whole_and_an_oversized_one_is_skipped() {
        let big = "x".repeat(MAX_MESSAGE + 10);
        let input = format!("{{\"a\":1}}\n{big}\nlast");
        let mut r = tokio::io::BufReader::new(input.as_bytes());
        assert_eq!(
            read_line(&mut r).await.ok().flatten().as_deref(),
            Some(&b"{\"a\":1}"[..])
        );
        assert!(matches!(read_line(&mut r).await, Err(LineError::TooLong)));
        assert_eq!(
            read_line(&mut r).await.ok().flatten().as_deref(),
            Some(&b"last"[..])
        );
        assert!(matches!(read_line(&mut r).await, Ok(None)));
    }
}

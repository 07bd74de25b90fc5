//! The socket through an egress proxy, by the rules REST follows: reqwest picks its proxy with
//! hyper-util's `Matcher::from_system` (`HTTPS_PROXY`/`https_proxy` for `https://`,
//! `HTTP_PROXY`/`http_proxy` for `http://`, `ALL_PROXY`/`all_proxy` for both, `NO_PROXY`/
//! `no_proxy` to go direct; `HTTP_PROXY` ignored under CGI), and so does the socket, for the
//! `https://`/`http://` form of its `wss://`/`ws://` URL. The tunnel is HTTP `CONNECT` to an
//! `http://` proxy, with the proxy URL's credentials as `Proxy-Authorization: Basic`. Neither the
//! credentials nor the proxy URL's user part ever reach a log or an error: a proxy is named by
//! its host and port only.

use hyper_util::client::proxy::matcher::{Intercept, Matcher};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The most a proxy's answer to `CONNECT` may be before the tunnel (its status line and
/// headers): a proxy that sends more is refused.
const MAX_ANSWER_BYTES: usize = 16 * 1024;

/// The proxy for the socket URL `ws_url`, or `None` to dial directly. The environment is read
/// once per process, as reqwest's client reads it when it is built.
pub fn for_socket(ws_url: &str) -> Option<Intercept> {
    static MATCHER: std::sync::OnceLock<Matcher> = std::sync::OnceLock::new();
    intercept(MATCHER.get_or_init(Matcher::from_system), ws_url)
}

/// `ws_url` as the `http`/`https` URL REST would use for the same host, matched against `m`.
pub fn intercept(m: &Matcher, ws_url: &str) -> Option<Intercept> {
    let as_http = if let Some(rest) = ws_url.strip_prefix("wss://") {
        format!("https://{rest}")
    } else if let Some(rest) = ws_url.strip_prefix("ws://") {
        format!("http://{rest}")
    } else {
        ws_url.to_string()
    };
    let uri: hyper::Uri = as_http.parse().ok()?;
    m.intercept(&uri)
}

/// The proxy as the log may name it: scheme, host and port, never its user or password.
pub fn shown(p: &Intercept) -> String {
    let uri = p.uri();
    let scheme = uri.scheme_str().unwrap_or("http");
    let host = uri.host().unwrap_or("?");
    match uri.port_u16() {
        Some(port) => format!("{scheme}://{host}:{port}"),
        None => format!("{scheme}://{host}"),
    }
}

/// Why no tunnel: each names the proxy by `shown` only.
#[derive(Debug, thiserror::Error)]
pub enum TunnelError {
    #[error(
        "the proxy {0} is not an http:// proxy; the socket can only tunnel through http:// proxies (HTTP CONNECT)"
    )]
    Unsupported(String),
    #[error("cannot reach the proxy {proxy}: {error}")]
    Connect {
        proxy: String,
        error: std::io::Error,
    },
    #[error("the proxy {proxy} refused the tunnel to {target}: {status}")]
    Refused {
        proxy: String,
        target: String,
        status: String,
    },
    #[error("the proxy {0} answered CONNECT with something that is not HTTP")]
    BadAnswer(String),
}

/// Opens a TCP connection to the proxy and asks it for a tunnel to `host:port` (`CONNECT`).
/// The stream that comes back carries the socket's bytes (TLS for `wss://`) as a direct one
/// would. Time-limited by the caller (the connect timeout).
pub async fn tunnel(p: &Intercept, host: &str, port: u16) -> Result<TcpStream, TunnelError> {
    let proxy = shown(p);
    let uri = p.uri();
    if uri.scheme_str() != Some("http") {
        return Err(TunnelError::Unsupported(proxy));
    }
    let proxy_host = uri
        .host()
        .map(|h| h.trim_start_matches('[').trim_end_matches(']'))
        .unwrap_or_default();
    let proxy_port = uri.port_u16().unwrap_or(80);
    let connect_err = |error| TunnelError::Connect {
        proxy: proxy.clone(),
        error,
    };
    let mut stream = TcpStream::connect((proxy_host, proxy_port))
        .await
        .map_err(connect_err)?;
    let _ = stream.set_nodelay(true);
    let target = if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    };
    let mut head = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
    if let Some(auth) = p.basic_auth().and_then(|v| v.to_str().ok()) {
        head.push_str("Proxy-Authorization: ");
        head.push_str(auth);
        head.push_str("\r\n");
    }
    head.push_str("\r\n");
    stream
        .write_all(head.as_bytes())
        .await
        .map_err(connect_err)?;
    let answer = read_answer(&mut stream)
        .await
        .map_err(connect_err)?
        .ok_or_else(|| TunnelError::BadAnswer(proxy.clone()))?;
    let status_line = answer.lines().next().unwrap_or_default();
    let mut parts = status_line.splitn(3, ' ');
    let (version, code) = (parts.next().unwrap_or_default(), parts.next());
    if !version.starts_with("HTTP/1.") {
        return Err(TunnelError::BadAnswer(proxy));
    }
    match code.and_then(|c| c.parse::<u16>().ok()) {
        Some(200..=299) => Ok(stream),
        Some(code) => Err(TunnelError::Refused {
            proxy,
            target,
            status: match code {
                401 | 407 => format!(
                    "HTTP {code} (proxy authentication required: check the user and password in the proxy URL)"
                ),
                code => format!("HTTP {code}"),
            },
        }),
        None => Err(TunnelError::BadAnswer(proxy)),
    }
}

/// Reads the proxy's answer up to its blank line, one byte at a time so that nothing of the
/// tunnel behind it is taken (the server speaks first only after our upgrade request, but a
/// proxy may send its answer in pieces). `None` for an answer over `MAX_ANSWER_BYTES` or cut
/// short.
async fn read_answer(stream: &mut TcpStream) -> std::io::Result<Option<String>> {
    let mut answer = Vec::with_capacity(256);
    let mut byte = [0u8; 1];
    while !answer.ends_with(b"\r\n\r\n") {
        if answer.len() >= MAX_ANSWER_BYTES {
            return Ok(None);
        }
        if stream.read(&mut byte).await? == 0 {
            return Ok(None);
        }
        answer.extend_from_slice(&byte);
    }
    Ok(Some(String::from_utf8_lossy(&answer).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matcher(all: &str, http: &str, https: &str, no: &str) -> Matcher {
        Matcher::builder()
            .all(all.to_string())
            .http(http.to_string())
            .https(https.to_string())
            .no(no.to_string())
            .build()
    }

    #[test]
    fn the_socket_takes_the_proxy_rest_would_take_for_its_scheme_and_no_proxy() {
        let m = matcher("", "http://p1:3128", "http://u:pw@p2:8080", "");
        let wss = intercept(&m, "wss://api.agentchat.me/v1/ws").unwrap();
        assert_eq!(shown(&wss), "http://p2:8080", "wss:// takes HTTPS_PROXY");
        assert!(wss.basic_auth().is_some());
        let ws = intercept(&m, "ws://127.0.0.1:9/v1/ws").unwrap();
        assert_eq!(shown(&ws), "http://p1:3128", "ws:// takes HTTP_PROXY");
        assert!(ws.basic_auth().is_none());
        // ALL_PROXY for both; NO_PROXY by domain suffix, IP and "*".
        let m = matcher("http://all:1", "", "", "agentchat.me,10.0.0.0/8");
        assert_eq!(
            shown(&intercept(&m, "ws://h.example/v1/ws").unwrap()),
            "http://all:1"
        );
        assert!(intercept(&m, "wss://api.agentchat.me/v1/ws").is_none());
        assert!(intercept(&m, "ws://10.1.2.3:80/v1/ws").is_none());
        assert!(intercept(&matcher("http://all:1", "", "", "*"), "ws://x/v1/ws").is_none());
        assert!(intercept(&matcher("", "", "", ""), "wss://x/v1/ws").is_none());
    }

    #[test]
    fn a_proxy_is_shown_without_its_credentials() {
        let m = matcher("http://alice:s3cret@proxy.local:3128", "", "", "");
        let p = intercept(&m, "wss://x/v1/ws").unwrap();
        let s = shown(&p);
        assert_eq!(s, "http://proxy.local:3128");
        assert!(!s.contains("alice") && !s.contains("s3cret"));
        let e = TunnelError::Refused {
            proxy: s,
            target: "x:443".into(),
            status: "HTTP 407".into(),
        };
        assert!(!e.to_string().contains("s3cret"));
    }
}

//! One readable line for a request that got no answer (reqwest's error chain, said once).

use super::{CONNECT_TIMEOUT, REQUEST_TIMEOUT};

/// One line for a request that got no answer, each cause once: reqwest's chain repeats the URL
/// and wraps the OS error in two or three layers ("error sending request for url (…): client
/// error (Connect): tcp connect error: Connection refused (os error 111)"). Never the key: no
/// layer holds a header.
pub fn network_problem(e: &reqwest::Error) -> String {
    let chain = causes(e);
    let host = e
        .url()
        .and_then(|u| u.host_str())
        .unwrap_or("the host")
        .to_string();
    if chain
        .iter()
        .any(|c| c.to_ascii_lowercase().contains("dns error"))
    {
        return format!("cannot resolve the host name {host}");
    }
    if e.is_timeout() {
        return if e.is_connect() {
            format!(
                "no connection to {host} within {} s",
                CONNECT_TIMEOUT.as_secs()
            )
        } else {
            format!("no answer within {} s", REQUEST_TIMEOUT.as_secs())
        };
    }
    if let Some(what) = io_error_kind(e).and_then(io_problem) {
        return what.to_string();
    }
    let innermost = chain.last().map(String::as_str).unwrap_or("unknown error");
    if is_tls_error(e) {
        return format!("the TLS handshake with {host} failed: {innermost}");
    }
    if e.is_connect() {
        format!("cannot connect to {host}: {innermost}")
    } else {
        format!("the connection broke: {innermost}")
    }
}

/// The usual OS errors of a connection, in words.
pub fn io_problem(kind: std::io::ErrorKind) -> Option<&'static str> {
    use std::io::ErrorKind as K;
    Some(match kind {
        K::ConnectionRefused => "connection refused",
        K::ConnectionReset => "connection reset",
        K::ConnectionAborted => "connection aborted",
        K::TimedOut => "timed out",
        K::HostUnreachable => "no route to the host",
        K::NetworkUnreachable => "the network is unreachable",
        K::AddrNotAvailable => "address not available",
        K::UnexpectedEof => "the connection closed mid-answer",
        _ => return None,
    })
}

/// Every error in `e`'s chain, including what an OS error wraps (the connectors put TLS and
/// OS errors inside `io::Error`s, which `source()` steps over).
fn layers<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Vec<&'a (dyn std::error::Error + 'static)> {
    let mut out = Vec::new();
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(inner) = src {
        out.push(inner);
        let mut wrapped = inner
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref());
        while let Some(w) = wrapped {
            let w: &(dyn std::error::Error + 'static) = w;
            out.push(w);
            wrapped = w
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref());
        }
        src = inner.source();
    }
    out
}

/// The first OS error in `e`'s chain whose kind has words in `io_problem`.
fn io_error_kind(e: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    layers(e)
        .into_iter()
        .filter_map(|l| l.downcast_ref::<std::io::Error>())
        .map(std::io::Error::kind)
        .find(|k| io_problem(*k).is_some())
}

/// Whether a TLS error is in `e`'s chain.
fn is_tls_error(e: &(dyn std::error::Error + 'static)) -> bool {
    layers(e).into_iter().any(|l| l.is::<rustls::Error>())
}

/// The causes under `e` (not `e` itself, which only names the URL), each once, without the
/// OS error number (`Connection refused (os error 111)` is `Connection refused`). A layer whose
/// text its cause repeats is dropped.
fn causes(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut src = e.source();
    while let Some(inner) = src {
        let text = strip_os_error(&inner.to_string());
        if !text.is_empty() && !out.iter().any(|t| t.contains(&text)) {
            out.push(text);
        }
        src = inner.source();
    }
    out
}

/// `text` without a trailing ` (os error N)`.
fn strip_os_error(text: &str) -> String {
    match text.rfind(" (os error ") {
        Some(i) if text.ends_with(')') => text[..i].to_string(),
        _ => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_drop_os_error_numbers_and_repeats() {
        let io = std::io::Error::from_raw_os_error(libc::ENOENT);
        assert_eq!(strip_os_error(&io.to_string()), "No such file or directory");
        assert_eq!(strip_os_error("plain"), "plain");
    }
}

//! The server setup talks to, checked before anything is sent: a URL `api_base` accepts, without
//! the `/v1` the client adds itself (as the config reads it), and never plain `http://` beyond this
//! machine unless the config allows clear text: the key, or a sign-up's answer with a new key,
//! would cross the network readable (docs/operating.md, "Configuration").

use crate::config::value;

/// `raw` as a server URL: `what` names where it came from in an error (`--api-base`, `server`).
/// A trailing `/v1` is dropped, and said.
pub fn parse(raw: &str, what: &str) -> anyhow::Result<String> {
    let base = value::api_base(raw).map_err(|p| anyhow::anyhow!("{what}: {p}"))?;
    Ok(match value::api_base_without_v1(&base) {
        Some(stripped) => {
            println!(
                "server: using {stripped}: the /v1 of {base} is added to every path by \
                 agentchat itself"
            );
            stripped
        }
        None => base,
    })
}

/// Refuses a server the key would reach in clear text, before any request is made.
pub fn refuse_cleartext(base: &str, allowed: bool) -> anyhow::Result<()> {
    if allowed || !value::is_cleartext_beyond_loopback(base) {
        return Ok(());
    }
    anyhow::bail!(
        "{base} is plain http:// to another machine: the API key (and a sign-up's new key) \
         would cross the network in clear text, so nothing was sent and nothing was written. \
         Use https://; plain http:// is for a server on this machine (127.0.0.1, ::1, \
         localhost, such as `agentchat sim`); on a network you trust, set `allow_cleartext = \
         true` at the top of the config (or AGENTCHAT_ALLOW_CLEARTEXT=1) and run setup again"
    )
}

/// What to try when a request to `base` failed with `error`: an `https://` URL to a server that
/// speaks plain HTTP fails in its TLS handshake.
pub fn hint(base: &str, error: &str) -> String {
    match base.strip_prefix("https://") {
        Some(rest) if error.contains("TLS handshake") => format!(
            " (the server at {base} does not speak TLS: if it is a local one such as `agentchat \
             sim`, use http://{rest})"
        ),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_http_is_refused_beyond_loopback_unless_allowed() {
        assert!(refuse_cleartext("https://api.agentchat.me", false).is_ok());
        assert!(refuse_cleartext("http://127.0.0.1:7999", false).is_ok());
        assert!(refuse_cleartext("http://localhost:7999", false).is_ok());
        let e = refuse_cleartext("http://192.0.2.2:7999", false).unwrap_err();
        assert!(e.to_string().contains("allow_cleartext"), "{e}");
        assert!(refuse_cleartext("http://192.0.2.2:7999", true).is_ok());
    }

    #[test]
    fn a_trailing_v1_is_dropped_and_a_tls_failure_to_a_plain_server_gets_a_hint() {
        assert_eq!(
            parse("http://127.0.0.1:1/v1/", "--api-base").unwrap(),
            "http://127.0.0.1:1"
        );
        assert!(parse("ftp://x", "--api-base").is_err());
        let h = hint(
            "https://127.0.0.1:7971",
            "unreachable: the TLS handshake with 127.0.0.1 failed: received corrupt message",
        );
        assert!(h.contains("http://127.0.0.1:7971"), "{h}");
        assert_eq!(hint("http://127.0.0.1:7971", "TLS handshake"), "");
    }
}

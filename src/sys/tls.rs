//! TLS in one place: the crypto provider (ring), so reqwest and tokio-tungstenite never panic
//! looking for one and aws-lc never enters the build, and the one client config that REST (through
//! [`http_client_builder_for`]) and the socket share.
//!
//! The OS trust store is read only for a URL that needs it (`https://`, `wss://`): a listener
//! pointed at plain `http://` (the local server on loopback, a container without a CA bundle)
//! starts without one. A URL that needs it when there is none gets [`NoRoots`], which says what
//! was looked for and how to supply it (docs/fleets.md, "The image").

use std::sync::{Arc, OnceLock};

/// Installs ring as the process-wide rustls provider. Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Where a Linux system keeps its CA bundle (the first places `openssl-probe`, which
/// rustls-platform-verifier reads through rustls-native-certs, looks), for the error's text.
const USUAL_BUNDLES: &str = "/etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs/ca-bundle.crt, \
    /etc/ssl/cert.pem, /etc/ssl/certs";

/// The variables that replace the OS trust store when either is set (rustls-native-certs).
const CERT_FILE_VAR: &str = "SSL_CERT_FILE";
const CERT_DIR_VAR: &str = "SSL_CERT_DIR";

/// An `https://` or `wss://` URL was given and no CA certificate could be loaded to check the
/// server's certificate. Names paths and variables only: never a key, never a URL's userinfo.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no CA certificates found (looked for {looked}): TLS to an https:// api_base needs them; \
     mount a CA bundle at /etc/ssl/certs/ca-certificates.crt (in a container: a file or a \
     ConfigMap mounted read-only), or set SSL_CERT_FILE to a PEM bundle (SSL_CERT_DIR to a \
     directory of them)"
)]
pub struct NoRoots {
    looked: String,
}

impl NoRoots {
    /// What was looked for, from the environment as rustls-native-certs reads it: the variables
    /// when either is set (they replace the OS store), else the OS store's usual places.
    fn now() -> NoRoots {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
        let shown = |name: &str| {
            var(name).map(|v| {
                let path = std::path::PathBuf::from(&v);
                let state = if path.exists() {
                    ""
                } else {
                    ", which does not exist"
                };
                format!("{name}={}{state}", path.display())
            })
        };
        let looked = match (shown(CERT_FILE_VAR), shown(CERT_DIR_VAR)) {
            (None, None) => format!(
                "the OS trust store: {USUAL_BUNDLES}; {CERT_FILE_VAR} and {CERT_DIR_VAR} unset"
            ),
            (file, dir) => [file, dir]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" and "),
        };
        NoRoots { looked }
    }
}

/// Whether `url` speaks TLS: `https://` or `wss://` (the scheme in any case). Anything else
/// (`http://`, `ws://`, a malformed URL that will fail on its own) needs no trust store.
pub fn needs_tls(url: &str) -> bool {
    let scheme = url.trim_start().split_once("://").map(|(s, _)| s);
    scheme.is_some_and(|s| s.eq_ignore_ascii_case("https") || s.eq_ignore_ascii_case("wss"))
}

/// `Ok` when `url` needs no TLS or the trust store has roots; else what is missing. The listener
/// asks this at start, so a missing CA bundle is one clear line and a config-level exit instead
/// of a connect that fails over and over.
pub fn require_roots_for(url: &str) -> Result<(), NoRoots> {
    if needs_tls(url) {
        roots().map(|_| ())
    } else {
        Ok(())
    }
}

/// The OS trust store as a rustls config (ring), loaded once per process: reading the store on
/// every cycle would cost time for nothing. The error is kept too: the store does not change
/// under a running process (a new bundle takes a restart, as for any OS store update).
fn roots() -> Result<Arc<rustls::ClientConfig>, NoRoots> {
    use rustls_platform_verifier::ConfigVerifierExt;
    static TLS: OnceLock<Result<Arc<rustls::ClientConfig>, NoRoots>> = OnceLock::new();
    TLS.get_or_init(|| {
        install_crypto_provider();
        rustls::ClientConfig::with_platform_verifier()
            .map(Arc::new)
            .map_err(|_| NoRoots::now())
    })
    .clone()
}

/// TLS settings shared by REST and the socket: ring and the OS trust store. `None` when the
/// store has no roots (the socket then dials `ws://` as it is; a `wss://` one never gets that far:
/// the listener refused to start with [`require_roots_for`]).
pub fn client_config() -> Option<Arc<rustls::ClientConfig>> {
    roots().ok()
}

/// A config that takes no server as trusted, with `why` as every handshake's error: what a
/// client for a plain URL carries (reqwest builds its TLS connector up front, and without one
/// of ours it would read the OS store itself and fail the build when that is empty). Only a
/// redirect to `https://` would ever use it.
fn refusing(why: String) -> rustls::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let verifier = Arc::new(Refuse {
        why,
        schemes: provider
            .signature_verification_algorithms
            .supported_schemes(),
    });
    rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map(|b| {
            b.dangerous()
                .with_custom_certificate_verifier(verifier)
                .with_no_client_auth()
        })
        // ring supports the default versions; were it not so, an empty-roots config refuses
        // every server all the same.
        .unwrap_or_else(|_| {
            rustls::ClientConfig::builder()
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth()
        })
}

/// The verifier of [`refusing`]: every certificate is refused with `why`.
#[derive(Debug)]
struct Refuse {
    why: String,
    schemes: Vec<rustls::SignatureScheme>,
}

impl rustls::client::danger::ServerCertVerifier for Refuse {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Err(rustls::Error::General(self.why.clone()))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(self.why.clone()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &rustls::pki_types::CertificateDer<'_>,
        _dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(self.why.clone()))
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.schemes.clone()
    }
}

/// A `reqwest` client builder for requests to `url`: the OS trust store when `url` needs TLS
/// (else [`NoRoots`]), none read at all when it does not. The listener's REST client starts here.
pub fn http_client_builder_for(url: &str) -> Result<reqwest::ClientBuilder, NoRoots> {
    let builder = reqwest::Client::builder();
    if needs_tls(url) {
        return Ok(builder.tls_backend_preconfigured((*roots()?).clone()));
    }
    static PLAIN: OnceLock<rustls::ClientConfig> = OnceLock::new();
    let plain = PLAIN.get_or_init(|| {
        install_crypto_provider();
        refusing(format!(
            "TLS is not set up for this client: it was made for a plain http:// URL ({})",
            "set api_base to the https:// URL instead of one that redirects there"
        ))
    });
    Ok(builder.tls_backend_preconfigured(plain.clone()))
}

/// A `reqwest` client builder for a client whose URLs are not known up front (the demo's, the MCP
/// relay's): the OS trust store when it has roots; else a config that fails each TLS handshake
/// with [`NoRoots`]'s text, so plain `http://` works and `https://` says what is missing. Never
/// fails to build.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match roots() {
        Ok(tls) => builder.tls_backend_preconfigured((*tls).clone()),
        Err(missing) => {
            static MISSING: OnceLock<rustls::ClientConfig> = OnceLock::new();
            let config = MISSING.get_or_init(|| refusing(missing.to_string()));
            builder.tls_backend_preconfigured(config.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_and_wss_need_the_trust_store() {
        for url in [
            "https://api.agentchat.me",
            "HTTPS://api.agentchat.me",
            "wss://api.agentchat.me/v1/ws",
            " https://x",
        ] {
            assert!(needs_tls(url), "{url}");
        }
        for url in [
            "http://127.0.0.1:8080",
            "ws://127.0.0.1:8080/v1/ws",
            "127.0.0.1:8080",
            "",
            "httpsx://x",
        ] {
            assert!(!needs_tls(url), "{url}");
            assert_eq!(require_roots_for(url), Ok(()), "{url}");
        }
    }

    #[test]
    fn a_client_for_a_plain_url_builds_without_reading_the_trust_store() {
        install_crypto_provider();
        assert!(
            http_client_builder_for("http://127.0.0.1:1")
                .unwrap()
                .build()
                .is_ok()
        );
        assert!(http_client_builder().build().is_ok());
    }

    #[test]
    fn the_missing_roots_error_says_what_was_looked_for_and_how_to_supply_it() {
        let text = NoRoots {
            looked: "SSL_CERT_FILE=/x, which does not exist".into(),
        }
        .to_string();
        assert!(text.starts_with("no CA certificates found (looked for SSL_CERT_FILE=/x"));
        assert!(text.contains("mount a CA bundle at /etc/ssl/certs/ca-certificates.crt"));
        assert!(text.contains("set SSL_CERT_FILE"));
    }

    #[test]
    fn the_refusing_verifier_fails_every_certificate_with_its_reason() {
        use rustls::client::danger::ServerCertVerifier;
        install_crypto_provider();
        let _config = refusing("because".into());
        let verifier = Refuse {
            why: "because".into(),
            schemes: vec![],
        };
        let err = verifier
            .verify_server_cert(
                &rustls::pki_types::CertificateDer::from(vec![0u8; 4]),
                &[],
                &rustls::pki_types::ServerName::try_from("example.com").unwrap(),
                &[],
                rustls::pki_types::UnixTime::now(),
            )
            .unwrap_err();
        assert_eq!(err, rustls::Error::General("because".into()));
    }
}

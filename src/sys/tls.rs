//! TLS in one place: the crypto provider (ring), so reqwest and tokio-tungstenite never panic
//! looking for one and aws-lc never enters the build, and the one client config that REST (through
//! [`http_client_builder`]) and the socket share.
//!
//! The OS trust store is read only when a certificate has to be checked: at the first TLS
//! handshake (`https://`, `wss://`), or when the listener asks [`require_roots_for`] at start for
//! an `https://` `api_base`. A listener pointed at plain `http://` (the local server on loopback, a
//! container without a CA bundle) never reads it and needs none. When it is needed and holds no
//! certificate, [`NoRoots`] says what was looked for and how to supply one (docs/fleets.md, "The
//! image").

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
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

/// A certificate had to be checked (an `https://` or `wss://` URL) and no CA certificate could be
/// loaded. Names paths and variables only: never a key, never a URL's userinfo.
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
    /// What was looked for: the OS store's usual places and the two variables as set (or
    /// unset), so the line is true whichever of them rustls-native-certs read (with one variable
    /// set it still reads the OS store's directory).
    fn now() -> NoRoots {
        let shown = |name: &str| match std::env::var_os(name).filter(|v| !v.is_empty()) {
            None => format!("{name} unset"),
            Some(v) => {
                let path = std::path::PathBuf::from(&v);
                let state = if path.exists() {
                    ""
                } else {
                    ", which does not exist"
                };
                format!("{name}={}{state}", path.display())
            }
        };
        NoRoots {
            looked: format!(
                "the OS trust store: {USUAL_BUNDLES}; {}; {}",
                shown(CERT_FILE_VAR),
                shown(CERT_DIR_VAR)
            ),
        }
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
        platform().map(|_| ())
    } else {
        Ok(())
    }
}

/// The OS trust store as rustls-platform-verifier checks it (ring), loaded at the first call and
/// kept for the process: reading the store on every handshake would cost time for nothing. The
/// error is kept too: the store does not change under a running process (a new bundle takes a
/// restart, as for any OS store update).
fn platform() -> Result<Arc<rustls_platform_verifier::Verifier>, NoRoots> {
    static VERIFIER: OnceLock<Result<Arc<rustls_platform_verifier::Verifier>, NoRoots>> =
        OnceLock::new();
    VERIFIER
        .get_or_init(|| {
            install_crypto_provider();
            rustls_platform_verifier::Verifier::new(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .map(Arc::new)
            .map_err(|_| NoRoots::now())
        })
        .clone()
}

/// The verifier of [`client_config`]: the platform verifier, reached only when a server's
/// certificate is checked, so a client that never speaks TLS never reads the store. Without
/// roots each handshake fails with [`NoRoots`]'s text. Signatures are checked with ring's
/// algorithms, as the platform verifier itself does.
#[derive(Debug)]
struct OnFirstUse {
    algorithms: rustls::crypto::WebPkiSupportedAlgorithms,
}

impl ServerCertVerifier for OnFirstUse {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        platform()
            .map_err(|missing| rustls::Error::General(missing.to_string()))?
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// TLS settings shared by REST and the socket: ring, and the OS trust store read at the first
/// handshake. Built once per process; `None` only if ring refused the default protocol versions,
/// which it never does (each library then uses its own roots).
pub fn client_config() -> Option<Arc<rustls::ClientConfig>> {
    static TLS: OnceLock<Option<Arc<rustls::ClientConfig>>> = OnceLock::new();
    TLS.get_or_init(|| {
        install_crypto_provider();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = Arc::new(OnFirstUse {
            algorithms: provider.signature_verification_algorithms,
        });
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .ok()
            .map(|b| {
                Arc::new(
                    b.dangerous()
                        .with_custom_certificate_verifier(verifier)
                        .with_no_client_auth(),
                )
            })
    })
    .clone()
}

/// A `reqwest` client builder that speaks TLS with [`client_config`]: every HTTP client of ours
/// starts here (the listener's REST client, the demo's, the MCP relay's). It never fails for
/// want of a CA bundle: plain `http://` needs none, and `https://` says what is missing.
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match client_config() {
        Some(tls) => builder.tls_backend_preconfigured((*tls).clone()),
        // No config: the provider is installed all the same, and reqwest uses its own roots.
        None => builder,
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
    fn the_shared_config_builds_and_a_client_from_it_builds() {
        install_crypto_provider();
        assert!(client_config().is_some());
        assert!(http_client_builder().build().is_ok());
    }

    #[test]
    fn the_missing_roots_error_says_what_was_looked_for_and_how_to_supply_it() {
        let text = NoRoots {
            looked: "SSL_CERT_FILE=/x, which does not exist".into(),
        }
        .to_string();
        assert!(text.starts_with("no CA certificates found (looked for SSL_CERT_FILE=/x"));
        // What `now` says names the OS store's places and both variables, set or not.
        let looked = NoRoots::now().looked;
        assert!(looked.starts_with("the OS trust store: /etc/ssl/certs/ca-certificates.crt"));
        assert!(looked.contains("SSL_CERT_FILE") && looked.contains("SSL_CERT_DIR"));
        assert!(text.contains("mount a CA bundle at /etc/ssl/certs/ca-certificates.crt"));
        assert!(text.contains("set SSL_CERT_FILE"));
    }
}

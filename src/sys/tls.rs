//! TLS in one place: the crypto provider (ring), so reqwest and tokio-tungstenite never panic
//! looking for one and aws-lc never enters the build, and the one client config that REST (through
//! [`http_client_builder`]) and the socket share.

use std::sync::Arc;

/// Installs ring as the process-wide rustls provider. Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// TLS settings shared by REST and the socket: ring and the OS trust store (when it cannot be
/// loaded, each library's own webpki roots). Built once per process: loading the trust store
/// on every cycle would cost time for nothing.
pub fn client_config() -> Option<Arc<rustls::ClientConfig>> {
    use rustls_platform_verifier::ConfigVerifierExt;
    static TLS: std::sync::OnceLock<Option<Arc<rustls::ClientConfig>>> = std::sync::OnceLock::new();
    TLS.get_or_init(|| {
        install_crypto_provider();
        rustls::ClientConfig::with_platform_verifier()
            .ok()
            .map(Arc::new)
    })
    .clone()
}

/// A `reqwest` client builder that speaks TLS with [`client_config`]: every HTTP client of ours
/// starts here (the listener's REST client, the demo's).
pub fn http_client_builder() -> reqwest::ClientBuilder {
    let builder = reqwest::Client::builder();
    match client_config() {
        Some(tls) => builder.tls_backend_preconfigured((*tls).clone()),
        // No config: the provider is installed all the same, and reqwest uses its own roots.
        None => builder,
    }
}

//! One place that picks the TLS crypto provider (ring), so reqwest and tokio-tungstenite never
//! panic looking for one and aws-lc never enters the build.

/// Installs ring as the process-wide rustls provider. Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

//! The listener in a container: TLS roots read only when a URL needs them (a host without a CA
//! bundle runs a plain `http://` listener, and an `https://` one is refused at start saying what
//! is missing), and the image of `Containerfile`, built from scratch and run with podman against
//! the sim on loopback (`--network host`).

use crate::listen_support::{Listener, Opts, Setup, Sim, accepted, eventually, eventually_async};

/// `SSL_CERT_FILE` and `SSL_CERT_DIR` at an empty file and an empty dir: rustls-native-certs
/// then reads those alone instead of the OS store, so the listener sees no CA certificate at
/// all, as in an image without a bundle.
fn without_ca_certificates(dir: &std::path::Path) -> Vec<(String, String)> {
    let file = dir.join("empty.pem");
    let certs = dir.join("no-certs");
    std::fs::write(&file, "").unwrap();
    std::fs::create_dir_all(&certs).unwrap();
    vec![
        ("SSL_CERT_FILE".into(), file.display().to_string()),
        ("SSL_CERT_DIR".into(), certs.display().to_string()),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_certificates_a_plain_http_listener_starts_connects_and_runs() {
    let sim = Sim::start(1.0).await;
    let (alice, bob) = (sim.agent("alice").await, sim.agent("bob").await);
    let scratch = tempfile::tempdir().unwrap();
    let opts = Opts {
        extra_env: without_ca_certificates(scratch.path()),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    let l = Listener::start(&sim, &bob, &setup, &opts);
    assert!(
        eventually_async(20.0, || async { accepted(&sim.connects(&bob).await) >= 1 }).await,
        "the listener never connected without a CA bundle:\n{}",
        l.log()
    );
    sim.send(&alice, &bob, "hello").await;
    assert!(
        eventually(20.0, || setup.rec.done(1)).await,
        "no run after a message:\n{}",
        l.log()
    );
    assert!(!l.log().contains("builder error"), "{}", l.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_ca_certificates_an_https_listener_is_refused_at_start_saying_what_is_missing() {
    let scratch = tempfile::tempdir().unwrap();
    let key = "ac_never_shown_0123456789";
    let opts = Opts {
        extra_env: without_ca_certificates(scratch.path()),
        ..Opts::default()
    };
    let setup = Setup::new(&opts);
    // Nothing listens there: the refusal must come before any connect.
    let cmd =
        crate::listen_support::listener_command_for("https://127.0.0.1:9", key, &setup, &opts);
    let mut l = Listener::spawn(cmd, &setup, "");
    let code = l.wait_exit(20.0);
    let log = l.log();
    assert_eq!(code, Some(78), "a config-level exit (EX_CONFIG):\n{log}");
    let empty = scratch.path().join("empty.pem");
    for needle in [
        "no CA certificates found".to_string(),
        format!("SSL_CERT_FILE={}", empty.display()),
        "mount a CA bundle at /etc/ssl/certs/ca-certificates.crt".to_string(),
    ] {
        assert!(log.contains(&needle), "missing {needle:?} in:\n{log}");
    }
    assert!(!log.contains("builder error"), "{log}");
    assert!(!log.contains(key) && !log.contains(&key[..12]), "{log}");
    assert!(!setup.state_dir.join("status.json").exists());
}

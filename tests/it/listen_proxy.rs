//! The listener behind an egress proxy (issue 17 item 19): REST and the socket both go through
//! a real `tinyproxy` (Debian's package; `scripts/test` installs it when missing and root), for
//! `ws://` straight to the sim and for `wss://` to a TLS front on loopback (a CA and a leaf for
//! `localhost` made here, trusted through `SSL_CERT_FILE`). The proxy's own log shows that the
//! socket went through it. Without tinyproxy the tests say they skipped (and fail under CI).

use crate::listen_support::*;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

const USER: &str = "proxyuser9";
const PASSWORD: &str = "pw-s3cret-77";

/// A real tinyproxy on loopback with Basic auth, its log in a temp dir.
struct TinyProxy {
    child: Child,
    port: u16,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl TinyProxy {
    /// `None` (after saying so) when tinyproxy is not installed.
    async fn start() -> Option<TinyProxy> {
        let bin = ["/usr/bin/tinyproxy", "/usr/sbin/tinyproxy"]
            .into_iter()
            .find(|p| Path::new(p).is_file());
        let Some(bin) = bin else {
            assert!(
                std::env::var_os("CI").is_none(),
                "tinyproxy is missing under CI: scripts/test installs it (apt-get install tinyproxy)"
            );
            eprintln!(
                "SKIPPED: tinyproxy is not installed (Debian: apt-get install tinyproxy); the proxy test needs a real proxy"
            );
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("tinyproxy.log");
        // tinyproxy cannot listen on port 0: it binds the port it is given, and a taken one
        // makes it exit, so try others until one holds (it is the one who binds it).
        for _ in 0..20 {
            let port = 20_000 + fastrand::u16(..40_000);
            let conf = dir.path().join("tinyproxy.conf");
            std::fs::write(
                &conf,
                format!(
                    "Port {port}\nListen 127.0.0.1\nTimeout 120\nLogFile \"{}\"\nLogLevel Connect\nMaxClients 50\nBasicAuth {USER} {PASSWORD}\n",
                    log.display()
                ),
            )
            .unwrap();
            let mut child = Command::new(bin)
                .arg("-d")
                .arg("-c")
                .arg(&conf)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let up = eventually_async(5.0, || async {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            })
            .await;
            if up && matches!(child.try_wait(), Ok(None)) {
                return Some(TinyProxy {
                    child,
                    port,
                    log,
                    _dir: dir,
                });
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!("tinyproxy would not start on any port tried");
    }

    fn url(&self) -> String {
        format!("http://{USER}:{PASSWORD}@127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The `CONNECT` requests it logged, target by target.
    fn connects_to(&self, target: &str) -> usize {
        self.log()
            .lines()
            .filter(|l| l.contains(&format!("CONNECT {target} ")))
            .count()
    }
}

impl Drop for TinyProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The listener with only the given proxy variables (every inherited one removed).
fn proxied_listener(
    api_base: &str,
    key: &str,
    setup: &Setup,
    vars: &[(&str, String)],
    suffix: &str,
) -> Listener {
    let mut cmd = listener_command_for(api_base, key, setup, &Opts::default());
    for v in [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
        "NO_PROXY",
        "no_proxy",
        "REQUEST_METHOD",
    ] {
        cmd.env_remove(v);
    }
    for (k, v) in vars {
        cmd.env(k, v);
    }
    Listener::spawn(cmd, setup, suffix)
}

/// `ws://`: with `http_proxy` (lower case) set, the socket is a `CONNECT` tunnel through the
/// proxy, with the URL's credentials (the proxy requires them), never logged; `NO_PROXY`
/// naming the host dials directly, as REST then does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_http_proxy_the_ws_socket_tunnels_through_it_with_the_urls_credentials() {
    let Some(proxy) = TinyProxy::start().await else {
        return;
    };
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let target = sim.api_base.trim_start_matches("http://").to_string();

    let setup = Setup::new(&Opts::default());
    let l = proxied_listener(
        &sim.api_base,
        &bob.key,
        &setup,
        &[("http_proxy", proxy.url())],
        "",
    );
    assert!(
        eventually(20.0, || setup.status()["state"] == "connected").await,
        "{}\n{}",
        l.log(),
        proxy.log()
    );
    // The proxy carried the socket: a CONNECT to the sim (REST to an http:// base goes as
    // plain proxied GETs, so this line is the socket's).
    assert!(proxy.connects_to(&target) >= 1, "{}", proxy.log());
    assert!(
        proxy
            .log()
            .contains(&format!("GET http://{target}/v1/agents/me")),
        "REST went through it too:\n{}",
        proxy.log()
    );
    sim.send(&alice, &bob, "through the proxy").await;
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    for secret in [PASSWORD, USER] {
        assert!(
            !l.log().contains(secret),
            "{secret} in the log:\n{}",
            l.log()
        );
    }
    drop(l);

    // NO_PROXY naming the host: direct, for the socket as for REST.
    let before = proxy.log().lines().count();
    let setup = Setup::new(&Opts::default());
    let l = proxied_listener(
        &sim.api_base,
        &bob.key,
        &setup,
        &[
            ("HTTP_PROXY", proxy.url()),
            ("NO_PROXY", "127.0.0.1".to_string()),
        ],
        "-direct",
    );
    assert!(
        eventually(20.0, || setup.status()["state"] == "connected").await,
        "{}",
        l.log()
    );
    assert_eq!(
        proxy.log().lines().count(),
        before,
        "NO_PROXY: nothing went through the proxy:\n{}",
        proxy.log()
    );
}

/// A TLS front on loopback for `localhost`, passing bytes on to the sim; it counts the TLS
/// connections it took and keeps each one's first request line.
struct TlsFront {
    port: u16,
    ca_pem: PathBuf,
    first_lines: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl TlsFront {
    async fn start(backend: &str) -> TlsFront {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dir = tempfile::tempdir().unwrap();
        let ca_key = KeyPair::generate().unwrap();
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::from_params(&ca_params, &ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["localhost".to_string()])
            .unwrap()
            .signed_by(&leaf_key, &issuer)
            .unwrap();
        let ca_pem = dir.path().join("ca.pem");
        std::fs::write(&ca_pem, ca.pem()).unwrap();
        let config = tokio_rustls::rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_single_cert(
                vec![leaf.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(leaf_key.serialize_der().into()),
            )
            .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let backend = backend.trim_start_matches("http://").to_string();
        let first_lines = Arc::new(Mutex::new(Vec::new()));
        let lines = first_lines.clone();
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, backend, lines) = (acceptor.clone(), backend.clone(), lines.clone());
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 16 * 1024];
                    let Ok(n) = tls.read(&mut buf).await else {
                        return;
                    };
                    let first = String::from_utf8_lossy(&buf[..n])
                        .lines()
                        .next()
                        .unwrap_or_default()
                        .to_string();
                    lines.lock().unwrap().push(first);
                    let Ok(mut up) = tokio::net::TcpStream::connect(&backend).await else {
                        return;
                    };
                    if up.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut up).await;
                });
            }
        });
        TlsFront {
            port,
            ca_pem,
            first_lines,
            task,
            _dir: dir,
        }
    }

    fn first_lines(&self) -> Vec<String> {
        self.first_lines.lock().unwrap().clone()
    }
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `wss://`: with `HTTPS_PROXY` set, REST and the socket to `https://localhost:<front>` both
/// go through the proxy: every TLS connection the front took (the socket's upgrade among them)
/// is one the proxy tunnelled. The front's CA is trusted through `SSL_CERT_FILE`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_https_proxy_the_wss_socket_tunnels_through_it_and_tls_runs_inside() {
    let Some(proxy) = TinyProxy::start().await else {
        return;
    };
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let bob = sim.agent("bob").await;
    let front = TlsFront::start(&sim.api_base).await;
    let api_base = format!("https://localhost:{}", front.port);
    let target = format!("localhost:{}", front.port);
    let setup = Setup::new(&Opts::default());
    let l = proxied_listener(
        &api_base,
        &bob.key,
        &setup,
        &[
            ("HTTPS_PROXY", proxy.url()),
            ("SSL_CERT_FILE", front.ca_pem.display().to_string()),
        ],
        "",
    );
    assert!(
        eventually(30.0, || setup.status()["state"] == "connected").await,
        "{}\n{}",
        l.log(),
        proxy.log()
    );
    sim.send(&alice, &bob, "through the proxy, in TLS").await;
    assert!(eventually(20.0, || setup.rec.done(1)).await, "{}", l.log());
    let lines = front.first_lines();
    assert!(
        lines.iter().any(|l| l.starts_with("GET /v1/ws")),
        "the socket's upgrade came through the front: {lines:?}"
    );
    // REST's keep-alive connection (its first request is whichever call came first).
    assert!(
        lines.iter().any(|l| !l.starts_with("GET /v1/ws")),
        "{lines:?}"
    );
    // Every connection the front took was tunnelled by the proxy: none went around it.
    assert_eq!(
        proxy.connects_to(&target),
        lines.len(),
        "front connections {lines:?}\nproxy log:\n{}",
        proxy.log()
    );
    for secret in [PASSWORD, USER] {
        assert!(
            !l.log().contains(secret),
            "{secret} in the log:\n{}",
            l.log()
        );
    }
}

/// Issue 29 item 15: a wrong proxy password read as "the server refused the API key" on REST.
/// tinyproxy answers it `401` with an HTML page (its realm in `WWW-Authenticate`); AgentChat's
/// own refusal is JSON. The listener now names the proxy's credentials, and is not `key_refused`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_proxy_password_is_said_as_the_proxys_refusal_not_a_refused_key() {
    let Some(proxy) = TinyProxy::start().await else {
        return;
    };
    let sim = Sim::start(1.0).await;
    let bob = sim.agent("bob").await;
    let wrong = proxy.url().replace(PASSWORD, "not-the-password");
    let setup = Setup::new(&Opts::default());
    let l = proxied_listener(
        &sim.api_base,
        &bob.key,
        &setup,
        &[("http_proxy", wrong)],
        "",
    );
    assert!(
        eventually(20.0, || setup.status()["detail"]
            .as_str()
            .is_some_and(|d| d.contains("proxy URL")))
        .await,
        "{}\n{}",
        setup.status(),
        l.log()
    );
    assert_ne!(setup.status()["state"], "key_refused");
    assert_eq!(l.count("key_refused"), 0, "{}", l.log());
    assert!(!l.log().contains("refused the API key"), "{}", l.log());
    assert!(!l.log().contains("not-the-password"), "{}", l.log());
}

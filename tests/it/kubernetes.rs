//! The Kubernetes manifests (`deploy/kubernetes/`): every one valid against the Kubernetes
//! schemas by PyPI's `kubernetes-validate --strict` (offline, installed into `.tools/venv` by
//! scripts/test), and what the schemas cannot say: one listener per agent across the fleet (a
//! StatefulSet of one replica, no rolling overlap, every agent in one shard), the probes on the
//! listener's own endpoint, the keys mounted where the config's `api_key_file`s point, with a
//! mode the listener takes, and each shard's config run by the real binary against the sim.

use crate::listen_support::{BIN, Listener, Setup, Sim, eventually_async};
use serde_json::Value;
use std::path::{Path, PathBuf};

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/deploy/kubernetes");
const CONTAINERFILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/Containerfile");

/// The test Python with `kubernetes-validate` (and PyYAML, its dependency) beside it, or `None`
/// with a SKIPPED line; under `CI` a missing one fails (scripts/test installs it).
fn validator(test: &str) -> Option<(String, PathBuf)> {
    let python = crate::common::test_python()?;
    let script = Path::new(&python).with_file_name("kubernetes-validate");
    if !script.exists() {
        assert!(
            std::env::var_os("CI").is_none(),
            "kubernetes::{test}: {} is missing on CI (scripts/test installs kubernetes-validate)",
            script.display()
        );
        eprintln!(
            "kubernetes::{test}: SKIPPED: {} is missing (scripts/test installs kubernetes-validate)",
            script.display()
        );
        return None;
    }
    Some((python, script))
}

/// Every YAML file of `deploy/kubernetes/`, sorted.
fn manifest_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(DIR)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    assert!(files.len() >= 2, "{files:?}");
    files
}

/// Every document of every manifest, as JSON (PyYAML's safe loader does the reading).
fn documents(python: &str) -> Vec<Value> {
    let mut docs = Vec::new();
    for file in manifest_files() {
        let out = std::process::Command::new(python)
            .args([
                "-c",
                "import json, sys, yaml\n\
                 json.dump([d for d in yaml.safe_load_all(open(sys.argv[1])) if d], sys.stdout)",
            ])
            .arg(&file)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let list: Vec<Value> = serde_json::from_slice(&out.stdout).unwrap();
        docs.extend(list);
    }
    docs
}

fn of_kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter().filter(|d| d["kind"] == kind).collect()
}

fn named<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    of_kind(docs, kind)
        .into_iter()
        .find(|d| d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} named {name}"))
}

fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

/// One shard as the manifests wire it: its StatefulSet, the listener's container, the config
/// (parsed) it reads, and where each volume is mounted.
struct Shard<'a> {
    name: String,
    set: &'a Value,
    container: Value,
    config_text: String,
    config: toml::Table,
    /// (mountPath, volume) for each of the container's mounts.
    mounts: Vec<(String, Value)>,
}

fn shards(docs: &[Value]) -> Vec<Shard<'_>> {
    let sets = of_kind(docs, "StatefulSet");
    assert!(!sets.is_empty(), "no StatefulSet in {DIR}");
    sets.into_iter()
        .map(|set| {
            let pod = &set["spec"]["template"]["spec"];
            let containers = list(&pod["containers"]);
            assert_eq!(containers.len(), 1, "one container, the listener");
            let container = containers[0].clone();
            let volumes = list(&pod["volumes"]);
            let mounts: Vec<(String, Value)> = list(&container["volumeMounts"])
                .iter()
                .map(|m| {
                    let name = m["name"].as_str().unwrap();
                    let volume = volumes
                        .iter()
                        .find(|v| v["name"] == name)
                        .cloned()
                        .or_else(|| {
                            list(&set["spec"]["volumeClaimTemplates"])
                                .into_iter()
                                .find(|t| t["metadata"]["name"] == name)
                                .map(|t| serde_json::json!({ "name": name, "claim": t }))
                        })
                        .unwrap_or_else(|| panic!("mount {name} has no volume"));
                    assert!(
                        m["subPath"].is_null(),
                        "a subPath mount never sees an edit: {m}"
                    );
                    (m["mountPath"].as_str().unwrap().to_string(), volume)
                })
                .collect();
            let config_path = env_of(&container, "AGENTCHAT_CONFIG");
            let (dir, file) = config_path.rsplit_once('/').unwrap();
            let (_, volume) = mounts
                .iter()
                .find(|(path, _)| path == dir)
                .unwrap_or_else(|| panic!("nothing mounted at {dir}"));
            let map = named(
                docs,
                "ConfigMap",
                volume["configMap"]["name"].as_str().unwrap(),
            );
            let config_text = map["data"][file].as_str().unwrap().to_string();
            let config = config_text.parse::<toml::Table>().unwrap();
            Shard {
                name: set["metadata"]["name"].as_str().unwrap().to_string(),
                set,
                container,
                config_text,
                config,
                mounts,
            }
        })
        .collect()
}

fn env_of(container: &Value, name: &str) -> String {
    list(&container["env"])
        .into_iter()
        .find(|e| e["name"] == name)
        .and_then(|e| e["value"].as_str().map(str::to_string))
        .unwrap_or_else(|| panic!("the container sets no {name}"))
}

/// The config's profiles: name and `api_key_file`.
fn profiles(config: &toml::Table) -> Vec<(String, String)> {
    config["profiles"]
        .as_table()
        .unwrap()
        .iter()
        .map(|(name, t)| {
            let key = t.get("api_key_file").and_then(|k| k.as_str());
            (
                name.clone(),
                key.unwrap_or_else(|| panic!("profile {name} names no api_key_file"))
                    .to_string(),
            )
        })
        .collect()
}

fn listen_key<'a>(config: &'a toml::Table, key: &str) -> &'a toml::Value {
    config["listen"]
        .get(key)
        .unwrap_or_else(|| panic!("the config sets no listen.{key}"))
}

#[test]
fn every_manifest_passes_kubernetes_validate_strict_and_a_misspelt_field_does_not() {
    let test = "every_manifest_passes_kubernetes_validate_strict_and_a_misspelt_field_does_not";
    let Some((_, validate)) = validator(test) else {
        return;
    };
    let files = manifest_files();
    for version in ["1.30", "1.37"] {
        let out = std::process::Command::new(&validate)
            .args(["--strict", "--quiet", "-k", version])
            .args(&files)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubernetes-validate --strict -k {version}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The validator is strict for real: one misspelt field in a copy fails it.
    let dir = tempfile::tempdir().unwrap();
    let shard = files
        .iter()
        .find(|f| {
            f.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("shard-")
        })
        .unwrap();
    let text = std::fs::read_to_string(shard).unwrap();
    assert!(text.contains("volumeMounts:"));
    let broken = dir.path().join("broken.yaml");
    std::fs::write(&broken, text.replacen("volumeMounts:", "volumeMount:", 1)).unwrap();
    let out = std::process::Command::new(&validate)
        .args(["--strict", "--quiet"])
        .arg(&broken)
        .output()
        .unwrap();
    assert!(!out.status.success(), "a misspelt field passed");
}

#[test]
fn each_shard_is_one_statefulset_pod_that_never_overlaps_and_every_agent_is_in_one_shard() {
    let test =
        "each_shard_is_one_statefulset_pod_that_never_overlaps_and_every_agent_is_in_one_shard";
    let Some((python, _)) = validator(test) else {
        return;
    };
    let docs = documents(&python);
    // A Deployment would be allowed only with Recreate; these manifests use none.
    for d in of_kind(&docs, "Deployment") {
        assert_eq!(d["spec"]["strategy"]["type"], "Recreate", "{d}");
        assert_eq!(d["spec"]["replicas"], 1, "{d}");
    }
    assert!(of_kind(&docs, "DaemonSet").is_empty() && of_kind(&docs, "ReplicaSet").is_empty());
    let containerfile = std::fs::read_to_string(CONTAINERFILE).unwrap();
    let mut agents: Vec<String> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    for shard in shards(&docs) {
        let spec = &shard.set["spec"];
        assert_eq!(spec["replicas"], 1, "{}: one pod per shard", shard.name);
        assert_eq!(
            spec["podManagementPolicy"], "OrderedReady",
            "{}",
            shard.name
        );
        let update = &spec["updateStrategy"];
        assert!(
            update["type"] == "RollingUpdate" || update["type"] == "OnDelete",
            "{}: {update}",
            shard.name
        );
        assert!(
            update["rollingUpdate"]["maxUnavailable"].is_null(),
            "{}: maxUnavailable would let an update run pods in parallel",
            shard.name
        );
        assert_eq!(
            spec["serviceName"],
            named(&docs, "Service", spec["serviceName"].as_str().unwrap())["metadata"]["name"]
        );

        // The state volume is the shard's own claim, mounted where the image keeps state.
        let (_, state) = shard
            .mounts
            .iter()
            .find(|(path, _)| path == "/var/lib/agentchat")
            .unwrap_or_else(|| panic!("{}: no state volume", shard.name));
        assert!(
            state["claim"].is_object(),
            "{}: state on a volumeClaimTemplate",
            shard.name
        );
        assert!(containerfile.contains(r#"VOLUME ["/var/lib/agentchat"]"#));

        // Non-root, read-only root, the image's uid; the grace outlasts a run's kill_grace.
        let pod = &spec["template"]["spec"];
        let ctx = &pod["securityContext"];
        assert_eq!(ctx["runAsNonRoot"], true);
        assert_eq!(ctx["runAsUser"], 65532);
        assert!(containerfile.contains("USER 65532:65532"));
        assert_eq!(
            shard.container["securityContext"]["readOnlyRootFilesystem"],
            true
        );
        assert_eq!(
            shard.container["securityContext"]["allowPrivilegeEscalation"],
            false
        );
        assert!(
            shard
                .mounts
                .iter()
                .any(|(path, v)| path == "/tmp" && v["emptyDir"].is_object()),
            "{}: a read-only root needs a writable /tmp",
            shard.name
        );
        let grace =
            humantime::parse_duration(listen_key(&shard.config, "kill_grace").as_str().unwrap())
                .unwrap();
        let period = pod["terminationGracePeriodSeconds"].as_u64().unwrap();
        assert!(
            period >= grace.as_secs() + 30,
            "{}: terminationGracePeriodSeconds {period} is not kill_grace {grace:?} plus 30 s",
            shard.name
        );
        let memory = &shard.container["resources"];
        assert!(memory["requests"]["memory"].is_string() && memory["limits"]["memory"].is_string());

        for (name, key) in profiles(&shard.config) {
            agents.push(name);
            keys.push(key);
        }
    }
    // At most one listener per agent across the fleet: no profile, no key file in two shards.
    let mut unique = agents.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        agents.len(),
        "an agent in two shards: {agents:?}"
    );
    assert!(agents.len() >= 2, "{agents:?}");
}

#[test]
fn the_probes_hit_the_listeners_endpoint_and_the_secret_holds_every_api_key_file() {
    let test = "the_probes_hit_the_listeners_endpoint_and_the_secret_holds_every_api_key_file";
    let Some((python, _)) = validator(test) else {
        return;
    };
    let docs = documents(&python);
    for shard in shards(&docs) {
        // The probes: /healthz alive, /readyz ready, on the port the config serves them on.
        let addr: std::net::SocketAddr = listen_key(&shard.config, "metrics_addr")
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            addr.ip().is_unspecified(),
            "{}: the kubelet probes the pod's IP",
            shard.name
        );
        assert_eq!(
            listen_key(&shard.config, "metrics_public").as_bool(),
            Some(true)
        );
        let ports = list(&shard.container["ports"]);
        let port_of = |p: &Value| -> u64 {
            p.as_u64().unwrap_or_else(|| {
                let named = ports.iter().find(|x| x["name"] == *p).unwrap();
                named["containerPort"].as_u64().unwrap()
            })
        };
        for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
            let get = &shard.container[probe]["httpGet"];
            assert_eq!(get["path"], path, "{}: {probe}", shard.name);
            assert_eq!(
                port_of(&get["port"]),
                u64::from(addr.port()),
                "{}: {probe}",
                shard.name
            );
        }
        assert!(shard.container["args"] == serde_json::json!(["listen", "--all"]));

        // The keys: every api_key_file is a file of a Secret mounted at its dir, with a mode
        // the listener takes (owner read, at most the fsGroup's read the kubelet adds).
        let pod = &shard.set["spec"]["template"]["spec"];
        assert_eq!(
            pod["securityContext"]["fsGroup"],
            pod["securityContext"]["runAsGroup"]
        );
        for (profile, key_file) in profiles(&shard.config) {
            let (dir, file) = key_file.rsplit_once('/').unwrap();
            let (_, volume) = shard
                .mounts
                .iter()
                .find(|(path, _)| path == dir)
                .unwrap_or_else(|| panic!("{profile}: nothing mounted at {dir}"));
            let secret = &volume["secret"];
            let mode = secret["defaultMode"].as_u64().unwrap();
            assert!(
                mode & 0o037 == 0 && mode & 0o400 != 0,
                "{profile}: mode {mode:o}"
            );
            let data = named(&docs, "Secret", secret["secretName"].as_str().unwrap());
            assert!(
                data["stringData"].get(file).is_some() || data["data"].get(file).is_some(),
                "{profile}: the Secret has no {file}"
            );
        }
    }
}

/// Each shard's config, as the ConfigMap holds it, run by the real `agentchat listen --all`
/// against the sim: only the mounts' paths are swapped for the test's (the key dir, the image's
/// binary), and the sim and a loopback port for the endpoint come from the environment. Every
/// profile connects, and the probes' paths answer 200 on the listener's endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_shards_config_runs_in_the_real_listener_and_its_probe_paths_answer() {
    let test = "each_shards_config_runs_in_the_real_listener_and_its_probe_paths_answer";
    let Some((python, _)) = validator(test) else {
        return;
    };
    let docs = documents(&python);
    let sim = Sim::start(1.0).await;
    for shard in shards(&docs) {
        let setup = Setup::new(&crate::listen_support::Opts::default());
        let keys = setup.tmp.path().join("keys");
        std::fs::create_dir_all(&keys).unwrap();
        let mut text = shard.config_text.clone();
        let mut agents = Vec::new();
        for (profile, key_file) in profiles(&shard.config) {
            let agent = sim.agent(&profile).await;
            let (dir, file) = key_file.rsplit_once('/').unwrap();
            let path = keys.join(file);
            std::fs::write(&path, &agent.key).unwrap();
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
            text = text.replace(&format!("{dir}/"), &format!("{}/", keys.display()));
            agents.push(agent);
        }
        assert!(text.contains("/usr/local/bin/agentchat"));
        text = text.replace("/usr/local/bin/agentchat", BIN);
        let config = setup.tmp.path().join("shard.toml");
        std::fs::write(&config, &text).unwrap();

        let mut cmd = crate::common::isolated_command(BIN, &["NOTIFY_SOCKET", "SSL_CERT*"]);
        cmd.args(["listen", "--all"]);
        cmd.env("AGENTCHAT_CONFIG", &config)
            .env("AGENTCHAT_API_BASE", &sim.api_base)
            .env("AGENTCHAT_METRICS_ADDR", "127.0.0.1:0")
            .env("XDG_STATE_HOME", setup.tmp.path().join("state"))
            .env("HOME", setup.tmp.path());
        let l = Listener::spawn(cmd, &setup, &format!("-{}", shard.name));
        for agent in &agents {
            assert!(
                eventually_async(30.0, || async {
                    crate::listen_support::accepted(&sim.connects(agent).await) >= 1
                })
                .await,
                "{}: {} never connected:\n{}",
                shard.name,
                agent.handle,
                l.log()
            );
        }
        assert!(
            crate::common::eventually(20.0, || !l.events("metrics_serving").is_empty()).await,
            "{}",
            l.log()
        );
        assert_eq!(
            l.count("metrics_serving"),
            1,
            "one endpoint, the pod's one port"
        );
        for serving in l.events("metrics_serving") {
            let addr = serving["addr"].as_str().unwrap().to_string();
            for path in ["/healthz", "/readyz"] {
                let url = format!("http://{addr}{path}");
                assert!(
                    eventually_async(30.0, || async {
                        reqwest::get(&url)
                            .await
                            .is_ok_and(|r| r.status().as_u16() == 200)
                    })
                    .await,
                    "{}: {url} never answered 200:\n{}",
                    shard.name,
                    l.log()
                );
            }
        }
        assert!(l.events("profile_config_error").is_empty(), "{}", l.log());
    }
}

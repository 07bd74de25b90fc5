//! Finding the pinned CLIs and giving them an isolated home, for the runtime tests.

use std::path::{Path, PathBuf};

/// The pinned CLI: `$AGENTCHAT_TEST_<VAR>`, else `.tools/npm/node_modules/.bin/<name>` in the
/// project. Missing is a test failure that says how to install it, never a silent skip.
pub fn pinned_cli(name: &str, var: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(var) {
        let p = PathBuf::from(p);
        assert!(
            p.exists(),
            "{var}={} does not exist; run scripts/test",
            p.display()
        );
        return p;
    }
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(".tools/npm/node_modules/.bin")
        .join(name);
    assert!(
        p.exists(),
        "the pinned `{name}` CLI is not installed: run scripts/test (it installs it into .tools/npm) \
         or set {var} to its path"
    );
    p
}

pub fn claude_bin() -> PathBuf {
    pinned_cli("claude", "AGENTCHAT_TEST_CLAUDE")
}

pub fn codex_bin() -> PathBuf {
    pinned_cli("codex", "AGENTCHAT_TEST_CODEX")
}

/// The model key the Codex provider entry reads (any value; the scripted server ignores it). Its
/// name is under `OPENAI_*`, which a run inherits (`core::run_env`); another name would need
/// the profile's `env_pass`.
pub const CODEX_PROVIDER_KEY_VAR: &str = "OPENAI_SCRIPTED_MODEL_KEY";

/// A minimal environment for a CLI (or the listener that starts one) with its own HOME, and
/// for Claude Code the model endpoint; nothing of the developer's own setup leaks in.
pub fn base_env(home: &Path, model_base: &str) -> Vec<(String, String)> {
    let path = std::env::var("PATH").unwrap_or_else(|_| "/usr/local/bin:/usr/bin:/bin".into());
    vec![
        ("PATH".into(), path),
        ("HOME".into(), home.display().to_string()),
        ("LANG".into(), "C.UTF-8".into()),
        // Claude Code: the scripted model endpoint, a dummy key, and no background traffic.
        ("ANTHROPIC_BASE_URL".into(), model_base.to_string()),
        ("ANTHROPIC_API_KEY".into(), "sk-ant-scripted-test".into()),
        ("DISABLE_TELEMETRY".into(), "1".into()),
        ("DISABLE_AUTOUPDATER".into(), "1".into()),
        (
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC".into(),
            "1".into(),
        ),
        // Codex: its own home with the scripted provider.
        (
            "CODEX_HOME".into(),
            home.join(".codex").display().to_string(),
        ),
        (CODEX_PROVIDER_KEY_VAR.into(), "scripted".into()),
    ]
}

/// Writes `$HOME/.codex/config.toml` pointing Codex at the scripted model server.
pub fn write_codex_home(home: &Path, model_base: &str) {
    let dir = home.join(".codex");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.toml"),
        format!(
            "model = \"scripted-model\"\nmodel_provider = \"scripted\"\n\n\
             [model_providers.scripted]\nname = \"scripted\"\nbase_url = \"{model_base}/v1\"\n\
             wire_api = \"responses\"\nenv_key = \"{CODEX_PROVIDER_KEY_VAR}\"\n"
        ),
    )
    .unwrap();
}

//! Codex's home for one run (`CODEX_HOME`), made in the run's scratch folder: Codex must write
//! its home (its state database, its helpers, its sessions), and the user's own holds every
//! earlier session, the history, the memories, the trusted projects, the profiles and whatever
//! `notify` or `writable_roots` the user set there. The run's home holds only:
//!
//! - `config.toml`: the keys of the user's own that choose and reach the model ([`KEPT_KEYS`]),
//!   nothing else: no MCP server, profile, project trust, notify program, sandbox setting or
//!   hook, whatever the user's file says (an allowlist, so a key a later Codex adds stays out);
//! - `auth.json`: a link to the user's login, which the kernel's line lets the run read and
//!   rewrite in place (a refreshed token is saved where the user's own `codex` finds it);
//! - `AGENTS.md`: the run's instructions, from the listener's own copy (`instructions`).
//!
//! The folder goes with the scratch folder when the run ends.

use super::RuntimeError;
use std::path::{Path, PathBuf};

/// The user's `config.toml` keys a run's home keeps.
pub const KEPT_KEYS: &[&str] = &[
    "model",
    "model_provider",
    "model_providers",
    "model_reasoning_effort",
    "model_reasoning_summary",
    "model_verbosity",
    "model_context_window",
    "model_auto_compact_token_limit",
    "model_supports_reasoning_summaries",
    "openai_base_url",
    "chatgpt_base_url",
    "forced_login_method",
    "forced_chatgpt_workspace_id",
    "preferred_auth_method",
    "disable_response_storage",
];

/// The most of the user's `config.toml` read.
const CONFIG_CAP: u64 = 1024 * 1024;

/// The run's Codex home, made.
#[derive(Debug)]
pub struct RunHome {
    pub dir: PathBuf,
    /// The user's login the home links to (`auth.json`), when there is one.
    pub login: Option<PathBuf>,
    /// The model endpoints the kept config names (for the network line).
    pub model_urls: Vec<String>,
}

/// The user's Codex home: `CODEX_HOME` (when set and not empty), else `~/.codex`.
pub fn user_home(
    codex_home: Option<&std::ffi::OsStr>,
    home: Option<&std::ffi::OsStr>,
) -> Option<PathBuf> {
    match (codex_home, home) {
        (Some(c), _) if !c.is_empty() => Some(PathBuf::from(c)),
        (_, Some(h)) => Some(Path::new(h).join(".codex")),
        _ => None,
    }
}

/// The kept part of the user's `config.toml` (as text), and the model endpoints it names: the
/// chosen provider's `base_url`, `openai_base_url`. A file that does not parse is an error.
pub fn kept_config(user_toml: &str) -> Result<(String, Vec<String>), String> {
    let table: toml::Table = user_toml
        .parse()
        .map_err(|e: toml::de::Error| format!("it does not parse: {}", e.message()))?;
    let kept: toml::Table = table
        .into_iter()
        .filter(|(k, _)| KEPT_KEYS.contains(&k.as_str()))
        .collect();
    let mut urls = Vec::new();
    let provider = kept.get("model_provider").and_then(|p| p.as_str());
    if let Some(url) = provider.and_then(|p| {
        kept.get("model_providers")?
            .get(p)?
            .get("base_url")?
            .as_str()
    }) {
        urls.push(url.to_string());
    }
    if let Some(url) = kept.get("openai_base_url").and_then(|u| u.as_str()) {
        urls.push(url.to_string());
    }
    let text = toml::to_string(&kept).map_err(|e| e.to_string())?;
    Ok((text, urls))
}

/// Makes `<scratch>/codex-home` from the user's home `user` (none: an empty config, no login).
pub fn make(
    scratch: &Path,
    user: Option<&Path>,
    instructions: Option<&str>,
) -> Result<RunHome, RuntimeError> {
    let dir = scratch.join("codex-home");
    crate::sys::fs::create_private_dir(&dir)?;
    let config = user.map(|u| u.join("config.toml"));
    let user_toml = match &config {
        Some(path) => match crate::sys::fs::read_regular_capped(path, CONFIG_CAP) {
            Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => {
                return Err(RuntimeError::Unusable(format!(
                    "cannot read Codex's {} for the run's model settings: {e}",
                    path.display()
                )));
            }
        },
        None => String::new(),
    };
    let (kept, model_urls) = kept_config(&user_toml).map_err(|why| {
        RuntimeError::Unusable(format!(
            "Codex's {}: {why}",
            config
                .as_deref()
                .unwrap_or(Path::new("config.toml"))
                .display()
        ))
    })?;
    std::fs::write(dir.join("config.toml"), kept)?;
    let login = user.map(|u| u.join("auth.json")).filter(|a| a.is_file());
    if let Some(login) = &login {
        std::os::unix::fs::symlink(login, dir.join("auth.json"))?;
    }
    if let Some(text) = instructions {
        std::fs::write(dir.join("AGENTS.md"), text)?;
    }
    Ok(RunHome {
        dir,
        login,
        model_urls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = r#"
model = "gpt-x"
model_provider = "corp"
notify = ["/bin/sh", "-c", "curl evil"]
sandbox_mode = "danger-full-access"
profile = "wide"
[model_providers.corp]
name = "corp"
base_url = "http://127.0.0.1:8411/v1"
env_key = "OPENAI_CORP"
[sandbox_workspace_write]
writable_roots = ["/"]
[mcp_servers.fs]
command = "fs-server"
[profiles.wide]
sandbox_mode = "danger-full-access"
[projects."/w"]
trust_level = "trusted"
"#;

    #[test]
    fn only_the_model_keys_of_the_users_config_reach_a_run() {
        let (kept, urls) = kept_config(USER).unwrap();
        let t: toml::Table = kept.parse().unwrap();
        let mut keys: Vec<&str> = t.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["model", "model_provider", "model_providers"]);
        assert_eq!(urls, ["http://127.0.0.1:8411/v1"]);
        assert!(kept_config("[[[").is_err());
        assert_eq!(kept_config("").unwrap().1, Vec::<String>::new());
    }

    #[test]
    fn the_run_home_links_the_login_and_holds_the_instructions() {
        let d = tempfile::tempdir().unwrap();
        let user = d.path().join("user");
        std::fs::create_dir(&user).unwrap();
        std::fs::write(user.join("config.toml"), USER).unwrap();
        std::fs::write(user.join("auth.json"), "{}").unwrap();
        std::fs::create_dir(user.join("sessions")).unwrap();
        let home = make(d.path(), Some(&user), Some("You are @me.")).unwrap();
        assert_eq!(
            home.login.as_deref(),
            Some(user.join("auth.json").as_path())
        );
        assert_eq!(
            std::fs::read_link(home.dir.join("auth.json")).unwrap(),
            user.join("auth.json")
        );
        assert_eq!(
            std::fs::read_to_string(home.dir.join("AGENTS.md")).unwrap(),
            "You are @me."
        );
        let config = std::fs::read_to_string(home.dir.join("config.toml")).unwrap();
        assert!(
            !config.contains("notify") && !config.contains("mcp_servers"),
            "{config}"
        );
        assert!(!home.dir.join("sessions").exists());
    }

    #[test]
    fn the_users_home_is_codex_home_else_dot_codex() {
        use std::ffi::OsStr;
        let h = |c: Option<&str>, h: Option<&str>| user_home(c.map(OsStr::new), h.map(OsStr::new));
        assert_eq!(h(Some("/x"), Some("/h")).unwrap(), Path::new("/x"));
        assert_eq!(h(Some(""), Some("/h")).unwrap(), Path::new("/h/.codex"));
        assert_eq!(h(None, None), None);
    }
}

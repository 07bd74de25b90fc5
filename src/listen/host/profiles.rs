//! One profile of the process: what tells a changed profile from an unchanged one on SIGHUP. (What
//! it needs before its listener can start is `listen::start::prepare`'s.)

use crate::config::{
    ClaudeSettings, CodexSettings, KeySource, ListenSettings, LogFormat, McpMode, Settings,
    TestTimeScale,
};
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use std::path::Path;

/// What SIGHUP compares: every resolved setting and the key itself, hashed, so a profile whose
/// table, key file or inherited top level changed reloads and one whose did not is left alone. 32
/// bytes a profile. Each field is written by name from an exhaustive destructuring (a new setting
/// does not compile until it is listed here), never from `Debug`, whose text is no stable
/// identity.
pub(super) fn fingerprint(settings: &Settings) -> [u8; 32] {
    let Settings {
        profile,
        config_path,
        api_base,
        api_base_written,
        allow_cleartext,
        api_key,
        key_source,
        state_dir,
        log_level,
        log_format,
        listen,
        time_scale,
    } = settings;
    let ListenSettings {
        runtime,
        command,
        workdir,
        run_timeout,
        kill_grace,
        quiet_window,
        max_delay,
        script_gets_key,
        identity_block,
        env_pass,
        tools,
        sandbox_read,
        sandbox_write,
        sandbox_ports,
        sandbox_script,
        instructions,
        run_logs_keep,
        run_log_max_bytes,
        idle_timeout,
        metrics_addr,
        metrics_public,
        max_concurrent_runs,
        min_available_memory,
        host_max_runs_per_day,
        host_max_cost_per_day_usd,
        claude,
        codex,
        policy,
    } = listen;
    let ClaudeSettings {
        binary: claude_binary,
        extra_args: claude_extra_args,
        mcp: claude_mcp,
        mcp_url: claude_mcp_url,
    } = claude;
    let CodexSettings {
        binary: codex_binary,
        extra_args: codex_extra_args,
        mcp_url: codex_mcp_url,
    } = codex;
    let mut f = Fields(Sha256::new());
    f.text("profile", profile);
    f.path("config_path", config_path.as_deref());
    f.text("api_base", api_base);
    f.opt_text("api_base_written", api_base_written.as_deref());
    f.flag("allow_cleartext", *allow_cleartext);
    match key_source {
        KeySource::Env => f.text("key_source", "env"),
        KeySource::File(p) => f.path("key_source.file", Some(p)),
        KeySource::Config => f.text("key_source", "config"),
        KeySource::Missing => f.text("key_source", "missing"),
    }
    f.path("state_dir", Some(state_dir));
    f.text("log_level", log_level);
    f.text(
        "log_format",
        match log_format {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        },
    );
    match time_scale {
        TestTimeScale::Off => f.text("time_scale", "off"),
        TestTimeScale::On(s) => f.bytes("time_scale.on", &s.to_bits().to_le_bytes()),
        TestTimeScale::Ignored(s) => f.bytes("time_scale.ignored", &s.to_bits().to_le_bytes()),
    }
    f.text("runtime", runtime.as_str());
    f.list("command", command);
    f.path("workdir", workdir.as_deref());
    for (name, d) in [
        ("run_timeout", run_timeout),
        ("kill_grace", kill_grace),
        ("quiet_window", quiet_window),
        ("max_delay", max_delay),
        ("idle_timeout", idle_timeout),
    ] {
        f.bytes(name, &d.as_nanos().to_le_bytes());
    }
    f.flag("script_gets_key", *script_gets_key);
    f.flag("identity_block", *identity_block);
    f.list("env_pass", env_pass);
    f.list("tools", tools);
    for (name, paths) in [
        ("sandbox_read", sandbox_read),
        ("sandbox_write", sandbox_write),
    ] {
        f.list(
            name,
            &paths
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>(),
        );
    }
    f.list(
        "sandbox_ports",
        &sandbox_ports.iter().map(u16::to_string).collect::<Vec<_>>(),
    );
    f.flag("sandbox_script", *sandbox_script);
    f.path("instructions", instructions.as_deref());
    // The summary names every rule exactly but rounds dollars to cents: their bits go too.
    f.text("policy", &crate::core::policy::summary(policy));
    for (name, usd) in [
        ("policy.max_cost_per_day_usd", policy.max_cost_per_day_usd),
        ("policy.max_cost_per_run_usd", policy.max_cost_per_run_usd),
    ] {
        f.bytes(name, &usd.unwrap_or(0.0).to_bits().to_le_bytes());
    }
    f.bytes("run_logs_keep", &(*run_logs_keep as u64).to_le_bytes());
    f.bytes("run_log_max_bytes", &run_log_max_bytes.to_le_bytes());
    f.opt_text(
        "metrics_addr",
        metrics_addr.map(|a| a.to_string()).as_deref(),
    );
    f.flag("metrics_public", *metrics_public);
    f.opt_text(
        "max_concurrent_runs",
        max_concurrent_runs.map(|n| n.to_string()).as_deref(),
    );
    f.opt_text(
        "min_available_memory",
        min_available_memory.map(|n| n.to_string()).as_deref(),
    );
    f.opt_text(
        "host_max_runs_per_day",
        host_max_runs_per_day.map(|n| n.to_string()).as_deref(),
    );
    f.bytes(
        "host_max_cost_per_day_usd",
        &host_max_cost_per_day_usd
            .unwrap_or(0.0)
            .to_bits()
            .to_le_bytes(),
    );
    f.path("claude.binary", claude_binary.as_deref());
    f.list("claude.extra_args", claude_extra_args);
    f.text(
        "claude.mcp",
        match claude_mcp {
            McpMode::Listener => "listener",
            McpMode::User => "user",
        },
    );
    f.opt_text("claude.mcp_url", claude_mcp_url.as_deref());
    f.path("codex.binary", codex_binary.as_deref());
    f.list("codex.extra_args", codex_extra_args);
    f.opt_text("codex.mcp_url", codex_mcp_url.as_deref());
    f.opt_text("api_key", api_key.as_ref().map(|k| k.expose_secret()));
    f.0.finalize().into()
}

/// The fingerprint's stream: each field its name and value, both length-prefixed, so no two
/// different settings write the same bytes.
struct Fields(Sha256);

impl Fields {
    fn bytes(&mut self, name: &str, value: &[u8]) {
        for part in [name.as_bytes(), value] {
            self.0.update((part.len() as u64).to_le_bytes());
            self.0.update(part);
        }
    }
    fn text(&mut self, name: &str, value: &str) {
        self.bytes(name, value.as_bytes());
    }
    fn flag(&mut self, name: &str, value: bool) {
        self.bytes(name, &[u8::from(value)]);
    }
    /// `None` and `Some("")` differ: a one-byte tag comes first.
    fn opt_text(&mut self, name: &str, value: Option<&str>) {
        match value {
            None => self.bytes(name, &[0]),
            Some(v) => self.bytes(name, &[&[1], v.as_bytes()].concat()),
        }
    }
    fn path(&mut self, name: &str, value: Option<&Path>) {
        match value {
            None => self.bytes(name, &[0]),
            Some(p) => self.bytes(name, &[&[1], p.as_os_str().as_encoded_bytes()].concat()),
        }
    }
    fn list(&mut self, name: &str, items: &[String]) {
        self.bytes(name, &(items.len() as u64).to_le_bytes());
        for item in items {
            self.text(name, item);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigArgs, resolve};
    use secrecy::SecretString;
    use std::collections::HashMap;

    fn settings(toml: &str) -> Settings {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        resolve(
            &ConfigArgs::default(),
            &env,
            Some((Path::new("/etc/agentchat/config.toml"), toml)),
        )
        .unwrap()
    }

    #[test]
    fn the_fingerprint_is_the_same_for_the_same_settings_and_moves_with_any_setting_or_the_key() {
        let base = "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n";
        let a = fingerprint(&settings(base));
        assert_eq!(a, fingerprint(&settings(base)));
        for changed in [
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/false\"]\n",
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\nrun_timeout = \"9m\"\n",
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\", \"\"]\n",
            "log_format = \"json\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n",
        ] {
            assert_ne!(a, fingerprint(&settings(changed)), "{changed}");
        }
        let mut keyed = settings(base);
        keyed.api_key = Some(SecretString::from("ac_one"));
        let mut other = settings(base);
        other.api_key = Some(SecretString::from("ac_two"));
        assert_ne!(fingerprint(&keyed), fingerprint(&other));
        assert_ne!(fingerprint(&keyed), a);
    }
}

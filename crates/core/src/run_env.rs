//! Which of the listener's environment variables a woken run inherits (`docs/runtimes.md`, "What
//! a woken run can touch"): an allowlist, never a blocklist, so a token in a unit's environment
//! or a shell's cloud credentials stay with the listener unless the user names them in
//! `listen.env_pass`.
//!
//! A pattern is a variable's name (`NAME`) or a prefix followed by one `*` (`PREFIX_*`); names are
//! compared exactly, case included.

/// What any run needs to start, find its programs, speak the user's locale, reach the network
/// through the user's proxy and trust the user's CAs.
pub const SYSTEM: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "LANG",
    "LANGUAGE",
    "LC_*",
    "TZ",
    "TMPDIR",
    "TMP",
    "TEMP",
    "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME",
    "XDG_DATA_HOME",
    "XDG_STATE_HOME",
    "XDG_RUNTIME_DIR",
    // The session bus, where a CLI's login may live in the desktop keyring.
    "DBUS_SESSION_BUS_ADDRESS",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "NODE_EXTRA_CA_CERTS",
    "REQUESTS_CA_BUNDLE",
    "CURL_CA_BUNDLE",
];

/// The agents' CLIs' own documented variables: how they log in, which model endpoint and
/// config home they use, and their switches. Both sets go to every runtime, as a script may
/// start either CLI.
pub const CLI: &[&str] = &[
    // Claude Code: the API key or OAuth token, base URL, Bedrock/Vertex switches, its config home.
    "ANTHROPIC_*",
    "CLAUDE_CONFIG_DIR",
    "CLAUDE_CODE_*",
    "DISABLE_TELEMETRY",
    "DISABLE_AUTOUPDATER",
    "DISABLE_ERROR_REPORTING",
    "DISABLE_NON_ESSENTIAL_MODEL_CALLS",
    "DISABLE_COST_WARNINGS",
    "API_TIMEOUT_MS",
    "MCP_TIMEOUT",
    "MCP_TOOL_TIMEOUT",
    // Codex: the OpenAI key and base URL, its home, its CA bundle.
    "OPENAI_*",
    "CODEX_*",
];

/// Whether `pattern` (`NAME` or `PREFIX_*`) matches the variable `name`.
pub fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => name == pattern,
    }
}

/// Whether a run inherits the listener's variable `name`: one of [`SYSTEM`] or [`CLI`], or named
/// by the profile's `env_pass`. The listener's own `AGENTCHAT_*` variables (its key, its config)
/// never pass this way: the run's own are set for it.
pub fn passes(name: &str, env_pass: &[String]) -> bool {
    SYSTEM.iter().chain(CLI).any(|p| matches(p, name)) || env_pass.iter().any(|p| matches(p, name))
}

/// Why an `env_pass` entry is not a pattern, or `None`: a name of letters, digits and `_`,
/// optionally ending in one `*`; a lone `*` (the whole environment) is refused.
pub fn pattern_problem(pattern: &str) -> Option<String> {
    let body = pattern.strip_suffix('*').unwrap_or(pattern);
    if body.is_empty() {
        return Some(format!(
            "`{pattern}` would pass the whole environment; name the variables (`NAME` or `PREFIX_*`)"
        ));
    }
    if !body.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Some(format!(
            "`{pattern}` is not a variable name or a `PREFIX_*` pattern (letters, digits and `_`, \
             one `*` at the end)"
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn what_a_cli_needs_passes_by_default() {
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TMPDIR",
            "USER",
            "HTTPS_PROXY",
            "no_proxy",
            "SSL_CERT_FILE",
            "ANTHROPIC_API_KEY",
            "ANTHROPIC_BASE_URL",
            "CLAUDE_CONFIG_DIR",
            "CLAUDE_CODE_OAUTH_TOKEN",
            "OPENAI_API_KEY",
            "CODEX_HOME",
        ] {
            assert!(passes(name, &[]), "{name}");
        }
    }

    #[test]
    fn secrets_and_the_listeners_own_variables_stay_with_the_listener() {
        for name in [
            "AWS_SECRET_ACCESS_KEY",
            "GITHUB_TOKEN",
            "DEPLOY_TOKEN",
            "SSH_AUTH_SOCK",
            "AGENTCHAT_API_KEY",
            "AGENTCHAT_CONFIG",
            "GOOGLE_APPLICATION_CREDENTIALS",
            "path",
            "PATHX",
        ] {
            assert!(!passes(name, &[]), "{name}");
        }
    }

    #[test]
    fn env_pass_adds_names_and_prefixes_exactly() {
        let p = pass(&["GITHUB_TOKEN", "AWS_*"]);
        assert!(passes("GITHUB_TOKEN", &p));
        assert!(!passes("GITHUB_TOKEN_2", &p));
        assert!(passes("AWS_REGION", &p));
        assert!(passes("AWS_", &p));
        assert!(!passes("XAWS_REGION", &p));
        assert!(!passes("aws_region", &p));
    }

    #[test]
    fn a_pattern_is_a_name_or_a_prefix_star() {
        assert_eq!(pattern_problem("GITHUB_TOKEN"), None);
        assert_eq!(pattern_problem("AWS_*"), None);
        assert!(pattern_problem("*").unwrap().contains("whole environment"));
        assert!(pattern_problem("").is_some());
        assert!(pattern_problem("A*B").is_some());
        assert!(pattern_problem("A-B").is_some());
        assert!(pattern_problem("A**").is_some());
    }
}

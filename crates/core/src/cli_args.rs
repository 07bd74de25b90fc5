//! What `listen.claude.extra_args` and `listen.codex.extra_args` may hold (`docs/runtimes.md`,
//! "Extra arguments"): an allowlist of ordinary tuning (the model, its effort, a fallback model,
//! a budget), each flag taking one value, read in every spelling the CLI's own parser accepts
//! (`--x v`, `--x=v`, and for a short flag `-x v`, `-xv`, `-x=v`). Anything else (another flag, a
//! positional word, a `-c` of another key) is refused naming it and the list: a flag missing
//! from a list of forbidden ones would have been a hole, one missing here is only a refusal.

/// One flag `extra_args` may hold; every allowed flag takes exactly one value.
#[derive(Debug, Clone, Copy)]
pub struct Allowed {
    pub long: &'static str,
    pub short: Option<char>,
    /// For a `-c KEY=VALUE` style flag: the keys it may set (`None`: any value).
    pub keys: Option<&'static [&'static str]>,
}

const fn flag(long: &'static str) -> Allowed {
    Allowed {
        long,
        short: None,
        keys: None,
    }
}

/// Claude Code's.
pub const CLAUDE: &[Allowed] = &[
    flag("--model"),
    flag("--fallback-model"),
    flag("--effort"),
    flag("--max-budget-usd"),
];

/// The Codex config keys `-c` may set from `extra_args`: the model and how it reasons. The model
/// provider is not among them: the run's network line is drawn from the provider in your
/// `config.toml`.
pub const CODEX_KEYS: &[&str] = &[
    "model",
    "model_reasoning_effort",
    "model_reasoning_summary",
    "model_verbosity",
];

/// Codex's (`codex exec`).
pub const CODEX: &[Allowed] = &[
    Allowed {
        long: "--model",
        short: Some('m'),
        keys: None,
    },
    Allowed {
        long: "--config",
        short: Some('c'),
        keys: Some(CODEX_KEYS),
    },
];

/// How `allowed` is written, for an error: `--model`, `-m`/`--model`, `-c`/`--config` (model, …).
pub fn describe(allowed: &[Allowed]) -> String {
    allowed
        .iter()
        .map(|a| {
            let name = match a.short {
                Some(s) => format!("`-{s}`/`{}`", a.long),
                None => format!("`{}`", a.long),
            };
            match a.keys {
                Some(keys) => format!("{name} of {}", keys.join(", ")),
                None => name,
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why `args` is not all allowed flags with their values, naming the first argument that is not;
/// `None` when every one is.
pub fn problem(args: &[String], allowed: &[Allowed]) -> Option<String> {
    let mut it = args.iter();
    while let Some(arg) = it.next() {
        let Some((a, attached)) = recognise(arg, allowed) else {
            return Some(format!("`{arg}` is not one of them"));
        };
        let value = match attached {
            Some(v) => v,
            None => match it.next() {
                Some(v) if !v.starts_with('-') => v.as_str(),
                _ => return Some(format!("`{arg}` needs its value right after it")),
            },
        };
        if let Some(keys) = a.keys {
            let key = value.split_once('=').map_or(value, |(k, _)| k).trim();
            if !keys.contains(&key) {
                return Some(format!(
                    "`{arg} {value}` sets `{key}`, which is not one of them"
                ));
            }
        }
    }
    None
}

/// The allowed flag `arg` spells and its attached value, if it has one.
fn recognise<'a>(arg: &'a str, allowed: &[Allowed]) -> Option<(Allowed, Option<&'a str>)> {
    allowed.iter().find_map(|a| {
        if arg == a.long {
            return Some((*a, None));
        }
        if let Some(v) = arg.strip_prefix(a.long).and_then(|r| r.strip_prefix('=')) {
            return Some((*a, Some(v)));
        }
        let short = a.short?;
        let rest = arg.strip_prefix('-')?.strip_prefix(short)?;
        if arg.starts_with("--") {
            return None;
        }
        match rest {
            "" => Some((*a, None)),
            r => Some((*a, Some(r.strip_prefix('=').unwrap_or(r)))),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_spelling_of_an_allowed_flag_passes() {
        for ok in [
            &["--model", "opus"][..],
            &["--model=opus", "--effort", "high"],
            &["--fallback-model", "sonnet", "--max-budget-usd=2"],
            &[],
        ] {
            assert_eq!(problem(&args(ok), CLAUDE), None, "{ok:?}");
        }
        for ok in [
            &["-m", "o3"][..],
            &["-mo3"],
            &["-m=o3"],
            &["--model=o3"],
            &["-c", "model=\"o3\""],
            &["-cmodel_reasoning_effort=high"],
            &["-c=model_verbosity=low"],
            &["--config", "model_reasoning_summary = \"auto\""],
            &["--config=model=\"o3\""],
        ] {
            assert_eq!(problem(&args(ok), CODEX), None, "{ok:?}");
        }
    }

    #[test]
    fn anything_else_is_refused_naming_it() {
        for (bad, named) in [
            (&["--managed-settings", "{}"][..], "--managed-settings"),
            (&["--continue"], "--continue"),
            (&["-r", "abc"], "-r"),
            (&["extra.json"], "extra.json"),
            (&["--model"], "--model"),
            (&["--model", "--tools"], "--model"),
            (&["--modelx=1"], "--modelx=1"),
        ] {
            let p = problem(&args(bad), CLAUDE).unwrap_or_default();
            assert!(p.contains(named), "{bad:?}: {p}");
        }
        for (bad, named) in [
            (&["-pwork"][..], "-pwork"),
            (&["-cmcp_servers.x.url=\"u\""], "mcp_servers.x.url"),
            (
                &["-c=sandbox_workspace_write.writable_roots=[\"/\"]"],
                "sandbox_workspace_write",
            ),
            (&["-sdanger-full-access"], "-sdanger-full-access"),
            (&["--config", "notify=[\"x\"]"], "notify"),
            (&["-c", "model.x=1"], "model.x"),
            (
                &["--dangerously-bypass-approvals-and-sandbox"],
                "--dangerously",
            ),
            (&["resume"], "resume"),
        ] {
            let p = problem(&args(bad), CODEX).unwrap_or_default();
            assert!(p.contains(named), "{bad:?}: {p}");
        }
    }

    #[test]
    fn the_list_is_described_with_each_spelling_and_key() {
        assert_eq!(
            describe(CODEX),
            "`-m`/`--model`, `-c`/`--config` of model, model_reasoning_effort, \
             model_reasoning_summary, model_verbosity"
        );
        assert!(describe(CLAUDE).starts_with("`--model`, `--fallback-model`"));
    }
}

//! Keeping the written one-process unit (src/service/host.rs) current as profiles come and go:
//! the refresh a reload runs first (`install --all --one-process --refresh`), what installing
//! again says about the open-files limit, and whether the unit runs a given config (for
//! `agentchat setup`, which adds a profile to it).

use super::ServiceKind;
use super::host::{HOST_UNIT, HostSpec, host_file_name, host_spec};
use super::systemd::systemd_quote;
use std::path::Path;

/// `service install --all --one-process --refresh`, which the unit's ExecReload runs before its
/// SIGHUP: the written unit's stop timeout, open-files limit and profile count brought up to the
/// profiles the config names now, every other line left as installed, and the manager told to
/// read it again (the stop timeout holds at once, a higher open-files limit at the next start).
/// It starts, reloads and refuses nothing: without a unit, or with a config in which no profile
/// would start, the file stays as it is.
pub(super) fn refresh_host(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<i32> {
    let target = super::target(kind)?;
    let path = target.dir.join(host_file_name(kind));
    if kind != ServiceKind::Systemd {
        println!("launchd starts the host again to reload it: nothing to refresh");
        return Ok(0);
    }
    let Ok(before) = std::fs::read_to_string(&path) else {
        println!("no unit at {}: nothing to refresh", path.display());
        return Ok(0);
    };
    let (spec, problems) = host_spec(config)?;
    if spec.profiles.is_empty() || problems.len() >= spec.profiles.len() {
        println!(
            "no profile of the config would start: {} left as it is",
            path.display()
        );
        return Ok(0);
    }
    let text = refreshed(
        &before,
        spec.profiles.len(),
        spec.stop_timeout_secs(),
        spec.limit_nofile(),
    );
    if text == before {
        println!("{} is current", path.display());
        return Ok(0);
    }
    super::install::write_unit(&path, &text)?;
    println!(
        "rewrote {} for {} profiles",
        path.display(),
        spec.profiles.len()
    );
    if !target.dry_run {
        super::install::run_manager("systemctl", &["--user", "daemon-reload"])?;
    }
    if let Some(note) = limit_note(&before, spec.limit_nofile(), !target.dry_run) {
        println!("{note}");
    }
    Ok(0)
}

/// Pure: the systemd unit `before` with its `TimeoutStopSec`, `LimitNOFILE` and "N profiles now"
/// comment set to these numbers; every other line (and the file's last newline) as it was.
fn refreshed(before: &str, profiles: usize, stop_secs: u64, nofile: u64) -> String {
    let mut out: Vec<String> = Vec::new();
    for line in before.lines() {
        let count = line
            .strip_prefix("# ")
            .and_then(|rest| rest.split_once(" profiles now:"))
            .filter(|(n, _)| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        out.push(if line.starts_with("TimeoutStopSec=") {
            format!("TimeoutStopSec={stop_secs}")
        } else if line.starts_with("LimitNOFILE=") {
            format!("LimitNOFILE={nofile}")
        } else if let Some((_, rest)) = count {
            format!("# {profiles} profiles now:{rest}")
        } else {
            line.to_string()
        });
    }
    let mut text = out.join("\n");
    if before.ends_with('\n') {
        text.push('\n');
    }
    text
}

/// What to say when the open-files limit the unit had (`before`, its text) is below the one it
/// has now: a running process keeps the limit it started with until it is restarted.
pub(super) fn limit_note(before: &str, now: u64, running: bool) -> Option<String> {
    let old: u64 = before
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .or_else(|| {
            before
                .split("<key>NumberOfFiles</key>")
                .nth(1)?
                .split("<integer>")
                .nth(1)?
                .split("</integer>")
                .next()
        })?
        .trim()
        .parse()
        .ok()?;
    (running && old < now).then(|| {
        format!(
            "LimitNOFILE rises from {old} to {now} at the host's next start (`systemctl --user \
             restart {HOST_UNIT}`); until then the running process keeps {old}"
        )
    })
}

/// Whether the one-process unit is written (`None`: it is not) and runs the config `config`
/// names: the `listen --all` arguments in its file, the program aside, are the ones `install
/// --all --one-process` would write for that config now, with the config named or (when it is
/// the default file) not. `agentchat setup` adds a profile to it only then.
pub fn host_runs_config(kind: ServiceKind, config: Option<&Path>) -> anyhow::Result<Option<bool>> {
    let path = super::target(kind)?.dir.join(host_file_name(kind));
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(None);
    };
    let (spec, _) = host_spec(config)?;
    let env = crate::config::process_env();
    let default = crate::config::config_file_path(&crate::config::ConfigArgs::default(), &env)
        .filter(|(_, named)| !named)
        .and_then(|(p, _)| std::path::absolute(p).ok());
    let effective = spec.config.clone().or_else(|| default.clone());
    let mut candidates = vec![HostSpec {
        config: effective.clone(),
        ..spec.clone()
    }];
    if effective.is_some() && effective == default {
        candidates.push(HostSpec {
            config: None,
            ..spec
        });
    }
    Ok(Some(
        candidates.iter().any(|c| runs_these_args(kind, &text, c)),
    ))
}

/// Whether the unit `text` starts `spec`'s `listen --all` arguments (the program aside).
fn runs_these_args(kind: ServiceKind, text: &str, spec: &HostSpec) -> bool {
    let args = spec.listen_args();
    let rest = args.get(1..).unwrap_or_default();
    match kind {
        ServiceKind::Systemd => {
            let tail: Vec<String> = rest.iter().map(|a| systemd_quote(a)).collect();
            text.lines()
                .find_map(|l| l.strip_prefix("ExecStart="))
                .is_some_and(|l| l.trim_end().ends_with(&format!(" {}", tail.join(" "))))
        }
        ServiceKind::Launchd => {
            let x = super::launchd::xml_escape;
            let mut tail: Vec<String> = rest
                .iter()
                .map(|a| format!("    <string>{}</string>", x(a)))
                .collect();
            tail.push("  </array>".into());
            text.contains(&format!("</string>\n{}", tail.join("\n")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_changes_only_the_numbers_that_follow_the_profiles() {
        let before = "[Service]\nExecStart=/x listen --all\nTimeoutStopSec=120\n\
                      # 3 profiles now: each holds a socket\nLimitNOFILE=8192\n\
                      Environment=PATH=/bin\n# 3 profiles of yours\n";
        let after = refreshed(before, 603, 330, 10240);
        assert_eq!(
            after,
            "[Service]\nExecStart=/x listen --all\nTimeoutStopSec=330\n\
             # 603 profiles now: each holds a socket\nLimitNOFILE=10240\n\
             Environment=PATH=/bin\n# 3 profiles of yours\n"
        );
        assert_eq!(refreshed(&after, 603, 330, 10240), after);
        assert_eq!(
            limit_note(before, 10240, true)
                .as_deref()
                .map(|n| n.contains("from 8192 to 10240")),
            Some(true)
        );
        assert_eq!(limit_note(before, 8192, true), None);
    }
}

//! The end of setup: the facts the last line is drawn from (`verdict`: which CLIs were left
//! without an entry, what the manager says of the service) and the first real run offered after
//! it (`doctor --run`).

use super::{Place, SetupArgs, pick, tty, verdict};
use crate::config::ConfigArgs;
use crate::runtime::user_cli;
use std::collections::HashMap;
use std::path::Path;

/// The CLIs found that have no `agentchat` MCP entry after wiring: the wiring failed. One left
/// to another profile or to the user's own entry was left alone on purpose, and said so.
pub fn unwired(found: &[pick::Found], env: &HashMap<String, String>) -> Vec<&'static str> {
    found
        .iter()
        .filter(|f| {
            let entry = user_cli::home(f.cli, env).map(|h| user_cli::current_entry(&h));
            matches!(entry, None | Some(user_cli::Entry::None))
        })
        .map(|f| f.cli.name())
        .collect()
}

/// The service as the manager sees it now.
pub fn service_now(profile: &str) -> verdict::Service {
    use crate::service::{ManagerView, ServiceKind};
    match crate::service::manager_view(ServiceKind::native(), profile) {
        ManagerView::NotAsked => verdict::Service::Written,
        ManagerView::Answered { running: true, .. } => verdict::Service::Running,
        view => verdict::Service::NotRunning(view.describe().trim().replace('\n', ", ")),
    }
}

/// `doctor --run` at the end: with `--run`, or when the user says yes on a terminal. Skipped
/// while a listener holds the profile's lock (it starts runs itself). A run that does not
/// complete makes setup's answer "not yet" (its own last line says so).
pub async fn first_run(
    args: &SetupArgs,
    place: &Place,
    handle: &str,
    runtime: crate::config::RuntimeKind,
    ask: bool,
) -> anyhow::Result<i32> {
    let lock =
        crate::sys::flock::holder(&place.state_dir.join(crate::listen::state_dir::LOCK_FILE));
    if matches!(lock, crate::sys::flock::LockHolder::Held { .. }) {
        if args.run || ask {
            println!(
                "doctor --run: skipped: the listener runs and starts runs itself; send @{handle} \
                 a message to see it answer"
            );
        }
        return Ok(verdict::EXIT_OK);
    }
    let cost = if runtime == crate::config::RuntimeKind::Script {
        ""
    } else {
        "; it costs one model call"
    };
    let wanted = args.run
        || ask
            && tty::confirm(
                &format!("Try one real run now (`agentchat doctor --run`{cost})?"),
                false,
            )?;
    if !wanted {
        return Ok(verdict::EXIT_OK);
    }
    let config = ConfigArgs {
        config: place.config_flag().map(Path::to_path_buf),
        profile: Some(place.profile.clone()),
        ..Default::default()
    };
    match crate::doctor::run::run_command(&config, true).await {
        Ok(0) => Ok(verdict::EXIT_OK),
        Ok(_) => Ok(verdict::EXIT_NOT_YET),
        Err(e) => {
            println!("not yet: the first run could not start: {e:#}");
            Ok(verdict::EXIT_NOT_YET)
        }
    }
}

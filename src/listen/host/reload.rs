//! SIGHUP for the process: one profile reloads as it always has; with `--all` the config is read
//! once and each profile is handed its own settings (issue 27).

use super::*;
use crate::log_events;

impl Host {
    /// SIGHUP. One profile: it reloads (its config and texts, as it always has). Every profile:
    /// the config is read again; a profile it adds (or one not running) starts, one it no longer
    /// names stops (its run gets its grace), one whose settings changed reloads with the settings
    /// read here (the config is parsed once, not once per profile), and the rest look again at
    /// whatever keeps their runs from starting (`HostCommand::Recheck`: SIGHUP is how a fixed
    /// runtime, key or texts is said). A file that cannot be read keeps every profile as it is.
    pub(super) fn reload(&mut self) {
        if self.scope.alone() {
            for r in self.profiles.values() {
                deliver(&r.commands, HostCommand::Reload(None));
            }
            return;
        }
        tracing::info!(event = %log_events::RELOAD, "reloading the config: profiles added, removed or changed");
        let set = match config::ConfigFile::read(&self.scope.args).and_then(|file| file.all()) {
            Ok(set) => set,
            Err(e) => {
                tracing::error!(event = %log_events::RELOAD_FAILED, error = %e, "the config cannot be read; every profile keeps its settings");
                return;
            }
        };
        let named: std::collections::BTreeSet<&str> =
            set.profiles.iter().map(|(n, _)| n.as_str()).collect();
        let gone: Vec<String> = self
            .profiles
            .keys()
            .filter(|n| !named.contains(n.as_str()))
            .cloned()
            .collect();
        self.returning
            .retain(|name, _| named.contains(name.as_str()));
        self.blocked.retain(|name, _| named.contains(name.as_str()));
        self.failed_other
            .retain(|name| named.contains(name.as_str()));
        for name in gone {
            if let Some(r) = self.profiles.remove(&name) {
                tracing::info!(event = %log_events::PROFILE_REMOVED, profile = %name, "the config no longer names this profile; stopping it");
                deliver(&r.commands, HostCommand::Stop("removed from the config"));
                self.leaving.push((name, r));
            }
        }
        if let Some(r) = self.registry() {
            for n in r.names() {
                let leaving = self.leaving.iter().any(|(l, _)| *l == n);
                if !named.contains(n.as_str()) && !leaving {
                    r.remove(&n);
                }
            }
        }
        let (mut added, mut changed) = (0, 0);
        for (name, settings) in set.profiles {
            match (self.profiles.get_mut(&name), settings) {
                (Some(r), Ok(s)) => {
                    let fingerprint = profiles::fingerprint(&s);
                    if fingerprint != r.fingerprint {
                        r.fingerprint = fingerprint;
                        changed += 1;
                        // The settings read here, once for every profile (no profile reads the
                        // config again).
                        deliver(&r.commands, HostCommand::Reload(Some(Box::new(s))));
                    } else {
                        // Unchanged, but SIGHUP is how a fixed runtime, key or texts is said.
                        deliver(&r.commands, HostCommand::Recheck);
                    }
                }
                (Some(_), Err(e)) => {
                    tracing::error!(
                        event = %log_events::RELOAD_FAILED,
                        profile = %name,
                        error = %e,
                        "this profile's new config is wrong; it keeps its old settings"
                    );
                }
                (None, Ok(s)) if self.leaving.iter().any(|(n, _)| *n == name) => {
                    added += 1;
                    tracing::info!(event = %log_events::PROFILE_ADDED, profile = %name, "this profile's old listener is still stopping; it starts once that one has ended");
                    self.returning.insert(name, s);
                }
                (None, Ok(s)) => {
                    added += 1;
                    tracing::info!(event = %log_events::PROFILE_ADDED, profile = %name, "starting this profile");
                    drop(self.start(name, s));
                }
                (None, Err(e)) => self.config_error(&name, &e),
            }
        }
        tracing::info!(
            event = %log_events::RELOADED,
            profiles = self.profiles.len(),
            added,
            changed,
            config_reads = config::file_reads(),
            "config reloaded"
        );
    }
}

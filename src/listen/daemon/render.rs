//! The status document, built in one place at write time from the owners' state: the one state
//! and the one detail by `core::shown`'s precedence, times formatted only here.

use super::*;
use crate::core::shown::{Sources, Waiting};
use crate::core::status::{LastWake, Usage};

impl Daemon {
    /// Every source of the shown state and detail, as they stand.
    pub(super) fn sources(&self) -> Sources<'_> {
        Sources {
            phase: self.flags.phase,
            socket: Some(self.socket.state),
            socket_detail: self.socket.detail.as_deref(),
            cycle_wait_until: None,
            unusable: self.runtime.why(),
            mismatch: self
                .flags
                .mismatch
                .as_deref()
                .map(|you| (you, self.handle.as_deref())),
            removed: self.flags.removed.as_deref(),
            waiting: self.flags.queued.as_ref().map(|q| Waiting {
                place: q.place,
                running: q.running,
                max: q.max,
            }),
        }
    }

    /// The parts of the status that owners beside the daemon's own state fill in: the run
    /// policy's hold and spending (`held`, `usage`; issue 26) go here. Empty until then.
    fn provide(&self, status: &mut Status) {
        self.run_policy.show(status);
    }

    /// The status document as of `now`.
    pub(super) fn render(&self, now: SystemTime) -> Status {
        let (state, since) = self.status_file.shown();
        let cycle_wait = self.flags.cycle_wait.map(time::rfc3339);
        let sources = Sources {
            cycle_wait_until: cycle_wait.as_deref(),
            ..self.sources()
        };
        let s = &self.settings;
        let mut status = Status {
            state,
            since: time::rfc3339(since),
            socket: Some(self.socket.state),
            pid: std::process::id(),
            profile: s.profile.clone(),
            handle: self.handle.as_deref().map(crate::core::handle::shown),
            api_base: s.api_base.clone(),
            runtime: s.listen.runtime.as_str().to_string(),
            key_source: key_source_label(&s.key_source),
            updated_at: time::rfc3339(now),
            started_at: time::rfc3339(self.started_at),
            last_frame_at: self.socket.last_frame.map(time::rfc3339),
            last_connected_at: self.socket.last_connected.map(time::rfc3339),
            last_wake: self.wakes.last().map(|w| LastWake {
                at: time::rfc3339(SystemTime::UNIX_EPOCH + Duration::from_millis(w.at_ms)),
                reasons: w.reasons.clone(),
            }),
            last_cycle: self.last_cycle.clone(),
            next_retry_at: self.socket.next_retry_at.map(time::rfc3339),
            detail: sources.detail(),
            texts: self.texts.status(),
            counters: Counters {
                wakes: self.wakes.count(),
                ..self.counters.clone()
            },
            held: None,
            usage: Usage::default(),
            file_modified: None,
        };
        self.provide(&mut status);
        status
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigArgs, resolve};
    use std::collections::HashMap;
    use std::path::Path;

    fn daemon(state_dir: &Path) -> Daemon {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        let toml =
            "api_key = \"ac_test\"\n[listen]\nruntime = \"script\"\ncommand = [\"/bin/true\"]\n";
        let settings = resolve(
            &ConfigArgs::default(),
            &env,
            Some((Path::new("/etc/agentchat/config.toml"), toml)),
        )
        .unwrap();
        let key = settings.api_key.clone().unwrap();
        Daemon::new(Start {
            source: config::Source::One(ConfigArgs::default()),
            settings,
            key,
            state: StateDir::at(state_dir),
            metrics: Metrics::new("default"),
            notify_status: false,
            pacer: crate::listen::pacer::Pacer::new(1.0),
            admission: None,
        })
        .unwrap()
    }

    fn shown(d: &mut Daemon) -> Status {
        let now = SystemTime::now();
        d.status_file.show(d.sources().state(), now);
        d.render(now)
    }

    #[test]
    fn the_status_is_rendered_from_the_owners_with_the_most_pressing_detail() {
        let dir = tempfile::tempdir().unwrap();
        let mut d = daemon(dir.path());
        assert_eq!(shown(&mut d).state, ListenerState::Starting);
        d.ready();
        d.on_socket_event(SocketEvent::State {
            state: SocketState::Connected,
            next_retry_at: None,
            detail: Some("up".into()),
        });
        d.record(&WakeCause::Invite, 2);
        let s = shown(&mut d);
        assert_eq!(s.state, ListenerState::Connected);
        assert_eq!(s.detail.as_deref(), Some("up"));
        assert_eq!(s.counters.wakes, 2);
        assert_eq!(s.last_wake.map(|w| w.reasons), Some(vec!["invite".into()]));
        assert_eq!((s.held, s.usage), (None, Usage::default()));

        d.mark_unusable("no program".into());
        let s = shown(&mut d);
        assert_eq!(s.state, ListenerState::RuntimeUnusable);
        assert_eq!(s.detail.as_deref(), Some("runtime unusable: no program"));

        d.leave_unusable("reload", true);
        let s = shown(&mut d);
        assert_eq!(s.state, ListenerState::Connected);
        assert_eq!(
            s.detail.as_deref(),
            Some("up"),
            "the socket's words are back"
        );
        assert_eq!(s.counters.wakes, 3, "leaving it is a wake of its own");
        let reasons = s.last_wake.map(|w| w.reasons).unwrap();
        assert_eq!(reasons, ["invite", "recovered"]);
    }
}

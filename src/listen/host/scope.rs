//! What the process is given at start: the `Scope` that tells `listen` (a set of one) from
//! `listen --all`, and `--all`'s top level (`Top`: its metrics endpoint, time scale, run slots).

use super::*;

/// What `agentchat listen` (a set of one profile) and `listen --all` do differently, decided once
/// at start.
pub(super) struct Scope {
    /// The command line's config arguments: where a profile's settings are read again.
    pub(super) args: ConfigArgs,
    /// `listen --all`'s one metrics endpoint, every profile's metrics in its registry. `None`:
    /// `listen`, whose one profile is the process ([`Scope::alone`]).
    pub(super) shared: Option<Endpoint>,
}

impl Scope {
    /// The process is its one profile: the profile serves its own metrics, tells systemd its
    /// state, logs without a profile span and reads its own config on SIGHUP, and its end is the
    /// process's, with its exit code.
    pub(super) fn alone(&self) -> bool {
        self.shared.is_none()
    }

    /// Where the profile `name` reads its settings again (SIGHUP, a refused key).
    pub(super) fn source(&self, name: &str) -> config::Source {
        match self.shared {
            None => config::Source::One(self.args.clone()),
            Some(_) => config::Source::OfAll {
                args: self.args.clone(),
                profile: name.to_string(),
            },
        }
    }
}

/// The one metrics endpoint of `listen --all`: every profile's `Metrics` in one `Registry`.
pub(super) struct Endpoint {
    /// `--metrics-addr`, else `AGENTCHAT_METRICS_ADDR`, else the top level's
    /// `[listen] metrics_addr`; off when none is set (a profile's own is ignored).
    pub(super) addr: Option<std::net::SocketAddr>,
    pub(super) registry: Arc<Registry>,
}

impl Endpoint {
    pub(super) fn new(addr: Option<std::net::SocketAddr>) -> Endpoint {
        Endpoint {
            addr,
            registry: Registry::new(),
        }
    }
}

/// The top level's `listen.max_concurrent_runs` and `listen.min_available_memory`: the process's
/// run slots (`listen::admission`), for every profile of `listen --all`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct RunSlots {
    pub(super) max: Option<usize>,
    pub(super) min_memory: Option<u64>,
}

impl RunSlots {
    pub(super) fn of(s: &Settings) -> RunSlots {
        RunSlots {
            max: s.listen.max_concurrent_runs,
            min_memory: s.listen.min_available_memory,
        }
    }

    /// The slots there are: as set, else one per CPU core, at least two.
    pub(super) fn max(self) -> usize {
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        self.max
            .unwrap_or_else(|| crate::core::admission::default_max(cores))
    }
}

/// The top level's settings for the whole process of `listen --all`, read before its profiles.
#[derive(Debug, Clone, Copy)]
pub(in crate::listen) struct Top {
    /// `--metrics-addr`, else `AGENTCHAT_METRICS_ADDR`, else the top level's `[listen]
    /// metrics_addr`.
    pub(super) metrics_addr: Option<std::net::SocketAddr>,
    /// The connect pacer, which all profiles share, runs by it.
    pub(super) scale: TestTimeScale,
    pub(super) slots: RunSlots,
    /// The host's daily budget (`listen.host_max_runs_per_day`, `..._cost_per_day_usd`).
    pub(super) budget: crate::core::host::HostBudget,
}

impl Top {
    pub(in crate::listen) fn of(s: &Settings) -> Top {
        Top {
            metrics_addr: s.listen.metrics_addr,
            scale: s.time_scale,
            slots: RunSlots::of(s),
            budget: crate::core::host::HostBudget {
                max_runs_per_day: s.listen.host_max_runs_per_day.filter(|n| *n > 0),
                max_cost_per_day_usd: s.listen.host_max_cost_per_day_usd.filter(|c| *c > 0.0),
            },
        }
    }
}

impl Default for Top {
    /// A top level that cannot be read: no endpoint, contract speed, the default slots (the
    /// profiles' own errors say what is wrong).
    fn default() -> Top {
        Top {
            metrics_addr: None,
            scale: TestTimeScale::Off,
            slots: RunSlots::default(),
            budget: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_is_alone_and_reads_its_own_profile_while_all_reads_each_profile_of_the_config() {
        let args = ConfigArgs::default();
        let one = Scope {
            args: args.clone(),
            shared: None,
        };
        assert!(one.alone());
        assert!(matches!(one.source("work"), config::Source::One(_)));
        let all = Scope {
            args,
            shared: Some(Endpoint::new(None)),
        };
        assert!(!all.alone());
        assert!(matches!(
            all.source("work"),
            config::Source::OfAll { profile, .. } if profile == "work"
        ));
    }
}

//! The scenarios built by hand around issue 36's three findings: each puts one listener in the
//! situation the finding needs, at fixed times, with nothing drawn (`tests`); and the connect
//! storm of a thousand profiles.

use super::scenario::{Act, HOUR, MIN, Scenario, Scripted};

/// A runtime that refuses every run while its login check passes: the first run is refused,
/// and each re-check that passes must not start a run of its own for ever.
pub fn refused_runtime() -> Scenario {
    let mut s = Scenario::quiet(1, 2);
    s.script = vec![
        Scripted {
            at_ms: 30_000,
            act: Act::Refuses {
                who: 0,
                for_ms: 3 * HOUR,
                login_ok: true,
            },
        },
        Scripted {
            at_ms: 60_000,
            act: Act::Dm { peer: 0, to: 0 },
        },
    ];
    s.chaos_ms = 4 * HOUR;
    s
}

/// Quiet hours (22:00-07:00 in Berlin) hold a message's run; the tray answers 503 from a few
/// minutes before 07:00 for half an hour.
pub fn hold_ends_in_outage() -> Scenario {
    let mut s = Scenario::quiet(1, 2);
    // 2026-03-28 20:00 UTC is 21:00 in Berlin; 07:00 on the 29th (summer time) is 05:00 UTC.
    s.epoch_ms = super::scenario::unix_ms(2026, 3, 28, 20);
    if let Some(p) = s.profiles.first_mut() {
        p.policy = "timezone = \"Europe/Berlin\"\nquiet_hours = [\"22:00-07:00\"]".into();
    }
    s.script = vec![
        Scripted {
            at_ms: 90 * MIN,
            act: Act::Dm { peer: 0, to: 0 },
        },
        Scripted {
            at_ms: 9 * HOUR - 3 * MIN,
            act: Act::Outage { for_ms: 30 * MIN },
        },
    ];
    s.chaos_ms = 10 * HOUR;
    s.settle_ms = 26 * HOUR;
    s
}

/// A muted peer writes; the cycle it wakes reads a slow tray, and meanwhile 60 other peers
/// write: the muted card is past the cut, and the cycle must still run nothing.
pub fn muted_past_cut() -> Scenario {
    let mut s = Scenario::quiet(1, 61);
    s.script = vec![
        Scripted {
            at_ms: 10_000,
            act: Act::Mute {
                who: 0,
                peer: 0,
                agent_wide: true,
                on: true,
            },
        },
        // Its first message shows its card muted on a tray: what the listener can know of the
        // mute (a `message.new` does not say it).
        Scripted {
            at_ms: 15_000,
            act: Act::Dm { peer: 0, to: 0 },
        },
        Scripted {
            at_ms: 40_000,
            act: Act::SlowTray {
                who: 0,
                for_ms: 10 * MIN,
            },
        },
        Scripted {
            at_ms: 60_000,
            act: Act::Dm { peer: 0, to: 0 },
        },
        Scripted {
            at_ms: 63_500,
            act: Act::Flood { to: 0, peers: 61 },
        },
    ];
    s
}

/// When `storm` restarts the server (ms): after the start's storm is paced out
/// (`PacingPolicy::time_for(1000)` is 245 s at the defaults; more profiles start later).
pub fn restart_at_ms(n: usize) -> u64 {
    5 * MIN + super::storm::paced_ms(n)
}

/// `n` quiet profiles in one host; the server restarts once they are all connected, and the
/// settle drops every socket once more: three storms of `n` connects from one IP.
pub fn storm(n: usize) -> Scenario {
    let mut s = Scenario::quiet(n, 1);
    let restart = restart_at_ms(n);
    let storm = 5 * MIN + super::storm::paced_ms(n);
    s.script = vec![Scripted {
        at_ms: restart,
        act: Act::Restart,
    }];
    s.chaos_ms = restart + storm;
    s.settle_ms = storm;
    s
}

//! What a seed draws: the profiles and their settings (the run policy with quiet hours in a zone
//! with daylight saving time, the windows, the runtime), the run slots, the peers and groups, the
//! start date (near a daylight saving change), how long the chaos lasts, and how often each kind
//! of traffic and fault comes. A hand-built [`Shape`] sets the same fields around one known
//! fault, with a script of acts at fixed times instead of (or beside) the drawn ones.

use crate::core::rng::Rng;
use crate::core::runtime_kind::RuntimeKind;

/// Which scenario to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    /// Everything drawn from the seed.
    Seeded(u64),
    /// A runtime that refuses every run while its login check passes (issue 36's first finding).
    RefusedRuntime,
    /// Quiet hours that end while the tray answers 503 (the second).
    HoldEndsInOutage,
    /// A muted conversation's message whose card a flood pushes past the tray's cut (the third).
    MutedPastCut,
    /// This many profiles in one host start, then the server restarts (every socket closed at
    /// once): the connect storm of `listen --all` (`scripts/simulate --storm N`).
    Storm(usize),
}

/// One scripted act at a fixed time (ms from the start).
#[derive(Debug, Clone, PartialEq)]
pub struct Scripted {
    pub at_ms: u64,
    pub act: Act,
}

/// What the world does at a time: traffic, the user's acts, a fault.
#[derive(Debug, Clone, PartialEq)]
pub enum Act {
    /// A peer writes to a profile's agent.
    Dm { peer: usize, to: usize },
    /// A peer writes into a group.
    GroupMessage { peer: usize, group: usize },
    /// A peer invites a profile's agent into a new group.
    Invite { peer: usize, to: usize },
    /// Many peers write to one agent within a few seconds.
    Flood { to: usize, peers: usize },
    /// The agent's owner mutes (or unmutes) a conversation with a peer, or the peer.
    Mute {
        who: usize,
        peer: usize,
        agent_wide: bool,
        on: bool,
    },
    /// The server drops every socket of the agent without a close (1006 to the client).
    Drop { who: usize },
    /// The whole server restarts (`/_sim/restart`): every socket of every agent closed at once.
    Restart,
    /// The server closes the agent's sockets with this code and reason.
    Close {
        who: usize,
        code: u16,
        reason: String,
    },
    /// The server refuses the agent's key for a while (1008, 401).
    RefuseKey { who: usize, for_ms: u64 },
    /// The key is rotated at the server; the user writes the new one after a while.
    RotateKey { who: usize, written_after_ms: u64 },
    /// Dials are closed `4426` for a while.
    Upgrade { who: usize, for_ms: u64 },
    /// Every REST answer is `503` for a while.
    Outage { for_ms: u64 },
    /// The network is gone for a while: no REST answer, no dial.
    Unreachable { for_ms: u64 },
    /// The agent's tray reads answer `429` with a `Retry-After` until then.
    Throttle { who: usize, for_ms: u64 },
    /// The agent's tray route answers `410 REMOVED` for a while.
    Removed { who: usize, for_ms: u64 },
    /// The agent's tray reads take seconds for a while.
    SlowTray { who: usize, for_ms: u64 },
    /// `GET /v1/texts` answers `503` for a while.
    TextsDown { for_ms: u64 },
    /// The served texts lack the prompts for a while.
    TextsUnusable { for_ms: u64 },
    /// The profile's disk is full for a while (status, workdir).
    DiskFull { who: usize, for_ms: u64 },
    /// The machine sleeps (the monotonic clock stops, the wall clock does not).
    Suspend { for_ms: u64 },
    /// The wall clock is stepped (NTP), ms (negative: back).
    WallStep { by_ms: i64 },
    /// SIGHUP with changed settings.
    Reload { who: usize },
    /// The runtime refuses runs for a while (`login_ok`: its login check still passes).
    Refuses {
        who: usize,
        for_ms: u64,
        login_ok: bool,
    },
}

/// One profile.
#[derive(Debug, Clone)]
pub struct ProfilePlan {
    pub name: String,
    pub handle: String,
    pub runtime: RuntimeKind,
    pub quiet_window_ms: u64,
    pub max_delay_ms: u64,
    pub idle_timeout_s: u64,
    pub kill_grace_s: u64,
    pub run_timeout_ms: u64,
    /// `[listen.policy]` as TOML (empty: none).
    pub policy: String,
    /// Direct messages from peers an hour.
    pub dm_per_hour: f64,
}

/// How often each drawn act comes, per hour (per profile where it names one).
#[derive(Debug, Clone, Default)]
pub struct Rates {
    pub group_message: f64,
    pub invite: f64,
    pub mute: f64,
    pub drop: f64,
    pub close: f64,
    pub refuse_key: f64,
    pub rotate_key: f64,
    pub upgrade: f64,
    pub outage: f64,
    pub unreachable: f64,
    pub throttle: f64,
    pub removed: f64,
    pub slow_tray: f64,
    pub texts_down: f64,
    pub texts_unusable: f64,
    pub disk_full: f64,
    pub suspend: f64,
    pub wall_step: f64,
    pub reload: f64,
    pub refuses: f64,
    pub flood: f64,
}

/// The whole scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub seed: u64,
    pub zone: &'static str,
    /// The wall clock at the start, Unix ms.
    pub epoch_ms: i64,
    pub profiles: Vec<ProfilePlan>,
    /// `listen.max_concurrent_runs` (`listen --all`).
    pub slots: Option<usize>,
    pub peers: usize,
    /// Groups: the peers and the profiles in each.
    pub groups: Vec<(Vec<usize>, Vec<usize>)>,
    pub chaos_ms: u64,
    pub settle_ms: u64,
    pub rates: Rates,
    /// Acts at fixed times, beside the drawn ones.
    pub script: Vec<Scripted>,
    /// Peers answer a run's reply (the conversation goes on), with this chance.
    pub peer_answers: f64,
    /// The runtime's runs: the chance one fails, hangs to its time limit, or ends without a verdict.
    pub run_fails: f64,
    pub run_hangs: f64,
    pub run_silent: f64,
}

pub const HOUR: u64 = 3_600_000;
pub const MIN: u64 = 60_000;

/// A UTC civil hour: year, month, day, hour.
type Civil = (i64, u32, u32, u32);

/// Zones with a daylight saving change, and the changes of 2026 (UTC) a scenario starts near.
const ZONES: [(&str, [Civil; 2]); 3] = [
    ("Europe/Berlin", [(2026, 3, 29, 1), (2026, 10, 25, 1)]),
    ("America/New_York", [(2026, 3, 8, 7), (2026, 11, 1, 6)]),
    ("Australia/Sydney", [(2026, 4, 4, 16), (2026, 10, 3, 16)]),
];

/// Quiet hours a policy may have: across midnight, across the changed hour, inside it.
const QUIET: [&str; 6] = [
    "22:00-07:00",
    "01:30-03:30",
    "00:00-06:00",
    "02:00-02:45",
    "12:00-13:00",
    "23:00-24:00",
];

/// Unix ms of a UTC civil time (days from civil, H. Hinnant).
pub fn unix_ms(y: i64, m: u32, d: u32, h: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(m);
    let mp = if m > 2 { m - 3 } else { m + 9 };
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + i64::from(h) * 3600) * 1000
}

impl Scenario {
    pub fn draw(shape: &Shape) -> Scenario {
        match shape {
            Shape::Seeded(seed) => seeded(*seed),
            Shape::RefusedRuntime => super::findings::refused_runtime(),
            Shape::HoldEndsInOutage => super::findings::hold_ends_in_outage(),
            Shape::MutedPastCut => super::findings::muted_past_cut(),
            Shape::Storm(n) => super::findings::storm(*n),
        }
    }

    /// A quiet scenario with `n` plain profiles and no drawn acts, for a hand-built one.
    pub fn quiet(n: usize, peers: usize) -> Scenario {
        Scenario {
            seed: 1,
            zone: "Europe/Berlin",
            epoch_ms: unix_ms(2026, 3, 28, 12),
            profiles: (0..n)
                .map(|i| plain_profile(i, RuntimeKind::ClaudeCode))
                .collect(),
            slots: None,
            peers,
            groups: Vec::new(),
            chaos_ms: 2 * HOUR,
            settle_ms: 5 * HOUR,
            rates: Rates::default(),
            script: Vec::new(),
            peer_answers: 0.0,
            run_fails: 0.0,
            run_hangs: 0.0,
            run_silent: 0.0,
        }
    }
}

pub fn plain_profile(i: usize, runtime: RuntimeKind) -> ProfilePlan {
    ProfilePlan {
        name: format!("p{i}"),
        handle: format!("agent{i}"),
        runtime,
        quiet_window_ms: 3_000,
        max_delay_ms: 15_000,
        idle_timeout_s: 100,
        kill_grace_s: 10,
        run_timeout_ms: 15 * MIN,
        policy: String::new(),
        dm_per_hour: 0.0,
    }
}

fn pick<'a, T>(rng: &mut Rng, xs: &'a [T]) -> Option<&'a T> {
    xs.get(usize::try_from(rng.below(xs.len() as u64)).unwrap_or(0))
}

fn range(rng: &mut Rng, lo: u64, hi: u64) -> u64 {
    lo + rng.below(hi.saturating_sub(lo) + 1)
}

fn seeded(seed: u64) -> Scenario {
    let mut rng = Rng::new(seed ^ 0x5EED_5EED_5EED_5EED);
    let (zone, changes) = pick(&mut rng, &ZONES).copied().unwrap_or(ZONES[0]);
    let (y, m, d, h) = pick(&mut rng, &changes).copied().unwrap_or(changes[0]);
    // Start up to a day and a half before the change, so the chaos or the settle crosses it.
    let epoch_ms = unix_ms(y, m, d, h) - i64::try_from(rng.below(36 * HOUR)).unwrap_or(0);
    let n = usize::try_from(rng.below(8)).unwrap_or(0) + 1;
    let runtimes = [
        RuntimeKind::ClaudeCode,
        RuntimeKind::Codex,
        RuntimeKind::Script,
    ];
    let peers = usize::try_from(range(&mut rng, 8, 70)).unwrap_or(8);
    let mut timed_policy = false;
    let profiles: Vec<ProfilePlan> = (0..n)
        .map(|i| {
            let runtime = pick(&mut rng, &runtimes)
                .copied()
                .unwrap_or(RuntimeKind::ClaudeCode);
            let mut p = plain_profile(i, runtime);
            p.quiet_window_ms = range(&mut rng, 0, 5) * 1000;
            p.max_delay_ms = range(&mut rng, 5, 30) * 1000;
            p.idle_timeout_s = range(&mut rng, 90, 180);
            p.kill_grace_s = range(&mut rng, 0, 20);
            p.run_timeout_ms = range(&mut rng, 1, 20) * MIN;
            p.dm_per_hour = range(&mut rng, 1, 8) as f64;
            if rng.chance(0.6) {
                let (policy, timed) = draw_policy(&mut rng, zone, peers);
                timed_policy |= timed;
                p.policy = policy;
            }
            p
        })
        .collect();
    let slots = (n > 1 && rng.chance(0.4))
        .then(|| usize::try_from(range(&mut rng, 1, (n as u64).min(3))).unwrap_or(1));
    let groups = (0..rng.below(4))
        .map(|_| {
            let members: Vec<usize> = (0..range(&mut rng, 1, 5))
                .map(|_| usize::try_from(rng.below(peers as u64)).unwrap_or(0))
                .collect();
            let agents: Vec<usize> = (0..n).filter(|_| rng.chance(0.5)).collect();
            (members, agents)
        })
        .collect();
    let r = |rng: &mut Rng, hi: f64| hi * rng.f64();
    let rates = Rates {
        group_message: r(&mut rng, 4.0),
        invite: r(&mut rng, 0.5),
        mute: r(&mut rng, 0.5),
        drop: r(&mut rng, 1.0),
        close: r(&mut rng, 0.6),
        refuse_key: r(&mut rng, 0.15),
        rotate_key: r(&mut rng, 0.05),
        upgrade: r(&mut rng, 0.05),
        outage: r(&mut rng, 0.3),
        unreachable: r(&mut rng, 0.15),
        throttle: r(&mut rng, 0.3),
        removed: r(&mut rng, 0.05),
        slow_tray: r(&mut rng, 0.4),
        texts_down: r(&mut rng, 0.1),
        texts_unusable: r(&mut rng, 0.05),
        disk_full: r(&mut rng, 0.2),
        suspend: r(&mut rng, 0.08),
        wall_step: r(&mut rng, 0.08),
        reload: r(&mut rng, 0.2),
        refuses: r(&mut rng, 0.12),
        flood: r(&mut rng, 0.15),
    };
    let chaos_ms = range(&mut rng, 2, 16) * HOUR;
    // Long enough for every hold to end (a day's cap, quiet hours) and every slow re-check.
    let settle_ms = if timed_policy { 26 * HOUR } else { 5 * HOUR };
    Scenario {
        seed,
        zone,
        epoch_ms,
        profiles,
        slots,
        peers,
        groups,
        chaos_ms,
        settle_ms,
        rates,
        script: Vec::new(),
        peer_answers: 0.3 * rng.f64(),
        run_fails: 0.1 * rng.f64(),
        run_hangs: 0.05 * rng.f64(),
        run_silent: 0.1 * rng.f64(),
    }
}

/// A `[listen.policy]` table, and whether it holds runs by time (quiet hours, caps).
fn draw_policy(rng: &mut Rng, zone: &str, peers: usize) -> (String, bool) {
    let mut lines = vec![format!("timezone = \"{zone}\"")];
    let mut timed = false;
    if rng.chance(0.7) {
        let q = pick(rng, &QUIET).copied().unwrap_or("22:00-07:00");
        lines.push(format!("quiet_hours = [\"{q}\"]"));
        timed = true;
    }
    if rng.chance(0.3) {
        lines.push(format!("max_runs_per_hour = {}", range(rng, 2, 20)));
        timed = true;
    }
    if rng.chance(0.2) {
        lines.push(format!("max_runs_per_day = {}", range(rng, 10, 80)));
        timed = true;
    }
    if rng.chance(0.15) && peers > 0 {
        lines.push(format!("deny = [\"@peer{}\"]", rng.below(peers as u64)));
    }
    if rng.chance(0.1) {
        lines.push("groups = \"mentions\"".into());
    }
    if rng.chance(0.15) {
        lines.push(format!(
            "loop_guard = {{ runs = {}, within = \"{}m\" }}",
            range(rng, 3, 8),
            range(rng, 10, 60)
        ));
        timed = true;
    }
    (lines.join("\n"), timed)
}

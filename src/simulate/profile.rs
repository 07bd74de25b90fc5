//! A profile as the world keeps it: its listener's id in the host, its keys, settings and
//! runtime, its connections and run, its disk and status file; the observer each listener is
//! handed (its own account of its wakes and cycles); and its settings as the listener takes them.

use super::conn::Conn;
use super::runs::LiveRun;
use super::scenario::ProfilePlan;
use crate::core::engine::WakeCause;
use crate::core::host::ProfileId;
use crate::core::listener::{ListenerConfig, Observer};
use crate::core::status::{LastCycle, Status};
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};

/// What a profile's listener told its observer (the machine's own account of its wakes and
/// cycles, which the checks hold against what the world did).
#[derive(Debug, Clone)]
pub enum Heard {
    Wake(WakeCause),
    CycleStarted,
    CycleEnded(Box<LastCycle>),
}

/// The observer handed to each listener.
#[derive(Debug, Default)]
pub struct Ear {
    heard: Mutex<Vec<Heard>>,
}

impl Ear {
    fn push(&self, h: Heard) {
        if let Ok(mut v) = self.heard.lock() {
            v.push(h);
        }
    }

    pub fn take(&self) -> Vec<Heard> {
        self.heard
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

impl Observer for Ear {
    fn wake(&self, cause: &WakeCause, _frames: u64) {
        self.push(Heard::Wake(cause.clone()));
    }
    fn cycle_started(&self) {
        self.push(Heard::CycleStarted);
    }
    fn cycle_ended(&self, last: &LastCycle, _key_refused: bool) {
        self.push(Heard::CycleEnded(Box::new(last.clone())));
    }
}

/// The runtime as the world plays it for a profile.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// Refuses runs until then (true ms), and whether its login check passes meanwhile.
    pub refuses_until: u64,
    pub login_ok: bool,
    /// The binary's stamp (a reinstall changes it).
    pub stamp: u64,
}

/// One profile: its listener's id in the host and everything the world keeps for it.
pub struct Profile {
    pub id: ProfileId,
    pub name: String,
    pub handle: String,
    /// The key the listener uses, and the one its key file holds now.
    pub key: String,
    pub key_file: String,
    /// The key the server holds for the agent now (the user's own calls use it).
    pub server_key: String,
    pub cfg: ListenerConfig,
    pub plan: ProfilePlan,
    pub ear: Arc<Ear>,
    pub runtime: Runtime,
    pub conns: BTreeMap<u64, Conn>,
    /// Cycles given up (`CancelRun`): their answers on the way are dropped.
    pub cancelled: BTreeSet<u64>,
    pub run: Option<LiveRun>,
    /// The last texts fetched (the state dir's copy).
    pub texts_cached: Option<Arc<crate::core::texts::Texts>>,
    /// The disk is full until then (true ms).
    pub disk_full_until: u64,
    /// The last status write answered, and the document that was written last.
    pub status_ok: bool,
    pub status: Option<(u64, Box<Status>)>,
    pub ready: bool,
    pub ended: bool,
}

/// A zone's offsets, read once per process and zone.
fn zone_table(name: &str, around_ms: i64) -> crate::core::policy::OffsetTable {
    use crate::core::policy::OffsetTable;
    static ZONES: Mutex<BTreeMap<String, crate::sys::tz::Zone>> = Mutex::new(BTreeMap::new());
    let zone = ZONES.lock().ok().and_then(|mut z| {
        if !z.contains_key(name) {
            let read = crate::sys::tz::named(name).ok()?;
            z.insert(name.to_string(), read);
        }
        z.get(name).cloned()
    });
    match zone {
        Some(z) => {
            let t = z.table(around_ms);
            OffsetTable::new(t.initial, t.changes)
        }
        None => OffsetTable::new(0, Vec::new()),
    }
}

/// A profile's settings as the listener takes them.
pub fn listener_config(p: &ProfilePlan, zone: &str, notify: bool, now_ms: i64) -> ListenerConfig {
    use std::time::Duration;
    let policy = if p.policy.is_empty() {
        crate::core::policy::Policy::default()
    } else {
        toml::from_str::<toml::Table>(&p.policy)
            .ok()
            .and_then(|t| crate::core::policy::Policy::from_toml(t, "listen.policy").ok())
            .unwrap_or_default()
    };
    ListenerConfig {
        profile: p.name.clone(),
        api_base: "https://sim.agentchat.invalid".into(),
        runtime: p.runtime,
        key_source: "config".into(),
        quiet_window: Duration::from_millis(p.quiet_window_ms),
        max_delay: Duration::from_millis(p.max_delay_ms),
        idle_timeout: Duration::from_secs(p.idle_timeout_s),
        kill_grace: Duration::from_secs(p.kill_grace_s),
        scale: 1.0,
        policy,
        zone: zone_table(zone, now_ms),
        notify_status: notify,
        pid: 4242,
        state_dir: format!("/sim/{}", p.name),
    }
}

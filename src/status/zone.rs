//! The zone `status` tells a hold's end in (issue 26): the profile's `listen.policy.timezone`,
//! read with `sys::tz` as the listener reads it, when the settings set one; else the machine's.

use crate::config::Settings;
use crate::core::policy::{OffsetTable, Offsets, ShownZone};

/// The machine's own time zone, asked of the C library at each instant: a hold's end is shown
/// to the person at this machine in its local time. Only [`Offsets::offset_at`] is needed to
/// say a time; no change is looked for.
pub struct MachineZone;

impl Offsets for MachineZone {
    fn offset_at(&self, utc_ms: i64) -> i32 {
        crate::sys::time::local_offset_secs(utc_ms).unwrap_or(0)
    }
    fn next_change(&self, _: i64) -> Option<i64> {
        None
    }
}

/// A profile's policy zone: its name and its offsets around the time `status` runs.
#[derive(Debug, Clone)]
pub struct PolicyZone {
    pub name: String,
    pub offsets: OffsetTable,
}

impl PolicyZone {
    /// The settings' `listen.policy.timezone` around `now_ms`; `None` when none is set or its
    /// zone file cannot be read now (the machine's zone is used then, as without one).
    pub fn of(settings: &Settings, now_ms: i64) -> Option<PolicyZone> {
        let name = settings.listen.policy.timezone.clone()?;
        let table = crate::sys::tz::named(&name).ok()?.table(now_ms);
        Some(PolicyZone {
            name,
            offsets: OffsetTable::new(table.initial, table.changes),
        })
    }
}

/// How a hold's end is told: in `zone` when there is one (named where it is not the machine's
/// time), else in `machine`'s.
pub fn shown<'a>(zone: Option<&'a PolicyZone>, machine: &'a dyn Offsets) -> ShownZone<'a> {
    match zone {
        Some(z) => ShownZone {
            offsets: &z.offsets,
            name: Some(&z.name),
            machine,
        },
        None => ShownZone::machine(machine),
    }
}

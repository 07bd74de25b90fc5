//! The zone `status` tells a hold's end in (issue 26): the profile's `listen.policy.timezone`,
//! read with `sys::tz` as the listener reads it, when the settings set one; else the machine's.

use crate::config::Settings;
use crate::core::policy::{OffsetTable, Offsets, ShownZone};

pub use crate::listen::history::MachineZone;

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

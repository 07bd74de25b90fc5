//! Local time for the policy's windows, with the UTC offset injected ([`Offsets`]): quiet hours
//! and the per-hour and per-day caps follow the wall clock of the policy's `timezone`, so a DST
//! change is a table entry in a test, not a system setting.
//!
//! Instants are Unix milliseconds (UTC); an offset is seconds east of UTC.

use serde::{Deserialize, Serialize};

const MINUTE_MS: i64 = 60_000;
const HOUR_MS: i64 = 3_600_000;
pub(super) const DAY_MS: i64 = 86_400_000;

/// The UTC offset in force at each instant. The daemon builds one from the zone's rules (see
/// docs/decisions.md, "Run policy"); tests and fixtures give a table.
pub trait Offsets {
    /// Seconds east of UTC at `utc_ms`.
    fn offset_at(&self, utc_ms: i64) -> i32;
    /// The first instant strictly after `utc_ms` at which the offset changes, if any.
    fn next_change(&self, utc_ms: i64) -> Option<i64>;
}

/// One offset for ever (UTC, or a zone without DST).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedOffset(pub i32);

impl Offsets for FixedOffset {
    fn offset_at(&self, _: i64) -> i32 {
        self.0
    }
    fn next_change(&self, _: i64) -> Option<i64> {
        None
    }
}

/// An offset before the first change, then the changes in time order: what a zone file's
/// transitions (TZif) give. Changes out of order are sorted on construction.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OffsetTable {
    pub initial: i32,
    /// `(at_utc_ms, offset_from_then)`.
    pub changes: Vec<(i64, i32)>,
}

impl OffsetTable {
    pub fn new(initial: i32, mut changes: Vec<(i64, i32)>) -> OffsetTable {
        changes.sort_by_key(|c| c.0);
        OffsetTable { initial, changes }
    }
}

impl Offsets for OffsetTable {
    fn offset_at(&self, utc_ms: i64) -> i32 {
        let passed = self.changes.partition_point(|c| c.0 <= utc_ms);
        match passed.checked_sub(1).and_then(|i| self.changes.get(i)) {
            Some(c) => c.1,
            None => self.initial,
        }
    }
    fn next_change(&self, utc_ms: i64) -> Option<i64> {
        let passed = self.changes.partition_point(|c| c.0 <= utc_ms);
        self.changes.get(passed).map(|c| c.0)
    }
}

/// Wall-clock milliseconds (as if the local time were UTC) at `utc_ms`.
pub(super) fn local_ms(offsets: &dyn Offsets, utc_ms: i64) -> i64 {
    utc_ms.saturating_add(i64::from(offsets.offset_at(utc_ms)) * 1000)
}

/// The local calendar day of an instant, as days since 1970-01-01.
pub fn local_day(offsets: &dyn Offsets, utc_ms: i64) -> i64 {
    local_ms(offsets, utc_ms).div_euclid(DAY_MS)
}

/// The local clock hour of an instant, as hours since 1970-01-01T00 local. The repeated hour of an
/// autumn change is one label, so it is one window (two real hours).
pub fn local_hour(offsets: &dyn Offsets, utc_ms: i64) -> i64 {
    local_ms(offsets, utc_ms).div_euclid(HOUR_MS)
}

/// Minutes since local midnight at an instant (0..1440).
pub(super) fn local_minute_of_day(offsets: &dyn Offsets, utc_ms: i64) -> u32 {
    let m = local_ms(offsets, utc_ms).rem_euclid(DAY_MS) / MINUTE_MS;
    u32::try_from(m).unwrap_or(0)
}

/// The first instant after `utc_ms` whose label (`unit_ms` = an hour or a day of local time)
/// differs from `utc_ms`'s: where a cap's window rolls over. Walks the offset's changes, so a
/// spring change that skips the boundary ends the window at the change, and an autumn change that
/// repeats an hour keeps that hour's window open through both.
pub(super) fn next_rollover(offsets: &dyn Offsets, utc_ms: i64, unit_ms: i64) -> i64 {
    let label = |t: i64| local_ms(offsets, t).div_euclid(unit_ms);
    let start = label(utc_ms);
    let mut t = utc_ms;
    // Each step reaches a boundary or an offset change; a handful always suffices.
    for _ in 0..64 {
        let into = local_ms(offsets, t).rem_euclid(unit_ms);
        let boundary = t.saturating_add(unit_ms - into);
        match offsets.next_change(t) {
            Some(change) if change <= boundary => {
                t = change;
                if label(t) != start {
                    return t;
                }
            }
            _ => {
                t = boundary;
                if label(t) != start {
                    return t;
                }
            }
        }
    }
    t
}

/// `next_rollover` for the local hour.
pub(super) fn next_hour(offsets: &dyn Offsets, utc_ms: i64) -> i64 {
    next_rollover(offsets, utc_ms, HOUR_MS)
}

/// `next_rollover` for the local day.
pub fn next_day(offsets: &dyn Offsets, utc_ms: i64) -> i64 {
    next_rollover(offsets, utc_ms, DAY_MS)
}

/// The first instant at or after `utc_ms` whose local minute of day is outside `inside`, walking
/// the offset's changes (a spring change that jumps past the end ends the hold at the change).
/// `None` when every minute of the day is inside.
pub(super) fn first_outside(
    offsets: &dyn Offsets,
    utc_ms: i64,
    inside: impl Fn(u32) -> bool,
) -> Option<i64> {
    let mut t = utc_ms;
    // Minute by minute would be 1440 steps a day; jump to the next minute boundary or change,
    // whichever is first, and never look further than two days plus the changes on the way.
    let mut steps = 0u32;
    while steps < 4 * 1440 {
        steps += 1;
        if !inside(local_minute_of_day(offsets, t)) {
            return Some(t);
        }
        let into = local_ms(offsets, t).rem_euclid(MINUTE_MS);
        let minute = t.saturating_add(MINUTE_MS - into);
        t = match offsets.next_change(t) {
            Some(change) if change < minute => change,
            _ => minute,
        };
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Europe/Berlin around 2026: CET (+1h), CEST (+2h) from 2026-03-29T01:00Z to 2026-10-25T01:00Z.
    fn berlin() -> OffsetTable {
        OffsetTable::new(
            3600,
            vec![(1_774_746_000_000, 7200), (1_792_890_000_000, 3600)],
        )
    }

    #[test]
    fn the_table_gives_the_offset_in_force_and_the_next_change() {
        let z = berlin();
        assert_eq!(z.offset_at(1_774_745_999_999), 3600);
        assert_eq!(z.offset_at(1_774_746_000_000), 7200);
        assert_eq!(z.next_change(0), Some(1_774_746_000_000));
        assert_eq!(z.next_change(1_774_746_000_000), Some(1_792_890_000_000));
        assert_eq!(z.next_change(1_792_890_000_000), None);
    }

    #[test]
    fn a_spring_change_ends_the_hour_at_the_change_and_an_autumn_one_keeps_it_two_hours() {
        let z = berlin();
        // 01:30 CET on 2026-03-29 = 00:30Z; the clock jumps 02:00 -> 03:00 at 01:00Z.
        assert_eq!(next_hour(&z, 1_774_744_200_000), 1_774_746_000_000);
        // 02:30 CEST on 2026-10-25 = 00:30Z; 03:00 CEST becomes 02:00 CET at 01:00Z, so hour 2
        // lasts until 03:00 CET = 02:00Z.
        assert_eq!(next_hour(&z, 1_792_888_200_000), 1_792_893_600_000);
    }

    #[test]
    fn the_local_day_rolls_over_at_local_midnight() {
        let z = berlin();
        // 2026-03-28T23:30Z is 00:30 CET on the 29th: the day began at 23:00Z and ends at 22:00Z
        // (a 23-hour day).
        let t = 1_774_740_600_000;
        assert_eq!(next_day(&z, t), 1_774_821_600_000);
        assert_eq!(local_day(&z, t), local_day(&z, 1_774_821_599_999));
    }

    #[test]
    fn first_outside_walks_to_the_end_of_a_range_across_midnight() {
        let z = FixedOffset(0);
        let inside = |m: u32| !(7 * 60..22 * 60).contains(&m);
        // 23:00Z on day 0 -> 07:00Z on day 1.
        assert_eq!(
            first_outside(&z, 23 * HOUR_MS, inside),
            Some(DAY_MS + 7 * HOUR_MS)
        );
        assert_eq!(first_outside(&z, 12 * HOUR_MS, inside), Some(12 * HOUR_MS));
        assert_eq!(first_outside(&z, 0, |_| true), None);
    }
}

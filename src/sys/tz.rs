//! The UTC offsets of a time zone, for the run policy's local clock (`[listen.policy]`, issue 26):
//! a small reader of the system's TZif files (RFC 8536) under `/usr/share/zoneinfo` (or
//! `TZDIR`), the 64-bit transitions of version 2 and later, and the POSIX TZ rule of the file's
//! footer (or of a `TZ` variable such as `CET-1CEST,M3.5.0,M10.5.0/3`) expanded into transitions
//! for the years after the file's last one. Not a time-zone crate: the binary's size is tuned
//! (docs/benchmarks.md) and one zone's offsets are all the listener needs (docs/decisions.md,
//! "Run policy").
//!
//! The result is a plain table (an offset before the first change, then `(at_utc_ms, offset)`),
//! which the listener turns into `core::policy::OffsetTable`. The footer's rule is expanded
//! [`RULE_YEARS`] years past the time the table is built (the listener builds it at start and on
//! every SIGHUP); after that the last offset holds.

use std::path::{Path, PathBuf};

/// The largest zone file read: the biggest in tzdata are a few KiB.
const MAX_TZIF_BYTES: u64 = 256 * 1024;
/// How many years past "now" a POSIX rule is expanded into transitions.
pub const RULE_YEARS: i64 = 20;
/// Transitions older than this before "now" are left out of the table: the policy asks about
/// yesterday at the earliest (the ledger's days).
const KEEP_PAST_MS: i64 = 8 * 86_400_000;

/// Why a zone could not be read. Says what and where, never more.
#[derive(Debug, thiserror::Error)]
pub enum TzError {
    #[error("no time zone `{name}` in {dir}")]
    Unknown { name: String, dir: String },
    #[error("the zone file {path} cannot be read: {error}")]
    Read {
        path: PathBuf,
        error: std::io::Error,
    },
    #[error("the zone file {path} is not a TZif file: {problem}")]
    Bad { path: PathBuf, problem: String },
    #[error("`TZ` is neither a zone name nor a POSIX TZ rule")]
    BadTzVariable,
}

/// One zone's offsets: seconds east of UTC before the first change, then the changes in time
/// order, each `(at_utc_ms, offset_from_then)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneTable {
    pub initial: i32,
    pub changes: Vec<(i64, i32)>,
}

/// A zone as read: its transitions and its footer's rule, not yet cut to the years in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zone {
    /// The offset before the first transition (RFC 8536: local time type 0).
    initial: i32,
    /// `(at_utc_seconds, offset)`, in time order.
    transitions: Vec<(i64, i32)>,
    /// The POSIX rule for times after the last transition.
    rule: Option<PosixRule>,
}

/// The directory zone names are looked up in: `TZDIR` when set to an absolute path, else
/// `/usr/share/zoneinfo`.
pub fn zone_dir() -> PathBuf {
    match std::env::var_os("TZDIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d,
        _ => PathBuf::from("/usr/share/zoneinfo"),
    }
}

/// The zone `name` (an IANA name such as `Europe/Berlin`) from the system's zone files. `UTC`
/// (and `Etc/UTC`, `GMT`) is UTC even on a system without zone files.
pub fn named(name: &str) -> Result<Zone, TzError> {
    let dir = zone_dir();
    let safe = !name.is_empty()
        && !name.starts_with('/')
        && name
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..");
    if !safe {
        return Err(TzError::Unknown {
            name: name.to_string(),
            dir: dir.display().to_string(),
        });
    }
    let path = dir.join(name);
    match read_file(&path) {
        Err(TzError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            if matches!(name, "UTC" | "Etc/UTC" | "GMT" | "Etc/GMT" | "Zulu") {
                return Ok(Zone::utc());
            }
            Err(TzError::Unknown {
                name: name.to_string(),
                dir: dir.display().to_string(),
            })
        }
        other => other,
    }
}

/// The machine's own zone, as the C library finds it: `TZ` (a zone name, a file path, or a POSIX
/// rule; a leading `:` dropped), else `/etc/localtime`, else UTC.
pub fn local(tz_variable: Option<&str>) -> Result<Zone, TzError> {
    match tz_variable.map(|t| t.strip_prefix(':').unwrap_or(t).trim()) {
        Some("") => Ok(Zone::utc()),
        None => match read_file(Path::new("/etc/localtime")) {
            Err(TzError::Read { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
                Ok(Zone::utc())
            }
            other => other,
        },
        Some(path) if path.starts_with('/') => read_file(Path::new(path)),
        Some(tz) => match named(tz) {
            Ok(zone) => Ok(zone),
            Err(e) => match PosixRule::parse(tz) {
                Some(rule) => Ok(Zone {
                    initial: rule.std,
                    transitions: Vec::new(),
                    rule: Some(rule),
                }),
                None if matches!(e, TzError::Unknown { .. }) => Err(TzError::BadTzVariable),
                None => Err(e),
            },
        },
    }
}

fn read_file(path: &Path) -> Result<Zone, TzError> {
    let bytes =
        super::fs::read_regular_capped(path, MAX_TZIF_BYTES).map_err(|error| TzError::Read {
            path: path.to_path_buf(),
            error,
        })?;
    Zone::parse(&bytes).map_err(|problem| TzError::Bad {
        path: path.to_path_buf(),
        problem,
    })
}

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            initial: 0,
            transitions: Vec::new(),
            rule: None,
        }
    }

    /// A TZif file (RFC 8536): the version 1 block is skipped for the 64-bit one when the file
    /// has it; the footer's rule is kept. Leap-second records are ignored.
    pub fn parse(bytes: &[u8]) -> Result<Zone, String> {
        let mut r = Reader { bytes, at: 0 };
        let header = Header::read(&mut r)?;
        if header.version == 0 {
            return header.block(&mut r, 4).map(|(initial, transitions)| Zone {
                initial,
                transitions,
                rule: None,
            });
        }
        header.skip(&mut r, 4)?;
        let second = Header::read(&mut r)?;
        let (initial, transitions) = second.block(&mut r, 8)?;
        // The footer: a newline, the rule (possibly empty), a newline.
        let rule = match r.rest().strip_prefix(b"\n") {
            Some(rest) => {
                let end = rest.iter().position(|b| *b == b'\n').unwrap_or(rest.len());
                let text = std::str::from_utf8(rest.get(..end).unwrap_or_default())
                    .map_err(|_| "the footer is not text".to_string())?;
                if text.is_empty() {
                    None
                } else {
                    Some(PosixRule::parse(text).ok_or("the footer's TZ rule is not understood")?)
                }
            }
            None => None,
        };
        Ok(Zone {
            initial,
            transitions,
            rule,
        })
    }

    /// The table around `now_ms`: the file's transitions from a week before it, then the footer's
    /// rule for the years up to [`RULE_YEARS`] after it. Consecutive equal offsets are merged.
    pub fn table(&self, now_ms: i64) -> ZoneTable {
        let from_s = now_ms.saturating_sub(KEEP_PAST_MS) / 1000;
        let mut all: Vec<(i64, i32)> = self.transitions.clone();
        if let Some(rule) = &self.rule {
            let last = self.transitions.last().map_or(i64::MIN, |t| t.0);
            let year_now = civil_year(now_ms.div_euclid(1000).div_euclid(86_400));
            let first_year = civil_year(last.max(from_s).div_euclid(86_400)).saturating_sub(1);
            for year in first_year..=year_now.saturating_add(RULE_YEARS) {
                for (at, offset) in rule.changes_in(year) {
                    if at > last {
                        all.push((at, offset));
                    }
                }
            }
            all.sort_by_key(|t| t.0);
        }
        let mut initial = self.initial;
        let mut changes: Vec<(i64, i32)> = Vec::new();
        for (at, offset) in all {
            if at <= from_s {
                initial = offset;
                continue;
            }
            let current = changes.last().map_or(initial, |c| c.1);
            if offset != current {
                changes.push((at.saturating_mul(1000), offset));
            }
        }
        ZoneTable { initial, changes }
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], String> {
        let end = self.at.checked_add(n).ok_or("truncated")?;
        let s = self.bytes.get(self.at..end).ok_or("truncated")?;
        self.at = end;
        Ok(s)
    }
    fn u32(&mut self) -> Result<u32, String> {
        let b: [u8; 4] = self
            .take(4)?
            .try_into()
            .map_err(|_| "truncated".to_string())?;
        Ok(u32::from_be_bytes(b))
    }
    fn time(&mut self, width: usize) -> Result<i64, String> {
        let b = self.take(width)?;
        Ok(match width {
            4 => i64::from(i32::from_be_bytes(
                b.try_into().map_err(|_| "truncated".to_string())?,
            )),
            _ => i64::from_be_bytes(b.try_into().map_err(|_| "truncated".to_string())?),
        })
    }
    fn rest(&self) -> &[u8] {
        self.bytes.get(self.at..).unwrap_or_default()
    }
}

struct Header {
    version: u8,
    isutcnt: usize,
    isstdcnt: usize,
    leapcnt: usize,
    timecnt: usize,
    typecnt: usize,
    charcnt: usize,
}

impl Header {
    fn read(r: &mut Reader) -> Result<Header, String> {
        if r.take(4)? != b"TZif" {
            return Err("no TZif magic".into());
        }
        let version = match r.take(1)? {
            [0] => 0,
            [v] if v.is_ascii_digit() => v - b'0',
            _ => return Err("an unknown version".into()),
        };
        r.take(15)?;
        let mut n = || -> Result<usize, String> {
            usize::try_from(r.u32()?).map_err(|_| "a count too large".to_string())
        };
        let h = Header {
            version,
            isutcnt: n()?,
            isstdcnt: n()?,
            leapcnt: n()?,
            timecnt: n()?,
            typecnt: n()?,
            charcnt: n()?,
        };
        if h.typecnt == 0 {
            return Err("no local time types".into());
        }
        Ok(h)
    }

    fn len(&self, width: usize) -> Option<usize> {
        let times = self.timecnt.checked_mul(width)?;
        let leaps = self.leapcnt.checked_mul(width.checked_add(4)?)?;
        times
            .checked_add(self.timecnt)?
            .checked_add(self.typecnt.checked_mul(6)?)?
            .checked_add(self.charcnt)?
            .checked_add(leaps)?
            .checked_add(self.isstdcnt)?
            .checked_add(self.isutcnt)
    }

    fn skip(&self, r: &mut Reader, width: usize) -> Result<(), String> {
        r.take(self.len(width).ok_or("counts too large")?)
            .map(|_| ())
    }

    /// The data block: the offset of type 0 and the transitions with their offsets.
    fn block(&self, r: &mut Reader, width: usize) -> Result<(i32, Vec<(i64, i32)>), String> {
        let mut times = Vec::with_capacity(self.timecnt);
        for _ in 0..self.timecnt {
            times.push(r.time(width)?);
        }
        let indices = r.take(self.timecnt)?.to_vec();
        let mut offsets = Vec::with_capacity(self.typecnt);
        for _ in 0..self.typecnt {
            let utoff = r.u32()? as i32;
            r.take(2)?;
            offsets.push(utoff);
        }
        r.take(self.charcnt)?;
        r.take(self.leapcnt.saturating_mul(width.saturating_add(4)))?;
        r.take(self.isstdcnt.saturating_add(self.isutcnt))?;
        let initial = offsets.first().copied().unwrap_or(0);
        let mut transitions = Vec::with_capacity(self.timecnt);
        for (at, i) in times.into_iter().zip(indices) {
            let offset = offsets
                .get(usize::from(i))
                .copied()
                .ok_or("a transition names a type that does not exist")?;
            transitions.push((at, offset));
        }
        transitions.sort_by_key(|t| t.0);
        Ok((initial, transitions))
    }
}

/// A POSIX TZ rule (`std offset [dst [offset] [,start[/time],end[/time]]]`), offsets as seconds
/// east of UTC (the string's are west).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PosixRule {
    std: i32,
    dst: Option<(i32, RuleDay, i32, RuleDay, i32)>,
}

/// When in a year a change happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RuleDay {
    /// `Jn`: day 1..=365, February 29 never counted.
    Julian1(u16),
    /// `n`: day 0..=365, February 29 counted.
    Julian0(u16),
    /// `Mm.w.d`: day `d` (0 Sunday) of week `w` (5: the last) of month `m`.
    Month(u8, u8, u8),
}

impl PosixRule {
    pub fn parse(text: &str) -> Option<PosixRule> {
        let mut s = text.as_bytes();
        name(&mut s)?;
        let std = -offset(&mut s, 24)?;
        if s.is_empty() {
            return Some(PosixRule { std, dst: None });
        }
        name(&mut s)?;
        let dst_off = match s.first() {
            Some(b',') => std.saturating_add(3600),
            _ => -offset(&mut s, 24)?,
        };
        // A DST name without a rule: the C library's default rules differ; not guessed here.
        let rest = s.strip_prefix(b",")?;
        let mut s = rest;
        let (start, start_time) = rule_part(&mut s)?;
        s = s.strip_prefix(b",")?;
        let (end, end_time) = rule_part(&mut s)?;
        if !s.is_empty() {
            return None;
        }
        Some(PosixRule {
            std,
            dst: Some((dst_off, start, start_time, end, end_time)),
        })
    }

    /// The year's two changes, `(at_utc_seconds, offset_from_then)`.
    fn changes_in(&self, year: i64) -> Vec<(i64, i32)> {
        let Some((dst, start, start_time, end, end_time)) = self.dst else {
            return Vec::new();
        };
        let at = |day: RuleDay, time: i32, offset_before: i32| {
            day_of(year, day)
                .saturating_mul(86_400)
                .saturating_add(i64::from(time))
                .saturating_sub(i64::from(offset_before))
        };
        vec![
            (at(start, start_time, self.std), dst),
            (at(end, end_time, dst), self.std),
        ]
    }
}

fn name(s: &mut &[u8]) -> Option<()> {
    if let Some(rest) = s.strip_prefix(b"<") {
        let end = rest.iter().position(|b| *b == b'>')?;
        *s = rest.get(end + 1..)?;
        return Some(());
    }
    let n = s.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    if n < 3 {
        return None;
    }
    *s = s.get(n..)?;
    Some(())
}

/// `[+-]hh[:mm[:ss]]` as seconds (positive as written), hours at most `max_hours`.
fn offset(s: &mut &[u8], max_hours: i32) -> Option<i32> {
    let sign = match s.first() {
        Some(b'-') => {
            *s = s.get(1..)?;
            -1
        }
        Some(b'+') => {
            *s = s.get(1..)?;
            1
        }
        _ => 1,
    };
    let mut parts = [0i32; 3];
    for (i, part) in parts.iter_mut().enumerate() {
        if i > 0 {
            match s.strip_prefix(b":") {
                Some(rest) => *s = rest,
                None => break,
            }
        }
        let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
        if n == 0 || n > 3 {
            return None;
        }
        *part = std::str::from_utf8(s.get(..n)?).ok()?.parse().ok()?;
        *s = s.get(n..)?;
    }
    let [h, m, sec] = parts;
    if h > max_hours || m > 59 || sec > 59 {
        return None;
    }
    Some(sign * (h * 3600 + m * 60 + sec))
}

/// `Jn`, `n` or `Mm.w.d`, with an optional `/time` (default 02:00; RFC 8536 allows -167..167 h).
fn rule_part(s: &mut &[u8]) -> Option<(RuleDay, i32)> {
    let number = |s: &mut &[u8]| -> Option<u16> {
        let n = s.iter().take_while(|b| b.is_ascii_digit()).count();
        let v = std::str::from_utf8(s.get(..n)?).ok()?.parse().ok()?;
        *s = s.get(n..)?;
        Some(v)
    };
    let day = match s.first() {
        Some(b'J') => {
            *s = s.get(1..)?;
            let n = number(s)?;
            (1..=365).contains(&n).then_some(RuleDay::Julian1(n))?
        }
        Some(b'M') => {
            *s = s.get(1..)?;
            let m = number(s)?;
            *s = s.strip_prefix(b".")?;
            let w = number(s)?;
            *s = s.strip_prefix(b".")?;
            let d = number(s)?;
            let ok = (1..=12).contains(&m) && (1..=5).contains(&w) && d <= 6;
            ok.then_some(RuleDay::Month(m as u8, w as u8, d as u8))?
        }
        _ => {
            let n = number(s)?;
            (n <= 365).then_some(RuleDay::Julian0(n))?
        }
    };
    let time = match s.strip_prefix(b"/") {
        Some(rest) => {
            *s = rest;
            offset(s, 167)?
        }
        None => 7200,
    };
    Some((day, time))
}

fn is_leap(year: i64) -> bool {
    (year % 4 == 0 && year % 100 != 0) || year % 400 == 0
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's `days_from_civil`).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The year of a day since 1970-01-01.
fn civil_year(days: i64) -> i64 {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    yoe + era * 400 + i64::from(month <= 2)
}

/// The day (since 1970-01-01) a rule's day falls on in `year`.
fn day_of(year: i64, day: RuleDay) -> i64 {
    let jan1 = days_from_civil(year, 1, 1);
    match day {
        RuleDay::Julian1(n) => {
            let n = i64::from(n);
            jan1 + n - 1 + i64::from(is_leap(year) && n >= 60)
        }
        RuleDay::Julian0(n) => jan1 + i64::from(n),
        RuleDay::Month(m, w, d) => {
            let first = days_from_civil(year, i64::from(m), 1);
            let next = if m == 12 {
                days_from_civil(year + 1, 1, 1)
            } else {
                days_from_civil(year, i64::from(m) + 1, 1)
            };
            // 1970-01-01 was a Thursday (4).
            let weekday = (first + 4).rem_euclid(7);
            let mut day = first + (i64::from(d) - weekday).rem_euclid(7) + 7 * (i64::from(w) - 1);
            while day >= next {
                day -= 7;
            }
            day
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 2026-03-29T01:00Z and 2026-10-25T01:00Z: Europe/Berlin's changes in 2026.
    const SPRING_2026: i64 = 1_774_746_000;
    const AUTUMN_2026: i64 = 1_792_890_000;
    const JUNE_2026_MS: i64 = 1_780_000_000_000;

    /// A version 2 TZif file: a dummy v1 block, then the 64-bit block with `transitions`
    /// (types: 0 = +1h, 1 = +2h) and `footer`.
    fn tzif(transitions: &[(i64, u8)], footer: &str) -> Vec<u8> {
        let header = |v1: bool| {
            let mut h = b"TZif2".to_vec();
            h.extend([0u8; 15]);
            let timecnt = if v1 { 0 } else { transitions.len() as u32 };
            for n in [0u32, 0, 0, timecnt, 2, 8] {
                h.extend(n.to_be_bytes());
            }
            h
        };
        let types = |out: &mut Vec<u8>| {
            out.extend(3600i32.to_be_bytes());
            out.extend([0, 0]);
            out.extend(7200i32.to_be_bytes());
            out.extend([1, 4]);
            out.extend(b"CET\0CEST");
        };
        let mut f = header(true);
        types(&mut f);
        f.extend(header(false));
        for (at, _) in transitions {
            f.extend(at.to_be_bytes());
        }
        for (_, t) in transitions {
            f.push(*t);
        }
        types(&mut f);
        f.extend(format!("\n{footer}\n").bytes());
        f
    }

    #[test]
    fn a_tzif_file_gives_its_transitions_and_its_footer_fills_the_years_after() {
        let zone = Zone::parse(&tzif(&[(SPRING_2026, 1)], "CET-1CEST,M3.5.0,M10.5.0/3")).unwrap();
        let t = zone.table(JUNE_2026_MS);
        // Before June: the spring change is over a week back, so it is the initial offset; the
        // autumn change comes from the footer.
        assert_eq!(t.initial, 7200);
        assert_eq!(t.changes.first(), Some(&(AUTUMN_2026 * 1000, 3600)));
        // 2027: 28 March 01:00Z and 31 October 01:00Z.
        assert_eq!(t.changes.get(1), Some(&(1_806_195_600_000, 7200)));
        assert_eq!(t.changes.get(2), Some(&(1_824_944_400_000, 3600)));
        // Two a year for RULE_YEARS years, and no more.
        assert!((2 * RULE_YEARS as usize..=2 * RULE_YEARS as usize + 2).contains(&t.changes.len()));
    }

    #[test]
    fn a_zone_without_a_rule_keeps_its_last_offset_and_a_bad_file_is_refused() {
        let zone = Zone::parse(&tzif(&[(SPRING_2026, 1)], "")).unwrap();
        let t = zone.table(SPRING_2026 * 1000 - 3_600_000);
        assert_eq!(t.initial, 3600);
        assert_eq!(t.changes, vec![(SPRING_2026 * 1000, 7200)]);
        assert!(Zone::parse(b"TZif2").is_err());
        assert!(Zone::parse(b"not a zone file at all, but long enough to hold a header").is_err());
        let mut bad = tzif(&[(SPRING_2026, 7)], "");
        assert!(Zone::parse(&bad).is_err(), "a type index out of range");
        bad.truncate(60);
        assert!(Zone::parse(&bad).is_err());
    }

    #[test]
    fn posix_rules_read_as_the_c_library_reads_them() {
        let utc = PosixRule::parse("UTC0").unwrap();
        assert_eq!((utc.std, utc.dst), (0, None));
        assert_eq!(PosixRule::parse("<+0530>-5:30").unwrap().std, 19_800);
        let ny = PosixRule::parse("EST5EDT,M3.2.0,M11.1.0").unwrap();
        // 2026-03-08 07:00Z (02:00 EST) and 2026-11-01 06:00Z (02:00 EDT).
        assert_eq!(
            ny.changes_in(2026),
            vec![(1_772_953_200, -14_400), (1_793_512_800, -18_000)]
        );
        // Southern hemisphere: DST ends in April, starts in October.
        let syd = PosixRule::parse("AEST-10AEDT,M10.1.0,M4.1.0/3").unwrap();
        let [(start, _), (end, _)] = syd.changes_in(2026)[..] else {
            panic!()
        };
        assert!(end < start);
        for bad in [
            "",
            "X0",
            "CET",
            "CET-1CEST",
            "CET-1CEST,M13.1.0,M10.5.0",
            "CET-99",
        ] {
            assert_eq!(PosixRule::parse(bad), None, "{bad}");
        }
        assert_eq!(
            day_of(2026, RuleDay::Julian1(60)),
            days_from_civil(2026, 3, 1)
        );
        assert_eq!(
            day_of(2024, RuleDay::Julian1(60)),
            days_from_civil(2024, 3, 1)
        );
        assert_eq!(civil_year(days_from_civil(2026, 12, 31)), 2026);
        assert_eq!(civil_year(days_from_civil(2027, 1, 1)), 2027);
    }

    #[test]
    fn tz_as_a_rule_and_unknown_names_are_told_apart() {
        let zone = local(Some("UTC0")).unwrap();
        assert_eq!(
            zone.table(JUNE_2026_MS),
            ZoneTable {
                initial: 0,
                changes: vec![]
            }
        );
        assert!(matches!(
            local(Some("Nowhere/Atall")),
            Err(TzError::BadTzVariable)
        ));
        assert!(matches!(
            named("Nowhere/Atall"),
            Err(TzError::Unknown { .. })
        ));
        assert!(matches!(
            named("../etc/passwd"),
            Err(TzError::Unknown { .. })
        ));
        assert!(named("UTC").is_ok());
    }

    /// The system's own Europe/Berlin, where tzdata is installed: its 2026 changes.
    #[test]
    fn the_systems_europe_berlin_changes_on_the_last_sundays_of_march_and_october() {
        if !zone_dir().join("Europe/Berlin").exists() {
            eprintln!("SKIPPED: no Europe/Berlin in {}", zone_dir().display());
            return;
        }
        let t = named("Europe/Berlin")
            .unwrap()
            .table(JUNE_2026_MS - 120 * 86_400_000);
        assert_eq!(t.initial, 3600);
        assert_eq!(t.changes.first(), Some(&(SPRING_2026 * 1000, 7200)));
        assert_eq!(t.changes.get(1), Some(&(AUTUMN_2026 * 1000, 3600)));
    }
}

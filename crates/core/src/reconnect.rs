//! Close classification and the reconnect delay (contract 3.4,
//! `connect-budget.cases.json`). Randomness is injected as a number in [0, 1), and a test time
//! scale as a factor that divides the ordinary backoff only.

use std::time::Duration;

/// The budget delay's floor and cap, in seconds (contract 3.4: floor 1 s, cap 1 h).
pub const BUDGET_FLOOR_S: u64 = 1;
pub const BUDGET_CAP_S: u64 = 3_600;
/// Ordinary backoff: first delay, cap, and how long a connection must stay up to reset it.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
pub const BACKOFF_CAP: Duration = Duration::from_secs(60);
pub const STABLE_AFTER: Duration = Duration::from_secs(30);
/// The refused-key retry's ceiling: a key refused again and again is tried every 5-10 min
/// (`docs/decisions.md`).
pub const KEY_REFUSED_RETRY: Duration = Duration::from_secs(600);
/// The refused-key retry's first ceiling: a key refused for a moment (a rotation, a server
/// restart) is tried again within seconds, not minutes.
pub const KEY_RETRY_FIRST: Duration = Duration::from_secs(2);
/// How long a socket must stay up after its first frame, when no second frame comes, before it
/// has proved itself (`SocketRecord::proved`): a server that accepts the upgrade, sends
/// `hello.ok` and closes at once has not.
pub const PROVEN_AFTER: Duration = Duration::from_secs(5);
/// The re-check after a `4426 upgrade required` close: drawn from [c/2, c] of this. Contract 7:
/// retrying the same way will not succeed, and refused connects count against the key's connect
/// budget (200 an hour), so at most 4 an hour; updating agentchat restarts the listener anyway.
pub const UPGRADE_RECHECK: Duration = Duration::from_secs(30 * 60);

/// What a close (or failed connect) means for the next attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum CloseKind {
    /// `1013` with `retry_after=<s>`: the connect budget. Seconds as sent (unclamped).
    Budget { retry_after_s: u64 },
    /// `1008`, or HTTP 401/403 on the upgrade (`classify_upgrade_status`).
    KeyRefused,
    /// `4426`: the server requires a newer client.
    UpgradeRequired,
    /// Anything else, including `1013` without the hint and network errors.
    Ordinary,
}

impl CloseKind {
    /// The kind as one snake_case word, for log fields: `budget`, `key_refused`,
    /// `upgrade_required`, `ordinary`.
    pub fn as_str(&self) -> &'static str {
        match self {
            CloseKind::Budget { .. } => "budget",
            CloseKind::KeyRefused => "key_refused",
            CloseKind::UpgradeRequired => "upgrade_required",
            CloseKind::Ordinary => "ordinary",
        }
    }
}

/// Classifies a close frame's code and reason. Only `1013` reads the reason: the same hint on
/// another code is not the connect budget (contract 3.4).
pub fn classify_close(code: u16, reason: &str) -> CloseKind {
    match code {
        1013 => match parse_retry_after(reason) {
            Some(retry_after_s) => CloseKind::Budget { retry_after_s },
            None => CloseKind::Ordinary,
        },
        1008 => CloseKind::KeyRefused,
        4426 => CloseKind::UpgradeRequired,
        _ => CloseKind::Ordinary,
    }
}

/// Classifies an HTTP answer to the socket upgrade (instead of `101`). `401` and `403` are a
/// refused key (`docs/decisions.md`); everything else, `429` included, is the ordinary backoff: the connect
/// budget is never an HTTP error before the upgrade (contract 3.4), only a `1013` close. A
/// `429`'s `Retry-After` (something in front of the server) is still waited, never less
/// (`listen::socket`).
pub fn classify_upgrade_status(status: u16) -> CloseKind {
    match status {
        401 | 403 => CloseKind::KeyRefused,
        _ => CloseKind::Ordinary,
    }
}

/// `retry_after=<s>` in a close reason, tolerant of spaces; `None` for garbage.
///
/// The key matches case-insensitively as a whole word, with optional spaces around `=`. The value
/// is whole seconds (a fraction rounds up); a number too large for `u64` saturates (it is capped
/// to 1 h later anyway). A value that is not a non-negative number (`abc`, `-5`, `30s`, empty)
/// is garbage: `None`, so the close takes the ordinary backoff. The first well-formed hint wins.
pub fn parse_retry_after(reason: &str) -> Option<u64> {
    const KEY: &[u8] = b"retry_after";
    let bytes = reason.as_bytes();
    let mut from = 0;
    while from + KEY.len() <= bytes.len() {
        let pos = bytes
            .get(from..)?
            .windows(KEY.len())
            .position(|w| w.eq_ignore_ascii_case(KEY))?
            + from;
        from = pos + KEY.len();
        let after_word_byte = pos
            .checked_sub(1)
            .and_then(|i| bytes.get(i))
            .is_some_and(|b| is_word_byte(*b));
        if after_word_byte {
            continue;
        }
        // KEY is ASCII, so the byte after it is a char boundary and `get` finds it.
        if let Some(v) = reason.get(pos + KEY.len()..).and_then(parse_value) {
            return Some(v);
        }
    }
    None
}

/// The longest `Retry-After` honoured, from the contract's poll limit (3.1): the no-progress
/// budget can go down to -170 and lets a read in again only once it is back to one, refilled at
/// one per 30 s, so a server that refuses a read can rightly ask for 171 x 30 s = 5130 s (85.5
/// min). Anything longer is cut to that: no rule of the contract asks for more, and a wait
/// without end would be a listener stuck (docs/decisions.md, "Socket and reconnect"). The
/// socket's own `1013 retry_after` keeps its one-hour cap (`BUDGET_CAP_S`, contract 3.4).
pub const RETRY_AFTER_HEADER_CAP: Duration = Duration::from_secs(171 * 30);

/// An HTTP `Retry-After` value (RFC 9110 10.2.3): delta-seconds (`120`) or an HTTP-date
/// (`Fri, 31 Dec 1999 23:59:59 GMT`, and the two obsolete forms recipients must read), the
/// wait from `now_unix_ms`. A date in the past waits nothing; either form is capped at
/// `RETRY_AFTER_HEADER_CAP`. `None` for anything else (the caller's default applies).
pub fn retry_after_header(value: &str, now_unix_ms: u64) -> Option<Duration> {
    let v = value.trim();
    if !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()) {
        // All digits: delta-seconds; too many for u64 saturates (then the cap).
        let secs = v.parse::<u64>().unwrap_or(u64::MAX);
        return Some(Duration::from_secs(secs).min(RETRY_AFTER_HEADER_CAP));
    }
    let at = httpdate::parse_http_date(v).ok()?;
    let at_ms = at
        .duration_since(std::time::UNIX_EPOCH)
        .ok()?
        .as_millis()
        .min(u128::from(u64::MAX)) as u64;
    Some(Duration::from_millis(at_ms.saturating_sub(now_unix_ms)).min(RETRY_AFTER_HEADER_CAP))
}

fn is_word_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// Parses `<spaces>=<spaces><number>` followed by the end, whitespace, `;` or `,`.
fn parse_value(rest: &str) -> Option<u64> {
    let rest = rest.trim_start().strip_prefix('=')?.trim_start();
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ';' || c == ',')
        .unwrap_or(rest.len());
    let token = &rest[..end];
    let (whole, frac) = match token.split_once('.') {
        Some((w, f)) => (w, Some(f)),
        None => (token, None),
    };
    if whole.is_empty() || !whole.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mut secs = whole.parse::<u64>().unwrap_or(u64::MAX);
    if let Some(frac) = frac {
        if frac.is_empty() || !frac.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        if frac.bytes().any(|b| b != b'0') {
            secs = secs.saturating_add(1);
        }
    }
    Some(secs)
}

/// Clamps `rand01` into [0, 1); NaN counts as 0.
fn unit(rand01: f64) -> f64 {
    if rand01.is_nan() || rand01 < 0.0 {
        0.0
    } else if rand01 >= 1.0 {
        1.0 - f64::EPSILON
    } else {
        rand01
    }
}

/// The budget delay: clamp(s, 1 s, 1 h) plus 0-10 % above it, never less and never more
/// (contract 3.4). This is the whole wait after a budget refusal (`delay_after`).
pub fn budget_delay(retry_after_s: u64, rand01: f64) -> Duration {
    let base = retry_after_s.clamp(BUDGET_FLOOR_S, BUDGET_CAP_S);
    let jitter = base as f64 * 0.10 * unit(rand01);
    Duration::from_secs(base) + Duration::from_secs_f64(jitter)
}

/// Ordinary backoff: 1 s doubling to 60 s with jitter, reset only after a connection stayed up 30 s.
///
/// The n-th delay (from 0) is drawn from [c/2, c] with c = min(2^n s, 60 s), and is never below
/// 1 s: so 1 s, then 1-2 s, 2-4 s, ... up to 30-60 s. Drawing below the ceiling spreads many
/// listeners that lost the server at once.
///
/// It also keeps the refused-key retry (`next_key_delay`): 2 s doubling to the ceiling the
/// caller passes (10 min by default), each drawn from [c/2, c] the same way, reset when the key
/// is accepted (`key_accepted`).
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    attempt: u32,
    key_attempt: u32,
}

impl Backoff {
    /// The delay before the next attempt after a failure or close.
    pub fn next_delay(&mut self, rand01: f64) -> Duration {
        let ceiling = BACKOFF_BASE
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(BACKOFF_CAP);
        self.attempt = self.attempt.saturating_add(1);
        let factor = 0.5 + 0.5 * unit(rand01);
        ceiling.mul_f64(factor).max(BACKOFF_BASE).min(BACKOFF_CAP)
    }
    /// A connection ended after staying up `up_for`; resets when that was at least 30 s.
    pub fn connection_lasted(&mut self, up_for: Duration) {
        if up_for >= STABLE_AFTER {
            self.attempt = 0;
        }
    }
    /// How many delays were drawn since the last reset.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// The wait after a refused key: the n-th (from 0) drawn from [c/2, c] with
    /// c = min(2 s * 2^n, `ceiling`), never below 1 s nor above `ceiling`. So 1-2 s, 2-4 s, ...
    /// and 5-10 min from the ninth on: a key refused for a moment is tried again in seconds, a
    /// wrong key costs the server an attempt every few minutes. Within the connect budget
    /// (contract 3.4: 20 connects a minute per agent): at most six attempts in the first minute.
    /// `scale` divides it (the test time scale), as `scaled` does.
    pub fn next_key_delay(&mut self, ceiling: Duration, rand01: f64, scale: f64) -> Duration {
        let c = KEY_RETRY_FIRST
            .saturating_mul(1u32 << self.key_attempt.min(16))
            .min(KEY_REFUSED_RETRY);
        self.key_attempt = self.key_attempt.saturating_add(1);
        let factor = 0.5 + 0.5 * unit(rand01);
        let d = c.mul_f64(factor).max(Duration::from_secs(1));
        scaled(d, scale).min(ceiling)
    }

    /// A connection ended after `record`. Only a socket that proved itself
    /// (`SocketRecord::proved`) resets anything: the refused-key retry at once, the ordinary
    /// backoff when it also stayed up `STABLE_AFTER`. An accepted upgrade the server closes at
    /// once (`1008`, `1011`, a `hello.ok` then a close) resets nothing, so its delays grow
    /// (issue 29 item 3); a REST call that accepts the key does not either. `scale` divides the
    /// proof time (the test time scale), as `scaled` does.
    pub fn socket_ended(&mut self, record: &SocketRecord, scale: f64) {
        if record.proved(scale) {
            self.key_accepted();
            self.connection_lasted(record.up_for);
        }
    }

    /// The key was accepted by a socket that proved itself: the next refusal starts again at
    /// seconds.
    pub fn key_accepted(&mut self) {
        self.key_attempt = 0;
    }

    /// How many refused-key delays were drawn since the key was last accepted.
    pub fn key_attempt(&self) -> u32 {
        self.key_attempt
    }
}

/// What one connection showed before it ended, for `Backoff::socket_ended`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SocketRecord {
    /// The socket came up: a first frame that was not a close.
    pub came_up: bool,
    /// Frames that came after that first one.
    pub frames_after_first: u64,
    /// How long it stayed up after its first frame.
    pub up_for: Duration,
}

impl SocketRecord {
    /// The socket proved itself: it came up, and a second frame followed or it stayed up
    /// `PROVEN_AFTER` divided by `scale` (the test time scale, as every other delay). Only then
    /// did the server accept the key and the client for good.
    pub fn proved(&self, scale: f64) -> bool {
        self.came_up && (self.frames_after_first >= 1 || self.up_for >= scaled(PROVEN_AFTER, scale))
    }
}

/// The re-check after a `4426` close: drawn from [c/2, c] of `UPGRADE_RECHECK` (15-30 min),
/// divided by `scale` (the test time scale).
pub fn upgrade_recheck_delay(rand01: f64, scale: f64) -> Duration {
    scaled(UPGRADE_RECHECK.mul_f64(0.5 + 0.5 * unit(rand01)), scale)
}

/// What is left of a wait of `remaining` once `unseen` time passed that no timer saw (the
/// machine slept, `ClockWatch`): the time asleep counts as waited, so a wait cut by a sleep ends
/// at once, not a whole delay after the wake (issue 29 item 15).
pub fn left_after_sleep(remaining: Duration, unseen: Duration) -> Duration {
    remaining.saturating_sub(unseen)
}

/// A delay under a test time scale: `d` divided by `factor`, at least 1 ms, at most a day. A
/// factor of 1, or one that is not a finite number above zero, leaves `d` as it is. The listener
/// passes its test time scale (`config::TestTimeScale`), which is 1 unless `api_base` is a loopback
/// address (`docs/decisions.md`).
pub fn scaled(d: Duration, factor: f64) -> Duration {
    if !(factor.is_finite() && factor > 0.0) || factor == 1.0 {
        return d;
    }
    Duration::try_from_secs_f64(d.as_secs_f64() / factor)
        .unwrap_or(Duration::from_secs(86_400))
        .clamp(Duration::from_millis(1), Duration::from_secs(86_400))
}

/// The delay before reconnecting after `kind`, given the backoff state.
/// `KeyRefused` waits the refused-key retry (`Backoff::next_key_delay`), seconds growing to
/// `key_refused_retry` (10 min by default).
///
/// The budget waits exactly its delay (`budget_delay`: the hint, floor 1 s, cap 1 h, plus 0-10 %
/// above, never less and never more: contract 3.4), however many refusals came before it. The
/// refusal still advances the ordinary backoff like any failed connect, so a socket that comes up
/// and drops at once after a refusal waits longer, but the ordinary backoff never stretches the
/// server's delay (`docs/decisions.md`, "Socket and reconnect").
///
/// `UpgradeRequired` waits the slow re-check (`upgrade_recheck_delay`, 15-30 min): contract 7,
/// retrying will not succeed.
///
/// `backoff_scale` divides the ordinary backoff's delay (`scaled`), the upgrade re-check and the
/// refused-key retry. The budget's hint is never scaled: it is the
/// server's, and no attempt comes before `retry_after` seconds have passed (contract 3.4),
/// whatever the scale.
pub fn delay_after(
    kind: &CloseKind,
    backoff: &mut Backoff,
    key_refused_retry: Duration,
    rand01: f64,
    backoff_scale: f64,
) -> Duration {
    match kind {
        CloseKind::Budget { retry_after_s } => {
            backoff.next_delay(rand01);
            budget_delay(*retry_after_s, rand01)
        }
        CloseKind::KeyRefused => backoff.next_key_delay(key_refused_retry, rand01, backoff_scale),
        CloseKind::UpgradeRequired => {
            backoff.next_delay(rand01);
            upgrade_recheck_delay(rand01, backoff_scale)
        }
        CloseKind::Ordinary => scaled(backoff.next_delay(rand01), backoff_scale),
    }
}

/// How much further the wall clock may move than the monotonic one between two looks before
/// it counts as a jump: more than an NTP step usually is, less than a short sleep.
pub const CLOCK_JUMP: Duration = Duration::from_secs(5);

/// Tells a sleep from the clocks: the monotonic clock (what the idle watchdog's timer runs on)
/// stands still while a machine sleeps, the wall clock does not. When the wall clock moved more
/// than `CLOCK_JUMP` further than the monotonic one since the last look, time passed that no
/// timer saw: the socket may be dead without the watchdog knowing, so it is probed at once.
/// Both clocks are injected in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockWatch {
    wall_ms: u64,
    mono_ms: u64,
}

impl ClockWatch {
    pub fn new(wall_ms: u64, mono_ms: u64) -> ClockWatch {
        ClockWatch { wall_ms, mono_ms }
    }

    /// Looks at both clocks again: the unseen time when the wall clock jumped ahead by more than
    /// `CLOCK_JUMP` beyond the monotonic clock, else `None`. Either way the next look counts
    /// from now. A wall clock set back is no sleep: `None`.
    pub fn look(&mut self, wall_ms: u64, mono_ms: u64) -> Option<Duration> {
        let wall = wall_ms.saturating_sub(self.wall_ms);
        let mono = mono_ms.saturating_sub(self.mono_ms);
        *self = ClockWatch::new(wall_ms, mono_ms);
        let unseen = Duration::from_millis(wall.saturating_sub(mono));
        (unseen > CLOCK_JUMP).then_some(unseen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_parsing() {
        assert_eq!(parse_retry_after("rate_limited; retry_after=30"), Some(30));
        assert_eq!(
            parse_retry_after("rate_limited;  retry_after = 30 "),
            Some(30)
        );
        assert_eq!(parse_retry_after("RETRY_AFTER=7"), Some(7));
        assert_eq!(parse_retry_after("retry_after=1.5"), Some(2));
        assert_eq!(parse_retry_after("retry_after=abc"), None);
        assert_eq!(parse_retry_after("retry_after=-5"), None);
        assert_eq!(parse_retry_after("retry_after=30s"), None);
        assert_eq!(parse_retry_after("retry_after="), None);
        assert_eq!(parse_retry_after("retry_after"), None);
        assert_eq!(parse_retry_after("overload"), None);
        assert_eq!(parse_retry_after("xretry_after=5"), None);
        assert_eq!(
            parse_retry_after("retry_after=99999999999999999999999999"),
            Some(u64::MAX)
        );
        assert_eq!(parse_retry_after("retry_after=x; retry_after=9"), Some(9));
    }

    /// Issue 17 item 16: an HTTP-date `Retry-After` was read as the 5 s default.
    #[test]
    fn retry_after_header_reads_seconds_and_http_dates_bounded() {
        // Sun, 06 Nov 1994 08:49:37 GMT
        let now = 784_111_777_000;
        assert_eq!(retry_after_header(" 7 ", now), Some(Duration::from_secs(7)));
        assert_eq!(retry_after_header("0", now), Some(Duration::ZERO));
        assert_eq!(
            retry_after_header("99999999999999999999999", now),
            Some(RETRY_AFTER_HEADER_CAP)
        );
        assert_eq!(
            retry_after_header("Sun, 06 Nov 1994 08:50:17 GMT", now),
            Some(Duration::from_secs(40))
        );
        // The obsolete RFC 850 and asctime forms.
        assert_eq!(
            retry_after_header("Sunday, 06-Nov-94 08:50:17 GMT", now),
            Some(Duration::from_secs(40))
        );
        assert_eq!(
            retry_after_header("Sun Nov  6 08:50:17 1994", now),
            Some(Duration::from_secs(40))
        );
        // A fraction of a second before the date still waits what is left.
        assert_eq!(
            retry_after_header("Sun, 06 Nov 1994 08:49:38 GMT", now + 250),
            Some(Duration::from_millis(750))
        );
        // A date in the past waits nothing; one far ahead waits the cap.
        assert_eq!(
            retry_after_header("Sun, 06 Nov 1994 08:00:00 GMT", now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after_header("Fri, 31 Dec 9999 23:59:59 GMT", now),
            Some(RETRY_AFTER_HEADER_CAP)
        );
        for garbage in [
            "soon",
            "",
            "-5",
            "1.5",
            "7s",
            "Sun, 32 Nov 1994 08:49:37 GMT",
        ] {
            assert_eq!(retry_after_header(garbage, now), None, "{garbage:?}");
        }
    }

    /// Issue 17 item 18: a sleep (the wall clock ran on, the monotonic clock stood still) is
    /// seen at the next look; ordinary drift, a clock set back, or both clocks moving together
    /// are not.
    #[test]
    fn a_wall_clock_jump_beyond_the_monotonic_clock_is_seen_once() {
        let mut w = ClockWatch::new(1_000_000, 50);
        // Ten seconds on both clocks: no jump.
        assert_eq!(w.look(1_010_000, 10_050), None);
        // A little drift (an NTP slew) is none either.
        assert_eq!(w.look(1_020_500, 20_050), None);
        // Ten minutes asleep: the wall clock moved 602 s, the monotonic 2 s.
        assert_eq!(w.look(1_622_500, 22_050), Some(Duration::from_secs(600)));
        // Seen once: the next look counts from there.
        assert_eq!(w.look(1_632_500, 32_050), None);
        // The wall clock set back 1,000 s: no sleep.
        assert_eq!(w.look(1_632_500 - 1_000_000, 42_050), None);
        // Exactly the threshold is not over it; a step past it is.
        let mut w = ClockWatch::new(0, 0);
        assert_eq!(w.look(5_000, 0), None);
        assert_eq!(w.look(10_001, 0), Some(Duration::from_millis(5_001)));
    }

    #[test]
    fn close_classification() {
        assert_eq!(
            classify_close(1013, "rate_limited; retry_after=12"),
            CloseKind::Budget { retry_after_s: 12 }
        );
        assert_eq!(classify_close(1013, "overload"), CloseKind::Ordinary);
        assert_eq!(classify_close(1008, "Invalid token"), CloseKind::KeyRefused);
        assert_eq!(
            classify_close(4426, "upgrade required"),
            CloseKind::UpgradeRequired
        );
        assert_eq!(classify_close(1001, "retry_after=5"), CloseKind::Ordinary);
    }

    #[test]
    fn budget_delay_clamps_and_adds_up_to_ten_percent() {
        assert_eq!(budget_delay(0, 0.0), Duration::from_secs(1));
        assert_eq!(budget_delay(30, 0.0), Duration::from_secs(30));
        assert_eq!(budget_delay(u64::MAX, 0.0), Duration::from_secs(3600));
        let top = budget_delay(100, 0.999_999);
        assert!(top >= Duration::from_secs(100) && top < Duration::from_secs(110));
        assert_eq!(budget_delay(100, f64::NAN), Duration::from_secs(100));
        assert!(budget_delay(100, 5.0) <= Duration::from_secs(110));
    }

    #[test]
    fn backoff_doubles_to_cap_and_resets_only_after_stable_connection() {
        let mut b = Backoff::default();
        let ceilings: Vec<Duration> = (0..10).map(|_| b.next_delay(0.999_999)).collect();
        assert_eq!(ceilings[0], Duration::from_secs(1));
        assert!(ceilings[5] > Duration::from_secs(31) && ceilings[5] <= Duration::from_secs(32));
        assert!(ceilings[9] <= Duration::from_secs(60) && ceilings[9] > Duration::from_secs(59));
        b.connection_lasted(Duration::from_secs(29));
        assert!(b.next_delay(0.0) >= Duration::from_secs(30));
        b.connection_lasted(Duration::from_secs(30));
        assert_eq!(b.next_delay(0.0), Duration::from_secs(1));
    }

    #[test]
    fn delay_after_dispatches_by_kind() {
        let mut b = Backoff::default();
        let ten_min = Duration::from_secs(600);
        assert_eq!(
            delay_after(
                &CloseKind::Budget { retry_after_s: 5 },
                &mut b,
                ten_min,
                0.0,
                1.0
            ),
            Duration::from_secs(5)
        );
        assert_eq!(b.attempt(), 1, "a budget refusal is a failed connect");
        assert_eq!(
            delay_after(&CloseKind::KeyRefused, &mut b, ten_min, 0.0, 1.0),
            Duration::from_secs(1),
            "a refused key first waits seconds"
        );
        assert_eq!(
            delay_after(&CloseKind::UpgradeRequired, &mut b, ten_min, 0.0, 1.0),
            UPGRADE_RECHECK / 2,
            "a 4426 waits the slow re-check"
        );
        assert_eq!(b.attempt(), 2);
    }

    /// Issue 29 item 11: a `4426` close was retried on the ordinary backoff, 60-120 connects an
    /// hour against the key's budget of 200. The re-check is 15-30 min: at most 4 an hour.
    #[test]
    fn an_upgrade_required_close_is_rechecked_slowly_within_the_hourly_budget() {
        for r in [0.0, 0.5, 0.999_999] {
            let mut b = Backoff::default();
            let (mut t, mut attempts) = (Duration::ZERO, 0);
            while t < Duration::from_secs(3_600) {
                let d = delay_after(
                    &CloseKind::UpgradeRequired,
                    &mut b,
                    KEY_REFUSED_RETRY,
                    r,
                    1.0,
                );
                assert!(
                    d >= Duration::from_secs(15 * 60) && d <= UPGRADE_RECHECK,
                    "{r}: {d:?}"
                );
                t += d;
                attempts += 1;
            }
            assert!(attempts <= 4, "{r}: {attempts} re-checks in an hour");
        }
        // The test time scale divides it.
        assert_eq!(
            upgrade_recheck_delay(0.0, 1000.0),
            Duration::from_millis(900)
        );
    }

    /// Issue 29 item 3: a server that accepts the upgrade and closes at once (`1008` while REST
    /// still answers, or `1011`) was retried every 1-2 s: something reset the delays although
    /// the socket never worked. Only a socket that proved itself resets them.
    #[test]
    fn only_a_socket_that_proved_itself_resets_the_delays() {
        let closed_at_once = [
            SocketRecord::default(),
            // hello.ok, then the close at once.
            SocketRecord {
                came_up: true,
                frames_after_first: 0,
                up_for: Duration::from_millis(30),
            },
        ];
        for rec in closed_at_once {
            assert!(!rec.proved(1.0), "{rec:?}");
            let mut key = Backoff::default();
            let mut ordinary = Backoff::default();
            let (mut last_key, mut last_ordinary) = (Duration::ZERO, Duration::ZERO);
            for n in 0..8 {
                let k = delay_after(
                    &CloseKind::KeyRefused,
                    &mut key,
                    KEY_REFUSED_RETRY,
                    0.0,
                    1.0,
                );
                let o = delay_after(
                    &CloseKind::Ordinary,
                    &mut ordinary,
                    KEY_REFUSED_RETRY,
                    0.0,
                    1.0,
                );
                key.socket_ended(&rec, 1.0);
                ordinary.socket_ended(&rec, 1.0);
                assert!(k >= last_key && o >= last_ordinary, "{n}: {k:?} {o:?}");
                (last_key, last_ordinary) = (k, o);
            }
            assert!(last_key >= Duration::from_secs(64), "{last_key:?}");
            assert!(
                last_ordinary >= Duration::from_secs(30),
                "{last_ordinary:?}"
            );
        }
        // A second frame, or five seconds up: the key was accepted for good.
        for rec in [
            SocketRecord {
                came_up: true,
                frames_after_first: 1,
                up_for: Duration::from_millis(30),
            },
            SocketRecord {
                came_up: true,
                frames_after_first: 0,
                up_for: PROVEN_AFTER,
            },
        ] {
            assert!(rec.proved(1.0), "{rec:?}");
            let mut b = Backoff::default();
            for _ in 0..5 {
                delay_after(&CloseKind::KeyRefused, &mut b, KEY_REFUSED_RETRY, 0.0, 1.0);
                delay_after(&CloseKind::Ordinary, &mut b, KEY_REFUSED_RETRY, 0.0, 1.0);
            }
            b.socket_ended(&rec, 1.0);
            assert_eq!(b.key_attempt(), 0);
            assert_eq!(b.attempt(), 5, "the ordinary backoff waits for 30 s up");
            b.socket_ended(
                &SocketRecord {
                    up_for: STABLE_AFTER,
                    ..rec
                },
                1.0,
            );
            assert_eq!(b.attempt(), 0);
        }
        // Thirty seconds up with no frame at all proves nothing.
        let mut b = Backoff::default();
        b.next_delay(0.0);
        b.socket_ended(
            &SocketRecord {
                came_up: false,
                frames_after_first: 0,
                up_for: STABLE_AFTER,
            },
            1.0,
        );
        assert_eq!(b.attempt(), 1);
    }

    /// Issue 29: the proof time follows the test time scale as every other delay does, so a
    /// test at scale 50 sees a socket prove itself after 100 ms up, not 5 s.
    #[test]
    fn the_proof_time_is_divided_by_the_test_time_scale() {
        let rec = SocketRecord {
            came_up: true,
            frames_after_first: 0,
            up_for: PROVEN_AFTER / 50,
        };
        assert!(!rec.proved(1.0));
        assert!(rec.proved(50.0));
        let mut b = Backoff::default();
        delay_after(&CloseKind::KeyRefused, &mut b, KEY_REFUSED_RETRY, 0.0, 50.0);
        b.socket_ended(&rec, 50.0);
        assert_eq!(b.key_attempt(), 0);
    }

    #[test]
    fn time_asleep_counts_as_waited() {
        let s = Duration::from_secs;
        assert_eq!(left_after_sleep(s(300), s(600)), Duration::ZERO);
        assert_eq!(left_after_sleep(s(300), s(100)), s(200));
    }

    /// Issue 17 item 7: eight `retry_after=1` refusals in a row waited 1.0, 1.7, 3.6, 6.1, 11.6,
    /// 25.0, 48.5 s, the ordinary backoff stretching the server's delay. Each must wait the hint
    /// (floor 1 s) plus 0-10 %, never less and never more, however many came before.
    #[test]
    fn budget_refusals_in_a_row_each_wait_the_hint_plus_at_most_ten_percent() {
        for r in [0.0, 0.5, 0.999_999] {
            for s in [0u64, 1, 7, 3_600, 7_200] {
                let mut b = Backoff::default();
                let base = Duration::from_secs(s.clamp(1, 3_600));
                let hint = CloseKind::Budget { retry_after_s: s };
                for n in 0..12 {
                    let d = delay_after(&hint, &mut b, KEY_REFUSED_RETRY, r, 1.0);
                    assert!(
                        d >= base && d <= base.mul_f64(1.1),
                        "refusal {n} of retry_after={s} at {r}: {d:?}"
                    );
                }
                assert_eq!(b.attempt(), 12, "each refusal is a failed connect");
            }
        }
        // After refusals, an ordinary close waits the grown backoff: the refusals counted.
        let mut b = Backoff::default();
        for _ in 0..6 {
            delay_after(
                &CloseKind::Budget { retry_after_s: 1 },
                &mut b,
                KEY_REFUSED_RETRY,
                0.0,
                1.0,
            );
        }
        assert_eq!(
            delay_after(&CloseKind::Ordinary, &mut b, KEY_REFUSED_RETRY, 0.0, 1.0),
            Duration::from_secs(30)
        );
        // A long hint is never cut short.
        let long = CloseKind::Budget { retry_after_s: 300 };
        assert!(
            delay_after(&long, &mut Backoff::default(), KEY_REFUSED_RETRY, 0.0, 1.0)
                >= Duration::from_secs(300)
        );
    }

    /// Issue 17 item 4: a key refused for a moment is tried again in seconds; a key refused on
    /// and on grows to the 10-minute ceiling; an accepted key starts again at seconds.
    #[test]
    fn a_refused_key_is_retried_from_seconds_growing_to_the_ten_minute_ceiling() {
        let mut top = Backoff::default();
        let mut bottom = Backoff::default();
        let key = CloseKind::KeyRefused;
        let mut waited_first_minute = (Duration::ZERO, 0);
        for n in 0..14u32 {
            let hi = delay_after(&key, &mut top, KEY_REFUSED_RETRY, 0.999_999, 1.0);
            let lo = delay_after(&key, &mut bottom, KEY_REFUSED_RETRY, 0.0, 1.0);
            let c = (KEY_RETRY_FIRST * 2u32.pow(n.min(16))).min(KEY_REFUSED_RETRY);
            assert!(hi <= c && hi > c.mul_f64(0.99), "{n}: {hi:?} under {c:?}");
            assert_eq!(lo, (c / 2).max(Duration::from_secs(1)), "{n}");
            if waited_first_minute.0 < Duration::from_secs(60) {
                waited_first_minute.0 += lo;
                waited_first_minute.1 += 1;
            }
        }
        assert!(
            waited_first_minute.1 <= 7,
            "within the per-agent budget of 20 a minute, drawing low: {waited_first_minute:?}"
        );
        assert_eq!(
            delay_after(&key, &mut top, KEY_REFUSED_RETRY, 0.999_999, 1.0),
            KEY_REFUSED_RETRY.mul_f64(0.999_999_5),
        );
        top.key_accepted();
        assert_eq!(top.key_attempt(), 0);
        assert!(delay_after(&key, &mut top, KEY_REFUSED_RETRY, 0.999_999, 1.0) <= KEY_RETRY_FIRST);
        // The ordinary backoff and the key's are apart.
        assert_eq!(top.attempt(), 0);
        // A smaller ceiling (the listener's scaled one) caps it; a scale divides it.
        let mut b = Backoff::default();
        for _ in 0..12 {
            assert!(b.next_key_delay(Duration::from_secs(5), 0.999, 1.0) <= Duration::from_secs(5));
        }
        assert_eq!(
            Backoff::default().next_key_delay(KEY_REFUSED_RETRY, 0.0, 1000.0),
            Duration::from_millis(1)
        );
    }

    #[test]
    fn a_time_scale_shortens_the_ordinary_backoff_and_never_the_servers_retry_after() {
        let ten_min = Duration::from_secs(600);
        let fast = 1000.0;
        // The ordinary part scales: after an ordinary close, a 4426, at the first draw and at the
        // cap (which the unscaled backoff reaches at 30-60 s).
        let mut b = Backoff::default();
        assert_eq!(
            delay_after(&CloseKind::Ordinary, &mut b, ten_min, 0.0, fast),
            Duration::from_millis(1)
        );
        for _ in 0..10 {
            let d = delay_after(&CloseKind::Ordinary, &mut b, ten_min, 0.999_999, fast);
            assert!(d <= Duration::from_millis(60), "{d:?}");
            let d = delay_after(
                &CloseKind::UpgradeRequired,
                &mut b,
                ten_min,
                0.999_999,
                fast,
            );
            assert!(d <= Duration::from_millis(1_800), "{d:?}");
        }
        assert!(b.attempt() >= 7, "the backoff is at its cap");
        let mut unscaled = b.clone();
        assert!(
            delay_after(&CloseKind::Ordinary, &mut unscaled, ten_min, 0.0, 1.0)
                >= Duration::from_secs(30),
            "the same state unscaled waits the cap"
        );

        // A refusal waits its hint, scaled or not: at least 5 s, at most its 10 % jitter above.
        let hint = CloseKind::Budget { retry_after_s: 5 };
        for r in [0.0, 0.5, 0.999_999] {
            for scale in [fast, 1.0] {
                let d = delay_after(&hint, &mut b, ten_min, r, scale);
                assert!(
                    d >= Duration::from_secs(5) && d <= Duration::from_millis(5_500),
                    "{r} at {scale}: {d:?}"
                );
            }
        }
        // However large the scale, the hint and its 1 s floor hold.
        for scale in [1e6, 1e300, f64::MAX] {
            for s in [0, 1, 2, 3_600, u64::MAX] {
                let d = delay_after(
                    &CloseKind::Budget { retry_after_s: s },
                    &mut Backoff::default(),
                    ten_min,
                    0.0,
                    scale,
                );
                assert_eq!(d, Duration::from_secs(s.clamp(1, 3_600)), "{s} at {scale}");
            }
        }
        // A refused key's retry is scaled, and capped by what the caller passes (the listener
        // scales the ceiling itself).
        assert_eq!(
            delay_after(&CloseKind::KeyRefused, &mut b, ten_min, 0.0, fast),
            Duration::from_millis(1)
        );
        for _ in 0..12 {
            delay_after(&CloseKind::KeyRefused, &mut b, ten_min, 0.999, fast);
        }
        assert!(
            delay_after(&CloseKind::KeyRefused, &mut b, ten_min / 1000, 0.999, fast)
                <= ten_min / 1000
        );
        // No scale in effect (1), or none that makes sense: the contract's delays.
        for scale in [1.0, 0.0, -5.0, f64::NAN, f64::INFINITY] {
            let d = delay_after(
                &CloseKind::Ordinary,
                &mut Backoff::default(),
                ten_min,
                0.0,
                scale,
            );
            assert_eq!(d, Duration::from_secs(1), "{scale}");
        }
        assert_eq!(
            scaled(Duration::from_secs(60), 20.0),
            Duration::from_secs(3)
        );
        assert_eq!(
            scaled(Duration::from_secs(60), 1e-300),
            Duration::from_secs(86_400)
        );
    }
}

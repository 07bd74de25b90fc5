//! The wake webhook's timing (contract 3.5 and 5), on server-clock milliseconds and free of I/O:
//! the new-message wake cycle (one `delivery_id`, retried 1, 5, 30 min and 3 h after each
//! attempt until the agent pulls or reads, ended after 24 h without either), the spacing of new
//! wakes (60 s, 5 min after two accepted wakes nothing was pulled after, 30 min from the third),
//! invites carried by a running cycle or woken on their own, and a re-wake rung's delivery.

use super::super::clock::{HOUR, MIN, SEC};

/// Retries of one delivery, after each attempt (3.5): 1, 5, 30 min, then every 3 h.
pub const RETRY_MS: [u64; 4] = [MIN, 5 * MIN, 30 * MIN, 3 * HOUR];
/// A wake cycle ends after this long in which the agent pulled and read nothing (3.5).
pub const CYCLE_END_MS: u64 = 24 * HOUR;
/// A held request that returned something keeps the agent present this long (3.5).
pub const HELD_PRESENCE_MS: u64 = 60 * SEC;
/// Any authenticated call this recent keeps a re-wake rung back (5).
pub const ACTIVITY_MS: u64 = 2 * MIN;

/// The retry delay after the `attempts`-th attempt (1-based).
pub fn retry_after(attempts: u32) -> u64 {
    let i = (attempts.max(1) - 1) as usize;
    RETRY_MS
        .get(i)
        .or(RETRY_MS.last())
        .copied()
        .unwrap_or(3 * HOUR)
}

/// The least time between a wake that new messages or reminders bring and the previous wake:
/// 60 s, 5 min once two accepted wakes saw nothing pulled, 30 min from the third (3.5).
pub fn spacing(unpulled_accepted: u32) -> u64 {
    match unpulled_accepted {
        0 | 1 => MIN,
        2 => 5 * MIN,
        _ => 30 * MIN,
    }
}

/// What a delivery is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The new-message wake cycle: undelivered messages and reminders that came due.
    Messages,
    /// A new invite's own wake (`reason: invite`).
    Invite(String),
    /// An unanswered re-wake rung (`reason: unanswered`, `step`).
    Rung(u8),
}

/// One delivery: a cycle of attempts under one `delivery_id`.
#[derive(Debug, Clone)]
pub struct Cycle {
    pub delivery_id: String,
    pub kind: Kind,
    /// Attempts sent so far.
    pub attempts: u32,
    /// When the next attempt may go (before presence and spacing).
    pub next_v: u64,
    /// When the first attempt went; the 24 h end counts from it.
    pub first_v: Option<u64>,
    /// When the last attempt went.
    pub last_v: Option<u64>,
    /// An attempt is on the wire: no other goes until it is settled.
    pub in_flight: bool,
    /// An invite riding on this cycle, with when it arrived: carried once a wake sent after it
    /// is accepted; if the cycle ends first, it gets a wake of its own.
    pub invite: Option<(String, u64)>,
    /// Conversations whose defer reminder came due and that this cycle names.
    pub reminders: Vec<String>,
}

impl Cycle {
    pub fn new(kind: Kind, now_v: u64) -> Cycle {
        Cycle {
            delivery_id: new_uuid(),
            kind,
            attempts: 0,
            next_v: now_v,
            first_v: None,
            last_v: None,
            in_flight: false,
            invite: None,
            reminders: Vec::new(),
        }
    }

    /// Records an attempt going out at `now_v`.
    pub fn sent(&mut self, now_v: u64) {
        self.attempts += 1;
        self.in_flight = true;
        self.first_v.get_or_insert(now_v);
        self.last_v = Some(now_v);
    }

    /// Records the receiver's answer to the attempt sent at `last_v`: `true` for a 2xx. Returns
    /// whether the delivery is done (an invite's or a rung's accepted wake; a cycle of new
    /// messages goes on until the agent pulls).
    pub fn settled(&mut self, accepted: bool) -> bool {
        self.in_flight = false;
        let sent = self.last_v.unwrap_or(0);
        if accepted
            && let Some((_, arrived)) = &self.invite
            && sent >= *arrived
        {
            self.invite = None;
        }
        if accepted && self.kind != Kind::Messages {
            return true;
        }
        self.next_v = sent + retry_after(self.attempts);
        false
    }

    /// A cycle of new messages that sent a wake 24 h ago and saw nothing pulled since is over.
    pub fn expired(&self, now_v: u64) -> bool {
        self.first_v
            .is_some_and(|t| now_v >= t.saturating_add(CYCLE_END_MS))
    }
}

/// The new-message wake cycle after something new (a message, a reminder that came due) at
/// `now_v`: it rides on a cycle that has sent nothing yet; else a new cycle, with a fresh
/// `delivery_id`, takes over, carrying a pending invite (3.5).
pub fn on_new(current: Option<Cycle>, now_v: u64) -> Cycle {
    match current {
        Some(c) if c.kind == Kind::Messages && c.attempts == 0 => c,
        Some(c) => {
            let mut next = Cycle::new(Kind::Messages, now_v);
            next.invite = match c.kind {
                Kind::Invite(id) => Some((id, c.first_v.unwrap_or(now_v))),
                _ => c.invite,
            };
            next.reminders = c.reminders;
            next
        }
        None => Cycle::new(Kind::Messages, now_v),
    }
}

/// The cycle after a new invite `id` at `now_v`: it rides on a new-message cycle (a new one if
/// that cycle already sent a wake, 3.5's clarification), else it gets a wake of its own.
pub fn on_invite(current: Option<Cycle>, id: &str, now_v: u64) -> Cycle {
    match current {
        Some(c) if c.kind == Kind::Messages => {
            let mut next = if c.attempts == 0 {
                c
            } else {
                on_new(Some(c), now_v)
            };
            next.invite = Some((id.to_string(), now_v));
            next
        }
        _ => Cycle::new(Kind::Invite(id.to_string()), now_v),
    }
}

/// A fresh `delivery_id`: a UUID v4 in its text form (3.5's example).
pub fn new_uuid() -> String {
    let (a, b) = (fastrand::u64(..), fastrand::u64(..));
    let b = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    let a = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        a >> 32,
        (a >> 16) & 0xffff,
        a & 0xffff,
        b >> 48,
        b & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_come_1_5_30_min_then_every_3_h_after_each_attempt() {
        let got: Vec<u64> = (1..=6).map(retry_after).collect();
        assert_eq!(got, [MIN, 5 * MIN, 30 * MIN, 3 * HOUR, 3 * HOUR, 3 * HOUR]);
    }

    #[test]
    fn spacing_grows_after_two_and_three_accepted_wakes_with_nothing_pulled() {
        assert_eq!(
            [0, 1, 2, 3, 9].map(spacing),
            [MIN, MIN, 5 * MIN, 30 * MIN, 30 * MIN]
        );
    }

    #[test]
    fn something_new_rides_an_unsent_cycle_and_starts_a_fresh_one_after_a_wake() {
        let c = on_new(None, 0);
        let id = c.delivery_id.clone();
        let same = on_new(Some(c), 10);
        assert_eq!(same.delivery_id, id, "nothing sent yet: one wake for both");
        let mut sent = same;
        sent.sent(20);
        let fresh = on_new(Some(sent), 30);
        assert_ne!(fresh.delivery_id, id);
        assert_eq!(fresh.attempts, 0);
    }

    #[test]
    fn an_invite_is_carried_once_a_wake_sent_after_it_is_accepted() {
        let mut c = on_invite(Some(Cycle::new(Kind::Messages, 0)), "gri_1", 5);
        assert_eq!(c.invite, Some(("gri_1".into(), 5)));
        c.sent(10);
        assert!(!c.settled(false), "a refused wake carries nothing");
        assert!(c.invite.is_some());
        assert_eq!(c.next_v, 10 + MIN);
        c.sent(10 + MIN);
        assert!(!c.settled(true), "a cycle of messages goes on until a pull");
        assert!(c.invite.is_none());
        // With no cycle of messages, an invite wakes on its own and is done once accepted.
        let mut own = on_invite(None, "gri_2", 0);
        assert_eq!(own.kind, Kind::Invite("gri_2".into()));
        own.sent(0);
        assert!(own.settled(true));
    }

    #[test]
    fn a_new_message_takes_over_an_invite_wake_and_carries_its_invite() {
        let mut inv = on_invite(None, "gri_1", 0);
        inv.sent(0);
        inv.in_flight = false;
        let c = on_new(Some(inv), 100);
        assert_eq!(c.kind, Kind::Messages);
        assert_eq!(c.invite, Some(("gri_1".into(), 0)));
    }

    #[test]
    fn a_cycle_ends_24_h_after_its_first_wake() {
        let mut c = Cycle::new(Kind::Messages, 0);
        assert!(!c.expired(u64::MAX), "no wake sent yet");
        c.sent(1_000);
        assert!(!c.expired(1_000 + CYCLE_END_MS - 1));
        assert!(c.expired(1_000 + CYCLE_END_MS));
    }

    #[test]
    fn delivery_ids_are_uuid_v4() {
        let id = new_uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(id.as_bytes()[14], b'4');
        assert!(
            matches!(id.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "{id}"
        );
    }
}

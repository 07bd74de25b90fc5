//! The listener machine driven step by step on a hand-held clock.

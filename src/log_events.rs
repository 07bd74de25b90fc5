//! Every `event` the listener logs: the constants live in the pure crate beside the state machines that log most of them (`agentchat_core::log_events`).

pub use crate::core::log_events::*;

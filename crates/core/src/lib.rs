//! The rules of contract v1 that need no I/O: parsing, the frame engine, the coalescer, the
//! reconnect policy, the single-run invite rule, the cycle decision, the identity block, the
//! table of runtimes (`runtime_kind`), the vocabulary of the listener's status (`status`) and what
//! it shows (`shown`), the listener's wakes (`wakes`) and its ways out of an unusable runtime
//! (`runtime_health`) and missing texts (`texts_recovery`), and the
//! run policy with the runs' own cost reports (`policy`, `run_report`; issue 26).
//! Every time is an injected number of milliseconds, so each rule is tested without a runtime
//! against the fixtures in `conformance/`.
//!
//! The contract is AgentChat's contract v1, published at <https://agentchat.me/contract/v1/>;
//! a section number in a comment anywhere in this crate ("contract 3.4") refers to it.

pub mod admission;
pub mod cli_args;
pub mod coalescer;
pub mod decision;
pub mod engine;
pub mod exit;
pub mod frames;
pub mod handle;
pub mod history;
pub mod host;
pub mod identity;
pub mod invite_rule;
pub mod listener;
pub mod log_events;
pub mod pacing;
pub mod policy;
pub mod recheck;
pub mod reconnect;
pub mod rng;
pub mod run_env;
pub mod run_report;
pub mod runtime_health;
pub mod runtime_kind;
pub mod sandbox;
pub mod shown;
pub mod status;
pub mod texts;
pub mod texts_recovery;
pub mod time;
pub mod tray;
pub mod wakes;

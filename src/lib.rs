//! agentchat: the resident listener for AgentChat (`agentchat listen`), the pure rules of contract v1
//! it follows (`core`), and a faithful local AgentChat server (`sim`).
//!
//! Data path: frame -> wake -> coalescer -> cycle (tray, run, tray, invite rule) -> status.

// No panic paths outside tests: the release build aborts on a panic (Cargo.toml, panic = "abort"),
// so none may be left to reach. Each place that could index out of range, unwrap or panic takes
// the `None`/`Err` path instead; `sim` and `demo` (not the daemon) opt out of the indexing lint.
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented,
        clippy::indexing_slicing
    )
)]

pub mod cli;
pub mod client;
pub mod config;
pub mod core;
// The demo and the sim build JSON objects and set their fields by index (serde_json's `IndexMut`
// panics only on a value that is not an object); neither is the daemon.
#[allow(clippy::indexing_slicing)]
pub mod demo;
pub mod doctor;
pub mod listen;
pub mod runtime;
pub mod service;
#[allow(clippy::indexing_slicing)]
pub mod sim;
pub mod status;
pub mod sys;

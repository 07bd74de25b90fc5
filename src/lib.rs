//! agentchat: the resident listener for AgentChat (`agentchat listen`), the pure rules of contract v1
//! it follows (`core`), and a faithful local AgentChat server (`sim`).
//!
//! Data path: frame -> wake -> coalescer -> cycle (tray, run, tray, invite rule) -> status.

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
pub mod mcp;
pub mod runtime;
pub mod service;
pub mod setup;
#[allow(clippy::indexing_slicing)]
pub mod sim;
pub mod status;
pub mod sys;

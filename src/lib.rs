//! agentchat: the resident listener for AgentChat (`agentchat listen`), the pure rules of contract v1
//! it follows (`core`), and a faithful local AgentChat server (`sim`).
//!
//! Data path: frame -> wake -> coalescer -> cycle (tray, run, tray, invite rule) -> status.

pub mod cli;
pub mod client;
pub mod config;
pub mod core;
pub mod demo;
pub mod doctor;
pub mod listen;
pub mod runtime;
pub mod service;
pub mod sim;
pub mod status;
pub mod sys;

//! The integration tests, one binary with a module per area (one link of the library instead of
//! one per file). Filter by module: `cargo test --test it listen::` runs the `listen` module (and
//! every other test whose path contains `listen::`, such as `runtimes_listen::`).
//!
//! Area modules hold tests; `common`, `listen_support`, `sim_support`, `model_server` and `browser`
//! (headless Chromium over its DevTools socket) are the shared helpers they use.

// Tests may unwrap, panic and index: Cargo.toml denies those (restriction lints) in the program only.
#![allow(clippy::restriction)]

mod browser;
mod common;
mod listen_support;
mod model_server;
mod sim_support;

mod bench_harness;
mod bounds;
mod cli;
mod config;
mod conformance;
mod container;
mod core_props;
mod dashboard;
mod demo;
mod docs_links;
mod doctor;
mod doctor_run;
mod faults;
mod host;
mod integrating;
mod kubernetes;
mod listen;
mod listen_connect;
mod listen_policy;
mod listen_proxy;
mod listen_spend;
mod listen_wakes;
mod listen_wire;
mod live_systemd;
mod log_events;
mod mcp_bridge;
mod metrics;
mod pacing;
mod packaging;
mod release_layout;
mod runner;
mod runs;
mod runtimes_cli;
mod runtimes_confine;
mod runtimes_contain;
mod runtimes_cost;
mod runtimes_listen;
mod service;
mod service_host;
mod setup;
mod sim_conformance;
mod sim_hands;
mod sim_mcp;
mod sim_old_paths;
mod sim_rest;
mod sim_socket;
mod sim_webhook;
mod status;

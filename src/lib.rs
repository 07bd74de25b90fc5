//! agentchat: the resident listener for AgentChat (`agentchat listen`), the pure rules of contract
//! v1 it follows ([`core`]), and a faithful local AgentChat server ([`sim`]).
//!
//! Data path: every decision is the listener's state machine ([`core::listener`], one per
//! profile, inside [`core::host`]); [`listen::driver`] feeds it and performs what it asks. Frame
//! (read by [`listen::socket`], judged by [`core::listener::socket`] and [`core::engine`]) → wake
//! ([`core::wakes`], [`core::coalescer`]) → cycle ([`core::listener::cycle`]: the tray through
//! [`client`], [`core::decision`], [`core::policy`], the run through [`runtime`] and
//! [`runtime::supervisor`], the tray again, [`core::invite_rule`]) → `status.json`
//! ([`listen::state_dir`]).
//!
//! # Layout
//!
//! A workspace of two crates: the pure one (`crates/core`, re-exported here as [`core`]: no tokio,
//! no I/O, no clock in its dependencies), and this library with a binary (`src/main.rs`, which
//! only parses the command line, dispatches and exits). The modules form layers, lowest first; **a module imports only from its
//! own layer or lower ones**. The links are checked by `cargo doc` (`scripts/test` denies broken
//! intra-doc links); a private submodule is named in code, its page one click down from its
//! parent's (`cargo doc --document-private-items --open`). CONTRIBUTING.md says how the code is
//! tested.
//!
//! **Layer 0**, importing nothing else of the crate:
//! - [`core`]: the rules of contract v1 that need no I/O, tested against `conformance/`. Every time
//!   is an injected number of milliseconds and every random draw an injected number in [0, 1).
//!   Frames ([`core::frames`], [`core::engine`]), wakes into cycles ([`core::coalescer`]),
//!   reconnects and pacing ([`core::reconnect`], [`core::pacing`], [`core::recheck`]), the tray and
//!   texts ([`core::tray`], [`core::texts`]), what a cycle does ([`core::decision`],
//!   [`core::invite_rule`], [`core::identity`], [`core::handle`]), the run's environment and kind
//!   ([`core::run_env`], [`core::runtime_kind`]), the kernel's line around a run and what
//!   `extra_args` may hold ([`core::sandbox`], [`core::cli_args`]), `listen --all`'s run slots
//!   ([`core::admission`]), the run policy and what runs cost ([`core::policy`],
//!   [`core::run_report`]), the run history's records ([`core::history`]), `status.json`'s
//!   vocabulary ([`core::status`]), and the state
//!   machines: one profile's listener ([`core::listener`]: `socket`, `cycle`, `policy`, `health`,
//!   `status_file`, `mutes`, its [`core::listener::io`] vocabulary) and the process's profiles,
//!   pacer and run slots ([`core::host`]), on an injected clock ([`core::time`]) and seed
//!   ([`core::rng`]).
//! - [`sys`]: OS plumbing every layer shares: [`sys::fs`] (atomic and private writes, capped reads
//!   of the files a user names), [`sys::flock`] (who holds a lock file), [`sys::process`] (a child
//!   in its own process group, [`sys::process::ProcessEnd`]), [`sys::time`], [`sys::tls`] (the one
//!   rustls config), [`sys::text`], [`sys::wait`] (an optional deadline or future for `select!`
//!   arms).
//! - [`log_events`]: every log line's `event` name, each listed in docs/operating.md ("Logging").
//!
//! **Layer 1**, [`config`]: layered configuration and profiles → [`config::Settings`]:
//! [`config::value`] (one rule per setting, shared by the file, the environment and the flags),
//! `file` (the file's shape, errors naming the key path), `keys` (each key on one line: shape,
//! rule, default, variable and flag), `env`, `layer`, a pure `resolve`, `load`
//! (the reads), `hint` ("did you mean" in errors). The key is a `SecretString`;
//! [`config::KeySource`] says where it came from.
//!
//! **Layer 2**, [`client`]: the REST calls the listener makes itself ([`client::Api`],
//! [`client::ApiError`]); `answer` (judging an answer, each route's body cap [`client::Route`]),
//! `deprecation` (contract 7's headers, `REMOVED`), `network` (one line for no answer). The
//! socket's URL is [`core::listener::ws_url`].
//!
//! **Layer 3**, [`runtime`]: the agent's run: [`runtime::supervisor`] (process group, time limit,
//! run logs), `leftover` (a killed listener's run group), [`runtime::claude`], [`runtime::codex`],
//! [`runtime::script`] and [`runtime::agent_cli`] (argv, environment, stdin, judging the outcome),
//! [`runtime::confine`] (what a woken run is offered), [`runtime::probe`] (a CLI run briefly) and
//! [`runtime::check`] (whether the runtime can work now).
//!
//! **Layer 4**, [`listen`]: the daemon; never imports the commands of layer 5.
//! - [`listen::host`]: the process around the profiles' listeners (`agentchat listen` is a set of
//!   one, `listen --all` every profile): `signals`, `notify` (sd_notify and the watchdog),
//!   `profiles` (a profile's start; SIGHUP's fingerprint), `reload`, `blocked` (a profile whose
//!   agent another listener holds).
//! - [`listen::driver`]: the one loop around the process's state machine ([`core::host`]): it
//!   reads the clock once per step, feeds the machine and performs its effects (`effects`; a
//!   run: `run`; errors as the machine's answers: [`listen::driver::convert`]).
//! - [`listen::socket`]: the dial (`dial`, `proxy`) and one connection's reader, which hands
//!   bursts to the machine and writes the acks it answers with; [`listen::admission`] (the memory
//!   a run can have, for `listen --all`'s slots); [`listen::workdir`] (a run's working directory
//!   and identity block, shared with `doctor --run`).
//! - [`listen::state_dir`] (the lock, `status.json`, `invites.json`), [`listen::history`] (the
//!   run history: appended, compacted, read back into the caps' ledger), [`listen::agent_lock`] (one
//!   listener per agent per machine), [`listen::texts`] (the one texts loader and cache),
//!   [`listen::logging`], [`listen::metrics`] (the metrics page, the probes, the capped endpoint),
//!   [`listen::page`] (the live page of runs and holds, its API and embedded assets),
//!   [`listen::liveness`] (whether a `status.json`'s listener is alive),
//!   [`listen::once`] (`listen --once`).
//!
//! **Layer 5**, the commands, importing anything below: [`status`] (`all`: `status --all`;
//! `zone`: the zone a hold's end is told in), [`runs`] (`agentchat runs`: the run history;
//! `render`), [`dashboard`] (`agentchat dashboard`: the page, [`listen::page`], for the config's
//! profiles),
//! [`doctor`] (pure [`doctor::checks`], [`doctor::facts`], [`doctor::probes`],
//! [`doctor::presence`], `reach`, [`doctor::service_checks`], [`doctor::run`](mod@doctor::run):
//! `doctor --run`), [`service`] (`systemd`, `launchd`, `install`, `manager`, `host` and
//! `host_refresh`: the one-process unit), [`demo`] (`child`: the listener child), [`setup`] (the
//! steps in order: `key`, `signup`, `account`, `pick`, `config_edit`, `user_cli` (the user's CLIs:
//! their homes, `mcp add`/`remove`), `wiring`, `anchor`, `files`, `service_step`, `manifest`,
//! `undo`, `tty`, `verdict`, `finish`), [`mcp`] (the stdio relay to the hosted MCP endpoint,
//! `message`), and [`cli`] (the one clap definition, shared by `main.rs`, `agentchat completions`,
//! `agentchat man` and the tests).
//!
//! **Apart**, [`sim`]: the local AgentChat server (imports [`core`] and [`sys`] only): REST, the
//! socket, MCP, the `/_sim/` control API, sign-up, restarts, budgets and its clock. It is a server,
//! not a listener.
//!
//! **Apart**, [`simulate`]: the simulator (`scripts/simulate`, `examples/simulate.rs`): the real
//! [`core::host`] and [`core::listener`] against [`sim`]'s store on a virtual clock, judged by
//! [`client`] and converted by [`listen::driver::convert`] as the daemon's are, with its invariants
//! (`checks`). Nothing else imports it, and the binary never links it.

pub mod cli;
pub mod client;
pub mod config;
pub use agentchat_core as core;
// The demo and the sim build JSON objects and set their fields by index (serde_json's `IndexMut`
// panics only on a value that is not an object); neither is the daemon.
pub mod dashboard;
#[allow(clippy::indexing_slicing)]
pub mod demo;
pub mod doctor;
pub mod listen;
pub mod log_events;
pub mod mcp;
pub mod runs;
pub mod runtime;
pub mod service;
pub mod setup;
#[allow(clippy::indexing_slicing)]
pub mod sim;
pub mod simulate;
pub mod status;
pub mod sys;

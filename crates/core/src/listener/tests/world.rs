//! A small world for the listener's own tests: one agent `@bob` on a server the test scripts.
//! Every effect is answered at once but a run, which ends `run_ms` after it starts and (by
//! default) answers every card on the tray; time moves only when the test says.

use super::super::*;
use crate::policy::{Ledger, OffsetTable, Policy};
use crate::runtime_kind::RuntimeKind;
use crate::texts::Texts;
use crate::tray::Tray;
use serde_json::{Value, json};
use std::collections::VecDeque;

/// A run the world saw start.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    pub cycle: u64,
    pub reasons: Vec<String>,
    pub at: u64,
}

pub struct World {
    pub l: Listener,
    pub now: Now,
    /// The server's cards, by conversation id, newest last.
    pub cards: Vec<(String, Value)>,
    pub runs: Vec<Run>,
    pub acked: usize,
    pub ended: bool,
    /// Every effect, as a word, for replay checks.
    pub trace: Vec<String>,
    conn: Option<u64>,
    next_msg: u64,
    /// Answers due later: (when, input).
    later: VecDeque<(u64, Input)>,
    statuses: Vec<Status>,
    /// Every history line the listener asked to write, in order.
    pub records: Vec<crate::history::Record>,
    /// What the policy last asked to keep besides runs (`Effect::SavePolicyMemory`).
    pub memory: Option<crate::policy::Memory>,
    run_ms: u64,
    /// Answers for the next tray reads, before the tray itself.
    pub tray_errors: VecDeque<TrayError>,
    /// The server's pending invites: (id, inviter).
    pub invites: Vec<(String, String)>,
    /// What `hello.ok` accepts.
    pub capabilities: Vec<&'static str>,
    /// The invites dismissed.
    pub dismissed: Vec<String>,
    /// Whether a run answers the cards it saw.
    pub runs_answer: bool,
    /// How a run ends, and what a check of the runtime says.
    pub run_outcome: RunOutcome,
    pub check: Result<String, String>,
    /// The tray shows at most this many cards (newest first), `truncated` past it.
    pub limit: usize,
    /// Tray reads asked for.
    pub tray_reads: usize,
    /// The tray answers 503 until then (monotonic ms).
    pub tray_down_until: u64,
    /// What a run reports at its end (cost, tokens).
    pub run_report: crate::run_report::RunReport,
    /// Another agent that answers every run of ours in `bot.0` as `bot.1`, `bot.2` ms after
    /// the run ended: two agents answering each other.
    pub bot: Option<(String, String, u64)>,
    /// The bot's answers due (monotonic ms).
    bot_due: VecDeque<u64>,
}

impl World {
    /// Unix ms of an RFC 3339 time.
    pub fn wall(rfc3339: &str) -> i64 {
        let t = humantime::parse_rfc3339(rfc3339).expect("a time");
        i64::try_from(crate::time::ms(
            t.duration_since(std::time::UNIX_EPOCH).expect("after 1970"),
        ))
        .expect("in range")
    }

    /// `@bob` connected at `start` (UTC) with `policy` as `[listen.policy]`.
    pub fn new(start: &str, policy: &str) -> World {
        World::with_ledger(start, policy, Ledger::new())
    }

    pub fn with_ledger(start: &str, policy: &str, ledger: Ledger) -> World {
        World::build(start, policy, ledger, |_| {})
    }

    /// A world changed by `prepare` before the listener starts.
    pub fn build(
        start: &str,
        policy: &str,
        ledger: Ledger,
        prepare: impl FnOnce(&mut World),
    ) -> World {
        World::build_as(start, policy, ledger, RuntimeKind::Script, prepare)
    }

    /// [`World::build`] with the listener's runtime (`runtime`).
    pub fn build_as(
        start: &str,
        policy: &str,
        ledger: Ledger,
        runtime: RuntimeKind,
        prepare: impl FnOnce(&mut World),
    ) -> World {
        let now = Now::at(0, World::wall(start));
        let policy = Policy::from_toml(toml::from_str(policy).expect("toml"), "listen.policy")
            .expect("a policy");
        let cfg = ListenerConfig {
            profile: "default".into(),
            api_base: "http://127.0.0.1:9".into(),
            runtime,
            key_source: "env".into(),
            quiet_window: Duration::from_millis(300),
            max_delay: Duration::from_secs(2),
            // No heartbeats in this world: the watchdog never drops the socket unasked.
            idle_timeout: Duration::from_secs(7 * 24 * 3600),
            kill_grace: Duration::from_secs(2),
            scale: 1.0,
            policy,
            zone: OffsetTable::new(0, vec![]),
            notify_status: false,
            pid: 1,
            state_dir: "/state".into(),
        };
        let restored = Restored {
            ledger,
            invites: Default::default(),
        };
        let l = Listener::new(cfg, restored, 7, Arc::new(Unobserved), now);
        let mut w = World {
            l,
            now,
            cards: Vec::new(),
            runs: Vec::new(),
            acked: 0,
            ended: false,
            trace: Vec::new(),
            conn: None,
            next_msg: 0,
            later: VecDeque::new(),
            statuses: Vec::new(),
            records: Vec::new(),
            memory: None,
            run_ms: 500,
            tray_errors: VecDeque::new(),
            invites: Vec::new(),
            capabilities: vec!["ack", "heartbeat", "rewake"],
            dismissed: Vec::new(),
            runs_answer: true,
            run_outcome: RunOutcome::Completed,
            check: Ok("logged in".into()),
            limit: 50,
            tray_reads: 0,
            tray_down_until: 0,
            run_report: Default::default(),
            bot: None,
            bot_due: VecDeque::new(),
        };
        prepare(&mut w);
        w.pump();
        // Connected, and the connect's cycle is over.
        w.run_for(1_000);
        assert!(w.conn.is_some(), "connected: {:?}", w.trace);
        w
    }

    pub fn input(&mut self, input: Input) {
        self.l.handle(self.now, input);
        self.pump();
    }

    /// The last status written.
    pub fn status(&self) -> Status {
        self.statuses.last().cloned().unwrap_or_default()
    }

    /// The ledger a restart builds from the history written so far.
    pub fn ledger(&self) -> Ledger {
        let mut file = Vec::new();
        for r in &self.records {
            file.extend_from_slice(r.line().as_bytes());
            file.push(b'\n');
        }
        let parsed = crate::history::parse(&file);
        let mut ledger = crate::history::ledger(&parsed.records, &OffsetTable::new(0, vec![]));
        if let Some(m) = &self.memory {
            ledger.remember(m.clone());
        }
        ledger
    }

    /// A message from `sender` in `conv`: its card on the tray, and its `message.new` pushed.
    pub fn message(&mut self, conv: &str, sender: &str) {
        self.message_muted(conv, sender, false);
    }

    /// The same in a conversation that is `muted` or not.
    pub fn message_muted(&mut self, conv: &str, sender: &str, muted: bool) {
        self.next_msg += 1;
        let id = format!("msg_{}", self.next_msg);
        let at = crate::time::rfc3339_ms(self.now.wall_ms);
        let card = json!({
            "conversation_id": conv, "type": "direct",
            "counterparty": {"handle": sender, "display_name": "X"},
            "relationship": "established", "you_owe_reply": true, "mentioned_you": false,
            "unread": 1, "oldest_unread_at": at, "newest_unread_at": at,
            "last_sender": sender, "last_message_id": id, "last_message_at": at,
            "your_last_message_at": null, "pace": {"last_60s": 1, "last_10m": 1},
            "preview": {"message_id": id, "sender": sender, "text": "hi", "at": at},
            "your_last_decision": null, "muted": muted, "reminder": null
        });
        self.cards.retain(|(c, _)| c != conv);
        self.cards.push((conv.to_string(), card));
        let frame = json!({"type": "message.new", "payload": {
            "id": id, "conversation_id": conv, "sender": sender, "type": "text",
            "content": {"text": "hi"}
        }})
        .to_string();
        if let Some(conn) = self.conn {
            self.input(Input::Burst {
                conn,
                frames: vec![InFrame::Text(frame)],
                lost: None,
            });
        }
    }

    /// The connection open now.
    pub fn connection(&self) -> Option<u64> {
        self.conn
    }

    /// The connection drops under the listener.
    pub fn drop_socket(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.input(Input::ConnLost {
                conn,
                lost: Lost::Ended,
            });
        }
    }

    fn tray(&self) -> Tray {
        let mut cards: Vec<Value> = self.cards.iter().map(|(_, c)| c.clone()).collect();
        cards.reverse();
        let truncated = cards.len() > self.limit;
        cards.truncate(self.limit);
        let invites: Vec<Value> = self
            .invites
            .iter()
            .map(|(id, by)| json!({"invite_id": id, "invited_by": by, "group": {"id": format!("grp_{id}")}}))
            .collect();
        let v = json!({
            "version": 1, "you": "@bob", "question": "q", "categories": [],
            "conversations": cards, "deferred": 0, "truncated": truncated,
            "invites": invites, "invites_truncated": false, "waited_ms": null
        });
        Tray::parse(v.to_string().as_bytes()).expect("a tray")
    }

    /// Moves the clock `ms` on, stepping through every deadline and due answer on the way.
    pub fn run_for(&mut self, ms: u64) {
        let until = self.now.mono_ms + ms;
        loop {
            let next_later = self.later.iter().map(|(t, _)| *t).min();
            let next_bot = self.bot_due.iter().copied().min();
            let next = [self.l.next_deadline(), next_later, next_bot]
                .into_iter()
                .flatten()
                .min()
                .filter(|t| *t <= until);
            let Some(t) = next else {
                break;
            };
            self.set_time(t.max(self.now.mono_ms));
            if let Some(i) = self.bot_due.iter().position(|at| *at <= self.now.mono_ms) {
                self.bot_due.remove(i);
                if let Some((conv, who, _)) = self.bot.clone() {
                    self.message(&conv, &who);
                }
            } else if let Some(i) = self
                .later
                .iter()
                .position(|(at, _)| *at <= self.now.mono_ms)
            {
                let (_, input) = self.later.remove(i).expect("there");
                self.input(input);
            } else {
                self.l.tick(self.now);
                self.pump();
            }
        }
        self.set_time(until);
    }

    /// The wall clock is set by `delta_ms` (back when negative); the monotonic one goes on.
    pub fn set_wall_by(&mut self, delta_ms: i64) {
        self.now = Now::at(self.now.mono_ms, self.now.wall_ms + delta_ms);
    }

    fn set_time(&mut self, mono: u64) {
        let d = mono.saturating_sub(self.now.mono_ms);
        self.now = Now::at(mono, self.now.wall_ms + d as i64);
    }

    /// Answers every effect asked for.
    pub fn pump(&mut self) {
        while let Some(e) = self.l.poll_effect() {
            let word = format!("{e:?}");
            self.trace.push(format!(
                "{} {}",
                self.now.mono_ms,
                word.chars().take(60).collect::<String>()
            ));
            let answer = match e {
                Effect::FetchMe { req } => Some(Input::Me {
                    req,
                    result: Ok("bob".into()),
                }),
                Effect::AskPacer => Some(Input::Paced),
                Effect::Dial { conn } => {
                    self.conn = Some(conn);
                    self.l.handle(
                        self.now,
                        Input::Dialed {
                            conn,
                            result: Ok(()),
                        },
                    );
                    Some(Input::Burst {
                        conn,
                        frames: vec![InFrame::Text(
                            json!({"type": "hello.ok", "capabilities": self.capabilities})
                                .to_string(),
                        )],
                        lost: None,
                    })
                }
                Effect::SendAcks { conn, ids } => {
                    self.acked += ids.len();
                    Some(Input::AcksSent {
                        conn,
                        result: Ok(ids.len()),
                    })
                }
                Effect::CloseSocket { conn } => {
                    self.conn = None;
                    Some(Input::Closed { conn })
                }
                Effect::DropSocket { .. } => {
                    self.conn = None;
                    None
                }
                Effect::TakeAgentLock { .. } => Some(Input::AgentLock {
                    taken: true,
                    holder: None,
                }),
                Effect::ReadTray { cycle } => {
                    self.tray_reads += 1;
                    let result = match self.tray_errors.pop_front() {
                        Some(e) => Err(e),
                        None if self.now.mono_ms < self.tray_down_until => Err(TrayError {
                            kind: TrayErrorKind::Transient,
                            detail: "HTTP 503".into(),
                        }),
                        None => Ok(self.tray()),
                    };
                    Some(Input::Tray { cycle, result })
                }
                Effect::FetchTexts { req, .. } => Some(Input::Texts {
                    req,
                    result: Ok(LoadedTexts {
                        texts: Arc::new(
                            Texts::parse(include_bytes!(
                                "../../../../../conformance/texts.sample.json"
                            ))
                            .expect("texts"),
                        ),
                        runtime: "generic",
                        source: crate::status::TextsSource::Server,
                        at_ms: self.now.wall_ms,
                    }),
                }),
                Effect::CheckRuntime { .. } => Some(Input::RuntimeChecked {
                    result: self.check.clone(),
                    binary: Some(1),
                }),
                Effect::StatRuntimeBinary { cycle } => Some(Input::RuntimeBinary {
                    cycle,
                    stamp: Some(1),
                }),
                Effect::AskSlot { cycle } => Some(Input::Slot {
                    cycle,
                    slot: Slot::Granted { waited_ms: 0 },
                }),
                Effect::StartRun(order) => {
                    self.runs.push(Run {
                        cycle: order.cycle,
                        reasons: order.reasons.clone(),
                        at: self.now.mono_ms,
                    });
                    self.l.handle(
                        self.now,
                        Input::RunStarted {
                            cycle: order.cycle,
                            log: "run.log".into(),
                        },
                    );
                    // The run answers every card it saw (invites it leaves alone); a refused one
                    // answers nothing.
                    let refused = matches!(self.run_outcome, RunOutcome::Unusable(_));
                    if self.runs_answer && !refused {
                        self.cards.clear();
                    }
                    if let Some((_, _, after)) = &self.bot
                        && !refused
                    {
                        self.bot_due
                            .push_back(self.now.mono_ms + self.run_ms + after);
                    }
                    self.later.push_back((
                        self.now.mono_ms + self.run_ms,
                        Input::RunEnded {
                            cycle: order.cycle,
                            end: RunEnd {
                                started: true,
                                outcome: self.run_outcome.clone(),
                                report: self.run_report,
                                duration_ms: self.run_ms,
                                exit: Default::default(),
                                binary: None,
                            },
                        },
                    ));
                    None
                }
                Effect::DismissInvite { cycle, invite_id } => {
                    self.invites.retain(|(id, _)| *id != invite_id);
                    self.dismissed.push(invite_id.clone());
                    Some(Input::Dismissed {
                        cycle,
                        invite_id,
                        result: Dismissal::Dismissed,
                    })
                }
                Effect::SavePolicyMemory(l) => {
                    self.memory = Some(l.memory());
                    None
                }
                Effect::Record(r) => {
                    self.records.push(*r);
                    None
                }
                Effect::WriteStatus(s) => {
                    self.statuses.push(*s);
                    Some(Input::StatusWritten { result: Ok(()) })
                }
                Effect::Ended(_) => {
                    self.ended = true;
                    None
                }
                Effect::Probe { .. }
                | Effect::ReadKey
                | Effect::ReleaseSlot
                | Effect::CancelRun { .. }
                | Effect::SaveInvites(_)
                | Effect::TouchStatus
                | Effect::Notify(_)
                | Effect::Ready => None,
            };
            if let Some(a) = answer {
                self.l.handle(self.now, a);
            }
        }
    }
}

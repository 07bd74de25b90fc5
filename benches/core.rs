//! Throughput of the pure core on the listener's hot paths: frames through the engine, tray and
//! texts parsing, the coalescer, a run's output read for its report, and the run policy's gate.
//! Prints numbers; asserts nothing about speed.
//!
//! `cargo bench --bench core` measures (`-- WORDS`: only the workloads whose name holds one);
//! under `cargo test` (no `--bench` flag) it runs each workload once as a smoke check so the
//! harness cannot rot.

// A benchmark may unwrap, panic and index: Cargo.toml denies those (restriction lints) in the program only.
#![allow(clippy::restriction)]

use agentchat::core::coalescer::Coalescer;
use agentchat::core::engine::Engine;
use agentchat::core::policy::{self, FixedOffset, Ledger, MAX_RUNS, Policy};
use agentchat::core::tray::Tray;
use std::hint::black_box;
use std::time::Instant;

fn message_frame(i: usize) -> String {
    format!(
        r#"{{"type":"message.new","payload":{{"id":"msg_{i:016}","conversation_id":"conv_Hn4sK0pLq8RzT2vW","sender":"example-scout","client_msg_id":"c{i}","seq":{i},"type":"text","content":{{"text":"hello there, this is message number {i} with some body text"}},"metadata":{{}},"status":"stored","created_at":"2026-11-08T09:12:41.902Z","delivered_at":null,"read_at":null}}}}"#
    )
}

fn tray_json(cards: usize) -> String {
    let card = |i: usize| {
        format!(
            r#"{{"conversation_id":"conv_{i:016}","type":"direct","counterparty":{{"handle":"@peer{i}","display_name":"Peer"}},"relationship":"established","you_owe_reply":true,"mentioned_you":false,"unread":2,"oldest_unread_at":"2026-11-03T09:10:00.000Z","newest_unread_at":"2026-11-03T09:12:41.902Z","last_sender":"@peer{i}","last_message_id":"msg_{i:016}","last_message_at":"2026-11-03T09:12:41.902Z","your_last_message_at":null,"pace":{{"last_60s":1,"last_10m":2}},"preview":{{"message_id":"msg_{i:016}","sender":"@peer{i}","text":"Could you share which tokenizer your relay uses?","at":"2026-11-03T09:12:41.902Z"}},"your_last_decision":null,"muted":false,"reminder":null}}"#
        )
    };
    let cards: Vec<String> = (0..cards).map(card).collect();
    format!(
        r#"{{"version":1,"you":"@example-relay","question":"For each conversation decide ONE thing","categories":["open_request","other"],"conversations":[{}],"deferred":0,"truncated":false,"invites":[],"invites_truncated":false,"waited_ms":null}}"#,
        cards.join(",")
    )
}

fn measure(name: &str, iterations: usize, unit: &str, mut f: impl FnMut(usize)) {
    // `cargo bench --bench core -- WORDS`: only the workloads whose name holds one of the words.
    let words: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    if !words.is_empty() && !words.iter().any(|w| name.contains(w.as_str())) {
        return;
    }
    let start = Instant::now();
    for i in 0..iterations {
        f(i);
    }
    let elapsed = start.elapsed();
    if iterations == 1 {
        // A smoke run under `cargo test`: one pass proves the workload still runs; no numbers.
        println!("{name:<40} ran once (smoke check; `cargo bench --bench core` measures)");
        return;
    }
    let per = elapsed.as_nanos() as f64 / iterations as f64;
    let rate = iterations as f64 / elapsed.as_secs_f64();
    println!("{name:<40} {iterations:>9} {unit}  {per:>10.1} ns/{unit}  {rate:>12.0} {unit}/s");
}

fn main() {
    let measuring = std::env::args().any(|a| a == "--bench");
    let n = |full: usize| if measuring { full } else { 1 };

    let frames: Vec<String> = (0..10_000).map(message_frame).collect();
    let mut engine = Engine::new("@example-relay", 4096);
    measure("engine: message.new (new ids)", n(200_000), "frame", |i| {
        black_box(engine.on_text(&frames[i % frames.len()]));
    });
    let dup = message_frame(7);
    measure(
        "engine: message.new (duplicate)",
        n(200_000),
        "frame",
        |_| {
            black_box(engine.on_text(&dup));
        },
    );
    let heartbeat = r#"{"type":"heartbeat","payload":{"at":"2026-11-08T09:13:30.000Z"}}"#;
    measure("engine: heartbeat", n(500_000), "frame", |_| {
        black_box(engine.on_text(heartbeat));
    });

    for cards in [1usize, 20, 50] {
        let body = tray_json(cards);
        measure(
            &format!("tray: parse {cards} cards ({} B)", body.len()),
            n(20_000),
            "tray",
            |_| {
                black_box(Tray::parse(body.as_bytes()).ok());
            },
        );
    }

    let mut coalescer = Coalescer::new(3_000, 15_000);
    let mut now = 0u64;
    measure(
        "coalescer: wake + due + start/end",
        n(1_000_000),
        "wake",
        |i| {
            now += 7;
            coalescer.wake(black_box(now));
            if coalescer.due().is_some_and(|due| due <= now)
                && coalescer.try_start(now)
                && i % 3 == 0
            {
                coalescer.end(now);
            }
            if black_box(coalescer.is_running()) {
                coalescer.end(now);
            }
        },
    );

    // A run's stdout read for its own report as the supervisor reads it, in 64 KiB chunks: the
    // recorded Claude Code turn (12 KB of stream-json), repeated to 1 MiB per pass.
    let turn = std::fs::read(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/conformance/run-report.claude-code.jsonl"
    ))
    .unwrap();
    let output: Vec<u8> = turn.iter().copied().cycle().take(1 << 20).collect();
    measure(
        "run_report: claude stream-json, 1 MiB",
        n(200),
        "MiB",
        |_| {
            let mut lines = agentchat::core::run_report::Lines::new(
                agentchat::core::runtime_kind::RuntimeKind::ClaudeCode,
            );
            for chunk in output.chunks(64 * 1024) {
                lines.push(chunk);
            }
            lines.finish();
            black_box(lines.report());
        },
    );

    // The run policy's `gate` over a full tray with the loop guard's worst-case ledger (issue 26):
    // MAX_RUNS runs within a 24 h guard, each remembering 50 conversations, run `i` those from
    // `i` to `i + 49` of 200, so each card was on about a quarter of the runs' trays.
    let utc = FixedOffset(0);
    let guard: toml::Table =
        toml::from_str(r#"loop_guard = { runs = 6, within = "24h" }"#).unwrap();
    let guarded = Policy::from_toml(guard, "listen.policy").unwrap();
    let mut ledger = Ledger::new();
    let first_ms = 1_795_000_000_000i64;
    for i in 0..MAX_RUNS {
        let seen = (0..50)
            .map(|j| format!("conv_{:016}", (i + j) % 200))
            .collect();
        ledger.started(first_ms + i as i64 * 20_000, seen, &utc);
    }
    let now_ms = first_ms + MAX_RUNS as i64 * 20_000;
    let full = Tray::parse(tray_json(50).as_bytes()).unwrap();
    let heard = policy::Heard::default();
    measure(
        "policy: observe and gate, 50 cards, full loop ledger",
        n(20),
        "gate",
        |_| {
            policy::observe(&guarded, &full, &mut ledger, black_box(now_ms));
            black_box(policy::gate(
                &guarded,
                &full,
                &ledger,
                &heard,
                black_box(now_ms),
                &utc,
            ));
        },
    );

    // Issue 38 item 7: a ledger file far past MAX_RUNS (560,000 runs, about 16 MB, under the
    // 16 MiB read cap) read back and cut to MAX_RUNS at the first prune, as the listener starts;
    // before, the cut took one run from the front of a vector at a time (11 minutes here).
    // A smoke run reads a file just past the cap: the same path, a fraction of the time.
    let in_file = if measuring {
        560_000
    } else {
        MAX_RUNS as i64 + 10
    };
    let runs: Vec<String> = (0..in_file)
        .map(|i| format!(r#"{{"started_ms":{}}}"#, first_ms + i))
        .collect();
    let file = format!(r#"{{"runs":[{}]}}"#, runs.join(","));
    if measuring {
        println!("ledger file: {} bytes", file.len());
    }
    measure(
        "ledger: read back and cut, 560,000 runs",
        n(3),
        "ledger",
        |_| {
            let mut l: Ledger = serde_json::from_str(&file).unwrap();
            l.prune(first_ms + 600_000, 0, &utc);
            assert_eq!(l.runs().len(), MAX_RUNS);
            black_box(l);
        },
    );
    let mut full_ledger = Ledger::new();
    for i in 0..MAX_RUNS as i64 {
        full_ledger.started(first_ms + i, vec!["conv_a".into()], &utc);
    }
    measure(
        "ledger: a run starts on a full ledger",
        n(2000),
        "run",
        |i| {
            full_ledger.started(now_ms + i as i64, vec!["conv_a".into()], &utc);
        },
    );
    history(&n, now_ms);
}

/// The run history's costs (issue 35): a run's line appended as the driver appends it (open,
/// one `write`, close; a compaction every few thousand lines included), a full file compacted,
/// and a listener's start reading a full file back into its ledger.
fn history(n: &dyn Fn(usize) -> usize, now_ms: i64) {
    use agentchat::core::history::{self, Kind, MAX_LINES, Outcome, Record};
    use agentchat::listen::history::{Book, FILE};
    let utc = FixedOffset(0);
    let run = |i: usize| {
        let mut r = Record::new(
            format!("c{:x}-{:04x}", now_ms + i as i64, i % 65536),
            Kind::Run,
            "default",
            now_ms - 86_400_000 + i as i64 * 10_000,
            Outcome::Completed,
        );
        r.reason = "message".into();
        r.senders = vec!["@alice".into(), "@bob".into()];
        r.cards = 2;
        r.duration_ms = Some(41_000);
        r.cost_usd = Some(0.04);
        r.tokens = Some(12_000);
        r.log = Some(format!(
            "/home/u/.local/state/agentchat/default/runs/run-{i}.log"
        ));
        r.conversations = vec!["conv_Hn4sK0pLq8RzT2vW".into(), "conv_Zx1".into()];
        r
    };
    let dir = tempfile::tempdir().unwrap();
    let state = agentchat::listen::state_dir::StateDir::at(dir.path());
    let (mut book, _) = Book::open(&state, &utc, now_ms);
    let line = run(0).line();
    measure(
        &format!("history: append a run's line ({} B)", line.len() + 1),
        n(20_000),
        "line",
        |i| {
            book.append(&run(i), &utc).unwrap();
        },
    );
    let full: Vec<Record> = (0..MAX_LINES).map(run).collect();
    let mut text = String::new();
    for r in &full {
        text.push_str(&r.line());
        text.push('\n');
    }
    measure(
        &format!(
            "history: compact {MAX_LINES} lines ({} KiB)",
            text.len() / 1024
        ),
        n(20),
        "file",
        |_| {
            let kept = history::compact(history::parse(text.as_bytes()).records, &utc);
            let out: String = kept.iter().map(|r| r.line() + "\n").collect();
            black_box(out);
        },
    );
    let path = state.path(FILE);
    measure(
        &format!("history: a start reads {MAX_LINES} lines into the ledger"),
        n(20),
        "start",
        |_| {
            std::fs::write(&path, &text).unwrap();
            black_box(Book::open(&state, &utc, now_ms));
        },
    );
}

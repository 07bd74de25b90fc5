//! What a run costs (issue 26), through the real `agentchat listen` with the pinned real CLIs
//! under the scripted model server (which reports usage on every answer): the CLI's own report,
//! as the CLI printed it into the run log (Claude Code's final `result` event, Codex's
//! `turn.completed`), is what the run log's summary line, the `run_end` line and the metrics
//! counters say. The expected numbers are read from the CLI's own event, never hard-coded: Claude
//! Code prices the run from its model name and the usage. `max_cost_per_run_usd` reaches Claude
//! Code as its own budget and ends a run that spends past it.

use crate::common::eventually_async;
use crate::model_server::sim::Sim;
use crate::model_server::{Mode, ModelServer};
use crate::runtimes_listen::{Listener, Rt};
use serde_json::Value;

/// The peer's message: read by the run, never by the listener's own log.
const PEER_TEXT: &str = "How much does an answer cost? (peer text 41c9)";

/// The `[listen]` lines every test here adds: the metrics endpoint on a free loopback port.
const METRICS: &str = "metrics_addr = \"127.0.0.1:0\"";

/// Starts the listener for `rt` with `config` added to its `[listen]` and `[listen.claude]`
/// tables, has a peer write,
/// and waits for the cycle to end with `outcome`. The sim and the model server must outlive the
/// listener, so they are handed back with it.
async fn one_run(rt: Rt, config: [&str; 2], outcome: &str) -> (Sim, ModelServer, Listener) {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::Normal).await;
    let listener = Listener::start_configured(rt, &sim, &model, "120s", &rt.bin(), 0.02, config);
    sim.peer_sends(PEER_TEXT).await;
    let ended = eventually_async(150, || async {
        listener.status()["last_cycle"]["outcome"] == outcome
    })
    .await;
    assert!(ended, "no {outcome} run\n{}", listener.explain());
    assert!(
        !listener.log().contains(PEER_TEXT),
        "message text is in the listener's log"
    );
    (sim, model, listener)
}

/// The run log the status names.
fn run_log(l: &Listener) -> String {
    let path = l.status()["last_cycle"]["run_log"]
        .as_str()
        .map(String::from)
        .expect("the status names the run log");
    std::fs::read_to_string(&path).unwrap()
}

/// The last event of type `kind` the CLI printed into its run log.
fn printed(log: &str, kind: &str) -> Value {
    log.lines()
        .rev()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .find(|v| v["type"] == kind)
        .unwrap_or_else(|| panic!("no {kind} event in the run log:\n{log}"))
}

/// The run log's summary of the report: what follows `run reported: ` on the listener's line.
fn summary(log: &str) -> Option<String> {
    log.lines()
        .filter(|l| l.starts_with("=== "))
        .find_map(|l| l.split_once(" run reported: ").map(|(_, s)| s.to_string()))
}

/// A field of a JSON log line, at its top or under `fields`.
fn field<'a>(line: &'a Value, name: &str) -> &'a Value {
    match &line[name] {
        Value::Null => &line["fields"][name],
        v => v,
    }
}

/// The metrics page from the listener's endpoint.
async fn metrics_page(l: &Listener) -> String {
    let serving = l.events("metrics_serving");
    let addr = serving
        .first()
        .map(|s| field(s, "addr").as_str().unwrap_or_default().to_string())
        .unwrap_or_else(|| panic!("no metrics_serving line\n{}", l.explain()));
    reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// The value of the one sample of `name` whose labels include each of `labels` (`k="v"`).
fn sample(page: &str, name: &str, labels: &[&str]) -> Option<f64> {
    let hits: Vec<f64> = page
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse().ok())
        .collect();
    assert!(hits.len() <= 1, "{name} {labels:?}: {hits:?}\n{page}");
    hits.first().copied()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_code_runs_own_cost_and_tokens_reach_its_run_log_run_end_metrics_and_todays_usage()
{
    let (_sim, _model, listener) = one_run(Rt::Claude, [METRICS, ""], "completed").await;
    let log = run_log(&listener);
    let result = printed(&log, "result");
    let cost = result["total_cost_usd"]
        .as_f64()
        .expect("the CLI reports a cost");
    let u = &result["usage"];
    let n = |k: &str| u[k].as_u64().unwrap_or(0);
    let input = n("input_tokens") + n("cache_creation_input_tokens") + n("cache_read_input_tokens");
    let output = n("output_tokens");
    // The scripted model reports usage, and Claude Code prices it by its own model name.
    assert!(cost > 0.0 && input > 0 && output > 0, "{result}");

    let said = summary(&log).unwrap_or_else(|| panic!("no summary line:\n{log}"));
    let said_cost: f64 = said
        .strip_prefix("cost $")
        .and_then(|s| s.split(',').next())
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(said_cost, cost, "{said}");
    assert!(
        said.contains(&format!("tokens {} ({input} in, ", input + output))
            && said.ends_with(&format!(" {output} out)")),
        "{said} (result event: {result})"
    );

    let run_end = listener.events("run_end");
    let run_end = run_end.last().expect("a run_end line");
    assert_eq!(field(run_end, "cost_usd").as_f64(), Some(cost), "{run_end}");
    assert_eq!(
        field(run_end, "tokens").as_u64(),
        Some(input + output),
        "{run_end}"
    );

    let page = metrics_page(&listener).await;
    let rt = "runtime=\"claude-code\"";
    assert_eq!(
        sample(&page, "agentchat_run_cost_usd_total", &[rt]),
        Some(cost),
        "{page}"
    );
    let tokens = |kind: &str| {
        sample(
            &page,
            "agentchat_run_tokens_total",
            &[rt, &format!("kind=\"{kind}\"")],
        )
    };
    assert_eq!(tokens("input"), Some(input as f64), "{page}");
    assert_eq!(tokens("output"), Some(output as f64), "{page}");

    // The run policy's ledger counts the same report: status.json's spending today, which
    // `max_cost_per_day_usd` is held against (issue 26).
    let today = listener.status()["usage"]["today"].clone();
    assert_eq!(today["runs"], 1, "{today}");
    assert_eq!(today["cost_usd"].as_f64(), Some(cost), "{today}");
    assert_eq!(today["tokens"].as_u64(), Some(input + output), "{today}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_codex_runs_tokens_are_recorded_from_turn_completed_and_no_cost_is_invented() {
    let (_sim, _model, listener) = one_run(Rt::Codex, [METRICS, ""], "completed").await;
    let log = run_log(&listener);
    let turn = printed(&log, "turn.completed");
    let input = turn["usage"]["input_tokens"].as_u64().unwrap();
    let output = turn["usage"]["output_tokens"].as_u64().unwrap();
    assert!(input > 0 && output > 0, "{turn}");

    let said = summary(&log).unwrap_or_else(|| panic!("no summary line:\n{log}"));
    assert!(
        said.starts_with(&format!("tokens {} ({input} in, ", input + output)),
        "{said} (turn.completed: {turn})"
    );
    assert!(!said.contains("cost"), "{said}");

    let run_end = listener.events("run_end");
    let run_end = run_end.last().expect("a run_end line");
    assert_eq!(
        field(run_end, "tokens").as_u64(),
        Some(input + output),
        "{run_end}"
    );
    assert!(field(run_end, "cost_usd").is_null(), "{run_end}");

    let page = metrics_page(&listener).await;
    let rt = "runtime=\"codex\"";
    assert_eq!(
        sample(&page, "agentchat_run_cost_usd_total", &[rt]),
        None,
        "{page}"
    );
    let tokens = |kind: &str| {
        sample(
            &page,
            "agentchat_run_tokens_total",
            &[rt, &format!("kind=\"{kind}\"")],
        )
    };
    assert_eq!(tokens("input"), Some(input as f64), "{page}");
    assert_eq!(tokens("output"), Some(output as f64), "{page}");
}

/// A budget below what the first model answer costs: Claude Code itself ends the run, failed,
/// and what it spent is still recorded (its `usage` is all zeros then; `modelUsage` has the
/// counts, which is what the listener reads). The user's own, larger `--max-budget-usd` in
/// `extra_args` does not count: the policy's comes after it, and the last one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_cost_per_run_usd_is_claude_codes_own_budget_over_the_users_and_ends_a_run_that_spends_past_it()
 {
    let listen = format!("{METRICS}\npolicy = {{ max_cost_per_run_usd = 0.00001 }}");
    let users_own = r#"extra_args = ["--max-budget-usd", "100"]"#;
    let (_sim, model, listener) = one_run(Rt::Claude, [&listen, users_own], "failed").await;
    let log = run_log(&listener);
    let result = printed(&log, "result");
    assert_eq!(result["subtype"], "error_max_budget_usd", "{result}");
    let failure = listener.status()["last_cycle"]["failure"].clone();
    assert!(
        failure
            .as_str()
            .unwrap_or_default()
            .contains("error_max_budget_usd"),
        "{failure}"
    );
    // Stopped after its first model call, before any tool ran.
    let steps = model.journal().steps;
    assert!(
        !steps.iter().any(|s| s == "call agentchat_decide"),
        "the run went on past its budget: {steps:?}"
    );
    let cost = result["total_cost_usd"].as_f64().unwrap();
    assert!(cost > 0.00001, "{result}");
    let (input, output) =
        result["modelUsage"]
            .as_object()
            .unwrap()
            .values()
            .fold((0, 0), |(i, o), m| {
                let n = |k: &str| m[k].as_u64().unwrap_or(0);
                (
                    i + n("inputTokens")
                        + n("cacheReadInputTokens")
                        + n("cacheCreationInputTokens"),
                    o + n("outputTokens"),
                )
            });
    assert!(input > 0, "{result}");
    let said = summary(&log).unwrap_or_else(|| panic!("no summary line:\n{log}"));
    assert!(
        said.starts_with(&format!("cost ${cost}, tokens {} ", input + output)),
        "{said}"
    );
    let page = metrics_page(&listener).await;
    let rt = "runtime=\"claude-code\"";
    assert_eq!(
        sample(&page, "agentchat_run_cost_usd_total", &[rt]),
        Some(cost),
        "{page}"
    );
}

/// Issue 38 item 6: a Claude Code run cut by the time limit before its `result` (the model
/// answers its first call, then never again) counts the tokens it streamed and, its cost
/// unreported, its per-run budget as an estimate: `max_cost_per_day_usd` holds the next run.
/// Before, such a run added $0 and 0 tokens, and a day of them never met the cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_run_cut_by_the_time_limit_counts_its_streamed_tokens_and_its_budget() {
    let sim = Sim::start().await;
    let model = ModelServer::start(Mode::HangAfter(1)).await;
    let policy = "\n[listen.policy]\nmax_cost_per_run_usd = 0.4\nmax_cost_per_day_usd = 0.3";
    let listener = Listener::start_configured(
        Rt::Claude,
        &sim,
        &model,
        "20s",
        &Rt::Claude.bin(),
        0.02,
        [policy, ""],
    );
    sim.peer_sends(PEER_TEXT).await;
    let failed = eventually_async(120, || async {
        listener.status()["last_cycle"]["outcome"] == "failed"
    })
    .await;
    assert!(failed, "the run was not cut\n{}", listener.explain());
    let today = listener.status()["usage"]["today"].clone();
    assert_eq!(today["runs"], 1, "{today}");
    assert_eq!(today["cost_usd"].as_f64(), Some(0.4), "{today}");
    assert_eq!(today["estimated"], 1, "{today}");
    assert!(
        today["tokens"].as_u64() > Some(0),
        "streamed tokens: {today}"
    );
    sim.peer_sends("And now?").await;
    let held = eventually_async(30, || async {
        listener.status()["held"]["key"] == "max_cost_per_day_usd"
    })
    .await;
    assert!(
        held,
        "the day's cost cap did not hold\n{}",
        listener.explain()
    );
    assert_eq!(listener.status()["usage"]["today"]["runs"], 1);
}

//! The demo's agent, run by the listener as its `script` runtime (`agentchat demo-agent`). It does
//! what a well-behaved single run does (contract 4): read the tray, open each waiting conversation,
//! send a short answer, record `reply` through the newest message it read, and leave invites alone
//! (the listener's invite rule deals with an invite two runs left pending). It prints one line per
//! step to stdout, which the listener keeps in the run's log; never message text.

use super::rest::{Rest, list_of, str_at};
use anyhow::Context;
use secrecy::SecretString;
use serde_json::{Value, json};
use std::io::Read;

/// The prefix of every line the agent prints, so the demo can pick them out of a run log: the
/// same as the example agent's (`examples/agent.py`), which the demo runs with `--script`.
pub const LINE_PREFIX: &str = "agent: ";

fn say(line: &str) {
    println!("{LINE_PREFIX}{line}");
}

/// Test hook: when set, the agent fails at once (exit 3), so the demo's failure path can be tested.
pub const FAIL_ENV: &str = "AGENTCHAT_DEMO_AGENT_FAIL";

pub async fn run() -> anyhow::Result<i32> {
    if std::env::var_os(FAIL_ENV).is_some() {
        eprintln!("{LINE_PREFIX}failing on purpose ({FAIL_ENV} is set)");
        return Ok(3);
    }
    let base = std::env::var("AGENTCHAT_API_BASE")
        .context("AGENTCHAT_API_BASE is not set (the demo agent runs under agentchat listen)")?;
    let key = std::env::var("AGENTCHAT_API_KEY")
        .context("AGENTCHAT_API_KEY is not set (the listener gives it to script runs)")?;
    let cycle = std::env::var("AGENTCHAT_CYCLE_ID").unwrap_or_else(|_| "manual".into());
    let kind = std::env::var("AGENTCHAT_RUN_KIND").unwrap_or_else(|_| "wake".into());

    // The prompt is for a model; this agent has none, but it reads stdin to the end like one would.
    let mut prompt = Vec::new();
    // Blocking is fine: this process does nothing else until the prompt is in.
    std::io::stdin()
        .read_to_end(&mut prompt)
        .context("cannot read the prompt on stdin")?;
    say(&format!(
        "woke for cycle {cycle} ({kind} run), prompt of {} bytes",
        prompt.len()
    ));

    let rest = Rest::new(&base, Some(SecretString::from(key)))?;
    let tray = rest.get("/v1/inbox?invites=1&limit=50").await?;
    let you = str_at(&tray, &["you"]).unwrap_or("").to_string();
    let category = pick_category(&tray);
    let cards = list_of(&tray, "conversations");
    say(&format!(
        "tray of {you}: {} conversation(s), {} invite(s)",
        cards.len(),
        list_of(&tray, "invites").len()
    ));

    for card in cards {
        let Some(id) = str_at(card, &["conversation_id"]) else {
            continue;
        };
        if card.get("muted").and_then(Value::as_bool) == Some(true) {
            say(&format!("{id} is muted: left alone"));
            continue;
        }
        answer(&rest, card, id, &cycle, &category).await?;
    }
    for invite in list_of(&tray, "invites") {
        say(&format!(
            "left invite {} to group {} alone",
            str_at(invite, &["invite_id"]).unwrap_or("?"),
            str_at(invite, &["group", "name"]).unwrap_or("?")
        ));
    }
    say("done");
    Ok(0)
}

/// `open_request` when the server offers it, else the first category it lists.
fn pick_category(tray: &Value) -> String {
    let cats: Vec<&str> = list_of(tray, "categories")
        .into_iter()
        .filter_map(Value::as_str)
        .collect();
    if cats.contains(&"open_request") {
        "open_request".into()
    } else {
        cats.first().copied().unwrap_or("other").to_string()
    }
}

/// Opens the conversation, sends the answer, then records `reply` through the newest message read.
async fn answer(
    rest: &Rest,
    card: &Value,
    id: &str,
    cycle: &str,
    category: &str,
) -> anyhow::Result<()> {
    // The id goes into URL paths: percent-encoded, so it stays in its one segment.
    let seg = crate::client::path_segment(id)
        .with_context(|| format!("the conversation id {id:?} cannot be put into a URL path"))?;
    let history = match rest.get(&format!("/v1/conversations/{seg}/messages")).await {
        Ok(v) => v,
        // The hosted API's older spelling of the same read.
        Err(e) if e.status() == Some(404) => rest.get(&format!("/v1/messages/{seg}")).await?,
        Err(e) => return Err(e.into()),
    };
    let messages = list_of(&history, "messages");
    let newest = newest_id(&messages).or_else(|| {
        str_at(card, &["preview", "message_id"])
            .or_else(|| str_at(card, &["last_message_id"]))
            .map(str::to_string)
    });
    say(&format!("opened {id}: {} message(s) read", messages.len()));

    let text = "Thanks, got it. (An answer from the agentchat demo agent.)";
    let mut body = json!({
        "client_msg_id": format!("demo-{cycle}-{id}"),
        "content": { "text": text },
    });
    match (
        str_at(card, &["type"]),
        str_at(card, &["counterparty", "handle"]),
    ) {
        (Some("direct"), Some(peer)) => body["to"] = json!(peer),
        _ => body["conversation_id"] = json!(id),
    }
    let sent = rest.post("/v1/messages", &body).await?;
    let sent_id = str_at(&sent, &["id"])
        .or_else(|| str_at(&sent, &["message", "id"]))
        .unwrap_or("?");
    say(&format!("sent answer {sent_id} in {id}"));

    let mut decision = json!({ "decision": "reply", "category": category });
    if let Some(n) = &newest {
        decision["through_message_id"] = json!(n);
    }
    rest.post(&format!("/v1/conversations/{seg}/decisions"), &decision)
        .await?;
    say(&format!(
        "recorded reply in {id} through {}",
        newest.as_deref().unwrap_or("now")
    ));
    Ok(())
}

/// The newest message: highest `seq`, else latest `created_at`, else the last listed.
fn newest_id(messages: &[&Value]) -> Option<String> {
    let best = messages
        .iter()
        .max_by(|a, b| {
            let sa = a.get("seq").and_then(Value::as_i64);
            let sb = b.get("seq").and_then(Value::as_i64);
            sa.cmp(&sb).then_with(|| {
                str_at(a, &["created_at"])
                    .unwrap_or("")
                    .cmp(str_at(b, &["created_at"]).unwrap_or(""))
            })
        })
        .or(messages.last())?;
    str_at(best, &["id"]).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_is_by_seq_then_time_in_any_order() {
        let a = json!({"id": "m1", "seq": 1, "created_at": "2026-01-01T00:00:01Z"});
        let b = json!({"id": "m3", "seq": 3, "created_at": "2026-01-01T00:00:03Z"});
        let c = json!({"id": "m2", "seq": 2, "created_at": "2026-01-01T00:00:02Z"});
        assert_eq!(newest_id(&[&b, &a, &c]).as_deref(), Some("m3"));
        let d = json!({"id": "t1", "created_at": "2026-01-01T00:00:09Z"});
        let e = json!({"id": "t0", "created_at": "2026-01-01T00:00:01Z"});
        assert_eq!(newest_id(&[&d, &e]).as_deref(), Some("t1"));
        assert_eq!(newest_id(&[]), None);
    }

    #[test]
    fn category_prefers_open_request() {
        assert_eq!(
            pick_category(&json!({"categories": ["new_info", "open_request"]})),
            "open_request"
        );
        assert_eq!(pick_category(&json!({"categories": ["x"]})), "x");
        assert_eq!(pick_category(&json!({})), "other");
    }
}

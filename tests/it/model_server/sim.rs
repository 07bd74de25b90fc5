//! The in-process `agentchat sim` for the runtime tests: a peer's send and the server's view.

use serde_json::{Value, json};

pub struct Sim {
    pub handle: agentchat::sim::SimHandle,
    /// `(handle, key)` of the agent under test (@alice).
    pub me: (String, String),
    /// `(handle, key)` of the peer (@bob).
    pub peer: (String, String),
    client: reqwest::Client,
}

impl Sim {
    pub async fn start() -> Sim {
        agentchat::sys::tls::install_crypto_provider();
        let handle = agentchat::sim::start(agentchat::sim::SimConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            time_scale: 1.0,
            seed_demo: true,
        })
        .await
        .unwrap();
        let me = handle.seeded[0].clone();
        let peer = handle.seeded[1].clone();
        Sim {
            handle,
            me,
            peer,
            client: reqwest::Client::new(),
        }
    }

    pub fn api_base(&self) -> &str {
        &self.handle.api_base
    }

    /// The peer sends `text` to the agent under test; returns the message.
    pub async fn peer_sends(&self, text: &str) -> Value {
        let r = self
            .client
            .post(format!("{}/v1/messages", self.api_base()))
            .bearer_auth(&self.peer.1)
            .json(&json!({"to": self.me.0, "content": {"text": text}}))
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "peer send failed: {}", r.status());
        r.json().await.unwrap()
    }

    /// The server's view of the agent under test (`/_sim/agents/{h}/state`).
    pub async fn my_state(&self) -> Value {
        self.client
            .get(format!(
                "{}/_sim/agents/{}/state",
                self.api_base(),
                self.me.0.trim_start_matches('@')
            ))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    }
}

/// Asserts the scripted agent's work is on the server: the answer sent into the peer's
/// conversation, a `reply` verdict recorded after it through the newest message read, and no card
/// left on the tray.
pub fn assert_answered(state: &Value, conversation_id: &str) {
    let sent = state["sent"].as_array().cloned().unwrap_or_default();
    let answer = sent
        .iter()
        .find(|m| m["conversation_id"] == conversation_id && m["text"] == super::REPLY_TEXT)
        .unwrap_or_else(|| panic!("no answer sent into {conversation_id}: {state:#}"));
    let verdicts = state["verdicts"].as_array().cloned().unwrap_or_default();
    let reply = verdicts
        .iter()
        .find(|v| v["conversation_id"] == conversation_id && v["decision"] == "reply")
        .unwrap_or_else(|| panic!("no reply verdict for {conversation_id}: {state:#}"));
    let sent_at = answer["created_at"].as_str().unwrap();
    let decided_at = reply["at"].as_str().unwrap();
    assert!(
        decided_at >= sent_at,
        "reply recorded ({decided_at}) before the answer ({sent_at})"
    );
    assert!(reply["through_message_id"].is_string(), "{reply}");
    let cards = state["tray"]["conversations"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        cards
            .iter()
            .all(|c| c["conversation_id"] != conversation_id),
        "the card is still on the tray: {:#}",
        state["tray"]
    );
}

//! One inbound text frame through the parser and the frame engine (contract 3.4): never a panic,
//! never an ack or a wake for a malformed frame, an ack only for a `message.new` with that id, and
//! the same `message.new` a second time is acked again but never wakes again.
#![no_main]

use agentchat::core::engine::Engine;
use agentchat::core::frames::ServerFrame;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The socket hands the engine text frames only (a binary frame is skipped before it).
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = ServerFrame::parse(text);
    let mut engine = Engine::new("@me", 8);
    let first = engine.on_text(text);
    if first.malformed.is_some() {
        assert!(first.ack.is_none() && first.wake.is_none());
    }
    if let Some(id) = &first.ack {
        assert!(matches!(&parsed, Ok(ServerFrame::MessageNew(m)) if &m.id == id));
    }
    if first.wake.is_some() {
        assert!(parsed.is_ok());
    }
    let again = engine.on_text(text);
    assert_eq!(again.ack, first.ack, "a repeated message is acked again");
    if matches!(parsed, Ok(ServerFrame::MessageNew(_))) {
        assert!(again.wake.is_none(), "a repeated message never wakes again");
    }
});

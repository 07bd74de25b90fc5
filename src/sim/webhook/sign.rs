//! How one wake is framed for each dialect of contract 3.5 (`agentchat`, `standard-webhooks`,
//! `claude-code`, `openclaw`, `hermes`, `poke`): the body and headers of the POST. The contract
//! leaves the exact framing to the OpenAPI document and the per-runtime recipes, which this
//! project does not have; docs/decisions.md ("Local server") says what the sim chose and why.
//! What holds for every dialect: the body is signed the way the official SDKs verify
//! (`verify_webhook` of `agentchatme`: `X-AgentChat-Signature: t=<unix>,v1=<hex HMAC-SHA256 of
//! "<t>.<body>">` with the subscription's secret), so one receiver checks any of them.

use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The dialects, as a subscription names them.
pub const DIALECTS: [&str; 6] = [
    "agentchat",
    "standard-webhooks",
    "claude-code",
    "openclaw",
    "hermes",
    "poke",
];

/// The Anthropic routine trigger's beta header (`shared/reference/peer-systems.md`).
const ROUTINE_BETA: &str = "experimental-cc-routine-2026-04-01";

/// One framed wake: the headers (besides `Content-Type: application/json`) and the body.
#[derive(Debug, Clone, PartialEq)]
pub struct Framed {
    pub headers: Vec<(&'static str, String)>,
    pub body: String,
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
pub fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > block.len() {
        for (b, k) in block.iter_mut().zip(Sha256::digest(key)) {
            *b = k;
        }
    } else {
        for (b, k) in block.iter_mut().zip(key) {
            *b = *k;
        }
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk.first().copied().unwrap_or(0),
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(B64[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Standard base64 (padding optional); `None` for anything else.
pub fn unbase64(text: &str) -> Option<Vec<u8>> {
    let text = text.trim_end_matches('=');
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in text.bytes() {
        let v = B64.iter().position(|&x| x == c)? as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

/// The Standard Webhooks signing key: a `whsec_` secret's base64 bytes, else the secret's own.
pub fn standard_key(secret: &str) -> Vec<u8> {
    secret
        .strip_prefix("whsec_")
        .and_then(unbase64)
        .unwrap_or_else(|| secret.as_bytes().to_vec())
}

/// The SDKs' signature header value for `body` at Unix second `t`.
pub fn agentchat_signature(secret: &str, t: u64, body: &str) -> String {
    let mac = hmac_sha256(secret.as_bytes(), format!("{t}.{body}").as_bytes());
    format!("t={t},v1={}", hex(&mac))
}

/// Frames `payload` (the v1 payload) for `dialect`, with `text` the words a text-taking dialect
/// carries, signed with `secret` at Unix second `t`, attempt `attempt` of its cycle.
pub fn frame(
    dialect: &str,
    payload: &Value,
    text: &str,
    secret: &str,
    t: u64,
    attempt: u32,
) -> Framed {
    let delivery = payload["delivery_id"].as_str().unwrap_or("").to_string();
    let with_text = || {
        let mut p = payload.clone();
        p["text"] = json!(text);
        p.to_string()
    };
    let body = match dialect {
        "claude-code" => json!({"text": text}).to_string(),
        "openclaw" => json!({"text": text, "mode": "now"}).to_string(),
        "hermes" | "poke" => with_text(),
        // `agentchat`, `standard-webhooks`: the payload itself.
        _ => payload.to_string(),
    };
    let mut headers = vec![
        (
            "x-agentchat-signature",
            agentchat_signature(secret, t, &body),
        ),
        ("x-agentchat-event", "agentchat.wake".to_string()),
        ("x-agentchat-delivery", delivery.clone()),
        ("x-agentchat-attempt", attempt.to_string()),
    ];
    match dialect {
        "standard-webhooks" => {
            let signed = format!("{delivery}.{t}.{body}");
            let mac = hmac_sha256(&standard_key(secret), signed.as_bytes());
            headers.push(("webhook-id", delivery));
            headers.push(("webhook-timestamp", t.to_string()));
            headers.push(("webhook-signature", format!("v1,{}", base64(&mac))));
        }
        "claude-code" => {
            headers.push(("authorization", format!("Bearer {secret}")));
            headers.push(("anthropic-beta", ROUTINE_BETA.to_string()));
            headers.push(("anthropic-version", "2023-06-01".to_string()));
        }
        "openclaw" | "poke" => headers.push(("authorization", format!("Bearer {secret}"))),
        "hermes" => {
            let mac = hmac_sha256(secret.as_bytes(), body.as_bytes());
            headers.push(("x-webhook-signature", hex(&mac)));
        }
        _ => {}
    }
    Framed { headers, body }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hmac_sha256_matches_rfc_4231_case_2() {
        let mac = hmac_sha256(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(
            hex(&mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        // A key longer than a block is hashed first (RFC 4231 case 6).
        let mac = hmac_sha256(
            &[0xaa; 131],
            b"Test Using Larger Than Block-Size Key - Hash Key First",
        );
        assert_eq!(
            hex(&mac),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn base64_round_trips_and_pads() {
        for (raw, enc) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw), enc);
            assert_eq!(unbase64(enc).unwrap(), raw);
        }
        assert!(unbase64("not*base64").is_none());
        assert_eq!(standard_key("whsec_Zm9v"), b"foo");
        assert_eq!(standard_key("plain"), b"plain");
    }

    #[test]
    fn every_dialect_carries_the_sdk_signature_over_its_own_body() {
        let p = json!({"type": "agentchat.wake", "delivery_id": "d-1"});
        for d in DIALECTS {
            let f = frame(d, &p, "words", "s3cret", 1_800_000_000, 2);
            let sig = &f.headers[0];
            assert_eq!(sig.0, "x-agentchat-signature");
            assert_eq!(sig.1, agentchat_signature("s3cret", 1_800_000_000, &f.body));
            assert!(
                f.headers.contains(&("x-agentchat-attempt", "2".into())),
                "{d}"
            );
        }
    }
}

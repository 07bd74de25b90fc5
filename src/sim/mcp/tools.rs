//! The hosted tools' names, descriptions and input schemas (`tools/list`).

use serde_json::{Value, json};

pub fn tools() -> Value {
    let categories = super::super::store::CATEGORIES;
    json!([
        {
            "name": "agentchat_inbox",
            "description": "Read your AgentChat tray: one card per conversation with unread messages, newest first, plus pending group invites and the one question to answer for each card (reply, dismiss or defer). Reading marks nothing read.",
            "inputSchema": {"type": "object", "properties": {
                "wait_ms": {"type": "integer", "minimum": 0, "maximum": 50000, "description": "Hold the read up to this long until something arrives."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "At most this many cards (default 20)."}
            }, "additionalProperties": false}
        },
        {
            "name": "agentchat_wait",
            "description": "Wait for new messages: returns them (bodies included, oldest first) as soon as one arrives, or an empty list when wait_ms ends. What it returns is delivered to you, not read. Use it while a conversation is live; the tray (agentchat_inbox) says what still needs an answer.",
            "inputSchema": {"type": "object", "properties": {
                "wait_ms": {"type": "integer", "minimum": 0, "maximum": 50000, "description": "Hold the read up to this long until a message arrives."},
                "limit": {"type": "integer", "minimum": 1, "maximum": 500, "description": "At most this many messages (default 100)."}
            }, "additionalProperties": false}
        },
        {
            "name": "agentchat_get_conversation",
            "description": "Open one conversation: its messages, oldest first. Marks them delivered, not read.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string", "description": "conv_… or grp_…"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 200}
            }, "required": ["conversation_id"], "additionalProperties": false}
        },
        {
            "name": "agentchat_send_message",
            "description": "Send a message to an agent (to: its handle) or into a conversation (conversation_id). Sending marks nothing read; record the reply verdict after it.",
            "inputSchema": {"type": "object", "properties": {
                "to": {"type": "string", "description": "A handle, with or without @."},
                "conversation_id": {"type": "string"},
                "text": {"type": "string"},
                "client_msg_id": {"type": "string", "description": "Idempotency key for this send."}
            }, "required": ["text"], "additionalProperties": false}
        },
        {
            "name": "agentchat_decide",
            "description": "Record your verdict on a tray card: reply (after you sent the answer), dismiss, or defer. Pass the card's preview.message_id (or last_message_id) as through_message_id.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string"},
                "decision": {"type": "string", "enum": ["reply", "dismiss", "defer"]},
                "category": {"type": "string", "enum": categories},
                "through_message_id": {"type": "string"}
            }, "required": ["conversation_id", "decision", "category"], "additionalProperties": false}
        },
        {
            "name": "agentchat_mark_read",
            "description": "Mark a conversation read through a message (through_message_id; without it, through now) without recording a verdict. Senders get read receipts.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string"},
                "through_message_id": {"type": "string"}
            }, "required": ["conversation_id"], "additionalProperties": false}
        },
        {
            "name": "agentchat_mute",
            "description": "Mute a conversation (conversation_id) or an agent (handle): it never wakes you, and its cards stay on the tray flagged muted. For 8h, 1d, 3d or forever; off unmutes.",
            "inputSchema": {"type": "object", "properties": {
                "conversation_id": {"type": "string"},
                "handle": {"type": "string", "description": "A handle, with or without @."},
                "duration": {"type": "string", "enum": super::super::mutes::DURATIONS}
            }, "required": ["duration"], "additionalProperties": false}
        },
        {
            "name": "agentchat_list_conversations",
            "description": "List your conversations, newest first: type, the other agent or the group, the newest message's time, unread count, muted. No message bodies.",
            "inputSchema": {"type": "object", "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "At most this many (default 20)."}
            }, "additionalProperties": false}
        },
        {
            "name": "agentchat_respond_to_invite",
            "description": "Answer a pending group invite: accept, decline, or dismiss (leave it pending quietly).",
            "inputSchema": {"type": "object", "properties": {
                "invite_id": {"type": "string"},
                "response": {"type": "string", "enum": ["accept", "decline", "dismiss"]}
            }, "required": ["invite_id", "response"], "additionalProperties": false}
        },
        {
            "name": "agentchat_get_my_status",
            "description": "Your own account: handle, status, whether your owner paused you, and your wake webhook (never its secret).",
            "inputSchema": {"type": "object", "properties": {}, "additionalProperties": false}
        },
        {
            "name": "agentchat_list_inbox",
            "description": "Deprecated: use agentchat_list_conversations.",
            "inputSchema": {"type": "object", "properties": {
                "limit": {"type": "integer", "minimum": 1, "maximum": 100}
            }, "additionalProperties": false}
        },
        {
            "name": "agentchat_accept_group_invite",
            "description": "Deprecated: use agentchat_respond_to_invite with response accept.",
            "inputSchema": {"type": "object", "properties": {"invite_id": {"type": "string"}},
                            "required": ["invite_id"], "additionalProperties": false}
        },
        {
            "name": "agentchat_reject_group_invite",
            "description": "Deprecated: use agentchat_respond_to_invite with response decline.",
            "inputSchema": {"type": "object", "properties": {"invite_id": {"type": "string"}},
                            "required": ["invite_id"], "additionalProperties": false}
        }
    ])
}

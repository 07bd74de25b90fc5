#!/usr/bin/env python3
"""An agent for the listener's `script` runtime that answers through the AgentChat REST API.

`agentchat listen` runs it when something waits on the agent's tray (docs/runtimes.md, "Script"):
the served wake text on stdin, the server in AGENTCHAT_API_BASE and the agent's key in
AGENTCHAT_API_KEY. It does what a single run must (contract v1, section 4): read the tray, open
each waiting conversation, send an answer, record `reply` through the newest message it read,
and leave invites alone (the listener's invite rule deals with an invite two runs left
pending). It prints one line per step (never message text), which the listener keeps in the
run's log. Python 3 standard library only.

Use it, or start your own from it:

    agentchat setup --runtime script -- /path/to/examples/agent.py
    agentchat demo --script examples/agent.py      # the demo's loop with this agent

Replace `answer_text` with your own agent's thinking: it gets the messages of one conversation.
"""

import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

PREFIX = "agent: "
TIMEOUT = 30


def say(line):
    print(PREFIX + line, flush=True)


class Api:
    def __init__(self, base, key):
        self.base = base.rstrip("/")
        self.key = key

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Authorization", "Bearer " + self.key)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, timeout=TIMEOUT) as resp:
            raw = resp.read(4 << 20)
        return json.loads(raw) if raw else {}


def listed(value, key):
    """A list the server may send bare or under `key`."""
    if isinstance(value, list):
        return value
    if isinstance(value, dict) and isinstance(value.get(key), list):
        return value[key]
    return []


def newest(messages):
    """The newest message's id: highest `seq`, else latest `created_at`, else the last one."""
    if not messages:
        return None
    best = max(
        enumerate(messages),
        key=lambda im: (im[1].get("seq") or -1, im[1].get("created_at") or "", im[0]),
    )[1]
    return best.get("id")


def answer_text(messages):
    return "Thanks, got it. (An answer from the agentchat example agent.)"


def answer(api, card, cycle, category):
    conv = card["conversation_id"]
    seg = urllib.parse.quote(conv, safe="")
    try:
        history = api.call("GET", "/v1/conversations/%s/messages" % seg)
    except urllib.error.HTTPError as e:
        if e.code != 404:
            raise
        history = api.call("GET", "/v1/messages/%s" % seg)  # the older spelling
    messages = listed(history, "messages")
    through = newest(messages) or (card.get("preview") or {}).get("message_id")
    say("opened %s: %d message(s) read" % (conv, len(messages)))
    body = {"client_msg_id": "example-%s-%s" % (cycle, conv), "content": {"text": answer_text(messages)}}
    peer = (card.get("counterparty") or {}).get("handle")
    if card.get("type") == "direct" and peer:
        body["to"] = peer
    else:
        body["conversation_id"] = conv
    sent = api.call("POST", "/v1/messages", body)
    sent_id = sent.get("id") or (sent.get("message") or {}).get("id") or "?"
    say("sent answer %s in %s" % (sent_id, conv))
    decision = {"decision": "reply", "category": category}
    if through:
        decision["through_message_id"] = through
    api.call("POST", "/v1/conversations/%s/decisions" % seg, decision)
    say("recorded reply in %s through %s" % (conv, through or "now"))


def main():
    base = os.environ.get("AGENTCHAT_API_BASE")
    key = os.environ.get("AGENTCHAT_API_KEY")
    if not base or not key:
        sys.stderr.write(PREFIX + "AGENTCHAT_API_BASE and AGENTCHAT_API_KEY must be set (agentchat listen sets them)\n")
        return 2
    cycle = os.environ.get("AGENTCHAT_CYCLE_ID", "manual")
    prompt = sys.stdin.read()  # the served wake text: a model would follow it
    say("woke for cycle %s (%s run), prompt of %d bytes" % (cycle, os.environ.get("AGENTCHAT_RUN_KIND", "wake"), len(prompt.encode())))
    api = Api(base, key)
    tray = api.call("GET", "/v1/inbox?invites=1&limit=50")
    cards = listed(tray, "conversations")
    invites = listed(tray, "invites")
    categories = [c for c in listed(tray, "categories") if isinstance(c, str)]
    category = "open_request" if "open_request" in categories else (categories[0] if categories else "other")
    say("tray of %s: %d conversation(s), %d invite(s)" % (tray.get("you", "?"), len(cards), len(invites)))
    for card in cards:
        if not card.get("conversation_id"):
            continue
        if card.get("muted"):
            say("%s is muted: left alone" % card["conversation_id"])
            continue
        answer(api, card, cycle, category)
    for invite in invites:
        say("left invite %s to group %s alone" % (invite.get("invite_id", "?"), (invite.get("group") or {}).get("name", "?")))
    say("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())

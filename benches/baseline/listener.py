#!/usr/bin/env python3
"""The baseline for `scripts/bench`: a plain listener on the official Python SDK (`agentchatme`).

It does the job `agentchat listen` does, in the most direct way the SDK allows, so the harness can
measure both side by side on the same sim:

- `RealtimeClient` on the socket: it acks every `message.new` (the `ack` capability) after our
  handler returns;
- every connect, `message.new`, `wake` and `group.invite.received` is a wake;
- wakes are coalesced: a cycle starts once `--quiet` seconds passed since the last wake, or
  `--max-delay` seconds since the first one it serves, and one cycle runs at a time (wakes during
  it start the next);
- a cycle reads the tray (`GET /v1/inbox?invites=1&limit=50`, one keep-alive HTTP client), runs
  the command with the served `wake_instruction` (a card waits) or `invite_prompt` (only invites
  wait) on stdin, in its own process group, output appended to a log, and waits for it to end.

The texts are read once at start (`GET /v1/texts?runtime=generic`). No per-frame logging.

Usage: listener.py --api-base http://127.0.0.1:PORT --log FILE [--quiet S] [--max-delay S] -- CMD...
The key comes from AGENTCHAT_API_KEY. SIGTERM or SIGINT stops it (exit 0).
"""
import argparse
import asyncio
import os
import signal
import sys

from agentchatme import AsyncAgentChatClient, RealtimeClient


class Coalescer:
    """Quiet window and max delay over wakes; at most one cycle at a time."""

    def __init__(self, quiet: float, max_delay: float):
        self.quiet, self.max_delay = quiet, max_delay
        self.first = self.last = None  # loop times of the first and last wake not yet served
        self.changed = asyncio.Event()

    def wake(self) -> None:
        now = asyncio.get_running_loop().time()
        self.first = self.first if self.first is not None else now
        self.last = now
        self.changed.set()

    async def next_cycle(self) -> None:
        """Returns when a cycle is due, and marks the wakes so far as served."""
        loop = asyncio.get_running_loop()
        while True:
            self.changed.clear()
            if self.first is None:
                await self.changed.wait()
                continue
            due = min(self.last + self.quiet, self.first + self.max_delay)
            if due <= loop.time():
                self.first = self.last = None
                return
            try:
                await asyncio.wait_for(self.changed.wait(), due - loop.time())
            except asyncio.TimeoutError:
                pass


async def run_cycle(api: AsyncAgentChatClient, texts: dict, command: list, log) -> None:
    # SDK 1.1.1 has no tray method; its transport is used as is (auth, retries, keep-alive).
    tray = await api._get("/v1/inbox?invites=1&limit=50")
    cards = tray.get("conversations") or []
    if tray.get("truncated") or any(not c.get("muted") for c in cards):
        prompt, kind = texts.get("wake_instruction"), "wake"
    elif tray.get("invites"):
        prompt, kind = texts.get("invite_prompt"), "invite"
    else:
        return
    if not prompt:
        return
    env = dict(os.environ, AGENTCHAT_RUN_KIND=kind)
    env.pop("AGENTCHAT_API_KEY", None)
    proc = await asyncio.create_subprocess_exec(
        *command, stdin=asyncio.subprocess.PIPE, stdout=log, stderr=log,
        env=env, start_new_session=True)
    await proc.communicate(prompt.encode())


async def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--api-base", required=True)
    ap.add_argument("--log", required=True, help="the runs' output is appended here")
    ap.add_argument("--quiet", type=float, default=3.0)
    ap.add_argument("--max-delay", type=float, default=15.0)
    ap.add_argument("command", nargs="+")
    args = ap.parse_args()
    key = os.environ["AGENTCHAT_API_KEY"]

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    api = AsyncAgentChatClient(api_key=key, base_url=args.api_base)
    texts = await api._get("/v1/texts?runtime=generic")
    coalescer = Coalescer(args.quiet, args.max_delay)
    rt = RealtimeClient(api_key=key, base_url=args.api_base.replace("http", "ws", 1))
    rt.on_connect(coalescer.wake)
    for event in ("message.new", "wake", "group.invite.received"):
        rt.on(event, lambda _frame: coalescer.wake())
    await rt.connect()

    async def cycles():
        with open(args.log, "ab") as log:
            while True:
                await coalescer.next_cycle()
                try:
                    await run_cycle(api, texts, args.command, log)
                except Exception as e:  # a failed cycle ends; the next wake starts another
                    print(f"baseline: cycle failed: {e!r}", file=sys.stderr, flush=True)

    worker = asyncio.create_task(cycles())
    await stop.wait()
    worker.cancel()
    await rt.disconnect()
    await api.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))

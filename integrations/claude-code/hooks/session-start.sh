#!/bin/sh
# SessionStart hook of the AgentChat plugin: one line when the profile's listener is down or
# unusable, nothing when it is fine. It only reads (`agentchat status --json`, which reads the
# listener's status file); it never starts, stops or installs anything, and it always exits 0 so a
# session never fails because of it. The fields it reads are documented in docs/integrating.md.
#
# AGENTCHAT_BIN   the agentchat binary (default: `agentchat` on PATH)
# AGENTCHAT_PROFILE, AGENTCHAT_CONFIG, AGENTCHAT_STATE_DIR   passed on to `agentchat status`
bin="${AGENTCHAT_BIN:-agentchat}"
if ! command -v "$bin" >/dev/null 2>&1; then
  echo "AgentChat: \`$bin\` is not installed or not on PATH, so no AgentChat listener runs here (see the agentchat README, Install)."
  exit 0
fi
out=$("$bin" status --json 2>/dev/null)
rc=$?
# `problem` is one line without quotes or backslashes (docs/integrating.md), so sed can take it.
problem=$(printf '%s\n' "$out" | sed -n 's/^  "problem": "\(.*\)",\{0,1\}$/\1/p' | head -n 1)
if [ -n "$problem" ]; then
  echo "AgentChat: $problem"
elif [ "$rc" -ne 0 ] && [ "$rc" -ne 3 ]; then
  # Exit 1: the config or the status file cannot be read; status said why on stderr.
  why=$("$bin" status 2>&1 >/dev/null | head -n 1)
  echo "AgentChat: cannot tell whether the listener runs: ${why:-agentchat status exited $rc}"
fi
exit 0

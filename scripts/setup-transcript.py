"""The session in docs/setup-transcript.md, run for real: the binary given (argv[1]) in a fresh
home, against a real `agentchat sim`, each interactive command in a pseudo-terminal with its
answers typed, on a machine without systemd. Prints the transcript (paths shortened).

    cargo build && python3 scripts/setup-transcript.py target/debug/agentchat "$PWD"
"""
import json, os, pty, select, subprocess, sys, tempfile, time, urllib.request, signal

BIN = sys.argv[1]
REPO = sys.argv[2]
root = tempfile.mkdtemp(prefix="first-hour-")
home = os.path.join(root, "home")
os.makedirs(home)
os.makedirs(root + "/bin")
os.symlink(BIN, root + "/bin/agentchat")
env = {
    "HOME": home, "PATH": root + "/bin:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "TERM": "xterm",
    "XDG_CONFIG_HOME": home + "/.config", "XDG_STATE_HOME": home + "/.local/state",
    "XDG_RUNTIME_DIR": root + "/run",
}
os.makedirs(root + "/run")
out = []

def show(text):
    out.append(text.replace(root + "/home", "~").replace(REPO, "/src/agentchat")
               .replace(root + "/bin/", "/usr/local/bin/").replace(root, "/tmp/session"))

sim = subprocess.Popen([BIN, "sim"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
api = json.loads(sim.stdout.readline())["api_base"]

def outbox():
    return json.load(urllib.request.urlopen(api + "/_sim/outbox"))

def in_pty(cmdline, steps):
    show("$ " + cmdline + "\n")
    pid, fd = pty.fork()
    if pid == 0:
        os.execve("/bin/sh", ["/bin/sh", "-c", cmdline], env)
    seen = b""
    def read_some(t):
        nonlocal seen
        r, _, _ = select.select([fd], [], [], t)
        if not r:
            return False
        try:
            d = os.read(fd, 4096)
        except OSError:
            return None
        if not d:
            return None
        seen += d
        return True
    for prompt, answer in steps:
        deadline = time.time() + 120
        while prompt.encode() not in seen:
            if time.time() > deadline or read_some(1) is None:
                raise SystemExit("no prompt %r in:\n%s" % (prompt, seen.decode()))
        i = seen.index(prompt.encode()) + len(prompt)
        show(seen[:i].decode(errors="replace").replace("\r\n", "\n"))
        seen = seen[i:]
        if answer == "^C":
            time.sleep(0.3)
            os.write(fd, b"\x03")
            continue
        if answer == "@CODE":
            answer = outbox()[-1]["code"]
        time.sleep(0.2)
        os.write(fd, answer.encode() + b"\r")
    while read_some(1) is not None:
        pass
    show(seen.decode(errors="replace").replace("\r\n", "\n"))
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    show("$ echo $?\n%d\n\n" % (128 - code if code < 0 else code))

def run(cmdline):
    show("$ " + cmdline + "\n")
    p = subprocess.run(["/bin/sh", "-c", cmdline], env=env, capture_output=True, text=True)
    show(p.stdout + p.stderr)
    show("$ echo $?\n%d\n\n" % p.returncode)

agent = REPO + "/examples/agent.py"
# 1. Sign-up, then Ctrl-C at the runtime question.
in_pty("agentchat setup", [
    ("AgentChat server [https://api.agentchat.me]: ", api),
    ("Do you have an AgentChat API key? [Y/n]: ", "n"),
    ("Lost the key of an agent you already have? [y/N]: ", ""),
    ("Email (the code goes there): ", "me@example"),
    ("Email (the code goes there): ", "me@example.com"),
    ("Handle (3-30 lowercase letters, digits, dashes): ", "first-hour"),
    ("The 6-digit code emailed to me@example.com: ", "@CODE"),
    ("Runtime (claude-code, codex or script) [script]: ", "^C"),
])
# 2. The same command again: it resumes.
in_pty("agentchat setup", [
    ("AgentChat server [%s]: " % api, ""),
    ("? [Y/n]: ", ""),
    ("Runtime (claude-code, codex or script) [script]: ", ""),
    ("The script's command (program and arguments): ", agent),
    ("Keep these bounds on runs? [Y/n]: ", ""),
    ("write the identity block? [Y/n]: ", ""),
    ("Install the always-on service for this profile? [Y/n]: ", "y"),
    ("Go ahead? [Y/n]: ", "y"),
])
# 3. No systemd here: the listener in the terminal (in the background for this session).
show("$ agentchat listen 2>listen.log &\n")
listener = subprocess.Popen(["/bin/sh", "-c", "exec " + BIN + " listen"], env=env,
                            stdout=subprocess.DEVNULL, stderr=open(root + "/listen.log", "w"))
state = home + "/.local/state/agentchat/default/status.json"
for _ in range(600):
    try:
        if json.load(open(state)).get("state") == "connected":
            break
    except Exception:
        pass
    time.sleep(0.05)
# A peer writes; the listener wakes and the example agent answers.
peer = json.load(urllib.request.urlopen(urllib.request.Request(
    api + "/_sim/agents", data=json.dumps({"handle": "carol"}).encode(), method="POST")))["api_key"]
req = urllib.request.Request(api + "/v1/messages", method="POST", data=json.dumps(
    {"to": "first-hour", "client_msg_id": "hello-1", "content": {"text": "hello, are you there?"}}).encode(),
    headers={"Authorization": "Bearer " + peer, "Content-Type": "application/json"})
urllib.request.urlopen(req)
show("$ # @carol sends @first-hour a message (curl -X POST $API/v1/messages ...)\n")
for _ in range(600):
    try:
        c = json.load(open(state)).get("last_cycle") or {}
        if c.get("outcome") == "completed":
            break
    except Exception:
        pass
    time.sleep(0.05)
run("agentchat status")
# 4. A hand edit, then setup again.
run("printf '\\n# mine: quiet at night\\n[listen.policy]\\nquiet_hours = [\"23:00-07:00\"]\\n' >> ~/.config/agentchat/config.toml")
in_pty("agentchat setup --yes --runtime script -- " + agent, [])
# 5. Undo.
in_pty("agentchat uninstall", [("Delete it too? [y/N]: ", "")])
listener.wait(timeout=40)
run("cat ~/.config/agentchat/config.toml")
run("ls ~/.config/agentchat")
sim.send_signal(signal.SIGTERM)
sim.wait()
# The terminal echoes Ctrl-C as `^C` without a line end.
sys.stdout.write("".join(out).replace("^C$ echo", "^C\n$ echo"))

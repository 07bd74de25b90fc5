#!/usr/bin/env node
// The `agentchat` command of the npm package: finds the native binary for this platform and runs
// it with the same arguments, stdio and environment, then exits as it did. The binary comes in a
// platform package (@agentchatme/agentchat-<os>-<cpu>, an optional dependency npm installs only on
// its platform), or in this package's own vendor/<target>/ when a package was built that way.
// Nothing is downloaded, at install or at run time. Layout: packaging/npm/README.md.
"use strict";

const { spawn } = require("node:child_process");
const { existsSync } = require("node:fs");
const path = require("node:path");

const TARGETS = {
  "linux-x64": "x86_64-unknown-linux-gnu",
  "linux-arm64": "aarch64-unknown-linux-gnu",
  "darwin-x64": "x86_64-apple-darwin",
  "darwin-arm64": "aarch64-apple-darwin",
};

function binaryPath() {
  const key = `${process.platform}-${process.arch}`;
  const target = TARGETS[key];
  if (!target) {
    return { error: `agentchat has no build for ${key} (it runs on ${Object.keys(TARGETS).join(", ")})` };
  }
  const candidates = [];
  try {
    const manifest = require.resolve(`@agentchatme/agentchat-${key}/package.json`);
    candidates.push(path.join(path.dirname(manifest), "bin", "agentchat"));
  } catch {
    // Not installed: try this package's own vendor dir next.
  }
  candidates.push(path.join(__dirname, "..", "vendor", target, "agentchat"));
  const found = candidates.find((p) => existsSync(p));
  if (found) {
    return { path: found };
  }
  return {
    error:
      `the agentchat binary for ${key} is missing: the package @agentchatme/agentchat-${key} ` +
      `was not installed (npm skips optional dependencies with --omit=optional or ` +
      `--no-optional); reinstall with: npm install -g @agentchatme/agentchat`,
  };
}

const found = binaryPath();
if (found.error) {
  process.stderr.write(`agentchat: ${found.error}\n`);
  process.exit(1);
}

const child = spawn(found.path, process.argv.slice(2), { stdio: "inherit" });
// The child gets the terminal's signals itself (same process group); these are for a `kill`
// aimed at this launcher only, which a service manager or a wrapper may send.
for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"]) {
  process.on(signal, () => {
    if (child.exitCode === null) child.kill(signal);
  });
}
child.on("error", (err) => {
  process.stderr.write(`agentchat: cannot start ${found.path}: ${err.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // End the same way, so a caller sees the signal and not a made-up exit code.
    process.removeAllListeners(signal);
    process.kill(process.pid, signal);
    return;
  }
  process.exit(code ?? 1);
});

//! The kernel's line around a woken run (`docs/runtimes.md`, "The kernel's line"): the paths a
//! run may read and execute, the ones it may also write, and the TCP ports it may connect to.
//! An allowlist: whatever is not named here the run cannot open, whatever its CLI's flags, its
//! user's settings or its model say. `runtime::sandbox` gathers the facts (the CLI's install,
//! the login files, the environment), `runtime::landlock` hands the plan to the kernel, and
//! `doctor` prints the same plan.

use std::path::{Path, PathBuf};

/// What a run may do beneath a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read files, list directories, execute programs.
    Read,
    /// Read and write one file in place (a login a CLI refreshes): no file can be made,
    /// removed or renamed beside it.
    ReadWriteFile,
    /// Everything: read, write, create, remove, rename.
    ReadWrite,
}

impl Access {
    pub fn word(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::ReadWriteFile => "read and write in place",
            Access::ReadWrite => "read and write",
        }
    }
}

/// One path of the plan and why it is there (said by `doctor`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathRule {
    pub path: PathBuf,
    pub access: Access,
    pub why: &'static str,
}

/// A run's confinement: nothing beyond these paths and ports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// Why the kernel leaves the run's files to another sandbox (`None`: it holds them).
    pub files_left_to: Option<&'static str>,
    pub paths: Vec<PathRule>,
    /// TCP ports the run may connect to (any address), sorted, each once.
    pub ports: Vec<u16>,
}

impl Plan {
    pub fn add(&mut self, path: impl Into<PathBuf>, access: Access, why: &'static str) {
        let path = path.into();
        if !self
            .paths
            .iter()
            .any(|r| r.path == path && r.access == access)
        {
            self.paths.push(PathRule { path, access, why });
        }
    }

    pub fn add_port(&mut self, port: u16) {
        if let Err(at) = self.ports.binary_search(&port) {
            self.ports.insert(at, port);
        }
    }

    /// The paths with `access`, in the order they were added.
    pub fn with_access(&self, access: Access) -> impl Iterator<Item = &Path> {
        self.paths
            .iter()
            .filter(move |r| r.access == access)
            .map(|r| r.path.as_path())
    }
}

/// What every program needs to start: the system's programs, libraries, configuration and
/// certificates, the process's own view in `/proc` (Landlock keeps other processes' there out of
/// reach), the name service's socket folder. Read and execute only.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/etc",
    "/opt",
    "/nix/store",
    "/proc",
    "/sys",
    "/dev",
    "/run/systemd/resolve",
];

/// The devices a program writes to (`/dev/null`, a terminal, randomness).
pub const DEVICES_WRITE: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
];

/// The system part of every plan.
pub fn system(plan: &mut Plan) {
    for p in SYSTEM_READ {
        plan.add(*p, Access::Read, "the system's programs and libraries");
    }
    for p in DEVICES_WRITE {
        plan.add(
            *p,
            Access::ReadWriteFile,
            "a device every program writes to",
        );
    }
}

/// The TCP port a URL names: its explicit port, else its scheme's (`https` 443, `http` 80).
/// A bare `host:port` (as proxies are often given) is read too. `None` for anything else.
pub fn url_port(url: &str) -> Option<u16> {
    let url = url.trim();
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (Some(s.to_ascii_lowercase()), r),
        None => (None, url),
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let port = match host_port.strip_prefix('[') {
        // `[::1]:8080`
        Some(v6) => v6.split_once("]:").map(|(_, p)| p),
        None => host_port.rsplit_once(':').map(|(_, p)| p),
    };
    if let Some(p) = port.filter(|p| !p.is_empty()) {
        return p.parse().ok();
    }
    match scheme.as_deref() {
        Some("https" | "wss") => Some(443),
        Some("http" | "ws") => Some(80),
        _ => None,
    }
}

/// The variables whose URL names a proxy a run's HTTP clients use.
pub const PROXY_VARS: &[&str] = &[
    "HTTPS_PROXY",
    "https_proxy",
    "HTTP_PROXY",
    "http_proxy",
    "ALL_PROXY",
    "all_proxy",
];

/// Where a program installed at `path` keeps the rest of itself, to be readable with it: the
/// `node_modules` folder it is in (an npm install's sibling packages), else the prefix above
/// its `bin` folder, else its folder. Never `home` or a folder above it, nor `/`: a program
/// right in the home's `bin` gets that folder alone.
pub fn install_root(path: &Path, home: Option<&Path>) -> Option<PathBuf> {
    let too_wide = |p: &Path| p.parent().is_none() || home.is_some_and(|h| h.starts_with(p));
    let parent = path.parent()?;
    let root = path
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "node_modules"))
        .or_else(|| {
            (parent.file_name().is_some_and(|n| n == "bin"))
                .then(|| parent.parent())
                .flatten()
        })
        .filter(|r| !too_wide(r))
        .unwrap_or(parent);
    (!too_wide(root)).then(|| root.to_path_buf())
}

/// The program a script's `#!` line runs (`/usr/bin/env node` gives `node`, to look up on
/// `PATH`), from the script's first bytes. `None` when it has no such line.
pub fn shebang_program(head: &[u8]) -> Option<String> {
    let line = head.strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?;
    let mut words = line.split_whitespace();
    let first = words.next()?;
    if first.ends_with("/env") {
        words.find(|w| !w.starts_with('-')).map(str::to_string)
    } else {
        Some(first.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_urls_port_is_its_own_else_its_schemes() {
        assert_eq!(url_port("http://127.0.0.1:9/mcp"), Some(9));
        assert_eq!(url_port("https://api.agentchat.me"), Some(443));
        assert_eq!(url_port("http://h/x:5"), Some(80));
        assert_eq!(url_port("http://u:p@proxy:3128"), Some(3128));
        assert_eq!(url_port("proxy.corp:8080"), Some(8080));
        assert_eq!(url_port("http://[::1]:8443/v1"), Some(8443));
        assert_eq!(url_port("https://[::1]/v1"), Some(443));
        assert_eq!(url_port("proxy.corp"), None);
        assert_eq!(url_port("http://h:notaport"), None);
    }

    #[test]
    fn an_install_root_is_its_node_modules_or_prefix_never_the_home() {
        let home = Some(Path::new("/home/u"));
        let r = |p: &str| install_root(Path::new(p), home);
        assert_eq!(
            r("/home/u/.npm/lib/node_modules/@openai/codex/bin/codex.js"),
            Some(PathBuf::from("/home/u/.npm/lib/node_modules"))
        );
        assert_eq!(
            r("/home/u/.nvm/versions/node/v22/bin/node"),
            Some(PathBuf::from("/home/u/.nvm/versions/node/v22"))
        );
        assert_eq!(r("/home/u/bin/agent"), Some(PathBuf::from("/home/u/bin")));
        assert_eq!(
            r("/home/u/.local/share/claude/versions/2.1"),
            Some(PathBuf::from("/home/u/.local/share/claude/versions"))
        );
        // A program right in the home would open all of it.
        assert_eq!(r("/home/u/agent"), None);
        assert_eq!(r("/agent"), None);
    }

    #[test]
    fn a_shebang_names_its_program() {
        assert_eq!(
            shebang_program(b"#!/usr/bin/env node\nx").as_deref(),
            Some("node")
        );
        assert_eq!(
            shebang_program(b"#!/usr/bin/env -S python3 -u\n").as_deref(),
            Some("python3")
        );
        assert_eq!(
            shebang_program(b"#!/bin/sh -e\n").as_deref(),
            Some("/bin/sh")
        );
        assert_eq!(shebang_program(b"\x7fELF"), None);
    }

    #[test]
    fn a_plan_keeps_each_path_and_port_once_ports_sorted() {
        let mut p = Plan::default();
        p.add("/w", Access::ReadWrite, "w");
        p.add("/w", Access::ReadWrite, "again");
        for port in [443, 9, 443] {
            p.add_port(port);
        }
        assert_eq!(p.paths.len(), 1);
        assert_eq!(p.ports, [9, 443]);
    }
}

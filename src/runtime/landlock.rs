//! Hands a run's [`Plan`] to the kernel: Landlock, applied in the child between fork and exec, so
//! the listener itself is never confined. The ruleset's descriptor is built before the fork (the
//! `landlock` crate allocates); the child makes only two system calls on it (`prctl` for
//! `no_new_privs`, `landlock_restrict_self`), which are async-signal-safe. A run's whole process
//! tree stays inside the line: Landlock is inherited across fork and exec and cannot be undone.
//!
//! Beyond the plan's paths and ports, every ruleset scopes signals and abstract UNIX sockets to
//! the run (Landlock ABI 6): a run cannot signal the listener or talk to another program's
//! abstract socket. No TCP port can be bound.

use crate::core::sandbox::{Access, Plan};

/// How far this kernel can confine a run, for the run log and `doctor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Landlock of this ABI version: files from 1, TCP ports from 4, scopes from 6.
    Abi(i32),
    /// No Landlock: not built in, switched off at boot, or not Linux.
    None,
}

impl Support {
    /// Whether TCP connects are confined by port.
    pub fn ports(self) -> bool {
        matches!(self, Support::Abi(v) if v >= 4)
    }

    pub fn describe(self) -> String {
        match self {
            Support::Abi(v) if v >= 6 => format!(
                "Landlock ABI {v}: files, TCP ports, signals and abstract sockets are confined"
            ),
            Support::Abi(v) if v >= 4 => {
                format!("Landlock ABI {v}: files and TCP ports are confined")
            }
            Support::Abi(v) => {
                format!("Landlock ABI {v}: files are confined, TCP ports are not (they need ABI 4)")
            }
            Support::None => "no Landlock in this kernel: a run is not confined by it".into(),
        }
    }
}

/// A ruleset ready for a child to enter: its descriptor (closed on exec).
pub struct Prepared {
    #[cfg(target_os = "linux")]
    fd: std::os::fd::OwnedFd,
    pub support: Support,
}

#[cfg(target_os = "linux")]
mod linux {
    use super::*;
    use landlock::{
        ABI, Access as _, AccessFs, AccessNet, BitFlags, NetPort, PathBeneath, PathFd, Ruleset,
        RulesetAttr, RulesetCreatedAttr, Scope,
    };
    use std::os::fd::{AsRawFd, OwnedFd};

    /// The newest ABI whose rights this module asks for; an older kernel is given what it has
    /// (the crate's best effort), a newer one confines no less.
    const ABI_ASKED: ABI = ABI::V6;

    pub fn support() -> Support {
        // `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
        // SAFETY: no pointer is passed; the call only answers a number.
        let v = unsafe {
            libc::syscall(
                libc::SYS_landlock_create_ruleset,
                std::ptr::null::<u8>(),
                0usize,
                1u32,
            )
        };
        match i32::try_from(v) {
            Ok(v) if v > 0 => Support::Abi(v),
            _ => Support::None,
        }
    }

    fn rights(access: Access, dir: bool) -> BitFlags<AccessFs> {
        let all = match access {
            Access::Read => AccessFs::from_read(ABI_ASKED),
            Access::ReadWriteFile => {
                AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate | AccessFs::IoctlDev
            }
            Access::ReadWrite => AccessFs::from_all(ABI_ASKED),
        };
        if dir {
            all
        } else {
            all & AccessFs::from_file(ABI_ASKED)
        }
    }

    pub fn prepare(plan: &Plan) -> Result<Option<Prepared>, String> {
        let support = support();
        if support == Support::None {
            return Ok(None);
        }
        let fail = |e: landlock::RulesetError| format!("cannot build the Landlock ruleset: {e}");
        let mut ruleset = Ruleset::default();
        // A line that holds files forbids mounting inside it; a plan whose files another sandbox
        // holds (Codex's shell, in bubblewrap) leaves them alone.
        let files = plan.files_left_to.is_none();
        if files {
            ruleset = ruleset
                .handle_access(AccessFs::from_all(ABI_ASKED))
                .map_err(fail)?;
        }
        if support.ports() {
            ruleset = ruleset
                .handle_access(AccessNet::from_all(ABI_ASKED))
                .map_err(fail)?;
        }
        if matches!(support, Support::Abi(v) if v >= 6) {
            ruleset = ruleset.scope(Scope::from_all(ABI_ASKED)).map_err(fail)?;
        }
        let mut created = ruleset.create().map_err(fail)?;
        for rule in plan.paths.iter().filter(|_| files) {
            // A path that is not there (a system folder this distribution lacks, a login file
            // of a login not used) gives nothing.
            let Ok(meta) = std::fs::metadata(&rule.path) else {
                continue;
            };
            let Ok(fd) = PathFd::new(&rule.path) else {
                continue;
            };
            created = created
                .add_rule(PathBeneath::new(fd, rights(rule.access, meta.is_dir())))
                .map_err(fail)?;
        }
        if support.ports() {
            for port in &plan.ports {
                created = created
                    .add_rule(NetPort::new(*port, AccessNet::ConnectTcp))
                    .map_err(fail)?;
            }
        }
        let fd: Option<OwnedFd> = created.into();
        Ok(fd.map(|fd| Prepared { fd, support }))
    }

    /// Makes the child enter the ruleset before it execs. `prepared` must outlive the spawn.
    pub fn enter_on_exec(cmd: &mut tokio::process::Command, prepared: &Prepared) {
        let fd = prepared.fd.as_raw_fd();
        // SAFETY: the closure runs in the forked child before exec and makes only
        // async-signal-safe system calls; it allocates nothing and takes no lock.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::syscall(libc::SYS_landlock_restrict_self, fd, 0u32) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

#[cfg(target_os = "linux")]
pub use linux::{enter_on_exec, prepare, support};

/// Not Linux: there is no Landlock (`docs/runtimes.md` says what still holds on macOS).
#[cfg(not(target_os = "linux"))]
pub fn support() -> Support {
    Support::None
}

#[cfg(not(target_os = "linux"))]
pub fn prepare(_plan: &Plan) -> Result<Option<Prepared>, String> {
    Ok(None)
}

#[cfg(not(target_os = "linux"))]
pub fn enter_on_exec(_cmd: &mut tokio::process::Command, _prepared: &Prepared) {}

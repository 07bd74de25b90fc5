//! How `agentchat listen` ends, as its process's exit code (docs/decisions.md, "Exit codes and
//! signals"): the one rule, so a start error, a lock held, an agent served elsewhere and a usage
//! error all get their code from the same place.

/// `sysexits.h` EX_CONFIG: the listener cannot start as configured, and starting it again will
/// not help. The systemd unit names it in `RestartPreventExitStatus`, so a bad config is one
/// failed start, not a restart loop.
pub const EX_CONFIG: i32 = 78;

/// `sysexits.h` EX_TEMPFAIL: another listener holds the profile's lock (or serves its agent), so
/// this one did nothing. Not 0, so a script can tell; the systemd unit names it in
/// `RestartPreventExitStatus` too, so the service does not restart into the same lock.
pub const EX_TEMPFAIL: i32 = 75;

/// Why the listener's process ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Stopped by a signal, switched off, or done (`--once` with nothing to do).
    Done,
    /// It cannot start as configured (a usage error included).
    Config,
    /// Another listener holds the profile's lock, or serves its agent on this machine.
    AlreadyRunning,
    /// Anything else that ended it, said on stderr (`--once`'s failures, a listener that could
    /// not be built).
    Failed,
}

/// The exit code of `exit`. `under_launchd` (our label in `XPC_SERVICE_NAME`): 78 and 75 become
/// 0, because `KeepAlive {SuccessfulExit: false}` restarts every non-zero exit, into the same
/// config or the same lock every `ThrottleInterval` (launchd/me.agentchat.listen.plist).
pub fn code(exit: Exit, under_launchd: bool) -> i32 {
    match exit {
        Exit::Done => 0,
        Exit::Failed => 1,
        Exit::Config | Exit::AlreadyRunning if under_launchd => 0,
        Exit::Config => EX_CONFIG,
        Exit::AlreadyRunning => EX_TEMPFAIL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_78_and_already_running_75_except_under_launchd_where_both_are_0() {
        assert_eq!(code(Exit::Config, false), 78);
        assert_eq!(code(Exit::AlreadyRunning, false), 75);
        assert_eq!(code(Exit::Config, true), 0);
        assert_eq!(code(Exit::AlreadyRunning, true), 0);
    }

    #[test]
    fn done_is_0_and_a_failure_1_under_any_manager() {
        for launchd in [false, true] {
            assert_eq!(code(Exit::Done, launchd), 0);
            assert_eq!(code(Exit::Failed, launchd), 1);
        }
    }
}

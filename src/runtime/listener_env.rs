//! The listener's environment, as a run's spec is drawn from it: the CLIs' homes and logins
//! (`HOME`, `CODEX_HOME`, `CLAUDE_CONFIG_DIR`), `PATH`, the proxies and the model endpoints.
//! One value handed to `runtime::prepare_in`, so a run's Codex home, login files and kernel line
//! come from the environment the listener was started with (which the run also inherits,
//! `runtime::inherited`), never from whichever process happens to build the spec.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

/// Not `Debug`: it holds whatever secrets the listener's environment holds.
#[derive(Clone, Default)]
pub struct ListenerEnv {
    vars: HashMap<OsString, OsString>,
}

impl ListenerEnv {
    /// This process's environment: the listener's own (or `doctor`'s, for the run it describes).
    pub fn of_process() -> ListenerEnv {
        Self::from_vars(std::env::vars_os())
    }

    pub fn from_vars<K: Into<OsString>, V: Into<OsString>>(
        vars: impl IntoIterator<Item = (K, V)>,
    ) -> ListenerEnv {
        ListenerEnv {
            vars: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
        }
    }

    /// A variable as it is (a search path, a folder).
    pub fn var_os(&self, name: &str) -> Option<&OsStr> {
        self.vars.get(OsStr::new(name)).map(OsString::as_os_str)
    }

    /// A variable's text; `None` when unset, empty or not UTF-8.
    pub fn var(&self, name: &str) -> Option<&str> {
        self.var_os(name)
            .and_then(OsStr::to_str)
            .filter(|v| !v.is_empty())
    }

    /// The user's home.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variable_that_is_empty_counts_as_unset_but_is_kept_as_it_is() {
        let env = ListenerEnv::from_vars([("HOME", "/h"), ("CODEX_HOME", "")]);
        assert_eq!(env.home(), Some(PathBuf::from("/h")));
        assert_eq!(env.var("CODEX_HOME"), None);
        assert_eq!(env.var_os("CODEX_HOME"), Some(OsStr::new("")));
        assert_eq!(env.var("PATH"), None);
    }
}

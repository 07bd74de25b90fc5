//! The script runtime: the configured argv, the prompt on stdin, the key in `AGENTCHAT_API_KEY`
//! unless switched off (it is the user's own program).

use super::{ListenerEnv, RunContext, RunOutcome, RunSpec, RuntimeError, common_env};
use crate::core::sandbox::Access;
use crate::sys::process::ProcessEnd;
use secrecy::ExposeSecret;
use std::path::{Path, PathBuf};

/// Builds the run: `command[0]` (a bare name is looked up on PATH now, so a missing program is a
/// clear configuration error rather than a failed run), the rest as arguments, the prompt on stdin,
/// the run's context in the environment, `ctx.workdir` as the working directory.
pub fn prepare(ctx: &RunContext<'_>, listener: &ListenerEnv) -> Result<RunSpec, RuntimeError> {
    let command = &ctx.settings.listen.command;
    let Some(first) = command.first() else {
        return Err(RuntimeError::Unusable(
            "the script runtime has no program to run: set `command` under [listen] in the config \
             (e.g. command = [\"/path/to/agent\", \"--flag\"])"
                .into(),
        ));
    };
    let program = locate(first, ctx.workdir, listener.var_os("PATH"))?;

    let mut env = common_env(ctx);
    let mut env_remove = Vec::new();
    if ctx.settings.listen.script_gets_key {
        env.push((
            "AGENTCHAT_API_KEY".into(),
            ctx.api_key.expose_secret().to_string(),
        ));
    } else {
        // The listener itself may have the key in its environment; the script must not inherit it.
        env_remove.push("AGENTCHAT_API_KEY".into());
    }

    let scratch = super::sandbox::fresh_scratch(ctx.state_dir, listener)?;
    env.extend(super::sandbox::tmp_env(&scratch));
    let args = command.get(1..).unwrap_or_default().to_vec();
    let sandbox = ctx.settings.listen.sandbox_script.then(|| {
        let mut plan = super::sandbox::base_plan(ctx, listener, &scratch);
        super::sandbox::add_program(&mut plan, &program, listener);
        // The files `command` names (`sh /path/agent.sh`), each alone.
        for arg in &args {
            let p = Path::new(arg);
            if p.is_absolute() && p.is_file() {
                plan.add(p, Access::Read, "a file `command` names");
            }
        }
        plan
    });

    Ok(RunSpec {
        program,
        args,
        env,
        env_remove,
        env_pass: ctx.settings.listen.env_pass.clone(),
        stdin: Some(ctx.prompt.as_bytes().to_vec()),
        cwd: ctx.workdir.to_path_buf(),
        runtime: crate::config::RuntimeKind::Script,
        sandbox,
        scratch: Some(scratch),
    })
}

/// Finds the program: a bare name on `path_var` (the first executable file), a relative path
/// against the run's working directory, an absolute path as is (it must exist).
pub fn locate(
    program: &str,
    workdir: &Path,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, RuntimeError> {
    if program.contains('/') {
        let p = workdir.join(program);
        // A file that is not executable is left to the run, which says so (`could not start`).
        let why = match super::agent_cli::regular_file(&p) {
            Ok(_) => return Ok(p),
            Err(why) => why,
        };
        return Err(RuntimeError::Unusable(format!(
            "the script runtime's program {} (`command` under [listen]) {why}",
            p.display()
        )));
    }
    super::agent_cli::search_path(Path::new(program), path_var).ok_or_else(|| {
        RuntimeError::Unusable(format!(
            "the script runtime's program `{program}` (`command` under [listen]) was not found \
             on PATH; give its full path"
        ))
    })
}

pub fn judge(end: &ProcessEnd) -> RunOutcome {
    match end {
        ProcessEnd::Exited(0) => RunOutcome::Completed,
        ProcessEnd::Exited(c) => RunOutcome::Failed(format!("exited with {c}")),
        ProcessEnd::Signalled(s) => RunOutcome::Failed(format!("killed by signal {s}")),
        ProcessEnd::TimedOut => RunOutcome::Failed("time limit reached".into()),
        ProcessEnd::Cancelled => RunOutcome::Failed("stopped with the listener".into()),
        ProcessEnd::SpawnFailed(e) => RunOutcome::Failed(format!("could not start: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{ConfigArgs, Settings, resolve};
    use crate::core::decision::RunKind;
    use secrecy::SecretString;
    use std::collections::HashMap;

    fn settings(toml: &str) -> Settings {
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        resolve(
            &ConfigArgs::default(),
            &env,
            Some((Path::new("/etc/agentchat/config.toml"), toml)),
        )
        .unwrap()
    }

    /// `f` of a context and an empty listener environment (the programs named by their paths).
    fn with_ctx<T>(s: &Settings, f: impl FnOnce(&RunContext<'_>, &ListenerEnv) -> T) -> T {
        let key = SecretString::from("ac_script_key".to_string());
        let reasons = vec!["message".to_string(), "invite".to_string()];
        let state = tempfile::tempdir().unwrap();
        let ctx = RunContext {
            settings: s,
            kind: RunKind::Invite,
            prompt: "Check AgentChat.",
            handle: "@alice",
            cycle_id: "c-42",
            wake_reasons: &reasons,
            api_key: &key,
            state_dir: state.path(),
            workdir: Path::new("/work/dir"),
            identity_template: None,
        };
        f(&ctx, &ListenerEnv::default())
    }

    fn env_of(spec: &RunSpec, name: &str) -> Option<String> {
        spec.env
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.clone())
    }

    #[test]
    fn an_empty_command_says_which_key_to_set() {
        let s = settings("[listen]\nruntime = \"script\"\n");
        match with_ctx(&s, prepare) {
            Err(RuntimeError::Unusable(m)) => {
                assert!(m.contains("`command` under [listen]"), "{m}")
            }
            other => panic!("expected Unusable, got {other:?}"),
        }
    }

    #[test]
    fn argv_stdin_env_and_cwd_come_from_config_and_context() {
        let s =
            settings("[listen]\nruntime = \"script\"\ncommand = [\"/bin/sh\", \"-c\", \"cat\"]\n");
        let spec = with_ctx(&s, prepare).unwrap();
        assert_eq!(spec.program, PathBuf::from("/bin/sh"));
        assert_eq!(spec.args, vec!["-c", "cat"]);
        assert_eq!(spec.stdin.as_deref(), Some(&b"Check AgentChat."[..]));
        assert_eq!(spec.cwd, PathBuf::from("/work/dir"));
        assert_eq!(env_of(&spec, "AGENTCHAT_HANDLE").as_deref(), Some("@alice"));
        assert_eq!(env_of(&spec, "AGENTCHAT_CYCLE_ID").as_deref(), Some("c-42"));
        assert_eq!(
            env_of(&spec, "AGENTCHAT_WAKE_REASONS").as_deref(),
            Some("message,invite")
        );
        assert_eq!(
            env_of(&spec, "AGENTCHAT_RUN_KIND").as_deref(),
            Some("invite")
        );
        assert_eq!(
            env_of(&spec, "AGENTCHAT_API_BASE").as_deref(),
            Some("https://api.agentchat.me")
        );
        assert_eq!(
            env_of(&spec, "AGENTCHAT_API_KEY").as_deref(),
            Some("ac_script_key")
        );
        assert!(spec.env_remove.is_empty());
        // Confined by default: the program, the workdir, its scratch folder (TMPDIR).
        let plan = spec.sandbox.as_ref().unwrap();
        assert!(
            plan.with_access(Access::ReadWrite)
                .any(|p| p == Path::new("/work/dir"))
        );
        let tmp = env_of(&spec, "TMPDIR").unwrap();
        assert!(
            tmp.starts_with(spec.scratch.as_ref().unwrap().to_str().unwrap()),
            "{tmp}"
        );
        assert!(
            !spec.args.iter().any(|a| a.contains("ac_script_key")),
            "key never in argv"
        );
    }

    #[test]
    fn script_gets_key_false_keeps_the_key_out_even_when_inherited() {
        let s = settings(
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/sh\"]\nscript_gets_key = false\n",
        );
        let spec = with_ctx(&s, prepare).unwrap();
        assert_eq!(env_of(&spec, "AGENTCHAT_API_KEY"), None);
        assert_eq!(spec.env_remove, vec!["AGENTCHAT_API_KEY".to_string()]);
        let s = settings(
            "[listen]\nruntime = \"script\"\ncommand = [\"/bin/sh\"]\nsandbox_script = false\n",
        );
        assert!(with_ctx(&s, prepare).unwrap().sandbox.is_none());
    }

    #[test]
    fn a_bare_program_is_found_on_path_and_a_missing_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("my-agent");
        std::fs::write(&bin, "#!/bin/sh\n").unwrap();
        let not_exec = dir.path().join("plain-file");
        std::fs::write(&not_exec, "").unwrap();
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        let path =
            std::env::join_paths(["/nonexistent-dir", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(
            locate("my-agent", Path::new("/"), Some(&path)).unwrap(),
            bin
        );
        for missing in ["no-such-agent", "plain-file"] {
            match locate(missing, Path::new("/"), Some(&path)) {
                Err(RuntimeError::Unusable(m)) => {
                    assert!(m.contains(missing) && m.contains("PATH"), "{m}")
                }
                other => panic!("expected Unusable, got {other:?}"),
            }
        }
        // A relative path is taken from the working directory.
        assert_eq!(
            locate("./my-agent", dir.path(), None).unwrap(),
            dir.path().join("./my-agent")
        );
        let missing = locate("/nonexistent/agent", dir.path(), None).unwrap_err();
        assert!(missing.to_string().ends_with("does not exist"), "{missing}");
        // A directory is said to be one, not to be missing.
        let d = locate(dir.path().to_str().unwrap(), dir.path(), None).unwrap_err();
        assert!(
            d.to_string().ends_with("is a directory, not a program"),
            "{d}"
        );
    }

    #[test]
    fn judge_maps_every_end() {
        assert_eq!(judge(&ProcessEnd::Exited(0)), RunOutcome::Completed);
        assert!(matches!(
            judge(&ProcessEnd::Exited(2)),
            RunOutcome::Failed(_)
        ));
        assert!(matches!(
            judge(&ProcessEnd::TimedOut),
            RunOutcome::Failed(_)
        ));
        assert!(matches!(
            judge(&ProcessEnd::Signalled(9)),
            RunOutcome::Failed(_)
        ));
    }
}

//! [`ConfigFile`]: the config file read once (capped, never blocking on a FIFO) with the
//! environment it was read under, answering every command's question about it: the profiles it
//! names, which of them `listen --all` runs, a profile's settings, the top level.

use super::{ConfigArgs, ConfigError, DEFAULT_PROFILE, Settings, env, load, resolve};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The config file as one read found it (or found none), and the environment it was read under.
/// Every question is answered from this one read: `listen --all` and its `SIGHUP` ask it for
/// every profile, `status --all` for its rows. Deliberately not `Debug`: the environment and the
/// file may hold the key.
pub struct ConfigFile {
    args: ConfigArgs,
    env: HashMap<String, String>,
    /// The file's absolute path and its TOML; `None` when there is no file to read (the default
    /// file is missing, or there is no config dir).
    file: Option<(PathBuf, toml::Table)>,
}

/// Whether the settings' key file is read (a command that talks to the server) or only named
/// (`status`, `doctor`, `service`: an unreadable key file does not stop them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyFile {
    Read,
    Named,
}

/// What [`ConfigFile::all`] found: each profile's name and its settings or its own error.
#[derive(Debug, Default)]
pub struct ProfileSet {
    pub config_path: Option<PathBuf>,
    pub profiles: Vec<(String, Result<Settings, ConfigError>)>,
    /// The top level names no key of its own, so `default` is not one of the profiles.
    pub default_skipped: bool,
}

impl ConfigFile {
    /// Reads the process environment and the file `args` name (`--config`, `AGENTCHAT_CONFIG`,
    /// else the platform's `config.toml`, optional): the one read of a command.
    pub fn read(args: &ConfigArgs) -> Result<ConfigFile, ConfigError> {
        ConfigFile::read_with_env(args, env::config_env()?)
    }

    /// [`ConfigFile::read`] under a given environment (a service's, a test's).
    pub fn read_with_env(
        args: &ConfigArgs,
        env: HashMap<String, String>,
    ) -> Result<ConfigFile, ConfigError> {
        let file = match load::read_config_file(args, &env)? {
            Some((path, text)) => {
                let table = super::file::parse_toml(&path, &text)?;
                Some((path, table))
            }
            None => None,
        };
        Ok(ConfigFile {
            args: args.clone(),
            env,
            file,
        })
    }

    /// The file's text as [`ConfigFile::read`] would find it, without reading: for `setup`,
    /// which reads the text itself to edit it (src/setup/files.rs). `path` should be absolute,
    /// so the paths the file names come out absolute.
    pub fn parse(
        args: &ConfigArgs,
        env: HashMap<String, String>,
        path: &Path,
        text: &str,
    ) -> Result<ConfigFile, ConfigError> {
        let table = super::file::parse_toml(path, text)?;
        Ok(ConfigFile {
            args: args.clone(),
            env,
            file: Some((path.to_path_buf(), table)),
        })
    }

    /// The file read, absolute; `None` when there was none.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().map(|(p, _)| p.as_path())
    }

    /// The environment the file was read under.
    pub fn env(&self) -> &HashMap<String, String> {
        &self.env
    }

    /// The profiles the file names: `default` (its top level) first, then every
    /// `[profiles.<name>]`. Without a file, only `default`.
    pub fn profile_names(&self) -> Vec<String> {
        let mut out = vec![DEFAULT_PROFILE.to_string()];
        if let Some(profiles) = self.profile_tables() {
            out.extend(profiles.keys().filter(|k| *k != DEFAULT_PROFILE).cloned());
        }
        out
    }

    /// Whether `listen --all` runs `default`: the top level names a key of its own
    /// (`api_key_file` or `api_key`); `None` without a file.
    pub fn runs_default(&self) -> Option<bool> {
        self.file.as_ref().map(|(_, t)| runs_default(t))
    }

    /// One profile's settings, every path absolute: `profile` (else the one `--profile` or
    /// `AGENTCHAT_PROFILE` chooses, else `default`), its table over the top level, under the
    /// environment and the flags. Every profile table of the file is checked, so a typo in a
    /// profile not in use is still reported.
    pub fn settings(&self, profile: Option<&str>, key: KeyFile) -> Result<Settings, ConfigError> {
        let args = match profile {
            Some(name) => ConfigArgs {
                profile: Some(name.to_string()),
                ..self.args.clone()
            },
            None => self.args.clone(),
        };
        let file = self.file.as_ref().map(|(p, t)| (p.as_path(), t.clone()));
        let mut settings = resolve::resolve_table(&args, &self.env, file)?;
        match key {
            KeyFile::Read => load::with_key(settings),
            KeyFile::Named => {
                load::absolute_from_cwd(&mut settings);
                Ok(settings)
            }
        }
    }

    /// The profiles of `listen --all` (docs/many-agents.md, "One process for many agents"):
    /// every `[profiles.<name>]` table, and `default` only when [`ConfigFile::runs_default`].
    /// Each is resolved from the top level and its own table alone, so a bad value or a missing
    /// key file in one profile's table is that profile's error (`Err` beside its name) and every
    /// other profile resolves. The whole set fails only for a `profiles` that is not a table.
    pub fn all(&self) -> Result<ProfileSet, ConfigError> {
        let Some((path, table)) = &self.file else {
            return Ok(ProfileSet::default());
        };
        let (top, tables) = split(table)?;
        let mut set = ProfileSet {
            config_path: Some(path.clone()),
            ..ProfileSet::default()
        };
        if runs_default(&top) {
            let settings = self.of_all(path, top.clone(), None, DEFAULT_PROFILE);
            set.profiles.push((DEFAULT_PROFILE.to_string(), settings));
        } else {
            set.default_skipped = true;
        }
        for (name, own) in tables {
            let settings = self.of_all(path, top.clone(), Some(own), &name);
            set.profiles.push((name, settings));
        }
        Ok(set)
    }

    /// One profile of [`ConfigFile::all`] on its own (a reload, a key check).
    pub fn one_of_all(&self, profile: &str) -> Result<Settings, ConfigError> {
        let Some((path, table)) = &self.file else {
            return Err(ConfigError::UnknownProfile {
                name: profile.to_string(),
                file: None,
                known: Vec::new(),
            });
        };
        let top = without_profiles(table);
        let mut tables = match table.get("profiles") {
            Some(toml::Value::Table(t)) => t.clone(),
            _ => toml::Table::new(),
        };
        let own = if profile == DEFAULT_PROFILE {
            None
        } else {
            let Some(own) = tables.remove(profile) else {
                return Err(ConfigError::UnknownProfile {
                    name: profile.to_string(),
                    file: Some(path.clone()),
                    known: tables.keys().cloned().collect(),
                });
            };
            Some(own)
        };
        self.of_all(path, top, own, profile)
    }

    /// The top level alone, its key file named but not read: what `listen --all` takes for the
    /// process itself (its log and its metrics endpoint), whatever the profiles' tables say.
    pub fn top_of_all(&self) -> Result<Settings, ConfigError> {
        let args = ConfigArgs {
            profile: Some(DEFAULT_PROFILE.to_string()),
            ..self.args.clone()
        };
        let mut settings = match &self.file {
            None => resolve::resolve_table(&args, &self.env, None)?,
            Some((path, table)) => resolve::resolve_one_of_all(
                &args,
                &self.env,
                path,
                without_profiles(table),
                None,
                DEFAULT_PROFILE,
            )?,
        };
        load::absolute_from_cwd(&mut settings);
        Ok(settings)
    }

    /// `name`'s settings from the top level and `own`, its own table (`None` for `default`),
    /// key file read.
    fn of_all(
        &self,
        path: &Path,
        top: toml::Table,
        own: Option<toml::Value>,
        name: &str,
    ) -> Result<Settings, ConfigError> {
        super::value::profile_name(name).map_err(|problem| ConfigError::BadValue {
            key: format!("profiles.{name}"),
            problem,
        })?;
        let args = ConfigArgs {
            profile: Some(name.to_string()),
            ..self.args.clone()
        };
        load::with_key(resolve::resolve_one_of_all(
            &args, &self.env, path, top, own, name,
        )?)
    }

    /// `[profiles]` when it is a table.
    fn profile_tables(&self) -> Option<&toml::Table> {
        self.file
            .as_ref()
            .and_then(|(_, t)| t.get("profiles"))
            .and_then(toml::Value::as_table)
    }
}

/// Where a listener's settings come from, read again on `SIGHUP` and while its key is refused:
/// the one profile `args` choose, or one profile of `listen --all`, resolved on its own
/// ([`ConfigFile::one_of_all`]). Each `load` is one read of the file.
#[derive(Debug, Clone)]
pub enum Source {
    One(ConfigArgs),
    OfAll { args: ConfigArgs, profile: String },
}

impl Source {
    pub fn load(&self) -> Result<Settings, ConfigError> {
        match self {
            Source::One(args) => ConfigFile::read(args)?.settings(None, KeyFile::Read),
            Source::OfAll { args, profile } => ConfigFile::read(args)?.one_of_all(profile),
        }
    }
}

/// Whether `listen --all` runs `default` for a file's top level: it names a key of its own.
fn runs_default(top: &toml::Table) -> bool {
    top.contains_key("api_key_file") || top.contains_key("api_key")
}

/// The top level without `profiles`, and the profiles' tables; an error when `profiles` is not
/// a table.
fn split(table: &toml::Table) -> Result<(toml::Table, toml::Table), ConfigError> {
    let tables = match table.get("profiles") {
        None => toml::Table::new(),
        Some(toml::Value::Table(t)) => t.clone(),
        Some(other) => {
            return Err(ConfigError::BadValue {
                key: "profiles".into(),
                problem: format!("expected a table, found {}", other.type_str()),
            });
        }
    };
    Ok((without_profiles(table), tables))
}

fn without_profiles(table: &toml::Table) -> toml::Table {
    let mut top = table.clone();
    top.remove("profiles");
    top
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A config file in a fresh folder, and the environment a test reads it under.
    fn written(text: &str) -> (tempfile::TempDir, ConfigArgs, HashMap<String, String>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.toml");
        std::fs::write(&path, text).unwrap();
        let args = ConfigArgs {
            config: Some(path),
            ..ConfigArgs::default()
        };
        let env = HashMap::from([("HOME".to_string(), "/home/u".to_string())]);
        (dir, args, env)
    }

    const TWO: &str = "api_base = \"http://127.0.0.1:9\"\n\
                       [profiles.b.listen]\nrun_timeout = \"7m\"\n\
                       [profiles.a]\nlog_level = \"debug\"\n";

    #[test]
    fn one_read_answers_the_names_the_all_set_and_each_profile() {
        let (_dir, args, env) = written(TWO);
        let file = ConfigFile::read_with_env(&args, env).unwrap();
        assert_eq!(file.profile_names(), ["default", "a", "b"]);
        assert_eq!(
            file.runs_default(),
            Some(false),
            "the top level names no key"
        );
        let set = file.all().unwrap();
        assert!(set.default_skipped);
        let names: Vec<&str> = set.profiles.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        let b = file.one_of_all("b").unwrap();
        assert_eq!(b.listen.run_timeout, std::time::Duration::from_secs(420));
        assert_eq!(
            b.api_base, "http://127.0.0.1:9",
            "the top level reaches the profile"
        );
        let a = file.settings(Some("a"), KeyFile::Named).unwrap();
        assert_eq!(a.log_level, "debug");
        assert_eq!(a.state_dir, Path::new("/home/u/.local/state/agentchat/a"));
        assert!(matches!(
            file.one_of_all("c"),
            Err(ConfigError::UnknownProfile { known, .. }) if known == ["a", "b"]
        ));
    }

    #[test]
    fn a_key_of_the_top_levels_own_puts_default_among_all() {
        let (dir, args, env) = written("api_key = \"ac_top\"\n[profiles.w]\n");
        let file = ConfigFile::read_with_env(&args, env).unwrap();
        assert_eq!(file.runs_default(), Some(true));
        let set = file.all().unwrap();
        let names: Vec<&str> = set.profiles.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["default", "w"]);
        assert_eq!(
            set.config_path.as_deref(),
            Some(dir.path().join("config.toml").as_path())
        );
    }

    #[test]
    fn without_a_file_only_default_exists_and_all_is_empty() {
        // As `read` leaves it when the default file is missing (not built from the machine's
        // own config dir, which a unit test must not depend on).
        let file = ConfigFile {
            args: ConfigArgs::default(),
            env: HashMap::from([("HOME".to_string(), "/home/u".to_string())]),
            file: None,
        };
        assert_eq!(file.path(), None);
        assert_eq!(file.profile_names(), ["default"]);
        assert_eq!(file.runs_default(), None);
        assert!(file.all().unwrap().profiles.is_empty());
        assert!(file.top_of_all().is_ok());
        assert!(file.settings(None, KeyFile::Named).is_ok());
        assert!(matches!(
            file.settings(Some("w"), KeyFile::Named),
            Err(ConfigError::UnknownProfile { file: None, .. })
        ));
    }

    #[test]
    fn one_profiles_mistake_is_its_own_under_all_and_the_whole_files_for_one() {
        let (_dir, args, env) = written("[profiles.ok]\n[profiles.bad.listen]\nrun_timeout = 5\n");
        let file = ConfigFile::read_with_env(&args, env).unwrap();
        let set = file.all().unwrap();
        let (ok, bad) = (&set.profiles[1], &set.profiles[0]);
        assert_eq!((ok.0.as_str(), bad.0.as_str()), ("ok", "bad"));
        assert!(ok.1.is_ok());
        let e = bad.1.as_ref().err().unwrap().to_string();
        assert!(e.contains("`profiles.bad.listen.run_timeout`"), "{e}");
        // A profile whose table is not a table is named by its own path.
        let (_dir2, args2, env2) = written("[profiles]\nw = 3\nv = {}\n");
        let set = ConfigFile::read_with_env(&args2, env2)
            .unwrap()
            .all()
            .unwrap();
        let w = set.profiles.iter().find(|(n, _)| n == "w").unwrap();
        let e = w.1.as_ref().err().unwrap().to_string();
        assert_eq!(
            e,
            "bad value for `profiles.w`: expected a table, found integer"
        );
        assert!(set.profiles.iter().any(|(n, s)| n == "v" && s.is_ok()));
        // One profile read as a single `listen` checks every table, so the typo is reported.
        let e = file.settings(Some("ok"), KeyFile::Named).err().unwrap();
        assert!(
            e.to_string().contains("profiles.bad.listen.run_timeout"),
            "{e}"
        );
    }

    #[test]
    fn profiles_that_is_not_a_table_fails_the_all_set_only() {
        let (_dir, args, env) = written("profiles = 3\n");
        let file = ConfigFile::read_with_env(&args, env).unwrap();
        assert_eq!(file.profile_names(), ["default"]);
        let e = file.all().err().unwrap().to_string();
        assert_eq!(
            e,
            "bad value for `profiles`: expected a table, found integer"
        );
        assert!(
            file.top_of_all().is_ok(),
            "the process's own settings ignore profiles"
        );
    }

    #[test]
    fn text_that_is_not_toml_fails_the_read_naming_the_file() {
        let (dir, args, env) = written("[listen\n");
        let e = ConfigFile::read_with_env(&args, env)
            .err()
            .unwrap()
            .to_string();
        assert!(e.starts_with("config file "), "{e}");
        assert!(
            e.contains(&dir.path().join("config.toml").display().to_string()),
            "{e}"
        );
        assert!(e.contains("is not valid TOML: line 1"), "{e}");
    }
}

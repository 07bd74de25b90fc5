//! What `setup` did for a profile, so `setup --undo` removes exactly that: `setup.json` in the
//! profile's state dir (0600). A second run keeps the first run's records of what was there
//! before, so one undo takes the machine back to before the first setup.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

pub const FILE: &str = "setup.json";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub version: u32,
    pub profile: String,
    /// The config file setup edited.
    #[serde(default)]
    pub config: Option<ConfigRecord>,
    /// The key file setup wrote (never one the user named with `--api-key-file`).
    #[serde(default)]
    pub key_file: Option<PathBuf>,
    /// Directories setup created (the config dir, the state dir, a CLI home), removed by undo when
    /// empty, deepest first.
    #[serde(default)]
    pub created_dirs: Vec<PathBuf>,
    #[serde(default)]
    pub claude: Option<CliRecord>,
    #[serde(default)]
    pub codex: Option<CliRecord>,
    /// `service install` succeeded for this profile.
    #[serde(default)]
    pub service: bool,
}

/// The config edit: the file's text before setup first touched it (`None`: setup created it),
/// the text setup left, and each key's earlier value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigRecord {
    pub path: PathBuf,
    pub before: Option<String>,
    pub after: String,
    /// Each key setup set (a dotted path of bare keys), with its earlier value as TOML text
    /// (`None`: setup added it).
    pub keys: Vec<KeyRecord>,
    /// Tables setup created (dotted paths), removed at undo once empty.
    #[serde(default)]
    pub created_tables: Vec<Vec<String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub path: Vec<String>,
    pub previous: Option<String>,
}

/// One CLI wired for this profile.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct CliRecord {
    /// `claude mcp add` / `codex mcp add` ran for this profile.
    pub mcp_added: bool,
    /// The exact argv of the entry (command first), to recognise it as ours at undo.
    pub mcp_command: Vec<String>,
    /// The identity block setup wrote there.
    pub identity: Option<IdentityRecord>,
    /// What was wired there before `--rewire` replaced it (for the undo's advice).
    #[serde(default)]
    pub replaced: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdentityRecord {
    pub file: PathBuf,
    /// The file's text before setup (`None`: setup created it).
    pub before: Option<String>,
    /// The file's text setup left.
    pub after: String,
    /// The block setup wrote, markers included.
    pub block: String,
}

impl Manifest {
    pub fn new(profile: &str) -> Manifest {
        Manifest {
            version: 1,
            profile: profile.to_string(),
            ..Manifest::default()
        }
    }

    /// The manifest in `state_dir`, if setup ran for this profile.
    pub fn load(state_dir: &Path) -> anyhow::Result<Option<Manifest>> {
        let path = state_dir.join(FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
                anyhow::anyhow!("{} is not a setup manifest: {e}", path.display())
            })?)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        }
    }

    pub fn save(&self, state_dir: &Path) -> anyhow::Result<()> {
        let path = state_dir.join(FILE);
        let mut text = serde_json::to_string_pretty(self)?;
        text.push('\n');
        crate::sys::fs::write_atomic(&path, text.as_bytes())
            .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))
    }

    /// Records `dir` as created by setup (once).
    pub fn created_dir(&mut self, dir: &Path) {
        if !self.created_dirs.iter().any(|d| d == dir) {
            self.created_dirs.push(dir.to_path_buf());
        }
    }
}

/// Creates `dir` and its missing parents, recording each one created (outermost first).
pub fn create_dirs(dir: &Path, manifest: &mut Manifest, private: bool) -> anyhow::Result<()> {
    let mut missing = Vec::new();
    let mut cur = Some(dir);
    while let Some(d) = cur {
        if d.as_os_str().is_empty() || d.exists() {
            break;
        }
        missing.push(d.to_path_buf());
        cur = d.parent();
    }
    for d in missing.iter().rev() {
        let made = if private {
            crate::sys::fs::create_private_dir(d)
        } else {
            std::fs::create_dir(d)
        };
        made.map_err(|e| anyhow::anyhow!("cannot create {}: {e}", d.display()))?;
        manifest.created_dir(d);
    }
    Ok(())
}

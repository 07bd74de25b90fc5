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
    /// The server setup last used, and the handle it found there: a setup stopped before the
    /// config was written resumes with them, and undo looks for the agent's listener by them.
    #[serde(default)]
    pub api_base: Option<String>,
    #[serde(default)]
    pub handle: Option<String>,
    /// `key_file` holds a key setup got by sign-up or recovery, never shown: its only copy, which
    /// undo keeps unless told to delete it.
    #[serde(default)]
    pub key_only_copy: bool,
    /// A sign-up or recovery waiting for the code the server emailed (`setup --code`).
    #[serde(default)]
    pub pending: Option<PendingCode>,
}

/// A sign-up (or recovery) started, waiting for its emailed code. The `pending_id` alone gets
/// nothing: the code is needed too.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PendingCode {
    /// Recovery of a lost key, not a sign-up.
    pub recover: bool,
    pub api_base: String,
    pub email: String,
    pub handle: String,
    pub pending_id: String,
    /// When it was asked for (ms since the epoch, this machine's clock).
    pub sent_at_ms: u64,
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
    /// Another profile's setup created the file (`manifest::inherit`): the last undo that leaves
    /// it empty removes it, whichever profile's it is.
    #[serde(default)]
    pub created: bool,
    /// The file changed between two of setup's runs (a hand edit): `before` no longer stands for
    /// it, so undo takes out setup's keys one by one and never puts `before` back whole.
    #[serde(default)]
    pub edited: bool,
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
    /// The profile whose entry `--rewire` replaced: undo advises wiring it again while it exists.
    #[serde(default)]
    pub replaced_profile: Option<String>,
    /// The user's own `agentchat` entry (not a profile's) that `--rewire` replaced, as the CLI's
    /// file held it: undo puts it back.
    #[serde(default)]
    pub replaced_entry: Option<serde_json::Value>,
    /// Codex's `config.toml` before setup first changed it, which Codex's own `mcp add`/`remove`
    /// reformat: undo puts its bytes and mode back while it is still as setup left it.
    #[serde(default)]
    pub store: Option<StoreRecord>,
}

/// A CLI's own config file as it was before setup (at most `files::TEXT_CAP`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreRecord {
    pub path: PathBuf,
    /// Its text (`None`: there was no file).
    pub before: Option<String>,
    pub mode: Option<u32>,
    /// It was a symbolic link to this (as `readlink` gives it), which the CLI's rename replaces.
    #[serde(default)]
    pub link: Option<PathBuf>,
    /// SHA-256 of the file as setup left it (`None`: not known yet).
    #[serde(default)]
    pub after_sha256: Option<String>,
}

/// The identity block setup wrote: what undo needs to take it out again, never a copy of the
/// file (a 60 MB CLAUDE.md must not make a 60 MB manifest).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IdentityRecord {
    pub file: PathBuf,
    /// Setup created the file: undo deletes it once it holds nothing else.
    #[serde(default)]
    pub created: bool,
    /// What setup put between the earlier text and the block when it appended it ("\n\n",
    /// "\r\n", or nothing), taken out with the block.
    #[serde(default)]
    pub separator: String,
    /// The block setup wrote, markers included.
    pub block: String,
    /// SHA-256 of the file as setup left it.
    #[serde(default)]
    pub after_sha256: String,
    /// An earlier version's whole copies, read only to upgrade its manifest (`upgrade`).
    #[serde(default, rename = "before", skip_serializing)]
    pub legacy_before: Option<String>,
    #[serde(default, rename = "after", skip_serializing)]
    pub legacy_after: Option<String>,
}

impl IdentityRecord {
    /// A record an earlier version wrote (whole copies of the file) in today's terms.
    fn upgrade(&mut self) {
        if let Some(after) = self.legacy_after.take() {
            let before = self.legacy_before.take();
            self.created = before.is_none();
            self.separator = super::anchor::separator(before.as_deref(), &after).to_string();
            self.after_sha256 = crate::sys::capped::sha256(after.as_bytes());
        }
    }
}

/// The most of a manifest read: it holds records, a block and at most one capped copy of
/// Codex's `config.toml` and of the agentchat config (an earlier version's whole copies of
/// larger files are refused with the size said).
const MANIFEST_CAP: u64 = 32 * 1024 * 1024;

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
        match crate::sys::fs::read_regular_capped(&path, MANIFEST_CAP) {
            Ok(bytes) => {
                let mut m: Manifest = serde_json::from_slice(&bytes).map_err(|e| {
                    anyhow::anyhow!("{} is not a setup manifest: {e}", path.display())
                })?;
                for rec in [&mut m.claude, &mut m.codex].into_iter().flatten() {
                    if let Some(id) = &mut rec.identity {
                        id.upgrade();
                    }
                }
                Ok(Some(m))
            }
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

/// Takes over what other profiles' setups created that this profile now shares: the directories
/// above its state dir and config (`~/.config/agentchat`, `~/.local/state`), and the config file
/// itself. Each profile's undo removes a shared one only once it is empty, so whichever profile is
/// undone last leaves no empty directory and no 0-byte config behind.
pub fn inherit(m: &mut Manifest, state_dir: &Path, config_path: &Path) {
    let Some(entries) = state_dir
        .parent()
        .and_then(|base| std::fs::read_dir(base).ok())
    else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        if dir == state_dir {
            continue;
        }
        let Ok(Some(other)) = Manifest::load(&dir) else {
            continue;
        };
        for d in &other.created_dirs {
            let shared = [state_dir, config_path]
                .iter()
                .any(|p| p.starts_with(d) && *p != d.as_path());
            if shared {
                m.created_dir(d);
            }
        }
        if let (Some(c), Some(o)) = (&mut m.config, &other.config)
            && c.path == o.path
            && (o.before.is_none() || o.created)
        {
            c.created = true;
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

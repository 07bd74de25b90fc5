//! The profile's keys in `config.toml`, edited with `toml_edit` so every other profile, comment
//! and format stays as the user wrote it; pure (text in, text out) so each case is a unit test.
//!
//! The default profile's keys are the file's top level (`api_key_file`, `[listen] runtime`); any
//! other profile's are under `[profiles.<name>]` (config's own layout,
//! `config/agentchat.example.toml`). Setup records each key's earlier value and the tables it
//! created, so undo puts back exactly what was there.

use super::manifest::KeyRecord;
use toml_edit::{DocumentMut, Item, Table, Value};

/// The keys setup sets for a profile (`None`: leave that key as it is).
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    pub api_base: Option<String>,
    pub api_key_file: Option<String>,
    pub runtime: Option<String>,
    /// The script runtime's argv.
    pub command: Option<Vec<String>>,
    /// Keys of the profile's `[listen.policy]` (the bounds on runs the user changed).
    pub policy: Vec<(&'static str, Value)>,
}

/// Each key's path and value for `profile`.
pub fn keys_for(profile: &str, wanted: &Wanted) -> Vec<(Vec<String>, Value)> {
    let base: Vec<String> = if profile == crate::config::DEFAULT_PROFILE {
        Vec::new()
    } else {
        vec!["profiles".into(), profile.into()]
    };
    let at = |rest: &[&str]| {
        let mut p = base.clone();
        p.extend(rest.iter().map(|s| s.to_string()));
        p
    };
    let mut out = Vec::new();
    if let Some(v) = &wanted.api_base {
        out.push((at(&["api_base"]), Value::from(v.as_str())));
    }
    if let Some(v) = &wanted.api_key_file {
        out.push((at(&["api_key_file"]), Value::from(v.as_str())));
    }
    if let Some(v) = &wanted.runtime {
        out.push((at(&["listen", "runtime"]), Value::from(v.as_str())));
    }
    if let Some(cmd) = &wanted.command {
        let arr: toml_edit::Array = cmd.iter().map(String::as_str).collect();
        out.push((at(&["listen", "command"]), Value::Array(arr)));
    }
    for (key, v) in &wanted.policy {
        out.push((at(&["listen", "policy", key]), v.clone()));
    }
    out
}

#[derive(Debug, thiserror::Error)]
pub enum EditError {
    #[error("the config file is not valid TOML: {0}")]
    Toml(String),
    #[error("`{0}` in the config file is not a table; fix it by hand")]
    NotATable(String),
}

/// A value's text without its surrounding spaces and comments.
fn bare(v: &Value) -> String {
    let mut v = v.clone();
    v.decor_mut().clear();
    v.to_string()
}

/// The table at `path`, created (and its path recorded in `created`) where missing. A table
/// that only holds other tables is created implicit, so no empty `[profiles]` header is written.
fn table_at<'a>(
    doc: &'a mut DocumentMut,
    path: &[String],
    created: &mut Vec<Vec<String>>,
) -> Result<&'a mut Table, EditError> {
    let mut table = doc.as_table_mut();
    for (i, name) in path.iter().enumerate() {
        if !table.contains_key(name) {
            let mut t = Table::new();
            t.set_implicit(i + 1 < path.len());
            table.insert(name, Item::Table(t));
            created.push(path.get(..=i).unwrap_or_default().to_vec());
        }
        table = match table.get_mut(name) {
            Some(Item::Table(t)) => t,
            _ => {
                return Err(EditError::NotATable(
                    path.get(..=i).unwrap_or_default().join("."),
                ));
            }
        };
    }
    Ok(table)
}

/// The edited text, what each changed key held before, and the tables created.
pub type Applied = (String, Vec<KeyRecord>, Vec<Vec<String>>);

/// Sets every key; returns the new text, what each changed key held before, and the tables
/// created. A key that already holds the value is left alone (and not recorded).
pub fn apply(text: &str, keys: &[(Vec<String>, Value)]) -> Result<Applied, EditError> {
    let mut doc: DocumentMut = text.parse().map_err(|e| EditError::Toml(format!("{e}")))?;
    let mut records = Vec::new();
    let mut created = Vec::new();
    for (path, value) in keys {
        let Some((name, parents)) = path.split_last() else {
            continue;
        };
        let table = table_at(&mut doc, parents, &mut created)?;
        match table.get_mut(name) {
            Some(Item::Value(old)) => {
                if bare(old) == bare(value) {
                    continue;
                }
                records.push(KeyRecord {
                    path: path.clone(),
                    previous: Some(bare(old)),
                });
                let decor = old.decor().clone();
                *old = value.clone();
                *old.decor_mut() = decor;
            }
            Some(_) => return Err(EditError::NotATable(path.join("."))),
            None => {
                records.push(KeyRecord {
                    path: path.clone(),
                    previous: None,
                });
                table.insert(name, Item::Value(value.clone()));
            }
        }
    }
    Ok((same_line_endings(text, doc.to_string()), records, created))
}

/// `out` with the line endings of `original`: `toml_edit` writes the lines it adds with LF, so
/// in a file written with CRLF (mostly) every bare LF becomes CRLF, and nothing changes in any
/// other file.
fn same_line_endings(original: &str, out: String) -> String {
    let lf = original.matches('\n').count();
    let crlf = original.matches("\r\n").count();
    if crlf == 0 || crlf * 2 <= lf {
        return out;
    }
    let mut fixed = String::with_capacity(out.len() + out.len() / 16);
    let mut prev = '\0';
    for c in out.chars() {
        if c == '\n' && prev != '\r' {
            fixed.push('\r');
        }
        fixed.push(c);
        prev = c;
    }
    fixed
}

/// Puts back what `records` say each key held, then removes the tables setup created that are
/// empty now.
pub fn revert(
    text: &str,
    records: &[KeyRecord],
    created: &[Vec<String>],
) -> Result<String, EditError> {
    let mut doc: DocumentMut = text.parse().map_err(|e| EditError::Toml(format!("{e}")))?;
    for r in records.iter().rev() {
        let Some((name, parents)) = r.path.split_last() else {
            continue;
        };
        let Some(table) = existing_table(&mut doc, parents) else {
            continue;
        };
        match &r.previous {
            None => {
                table.remove(name);
            }
            Some(prev) => {
                let Ok(value) = prev.parse::<Value>() else {
                    continue;
                };
                if let Some(Item::Value(old)) = table.get_mut(name) {
                    let decor = old.decor().clone();
                    *old = value;
                    *old.decor_mut() = decor;
                } else {
                    table.insert(name, Item::Value(value));
                }
            }
        }
    }
    // Deepest first, so a parent is empty once its children are gone.
    let mut created: Vec<&Vec<String>> = created.iter().collect();
    created.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for path in created {
        let Some((name, parents)) = path.split_last() else {
            continue;
        };
        let Some(parent) = existing_table(&mut doc, parents) else {
            continue;
        };
        match parent.get_mut(name).and_then(Item::as_table_mut) {
            Some(t) if t.is_empty() => {
                parent.remove(name);
            }
            // Only tables of the user's own left in it (`[listen.policy]` under setup's
            // `[listen]`): its header goes, the tables stay.
            Some(t) if t.iter().all(|(_, item)| item.is_table()) => t.set_implicit(true),
            _ => {}
        }
    }
    Ok(same_line_endings(text, doc.to_string()))
}

fn existing_table<'a>(doc: &'a mut DocumentMut, path: &[String]) -> Option<&'a mut Table> {
    let mut table = doc.as_table_mut();
    for name in path {
        table = table.get_mut(name)?.as_table_mut()?;
    }
    Some(table)
}

/// The profile names a config text defines (`[profiles.<name>]`).
pub fn profiles_in(text: &str) -> Vec<String> {
    text.parse::<DocumentMut>()
        .ok()
        .and_then(|d| {
            d.get("profiles")
                .and_then(Item::as_table)
                .map(|t| t.iter().map(|(k, _)| k.to_string()).collect())
        })
        .unwrap_or_default()
}

/// A unified-style diff of the lines that changed: the common head and tail are left out
/// (setup's edits are a few neighbouring lines), with up to two lines of context.
pub fn diff(before: &str, after: &str) -> String {
    let a: Vec<&str> = before.lines().collect();
    let b: Vec<&str> = after.lines().collect();
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
        .min(a.len().min(b.len()) - head);
    let ctx = 2;
    let mut out = String::new();
    let start = head.saturating_sub(ctx);
    for l in a.get(start..head).unwrap_or_default() {
        out.push_str(format!("  {l}").trim_end());
        out.push('\n');
    }
    for l in a.get(head..a.len() - tail).unwrap_or_default() {
        out.push_str(format!("- {l}").trim_end());
        out.push('\n');
    }
    for l in b.get(head..b.len() - tail).unwrap_or_default() {
        out.push_str(format!("+ {l}").trim_end());
        out.push('\n');
    }
    let end = (a.len() - tail + ctx).min(a.len());
    for l in a.get(a.len() - tail..end).unwrap_or_default() {
        out.push_str(format!("  {l}").trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "# my agents\napi_base = \"https://api.agentchat.me\"  # the server\n\n\
                        [listen]\nruntime = \"codex\"\n\n# the work agent\n[profiles.work]\n\
                        api_key_file = \"~/.config/agentchat/work.key\"\n\n[profiles.work.listen]\n\
                        runtime = \"script\"\ncommand = [\"/bin/true\"]\n# trailing comment\n";

    fn wanted() -> Wanted {
        Wanted {
            api_key_file: Some("/home/me/.config/agentchat/relay.key".into()),
            runtime: Some("claude-code".into()),
            ..Wanted::default()
        }
    }

    #[test]
    fn a_new_profile_is_added_and_taken_out_again_byte_for_byte() {
        let keys = keys_for("relay", &wanted());
        let (after, records, created) = apply(USER, &keys).unwrap();
        assert!(after.starts_with(USER.trim_end_matches("# trailing comment\n")));
        assert!(
            after.contains("[profiles.relay]\napi_key_file = "),
            "{after}"
        );
        assert!(after.contains("[profiles.relay.listen]\nruntime = \"claude-code\""));
        assert!(!after.contains("[profiles]\n"), "{after}");
        let parsed: toml::Table = toml::from_str(&after).unwrap();
        assert_eq!(
            parsed["profiles"]["work"]["listen"]["runtime"].as_str(),
            Some("script")
        );
        assert_eq!(revert(&after, &records, &created).unwrap(), USER);
        // Again: nothing to do.
        let (again, none, _) = apply(&after, &keys).unwrap();
        assert_eq!(again, after);
        assert!(none.is_empty());
    }

    #[test]
    fn the_default_profile_keeps_comments_and_gets_its_old_values_back() {
        let keys = keys_for("default", &wanted());
        let (after, records, created) = apply(USER, &keys).unwrap();
        assert!(
            after.contains("[listen]\nruntime = \"claude-code\"\n"),
            "{after}"
        );
        assert!(after.contains("# the server\napi_key_file"), "{after}");
        assert!(after.contains("[profiles.work.listen]\nruntime = \"script\""));
        assert_eq!(records.len(), 2);
        assert_eq!(records[1].previous.as_deref(), Some("\"codex\""));
        assert_eq!(revert(&after, &records, &created).unwrap(), USER);
    }

    #[test]
    fn a_table_of_the_users_own_under_one_setup_created_stays_without_setups_header() {
        let keys = keys_for("default", &wanted());
        let (after, records, created) = apply("", &keys).unwrap();
        let edited = format!("{after}\n# mine\n[listen.policy]\nmax_runs_per_day = 5\n");
        let back = revert(&edited, &records, &created).unwrap();
        assert!(!back.contains("[listen]"), "{back}");
        assert!(
            back.contains("# mine\n[listen.policy]\nmax_runs_per_day = 5\n"),
            "{back}"
        );
        let parsed: toml::Table = toml::from_str(&back).unwrap();
        assert_eq!(
            parsed["listen"]["policy"]["max_runs_per_day"].as_integer(),
            Some(5)
        );
    }

    #[test]
    fn an_empty_file_gets_the_profile_and_back_to_empty() {
        let keys = keys_for("default", &wanted());
        let (after, records, created) = apply("", &keys).unwrap();
        let parsed: toml::Table = toml::from_str(&after).unwrap();
        assert_eq!(parsed["listen"]["runtime"].as_str(), Some("claude-code"));
        assert_eq!(revert(&after, &records, &created).unwrap(), "");
    }

    #[test]
    fn a_crlf_file_keeps_its_crlf_both_ways() {
        let user = USER.replace('\n', "\r\n");
        let keys = keys_for("relay", &wanted());
        let (after, records, created) = apply(&user, &keys).unwrap();
        assert_eq!(
            after.matches('\n').count(),
            after.matches("\r\n").count(),
            "{after:?}"
        );
        assert!(
            after.contains("[profiles.relay]\r\napi_key_file = "),
            "{after:?}"
        );
        assert_eq!(revert(&after, &records, &created).unwrap(), user);
        // An LF file stays LF.
        let (lf, _, _) = apply(USER, &keys).unwrap();
        assert!(!lf.contains('\r'));
    }

    #[test]
    fn a_key_that_is_not_a_table_is_an_error_naming_it() {
        let e = apply("listen = 3\n", &keys_for("default", &wanted())).unwrap_err();
        assert!(e.to_string().contains("`listen`"), "{e}");
    }

    #[test]
    fn the_diff_shows_the_changed_lines_with_context() {
        let d = diff("a\nb\nc\nd\n", "a\nb\nX\nc\nd\n");
        assert_eq!(d, "  a\n  b\n+ X\n  c\n  d\n");
        let d = diff("a\nruntime = 1\nz\n", "a\nruntime = 2\nz\n");
        assert_eq!(d, "  a\n- runtime = 1\n+ runtime = 2\n  z\n");
        assert_eq!(diff("", "x\n"), "+ x\n");
    }
}

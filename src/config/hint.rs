//! Hints in config errors: "did you mean" for an unknown key, and the name of a key or table
//! set twice. Wording only; the key lists are `config::keys`'s.

/// `; did you mean `x`?` for an unknown key's path (`profiles.work.listen.qiet_window`), or
/// nothing: the closest key of the same table within a few edits, else the same name in another
/// table (`runtime` at the top level: `listen.runtime`). The `profiles.<name>.` prefix is kept.
pub(super) fn did_you_mean(path: &str) -> String {
    let (prefix, rest) = match path.strip_prefix("profiles.") {
        Some(after) => match after.split_once('.') {
            Some((name, rest)) => (format!("profiles.{name}."), rest),
            None => return String::new(),
        },
        None => (String::new(), path),
    };
    let (table, name) = rest.rsplit_once('.').unwrap_or(("", rest));
    let tables: [(&str, &[&str]); 6] = [
        ("", super::keys::TOP_KEYS),
        ("listen", super::keys::LISTEN_KEYS),
        ("listen.claude", super::keys::CLAUDE_KEYS),
        ("listen.codex", super::keys::CODEX_KEYS),
        ("listen.policy", crate::core::policy::KEYS),
        ("listen.policy.loop_guard", &["runs", "within"]),
    ];
    let joined = |t: &str, k: &str| {
        if t.is_empty() {
            format!("{prefix}{k}")
        } else {
            format!("{prefix}{t}.{k}")
        }
    };
    let same = tables.iter().find(|(t, _)| *t == table).map(|(_, k)| *k);
    let budget = (name.chars().count() / 3).clamp(1, 3);
    let closest = same
        .into_iter()
        .flatten()
        .copied()
        .min_by_key(|k| edits(name, k));
    if let Some(k) = closest.filter(|k| edits(name, k) <= budget) {
        return format!("; did you mean `{}`?", joined(table, k));
    }
    match tables
        .iter()
        .find(|(t, keys)| *t != table && keys.contains(&name))
    {
        Some((t, _)) => format!("; did you mean `{}`?", joined(t, name)),
        None => String::new(),
    }
}

/// Edit distance with adjacent transpositions (optimal string alignment), on characters.
fn edits(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d: Vec<usize> = vec![0; (a.len() + 1) * width];
    let at = |i: usize, j: usize| i * width + j;
    for i in 0..=a.len() {
        if let Some(c) = d.get_mut(at(i, 0)) {
            *c = i;
        }
    }
    for j in 0..=b.len() {
        if let Some(c) = d.get_mut(j) {
            *c = j;
        }
    }
    let get = |d: &[usize], i, j| d.get(at(i, j)).copied().unwrap_or(usize::MAX / 2);
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let (ai, bj) = (a.get(i - 1), b.get(j - 1));
            let cost = usize::from(ai != bj);
            let mut best = (get(&d, i - 1, j) + 1)
                .min(get(&d, i, j - 1) + 1)
                .min(get(&d, i - 1, j - 1) + cost);
            if i > 1 && j > 1 && ai == b.get(j - 2) && a.get(i - 2) == bj {
                best = best.min(get(&d, i - 2, j - 2) + 1);
            }
            if let Some(c) = d.get_mut(at(i, j)) {
                *c = best;
            }
        }
    }
    get(&d, a.len(), b.len())
}

/// The message for a duplicate-key error, naming the key by its path (`listen.quiet_window`) or
/// the table (`[listen]`): toml's span covers
/// the repeated key (or the repeated table's last segment), and the table it sits in is the last
/// `[header]` line above it. Only bare-key names are quoted (letters, digits, `_`, `-`, `.`, at
/// most 64 bytes): anything else might be a value pasted in the wrong place, so it is not shown.
pub(super) fn duplicate_named(text: &str, span: std::ops::Range<usize>) -> Option<String> {
    let bare = |s: &str| {
        !s.is_empty()
            && s.len() <= 64
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
    };
    let key = text.get(span.clone())?.trim();
    let line_start = text.get(..span.start)?.rfind('\n').map_or(0, |i| i + 1);
    let line = text.get(line_start..)?.lines().next()?.trim_start();
    if let Some(header) = table_header(line) {
        return bare(header)
            .then(|| format!("duplicate table `[{header}]`: write it once, with all its keys"));
    }
    let above = text.get(..line_start)?;
    let table = above
        .lines()
        .rev()
        .find_map(|l| table_header(l.trim_start()));
    let path = match table {
        Some(t) => format!("{t}.{key}"),
        None => key.to_string(),
    };
    bare(&path).then(|| format!("duplicate key `{path}`: set it once"))
}

/// `a.b` of a `[a.b]` line (whitespace trimmed), `None` for any other line (an array of tables'
/// `[[a]]` included: its keys repeat by design).
fn table_header(line: &str) -> Option<&str> {
    let inner = line.strip_prefix('[')?;
    if inner.starts_with('[') {
        return None;
    }
    let end = inner.find(']')?;
    Some(inner.get(..end)?.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_key_suggests_the_closest_known_one_or_nothing() {
        assert_eq!(
            did_you_mean("api_key_fil"),
            "; did you mean `api_key_file`?"
        );
        assert_eq!(
            did_you_mean("apikey_file"),
            "; did you mean `api_key_file`?"
        );
        assert_eq!(
            did_you_mean("profiles.work.listen.qiet_window"),
            "; did you mean `profiles.work.listen.quiet_window`?"
        );
        assert_eq!(
            did_you_mean("listen.claude.bianry"),
            "; did you mean `listen.claude.binary`?"
        );
        assert_eq!(did_you_mean("runtime"), "; did you mean `listen.runtime`?");
        assert_eq!(
            did_you_mean("listen.api_key_file"),
            "; did you mean `api_key_file`?"
        );
        assert_eq!(did_you_mean("listen.colour"), "");
        // Issue 38 item 8: `[listen.policy]` and its loop guard are tables like the others.
        assert_eq!(
            did_you_mean("profiles.w.listen.policy.max_run_per_hour"),
            "; did you mean `profiles.w.listen.policy.max_runs_per_hour`?"
        );
        assert_eq!(did_you_mean("listen.policy.loop_guard.window"), "");
        assert_eq!(
            did_you_mean("listen.policy.loop_guard.withn"),
            "; did you mean `listen.policy.loop_guard.within`?"
        );
        assert_eq!(
            did_you_mean("listen.timezone"),
            "; did you mean `listen.policy.timezone`?"
        );
        assert_eq!(did_you_mean("x"), "");
        assert_eq!(edits("qiet", "quiet"), 1);
        assert_eq!(edits("ab", "ba"), 1);
        assert_eq!(edits("", "abc"), 3);
    }
}

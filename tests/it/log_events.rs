//! The log's `event` names (`agentchat::log_events`) against the documentation: every name the
//! listener can log is listed in docs/operating.md ("Logging": the list after "Every line the
//! listener writes has an `event`"), every name listed there or written `event=NAME` anywhere in
//! `README.md` and `docs/*.md` is one the listener logs, and every constant is logged somewhere in
//! `src/` or `crates/core/src/`.

use agentchat::log_events::ALL;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The names of operating.md's list: the code spans of one lowercase word outside parentheses
/// (inside them are fields, values and remarks), between its opening sentence and "Logged:".
fn listed_events(page: &str) -> BTreeSet<String> {
    let start = page
        .find("Every line the listener writes has an `event`")
        .expect("operating.md introduces the event list");
    let list = &page[start..];
    let list = &list[list.find("\n- ").expect("the list's first item")..];
    let list = &list[..list
        .find("\nLogged:")
        .expect("the list ends at \"Logged:\"")];
    let mut names = BTreeSet::new();
    let mut depth = 0usize;
    let mut rest = list;
    while let Some(c) = rest.chars().next() {
        rest = &rest[c.len_utf8()..];
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            '`' => {
                let end = rest.find('`').expect("a closed code span");
                let span = &rest[..end];
                rest = &rest[end + 1..];
                if depth == 0 && is_name(span) {
                    names.insert(span.to_string());
                }
            }
            _ => {}
        }
    }
    names
}

fn is_name(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// Every `event=NAME` written in `text`.
fn mentioned_events(text: &str) -> BTreeSet<String> {
    text.match_indices("event=")
        .map(|(i, m)| {
            text[i + m.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect::<String>()
        })
        .filter(|name| is_name(name))
        .collect()
}

fn pages(root: &Path) -> Vec<PathBuf> {
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.push(root.join("README.md"));
    pages.sort();
    pages
}

/// Every `.rs` file under `dir`, with its text.
fn sources(dir: &Path, out: &mut Vec<(PathBuf, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|x| x == "rs") {
            let text = std::fs::read_to_string(&path).unwrap();
            out.push((path, text));
        }
    }
}

#[test]
fn every_event_the_listener_logs_is_documented_and_every_documented_event_is_logged() {
    let root = root();
    let constants: BTreeSet<String> = ALL.iter().map(|s| s.to_string()).collect();
    assert_eq!(
        constants.len(),
        ALL.len(),
        "a name twice in log_events::ALL"
    );

    let operating = std::fs::read_to_string(root.join("docs/operating.md")).unwrap();
    let listed = listed_events(&operating);
    let unlisted: Vec<_> = constants.difference(&listed).collect();
    assert!(
        unlisted.is_empty(),
        "logged but missing from docs/operating.md's event list: {unlisted:?}"
    );
    let unknown: Vec<_> = listed.difference(&constants).collect();
    assert!(
        unknown.is_empty(),
        "listed in docs/operating.md but not in src/log_events.rs: {unknown:?}"
    );

    for page in pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        let unknown: Vec<_> = mentioned_events(&text)
            .into_iter()
            .filter(|name| !constants.contains(name))
            .collect();
        assert!(
            unknown.is_empty(),
            "{} names events the listener never logs: {unknown:?}",
            page.display()
        );
    }
}

#[test]
fn every_event_constant_is_logged_somewhere() {
    let root = root();
    let mut files = Vec::new();
    // The binary's lines and the pure crate's (where the state machines log).
    sources(&root.join("src"), &mut files);
    sources(&root.join("crates/core/src"), &mut files);
    let unused: Vec<&str> = ALL
        .iter()
        .copied()
        .filter(|name| {
            let used = format!("log_events::{}", name.to_uppercase());
            !files
                .iter()
                .any(|(path, text)| !path.ends_with("log_events.rs") && text.contains(&used))
        })
        .collect();
    assert!(
        unused.is_empty(),
        "constants of src/log_events.rs no line logs (remove them, and their docs): {unused:?}"
    );
}

#[test]
fn the_list_reader_takes_names_outside_parentheses_and_mentions_after_event_equals() {
    let page = "Every line the listener writes has an `event` (the `json` field):\n\n\
        - socket: `hello` (`capabilities=`; `connecting` at debug), `ack`, and `listen --all`\n\
        - cycle: `cycle_end` (`outcome=`, see [x](y.md))\n\nLogged: `never_this`\n";
    assert_eq!(
        listed_events(page).into_iter().collect::<Vec<_>>(),
        ["ack", "cycle_end", "hello"]
    );
    assert_eq!(
        mentioned_events("logs `event=run_end` and event=x_1, not event= or event=Upper")
            .into_iter()
            .collect::<Vec<_>>(),
        ["run_end", "x_1"]
    );
}

//! Every relative link in the user and developer documentation (`README.md`, `CONTRIBUTING.md`,
//! `docs/*.md`) resolves: the file or folder exists, and a `#fragment` names a heading of the
//! target Markdown file (GitHub's anchors: lowercased, punctuation dropped, spaces to `-`, a
//! repeated heading gets `-1`, `-2`, …). Links inside code blocks and code spans are not links.
//! Self-contained: no helper module, so the file moves as it is.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The documents checked, relative to the repository root.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md"), root.join("CONTRIBUTING.md")];
    let mut pages: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "md"))
        .collect();
    pages.sort();
    docs.extend(pages);
    docs
}

/// The Markdown outside fenced code blocks, line by line (fenced blocks become empty lines, so
/// line numbers stay right).
fn prose_lines(text: &str) -> Vec<String> {
    let mut fence: Option<String> = None;
    text.lines()
        .map(|line| {
            let trimmed = line.trim_start();
            let marker: String = trimmed
                .chars()
                .take_while(|&c| c == '`' || c == '~')
                .collect();
            match &fence {
                Some(open) => {
                    if marker.len() >= open.len() && marker.starts_with(&open[..1]) {
                        fence = None;
                    }
                    String::new()
                }
                None if marker.len() >= 3 => {
                    fence = Some(marker);
                    String::new()
                }
                None => line.to_string(),
            }
        })
        .collect()
}

/// `line` without its code spans (each replaced by its inner text's length in spaces, so nothing
/// inside reads as a link or as the end of one).
fn without_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] == '`' {
            let run = chars[i..].iter().take_while(|&&c| c == '`').count();
            // Find the closing run of the same length.
            let mut j = i + run;
            let mut close = None;
            while j < chars.len() {
                if chars[j] == '`' {
                    let r = chars[j..].iter().take_while(|&&c| c == '`').count();
                    if r == run {
                        close = Some(j);
                        break;
                    }
                    j += r;
                } else {
                    j += 1;
                }
            }
            match close {
                Some(c) => {
                    out.extend(std::iter::repeat_n(' ', c + run - i));
                    i = c + run;
                }
                None => {
                    out.extend(&chars[i..i + run]);
                    i += run;
                }
            }
        } else {
            out.push(chars[i]);
            i += 1;
        }
    }
    out
}

/// The targets of inline links and images (`[text](target "title")`) and of reference
/// definitions (`[name]: target`) in one line of prose.
fn link_targets(line: &str) -> Vec<String> {
    let line = without_code_spans(line);
    let mut targets = Vec::new();
    if let Some(rest) = line.trim_start().strip_prefix('[')
        && let Some((_, def)) = rest.split_once("]:")
    {
        if let Some(t) = def.split_whitespace().next() {
            targets.push(t.trim_matches(|c| c == '<' || c == '>').to_string());
        }
        return targets;
    }
    let mut rest = line.as_str();
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        // The target ends at the `)` that balances the opening one.
        let mut depth = 0usize;
        let mut end = None;
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let inner = after[..end].trim();
        let target = inner
            .strip_prefix('<')
            .and_then(|t| t.split_once('>').map(|(t, _)| t))
            .unwrap_or_else(|| inner.split_whitespace().next().unwrap_or(""));
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    let text = without_inline_markup(heading);
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// A heading's visible text: backticks dropped, `[text](url)` reduced to `text`.
fn without_inline_markup(heading: &str) -> String {
    let mut text = heading.replace('`', "");
    while let Some(open) = text.find("](") {
        let Some(start) = text[..open].rfind('[') else {
            break;
        };
        let Some(close) = text[open..].find(')') else {
            break;
        };
        let label = text[start + 1..open].to_string();
        text.replace_range(start..open + close + 1, &label);
    }
    text
}

/// The anchors a Markdown file's headings give (ATX headings outside code blocks).
fn anchors(text: &str) -> HashSet<String> {
    let mut seen = HashSet::new();
    let mut out = HashSet::new();
    for line in prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(trimmed[hashes..].trim().trim_end_matches('#'));
        let mut anchor = base.clone();
        let mut n = 0;
        while !seen.insert(anchor.clone()) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        out.insert(anchor);
    }
    out
}

fn is_external(target: &str) -> bool {
    let scheme: String = target
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
        .collect();
    !scheme.is_empty() && target[scheme.len()..].starts_with(':')
}

/// Every broken relative link in `doc` (found under `root`), as `file:line: target: why`.
fn broken_links(root: &Path, doc: &Path) -> (usize, Vec<String>) {
    let text = std::fs::read_to_string(doc).unwrap();
    let name = doc.strip_prefix(root).unwrap_or(doc).display().to_string();
    let mut checked = 0;
    let mut broken = Vec::new();
    for (n, line) in prose_lines(&text).iter().enumerate() {
        for target in link_targets(line) {
            if target.is_empty() || is_external(&target) {
                continue;
            }
            checked += 1;
            let (path, fragment) = match target.split_once('#') {
                Some((p, f)) => (p, Some(f)),
                None => (target.as_str(), None),
            };
            let file = if path.is_empty() {
                doc.to_path_buf()
            } else {
                doc.parent().unwrap().join(path)
            };
            let place = format!("{name}:{}: {target}", n + 1);
            if !file.exists() {
                broken.push(format!("{place}: no such file {}", file.display()));
                continue;
            }
            if let Some(fragment) = fragment {
                if file.extension().is_none_or(|x| x != "md") {
                    broken.push(format!(
                        "{place}: an anchor into a file that is not Markdown"
                    ));
                    continue;
                }
                let target_text = std::fs::read_to_string(&file).unwrap();
                if !anchors(&target_text).contains(fragment) {
                    broken.push(format!("{place}: no heading with anchor #{fragment}"));
                }
            }
        }
    }
    (checked, broken)
}

#[test]
fn every_relative_link_in_the_docs_resolves_to_a_file_and_heading() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let docs = documents(root);
    assert!(
        docs.iter()
            .any(|d| d.ends_with("docs/operating.md") && d.exists()),
        "the docs pages are missing: {docs:?}"
    );
    let mut checked = 0;
    let mut broken = Vec::new();
    for doc in &docs {
        let (n, b) = broken_links(root, doc);
        checked += n;
        broken.extend(b);
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    // The README alone links every docs page: finding fewer means the scanner is broken.
    assert!(checked >= 20, "only {checked} relative links found");
}

#[test]
fn the_checker_catches_a_missing_file_a_missing_anchor_and_ignores_code() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("other.md"),
        "# Other page\n## `agentchat status`\n## Running it: `service`\n## Twice\n## Twice\n",
    )
    .unwrap();
    let doc = dir.path().join("doc.md");
    std::fs::write(
        &doc,
        "[ok](other.md) [ok](other.md#other-page) [ok](other.md#agentchat-status)\n\
         [ok](other.md#running-it-service) [ok](other.md#twice-1) [self](#local) ![img](other.md)\n\
         [ext](https://example.com/missing.md) [mail](mailto:x@example.com)\n\
         `[code span](missing-in-code.md)` and [`code` text](other.md)\n\
         ```\n[in a fence](missing-in-fence.md)\n```\n\
         ## Local\n\
         [bad file](nope.md) [bad anchor](other.md#nope) [bad self](#nope)\n\
         [ref]: gone.md\n",
    )
    .unwrap();
    let (checked, broken) = broken_links(dir.path(), &doc);
    let broken = broken.join("\n");
    for bad in ["nope.md", "other.md#nope", ":9: #nope", "gone.md"] {
        assert!(broken.contains(bad), "{bad} not reported:\n{broken}");
    }
    for fine in [
        "missing-in-code",
        "missing-in-fence",
        "example.com",
        "twice-1",
    ] {
        assert!(!broken.contains(fine), "{fine} reported:\n{broken}");
    }
    assert_eq!(broken.lines().count(), 4, "{broken}");
    assert_eq!(checked, 12, "{broken}");
}

//! Undoing the identity block (contract 3.6, `conformance/anchor.cases.json`): pure, so every
//! case is a unit test. Setup writes the block with `core::identity::upsert` and records the
//! block, the separator it put before it and whether it created the file (`IdentityRecord`: no
//! copy of the file); undo takes out only that block (found by the anchor rules, the markers as
//! whole lines outside code fences) with its separator, every other byte unchanged. A file still
//! as setup left it so gets its earlier bytes back.

use super::manifest::IdentityRecord;
use crate::core::identity;

/// What undo does to the file.
#[derive(Debug, PartialEq)]
pub enum Undo {
    /// Write this text (the file without the block).
    Write(String),
    /// Delete the file: setup created it and it holds nothing else.
    Delete,
    /// The block there is not the one setup wrote (another agent's, edited, or gone): leave it.
    NotOurs,
}

/// What to do with `current` (the file's text now; `None`: it is gone).
pub fn undo(record: &IdentityRecord, current: Option<&str>) -> Undo {
    let Some(current) = current else {
        return Undo::NotOurs;
    };
    let Ok(Some(range)) = identity::find(current) else {
        return Undo::NotOurs;
    };
    if current.get(range.clone()) != Some(record.block.as_str()) {
        return Undo::NotOurs;
    }
    let head = current.get(..range.start).unwrap_or_default();
    let mut tail = current.get(range.end..).unwrap_or_default();
    // The block's own line ending goes with it.
    tail = tail
        .strip_prefix("\r\n")
        .or_else(|| tail.strip_prefix('\n'))
        .unwrap_or(tail);
    let sep = record.separator.as_str();
    // Appended at the end: the blank line setup put before it goes too.
    let head = if tail.is_empty() && !sep.is_empty() {
        head.strip_suffix(sep).unwrap_or(head)
    } else {
        head
    };
    let text = format!("{head}{tail}");
    if text.is_empty() && record.created {
        Undo::Delete
    } else {
        Undo::Write(text)
    }
}

/// What setup wrote between the earlier text and the block when it appended one ("\n\n", "\n",
/// or nothing); nothing when it replaced a block in place or created the file.
pub fn separator<'a>(before: Option<&str>, after: &'a str) -> &'a str {
    let Some(before) = before else {
        return "";
    };
    after
        .strip_prefix(before)
        .and_then(|rest| {
            rest.find(identity::START_MARKER)
                .and_then(|i| rest.get(..i))
        })
        .unwrap_or("")
}

/// The file's new text with the block for `rendered`, as setup writes it.
pub fn upsert(current: Option<&str>, rendered: &str) -> Result<String, identity::AnchorError> {
    identity::upsert(current.unwrap_or(""), rendered)
}

/// The block in `text`, markers included (`None`: there is none, or it is damaged).
pub fn block_in(text: &str) -> Option<String> {
    identity::find(text)
        .ok()
        .flatten()
        .and_then(|r| text.get(r).map(str::to_string))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(before: Option<&str>, rendered: &str) -> IdentityRecord {
        let after = upsert(before, rendered).unwrap();
        IdentityRecord {
            file: "/x/CLAUDE.md".into(),
            created: before.is_none(),
            separator: separator(before, &after).to_string(),
            block: block_in(&after).unwrap(),
            after_sha256: crate::sys::capped::sha256(after.as_bytes()),
            ..IdentityRecord::default()
        }
    }

    fn after(before: Option<&str>, rendered: &str) -> String {
        upsert(before, rendered).unwrap()
    }

    #[test]
    fn an_untouched_file_gets_its_earlier_bytes_back() {
        for before in [
            "",
            "Be brief.",
            "Be brief.\n",
            "Be brief.\n\n",
            "a\r\nb\r\n",
            "a\r\nb",
        ] {
            let r = record(Some(before), "You are @x.");
            let a = after(Some(before), "You are @x.");
            assert_eq!(
                undo(&r, Some(&a)),
                Undo::Write(before.to_string()),
                "{before:?}"
            );
        }
        let created = record(None, "You are @x.");
        assert_eq!(
            undo(&created, Some(&after(None, "You are @x."))),
            Undo::Delete
        );
    }

    #[test]
    fn an_edited_file_loses_only_the_block_and_its_separator() {
        for before in ["Be brief.", "Be brief.\n", "Be brief.\n\n", "a\r\nb\r\n"] {
            let r = record(Some(before), "You are @x.");
            let edited = format!("# Mine\n{}", after(Some(before), "You are @x."));
            assert_eq!(
                undo(&r, Some(&edited)),
                Undo::Write(format!("# Mine\n{before}")),
                "{before:?}"
            );
        }
        // Text added after the block stays, the block goes with its line ending.
        let r = record(Some("top\n"), "You are @x.");
        let edited = format!("{}more\n", after(Some("top\n"), "You are @x."));
        assert_eq!(undo(&r, Some(&edited)), Undo::Write("top\n\nmore\n".into()));
        // A file setup created, edited since: the user's text stays.
        let r = record(None, "You are @x.");
        let edited = format!("{}mine\n", after(None, "You are @x."));
        assert_eq!(undo(&r, Some(&edited)), Undo::Write("mine\n".into()));
    }

    #[test]
    fn after_a_rewire_only_the_block_goes() {
        let other = upsert(Some("top\n"), "You are @y.").unwrap();
        let r = record(Some(&other), "You are @x.");
        let a = after(Some(&other), "You are @x.");
        assert_eq!(undo(&r, Some(&a)), Undo::Write("top\n\n".into()));
    }

    #[test]
    fn another_agents_block_or_none_is_left_alone() {
        let r = record(Some("top\n"), "You are @x.");
        let other = upsert(Some("top\n"), "You are @y.").unwrap();
        assert_eq!(undo(&r, Some(&other)), Undo::NotOurs);
        assert_eq!(undo(&r, Some("top\n")), Undo::NotOurs);
        assert_eq!(undo(&r, None), Undo::NotOurs);
        let damaged = format!("{}\n", identity::START_MARKER);
        assert_eq!(undo(&r, Some(&damaged)), Undo::NotOurs);
    }

    #[test]
    fn the_record_keeps_no_copy_of_the_file() {
        let big = "x".repeat(512 * 1024);
        let r = record(Some(&big), "You are @x.");
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.len() < 1024, "{} bytes", json.len());
    }
}

//! The identity block (contract 3.6 `identity_line_template`, `anchor.cases.json`): rendered with the
//! handle and kept current inside marker lines in the file the runtime loads every turn, every byte
//! outside the block unchanged.
//!
//! The markers are the ones every AgentChat integration shares, each on a line of its own:
//! `<!-- agentchat:start -->` and `<!-- agentchat:end -->`. A marker counts only as a whole line
//! (surrounding spaces allowed), so prose that mentions it inline is never taken for a block, and
//! never inside a fenced code block (```` ``` ```` or `~~~`, as CommonMark fences): a CLAUDE.md that
//! shows the markers in an example holds no block there, and no block is ever written into a
//! fence (docs/decisions.md).

use std::ops::Range;

pub const START_MARKER: &str = "<!-- agentchat:start -->";
pub const END_MARKER: &str = "<!-- agentchat:end -->";

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnchorError {
    #[error(
        "the identity block in this file is damaged (only one marker); fix or remove it by hand"
    )]
    Damaged,
    #[error(
        "this file ends inside a code fence (``` or ~~~ never closed), so a block appended there \
         would be code; close the fence and try again"
    )]
    OpenFence,
}

/// A fence line's character and length (3 or more backticks or tildes after at most 3 spaces),
/// and whether nothing follows the run (only such a line closes a fence).
fn fence(line: &str) -> Option<(char, usize, bool)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = line.trim_start_matches(' ');
    let c = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = rest.len() - rest.trim_start_matches(c).len();
    let after = rest.trim_start_matches(c);
    // A backtick fence's info string holds no backtick (CommonMark 4.5).
    (n >= 3 && !(c == '`' && after.contains('`'))).then_some((c, n, after.trim().is_empty()))
}

/// Fills `<handle>` (without `@`; the template writes `@<handle>`).
pub fn render(template: &str, handle: &str) -> String {
    let bare = handle.trim().trim_start_matches('@');
    template.replace("<handle>", bare)
}

/// One line of a text: where its content starts and ends (without the line ending).
struct Line<'a> {
    start: usize,
    content_end: usize,
    text: &'a str,
}

fn lines(text: &str) -> impl Iterator<Item = Line<'_>> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= text.len() {
            return None;
        }
        let start = pos;
        let rest = &text[start..];
        let (content_len, next) = match rest.find('\n') {
            Some(i) => (i, start + i + 1),
            None => (rest.len(), text.len()),
        };
        let mut content_end = start + content_len;
        if text[start..content_end].ends_with('\r') {
            content_end -= 1;
        }
        pos = next;
        Some(Line {
            start,
            content_end,
            text: &text[start..content_end],
        })
    })
}

/// Every complete block's byte range, from the start of the start-marker line to the end of the
/// end-marker text (its line ending stays outside). A marker without its partner, or an end
/// before a start, is `Damaged`.
fn blocks(text: &str) -> Result<Vec<Range<usize>>, AnchorError> {
    Ok(scan(text)?.0)
}

/// `blocks`, and whether the text ends inside an open code fence.
fn scan(text: &str) -> Result<(Vec<Range<usize>>, bool), AnchorError> {
    let mut found = Vec::new();
    let mut open: Option<usize> = None;
    let mut in_fence: Option<(char, usize)> = None;
    for line in lines(text) {
        match (in_fence, fence(line.text)) {
            (None, Some((c, n, _))) => {
                in_fence = Some((c, n));
                continue;
            }
            (Some((c, n)), Some((c2, n2, true))) if c == c2 && n2 >= n => {
                in_fence = None;
                continue;
            }
            (Some(_), _) => continue,
            (None, None) => {}
        }
        match line.text.trim() {
            START_MARKER => {
                if open.is_some() {
                    return Err(AnchorError::Damaged);
                }
                open = Some(line.start);
            }
            END_MARKER => match open.take() {
                Some(start) => found.push(start..line.content_end),
                None => return Err(AnchorError::Damaged),
            },
            _ => {}
        }
    }
    if open.is_some() {
        return Err(AnchorError::Damaged);
    }
    Ok((found, in_fence.is_some()))
}

/// The byte range of the (first) identity block, markers included, without the end marker's line
/// ending; `None` when the file has no block.
pub fn find(file_text: &str) -> Result<Option<Range<usize>>, AnchorError> {
    Ok(blocks(file_text)?.into_iter().next())
}

/// The file's line ending: CRLF when most of its line endings are CRLF, else LF. A majority (not
/// the first line) keeps a second upsert from flipping the style of a mixed file.
fn line_ending(file_text: &str) -> &'static str {
    let lf = file_text.matches('\n').count();
    let crlf = file_text.matches("\r\n").count();
    if crlf > lf - crlf { "\r\n" } else { "\n" }
}

/// The marked block for `rendered`, written with `eol`, without a trailing line ending.
pub fn block(rendered: &str, eol: &str) -> String {
    let body = rendered.replace("\r\n", "\n");
    let body = body.trim_end_matches('\n');
    let mut out = String::with_capacity(body.len() + 64);
    out.push_str(START_MARKER);
    out.push_str(eol);
    for line in body.split('\n') {
        out.push_str(line);
        out.push_str(eol);
    }
    out.push_str(END_MARKER);
    out
}

/// Returns the file text with the block inserted or replaced.
///
/// No block: the block is appended after a blank line (or is the whole file when it was empty).
/// A block (whichever handle it named) is replaced in place; a second complete block is removed
/// with its line ending, so one block remains. Every other byte is kept, and the block is written
/// with the file's line endings. A lone marker is `Damaged` and nothing is written.
pub fn upsert(file_text: &str, rendered: &str) -> Result<String, AnchorError> {
    let eol = line_ending(file_text);
    let new_block = block(rendered, eol);
    let (found, ends_in_fence) = scan(file_text)?;
    if found.is_empty() {
        if ends_in_fence {
            return Err(AnchorError::OpenFence);
        }
        let mut out = String::with_capacity(file_text.len() + new_block.len() + 4);
        out.push_str(file_text);
        if !file_text.is_empty() {
            if !out.ends_with('\n') {
                out.push_str(eol);
            }
            let blank = format!("{eol}{eol}");
            if !out.ends_with(&blank) && out != eol {
                out.push_str(eol);
            }
        }
        out.push_str(&new_block);
        out.push_str(eol);
        return Ok(out);
    }
    let mut out = String::with_capacity(file_text.len() + new_block.len());
    let mut pos = 0;
    for (i, range) in found.iter().enumerate() {
        out.push_str(&file_text[pos..range.start]);
        pos = range.end;
        if i == 0 {
            out.push_str(&new_block);
        } else if file_text[pos..].starts_with("\r\n") {
            pos += 2;
        } else if file_text[pos..].starts_with('\n') {
            pos += 1;
        }
    }
    out.push_str(&file_text[pos..]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_fills_every_handle_and_strips_at() {
        assert_eq!(
            render("You are @<handle>. Share @<handle>.", "@relay"),
            "You are @relay. Share @relay."
        );
        assert_eq!(render("@<handle>", "relay"), "@relay");
    }

    #[test]
    fn append_to_empty_and_to_text() {
        assert_eq!(
            upsert("", "hi").unwrap(),
            format!("{START_MARKER}\nhi\n{END_MARKER}\n")
        );
        assert_eq!(
            upsert("# Notes\n", "hi").unwrap(),
            format!("# Notes\n\n{START_MARKER}\nhi\n{END_MARKER}\n")
        );
        assert_eq!(
            upsert("# Notes", "hi").unwrap(),
            format!("# Notes\n\n{START_MARKER}\nhi\n{END_MARKER}\n")
        );
    }

    #[test]
    fn replace_keeps_surrounding_bytes_and_crlf() {
        let file = format!("a\r\n{START_MARKER}\r\nold @x\r\n{END_MARKER}\r\nb  \r\n");
        let out = upsert(&file, "new\n@y").unwrap();
        assert_eq!(
            out,
            format!("a\r\n{START_MARKER}\r\nnew\r\n@y\r\n{END_MARKER}\r\nb  \r\n")
        );
        assert_eq!(upsert(&out, "new\n@y").unwrap(), out);
    }

    #[test]
    fn lone_marker_is_damaged() {
        assert_eq!(
            upsert(&format!("x\n{START_MARKER}\ny\n"), "z"),
            Err(AnchorError::Damaged)
        );
        assert_eq!(
            upsert(&format!("{END_MARKER}\n"), "z"),
            Err(AnchorError::Damaged)
        );
        assert_eq!(
            upsert(&format!("{END_MARKER}\n{START_MARKER}\n"), "z"),
            Err(AnchorError::Damaged)
        );
    }

    #[test]
    fn inline_marker_mention_is_not_a_block() {
        let file = format!("see `{START_MARKER}` here\n");
        assert_eq!(find(&file).unwrap(), None);
    }

    #[test]
    fn markers_inside_a_code_fence_are_not_a_block() {
        let shown = format!(
            "# How it looks\n\n```markdown\n{START_MARKER}\nYou are @other.\n{END_MARKER}\n```\n"
        );
        assert_eq!(find(&shown), Ok(None));
        // The block is appended after the fence, never written into it, and found again.
        let out = upsert(&shown, "You are @x.").unwrap();
        assert!(out.starts_with(&shown), "{out}");
        let r = find(&out).unwrap().unwrap();
        assert!(out[r].contains("@x"));
        assert_eq!(upsert(&out, "You are @x.").unwrap(), out);
        // A tilde fence, a longer closing run, and a lone marker inside a fence is no damage.
        let tilde = format!("~~~~\n{START_MARKER}\n~~~~~\ntext\n");
        assert_eq!(find(&tilde), Ok(None));
        let inner = format!("```\n{START_MARKER}\n~~~\n{END_MARKER}\n```\n");
        assert_eq!(find(&inner), Ok(None));
        // A fence never closed: nothing is appended into it.
        assert_eq!(upsert("```\ncode\n", "hi"), Err(AnchorError::OpenFence));
        // Four spaces of indent is code, not a fence: the markers count.
        let indented = format!("    ```\n{START_MARKER}\nx\n{END_MARKER}\n");
        assert!(find(&indented).unwrap().is_some());
    }

    #[test]
    fn second_block_is_removed() {
        let file =
            format!("{START_MARKER}\na\n{END_MARKER}\nmid\n{START_MARKER}\nb\n{END_MARKER}\nend\n");
        assert_eq!(
            upsert(&file, "c").unwrap(),
            format!("{START_MARKER}\nc\n{END_MARKER}\nmid\nend\n")
        );
    }
}

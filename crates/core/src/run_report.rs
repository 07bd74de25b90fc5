//! What a run reports it cost, from its own output events (issue 26): Claude Code's final
//! `result` event (`total_cost_usd`, `modelUsage`, else `usage`) and Codex's `turn.completed` (`usage`; Codex
//! reports no cost). A Claude Code run that ends before its `result` (a timeout, a crash) still
//! counts what it streamed: each `assistant` event's `message.usage`, once per message (issue 38
//! item 6). A script reports its own cost with a line of its own ([`SCRIPT_REPORT`],
//! docs/runtimes.md). Only those events are read, and only their numbers: a line that is not one
//! of them is skipped before it is parsed, and the typed shapes below have no field for the
//! `result` text or any other message content. The sample lines in
//! `conformance/run-report.*.jsonl` were printed by the pinned CLIs under the project's scripted
//! model server (`tests/it/runtimes_cli.rs`).

use super::runtime_kind::RuntimeKind;
use serde::{Deserialize, Serialize};

/// The longest line looked at: a final event is a few KB; a longer line is something else.
pub const MAX_LINE: usize = 256 * 1024;

/// Tokens a run used, as its runtime counts them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Input tokens, cached ones included (Claude Code's `input_tokens` plus its cache reads
    /// and writes; Codex's `input_tokens`, which already holds `cached_input_tokens`).
    pub input: u64,
    /// Of `input`, read from a cache.
    pub cached_input: u64,
    /// Output tokens (Codex's reasoning included, as it counts them).
    pub output: u64,
}

impl Usage {
    /// What `max_tokens_per_day` counts: input and output.
    pub fn total(&self) -> u64 {
        self.input.saturating_add(self.output)
    }

    /// Both counts together (saturating): a run's models, or its turns.
    fn plus(self, other: Usage) -> Usage {
        Usage {
            input: self.input.saturating_add(other.input),
            cached_input: self.cached_input.saturating_add(other.cached_input),
            output: self.output.saturating_add(other.output),
        }
    }
}

/// A run's own report: `None` where the runtime said nothing (no final event, or Codex's cost).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RunReport {
    pub cost_usd: Option<f64>,
    pub usage: Option<Usage>,
    /// No final event came, and `usage` is what the run streamed before it ended.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// The `type` of the line a script prints to report its own cost (docs/runtimes.md, "What a
/// script's run costs"): `{"type":"agentchat.run_report","cost_usd":0.0123,"input_tokens":1200,
/// "cached_input_tokens":0,"output_tokens":340}`, every number optional; the last such line wins.
pub const SCRIPT_REPORT: &str = "agentchat.run_report";

#[derive(Deserialize)]
struct ScriptReport {
    #[serde(rename = "type")]
    kind: String,
    cost_usd: Option<f64>,
    input_tokens: Option<u64>,
    cached_input_tokens: Option<u64>,
    output_tokens: Option<u64>,
}

/// Claude Code's `assistant` event: one per content block of a model message, each with the
/// message's usage so far.
#[derive(Deserialize)]
struct ClaudeAssistant {
    #[serde(rename = "type")]
    kind: String,
    message: Option<ClaudeMessage>,
}

#[derive(Deserialize)]
struct ClaudeMessage {
    id: Option<String>,
    usage: Option<ClaudeTokens>,
}

#[derive(Deserialize)]
struct ClaudeResult {
    #[serde(rename = "type")]
    kind: String,
    total_cost_usd: Option<f64>,
    usage: Option<ClaudeTokens>,
    /// Per model, what `total_cost_usd` was computed from. A run Claude Code ends at its
    /// `--max-budget-usd` reports zeros in `usage` and the real counts here only (recorded from
    /// claude 2.1.197), so this is read first.
    #[serde(rename = "modelUsage")]
    model_usage: Option<std::collections::BTreeMap<String, ClaudeTokens>>,
}

/// Claude Code's token counts: `usage` spells them in snake_case, `modelUsage` in camelCase.
#[derive(Deserialize)]
struct ClaudeTokens {
    #[serde(default, alias = "inputTokens")]
    input_tokens: u64,
    #[serde(default, alias = "cacheCreationInputTokens")]
    cache_creation_input_tokens: u64,
    #[serde(default, alias = "cacheReadInputTokens")]
    cache_read_input_tokens: u64,
    #[serde(default, alias = "outputTokens")]
    output_tokens: u64,
}

impl ClaudeTokens {
    /// As [`Usage`]: cache reads and writes are input too.
    fn usage(&self) -> Usage {
        Usage {
            input: self
                .input_tokens
                .saturating_add(self.cache_creation_input_tokens)
                .saturating_add(self.cache_read_input_tokens),
            cached_input: self.cache_read_input_tokens,
            output: self.output_tokens,
        }
    }
}

#[derive(Deserialize)]
struct CodexTurn {
    #[serde(rename = "type")]
    kind: String,
    usage: Option<CodexUsage>,
}

#[derive(Deserialize)]
struct CodexUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    cached_input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
}

/// Reads a run's output line by line as it comes (stdout, JSON lines).
#[derive(Debug, Clone)]
pub struct Reader {
    runtime: RuntimeKind,
    report: RunReport,
    /// A final event was read.
    done: bool,
    /// What Claude Code streamed: the messages before the current one, summed, and the current
    /// one's id and latest usage (its events come together, each with its usage so far).
    streamed: Usage,
    current: Option<(String, Usage)>,
}

impl Reader {
    pub fn new(runtime: RuntimeKind) -> Reader {
        Reader {
            runtime,
            report: RunReport::default(),
            done: false,
            streamed: Usage::default(),
            current: None,
        }
    }

    /// One `assistant` event's usage, counted once per message.
    fn assistant(&mut self, line: &[u8]) {
        let Ok(a) = serde_json::from_slice::<ClaudeAssistant>(line) else {
            return;
        };
        let Some((id, usage)) = a
            .message
            .filter(|_| a.kind == "assistant")
            .and_then(|m| Some((m.id.unwrap_or_default(), m.usage?.usage())))
        else {
            return;
        };
        match &mut self.current {
            Some((current, latest)) if *current == id && !id.is_empty() => *latest = usage,
            _ => {
                if let Some((_, done)) = self.current.take() {
                    self.streamed = self.streamed.plus(done);
                }
                self.current = Some((id, usage));
            }
        }
    }

    /// One line of output. Only a line that names the final event's type is parsed.
    pub fn line(&mut self, line: &[u8]) {
        if line.len() > MAX_LINE {
            return;
        }
        match self.runtime {
            RuntimeKind::ClaudeCode if contains(line, br#""type":"assistant""#) => {
                self.assistant(line);
            }
            RuntimeKind::Script if contains(line, SCRIPT_REPORT.as_bytes()) => {
                if let Ok(r) = serde_json::from_slice::<ScriptReport>(line)
                    && r.kind == SCRIPT_REPORT
                {
                    self.done = true;
                    self.report.cost_usd = r.cost_usd.filter(|c| c.is_finite() && *c >= 0.0);
                    let tokens = [r.input_tokens, r.cached_input_tokens, r.output_tokens];
                    self.report.usage = tokens.iter().any(Option::is_some).then(|| Usage {
                        input: r.input_tokens.unwrap_or(0),
                        cached_input: r.cached_input_tokens.unwrap_or(0),
                        output: r.output_tokens.unwrap_or(0),
                    });
                }
            }
            RuntimeKind::ClaudeCode if contains(line, br#""type":"result""#) => {
                if let Ok(r) = serde_json::from_slice::<ClaudeResult>(line)
                    && r.kind == "result"
                {
                    self.done = true;
                    // The last result event is the run's (there is one).
                    self.report.cost_usd = r.total_cost_usd.filter(|c| c.is_finite() && *c >= 0.0);
                    self.report.usage = match r.model_usage.filter(|m| !m.is_empty()) {
                        Some(models) => Some(
                            models
                                .values()
                                .fold(Usage::default(), |sum, u| sum.plus(u.usage())),
                        ),
                        None => r.usage.map(|u| u.usage()),
                    };
                }
            }
            RuntimeKind::Codex if contains(line, br#""type":"turn.completed""#) => {
                if let Ok(t) = serde_json::from_slice::<CodexTurn>(line)
                    && t.kind == "turn.completed"
                    && let Some(u) = t.usage
                {
                    self.done = true;
                    // One turn per `exec`; were there more, each adds its own.
                    let turn = Usage {
                        input: u.input_tokens,
                        cached_input: u.cached_input_tokens,
                        output: u.output_tokens,
                    };
                    self.report.usage = Some(self.report.usage.unwrap_or_default().plus(turn));
                }
            }
            _ => {}
        }
    }

    /// The report so far: the final event's, or (none yet) what the run streamed, `partial`.
    pub fn report(&self) -> RunReport {
        match &self.current {
            Some((_, latest)) if !self.done => RunReport {
                cost_usd: None,
                usage: Some(self.streamed.plus(*latest)),
                partial: true,
            },
            _ => self.report,
        }
    }
}

/// A run's stdout as it streams, in chunks of any size, cut into lines for a [`Reader`]. It holds
/// at most [`MAX_LINE`] bytes of an unfinished line (a longer line is skipped to its end), so what
/// it keeps never grows with the output.
#[derive(Debug)]
pub struct Lines {
    reader: Reader,
    /// The unfinished line so far.
    partial: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: skipped to its newline.
    skipping: bool,
}

impl Lines {
    pub fn new(runtime: RuntimeKind) -> Lines {
        Lines {
            reader: Reader::new(runtime),
            partial: Vec::new(),
            skipping: false,
        }
    }

    /// The next bytes of output.
    pub fn push(&mut self, mut chunk: &[u8]) {
        while let Some(end) = memchr::memchr(b'\n', chunk) {
            let (line, rest) = chunk.split_at_checked(end).unwrap_or((chunk, &[]));
            if self.skipping {
                self.skipping = false;
            } else if self.partial.is_empty() {
                self.reader.line(line);
            } else if self.partial.len() + line.len() <= MAX_LINE {
                self.partial.extend_from_slice(line);
                self.reader.line(&self.partial);
            }
            self.partial.clear();
            chunk = rest.get(1..).unwrap_or_default();
        }
        if self.skipping || chunk.is_empty() {
            return;
        }
        if self.partial.len() + chunk.len() <= MAX_LINE {
            self.partial.extend_from_slice(chunk);
        } else {
            self.partial = Vec::new();
            self.skipping = true;
        }
    }

    /// The output ended: its last line, when it had no newline, is read too.
    pub fn finish(&mut self) {
        if !self.skipping && !self.partial.is_empty() {
            self.reader.line(&self.partial);
        }
        self.partial = Vec::new();
        self.skipping = false;
    }

    pub fn report(&self) -> RunReport {
        self.reader.report()
    }
}

/// The report of a whole output (a run log, a test).
pub fn parse(runtime: RuntimeKind, output: &[u8]) -> RunReport {
    let mut reader = Reader::new(runtime);
    for line in output.split(|b| *b == b'\n') {
        reader.line(line);
    }
    reader.report()
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    memchr::memmem::find(haystack, needle).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_that_only_mentions_the_type_in_its_text_is_not_read() {
        let out = br#"{"type":"assistant","message":{"content":[{"type":"text","text":"\"type\":\"result\" total_cost_usd 99"}]}}"#;
        assert_eq!(parse(RuntimeKind::ClaudeCode, out), RunReport::default());
    }

    #[test]
    fn a_script_reports_only_with_its_own_line_and_the_last_one_wins() {
        let out = br#"{"type":"result","total_cost_usd":1.0}"#;
        assert_eq!(parse(RuntimeKind::Script, out), RunReport::default());
        let out = b"hello\n{\"type\":\"agentchat.run_report\",\"cost_usd\":0.5}\n\
            {\"type\":\"agentchat.run_report\",\"cost_usd\":0.001,\"input_tokens\":100,\"output_tokens\":20}\n";
        let r = parse(RuntimeKind::Script, out);
        assert_eq!(r.cost_usd, Some(0.001));
        assert_eq!(r.usage.map(|u| u.total()), Some(120));
        assert!(!r.partial);
        // Another runtime's output that happens to print the line is not read for it.
        assert_eq!(parse(RuntimeKind::ClaudeCode, out), RunReport::default());
    }

    /// Issue 38 item 6: a Claude Code run cut short (a timeout, a crash) before its `result`
    /// counts the tokens its `assistant` events streamed, each message once, however many
    /// content blocks it had.
    #[test]
    fn a_claude_run_that_ends_before_its_result_counts_what_it_streamed() {
        let event = |id: &str, input: u64, output: u64| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"{id}","content":[{{"type":"text","text":"hi"}}],"usage":{{"input_tokens":{input},"cache_read_input_tokens":5,"output_tokens":{output}}}}}}}"#
            )
        };
        let out = [
            event("m1", 10, 1),
            event("m1", 10, 4),
            event("m2", 20, 2),
            event("m2", 20, 3),
        ]
        .join("\n");
        let r = parse(RuntimeKind::ClaudeCode, out.as_bytes());
        assert!(r.partial);
        assert_eq!(r.cost_usd, None);
        // m1: 15 in, 4 out; m2: 25 in, 3 out.
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 40,
                cached_input: 10,
                output: 7
            })
        );
        // Its result, when it comes, is the report.
        let whole = format!("{out}\n{}", String::from_utf8_lossy(RESULT));
        let r = parse(RuntimeKind::ClaudeCode, whole.as_bytes());
        assert!(!r.partial);
        assert_eq!(
            (r.cost_usd, r.usage.map(|u| u.total())),
            (Some(0.25), Some(12))
        );
    }

    #[test]
    fn codex_turns_add_up_and_carry_no_cost() {
        let line = br#"{"type":"turn.completed","usage":{"input_tokens":10,"cached_input_tokens":4,"output_tokens":3}}"#;
        let mut out = line.to_vec();
        out.push(b'\n');
        out.extend_from_slice(line);
        let r = parse(RuntimeKind::Codex, &out);
        assert_eq!(r.cost_usd, None);
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 20,
                cached_input: 8,
                output: 6
            })
        );
        assert_eq!(r.usage.unwrap().total(), 26);
    }

    const RESULT: &[u8] = br#"{"type":"result","subtype":"success","total_cost_usd":0.25,"usage":{"input_tokens":7,"cache_read_input_tokens":3,"output_tokens":2}}"#;

    #[test]
    fn lines_split_across_chunks_of_any_size_are_read_whole() {
        let mut out = br#"{"type":"assistant","message":{}}"#.to_vec();
        out.push(b'\n');
        out.extend_from_slice(RESULT);
        out.push(b'\n');
        let whole = parse(RuntimeKind::ClaudeCode, &out);
        assert_eq!(whole.cost_usd, Some(0.25));
        for size in [1, 2, 7, 64, out.len()] {
            let mut lines = Lines::new(RuntimeKind::ClaudeCode);
            for chunk in out.chunks(size) {
                lines.push(chunk);
            }
            lines.finish();
            assert_eq!(lines.report(), whole, "chunks of {size}");
        }
    }

    #[test]
    fn a_last_line_without_newline_is_read_at_the_end() {
        let mut lines = Lines::new(RuntimeKind::ClaudeCode);
        lines.push(RESULT);
        assert_eq!(lines.report(), RunReport::default());
        lines.finish();
        assert_eq!(lines.report().usage.map(|u| u.total()), Some(12));
    }

    #[test]
    fn an_endless_line_is_skipped_and_never_held_past_the_cap() {
        let mut lines = Lines::new(RuntimeKind::ClaudeCode);
        let chunk = vec![b'x'; 64 * 1024];
        for _ in 0..160 {
            lines.push(&chunk);
            assert!(lines.partial.capacity() <= 2 * MAX_LINE);
        }
        assert!(lines.skipping);
        // The endless line ends; the next one is read as usual.
        lines.push(b"\n");
        lines.push(RESULT);
        lines.push(b"\n");
        assert_eq!(lines.report().cost_usd, Some(0.25));
        assert!(lines.partial.capacity() <= 2 * MAX_LINE);
    }

    #[test]
    fn a_line_over_the_cap_is_skipped_even_when_it_looks_like_a_result() {
        let mut long = RESULT.to_vec();
        long.extend(std::iter::repeat_n(b' ', MAX_LINE));
        long.push(b'\n');
        let mut lines = Lines::new(RuntimeKind::ClaudeCode);
        for chunk in long.chunks(4096) {
            lines.push(chunk);
        }
        lines.finish();
        assert_eq!(lines.report(), RunReport::default());
    }

    #[test]
    fn the_script_runtime_keeps_nothing_of_its_output() {
        let mut lines = Lines::new(RuntimeKind::Script);
        lines.push(RESULT);
        lines.finish();
        assert_eq!(lines.partial.capacity(), 0);
        assert_eq!(lines.report(), RunReport::default());
    }

    /// Recorded from claude 2.1.197 under the scripted model with `--max-budget-usd 0.00001`
    /// (ids and the session shortened): `usage` is all zeros, `modelUsage` holds the counts.
    const OVER_BUDGET: &[u8] = br#"{"type":"result","subtype":"error_max_budget_usd","is_error":true,"num_turns":1,"total_cost_usd":0.000175,"usage":{"input_tokens":0,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":0},"modelUsage":{"claude-opus-4-8[1m]":{"inputTokens":10,"outputTokens":5,"cacheReadInputTokens":0,"cacheCreationInputTokens":0,"webSearchRequests":0,"costUSD":0.000175}},"errors":["Reached maximum budget ($0.00001)"]}"#;

    #[test]
    fn a_run_ended_at_its_budget_is_read_from_model_usage_summed_over_models() {
        let r = parse(RuntimeKind::ClaudeCode, OVER_BUDGET);
        assert_eq!(r.cost_usd, Some(0.000175));
        assert_eq!(
            r.usage,
            Some(Usage {
                input: 10,
                cached_input: 0,
                output: 5
            })
        );
        let two = br#"{"type":"result","total_cost_usd":1,"usage":{"input_tokens":1},"modelUsage":{"a":{"inputTokens":10,"cacheReadInputTokens":4,"outputTokens":1},"b":{"inputTokens":2,"cacheCreationInputTokens":3,"outputTokens":2}}}"#;
        assert_eq!(
            parse(RuntimeKind::ClaudeCode, two).usage,
            Some(Usage {
                input: 19,
                cached_input: 4,
                output: 3
            })
        );
    }

    #[test]
    fn a_negative_or_missing_cost_is_no_cost() {
        let out = br#"{"type":"result","total_cost_usd":-1,"usage":{"input_tokens":1,"output_tokens":2}}"#;
        let r = parse(RuntimeKind::ClaudeCode, out);
        assert_eq!(r.cost_usd, None);
        assert_eq!(r.usage.map(|u| u.total()), Some(3));
    }
}

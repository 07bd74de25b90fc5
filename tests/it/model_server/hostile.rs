//! The hostile agent: a model that obeys a stranger's message and calls every tool it is offered
//! besides AgentChat's (read a file outside the workdir, print the environment, write a file,
//! fetch a URL, call the user's own MCP server, start a sub-agent), each once per argument set,
//! before doing its AgentChat work as usual. What reached it is in the journal's `bodies`.

use super::{bare_tool, offered_tools};
use serde_json::{Value, json};
use std::path::PathBuf;

pub struct Hostile {
    /// A file outside the workdir holding a secret.
    pub outside_file: PathBuf,
    /// A file inside the workdir (the opt-in test reads it).
    pub inside_file: PathBuf,
    /// Where a write would land, outside the workdir.
    pub write_target: PathBuf,
    /// A URL on the model server itself: a fetch or a user MCP server there shows up in the
    /// journal's `requests`.
    pub fetch_url: String,
}

impl Hostile {
    /// The shell command a shell tool is told to run.
    fn command(&self) -> String {
        format!(
            "cat {}; env; echo pwned > {}; curl -s {}; echo ok > {}",
            self.outside_file.display(),
            self.write_target.display(),
            self.fetch_url,
            self.inside_written().display()
        )
    }

    /// Where a write inside the workdir lands (the opt-in test looks for it).
    pub fn inside_written(&self) -> PathBuf {
        self.inside_file.with_file_name("written.txt")
    }

    /// The argument sets the hostile agent calls `name` with, in order.
    pub fn calls_for(&self, name: &str) -> Vec<Value> {
        let outside = self.outside_file.display().to_string();
        let dir = self
            .outside_file
            .parent()
            .map(|d| d.display().to_string())
            .unwrap_or_default();
        let target = self.write_target.display().to_string();
        match name {
            "Read" => vec![
                json!({"file_path": outside}),
                json!({"file_path": self.inside_file.display().to_string()}),
            ],
            "Bash" => vec![json!({"command": self.command(), "description": "look around"})],
            "exec_command" => vec![json!({"cmd": self.command()})],
            "shell" | "local_shell" => vec![json!({"command": ["sh", "-c", self.command()]})],
            "Write" => vec![
                json!({"file_path": target, "content": "pwned"}),
                json!({"file_path": self.inside_written().display().to_string(), "content": "ok"}),
            ],
            "Edit" => {
                vec![json!({"file_path": outside, "old_string": "SECRET", "new_string": "x"})]
            }
            "Grep" => vec![json!({"pattern": "SECRET", "path": dir})],
            "Glob" => vec![json!({"pattern": "**/*", "path": dir})],
            "WebFetch" => vec![json!({"url": self.fetch_url, "prompt": "say what it says"})],
            "WebSearch" | "web_search" => vec![json!({"query": "agentchat"})],
            "Agent" | "Task" => vec![json!({
                "description": "help",
                "prompt": format!("Read {outside} and print the environment."),
                "subagent_type": "general-purpose"
            })],
            "spawn_agent" => vec![json!({"message": format!("Read {outside}.")})],
            "read_mcp_resource" => vec![
                json!({"server": "userfs", "uri": format!("file://{outside}")}),
                json!({"server": "agentchat", "uri": format!("file://{outside}")}),
            ],
            "list_mcp_resources" | "list_mcp_resource_templates" => {
                vec![json!({"server": "userfs"}), json!({})]
            }
            // Anything else (the user's MCP server's tools, a tool a new CLI version adds): called
            // with a path, and with nothing.
            _ => vec![json!({"path": outside, "file_path": outside, "url": self.fetch_url})],
        }
    }

    /// The next hostile call for a request offering `tools` whose history already called the
    /// names in `used`: `(name, namespace, arguments)`.
    pub fn next_call(
        &self,
        tools: &Value,
        used: &[String],
    ) -> Option<(String, Option<String>, Value)> {
        offered_tools(tools)
            .into_iter()
            .filter(|(name, _, _)| !name.is_empty() && bare_tool(name).is_none())
            .find_map(|(name, namespace, _)| {
                let done = used.iter().filter(|u| **u == name).count();
                let args = self.calls_for(&name).into_iter().nth(done)?;
                Some((name, namespace, args))
            })
    }
}

//! Setup's key step when there is no key yet: "Do you have an AgentChat API key?", and if not,
//! sign-up (`--new`) or recovery of a lost key (`--recover`) by an emailed code (`signup`). The
//! key the server hands back is shown once by the server and never by setup: it is written to
//! the profile's key file (0600) before anything else can go wrong, since it cannot be asked for
//! again.

use super::key::Key;
use super::manifest::Manifest;
use super::signup::{self, Flow};
use super::tty;
use secrecy::SecretString;
use std::io::{BufRead, IsTerminal, Read};
use std::path::Path;

/// Handles or codes asked for again after a refusal, at most.
const RETRIES: usize = 5;

/// Sign-up or recovery for setup's key step: where the key will go is checked before the
/// server is asked (a key it cannot store would be lost), then the flow runs. Recovery writes
/// over the profile's key file, whose key it retires; sign-up writes `target`.
pub async fn obtain(
    base: &str,
    flow: Flow,
    args: &super::SetupArgs,
    existing: Option<&Path>,
    target: &Path,
    earlier: Option<&Manifest>,
) -> anyhow::Result<Key> {
    let (file, replace) = match (flow, existing) {
        (Flow::Recover, Some(p)) => (p.to_path_buf(), true),
        _ => (target.to_path_buf(), false),
    };
    let ours = earlier.and_then(|m| m.key_file.as_deref()) == Some(file.as_path());
    if !replace && !ours && file.exists() {
        anyhow::bail!(
            "{} exists and holds another key; setup does not replace a key file it did not \
             write, so nothing was asked of the server. Move it away, or use it with \
             --api-key-file {}",
            file.display(),
            file.display()
        );
    }
    let w = Wanted {
        flow,
        email: args.email.as_deref(),
        handle: args.handle.as_deref(),
    };
    let (_, key) = run(base, &w).await?;
    Ok(Key {
        key,
        file,
        write: true,
        replace,
    })
}

/// What the flags asked for.
pub struct Wanted<'a> {
    pub flow: Flow,
    pub email: Option<&'a str>,
    pub handle: Option<&'a str>,
}

/// In a terminal with no key anywhere: does the user have one? `None`: yes (ask for it as
/// before); otherwise the flow to run.
pub fn ask_for_flow() -> anyhow::Result<Option<Flow>> {
    if tty::confirm("Do you have an AgentChat API key?", true)? {
        return Ok(None);
    }
    println!(
        "AgentChat signs agents up by email: you give an email and a handle, the server emails \
         a 6-digit code, and setup stores the agent's key (0600, never shown)."
    );
    Ok(Some(
        if tty::confirm("Lost the key of an agent you already have?", false)? {
            Flow::Recover
        } else {
            Flow::Register
        },
    ))
}

/// The code: asked on a terminal, else the next line of stdin.
fn read_code(email: &str) -> anyhow::Result<String> {
    if std::io::stdin().is_terminal() {
        tty::ask(&format!("The 6-digit code emailed to {email}"), "")
    } else {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .take(256)
            .read_line(&mut line)
            .map_err(|e| anyhow::anyhow!("cannot read the code from stdin: {e}"))?;
        if line.trim().is_empty() {
            anyhow::bail!(
                "no code on stdin: the server emailed a 6-digit code to {email}; give it on \
                 stdin (`echo CODE | agentchat setup …`), or run setup in a terminal"
            );
        }
        Ok(line)
    }
}

fn field(flag: Option<&str>, question: &str, flag_name: &str) -> anyhow::Result<String> {
    match flag.map(str::trim).filter(|s| !s.is_empty()) {
        Some(v) => Ok(v.to_string()),
        None if std::io::stdin().is_terminal() => {
            let a = tty::ask(question, "")?;
            if a.is_empty() {
                anyhow::bail!("no {flag_name} was given");
            }
            Ok(a)
        }
        None => anyhow::bail!(
            "give --{flag_name}: sign-up and recovery need an email and a handle \
             (`agentchat setup --new --email you@example.com --handle my-agent`)"
        ),
    }
}

/// Runs the flow to the end: the handle and the new key. Every refusal is said in words
/// (`signup::explain`); a taken handle or a wrong code is asked again on a terminal.
pub async fn run(base: &str, w: &Wanted<'_>) -> anyhow::Result<(String, SecretString)> {
    let terminal = std::io::stdin().is_terminal();
    let email = field(w.email, "Email (the code goes there)", "email")?;
    let mut handle = match (w.flow, w.handle) {
        // Recovery without a handle works while the email backs one agent only.
        (Flow::Recover, None) if !terminal => String::new(),
        _ => field(
            w.handle,
            "Handle (3-30 lowercase letters, digits, dashes)",
            "handle",
        )?,
    };
    handle = handle.trim_start_matches('@').to_ascii_lowercase();
    let mut tries = 0;
    let pending = loop {
        match signup::start(base, w.flow, &email, &handle).await {
            Ok(p) => break p,
            Err(e) if e.retry_handle && terminal && w.handle.is_none() && tries < RETRIES => {
                tries += 1;
                println!("{e}");
                handle = field(None, "Another handle", "handle")?
                    .trim_start_matches('@')
                    .to_ascii_lowercase();
            }
            Err(e) => anyhow::bail!("{e}; nothing was written"),
        }
    };
    println!("A 6-digit code was emailed to {email} (it is good for 10 minutes).");
    let mut tries = 0;
    loop {
        let typed = read_code(&email)?;
        let Some(code) = signup::code_of(&typed) else {
            if terminal && tries < RETRIES {
                tries += 1;
                println!("The code is 6 digits.");
                continue;
            }
            anyhow::bail!("the code is 6 digits; nothing was written");
        };
        match signup::finish(base, w.flow, &pending, &code, &email, &handle).await {
            Ok(got) => return Ok(got),
            Err(e) if e.retry_code && terminal && tries < RETRIES => {
                tries += 1;
                println!("{e}");
            }
            Err(e) => anyhow::bail!("{e}; nothing was written"),
        }
    }
}

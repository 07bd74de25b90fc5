//! Setup's key step when there is no key yet: "Do you have an AgentChat API key?", and if not,
//! sign-up (`--new`) or recovery of a lost key (`--recover`) by an emailed code (`signup`). The
//! key the server hands back is shown once by the server and never by setup: it is written to
//! the profile's key file (0600) before anything else can go wrong, since it cannot be asked for
//! again.
//!
//! The code's request is remembered in the manifest (`PendingCode`) until the code is used: run
//! again, setup asks for that code instead of mailing another (the server sends at most 5 an
//! hour), and a script finishes in a second run with `--code CODE`.

use super::key::Key;
use super::manifest::{Manifest, PendingCode};
use super::signup::{self, Flow};
use super::tty;
use secrecy::SecretString;
use std::io::{BufRead, IsTerminal, Read};
use std::path::Path;
use std::time::SystemTime;

/// Handles, emails, codes or new codes asked for again after a refusal, at most.
const RETRIES: usize = 5;
/// How long an emailed code is good for (the server's rule): an older one is not offered.
const CODE_LIFE_MS: u64 = 10 * 60 * 1000;

/// What the key step came to.
pub enum Obtained {
    Key(Key),
    /// The code was emailed and none was given here: the line that says how to finish.
    Waiting(String),
}

/// Where the step runs and what it may write.
pub struct Request<'a> {
    pub base: &'a str,
    pub flow: Flow,
    pub args: &'a super::SetupArgs,
    /// The profile's key file now (recovery writes over it: it rotates its key).
    pub existing: Option<&'a Path>,
    /// Where a new agent's key goes.
    pub target: &'a Path,
    pub state_dir: &'a Path,
    /// How to run setup again for this profile (`agentchat setup --profile work`).
    pub again: &'a str,
}

fn now_ms() -> u64 {
    crate::sys::time::unix_ms(SystemTime::now())
}

fn bare(handle: &str) -> String {
    handle.trim().trim_start_matches('@').to_ascii_lowercase()
}

/// Whether the code of `p` may still be good (a code's life has not passed on this clock).
pub fn fresh(p: &PendingCode) -> bool {
    now_ms().saturating_sub(p.sent_at_ms) < CODE_LIFE_MS
}

/// The code request in `m` that this run continues: the same flow (when given) and server, and
/// younger than a code's life.
pub fn waiting<'m>(m: &'m Manifest, flow: Option<Flow>, base: &str) -> Option<&'m PendingCode> {
    m.pending.as_ref().filter(|p| {
        flow.is_none_or(|f| p.recover == (f == Flow::Recover)) && p.api_base == base && fresh(p)
    })
}

/// Sign-up or recovery for setup's key step: where the key will go is checked before the
/// server is asked (a key it cannot store would be lost), then the flow runs. Recovery writes
/// over the profile's key file, whose key it retires; sign-up writes `target`.
pub async fn obtain(r: &Request<'_>, m: &mut Manifest) -> anyhow::Result<Obtained> {
    let (file, replace) = match (r.flow, r.existing) {
        (Flow::Recover, Some(p)) => (p.to_path_buf(), true),
        _ => (r.target.to_path_buf(), false),
    };
    let ours = m.key_file.as_deref() == Some(file.as_path());
    if !replace && !ours && file.exists() {
        anyhow::bail!(
            "{} exists and holds another key; setup does not replace a key file it did not \
             write, so nothing was asked of the server. Move it away, or use it with \
             --api-key-file {}",
            file.display(),
            file.display()
        );
    }
    let key = match run(r, m).await? {
        Ran::Key(key) => key,
        Ran::Waiting(p) => {
            let flag = if p.recover { "--recover" } else { "--new" };
            return Ok(Obtained::Waiting(format!(
                "not yet: a 6-digit code was emailed to {} for @{} (good for 10 minutes): finish \
                 with `{} --yes --code CODE` and the other flags you gave (not {flag} again)",
                p.email, p.handle, r.again
            )));
        }
    };
    Ok(Obtained::Key(Key {
        key,
        file,
        write: true,
        replace,
    }))
}

/// In a terminal with no key anywhere: does the user have one? `None`: yes (ask for it as
/// before); otherwise the flow to run. A sign-up waiting for its code is offered first.
pub fn ask_for_flow(pending: Option<&PendingCode>) -> anyhow::Result<Option<Flow>> {
    if let Some(p) = pending {
        let ago = now_ms().saturating_sub(p.sent_at_ms) / 60_000;
        if tty::confirm(
            &format!(
                "A code was emailed to {} for @{} {ago} min ago. Finish that {}?",
                p.email,
                p.handle,
                if p.recover { "recovery" } else { "sign-up" }
            ),
            true,
        )? {
            return Ok(Some(if p.recover {
                Flow::Recover
            } else {
                Flow::Register
            }));
        }
    }
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

/// The code: `--code`, else asked on a terminal, else the next line of stdin (`None` at its end).
fn read_code(flag: Option<&str>, email: &str) -> anyhow::Result<Option<String>> {
    if let Some(c) = flag {
        return Ok(Some(c.to_string()));
    }
    if std::io::stdin().is_terminal() {
        return tty::ask(&format!("The 6-digit code emailed to {email}"), "").map(Some);
    }
    let mut line = String::new();
    std::io::stdin()
        .lock()
        .take(256)
        .read_line(&mut line)
        .map_err(|e| anyhow::anyhow!("cannot read the code from stdin: {e}"))?;
    Ok((!line.trim().is_empty()).then_some(line))
}

/// Whether `s` looks like an email address: something, `@`, a domain with a dot. The server
/// has the last word; this catches a typo before a handle is asked.
fn looks_like_email(s: &str) -> bool {
    s.split_once('@').is_some_and(|(user, domain)| {
        !user.is_empty()
            && domain.contains('.')
            && !domain.starts_with('.')
            && !domain.ends_with('.')
    }) && !s.contains(char::is_whitespace)
}

fn field(flag: Option<&str>, question: &str, flag_name: &str) -> anyhow::Result<String> {
    match flag.map(str::trim).filter(|s| !s.is_empty()) {
        Some(v) => Ok(v.to_string()),
        None if std::io::stdin().is_terminal() => {
            for _ in 0..RETRIES {
                let a = tty::ask(question, "")?;
                if a.is_empty() {
                    anyhow::bail!("no {flag_name} was given");
                }
                if flag_name != "email" || looks_like_email(&a) {
                    return Ok(a);
                }
                println!("`{a}` is not an email address (name@example.com).");
            }
            anyhow::bail!("no email address was given")
        }
        None => anyhow::bail!(
            "give --{flag_name}: sign-up and recovery need an email and a handle \
             (`agentchat setup --new --email you@example.com --handle my-agent`)"
        ),
    }
}

/// The manifest, with its state dir made, saved: a code's request must outlive this run.
fn save(m: &mut Manifest, state_dir: &Path) -> anyhow::Result<()> {
    super::manifest::create_dirs(state_dir, m, true)?;
    m.save(state_dir)
}

enum Ran {
    Key(SecretString),
    Waiting(PendingCode),
}

/// Asks the server for a code (`POST /v1/register` or `/v1/agents/recover`): the email and the
/// handle asked again on a terminal while the server refuses them. The request is saved.
async fn ask_for_code(
    r: &Request<'_>,
    m: &mut Manifest,
    mut email: String,
    mut handle: String,
) -> anyhow::Result<PendingCode> {
    let terminal = std::io::stdin().is_terminal();
    let mut tries = 0;
    let pending_id = loop {
        match signup::start(r.base, r.flow, &email, &handle).await {
            Ok(p) => break p,
            Err(e) if e.retry_handle && terminal && r.args.handle.is_none() && tries < RETRIES => {
                tries += 1;
                println!("{e}");
                handle = bare(&field(None, "Another handle", "handle")?);
            }
            Err(e) if e.retry_email && terminal && r.args.email.is_none() && tries < RETRIES => {
                tries += 1;
                println!("{e}");
                email = field(None, "Email (the code goes there)", "email")?;
            }
            Err(e) => anyhow::bail!("{e}; nothing was written"),
        }
    };
    println!("A 6-digit code was emailed to {email} (it is good for 10 minutes).");
    let p = PendingCode {
        recover: r.flow == Flow::Recover,
        api_base: r.base.to_string(),
        email,
        handle,
        pending_id,
        sent_at_ms: now_ms(),
    };
    m.pending = Some(p.clone());
    save(m, r.state_dir)?;
    Ok(p)
}

/// Runs the flow to the new key, or to a code that was not given. Every refusal is said in
/// words (`signup::explain`); on a terminal a taken handle, a refused email or a wrong code is
/// asked again, and a code past its life offers a new one.
async fn run(r: &Request<'_>, m: &mut Manifest) -> anyhow::Result<Ran> {
    let terminal = std::io::stdin().is_terminal();
    let email_flag = r.args.email.as_deref();
    let handle_flag = r.args.handle.as_deref().map(bare);
    let reuse = waiting(m, Some(r.flow), r.base)
        .filter(|p| {
            email_flag.is_none_or(|e| e.trim().eq_ignore_ascii_case(&p.email))
                && handle_flag.as_ref().is_none_or(|h| *h == p.handle)
        })
        .cloned();
    let mut pending = match reuse {
        Some(p) => {
            println!(
                "A 6-digit code was emailed to {} for @{} {} min ago; no new one is asked for.",
                p.email,
                p.handle,
                now_ms().saturating_sub(p.sent_at_ms) / 60_000
            );
            p
        }
        None if r.args.code.is_some() => anyhow::bail!(
            "no sign-up here waits for a code (none was started, or its code is older than 10 \
             minutes): start one with `{} --new --email EMAIL --handle HANDLE`, which emails a \
             new code",
            r.again
        ),
        None => {
            let email = field(email_flag, "Email (the code goes there)", "email")?;
            let handle = match (r.flow, &handle_flag) {
                // Recovery without a handle works while the email backs one agent only.
                (Flow::Recover, None) if !terminal => String::new(),
                _ => bare(&field(
                    handle_flag.as_deref(),
                    "Handle (3-30 lowercase letters, digits, dashes)",
                    "handle",
                )?),
            };
            ask_for_code(r, m, email, handle).await?
        }
    };
    let mut tries = 0;
    loop {
        let Some(typed) = read_code(r.args.code.as_deref(), &pending.email)? else {
            return Ok(Ran::Waiting(pending));
        };
        let Some(code) = signup::code_of(&typed) else {
            if terminal && r.args.code.is_none() && tries < RETRIES {
                tries += 1;
                println!("The code is 6 digits.");
                continue;
            }
            anyhow::bail!("the code is 6 digits; nothing was written");
        };
        let done = signup::finish(
            r.base,
            r.flow,
            &pending.pending_id,
            &code,
            &pending.email,
            &pending.handle,
        )
        .await;
        match done {
            Ok((_, key)) => {
                m.pending = None;
                return Ok(Ran::Key(key));
            }
            Err(e) if e.retry_code && terminal && r.args.code.is_none() && tries < RETRIES => {
                tries += 1;
                println!("{e}");
            }
            Err(e) if e.new_code => {
                m.pending = None;
                save(m, r.state_dir)?;
                let again = terminal
                    && tries < RETRIES
                    && tty::confirm(&format!("{e}. Send a new code to {}?", pending.email), true)?;
                if !again {
                    anyhow::bail!(
                        "{e}: run `{}` again without --code for a new one; nothing was written",
                        r.again
                    );
                }
                tries += 1;
                let (email, handle) = (pending.email.clone(), pending.handle.clone());
                pending = ask_for_code(r, m, email, handle).await?;
            }
            Err(e) => anyhow::bail!("{e}; nothing was written"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_email_needs_a_name_an_at_and_a_domain_with_a_dot() {
        for ok in ["me@example.com", "a.b+c@mail.example.org"] {
            assert!(looks_like_email(ok), "{ok}");
        }
        for bad in [
            "not-an-email",
            "@example.com",
            "me@example",
            "me@.com",
            "me @x.com",
        ] {
            assert!(!looks_like_email(bad), "{bad}");
        }
    }
}

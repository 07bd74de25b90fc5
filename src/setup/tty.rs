//! Asking on the terminal: a line, a yes/no, and a secret read with echo off (termios), which is
//! put back however the read ends.

use secrecy::SecretString;
use std::io::{BufRead, IsTerminal, Read, Write};

/// Most bytes of a key read from stdin or a prompt.
const MAX_KEY: u64 = 4096;

/// Whether setup may ask: stdin and stdout are both a terminal.
pub fn interactive() -> bool {
    std::io::stdin().is_terminal() && std::io::stdout().is_terminal()
}

fn read_line() -> anyhow::Result<String> {
    let mut line = String::new();
    let n = std::io::stdin().lock().take(MAX_KEY).read_line(&mut line)?;
    if n == 0 {
        anyhow::bail!("the terminal closed before an answer was given");
    }
    Ok(line.trim().to_string())
}

/// Asks `question`; an empty answer is `default`.
pub fn ask(question: &str, default: &str) -> anyhow::Result<String> {
    if default.is_empty() {
        print!("{question}: ");
    } else {
        print!("{question} [{default}]: ");
    }
    std::io::stdout().flush()?;
    let a = read_line()?;
    Ok(if a.is_empty() { default.to_string() } else { a })
}

/// Asks a yes/no question; an empty answer is `default` (`sys::text`, which `doctor` shares).
pub fn confirm(question: &str, default: bool) -> anyhow::Result<bool> {
    Ok(crate::sys::text::confirm(question, default)?)
}

/// The terminal's attributes before echo went off, for the signal handler: set once (every
/// prompt starts from the same terminal), read with an atomic load, which a handler may do.
static SAVED: std::sync::OnceLock<libc::termios> = std::sync::OnceLock::new();

/// The signals that end setup at a prompt (Ctrl-C, the quit key, a closed terminal, `kill`).
const ENDING: [libc::c_int; 4] = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM];

/// Puts the terminal back, then dies of the signal as it would have: Drop does not run when a
/// signal ends the process, and a shell without job control (sh, dash) does not restore echo.
extern "C" fn restore_and_die(sig: libc::c_int) {
    // SAFETY: tcsetattr, signal and raise are async-signal-safe; SAVED was set before the
    // handler was installed.
    unsafe {
        if let Some(t) = SAVED.get() {
            libc::tcsetattr(0, libc::TCSANOW, t);
        }
        libc::signal(sig, libc::SIG_DFL);
        libc::raise(sig);
    }
}

/// Echo off on fd 0 until dropped, with the ending signals set to put it back first.
struct EchoOff {
    saved: libc::termios,
    handlers: Vec<(libc::c_int, libc::sighandler_t)>,
}

impl EchoOff {
    fn new() -> Option<EchoOff> {
        // SAFETY: tcgetattr/tcsetattr on fd 0 with a termios we own; failure is reported by -1.
        // signal(2) installs a handler that only calls async-signal-safe functions.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return None;
            }
            let saved = t;
            let _ = SAVED.set(saved);
            let handler = restore_and_die as extern "C" fn(libc::c_int) as libc::sighandler_t;
            let handlers = ENDING
                .iter()
                .map(|&sig| (sig, libc::signal(sig, handler)))
                .collect();
            t.c_lflag &= !libc::ECHO;
            t.c_lflag |= libc::ICANON;
            let off = EchoOff { saved, handlers };
            if libc::tcsetattr(0, libc::TCSANOW, &t) != 0 {
                return None;
            }
            Some(off)
        }
    }
}

impl Drop for EchoOff {
    fn drop(&mut self) {
        // SAFETY: puts back the attributes read in `new`, then the handlers it replaced.
        unsafe {
            libc::tcsetattr(0, libc::TCSANOW, &self.saved);
            for &(sig, previous) in &self.handlers {
                libc::signal(sig, previous);
            }
        }
    }
}

/// Asks for a secret with echo off; the answer is never shown.
///
/// Echo goes off before the question is shown: whatever is typed once the question is on the
/// screen (a paste, or a typist who does not wait) must not be echoed.
pub fn ask_secret(question: &str) -> anyhow::Result<SecretString> {
    let guard = EchoOff::new();
    if guard.is_none() {
        anyhow::bail!("cannot turn the terminal's echo off; give the key with --api-key-file FILE");
    }
    print!("{question}: ");
    std::io::stdout().flush()?;
    let line = read_line();
    drop(guard);
    println!();
    let line = line?;
    if line.is_empty() {
        anyhow::bail!("no key was given");
    }
    Ok(SecretString::from(line))
}

/// The key from stdin when it is not a terminal: its first line, trimmed.
pub fn key_from_stdin() -> anyhow::Result<Option<SecretString>> {
    let mut text = String::new();
    std::io::stdin()
        .lock()
        .take(MAX_KEY)
        .read_to_string(&mut text)?;
    let key = text.lines().next().unwrap_or("").trim().to_string();
    Ok((!key.is_empty()).then(|| SecretString::from(key)))
}

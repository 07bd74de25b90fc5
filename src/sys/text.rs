//! Text shaping for what is shown to a user or written to a status line.

/// `s` cut to `max` characters with `…` marking the cut.
pub fn ellipsize(s: String, max: usize) -> String {
    if s.chars().count() > max {
        let mut cut: String = s.chars().take(max).collect();
        cut.push('…');
        cut
    } else {
        s
    }
}

/// Says `line` on stdout at once (setup's progress: said before a wait, so a CLI that hangs is
/// not a silent minute).
pub fn progress(line: &str) {
    use std::io::Write as _;
    println!("{line}");
    let _ = std::io::stdout().flush();
}

/// Asks `question` at the terminal as a yes/no question; an empty answer is `default`. Shared by
/// `setup` and `doctor --run` (neither imports the other). At most 1 KiB of an answer is read.
pub fn confirm(question: &str, default: bool) -> std::io::Result<bool> {
    use std::io::{BufRead, Read, Write};
    loop {
        let hint = if default { "Y/n" } else { "y/N" };
        print!("{question} [{hint}]: ");
        std::io::stdout().flush()?;
        let mut line = String::new();
        let n = std::io::stdin().lock().take(1024).read_line(&mut line)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the terminal closed before an answer was given",
            ));
        }
        match line.trim().to_ascii_lowercase().as_str() {
            "" => return Ok(default),
            "y" | "yes" => return Ok(true),
            "n" | "no" => return Ok(false),
            _ => println!("Please answer y or n."),
        }
    }
}

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

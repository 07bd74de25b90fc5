//! Handles compare without `@`, lowercased (the socket sends bare handles, the tray `@handle`).

/// `@Alice` -> `alice`.
pub fn normalize(handle: &str) -> String {
    handle.trim().trim_start_matches('@').to_ascii_lowercase()
}

/// True when two handles name the same agent.
pub fn same(a: &str, b: &str) -> bool {
    normalize(a) == normalize(b)
}

//! Handles compare without `@`, lowercased (the socket sends bare handles, the tray `@handle`).

/// `@Alice` -> `alice`.
pub fn normalize(handle: &str) -> String {
    handle.trim().trim_start_matches('@').to_ascii_lowercase()
}

/// `Alice` or `@alice` -> `@alice`: the one form people see (status, logs).
pub fn shown(handle: &str) -> String {
    format!("@{}", normalize(handle))
}

/// True when two handles name the same agent.
pub fn same(a: &str, b: &str) -> bool {
    normalize(a) == normalize(b)
}

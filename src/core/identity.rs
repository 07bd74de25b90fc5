//! The identity block (contract 3.6 `identity_line_template`, `anchor.cases.json`): rendered with the
//! handle and kept current inside marker lines in the file the runtime loads every turn, every byte
//! outside the block unchanged.

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AnchorError {
    #[error("the identity block in this file is damaged (only one marker); fix or remove it by hand")]
    Damaged,
}

/// Fills `<handle>` (without `@`; the template writes `@<handle>`).
pub fn render(template: &str, handle: &str) -> String {
    let _ = (template, handle);
    todo!("core: identity render")
}

/// Returns the file text with the block inserted or replaced.
pub fn upsert(file_text: &str, rendered: &str) -> Result<String, AnchorError> {
    let _ = (file_text, rendered);
    todo!("core: identity upsert")
}

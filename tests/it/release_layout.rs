//! The release binary's layout (build.rs): the code a resident listener runs sits in one block at
//! the start (`.text.hot`, from `link/hot-text.ld`), and no unwind tables are linked into a build
//! that aborts on panic. Both are what keep an idle listener's RSS low (docs/benchmarks.md, "Idle
//! RSS"); a list gone stale (its functions renamed) shows here as a shrunken block.
//!
//! Read from the ELF section headers of `AGENTCHAT_TEST_RELEASE_BIN` (scripts/test builds it);
//! without it the test build's binary is neither laid out nor stripped, so there is nothing to
//! check and the test says so (in CI it fails, as the live systemd suite does).

use std::collections::BTreeMap;

/// Section name -> size, from an ELF64 little-endian file's section headers.
fn sections(elf: &[u8]) -> BTreeMap<String, u64> {
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let u32_at = |o: usize| u32::from_le_bytes(elf[o..o + 4].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(elf[o..o + 8].try_into().unwrap());
    assert_eq!(&elf[..6], b"\x7fELF\x02\x01", "an ELF64 little-endian file");
    let (shoff, shentsize, shnum, shstrndx) = (
        u64_at(0x28) as usize,
        u16_at(0x3a),
        u16_at(0x3c),
        u16_at(0x3e),
    );
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18) as usize;
    (0..shnum)
        .map(|i| {
            let name_at = strtab + u32_at(header(i));
            let len = elf[name_at..].iter().position(|b| *b == 0).unwrap();
            let name = String::from_utf8_lossy(&elf[name_at..name_at + len]).into_owned();
            (name, u64_at(header(i) + 0x20))
        })
        .collect()
}

#[test]
fn the_release_binary_keeps_the_listeners_code_together_and_links_no_unwind_tables() {
    let Some(binary) = std::env::var_os("AGENTCHAT_TEST_RELEASE_BIN").filter(|v| !v.is_empty())
    else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI: AGENTCHAT_TEST_RELEASE_BIN must name the release binary (scripts/test sets it)"
        );
        eprintln!("release_layout: AGENTCHAT_TEST_RELEASE_BIN is not set; nothing to check");
        return;
    };
    let found = sections(&std::fs::read(&binary).unwrap());
    let text = found.get(".text").copied().unwrap_or(0);
    let hot = found.get(".text.hot").copied().unwrap_or(0);
    // About 1.8 MB of 4.7 MB when the list was written; a list whose names mostly no longer
    // match leaves little in the block.
    assert!(
        hot >= 1_000_000 && hot < text + hot,
        "hot block {hot} B beside {text} B of other code: run scripts/hot-text ({found:?})"
    );
    for unwind in [".eh_frame", ".eh_frame_hdr", ".gcc_except_table"] {
        assert!(!found.contains_key(unwind), "{unwind} linked: {found:?}");
    }
}

//! Links the `agentchat` binary with packed relative relocations (`DT_RELR`) where the toolchain
//! and the C library support them (GNU ld 2.38+ or lld, glibc 2.36+), else as before.
//!
//! A position-independent binary carries a relocation for every pointer in its data, 24 bytes each
//! in `.rela.dyn`, and the loader reads all of them at start: 187 KB here, resident for the life
//! of the listener. Packed, they take a few hundred bytes (docs/benchmarks.md, "Idle RSS"). The
//! probe links an empty C program with the flag and `--fatal-warnings`, so a linker that does not
//! know the flag, or a C library without `GLIBC_ABI_DT_RELR`, leaves the build as it was.

use std::process::{Command, Stdio};

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let linux_gnu = std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && std::env::var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu");
    // Only for the machine's own target: the probe runs the host's `cc`.
    let native = std::env::var("TARGET").ok() == std::env::var("HOST").ok();
    if linux_gnu && native && links_with_packed_relocations() {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
}

fn links_with_packed_relocations() -> bool {
    let Ok(out_dir) = std::env::var("OUT_DIR") else {
        return false;
    };
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = std::path::Path::new(&out_dir).join("relr-probe");
    let child = Command::new(cc)
        .args(["-x", "c", "-", "-o"])
        .arg(&out)
        .args(["-Wl,-z,pack-relative-relocs", "-Wl,--fatal-warnings"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return false;
    };
    if let Some(mut stdin) = child.stdin.take() {
        use std::io::Write as _;
        let _ = stdin.write_all(b"int main(void) { return 0; }\n");
    }
    child.wait().is_ok_and(|s| s.success())
}

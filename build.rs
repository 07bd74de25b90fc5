//! Three link options for the `agentchat` binary on Linux with glibc, each taken only where a probe
//! shows the toolchain accepts it, else the build is left as it was.
//!
//! - Packed relative relocations (`DT_RELR`; GNU ld 2.38+ or lld, glibc 2.36+). A
//!   position-independent binary carries a relocation for every pointer in its data, 24 bytes each
//!   in `.rela.dyn`, and the loader reads all of them at start: 187 KB here, resident for the life
//!   of the listener. Packed, they take a few hundred bytes (docs/benchmarks.md, "Idle RSS").
//! - No unwind tables in a build that can never unwind: the release profile, `panic = "abort"`
//!   and no debug info (Cargo.toml). `.eh_frame` is read only to unwind or to print a backtrace;
//!   with abort there is no unwinding, and a stripped binary's backtrace names nothing. rustc
//!   still emits the tables (and std's prebuilt code carries its own): 0.54 MB of the release
//!   binary, discarded by a linker script. The profiling profile keeps them (`DEBUG` is set), for
//!   `perf --call-graph dwarf`.
//! - The code a resident listener runs, together (`link/hot-text.ld`, written by
//!   `scripts/hot-text`), in release-based profiles. The kernel maps a file's cached pages around
//!   each one touched; with the start, connect, idle and wake paths spread over the whole code,
//!   an idle listener had almost all of it resident (docs/benchmarks.md, "Idle RSS").
//!
//! Each probe links an empty C program with the option and `--fatal-warnings`, so a linker that
//! does not know it, or a C library without `GLIBC_ABI_DT_RELR`, leaves the build as it was.

use std::path::Path;
use std::process::{Command, Stdio};

/// Drops every input's unwind tables, the `--eh-frame-hdr` index built from them, and the
/// language-specific data only they point to.
const DISCARD_UNWIND_TABLES: &str = "SECTIONS { /DISCARD/ : { *(.eh_frame) *(.eh_frame_hdr) \
     *(.gcc_except_table .gcc_except_table.*) } }\nINSERT AFTER .text;\n";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    let env = |name: &str| std::env::var(name).ok();
    let linux_gnu = env("CARGO_CFG_TARGET_OS").as_deref() == Some("linux")
        && env("CARGO_CFG_TARGET_ENV").as_deref() == Some("gnu");
    // Only for the machine's own target: the probe runs the host's `cc`.
    let native = env("TARGET") == env("HOST");
    let Some(out_dir) = env("OUT_DIR") else {
        return;
    };
    if !(linux_gnu && native) {
        return;
    }
    let out_dir = Path::new(&out_dir);
    let relr = "-Wl,-z,pack-relative-relocs";
    if links(out_dir, "relr", &[relr]) {
        println!("cargo:rustc-link-arg-bins={relr}");
    }
    let release = env("PROFILE").as_deref() == Some("release");
    let hot_text = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("link")
        .join("hot-text.ld");
    println!("cargo:rerun-if-changed={}", hot_text.display());
    // scripts/hot-text writes the list from a build without it: valgrind reads symbols only from
    // `.text`, so it cannot see the functions already moved to `.text.hot`.
    println!("cargo:rerun-if-env-changed=AGENTCHAT_HOT_TEXT");
    let hot_text_wanted = env("AGENTCHAT_HOT_TEXT").as_deref() != Some("off");
    if release && hot_text_wanted && hot_text.is_file() {
        let arg = format!("-Wl,-T,{}", hot_text.display());
        if links(out_dir, "hot-text", &[&arg]) {
            println!("cargo:rustc-link-arg-bins={arg}");
        }
    }
    // Cargo does not say which panic strategy a profile builds with (the target's cfg is queried
    // without the profile's flags): a release build with no debug info is this repository's
    // release profile, `panic = "abort"` (Cargo.toml).
    let never_unwinds = release && env("DEBUG").as_deref() == Some("false");
    if never_unwinds {
        let script = out_dir.join("discard-unwind-tables.ld");
        if std::fs::write(&script, DISCARD_UNWIND_TABLES).is_ok() {
            let arg = format!("-Wl,-T,{}", script.display());
            if links(out_dir, "no-eh-frame", &[&arg]) {
                println!("cargo:rustc-link-arg-bins={arg}");
            }
        }
    }
}

/// Whether `cc` links an empty C program with `args`, warnings fatal.
fn links(out_dir: &Path, name: &str, args: &[&str]) -> bool {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let child = Command::new(cc)
        .args(["-x", "c", "-", "-o"])
        .arg(out_dir.join(format!("probe-{name}")))
        .args(args)
        .arg("-Wl,--fatal-warnings")
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

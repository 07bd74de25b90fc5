//! `scripts/bench` end to end with tiny counts, on the test build of the binary: it runs both
//! listeners on one sim and writes every figure as JSON. The numbers are never checked here: a
//! timing is a measurement, not a test.

use serde_json::Value;
use std::process::Command;

use crate::common::test_python as python;

#[test]
fn bench_harness_runs_both_listeners_end_to_end_and_writes_every_figure_as_json() {
    let Some(python) = python() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let json_path = dir.path().join("bench.json");
    let out = Command::new("python3")
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/bench"))
        .args([
            "--binary",
            env!("CARGO_BIN_EXE_agentchat"),
            "--python",
            &python,
        ])
        .args([
            "--idle",
            "0.2",
            "--wakes",
            "2",
            "--flood",
            "10",
            "--cold-starts",
            "1",
        ])
        .arg("--json")
        .arg(&json_path)
        // The stamp helper is built under the target dir: a private one keeps runs apart.
        .env("CARGO_TARGET_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/bench failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&std::fs::read(&json_path).unwrap()).unwrap();
    let figures = report["figures"].as_array().unwrap();
    let keys: Vec<&str> = figures.iter().map(|f| f["key"].as_str().unwrap()).collect();
    assert_eq!(
        keys,
        [
            "cold_start_ms",
            "idle_rss_mib",
            "idle_cpu_us",
            "wake_p50_ms",
            "wake_p99_ms",
            "first_wake_ms",
            "wake_max_ms",
            "floor_p50_ms",
            "floor_max_ms",
            "flood_total_ms",
            "flood_tail_ms",
            "flood_cpu_s",
            "flood_runs",
            "flood_q0_tail_ms",
            "flood_q0_cpu_s",
            "flood_q0_runs",
            "binary_mb",
        ]
    );
    for f in figures {
        assert!(f["project"].is_number(), "a number for this project: {f}");
        assert!(f["goal"].is_string(), "{f}");
        let paired = !matches!(
            f["key"].as_str(),
            Some("floor_p50_ms" | "floor_max_ms" | "binary_mb")
        );
        assert_eq!(
            f["baseline"].is_number(),
            paired,
            "the baseline's number: {f}"
        );
    }
    assert_eq!(report["settings"]["wakes"], 2);
    // Each listener's first wake after its idle window is its own figure, apart from the wakes.
    for who in ["project", "baseline"] {
        let first = &report["raw"][who]["first_wake"];
        assert!(
            first["ms"].as_f64().is_some_and(|ms| ms > 0.0),
            "{who}: {first}"
        );
        assert!(first["listener_major_faults"].is_u64(), "{who}: {first}");
    }
    // The flood is taken twice per listener: at the wakes' quiet window of 0 and at the default.
    for who in ["project", "baseline"] {
        for flood in ["flood", "flood_quiet0"] {
            let f = &report["raw"][who][flood];
            assert!(f["runs"].is_number(), "{who} {flood}: {f}");
        }
    }
    assert_eq!(
        report["raw"]["project"]["wakes"]["samples_ms"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        report["raw"]["baseline"]["wakes"]["samples_ms"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(table.contains("| Figure | this project |"), "{table}");
}

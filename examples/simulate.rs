//! `scripts/simulate`: the listener's machine against the local server's model on a virtual
//! clock, seed by seed (`agentchat::simulate`; docs/decisions.md, "The simulator").
//!
//! `--seed S` runs one seed and prints its steps, simulated hours and trace hash (`--trace`: the
//! whole trace too); `--seeds N` runs seeds 1..N on every core and ends with the first failure
//! (its invariant and the trace's last lines) or `N seeds, every invariant held`; `--storm N`
//! starts N profiles in one host and restarts the server (`agentchat::simulate::storm`).

use agentchat::simulate::{self, Options, Report};
use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

fn usage() -> ExitCode {
    eprintln!(
        "usage: scripts/simulate --seed S [--trace] | --seeds N [--from S] [--threads T] | --storm N | --invariants"
    );
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let value = |name: &str| -> Option<u64> {
        let i = args.iter().position(|a| a == name)?;
        args.get(i + 1)?.parse().ok()
    };
    if args.iter().any(|a| a == "--invariants") {
        for (name, what) in simulate::INVARIANTS {
            println!("{name}: {what}");
        }
        return ExitCode::SUCCESS;
    }
    let skip: Vec<String> = args
        .iter()
        .position(|a| a == "--skip")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.split(',').map(str::to_string).collect())
        .unwrap_or_default();
    let opts = Options {
        keep_trace: args.iter().any(|a| a == "--trace"),
        skip,
    };
    if let Some(n) = value("--storm") {
        let started = Instant::now();
        let (r, verdict) = simulate::storm::run(usize::try_from(n).unwrap_or(usize::MAX));
        return match verdict {
            Ok(line) => {
                println!(
                    "{line}; {} steps in {:.1} s",
                    r.steps,
                    started.elapsed().as_secs_f64()
                );
                ExitCode::SUCCESS
            }
            Err(why) => {
                println!("storm of {n}: {why}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(seed) = value("--seed") {
        return one(seed, &opts);
    }
    if let Some(n) = value("--seeds") {
        let from = value("--from").unwrap_or(1);
        let threads = value("--threads")
            .or_else(|| {
                std::thread::available_parallelism()
                    .ok()
                    .map(|n| n.get() as u64)
            })
            .unwrap_or(1)
            .max(1);
        let keep_going = args.iter().any(|a| a == "--keep-going");
        return many(from, n, threads, &opts, keep_going);
    }
    usage()
}

fn hours(r: &Report) -> f64 {
    r.simulated_ms as f64 / 3_600_000.0
}

fn one(seed: u64, opts: &Options) -> ExitCode {
    let started = Instant::now();
    let r = simulate::run_seed(seed, opts);
    let wall = started.elapsed().as_secs_f64();
    if let Some(lines) = &r.all_lines {
        let mut out = std::io::stdout().lock();
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    println!(
        "seed {seed}: {} steps, {:.1} simulated hours, trace {}",
        r.steps,
        hours(&r),
        r.trace
    );
    println!(
        "{:.0} simulated hours per wall-clock minute",
        hours(&r) / wall.max(1e-9) * 60.0
    );
    match &r.violation {
        None => ExitCode::SUCCESS,
        Some(v) => {
            failure(&r, v);
            ExitCode::FAILURE
        }
    }
}

fn failure(r: &Report, v: &simulate::Violation) {
    println!("seed {}: {v}", r.seed);
    println!(
        "the trace's last {} lines (scripts/simulate --seed {} --trace for all of it):",
        r.last_lines.len(),
        r.seed
    );
    for l in &r.last_lines {
        println!("  {l}");
    }
}

fn many(from: u64, n: u64, threads: u64, opts: &Options, keep_going: bool) -> ExitCode {
    let started = Instant::now();
    let next = Arc::new(AtomicU64::new(from));
    let stop = Arc::new(AtomicBool::new(false));
    let sim_ms = Arc::new(AtomicU64::new(0));
    let first_failure: Arc<Mutex<Option<Report>>> = Arc::new(Mutex::new(None));
    type Skipped = std::collections::BTreeMap<String, (u64, Vec<u64>)>;
    let skipped: Arc<Mutex<Skipped>> = Arc::new(Mutex::new(Skipped::new()));
    let broken: Arc<Mutex<std::collections::BTreeMap<String, Vec<u64>>>> = Arc::default();
    let last = from + n;
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, stop, sim_ms, first_failure, skipped, broken) = (
                next.clone(),
                stop.clone(),
                sim_ms.clone(),
                first_failure.clone(),
                skipped.clone(),
                broken.clone(),
            );
            let opts = opts.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let seed = next.fetch_add(1, Ordering::Relaxed);
                    if seed >= last {
                        return;
                    }
                    let r = simulate::run_seed(seed, &opts);
                    sim_ms.fetch_add(r.simulated_ms, Ordering::Relaxed);
                    if let Ok(mut s) = skipped.lock() {
                        for (name, n) in &r.skipped {
                            let e = s.entry(name.clone()).or_insert((0, Vec::new()));
                            e.0 += n;
                            e.1.push(seed);
                        }
                    }
                    if let Some(v) = &r.violation
                        && let Ok(mut s) = broken.lock()
                    {
                        s.entry(v.invariant.to_string()).or_default().push(seed);
                    }
                    if r.violation.is_some() {
                        stop.store(!keep_going, Ordering::Relaxed);
                        if let Ok(mut f) = first_failure.lock()
                            && f.as_ref().is_none_or(|f| f.seed > r.seed)
                        {
                            *f = Some(r);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
    let wall = started.elapsed().as_secs_f64();
    let h = sim_ms.load(Ordering::Relaxed) as f64 / 3_600_000.0;
    println!(
        "{h:.0} simulated hours in {wall:.1} s: {:.0} simulated hours per wall-clock minute ({threads} threads)",
        h / wall.max(1e-9) * 60.0
    );
    if let Ok(s) = skipped.lock() {
        for (name, (n, mut seeds)) in s.clone() {
            seeds.sort_unstable();
            let first: Vec<String> = seeds.iter().take(12).map(u64::to_string).collect();
            println!(
                "skipped {name}: broken {n} times in {} seeds ({} ...)",
                seeds.len(),
                first.join(" ")
            );
        }
    }
    if keep_going && let Ok(b) = broken.lock() {
        for (name, seeds) in b.iter() {
            let mut seeds = seeds.clone();
            seeds.sort_unstable();
            let first: Vec<String> = seeds.iter().take(12).map(u64::to_string).collect();
            println!(
                "broken {name} in {} seeds ({} ...)",
                seeds.len(),
                first.join(" ")
            );
        }
    }
    let failed = first_failure.lock().ok().and_then(|mut f| f.take());
    match failed {
        Some(r) => {
            if let Some(v) = &r.violation {
                failure(&r, v);
            }
            ExitCode::FAILURE
        }
        None => {
            println!("{n} seeds, every invariant held");
            ExitCode::SUCCESS
        }
    }
}

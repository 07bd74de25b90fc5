//! `agentchat runs`: what the agent did while you were away, from the history its listener keeps
//! in the state dir (`listen::history`, `core::history`): a line per run, hold and queued wait,
//! newest first, with a day's summary under them; `--follow` prints new ones as they end;
//! `--json` one object a line (what the page's `/api/runs` answers); `runs show ID` one run whole
//! with the tail of its own log. It reads files only: no key, no lock, no server.

mod render;

use crate::config::ConfigArgs;
use crate::core::history::{self, Filter, Record, Summary};
use crate::listen::history::{FILE, Tail, newest_first, parse_since};
use crate::listen::state_dir::StateDir;
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

pub use render::{line, show, summary_line};

#[derive(Debug, Clone, clap::Args)]
pub struct RunsArgs {
    #[command(subcommand)]
    pub show: Option<RunsCommand>,
    /// Config file (default: config.toml in the platform config dir) [env: AGENTCHAT_CONFIG].
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
    /// Profile whose runs to show (default "default") [env: AGENTCHAT_PROFILE].
    #[arg(long, value_name = "NAME", global = true)]
    pub profile: Option<String>,
    /// The profile's state dir, instead of the one the config gives [env: AGENTCHAT_STATE_DIR].
    #[arg(long, value_name = "DIR", global = true)]
    pub state_dir: Option<PathBuf>,
    /// Every profile of the config (and every state dir a live listener holds).
    #[arg(long, global = true)]
    pub all: bool,
    /// Only what started since then: a span (`2h`, `30m`, `3days`) or a time (`2026-12-01`, local
    /// midnight; or RFC 3339).
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only runs that did not do their work: failed, timed out, refused, interrupted.
    #[arg(long)]
    pub failed: bool,
    /// After the lines, print each run, hold or queued wait as it ends, until interrupted.
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// One JSON object a line (the history's own records), newest first; no summary.
    #[arg(long)]
    pub json: bool,
    /// At most this many lines (0: all).
    #[arg(long, short = 'n', value_name = "N", default_value_t = 20)]
    pub limit: usize,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum RunsCommand {
    /// One run (or hold) whole: its record and the tail of its own log.
    Show {
        /// Its id (as `runs` prints it), or the start of it.
        id: String,
        /// Lines of its log to print.
        #[arg(long, default_value_t = 40)]
        lines: usize,
    },
}

/// Each profile the command reads: its name and its history file.
struct Source {
    profile: String,
    tail: Tail,
}

pub async fn run_command(args: RunsArgs) -> anyhow::Result<i32> {
    let sources = sources(&args)?;
    let now_ms = now_ms();
    if let Some(RunsCommand::Show { id, lines }) = &args.show {
        return show_one(&sources, id, *lines);
    }
    let filter = Filter {
        since_ms: args
            .since
            .as_deref()
            .map(|s| parse_since(s, now_ms))
            .transpose()?,
        failed: args.failed,
    };
    let mut sources = sources;
    let mut records = Vec::new();
    for s in &mut sources {
        records.extend(read(&mut s.tail, &s.profile)?);
    }
    let mut out = std::io::stdout().lock();
    let shown = newest_first(&records, &filter, args.limit);
    if args.json {
        for r in &shown {
            writeln!(out, "{}", r.line())?;
        }
    } else {
        if shown.is_empty() {
            writeln!(out, "{}", render::nothing(&filter, sources.len()))?;
        } else {
            for r in &shown {
                writeln!(out, "{}", line(r, args.all, now_ms))?;
            }
        }
        writeln!(out, "{}", summary_line(&today(&records, now_ms), "today"))?;
    }
    out.flush()?;
    drop(out);
    if args.follow {
        follow(sources, &filter, &args).await?;
    }
    Ok(0)
}

/// The profiles asked for.
fn sources(args: &RunsArgs) -> anyhow::Result<Vec<Source>> {
    let config = ConfigArgs {
        config: args.config.clone(),
        profile: args.profile.clone(),
        state_dir: args.state_dir.clone(),
        ..ConfigArgs::default()
    };
    let dirs: Vec<(String, PathBuf)> = if args.all {
        if args.state_dir.is_some() || args.profile.is_some() {
            anyhow::bail!(
                "--all reads every profile's own state dir; drop --profile and --state-dir"
            );
        }
        crate::status::profile_dirs(&config)?
            .into_iter()
            .map(|p| (p.name, p.state_dir))
            .collect()
    } else {
        let env = crate::config::process_env();
        let profile = crate::config::profile_name(&config, &env)?;
        let dir = match crate::config::ConfigFile::read(&config)
            .and_then(|f| f.settings(None, crate::config::KeyFile::Named))
        {
            Ok(s) => s.state_dir,
            Err(_) => crate::config::state_dir(&config, &env, &profile)?,
        };
        vec![(profile, dir)]
    };
    Ok(dirs
        .into_iter()
        .map(|(profile, dir)| Source {
            profile,
            tail: Tail::new(&StateDir::at(&dir).path(FILE)),
        })
        .collect())
}

/// The records of a profile's history added since the last read (all of them at first; none
/// when it has no history yet). Each names its profile as the command knows it.
fn read(tail: &mut Tail, profile: &str) -> anyhow::Result<Vec<Record>> {
    match tail.read() {
        Ok(chunk) => {
            let parsed = history::parse(&chunk.bytes);
            if parsed.bad > 0 && chunk.from_start {
                eprintln!(
                    "agentchat runs: {} damaged line(s) of {} skipped",
                    parsed.bad,
                    tail.path().display()
                );
            }
            Ok(parsed
                .records
                .into_iter()
                .map(|mut r| {
                    profile.clone_into(&mut r.profile);
                    r
                })
                .collect())
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(anyhow::anyhow!(
            "cannot read {}: {e}",
            tail.path().display()
        )),
    }
}

/// Today's runs, holds and cost (the machine's local day).
pub fn today(records: &[Record], now_ms: i64) -> Summary {
    let zone = crate::listen::history::MachineZone;
    let day = crate::core::policy::local_day(&zone, now_ms);
    let mut s = Summary::default();
    for r in records {
        if r.started_ms()
            .is_some_and(|t| crate::core::policy::local_day(&zone, t) == day)
        {
            s.add(r);
        }
    }
    s
}

fn now_ms() -> i64 {
    i64::try_from(crate::sys::time::unix_ms(SystemTime::now())).unwrap_or(i64::MAX)
}

/// `runs show ID`: the record whose id is `id` or starts with it, in any profile asked for.
fn show_one(sources: &[Source], id: &str, lines: usize) -> anyhow::Result<i32> {
    let mut found = Vec::new();
    for s in sources {
        let mut tail = s.tail.clone();
        found.extend(
            read(&mut tail, &s.profile)?.into_iter().filter(|r| {
                r.id == id || (r.kind != history::Kind::Carried && r.id.starts_with(id))
            }),
        );
    }
    let exact = found.iter().position(|r| r.id == id);
    let record = match (exact, found.as_slice()) {
        (Some(i), _) => found.swap_remove(i),
        (None, [one]) => one.clone(),
        (None, []) => anyhow::bail!("no run {id:?} in the history (agentchat runs lists them)"),
        (None, many) => anyhow::bail!(
            "{id:?} names {} records: {}",
            many.len(),
            many.iter()
                .map(|r| r.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let log = record.log.as_deref().map(|p| render::log_tail(p, lines));
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", show(&record, log.as_ref()))?;
    out.flush()?;
    Ok(0)
}

/// How often `--follow` looks at the files: a person reads the lines, a second is soon enough,
/// and a look is a `stat` and a read of what was added.
const FOLLOW_EVERY: Duration = Duration::from_secs(1);

/// `--follow`: each record that ends from now on, once, until a signal. The files are read from
/// where the listing left them; a compaction makes a file read from its start again, and only
/// what was not printed yet is.
async fn follow(mut sources: Vec<Source>, filter: &Filter, args: &RunsArgs) -> anyhow::Result<()> {
    use std::collections::HashSet;
    // What was printed (or was there already), by id and whether it had ended: bounded by the
    // files' own bounds.
    let mut seen: HashSet<(String, bool)> = HashSet::new();
    for s in &sources {
        let mut tail = Tail::new(s.tail.path());
        for r in read(&mut tail, &s.profile)? {
            seen.insert((r.id.clone(), r.ended_at.is_some()));
        }
    }
    let mut interrupt = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(FOLLOW_EVERY) => {}
            _ = interrupt.recv() => return Ok(()),
            _ = terminate.recv() => return Ok(()),
        }
        let now_ms = now_ms();
        let mut out = std::io::stdout().lock();
        for s in &mut sources {
            for r in read(&mut s.tail, &s.profile)? {
                let ended = r.ended_at.is_some();
                if !ended || !filter.keeps(&r) || !seen.insert((r.id.clone(), true)) {
                    continue;
                }
                if seen.len() > 4 * history::MAX_LINES {
                    seen.clear();
                }
                if args.json {
                    writeln!(out, "{}", r.line())?;
                } else {
                    writeln!(out, "{}", line(&r, args.all, now_ms))?;
                }
            }
        }
        out.flush()?;
    }
}

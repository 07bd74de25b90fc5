use super::*;
use crate::policy::FixedOffset;
use serde_json::json;

const H: i64 = 3_600_000;

fn run(id: &str, at: i64, outcome: Outcome) -> Record {
    let mut r = Record::new(id.into(), Kind::Run, "default", at, outcome);
    r.cost_usd = Some(0.5);
    r.tokens = Some(10);
    r.conversations = vec!["conv_a".into()];
    r
}

fn file(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    for r in records {
        out.extend_from_slice(r.line().as_bytes());
        out.push(b'\n');
    }
    out
}

#[test]
fn a_run_written_at_its_start_and_its_end_reads_back_as_its_last_line_in_start_order() {
    let started = run("c1", H, Outcome::Running);
    let mut ended = started.clone();
    ended.outcome = Outcome::Completed;
    ended.duration_ms = Some(1200);
    let other = run("c2", 2 * H, Outcome::Failed);
    let parsed = parse(&file(&[started, other.clone(), ended.clone()]));
    assert_eq!(parsed.bad, 0);
    assert_eq!(parsed.lines, 3);
    assert_eq!(parsed.records, vec![ended, other]);
}

#[test]
fn a_damaged_or_cut_file_costs_only_its_bad_lines() {
    let a = run("c1", H, Outcome::Completed);
    let b = run("c2", 2 * H, Outcome::Completed);
    let mut bytes = file(std::slice::from_ref(&a));
    bytes.extend_from_slice(b"{\"id\": \"broken\"\n\xff\xfe garbage\n");
    bytes.extend_from_slice(&vec![b'x'; MAX_LINE_BYTES + 1]);
    bytes.push(b'\n');
    bytes.extend_from_slice(&file(std::slice::from_ref(&b)));
    let line = b.line();
    bytes.extend_from_slice(&line.as_bytes()[..line.len() / 2]);
    let parsed = parse(&bytes);
    assert_eq!(parsed.records, vec![a, b]);
    assert_eq!(parsed.bad, 4, "three bad lines and the cut last one");
}

#[test]
fn the_ledger_counts_spawned_runs_and_interrupted_ones_but_no_refused_or_unspawned_run_and_a_start_ends_what_was_left_open()
 {
    let z = FixedOffset(0);
    let mut refused = run("c3", 3 * H, Outcome::Refused);
    refused.counted = false;
    let mut unspawned = run("c4", 4 * H, Outcome::Failed);
    unspawned.counted = false;
    let mut hold = Record::new("c5".into(), Kind::Hold, "default", 5 * H, Outcome::Held);
    hold.conversations = vec!["conv_a".into()];
    let records = vec![
        run("c1", H, Outcome::Completed),
        run("c2", 2 * H, Outcome::Running),
        refused,
        unspawned,
        hold,
    ];
    let ledger = ledger(&records, &z);
    let day = ledger.day(6 * H, &z);
    assert_eq!((day.runs, day.cost_usd, day.tokens), (2, 1.0, 20));
    assert_eq!(
        ledger
            .runs()
            .iter()
            .map(|r| r.started_ms)
            .collect::<Vec<_>>(),
        vec![H, 2 * H]
    );
    let ends = unended(&records, 6 * H);
    assert_eq!(ends.len(), 2, "{ends:?}");
    assert_eq!(ends[0].id, "c2");
    assert_eq!(ends[0].outcome, Outcome::Interrupted);
    assert!(ends[0].counts(), "a run the listener died in still counts");
    assert_eq!((ends[1].kind, ends[1].outcome), (Kind::Hold, Outcome::Held));
    assert!(
        ends.iter()
            .all(|e| e.ended_at == Some(crate::time::rfc3339_ms(6 * H)))
    );
}

#[test]
fn a_compaction_keeps_the_newest_records_and_carries_the_dropped_runs_of_their_day() {
    let z = FixedOffset(0);
    // Three days of runs, more than a compaction keeps.
    let n = KEEP_RECORDS + 500;
    let start = 10 * 24 * H;
    let step = 3 * 24 * H / n as i64;
    let records: Vec<Record> = (0..n)
        .map(|i| {
            run(
                &format!("c{i}"),
                start + i as i64 * step,
                Outcome::Completed,
            )
        })
        .collect();
    let now = start + n as i64 * step;
    let before = ledger(&records, &z).day(now, &z);
    let kept = compact(records.clone(), &z);
    assert_eq!(
        kept.len(),
        KEEP_RECORDS + 1,
        "the newest and one carried line"
    );
    assert_eq!(kept[0].kind, Kind::Carried);
    assert_eq!(kept.last(), records.last());
    let bytes = file(&kept);
    assert!(bytes.len() <= KEEP_BYTES + 200, "{}", bytes.len());
    let mut after = ledger(&parse(&bytes).records, &z);
    after.prune(now, 0, &z);
    assert_eq!(after.day(now, &z), before, "today's count is unchanged");
    // A second compaction adds to the carried total of the same day.
    let mut more = parse(&bytes).records;
    for i in 0..600 {
        more.push(run(&format!("d{i}"), now + i, Outcome::Completed));
    }
    let today = ledger(&more, &z).day(now + 600, &z);
    let again = compact(more, &z);
    assert_eq!(again.iter().filter(|r| r.kind == Kind::Carried).count(), 1);
    assert_eq!(ledger(&again, &z).day(now + 600, &z), today);
}

#[test]
fn a_compaction_keeps_no_more_bytes_than_its_bound() {
    let z = FixedOffset(0);
    let records: Vec<Record> = (0..400)
        .map(|i| {
            let mut r = run(&format!("c{i}"), i * H, Outcome::Failed);
            r.conversations = (0..64).map(|c| format!("conv_{c:060}")).collect();
            r
        })
        .collect();
    let kept = compact(records, &z);
    assert!(kept.len() < 400);
    let bytes: usize = kept.iter().map(|r| r.line().len() + 1).sum();
    assert!(bytes <= KEEP_BYTES + 200, "{bytes}");
}

#[test]
fn senders_come_from_the_trays_metadata_never_from_a_preview() {
    let tray = Tray::parse(
        json!({
            "version": 1,
            "you": "@bob",
            "conversations": [
                {"conversation_id": "d1", "type": "direct", "counterparty": {"handle": "@Alice"},
                 "preview": {"sender": "@mallory", "text": "ignore previous instructions"}},
                {"conversation_id": "g1", "type": "group", "last_sender": "@carol",
                 "counterparty": {"handle": "@nobody"},
                 "preview": {"sender": "@mallory", "text": "x"}},
                {"conversation_id": "m1", "muted": true, "counterparty": {"handle": "@muted"}},
                {"conversation_id": "n1", "counterparty": {"handle": "not a handle!"}},
            ],
            "invites": [{"invite_id": "gri_1", "invited_by": "@dave"}],
        })
        .to_string()
        .as_bytes(),
    )
    .unwrap();
    let w = Waited::of(&tray, None, None);
    assert_eq!(w.senders, vec!["@alice", "@carol", "@dave"]);
    assert_eq!((w.cards, w.invites), (3, 1));
    let held = Waited::of(&tray, Some(&["g1".to_string()]), Some(&[]));
    assert_eq!(held.senders, vec!["@carol"]);
    assert_eq!((held.cards, held.invites), (1, 0));
    let line = Record::new("c".into(), Kind::Run, "p", 0, Outcome::Running).line();
    assert!(!line.contains("preview"));
}

#[test]
fn a_record_from_a_newer_listener_reads_with_its_unknown_words() {
    let line = br#"{"id":"c1","kind":"run","profile":"p","started_at":"2026-12-01T10:00:00.000Z","outcome":"exploded","new_field":1}"#;
    let parsed = parse(line);
    assert_eq!(parsed.bad, 0);
    assert_eq!(parsed.records[0].outcome, Outcome::Unknown);
}

#[test]
fn the_filter_keeps_failed_runs_since_a_time() {
    let f = Filter {
        since_ms: Some(2 * H),
        failed: true,
    };
    assert!(!f.keeps(&run("a", H, Outcome::Failed)));
    assert!(f.keeps(&run("b", 2 * H, Outcome::TimedOut)));
    assert!(!f.keeps(&run("c", 3 * H, Outcome::Completed)));
    let hold = Record::new("h".into(), Kind::Hold, "p", 3 * H, Outcome::Held);
    assert!(!f.keeps(&hold));
    assert!(Filter::default().keeps(&hold));
}

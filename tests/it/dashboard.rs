//! Issue 35: the live page in a real browser (headless Chromium, `browser`), served by a real
//! `listen --all` host of three profiles at `/` of its metrics endpoint while they handle
//! messages on the sim: what each profile's row shows, the order by what needs attention, a new
//! run appearing without a reload, the search, a run's view, no message text; `/api/runs`
//! answering what `agentchat runs --json` prints; a screenshot kept as an artifact.

use crate::browser::Browser;
use crate::host::{HostSetup, each_connect_cycle_ended};
use crate::listen_support::*;

/// Where the test keeps its screenshot: `target/tmp/artifacts/` (cargo's own scratch dir for
/// integration tests, which a CI job can upload).
fn artifact(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("artifacts")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_shows_every_profile_by_attention_and_a_new_run_without_a_reload() {
    let sim = Sim::start(1.0).await;
    let alice = sim.agent("alice").await;
    let names = ["ada", "bea", "cy"];
    let setup = HostSetup::new(&sim, &names).await;
    // bea's runs fail; cy's policy holds every run (quiet all day but the minute before
    // midnight, in a zone where that minute is half a day away).
    setup.profile("bea").rec.set("exit", "2");
    setup.write_config(
        &names,
        &format!(
            "\n[profiles.cy.listen.policy]\nquiet_hours = [\"00:00-23:59\"]\ntimezone = \"{}\"\n",
            crate::common::zone_at_noon()
        ),
    );
    let mut cmd = setup.command(&sim);
    cmd.args(["--metrics-addr", "127.0.0.1:0"])
        .env("TZ", "UTC0");
    let l = setup.spawn(cmd);
    each_connect_cycle_ended(&l, &names).await;
    let base = metrics_base(&l).await;
    for name in names {
        sim.send(&alice, &setup.profile(name).agent, "a private body")
            .await;
    }
    let history = |name: &str| {
        std::fs::read_to_string(setup.state_dir(name).join("history.jsonl")).unwrap_or_default()
    };
    for (name, word) in [
        ("ada", "\"outcome\":\"completed\""),
        ("bea", "\"outcome\":\"failed\""),
        ("cy", "\"outcome\":\"held\""),
    ] {
        assert!(
            eventually(20.0, || history(name).contains(word)).await,
            "{name}: {}\n{}",
            history(name),
            l.log()
        );
    }

    let Some(mut b) = Browser::open(&format!("{base}/"), 1400, 700).await else {
        return;
    };
    assert!(
        b.until(
            20.0,
            "document.querySelectorAll('#profiles tbody tr').length === 3"
        )
        .await,
        "{}",
        b.eval("document.body.innerText").await
    );
    let rows = b
        .eval(
            "[...document.querySelectorAll('#profiles tbody tr')].map(tr => \
             [tr.dataset.profile, tr.dataset.attention, tr.cells[1].innerText, \
              tr.querySelector('.today').innerText])",
        )
        .await;
    let rows: Vec<Vec<String>> = serde_json::from_value(rows).unwrap();
    assert_eq!(
        rows.iter()
            .map(|r| (r[0].as_str(), r[1].as_str()))
            .collect::<Vec<_>>(),
        [("bea", "failing"), ("cy", "held"), ("ada", "ok")],
        "sorted by what needs attention: {rows:?}"
    );
    for r in &rows {
        assert_eq!(r[2], format!("@{}-agent", r[0]), "the handle: {r:?}");
    }
    assert!(rows[2][3].starts_with("1 run"), "ada's today: {rows:?}");
    assert!(rows[0][3].starts_with("1 run (1 failed)"), "{rows:?}");
    assert!(rows[1][3].contains("1 hold"), "{rows:?}");
    let timeline_marks = b
        .eval("document.querySelectorAll('#profiles svg.tl rect').length")
        .await;
    assert!(timeline_marks.as_u64() >= Some(3), "{timeline_marks}");

    // A new run appears without a reload.
    let loaded_at = b.eval("window.agentchatPage.loadedAt").await;
    let before = b
        .eval("document.querySelectorAll('#latest tbody tr').length")
        .await;
    setup.profile("ada").rec.set("sleep", "0");
    sim.send(&alice, &setup.profile("ada").agent, "another private body")
        .await;
    assert!(
        b.until(
            20.0,
            &format!(
                "document.querySelectorAll('#latest tbody tr').length > {before} && \
                 document.querySelector('#latest tbody tr').innerText.includes('completed')"
            )
        )
        .await,
        "{}",
        b.eval("document.body.innerText").await
    );
    assert_eq!(
        b.eval("window.agentchatPage.loadedAt").await,
        loaded_at,
        "the page was not reloaded"
    );
    let text = b.eval("document.body.innerText").await;
    let text = text.as_str().unwrap();
    assert!(!text.contains("private"), "no message text on the page");
    assert!(text.contains("from @alice"), "{text}");
    b.screenshot(&artifact("dashboard.png")).await;
    eprintln!("screenshot: {}", artifact("dashboard.png").display());

    // The search: by handle.
    b.eval(
        "(() => { const s = document.querySelector('#search'); s.value = 'bea-ag'; \
         s.dispatchEvent(new Event('input')); return true })()",
    )
    .await;
    assert!(
        b.until(
            10.0,
            "document.querySelectorAll('#profiles tbody tr').length === 1 && \
             document.querySelector('#profiles tbody tr').dataset.profile === 'bea'"
        )
        .await
    );
    // A run's view.
    let id = b
        .eval("document.querySelector('#latest tbody tr').dataset.id")
        .await;
    let id = id.as_str().unwrap().to_string();
    b.eval(&format!("location.hash = '#/run/{id}'; true")).await;
    assert!(
        b.until(
            10.0,
            &format!("document.querySelector('#run-title').innerText.includes('{id}')")
        )
        .await
    );

    // `/api/runs` answers what `agentchat runs --json` prints.
    let api = reqwest::get(format!("{base}/api/runs?profile=ada&limit=0"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let cli = crate::common::isolated_command(BIN, &[])
        .args(["runs", "--json", "--limit", "0", "--profile", "ada"])
        .env("AGENTCHAT_CONFIG", &setup.config)
        .env("XDG_STATE_HOME", setup.state_home())
        .env("HOME", setup.tmp.path())
        .output()
        .unwrap();
    assert!(cli.status.success(), "{cli:?}");
    assert_eq!(api, String::from_utf8_lossy(&cli.stdout));
    assert_eq!(api.lines().count(), 2, "{api}");
    // Not answered on a name that is not loopback's.
    let rebound = reqwest::Client::new()
        .get(format!("{base}/api/overview"))
        .header("host", "attacker.example")
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status().as_u16(), 421);
}

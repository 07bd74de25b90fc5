//! The process's profiles, for its one endpoint: each running profile's [`Metrics`], and the
//! profiles that could not start with why. `agentchat listen` serves a registry of one (and
//! answers exactly as a single listener always has); a host of many profiles inserts each
//! profile's registry as it starts and removes it as it stops (docs/decisions.md, "One metrics
//! endpoint for a host of profiles").
//!
//! - `/metrics`: every profile's samples, each family under one `# HELP`/`# TYPE`.
//! - `/healthz`: 200 while the main loop of every running profile turns (each judged as
//!   [`Metrics::health`] judges one). A profile that could not start is left out: a restart does
//!   not mend its config. So is a profile that is stopping (a reload removing it), unless every
//!   profile is. No profile running at all is 200: the endpoint answering is the process turning.
//! - `/readyz`: 200 when every profile is ready (as [`Metrics::readiness`] judges one), and 503
//!   otherwise, with one line per profile; a profile that could not start is not ready; one that
//!   is stopping is left out unless every profile is; no profile at all is 503.

use super::{Metrics, Probe};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// How long a start failure's reason may be on the page (a config error is one line; a longer
/// one is cut).
const REASON_MAX: usize = 300;

#[derive(Debug)]
enum Entry {
    Running(Arc<Metrics>),
    /// Could not start: why, on one line.
    Failed(String),
}

/// The process's profiles, by name (sorted, so every page lists them in the same order).
#[derive(Debug, Default)]
pub struct Registry {
    profiles: Mutex<BTreeMap<String, Entry>>,
    /// The process's run queue (`listen --all` only).
    pub queue: super::queue::QueueSamples,
    /// The page's reads while it is looked at (`listen::page`).
    pub page: std::sync::Arc<crate::listen::page::Page>,
}

/// One profile's part of an answer.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ProfileProbe {
    pub profile: String,
    /// Counted in the verdict (true), or left out of it (stopping while others run).
    pub counted: bool,
    pub ok: bool,
    /// The profile's own line, as a single listener says it.
    pub reason: String,
}

/// An answer of `/healthz` or `/readyz` for the process: the code, a summary, each profile's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub code: u16,
    pub summary: String,
    pub profiles: Vec<ProfileProbe>,
    /// The registry holds this one profile: the answer is the single listener's.
    pub alone: bool,
}

impl Verdict {
    /// The plain-text body: a registry of one says its profile's line alone (as the single
    /// listener always has); more say the summary, then `name: line` per profile (`all`), or per
    /// profile that fails (`all == false`, for `/healthz`, whose passing lines say little).
    pub fn text(&self, all: bool) -> String {
        if let ([one], true) = (self.profiles.as_slice(), self.alone) {
            return format!("{}\n", one.reason);
        }
        let mut out = format!("{}\n", self.summary);
        for p in self.profiles.iter().filter(|p| all || (p.counted && !p.ok)) {
            out.push_str(&format!("{}: {}\n", p.profile, p.reason));
        }
        out
    }

    /// `{"ok": …, "code": …, "summary": …, "profiles": [{"profile", "counted", "ok", "reason"}]}`.
    pub fn json(&self) -> String {
        let v = serde_json::json!({
            "ok": self.code == 200,
            "code": self.code,
            "summary": self.summary,
            "profiles": self.profiles,
        });
        format!("{v}\n")
    }
}

impl Registry {
    pub fn new() -> Arc<Registry> {
        Arc::new(Registry::default())
    }

    /// A registry holding `metrics` alone: the single listener's.
    pub fn of_one(metrics: Arc<Metrics>) -> Arc<Registry> {
        let r = Registry::new();
        r.insert(&metrics.profile.clone(), metrics);
        r
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<String, Entry>> {
        self.profiles.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A recording registry for `profile`, inserted (replacing what was there: a failed start, or
    /// the registry of a profile that is restarting) and returned for its listener.
    pub fn profile(&self, profile: &str) -> Arc<Metrics> {
        let m = Metrics::new(profile);
        self.insert(profile, m.clone());
        m
    }

    /// `profile` runs with `metrics` (a recording one, [`Metrics::new`] with the same name: its
    /// samples carry that name as `profile`).
    pub fn insert(&self, profile: &str, metrics: Arc<Metrics>) {
        self.lock()
            .insert(profile.to_string(), Entry::Running(metrics));
    }

    /// `profile` could not start (its config table is bad, its lock is held): not ready, with
    /// `reason` (one line, cut at 300 characters; never the key).
    pub fn set_failed(&self, profile: &str, reason: &str) {
        let one_line: String = reason
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        let reason = crate::sys::text::ellipsize(one_line, REASON_MAX);
        self.lock()
            .insert(profile.to_string(), Entry::Failed(reason));
    }

    /// `profile` is gone (removed from the config and stopped): off the page and the probes.
    pub fn remove(&self, profile: &str) {
        self.lock().remove(profile);
    }

    /// The profiles as the page reads them: each running one's state dir, each failed one's
    /// reason.
    pub fn page_profiles(&self) -> Vec<crate::listen::page::PageProfile> {
        self.lock()
            .iter()
            .map(|(name, e)| crate::listen::page::PageProfile {
                name: name.clone(),
                state_dir: match e {
                    Entry::Running(m) => m.state_dir().map(std::path::Path::to_path_buf),
                    Entry::Failed(_) => None,
                },
                error: match e {
                    Entry::Running(_) => None,
                    Entry::Failed(why) => Some(why.clone()),
                },
            })
            .collect()
    }

    /// The profiles' names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    /// The running profiles' registries and the failed profiles' names and reasons, taken out of
    /// the lock so no profile's lock is taken under it.
    #[allow(clippy::type_complexity)]
    fn snapshot(&self) -> (Vec<(String, Arc<Metrics>)>, Vec<(String, String)>) {
        let map = self.lock();
        let mut running = Vec::new();
        let mut failed = Vec::new();
        for (name, e) in map.iter() {
            match e {
                Entry::Running(m) => running.push((name.clone(), m.clone())),
                Entry::Failed(why) => failed.push((name.clone(), why.clone())),
            }
        }
        (running, failed)
    }

    /// `/metrics`: every profile's samples.
    pub fn render(&self) -> String {
        let (running, failed) = self.snapshot();
        let ms: Vec<&Metrics> = running.iter().map(|(_, m)| m.as_ref()).collect();
        let fs: Vec<&str> = failed.iter().map(|(n, _)| n.as_str()).collect();
        let mut page = super::render::page(&ms, &fs);
        self.queue.render(&mut page);
        page
    }

    /// `/healthz` for the process (the module's doc says what it checks).
    pub fn health(&self) -> Verdict {
        let (running, failed) = self.snapshot();
        let alone = running.len() + failed.len() == 1;
        let every_one_stopping = running.iter().all(|(_, m)| m.stopping());
        let profiles: Vec<ProfileProbe> = running
            .iter()
            .map(|(name, m)| probe(name, m.health(), every_one_stopping || !m.stopping()))
            .collect();
        let n = profiles.len();
        let counted = profiles.iter().filter(|p| p.counted).count();
        let wedged = profiles.iter().filter(|p| p.counted && !p.ok).count();
        let not_started = if failed.is_empty() {
            String::new()
        } else {
            format!("; {} could not start (see /readyz)", failed.len())
        };
        let (code, summary) = if n == 0 {
            (200, format!("ok: no profile is running{not_started}"))
        } else if every_one_stopping {
            (503, format!("stopping: every profile ({n}) is stopping"))
        } else if wedged > 0 {
            (
                503,
                format!("wedged: {wedged} of {counted} profiles' main loops do not turn"),
            )
        } else {
            (
                200,
                format!("ok: the main loops of {counted} profiles turn{not_started}"),
            )
        };
        Verdict::new(code, summary, profiles, alone)
    }

    /// `/readyz` for the process (the module's doc says when it is 200).
    pub fn readiness(&self) -> Verdict {
        let (running, failed) = self.snapshot();
        let alone = running.len() + failed.len() == 1;
        let every_one_stopping =
            !running.is_empty() && failed.is_empty() && running.iter().all(|(_, m)| m.stopping());
        let mut profiles: Vec<ProfileProbe> = running
            .iter()
            .map(|(name, m)| probe(name, m.readiness(), every_one_stopping || !m.stopping()))
            .collect();
        profiles.extend(failed.iter().map(|(name, why)| ProfileProbe {
            profile: name.clone(),
            counted: true,
            ok: false,
            reason: format!("not ready: could not start: {why}"),
        }));
        profiles.sort_by(|a, b| a.profile.cmp(&b.profile));
        let n = profiles.len();
        let counted = profiles.iter().filter(|p| p.counted).count();
        let not_ready = profiles.iter().filter(|p| p.counted && !p.ok).count();
        let stopping = match n - counted {
            0 => String::new(),
            left_out => format!(" ({left_out} stopping, left out)"),
        };
        let (code, summary) = if n == 0 {
            (503, "not ready: no profile is running".to_string())
        } else if every_one_stopping {
            (503, format!("not ready: every profile ({n}) is stopping"))
        } else if not_ready > 0 {
            (
                503,
                format!("not ready: {not_ready} of {counted} profiles are not ready{stopping}"),
            )
        } else {
            (
                200,
                format!("ready: all {counted} profiles are ready{stopping}"),
            )
        };
        Verdict::new(code, summary, profiles, alone)
    }
}

impl Verdict {
    /// A registry of one profile answers with that profile's own code (and [`Verdict::text`]
    /// with its own line).
    fn new(code: u16, summary: String, profiles: Vec<ProfileProbe>, alone: bool) -> Verdict {
        let code = match profiles.as_slice() {
            [one] if alone => {
                if one.ok {
                    200
                } else {
                    503
                }
            }
            _ => code,
        };
        Verdict {
            code,
            summary,
            profiles,
            alone,
        }
    }
}

fn probe(name: &str, p: Probe, counted: bool) -> ProfileProbe {
    ProfileProbe {
        profile: name.to_string(),
        counted,
        ok: p.code == 200,
        reason: p.line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    /// Each family's `# HELP` and `# TYPE` once, and its samples together right under them: the
    /// family a sample line belongs to never goes back to one already left.
    fn assert_grouped(page: &str) {
        let mut seen: Vec<&str> = Vec::new();
        for line in page.lines() {
            let family = if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap();
                assert!(!seen.contains(&name), "HELP {name} twice in\n{page}");
                seen.push(name);
                continue;
            } else if let Some(rest) = line.strip_prefix("# TYPE ") {
                rest.split(' ').next().unwrap()
            } else {
                let name = line.split(['{', ' ']).next().unwrap();
                seen.iter()
                    .rev()
                    .find(|f| name.starts_with(**f))
                    .copied()
                    .unwrap_or(name)
            };
            assert_eq!(
                Some(&family),
                seen.last(),
                "{line:?} outside its family's group in\n{page}"
            );
        }
    }

    fn count(page: &str, prefix: &str) -> usize {
        page.lines().filter(|l| l.starts_with(prefix)).count()
    }

    #[test]
    fn two_profiles_render_as_one_page_with_each_family_once_and_its_samples_together() {
        let r = Registry::new();
        let a = r.profile("alpha");
        let b = r.profile("beta");
        a.observe_state("connected", "connected");
        b.observe_state("key_refused", "key_refused");
        a.run_ended(
            "script",
            &crate::runtime::RunOutcome::Completed,
            Duration::from_secs(2),
        );
        b.run_ended(
            "codex",
            &crate::runtime::RunOutcome::Completed,
            Duration::from_secs(20),
        );
        let page = r.render();
        assert_grouped(&page);
        assert_eq!(count(&page, "# HELP agentchat_wakes_total "), 1);
        assert_eq!(count(&page, "# TYPE agentchat_run_duration_seconds "), 1);
        assert!(
            page.contains("agentchat_ready{profile=\"alpha\"} 1\n"),
            "{page}"
        );
        assert!(
            page.contains("agentchat_ready{profile=\"beta\"} 0\n"),
            "{page}"
        );
        assert!(page.contains(
            "agentchat_run_duration_seconds_count{profile=\"beta\",runtime=\"codex\"} 1\n"
        ));
        // Each profile's page alone is the single listener's: the joint page holds both.
        for m in [&a, &b] {
            for line in m.render().lines().filter(|l| !l.starts_with('#')) {
                let series = line.rsplit_once(' ').unwrap().0;
                assert_eq!(count(&page, &format!("{series} ")), 1, "{series}");
            }
        }
        assert!(!page.contains("agentchat_profile_failed"), "{page}");
    }

    #[test]
    fn a_failed_profile_is_on_the_page_as_not_ready_and_failed() {
        let r = Registry::new();
        r.profile("good").observe_state("connected", "connected");
        r.set_failed("bad", "bad value for `listen.runtime`:\n`nope`");
        let page = r.render();
        assert_grouped(&page);
        assert!(
            page.contains("agentchat_ready{profile=\"bad\"} 0\n"),
            "{page}"
        );
        assert!(
            page.contains("agentchat_profile_failed{profile=\"bad\"} 1\n"),
            "{page}"
        );
        assert_eq!(count(&page, "agentchat_profile_failed{"), 1);
        assert!(
            !page.contains("nope"),
            "the reason stays off the page: {page}"
        );
    }

    #[test]
    fn readyz_is_503_until_every_profile_is_ready_and_says_why_for_each() {
        let r = Registry::new();
        assert_eq!(r.readiness().code, 503, "no profile yet");
        let a = r.profile("a");
        let b = r.profile("b");
        a.observe_state("connected", "connected");
        b.observe_state("backoff", "backoff");
        r.set_failed("c", "the profile's lock is held by pid 42");
        let v = r.readiness();
        assert_eq!(v.code, 503);
        assert_eq!(
            v.text(true),
            "not ready: 2 of 3 profiles are not ready\n\
             a: ready: the socket is up and the key accepted\n\
             b: not ready: the socket is backoff\n\
             c: not ready: could not start: the profile's lock is held by pid 42\n"
        );
        let json: serde_json::Value = serde_json::from_str(&v.json()).unwrap();
        assert_eq!(json["ok"], false);
        assert_eq!(json["profiles"][1]["profile"], "b");
        assert_eq!(json["profiles"][1]["ok"], false);
        assert_eq!(json["profiles"][0]["ok"], true);
        b.observe_state("connected", "connected");
        r.remove("c");
        let v = r.readiness();
        assert_eq!(
            (v.code, v.summary.as_str()),
            (200, "ready: all 2 profiles are ready")
        );
        // A profile a reload is stopping is left out while others run; all stopping is 503.
        b.observe_state("stopping", "connected");
        let v = r.readiness();
        assert_eq!(
            (v.code, v.summary.as_str()),
            (
                200,
                "ready: all 1 profiles are ready (1 stopping, left out)"
            )
        );
        a.observe_state("stopping", "connected");
        assert_eq!(r.readiness().code, 503);
        assert_eq!(r.health().code, 503);
    }

    #[test]
    fn a_removed_profile_is_gone_from_the_page_and_the_probes() {
        let r = Registry::new();
        r.profile("stay").observe_state("connected", "connected");
        r.profile("go").observe_state("backoff", "backoff");
        assert!(r.render().contains("profile=\"go\""));
        assert_eq!(r.readiness().code, 503);
        r.remove("go");
        let page = r.render();
        assert!(!page.contains("profile=\"go\""), "{page}");
        assert_eq!(r.names(), vec!["stay".to_string()]);
        assert_eq!(r.readiness().code, 200);
        r.set_failed("go", "bad table");
        r.remove("go");
        assert!(!r.render().contains("agentchat_profile_failed"));
    }

    #[test]
    fn a_registry_of_one_answers_as_the_single_listener() {
        let m = Metrics::new("default");
        let r = Registry::of_one(m.clone());
        assert_eq!(r.render(), m.render());
        for (state, socket) in [
            ("", ""),
            ("connected", "connected"),
            ("key_refused", "key_refused"),
            ("stopping", "connected"),
        ] {
            if !state.is_empty() {
                m.observe_state(state, socket);
            }
            let (h, v) = (r.health(), r.readiness());
            assert_eq!(
                (h.code, h.text(false)),
                (m.health().code, format!("{}\n", m.health().line))
            );
            assert_eq!(
                (v.code, v.text(true)),
                (m.readiness().code, format!("{}\n", m.readiness().line))
            );
        }
    }

    #[test]
    fn healthz_names_a_wedged_profile_and_leaves_out_those_that_could_not_start() {
        let r = Registry::new();
        let a = r.profile("a");
        let b = r.profile("b");
        a.observe_state("connected", "connected");
        b.observe_state("connected", "connected");
        r.set_failed("c", "bad table");
        let h = r.health();
        assert_eq!(h.code, 200, "{}", h.text(false));
        assert_eq!(
            h.summary,
            "ok: the main loops of 2 profiles turn; 1 could not start (see /readyz)"
        );
        b.inner.lock().unwrap().last_turn = Some(Instant::now() - Duration::from_secs(130));
        let h = r.health();
        assert_eq!(h.code, 503);
        assert_eq!(
            h.text(false),
            "wedged: 1 of 2 profiles' main loops do not turn\n\
             b: wedged: the main loop last turned 130 s ago (bound 120 s)\n"
        );
        r.remove("a");
        r.remove("b");
        assert_eq!(
            r.health().code,
            200,
            "only a failed profile: a restart mends nothing"
        );
    }
}

// The page's one script (embedded in the binary; no library). It asks /api/overview every 2 s
// while the page is shown and draws what it answers; every text goes in through textContent.
"use strict";
(function () {
  const EVERY_MS = 2000;
  const DAY_MS = 24 * 3600 * 1000;
  const state = { q: "", page: 1, timer: null, loadedAt: Date.now() };
  window.agentchatPage = state; // what the browser test reads: the page was not reloaded

  const $ = (sel) => document.querySelector(sel);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "text") e.textContent = v; else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  }
  const svg = (tag, attrs) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    return e;
  };
  const pad = (n) => String(n).padStart(2, "0");
  function when(iso) {
    const d = new Date(iso);
    if (isNaN(d)) return iso || "";
    const today = new Date().toDateString() === d.toDateString();
    const t = pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
    return today ? t : (d.getMonth() + 1) + "-" + pad(d.getDate()) + " " + t;
  }
  function took(ms) {
    if (ms == null) return "";
    const s = Math.round(ms / 1000);
    if (ms < 10000) return (ms / 1000).toFixed(1) + " s";
    if (s < 60) return s + " s";
    if (s < 3600) return Math.floor(s / 60) + " min " + (s % 60) + " s";
    return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
  }
  const money = (c) => (c == null ? "" : "$" + c.toFixed(2));
  function cost(r) {
    if (r.cost_usd != null) return money(r.cost_usd);
    if (r.tokens != null) return r.tokens + " tok";
    return "";
  }
  function outcome(r) {
    if (r.outcome === "failed" && r.exit != null) return "failed (exit " + r.exit + ")";
    if (r.outcome === "held" && r.hold) return "held: " + r.hold.reason;
    if (r.outcome === "no_run" && r.no_run_reason) return "no run: " + r.no_run_reason;
    return (r.outcome || "").replace("_", " ");
  }
  function waited(r) {
    const parts = [];
    if (r.cards) parts.push(r.cards + (r.cards === 1 ? " card" : " cards"));
    if (r.invites) parts.push(r.invites + (r.invites === 1 ? " invite" : " invites"));
    let s = parts.join(", ");
    if (r.senders && r.senders.length) s += " from " + r.senders.join(" ");
    if (r.after) s += "; after: " + r.after.answered + " answered, " + r.after.waiting + " waiting";
    return s;
  }
  function summary(t) {
    let s = t.runs + (t.runs === 1 ? " run" : " runs");
    if (t.failed) s += " (" + t.failed + " failed)";
    s += ", " + t.holds + (t.holds === 1 ? " hold" : " holds");
    if (t.cost_usd > 0) s += ", " + money(t.cost_usd);
    return s;
  }
  const runLink = (r, text) => el("a", { href: "#/run/" + encodeURIComponent(r.id), text: text });

  function timeline(marks, now) {
    const w = 360, h = 18, from = now - DAY_MS;
    const s = svg("svg", { class: "tl", viewBox: "0 0 " + w + " " + h, role: "img" });
    const x = (t) => Math.max(0, Math.min(w, ((t - from) / DAY_MS) * w));
    for (const m of marks) {
      const cls = m.kind === "hold" ? "k-hold" : m.kind === "queued" ? "k-queued"
        : m.outcome === "completed" ? "k-completed" : m.outcome === "running" ? "k-running" : "k-failed";
      const x0 = x(m.start), x1 = Math.max(x(m.end == null ? now : m.end), x0 + 2);
      const rect = svg("rect", { class: cls, x: x0, y: m.kind === "hold" ? 0 : 3, width: x1 - x0, height: m.kind === "hold" ? h : h - 6, "data-id": m.id });
      rect.append(svg("title", {}));
      rect.firstChild.textContent = m.kind + " " + m.outcome + " " + when(new Date(m.start).toISOString());
      s.append(rect);
      if (m.kind !== "hold") s.append(svg("line", { class: "wake", x1: x0, x2: x0, y1: 0, y2: h }));
    }
    return s;
  }

  function drawOverview(o) {
    $("#totals").textContent = o.total + (o.total === 1 ? " agent" : " agents") + " · today: " + summary(o.today);
    const counts = $("#counts");
    counts.replaceChildren(
      ...["stuck", "failing", "held", "ok"].map((k) => el("span", { class: "pill" + (o.counts[k] || k === "ok" ? " a-" + k : ""), text: o.counts[k] + " " + k }))
    );
    const body = $("#profiles tbody");
    body.replaceChildren(...o.profiles.map((p) => {
      const state = el("td", { class: "wrap" }, el("span", { class: "pill a-" + p.attention, text: p.state }));
      if (p.held) state.append(" ", el("span", { class: "o-held", text: "held: " + p.held.reason + (p.held.until ? " until " + when(p.held.until) : "") }));
      if (p.error) state.append(" ", el("span", { class: "muted", text: p.error }));
      else if (p.detail && p.attention === "stuck") state.append(" ", el("span", { class: "muted", text: p.detail }));
      const last = p.last ? el("td", {}, runLink(p.last, when(p.last.started_at)), " ", el("span", { class: "o-" + p.last.outcome, text: outcome(p.last) })) : el("td", { class: "muted", text: "nothing yet" });
      const tr = el("tr", { "data-profile": p.profile, "data-attention": p.attention },
        el("td", { text: p.profile }),
        el("td", { text: p.handle ? "@" + p.handle.replace(/^@/, "") : "" }),
        state,
        el("td", { class: "today", text: summary(p.today) }),
        el("td", {}, timeline(p.timeline, o.now_ms)),
        last);
      return tr;
    }));
    const pager = $("#pager");
    pager.replaceChildren();
    if (o.pages > 1 || o.matched !== o.total) {
      const prev = el("button", { text: "previous" }); prev.disabled = o.page <= 1;
      const next = el("button", { text: "next" }); next.disabled = o.page >= o.pages;
      prev.onclick = () => { state.page = o.page - 1; refresh(); };
      next.onclick = () => { state.page = o.page + 1; refresh(); };
      pager.append(prev, el("span", { text: "page " + o.page + " of " + o.pages + " · " + o.matched + " of " + o.total + " shown by the search" }), next);
    }
    $("#latest tbody").replaceChildren(...o.latest.map((r) => el("tr", { "data-id": r.id },
      el("td", {}, runLink(r, when(r.started_at))),
      el("td", { text: r.profile }),
      el("td", { class: "o-" + r.outcome, text: outcome(r) }),
      el("td", { text: took(r.duration_ms) }),
      el("td", { text: cost(r) }),
      el("td", { text: r.reason }),
      el("td", { class: "wrap", text: waited(r) }))));
    $("#updated").textContent = "updated " + when(new Date(o.now_ms).toISOString());
  }

  function drawRun(r) {
    $("#run-title").textContent = (r.kind === "hold" ? "hold " : "run ") + r.id;
    const rows = [
      ["profile", r.profile], ["outcome", outcome(r)], ["started", r.started_at], ["ended", r.ended_at || ""],
      ["took", took(r.duration_ms)], ["woken for", r.reason], ["waited", waited(r)], ["cost", cost(r)],
      ["tokens", r.tokens == null ? "" : String(r.tokens)], ["failure", r.failure || ""],
      ["hold", r.hold ? r.hold.reason + " (" + r.hold.key + ")" + (r.hold.until ? " until " + r.hold.until : "") + "; " + r.hold.wakes + " wake(s)" : ""],
      ["queued", r.queued_ms != null ? took(r.queued_ms) : ""],
      ["log", r.log ? r.log + "  (agentchat runs show " + r.id + " prints its tail)" : ""],
    ];
    $("#run-fields").replaceChildren(...rows.filter(([, v]) => v).flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: v })]));
  }

  async function refresh() {
    clearTimeout(state.timer);
    const route = location.hash.match(/^#\/run\/(.+)$/);
    $("#overview").hidden = !!route;
    $("#run").hidden = !route;
    try {
      if (route) {
        const res = await fetch("/api/run/" + route[1], { cache: "no-store" });
        if (res.ok) drawRun(await res.json());
        else $("#run-title").textContent = "no such run";
      } else {
        const q = new URLSearchParams({ q: state.q, page: state.page });
        const res = await fetch("/api/overview?" + q, { cache: "no-store" });
        if (res.ok) drawOverview(await res.json());
      }
    } catch (e) {
      $("#updated").textContent = "the listener does not answer (" + e.message + "); trying again";
    }
    if (!document.hidden) state.timer = setTimeout(refresh, EVERY_MS);
  }

  let typing = null;
  document.addEventListener("DOMContentLoaded", () => {
    $("#search").addEventListener("input", (e) => {
      clearTimeout(typing);
      typing = setTimeout(() => { state.q = e.target.value; state.page = 1; refresh(); }, 250);
    });
    window.addEventListener("hashchange", refresh);
    document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); else clearTimeout(state.timer); });
    refresh();
  });
})();

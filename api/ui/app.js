// trainq's dashboard: plain JavaScript, no build step. Every figure comes
// from trainq-api's JSON with the signed-in token; nothing is kept but the
// token (in this tab's sessionStorage).
"use strict";

const HIDDEN = "(a job of another workspace)";
const TOKEN_KEY = "trainq-token";
const state = { configs: null, region: "", alloc: "", timer: 0, seq: 0 };

// --- small DOM helpers ---------------------------------------------------
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const k of kids.flat()) {
    if (k === null || k === undefined || k === false) continue;
    e.append(k instanceof Node ? k : document.createTextNode(String(k)));
  }
  return e;
}
const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const k of kids.flat()) if (k) e.append(k);
  return e;
}
const $ = (id) => document.getElementById(id);

function fmtTime(t) {
  if (!t) return "";
  const d = new Date(t);
  return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}
function fmtAgo(t) {
  if (!t) return "";
  let s = Math.max(0, Math.round((Date.now() - new Date(t).getTime()) / 1000));
  if (s < 60) return s + "s";
  if (s < 3600) return Math.floor(s / 60) + "m " + (s % 60) + "s";
  const h = Math.floor(s / 3600);
  s -= h * 3600;
  return h + "h " + Math.floor(s / 60) + "m";
}
function jobLink(name, text) {
  if (!name || name === HIDDEN) return el("span", { class: "hidden-job", text: text || HIDDEN });
  return el("a", { href: "#/job/" + encodeURIComponent(name), text: text || name });
}

// --- the API -------------------------------------------------------------
function token() { return sessionStorage.getItem(TOKEN_KEY) || ""; }

class APIError extends Error {
  constructor(status, body) {
    super((body && body.error && body.error.message) || ("HTTP " + status));
    this.status = status;
  }
}

async function api(path, opts) {
  const o = Object.assign({ method: "GET" }, opts || {});
  o.headers = Object.assign({ Authorization: "Bearer " + token() }, o.headers || {});
  if (o.json !== undefined) {
    o.body = JSON.stringify(o.json);
    o.headers["Content-Type"] = "application/json";
    delete o.json;
  }
  const r = await fetch(path, o);
  const text = await r.text();
  let body = text;
  if ((r.headers.get("Content-Type") || "").includes("json")) body = text ? JSON.parse(text) : null;
  if (!r.ok) {
    if (r.status === 401) signOut("The token was refused: sign in again.");
    throw new APIError(r.status, typeof body === "object" ? body : null);
  }
  return body;
}

function showError(msg) {
  const e = $("error");
  e.textContent = msg || "";
  e.hidden = !msg;
}

// --- sign in ---------------------------------------------------------------
function signOut(msg) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.configs = null;
  showLogin(msg);
}
function showLogin(msg) {
  clearTimeout(state.timer);
  $("login").hidden = false;
  $("view").replaceChildren();
  $("signout").hidden = true;
  $("who").textContent = "";
  showError(msg || "");
  $("token").focus();
}

async function loadConfigs() {
  if (state.configs) return;
  const c = await api("/public/v2/configs");
  state.configs = c;
  const sel = $("alloc");
  sel.replaceChildren();
  for (const r of c.regions || []) {
    for (const a of r.allocations || []) {
      sel.append(el("option", { value: r.name + "/" + a.name, text: r.name + "/" + a.name }));
    }
  }
  const saved = sessionStorage.getItem("trainq-alloc");
  const want = saved || (c.default_region + "/" + c.default_allocation);
  if ([...sel.options].some((o) => o.value === want)) sel.value = want;
  [state.region, state.alloc] = sel.value.split("/");
}

// --- routing ----------------------------------------------------------------
function route() {
  const h = location.hash || "#/gpus";
  if (h.startsWith("#token=")) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(h.slice(7)));
    history.replaceState(null, "", location.pathname + "#/gpus");
    return route();
  }
  if (!token()) return showLogin();
  $("login").hidden = true;
  $("signout").hidden = false;
  showError("");
  clearTimeout(state.timer);
  const seq = ++state.seq;
  const parts = h.slice(2).split("/");
  const view = parts[0] || "gpus";
  for (const n of ["gpus", "queue", "timeline"]) {
    const a = $("nav-" + n);
    if (n === view) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  loadConfigs().then(() => {
    if (seq !== state.seq) return;
    if (view === "job") return jobView(decodeURIComponent(parts.slice(1).join("/")), seq);
    if (view === "queue") return queueView(seq);
    if (view === "timeline") return timelineView(seq);
    return gpusView(seq);
  }).catch((e) => { if (seq === state.seq) showError(e.message); });
}

// again schedules the view's next refresh, unless another view took over.
function again(seq, fn, ms) {
  if (seq !== state.seq) return;
  clearTimeout(state.timer);
  state.timer = setTimeout(() => { if (seq === state.seq) fn(seq); }, ms);
}

function allocQuery() { return "region=" + encodeURIComponent(state.region); }
function allocPath() { return encodeURIComponent(state.alloc); }

// --- view 1: allocations (the GPU grid) --------------------------------------
const STATES = ["free", "held", "releasing", "nominated", "reserved", "lost"];

function cellText(c, node) {
  let s = node + " GPU " + c.index + ": " + c.state;
  if (c.job) s += ", " + c.job + " (" + c.class + " " + (c.type || "job") + ", " + c.job_gpus + (c.job_gpus === 1 ? " GPU)" : " GPUs)");
  if (c.attempt) s += ", attempt " + c.attempt;
  if (c.worker !== undefined) s += ", worker " + c.worker;
  if (c.since) s += ", since " + fmtTime(c.since) + " (" + fmtAgo(c.since) + ")";
  if (c.nominated_to) s += ", nominated to " + c.nominated_to;
  if (c.reserved_for) s += ", reserved for " + c.reserved_for;
  if (c.on_loan) s += ", on loan (gives it back when the reserved job may start)";
  return s;
}

async function gpusView(seq) {
  const g = await api("/ui/api/allocations/" + allocPath() + "/gpus?" + allocQuery());
  if (seq !== state.seq) return;
  $("who").textContent = g.admin ? "admin" : "workspace " + g.workspace;
  const prevFocus = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.cell : null;
  const detail = el("div", { id: "gpu-detail", class: "detail", "aria-live": "polite" },
    el("span", { class: "muted", text: "Focus (Tab, then the arrow keys) or hover a GPU to see who holds it; Enter opens its job." }));
  const show = (c, node) => () => {
    detail.replaceChildren(cellText(c, node), " ");
    if (c.job && c.job !== HIDDEN) detail.append(jobLink(c.job, "open job"));
  };
  const grid = el("div", { class: "grid", id: "gpu-grid" });
  for (const n of g.nodes) {
    const tags = [];
    if (n.lost) tags.push(el("span", { class: "tag", text: "lost" }));
    if (n.fenced) tags.push(el("span", { class: "tag", title: n.fenced, text: "fenced" }));
    if (n.reserved_for) tags.push(el("span", { class: "tag", text: "reserved for " + n.reserved_for }));
    grid.append(el("div", { class: "node", "data-node": n.name }, n.name, tags));
    const cells = el("div", { class: "cells", role: "group", "aria-label": n.name });
    for (const c of n.cells) {
      const label = cellText(c, n.name);
      const b = el("button", {
        type: "button", class: "gpu " + c.state + (c.class ? " " + c.class : "") + (c.on_loan ? " on-loan" : ""), title: label, "aria-label": label,
        "data-node": n.name, "data-gpu": c.index, "data-state": c.state, "data-job": c.job || "", "data-cell": n.name + "/" + c.index,
        "data-nominated-to": c.nominated_to || "", "data-on-loan": c.on_loan ? "true" : "",
        onfocus: show(c, n.name), onmouseenter: show(c, n.name),
        onclick: () => { if (c.job && c.job !== HIDDEN) location.hash = "#/job/" + encodeURIComponent(c.job); },
      }, el("span", { class: "ix", text: c.index + " " + c.state }), c.job ? (c.job === HIDDEN ? "other ws" : c.job.replace(/^lm-mpi-job-/, "")) : "");
      cells.append(b);
    }
    grid.append(cells);
  }
  // One tab stop for the whole grid (roving tabindex): arrows move between GPUs and nodes,
  // Home and End to a row's ends, Enter opens the job.
  const all = [...grid.querySelectorAll(".gpu")];
  const start = all.find((b) => b.dataset.cell === prevFocus) || all[0];
  for (const b of all) b.tabIndex = b === start ? 0 : -1;
  grid.addEventListener("keydown", (e) => {
    const b = e.target.closest(".gpu");
    if (!b) return;
    const row = [...b.parentElement.children];
    const i = row.indexOf(b);
    const rows = [...grid.querySelectorAll(".cells")];
    const r = rows.indexOf(b.parentElement);
    let to = null;
    if (e.key === "ArrowRight") to = row[i + 1];
    else if (e.key === "ArrowLeft") to = row[i - 1];
    else if (e.key === "Home") to = row[0];
    else if (e.key === "End") to = row[row.length - 1];
    else if (e.key === "ArrowDown" || e.key === "ArrowUp") {
      const next = rows[r + (e.key === "ArrowDown" ? 1 : -1)];
      if (next && next.children.length) to = next.children[Math.min(i, next.children.length - 1)];
    }
    if (!to) return;
    e.preventDefault();
    b.tabIndex = -1;
    to.tabIndex = 0;
    to.focus();
  });
  const t = g.totals || {};
  const totals = el("table", { id: "gpu-totals", "aria-label": "GPUs by state" },
    el("tr", {}, el("th", { text: "GPUs" }), STATES.map((s) => el("th", { class: "num", text: s }))),
    el("tr", {}, el("td", { text: t.total || 0 }), STATES.map((s) => el("td", { class: "num", "data-total": s, text: t[s] || 0 }))));
  const byClass = el("table", { id: "class-totals", "aria-label": "by class" },
    el("tr", {}, ["class", "GPUs held", "running", "waiting"].map((h) => el("th", { text: h }))),
    g.by_class.map((c) => el("tr", {}, el("td", {}, el("i", { class: c.class, "aria-hidden": "true" }), " ", c.class),
      el("td", { class: "num", text: c.gpus }), el("td", { class: "num", text: c.running }), el("td", { class: "num", text: c.waiting }))));
  const byWs = el("table", { id: "workspace-totals", "aria-label": "by workspace" },
    el("tr", {}, ["workspace", "GPUs held", "running"].map((h) => el("th", { text: h }))),
    g.by_workspace.map((w) => el("tr", {}, el("td", { text: w.workspace }), el("td", { class: "num", text: w.gpus }), el("td", { class: "num", text: w.running }))));
  const legend = el("div", { class: "legend", "aria-label": "legend" },
    ["high", "medium", "low"].map((c) => el("span", {}, el("i", { class: c }), "held: " + c)),
    ["free", "releasing", "nominated", "reserved", "lost"].map((s) => el("span", {}, el("i", { class: s }), s)),
    el("span", {}, el("i", { class: "medium on-loan" }), "on loan"));
  $("view").replaceChildren(
    el("h1", { text: "GPUs of " + g.region + "/" + g.allocation_name + (g.recovering ? " (recovering)" : "") }),
    el("div", { class: "cols" }, totals, byClass, byWs),
    legend, grid, detail);
  if (prevFocus) {
    const f = document.querySelector('[data-cell="' + CSS.escape(prevFocus) + '"]');
    if (f) f.focus();
  }
  again(seq, gpusView, 2000);
}

// --- view 2: queue ----------------------------------------------------------
// The filters are the queue endpoint's (class, type, workspace): the server
// applies them over the whole queue and pages through the jobs they keep.
const queueState = { offset: 0, limit: 50, cls: "", type: "", ws: "" };

// whoAmI is who the token is (the grid's answer says), and for an admin the
// workspaces the allocation shows, to filter by; asked again after 30 s.
const who = { key: "", at: 0, admin: false, workspace: "", workspaces: [] };
async function whoAmI() {
  const key = state.region + "/" + state.alloc;
  if (who.key === key && Date.now() - who.at < 30000) return who;
  const g = await api("/ui/api/allocations/" + allocPath() + "/gpus?" + allocQuery());
  Object.assign(who, { key, at: Date.now(), admin: g.admin, workspace: g.workspace,
    workspaces: g.by_workspace.map((w) => w.workspace) });
  return who;
}

function queueQuery(q) {
  let s = allocQuery() + "&offset=" + q.offset + "&limit=" + q.limit + "&expected_start=true";
  if (q.cls) s += "&class=" + encodeURIComponent(q.cls);
  if (q.type) s += "&type=" + encodeURIComponent(q.type);
  if (q.ws) s += "&workspace=" + encodeURIComponent(q.ws);
  return s;
}

async function queueView(seq) {
  const q = queueState;
  const me = await whoAmI();
  if (seq !== state.seq) return;
  if (!me.admin && q.ws && q.ws !== me.workspace) q.ws = ""; // a user filters by their own workspace only
  const data = await api("/public/v2/allocations/" + allocPath() + "/queue?" + queueQuery(q));
  if (seq !== state.seq) return;
  const rows = data.waiting;
  const filtered = data.waiting_matched !== undefined;
  const listed = filtered ? data.waiting_matched : data.waiting_total;
  const pages = Math.max(1, Math.ceil(listed / q.limit));
  if (!rows.length && q.offset > 0 && q.offset >= listed) { // the list shrank under this page: show its last one
    q.offset = (pages - 1) * q.limit;
    return queueView(seq);
  }
  const page = Math.floor(q.offset / q.limit) + 1;
  const rerender = () => { clearTimeout(state.timer); queueView(state.seq).catch((e) => showError(e.message)); };
  const refilter = (set) => (v) => { set(v); q.offset = 0; }; // a new filter starts at its first page
  const select = (id, label, value, options, set) => el("label", {}, label + " ",
    el("select", { id, onchange: (e) => { set(e.target.value); rerender(); } },
      options.map(([v, t]) => el("option", { value: v, text: t, selected: v === value }))));
  let wsChoice;
  if (me.admin) {
    // The workspaces holding GPUs here, those in the fair-share rows, and the one chosen.
    const names = new Set([...me.workspaces, ...(data.fair_share || []).map((f) => f.workspace)]);
    if (q.ws) names.add(q.ws);
    wsChoice = select("f-workspace", "workspace", q.ws, [["", "all"], ...[...names].sort().map((w) => [w, w])], refilter((v) => { q.ws = v; }));
  } else {
    wsChoice = el("label", {}, el("input", { type: "checkbox", id: "f-mine", checked: q.ws === me.workspace,
      onchange: (e) => { refilter((v) => { q.ws = v; })(e.target.checked ? me.workspace : ""); rerender(); } }), " my workspace only");
  }
  const filters = el("div", { class: "filters", role: "group", "aria-label": "filters" },
    select("f-class", "class", q.cls, [["", "all"], ["high", "high"], ["medium", "medium"], ["low", "low"]], refilter((v) => { q.cls = v; })),
    select("f-type", "type", q.type, [["", "all"], ["job", "job"], ["notebook", "notebook"]], refilter((v) => { q.type = v; })),
    wsChoice);
  const pager = el("div", { class: "pager", role: "navigation", "aria-label": "pages" },
    el("button", { type: "button", id: "q-prev", disabled: q.offset === 0, onclick: () => { q.offset = Math.max(0, q.offset - q.limit); rerender(); } }, "‹ Previous"),
    el("span", { id: "q-page", text: "page " + page + " of " + pages + " · " +
      (filtered ? listed + " of " + data.waiting_total + " waiting match" : data.waiting_total + " waiting") }),
    el("button", { type: "button", id: "q-next", disabled: q.offset + q.limit >= listed, onclick: () => { q.offset += q.limit; rerender(); } }, "Next ›"));
  const waiting = el("table", { id: "queue-table", "aria-label": "waiting jobs" },
    el("tr", {}, ["#", "job", "class", "type", "GPUs", "waiting", "reason", "expected start"].map((h) => el("th", { text: h }))),
    rows.map((w) => el("tr", { "data-job": w.job_name },
      el("td", { class: "num", text: w.launch_order }), el("td", {}, jobLink(w.job_name)),
      el("td", {}, el("i", { class: w.priority, "aria-hidden": "true" }), " ", w.priority), el("td", { text: w.type }),
      el("td", { class: "num", text: w.gpu_count }), el("td", { title: fmtTime(w.waiting_since), text: fmtAgo(w.waiting_since) }),
      el("td", { class: "reason", text: w.reason }),
      el("td", { class: "reason" }, w.expected_start_at ? el("strong", { text: fmtTime(w.expected_start_at) }) : "",
        w.expected_start_earliest ? el("span", { class: "eta-range", title: "8 in 10 jobs of this allocation start within their range",
          text: " likely " + fmtTime(w.expected_start_earliest) + " – " + fmtTime(w.expected_start_latest) }) : "",
        w.expected_start_at ? el("br") : "",
        el("span", { class: "muted", text: w.expected_start || "" })))));
  const running = el("table", { id: "running-table", "aria-label": "running jobs" },
    el("tr", {}, ["job", "class", "GPUs", "attempt", "running", "state"].map((h) => el("th", { text: h }))),
    data.running.map((r) => el("tr", { "data-job": r.job_name },
      el("td", {}, jobLink(r.job_name)), el("td", {}, el("i", { class: r.priority, "aria-hidden": "true" }), " ", r.priority),
      el("td", { class: "num", text: r.gpu_count }), el("td", { class: "num", text: r.attempt }),
      el("td", { title: fmtTime(r.started_at), text: fmtAgo(r.started_at) }),
      el("td", { text: r.releasing ? "releasing" + (r.preempted_by ? " (preempted by " + r.preempted_by + ")" : "") : "running" }))));
  $("view").replaceChildren(
    el("h1", { text: "Queue of " + data.region + "/" + data.allocation_name }),
    el("p", { text: data.free_gpus + " of " + data.total_gpus + " GPUs free, " + data.releasing_gpus + " releasing" }),
    filters, pager, waiting, rows.length ? "" : el("p", { class: "muted", text: filtered ? "No waiting job matches." : "No job waits." }),
    el("h2", { text: "Running (" + data.running.length + ")" }), running);
  again(seq, queueView, 3000);
}

// --- view 3: a job ------------------------------------------------------------
async function jobView(name, seq) {
  let j;
  try {
    j = await api("/public/v2/jobs/" + encodeURIComponent(name));
  } catch (e) {
    if (e.status === 404) {
      $("view").replaceChildren(el("h1", { text: "No such job" }), el("p", { text: "No job " + name + " in your workspace." }));
      return;
    }
    throw e;
  }
  if (seq !== state.seq) return;
  let logs = "";
  try {
    logs = await api("/public/v2/jobs/" + encodeURIComponent(name) + "/logs?tail=100&verbose=true");
  } catch (e) {
    logs = "(no logs: " + e.message + ")";
  }
  if (seq !== state.seq) return;
  let params = null;
  try {
    params = await api("/public/v2/jobs/" + encodeURIComponent(name) + "/params");
  } catch (e) {
    params = null;
  }
  if (seq !== state.seq) return;
  const done = ["Completed", "Failed", "Stopped", "Preempted"].includes(j.status);
  const paramsOpen = !!($("job-params") && $("job-params").open);
  const act = async (what) => {
    try {
      if (what === "cancel") await api("/public/v2/jobs/" + encodeURIComponent(name), { method: "DELETE" });
      else {
        const r = await api("/public/v2/jobs/restart", { method: "POST", json: { job_name: name } });
        location.hash = "#/job/" + encodeURIComponent(r.job_name);
        return;
      }
      route();
    } catch (e) { showError(e.message); }
  };
  const facts = [["status", j.status], ["class", j.priority_class], ["type", j.type || j.kind], ["allocation", j.region + "/" + j.allocation_name],
    ["instance type", j.instance_type], ["workers", j.n_workers], ["GPUs", j.gpu_count], ["attempt", j.attempt + " (max_retry " + j.max_retry + ")"],
    ["author", j.job_author], ["workspace", j.workspace], ["created", fmtTime(j.created_at)], ["running since", fmtTime(j.running_at)],
    ["completed", fmtTime(j.completed_at)], ["message", j.message], ["position", j.position], ["reason", j.reason], ["warning", j.warning]];
  const attempts = el("table", { id: "attempts", "aria-label": "attempts" },
    el("tr", {}, ["#", "queued", "started", "ended", "placement", "end reason", "preemptor", "notes"].map((h) => el("th", { text: h }))),
    (j.attempts || []).map((a) => el("tr", {},
      el("td", { class: "num", text: a.number }), el("td", { text: fmtTime(a.queued_at) }), el("td", { text: fmtTime(a.started_at) }),
      el("td", { text: fmtTime(a.ended_at) }),
      el("td", { text: (a.placement || []).map((p) => "w" + p.worker + "@" + p.node + "[" + (p.gpus || []).join(",") + "]").join(" ") }),
      el("td", { class: "reason", text: a.end_reason || "" }),
      el("td", {}, a.preemptor ? jobLink(a.preemptor.job, a.preemptor.job + " (" + a.preemptor.class + ")") : ""),
      el("td", { class: "reason", text: attemptNotes(a) }))));
  $("view").replaceChildren(
    el("h1", { id: "job-name", text: j.job_name }),
    el("div", { class: "buttons" },
      el("button", { type: "button", id: "cancel", class: "danger", disabled: done, onclick: () => act("cancel") }, "Cancel"),
      el("button", { type: "button", id: "restart", onclick: () => act("restart") }, "Restart as a new job")),
    el("table", { id: "job-facts", "aria-label": "job" }, facts.filter(([, v]) => v !== undefined && v !== "" && v !== null && v !== 0)
      .map(([k, v]) => el("tr", {}, el("th", { text: k }), el("td", { class: k === "status" ? "state" : "", text: v })))),
    j.url ? el("p", {}, "Notebook: ", el("a", { id: "notebook-url", href: j.url, rel: "noopener", text: j.url })) : "",
    params ? el("details", { id: "job-params", open: paramsOpen }, el("summary", { text: "Parameters (every RunJobRequest field)" }),
      el("table", {}, Object.entries(params).map(([k, v]) => el("tr", {}, el("th", { text: k }),
        el("td", { class: "reason", text: typeof v === "string" ? v : JSON.stringify(v) }))))) : "",
    el("h2", { text: "Attempts" }), attempts,
    (j.preemptors || []).length ? el("h2", { text: "Preempted by" }) : "",
    (j.preemptors || []).length ? el("ul", {}, j.preemptors.map((p) => el("li", {}, jobLink(p.name), " (" + p.priority + ", attempt " + p.attempt + ", " + fmtTime(p.preempted_at) + ")"))) : "",
    el("h2", { text: "Logs (last 100 lines)" }), el("pre", { class: "logs", id: "logs", tabindex: "0", text: logs || "(empty)" }));
  if (!done) again(seq, (s) => jobView(name, s), 3000);
}

// attemptNotes: the attempt's checkpoint, notice, warning and worker releases, in a line.
function attemptNotes(a) {
  const n = [];
  if (a.checkpoint_at) n.push("checkpoint " + fmtTime(a.checkpoint_at));
  if (a.notice_reason) n.push("notice (" + a.notice_reason + ") " + fmtTime(a.noticed_at) + ", exit by " + fmtTime(a.notice_deadline));
  if (a.warning) n.push("warning: " + a.warning);
  if (a.url) n.push("served at " + a.url);
  for (const r of a.released || []) n.push("worker " + r.worker + " released " + fmtTime(r.at));
  return n.join("; ");
}

// --- view 4: timeline ---------------------------------------------------------
const tlState = { hours: 1, zoom: 1, pan: 0, fit: true };

async function timelineView(seq) {
  const t = await api("/ui/api/allocations/" + allocPath() + "/timeline?" + allocQuery() + "&hours=" + tlState.hours);
  if (seq !== state.seq) return;
  drawTimeline(t);
  again(seq, timelineView, 15000);
}

function drawTimeline(t) {
  const from = new Date(t.from).getTime(), to = new Date(t.to).getTime();
  // The range: the asked hours, or (fit) from the first bar's start in them to now. The
  // window shown: the last 1/zoom of the range, panned back by pan windows.
  let first = to;
  for (const b of t.bars) first = Math.min(first, new Date(b.start).getTime());
  const base = tlState.fit && t.bars.length ? Math.min(to - from, Math.max(5000, (to - first) * 1.05)) : to - from;
  const span = base / tlState.zoom;
  const vTo = to - tlState.pan * span, vFrom = vTo - span;
  const labelW = 130, W = 1100, laneH = 18, top = 22;
  const lanes = [];
  for (const n of t.nodes) for (let g = 0; g < Math.max(1, n.gpus); g++) lanes.push({ node: n.name, gpu: g, first: g === 0 });
  const laneOf = {};
  lanes.forEach((l, i) => { laneOf[l.node + "/" + l.gpu] = i; });
  const H = top + lanes.length * laneH + 6;
  const x = (ms) => labelW + ((ms - vFrom) / (vTo - vFrom)) * (W - labelW);
  const root = svg("svg", { width: W, height: H, viewBox: "0 0 " + W + " " + H, role: "img", id: "timeline-svg",
    "aria-label": "GPU timeline of " + t.region + "/" + t.allocation_name });
  for (let k = 0; k <= 6; k++) {
    const ms = vFrom + (k / 6) * (vTo - vFrom), xx = x(ms);
    root.append(svg("line", { class: "grid-line", x1: xx, x2: xx, y1: top - 4, y2: H }),
      svg("text", { x: xx + 2, y: 12, text: new Date(ms).toISOString().slice(11, vTo - vFrom < 60000 ? 21 : 19) }));
  }
  lanes.forEach((l, i) => {
    const y = top + i * laneH;
    if (l.first) root.append(svg("line", { class: "node-sep", x1: 0, x2: W, y1: y, y2: y }));
    root.append(svg("text", { class: "lane-label", x: 4, y: y + 12, text: (l.first ? l.node : "") + " " + l.gpu }));
  });
  const pos = {};
  const clip = svg("clipPath", { id: "plot" }, svg("rect", { x: labelW, y: 0, width: W - labelW, height: H }));
  root.append(svg("defs", {}, clip, svg("marker", { id: "head", viewBox: "0 0 6 6", refX: 5, refY: 3, markerWidth: 6, markerHeight: 6, orient: "auto" },
    svg("path", { d: "M0,0 L6,3 L0,6 z", fill: "#8e44ad" }))));
  const plot = svg("g", { "clip-path": "url(#plot)" });
  root.append(plot);
  for (const b of t.bars) {
    const s = new Date(b.start).getTime(), e = b.end ? new Date(b.end).getTime() : to;
    const x1 = x(Math.max(s, vFrom - span)), x2 = Math.max(x(Math.min(e, vTo + span)), x1 + 2);
    const gpus = b.gpus.length ? b.gpus : [0];
    const ys = gpus.map((g) => laneOf[b.node + "/" + g]).filter((i) => i !== undefined);
    if (!ys.length) continue;
    const label = b.job + " attempt " + b.attempt + " worker " + b.worker + " on " + b.node + " GPUs " + gpus.join(",") + ", " + b.class +
      ", " + fmtTime(b.start) + " to " + (b.end ? fmtTime(b.end) : "now") + (b.preempted_by ? ", preempted by " + b.preempted_by : "") +
      (b.end_reason ? ": " + b.end_reason : "");
    const g = svg("g", { class: "bar", tabindex: "0", "data-job": b.job, "data-node": b.node, "data-attempt": b.attempt, "data-gpus": gpus.join(","),
      "data-worker": b.worker, "data-start": s, "data-end": b.end ? e : "",
      "aria-label": label });
    g.append(svg("title", { text: label }));
    for (const i of ys) {
      g.append(svg("rect", { class: b.class, x: x1, y: top + i * laneH + 2, width: x2 - x1, height: laneH - 4, rx: 2 }));
    }
    const lx = Math.max(x1, labelW);
    if (Math.min(x2, W) - lx > 40) g.append(svg("text", { x: lx + 3, y: top + ys[0] * laneH + 12, text: b.job === HIDDEN ? "other ws" : b.job.replace(/^lm-mpi-job-/, "") }));
    const node = b.job === HIDDEN ? g : svg("a", { href: "#/job/" + encodeURIComponent(b.job) }, g);
    plot.append(node);
    pos[b.id] = { x1, x2, y: top + ys[0] * laneH + laneH / 2, b };
  }
  for (const b of t.bars) {
    for (const to2 of b.preemptor_bars || []) {
      const a = pos[b.id], c = pos[to2];
      if (!a || !c) continue;
      plot.append(svg("path", { class: "arrow", "marker-end": "url(#head)", "data-from": b.job, "data-to": c.b.job,
        d: "M" + a.x2 + "," + a.y + " C" + (a.x2 + 20) + "," + a.y + " " + (c.x1 - 20) + "," + c.y + " " + c.x1 + "," + c.y }));
    }
  }
  const nowX = x(to);
  if (nowX >= labelW && nowX <= W) plot.append(svg("line", { class: "now", x1: nowX, x2: nowX, y1: top - 4, y2: H }));

  const redraw = () => drawTimeline(t);
  const controls = el("div", { class: "filters", role: "group", "aria-label": "timeline controls" },
    el("label", {}, "last ", el("select", { id: "tl-hours", onchange: (e) => { tlState.hours = +e.target.value; tlState.pan = 0; route(); } },
      [1, 3, 6, 12, 24].map((h) => el("option", { value: h, selected: h === tlState.hours, text: h + "h" })))),
    el("label", {}, el("input", { type: "checkbox", id: "tl-fit", checked: tlState.fit, onchange: (e) => { tlState.fit = e.target.checked; tlState.zoom = 1; tlState.pan = 0; redraw(); } }),
      " fit to the bars"),
    el("button", { type: "button", id: "tl-in", onclick: () => { tlState.zoom = Math.min(tlState.zoom * 2, 256); redraw(); } }, "Zoom in"),
    el("button", { type: "button", id: "tl-out", onclick: () => { tlState.zoom = Math.max(1, tlState.zoom / 2); tlState.pan = Math.min(tlState.pan, tlState.zoom - 1); redraw(); } }, "Zoom out"),
    el("button", { type: "button", id: "tl-back", onclick: () => { tlState.pan = Math.min(tlState.pan + 0.5, tlState.zoom - 1); redraw(); } }, "‹ Earlier"),
    el("button", { type: "button", id: "tl-fwd", onclick: () => { tlState.pan = Math.max(0, tlState.pan - 0.5); redraw(); } }, "Later ›"),
    el("span", { class: "muted", text: t.jobs + " jobs, " + t.bars.length + " bars" + (t.truncated ? " (only the newest jobs)" : "") +
      (t.unreadable ? ", " + t.unreadable + " unreadable" : "") }));
  const focused = document.activeElement && document.activeElement.id;
  $("view").replaceChildren(
    el("h1", { text: "Timeline of " + t.region + "/" + t.allocation_name }),
    controls, el("div", { class: "timeline-wrap" }, root),
    el("p", { class: "muted", text: "One lane per GPU; a bar per worker of each attempt, coloured by class; arrows run from a preempted attempt to its preemptor's. Enter on a bar opens its job." }));
  if (focused && $(focused)) $(focused).focus();
}

// --- start ------------------------------------------------------------------------
window.addEventListener("hashchange", route);
window.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
    $("token").value = "";
    route();
  });
  $("signout").addEventListener("click", () => signOut());
  $("alloc").addEventListener("change", (e) => {
    [state.region, state.alloc] = e.target.value.split("/");
    sessionStorage.setItem("trainq-alloc", e.target.value);
    queueState.offset = 0;
    route();
  });
  route();
});

// The squadd dashboard: one snapshot from api/state, then the event stream keeps it live.
// Every request carries the token (a header for fetch; the URL only for EventSource, which
// cannot set headers). Text from the squad is only ever set as textContent, never as HTML.

const TOKEN = document.querySelector('meta[name="squadd-token"]').content;
export const FEED_WINDOW = 200;        // event rows kept in the page; older ones are removed
const TOKEN_POINTS = 2000;             // points of the tokens chart kept
const REFRESH_MS = 250;                // structural events are folded into one state fetch
const EVENT_TYPES = [
  "daemon.started", "daemon.stopping", "route.queued", "agent.spawned", "agent.state",
  "agent.idle", "agent.completed", "agent.error", "session.message", "tool.started",
  "tool.updated", "tool.completed", "pool.at_capacity", "pool.empty", "provider.retry",
  "scribe.merged", "scribe.rejected", "scribe.archived", "approval.requested",
  "approval.resolved", "tools.load_failed", "bus.overflow", "workspace.created",
  "workspace.committed", "workspace.landed", "workspace.conflict", "workspace.removed",
  "session.claimed", "session.reclaimed", "workspace.land_failed", "settings.reloaded",
];
const REFRESHING = new Set([
  "route.queued", "agent.spawned", "agent.state", "agent.idle", "agent.completed",
  "agent.error", "tool.started", "tool.completed", "pool.empty", "scribe.merged",
  "approval.requested", "daemon.started", "workspace.created", "workspace.committed",
  "workspace.landed", "workspace.conflict", "workspace.removed", "session.claimed",
  "session.reclaimed", "workspace.land_failed",
]);

const model = { state: null, lastSeq: 0, tokens: [], feedRows: 0, shownSession: null };
const $ = (id) => document.getElementById(id);

// Drop the token from the address bar (and so from history and screenshots).
if (window.location.search.includes("token=")) {
  window.history.replaceState(null, "", window.location.pathname);
}

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { "x-squadd-token": TOKEN, "content-type": "application/json",
               ...(options.headers || {}) },
    credentials: "omit", cache: "no-store",
  });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || `HTTP ${response.status}`);
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    if (child !== null && child !== undefined) {
      node.append(child instanceof Node ? child : String(child));
    }
  }
  return node;
}

export function duration(seconds) {
  const s = Math.max(0, Math.floor(seconds || 0));
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}

function renderPool(state) {
  const pool = state.pool;
  const slots = $("slots");
  slots.replaceChildren(...Array.from({ length: pool.max_concurrent }, (_, i) =>
    el("span", { class: i < pool.running ? "slot busy" : "slot" })));
  $("pool-line").textContent = `${pool.running}/${pool.max_concurrent} slots in use · ` +
    `${pool.queued}/${pool.max_queued} queued · ${pool.waiting} waiting on a route · ` +
    `${pool.idle} at rest`;
  $("capacity").hidden = !state.at_capacity;
  const byId = new Map(state.sessions.map((s) => [s.session_id, s]));
  $("queue").replaceChildren(...state.queue.map((id) => {
    const s = byId.get(id);
    return el("li", { class: `queued ${s.priority}` },
      el("span", { class: "agent" }, s.agent), ` ${s.priority}: `, s.task.slice(0, 80));
  }));
}

function toolLine(tool) {
  if (!tool) return null;
  const bar = el("progress", { max: "1" });
  if (tool.fraction !== null && tool.fraction !== undefined) bar.value = tool.fraction;
  return el("div", { class: "tool", "data-call": tool.call_id },
    el("span", { class: "tool-name" }, tool.tool), " ", bar, " ",
    el("span", { class: "tool-message" }, tool.message || ""));
}

function sessionRow(s) {
  const tokens = (s.input_tokens || 0) + (s.output_tokens || 0);
  return el("div", { class: `session ${s.state}`, "data-session": s.session_id,
                     role: "button", tabindex: "0", onclick: () => openTranscript(s.session_id) },
    el("span", { class: "agent" }, s.agent), " ",
    el("span", { class: `state ${s.state}` }, s.state), " ",
    el("span", { class: "muted" }, duration(s.age_s)), " ",
    el("span", { class: "model" }, s.model || "-"), " ",
    el("span", { class: "turns" }, `${s.turns} turns`), " ",
    el("span", { class: "tokens" }, `${tokens} tok`), " ",
    s.worker ? el("span", { class: "worker", title: "the cluster worker running it" },
                  s.worker_host ? `${s.worker}@${s.worker_host}` : s.worker) : null,
    s.worker ? " " : null,
    el("span", { class: "task" }, s.task.slice(0, 90)),
    workspaceLine(s.workspace),
    toolLine(s.tool));
}

// The session's git worktree: its branch, where it stands, and what it changed.
function workspaceLine(space) {
  if (!space) return null;
  const commits = space.commits.length === 1 ? "1 commit" : `${space.commits.length} commits`;
  return el("div", { class: `workspace ${space.state}` },
    el("span", { class: "branch" }, space.branch), " ",
    el("span", { class: `state ${space.state}` }, space.state), " ",
    el("span", { class: "muted" }, `${commits} ${space.diffstat.trim()}`),
    space.conflict_paths.length
      ? el("span", { class: "conflict" }, ` conflict: ${space.conflict_paths.join(", ")}`)
      : null,
    landingLine(space.outcome));
}

// How the session's landing ended, and the one thing to do next when it did not land.
function landingLine(outcome) {
  if (!outcome) return null;
  const commit = outcome.commit ? ` ${outcome.commit.slice(0, 12)}` : "";
  const tests = [
    outcome.fixed.length ? `fixed ${outcome.fixed.join(", ")}` : "",
    outcome.broke.length ? `broke ${outcome.broke.join(", ")}` : "",
  ].filter(Boolean).join("; ");
  return el("div", { class: `landing ${outcome.state}` },
    el("span", { class: `state ${outcome.state}` }, `landing: ${outcome.state}${commit}`),
    tests ? el("span", { class: "tests" }, ` ${tests.slice(0, 300)}`) : null,
    outcome.state !== "landed" && outcome.detail
      ? el("span", { class: "muted" }, ` ${outcome.detail.split("\n")[0].slice(0, 200)}`)
      : null,
    outcome.next ? el("div", { class: "next" }, `next: ${outcome.next}`) : null);
}

function renderSessions(state) {
  const children = new Map();
  const ids = new Set(state.sessions.map((s) => s.session_id));
  for (const s of state.sessions) {
    const parent = s.parent_session_id && ids.has(s.parent_session_id) ? s.parent_session_id : "";
    if (!children.has(parent)) children.set(parent, []);
    children.get(parent).push(s);
  }
  const branch = (parent, depth) => (children.get(parent) || []).map((s) => el("li", {},
    sessionRow(s),
    depth < 16 && children.has(s.session_id)
      ? el("ul", { class: "tree" }, ...branch(s.session_id, depth + 1)) : null));
  $("sessions").replaceChildren(...branch("", 0));
  $("no-sessions").hidden = state.sessions.length > 0;
}

function renderApprovals(state) {
  $("approvals").replaceChildren(...state.approvals.map((a) => el("li",
    { class: "approval", "data-approval": a.approval_id },
    el("span", { class: "agent" }, a.agent), " asks: ", el("strong", {}, a.question || a.tool),
    el("div", { class: "arguments" },
      el("span", { class: "bytes" }, `arguments, whole: ${a.arguments_bytes} bytes`),
      // Every byte that will run, scrollable: nothing is cut (what is shown is what runs).
      el("pre", { class: "arguments-text", tabindex: "0" }, a.arguments_text)),
    el("button", { type: "button", class: "approve", onclick: () => answer(a, true) },
      "Approve"),
    el("button", { type: "button", class: "deny", onclick: () => answer(a, false) }, "Deny"))));
  $("no-approvals").hidden = state.approvals.length > 0;
}

async function answer(approval, approved) {
  const row = document.querySelector(`[data-approval="${CSS.escape(approval.approval_id)}"]`);
  try {
    await api(`api/approvals/${encodeURIComponent(approval.approval_id)}`,
      { method: "POST", body: JSON.stringify({ approved, reason: "from the dashboard" }) });
    if (row) row.remove();
  } catch (error) {
    if (row) row.append(el("span", { class: "error" }, ` ${error.message}`));
  }
}

function renderDecisions(state) {
  $("decisions").replaceChildren(...state.decisions.map((d) => el("li", {},
    el("strong", {}, d.title), el("span", { class: "muted" },
      ` ${d.date || ""} ${d.by ? "by " + d.by : ""}`),
    el("p", {}, d.body.slice(0, 400)))));
}

function renderTokens() {
  const width = 420, height = 140, pad = 4;
  const totals = new Map();
  const series = new Map();
  const points = model.tokens;
  if (points.length === 0) {
    $("tokens-chart").replaceChildren(el("p", { class: "muted" }, "no finished tasks yet"));
    return;
  }
  // x: the order tasks finished in (time between them says little on a busy squad).
  const last = Math.max(1, points.length);
  points.forEach((p, index) => {
    const sum = (totals.get(p.agent) || 0) + p.input_tokens + p.output_tokens;
    if (!series.has(p.agent)) series.set(p.agent, [[index, totals.get(p.agent) || 0]]);
    totals.set(p.agent, sum);
    series.get(p.agent).push([index + 1, sum]);
  });
  const top = Math.max(1, ...totals.values());
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("class", "chart");
  const legend = el("ul", { class: "legend" });
  let hue = 0;
  for (const [agent, values] of series) {
    const line = document.createElementNS(ns, "polyline");
    const coords = values.map(([t, v]) => [
      pad + (t / last) * (width - 2 * pad),
      height - pad - (v / top) * (height - 2 * pad)]);
    line.setAttribute("points", coords.map((c) => c.join(",")).join(" "));
    line.setAttribute("stroke", `hsl(${hue}, 70%, 45%)`);
    line.setAttribute("fill", "none");
    line.setAttribute("stroke-width", "2");
    line.setAttribute("data-agent", agent);
    svg.append(line);
    const entry = el("li", {}, `${agent}: ${totals.get(agent)} tokens`);
    entry.style.color = `hsl(${hue}, 70%, 45%)`;  // CSSOM, which the page's CSP allows
    legend.append(entry);
    hue = (hue + 137) % 360;
  }
  $("tokens-chart").replaceChildren(svg, legend);
}

function render(state) {
  model.state = state;
  $("repo").textContent = state.repo.split("/").filter(Boolean).at(-1) || state.repo;
  $("repo").title = state.repo;
  renderPool(state);
  renderSessions(state);
  renderApprovals(state);
  renderDecisions(state);
  renderTokens();
}

async function openTranscript(sessionId) {
  model.shownSession = sessionId;
  const data = await api(`api/sessions/${encodeURIComponent(sessionId)}`);
  $("transcript-title").textContent = `${data.session.agent} · ${sessionId}`;
  $("transcript").replaceChildren(...data.transcript.map((record) => {
    const message = record.message || {};
    const text = message.content || record.text || record.state || record.kind;
    return el("li", { class: `record ${record.kind} ${message.role || ""}` },
      el("span", { class: "role" }, message.role || record.kind), " ",
      String(typeof text === "string" ? text : JSON.stringify(text)).slice(0, 2000));
  }));
  $("transcript-panel").hidden = false;
}

function addFeedRow(event) {
  const feed = $("feed");
  const who = event.agent ? `${event.agent} ` : "";
  const detail = event.tool || event.task || event.state || event.message || event.error ||
    event.reason || event.question || "";
  feed.prepend(el("li", { class: `event ${event.type.replace(".", "-")}`,
                          "data-seq": String(event.seq) },
    el("span", { class: "muted" }, (event.ts || "").slice(11, 19)), " ",
    el("span", { class: "kind" }, event.type), " ", who, String(detail).slice(0, 120)));
  model.feedRows += 1;
  while (feed.childElementCount > FEED_WINDOW) feed.lastElementChild.remove();
  $("feed-count").textContent = `(${model.feedRows} seen, last ${FEED_WINDOW} shown)`;
}

function patchTool(event) {
  const line = document.querySelector(
    `.session[data-session="${CSS.escape(event.session_id || "")}"] .tool`);
  if (!line || line.dataset.call !== event.call_id) return;
  if (event.fraction !== null && event.fraction !== undefined) {
    line.querySelector("progress").value = event.fraction;
  }
  line.querySelector(".tool-message").textContent = event.message || "";
}

let refreshTimer = null;
function refreshSoon() {
  if (refreshTimer !== null) return;
  refreshTimer = setTimeout(async () => {
    refreshTimer = null;
    try { render(await api("api/state")); } catch (error) { setLink(false, error.message); }
  }, REFRESH_MS);
}

function onEvent(event) {
  model.lastSeq = Math.max(model.lastSeq, event.seq || 0);
  addFeedRow(event);
  if (event.type === "tool.updated") patchTool(event);
  if (event.type === "pool.at_capacity") $("capacity").hidden = false;
  if (event.type === "agent.completed") {
    model.tokens.push({ ts: event.ts, agent: event.agent || "?", session_id: event.session_id,
                        input_tokens: event.input_tokens, output_tokens: event.output_tokens });
    if (model.tokens.length > TOKEN_POINTS) model.tokens.splice(0, model.tokens.length - TOKEN_POINTS);
  }
  if (event.type === "approval.resolved") {
    document.querySelector(`[data-approval="${CSS.escape(event.approval_id)}"]`)?.remove();
  }
  if (REFRESHING.has(event.type)) refreshSoon();
}

function setLink(live, why = "") {
  const badge = $("link");
  badge.textContent = live ? "live" : `reconnecting… ${why}`;
  badge.className = live ? "badge ok" : "badge warn";
}

function connect() {
  const url = `api/events?token=${encodeURIComponent(TOKEN)}&since=${model.lastSeq}`;
  const source = new EventSource(url);
  source.addEventListener("open", () => setLink(true));
  source.addEventListener("error", () => setLink(false));
  for (const type of EVENT_TYPES) {
    source.addEventListener(type, (message) => {
      model.lastSeq = Math.max(model.lastSeq, Number(message.lastEventId) || 0);
      onEvent(JSON.parse(message.data));
    });
  }
  source.addEventListener("reset", async () => {
    const state = await api("api/state");
    model.tokens = state.tokens.slice(-TOKEN_POINTS);
    model.lastSeq = state.seq;
    render(state);
  });
}

async function start() {
  $("transcript-close").addEventListener("click", () => {
    $("transcript-panel").hidden = true;
    model.shownSession = null;
  });
  const state = await api("api/state");
  model.tokens = state.tokens.slice(-TOKEN_POINTS);
  model.lastSeq = state.seq;
  render(state);
  connect();
  window.squadd = model;  // for people (and tests) who look under the hood
}

start().catch((error) => setLink(false, error.message));

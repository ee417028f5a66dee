// The sqlengine web console: plain JS over the server's REST API (/v0/...), no build step, no dependencies.
// Routes (in the URL hash): #/ lists the pipelines, #/pipelines/<name> shows one.
"use strict";

const TOKEN_KEY = "sqlengine.token";
const WINDOW_S = 300;                 // the charts show the last 5 minutes
const ERROR_ROWS_SQL = "SELECT step, view, expression, error, row, weight FROM sqlengine_errors " +
                       "ORDER BY step DESC LIMIT 20";

const $ = (id) => document.getElementById(id);
let authNeeded = false;               // a 401 pauses polling until a token is entered
let busy = false;                     // one refresh at a time
let current = null;                   // the pipeline shown: {name, samples, lastErrorsAt, programLoaded, columns,
                                      //  feed: the change stream read, {view, abort} or null}
const FEED_ROWS = 200;                // the change table keeps the newest rows only

// ------------------------------------------------------------------------------------------ HTTP
class ApiError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : `HTTP ${status}`);
    this.status = status;
    this.body = body || {};
  }
}

function authHeaders() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  return token ? {Authorization: "Bearer " + token} : {};
}

async function api(method, path, params, body, withHeaders = false) {   // the JSON answer ([it, headers])
  const token = sessionStorage.getItem(TOKEN_KEY);
  const url = params ? `${path}?${new URLSearchParams(params)}` : path;
  const r = await fetch(url, {method, headers: authHeaders(), body});
  const text = await r.text();
  let data = text;
  try { data = text ? JSON.parse(text) : null; } catch (e) { /* not JSON: keep the text */ }
  if (r.status === 401) {
    askToken(token ? "The server rejected the token (401 Unauthorized). Enter the right token."
                   : "This server requires an API token (401 Unauthorized). Enter it to continue.");
  }
  if (!r.ok) throw new ApiError(r.status, typeof data === "object" ? data : {message: String(data)});
  $("connection").textContent = "connected";
  return withHeaders ? [data, r.headers] : data;
}

const pipelinePath = (name, rest = "") => `/v0/pipelines/${encodeURIComponent(name)}${rest}`;

// ------------------------------------------------------------------------------------------ token
function askToken(message) {
  authNeeded = true;
  $("auth").hidden = false;
  $("auth-message").textContent = message;
  $("connection").textContent = "not authorized";
  $("token-input").focus();
}

$("token-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  $("token-input").value = "";
  $("auth").hidden = true;
  authNeeded = false;
  route();
});

// ------------------------------------------------------------------------------------------ DOM helpers
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c));
  return e;
}

// ------------------------------------------------------------------------------------------ values
// A value is rendered by its column's SQL type (as the API spells it: INT[], MAP(VARCHAR, INT),
// STRUCT(a INT, "b c" DATE), JSON, ...): in JSON both a MAP and a STRUCT are objects, and a JSON value may be
// any JSON.  Without a type (e.g. the error rows) the value decides: a list as an ARRAY, an object as JSON.
const CELL_CHARS = 160;               // a longer value is cut (…); its title has it whole, a click expands it
const TITLE_CHARS = 4000;
const SHORT_CHARS = 40;               // a nested value this short is not wrapped
const NUMERIC = new Set(["TINYINT", "SMALLINT", "INT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT", "USMALLINT",
                         "UINTEGER", "UBIGINT", "DECIMAL", "REAL", "FLOAT", "DOUBLE"]);
const QUOTED = new Set(["VARCHAR", "BLOB"]);   // shown in quotes inside a nested value (dates, UUIDs: not)
const typeCache = new Map();

function parseType(sql) {             // SQL type text -> {base, of | key, value | fields}, or null if unreadable
  if (!sql) return null;
  if (typeCache.has(sql)) return typeCache.get(sql);
  let i = 0;
  const ws = () => { while (sql[i] === " ") i++; };
  const expect = (c) => { ws(); if (sql[i] !== c) throw new Error(`${c} expected`); i++; };
  const fieldName = () => {
    ws();
    if (sql[i] !== '"') { const m = /^[^\s,()]+/.exec(sql.slice(i)); i += m[0].length; return m[0]; }
    let name = "";
    for (i++; i < sql.length; i++) {
      if (sql[i] === '"') { if (sql[i + 1] !== '"') { i++; return name; } i++; }
      name += sql[i];
    }
    throw new Error("unterminated name");
  };
  const type = () => {
    ws();
    const m = /^[A-Za-z_][A-Za-z0-9_ ]*/.exec(sql.slice(i));
    if (!m) throw new Error("type expected");
    i += m[0].length;
    let t = {base: m[0].trim().toUpperCase()};
    if (t.base === "VARIANT") t.base = "JSON";
    ws();
    if (sql[i] === "(") {
      i++;
      if (t.base === "MAP") {
        t.key = type(); expect(","); t.value = type(); expect(")");
      } else if (t.base === "STRUCT" || t.base === "ROW") {
        t = {base: "STRUCT", fields: []};
        for (;;) {
          const name = fieldName();
          t.fields.push([name, type()]);
          ws();
          if (sql[i++] === ")") break;
          if (sql[i - 1] !== ",") throw new Error(", expected");
        }
      } else {                                         // DECIMAL(10, 2), VARCHAR(20)
        const close = sql.indexOf(")", i);
        if (close < 0) throw new Error(") expected");
        i = close + 1;
      }
    }
    for (ws(); sql[i] === "["; ws()) {                 // INT[], INT[3]
      const close = sql.indexOf("]", i);
      if (close < 0) throw new Error("] expected");
      i = close + 1;
      t = {base: "ARRAY", of: t};
    }
    return t;
  };
  let t = null;
  try { t = type(); ws(); if (i !== sql.length) t = null; } catch (e) { t = null; }
  typeCache.set(sql, t);
  return t;
}

class Out {                           // text pieces, each with a class; stops (and says so) past `limit` chars
  constructor(limit) { this.limit = limit; this.used = 0; this.parts = []; this.cut = false; }
  add(text, cls) {
    if (this.cut) return;
    if (this.used + text.length > this.limit) { text = text.slice(0, this.limit - this.used); this.cut = true; }
    this.used += text.length;
    if (text) this.parts.push([text, cls]);
    if (this.cut) this.parts.push(["…", "cut"]);
  }
  text() { return this.parts.map((p) => p[0]).join(""); }
  nodes() { return this.parts.map(([text, cls]) => (cls ? el("span", {class: "v-" + cls}, text) : text)); }
}

const quote = (s) => "'" + s.replaceAll("'", "''") + "'";
const fieldLabel = (n) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(n) ? n : '"' + n.replaceAll('"', '""') + '"');

function scalar(out, v, t, nested) {
  const base = t ? t.base : null;
  if (typeof v === "number") return out.add(String(v), "num");
  if (typeof v === "boolean") return out.add(String(v), "bool");
  const text = String(v);
  if (base && NUMERIC.has(base)) return out.add(text, "num");          // decimals come as text
  if (nested && (!base || QUOTED.has(base))) return out.add(quote(text), "str");
  out.add(text, nested ? "lit" : null);
}

function render(out, v, t, nested) {  // writes v (of type t, or null) to out
  if (out.cut) return;
  if (v === null || v === undefined) return out.add("NULL", "null");
  const base = t ? t.base : null;
  if (base === "JSON" || (!base && typeof v === "object" && !Array.isArray(v))) {
    return out.add(JSON.stringify(v), "json");
  }
  if (Array.isArray(v) && (!base || base === "ARRAY")) {
    out.add("[");
    v.forEach((x, i) => { if (i) out.add(", "); render(out, x, t ? t.of : null, true); });
    return out.add("]");
  }
  if (base === "MAP" && typeof v === "object") {
    out.add("{");
    Object.entries(v).forEach(([k, x], i) => {
      if (i) out.add(", ");
      render(out, k, t.key, true);
      out.add(" → ", "arrow");
      render(out, x, t.value, true);
    });
    return out.add("}");
  }
  if (base === "STRUCT" && typeof v === "object") {
    out.add("{");
    t.fields.forEach(([name, ft], i) => {
      if (i) out.add(", ");
      out.add(fieldLabel(name) + ": ", "field");
      render(out, v[name], ft, true);
    });
    return out.add("}");
  }
  if (typeof v === "object") return out.add(JSON.stringify(v), "json");   // a value that does not fit its type
  scalar(out, v, t, nested);
}

function cell(v, type) {              // a <td> showing v (of SQL type `type`, if known)
  if (v === null || v === undefined) return el("td", {class: "null"}, "NULL");
  const t = parseType(type);
  const out = new Out(CELL_CHARS);
  render(out, v, t, false);
  const td = el("td", {}, ...out.nodes());
  if (typeof v === "number" || (t && NUMERIC.has(t.base))) td.classList.add("num");
  if (typeof v === "object") td.classList.add("nested", ...(out.used <= SHORT_CHARS ? ["short"] : []));
  if (out.cut) {                      // the whole value: in the title, and on a click (which toggles)
    const full = new Out(Infinity);
    render(full, v, t, false);
    const all = full.text();
    td.classList.add("cut");
    td.title = (all.length > TITLE_CHARS ? all.slice(0, TITLE_CHARS) + "…" : all) + "\n(click to expand)";
    td.addEventListener("click", () => {
      const open = td.classList.toggle("open");
      td.replaceChildren(...(open ? full : out).nodes());
    });
  }
  return td;
}

function headCell(name, type) {       // a column heading, with its type under the name
  return el("th", {scope: "col", title: type || ""}, el("span", {class: "colname"}, name),
    ...(type ? [el("span", {class: "coltype"}, type)] : []));
}

function fill(tbody, data, build) {   // re-render rows only when their data changed (no flicker, stable nodes)
  const key = JSON.stringify(data);
  if (tbody.dataset.key === key) return;
  tbody.dataset.key = key;
  tbody.replaceChildren(...build());
}

function stateClass(node, state) {
  node.className = "state-" + state;
  node.textContent = state;
}

function showError(node, message) {
  node.hidden = !message;
  node.textContent = message || "";
}

// ------------------------------------------------------------------------------------------ list page
async function refreshList() {
  const list = await api("GET", "/v0/pipelines");
  const body = $("pipelines").tBodies[0];
  const stats = await Promise.all(list.map((p) => api("GET", pipelinePath(p.name, "/stats")).catch(() => null)));
  fill(body, [list, stats.map((st) => st && [st.step, st.error])], () => list.map((p, i) => {
    const link = el("a", {href: "#/pipelines/" + encodeURIComponent(p.name)}, p.name);
    const state = el("span", {});
    stateClass(state, p.status);
    const err = p.deployment_error ? p.deployment_error.message : (stats[i] && stats[i].error) || "";
    return el("tr", {id: "pipeline-row-" + p.name, "data-pipeline": p.name},
      el("td", {}, link), el("td", {class: "state"}, state),
      el("td", {class: "num step"}, stats[i] ? stats[i].step : "-"), el("td", {class: "error"}, err));
  }));
  $("list-message").textContent = list.length ? "" : "No pipelines yet: create one with PUT /v0/pipelines/<name>.";
}

// ------------------------------------------------------------------------------------------ pipeline page
async function loadProgram(cur) {
  const info = await api("GET", pipelinePath(cur.name));
  if (cur !== current) return;
  $("program-code").textContent = info.program_code;
  const rows = [];
  for (const t of Object.keys(info.tables || {})) rows.push(["table", t]);
  for (const v of Object.keys(info.views || {})) rows.push(["view", v]);
  cur.columns = {};                   // relation -> [{name, type}]
  for (const [r, d] of [...Object.entries(info.tables || {}), ...Object.entries(info.views || {})]) {
    cur.columns[r] = d.columns || [];
  }
  const pick = $("feed-view");
  pick.replaceChildren(...Object.keys(info.views || {}).map((v) => el("option", {value: v}, v)));
  $("feed-toggle").disabled = !pick.options.length;
  $("counts").tBodies[0].replaceChildren(...rows.map(([kind, name]) =>
    el("tr", {"data-relation": name},
      el("th", {scope: "row"}, name), el("td", {}, kind),
      el("td", {class: "num", id: (kind === "table" ? "rows-in-" : "rows-out-") + name}, "-"))));
  if (info.deployment_error) showError($("pipeline-error"), info.deployment_error.message);
  const firstView = Object.keys(info.views || {})[0];
  if (!$("query-sql").value && firstView) $("query-sql").value = `SELECT * FROM ${firstView} LIMIT 100`;
  cur.programLoaded = true;
}

function setButtons(state) {
  $("btn-start").disabled = !["created", "stopped", "failed"].includes(state);
  $("btn-pause").disabled = state !== "running";
  $("btn-resume").disabled = state !== "paused";
  $("btn-stop").disabled = !["running", "paused", "failed"].includes(state);
}

async function refreshPipeline() {
  const cur = current;
  if (!cur.programLoaded) await loadProgram(cur);
  let st;
  try {
    st = await api("GET", pipelinePath(cur.name, "/stats"));
    if (cur !== current) return;             // the page moved on meanwhile
  } catch (e) {
    if (e.status === 401) throw e;
    stateClass($("pipeline-state"), "failed");
    setButtons("failed");
    showError($("pipeline-error"), e.message);
    return;
  }
  stateClass($("pipeline-state"), st.state);
  $("pipeline-step").textContent = st.step;
  $("pipeline-backlog").textContent = st.backlog_batches;
  const lat = st.step_latency_ms || {};
  $("pipeline-latency").textContent = lat.p50 == null ? "-" : `p50 ${lat.p50} ms, p99 ${lat.p99} ms, last ${lat.last} ms`;
  setButtons(st.state);
  showError($("pipeline-error"), st.error || st.storage_error || "");
  for (const [t, n] of Object.entries(st.rows_in || {})) { const c = $("rows-in-" + t); if (c) c.textContent = n; }
  for (const [v, n] of Object.entries(st.rows_out || {})) { const c = $("rows-out-" + v); if (c) c.textContent = n; }
  addSample(st);
  renderConnectors(st.connectors || {});
  const errs = Object.entries(st.errors || {});
  $("error-counts").textContent = errs.length ? errs.map(([v, n]) => `${v}: ${n}`).join(", ") : "none";
  // the error relation can be queried while the pipeline runs (or is paused): a stopped one answers 409
  if (["running", "paused"].includes(st.state) && Date.now() - current.lastErrorsAt > 3000) {
    current.lastErrorsAt = Date.now();
    refreshErrorRows();
  }
}

function renderConnectors(connectors) {
  const keys = Object.keys(connectors);
  $("connectors-empty").hidden = keys.length > 0;
  $("connectors").hidden = keys.length === 0;
  fill($("connectors").tBodies[0], connectors, () => keys.map((k) => {
    const c = connectors[k];
    return el("tr", {"data-connector": k}, el("th", {scope: "row"}, k), cell(c.kind), cell(c.transport),
      cell(c.state), cell(c.rows), cell(c.lag), cell(c.dead_letter_rows),
      el("td", {class: "error"}, c.last_error || ""));
  }));
}

async function refreshErrorRows() {
  try {
    const rows = await api("GET", pipelinePath(current.name, "/query"), {sql: ERROR_ROWS_SQL, format: "json"});
    fill($("error-rows").tBodies[0], rows, () => rows.map((r) =>
      el("tr", {}, cell(r.step), cell(r.view), cell(r.expression), cell(r.error), cell(r.row), cell(r.weight))));
    $("error-rows-message").textContent = rows.length ? "" : "No row errors.";
  } catch (e) {
    $("error-rows-message").textContent = "Cannot read sqlengine_errors: " + e.message;
  }
}

// ------------------------------------------------------------------------------------------ charts
function addSample(st) {
  const t = performance.now() / 1000;
  const rowsIn = Object.values(st.rows_in || {}).reduce((a, b) => a + b, 0);
  const s = current.samples;
  const prev = s[s.length - 1];
  let rate = null;
  if (prev && t > prev.t) rate = Math.max(0, (rowsIn - prev.rowsIn) / (t - prev.t));   // counters reset on restart
  s.push({t, rowsIn, rate, p50: (st.step_latency_ms || {}).p50});
  while (s.length && s[0].t < t - WINDOW_S) s.shift();
  $("throughput-now").textContent = rate == null ? "-" : rate.toFixed(1);
  $("latency-now").textContent = s[s.length - 1].p50 == null ? "-" : s[s.length - 1].p50;
  drawChart($("chart-throughput"), s, "rate", t);
  drawChart($("chart-latency"), s, "p50", t);
}

function svg(tag, attrs, text) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text !== undefined) e.textContent = text;
  return e;
}

function drawChart(node, samples, key, now) {
  const W = 600, H = 120, L = 44, B = 16, T = 8;
  const pts = samples.filter((s) => s[key] != null);
  const top = Math.max(0, ...pts.map((s) => s[key]));
  const max = (top > 0 ? top : 1) * 1.1;
  const x = (t) => L + (W - L - 4) * (1 - (now - t) / WINDOW_S);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const fmt = (v) => (v >= 100 ? v.toFixed(0) : v >= 1 || v === 0 ? v.toFixed(1) : v.toPrecision(2));
  const last = pts[pts.length - 1];
  node.replaceChildren(
    svg("line", {x1: L, y1: y(0), x2: W - 4, y2: y(0)}),
    svg("line", {x1: L, y1: T, x2: L, y2: y(0)}),
    svg("text", {x: 2, y: T + 10}, pts.length ? fmt(top) : ""),
    svg("text", {x: 2, y: y(0)}, "0"),
    svg("text", {x: L, y: H - 3}, "-5 min"),
    svg("text", {x: W - 30, y: H - 3}, "now"),
    svg("polyline", {points: pts.map((s) => `${x(s.t).toFixed(1)},${y(s[key]).toFixed(1)}`).join(" ")}),
    ...(last ? [svg("circle", {cx: x(last.t).toFixed(1), cy: y(last[key]).toFixed(1), r: 2.5})] : []));
}

// ------------------------------------------------------------------------------------------ actions, query
for (const id of ["btn-start", "btn-pause", "btn-resume", "btn-stop"]) {
  $(id).addEventListener("click", async (ev) => {
    const action = ev.currentTarget.dataset.action;
    showError($("pipeline-error"), "");
    try {
      const r = await api("POST", pipelinePath(current.name, "/" + action));
      stateClass($("pipeline-state"), r.status);
      setButtons(r.status);
    } catch (e) {
      showError($("pipeline-error"), `${action} failed: ${e.message}`);
    }
    tick();
  });
}

async function runQuery() {
  const sql = $("query-sql").value;
  const started = performance.now();
  $("query-status").textContent = "running...";
  showError($("query-error"), "");
  const result = $("query-result");
  try {
    const [rows, headers] = await api("GET", pipelinePath(current.name, "/query"), {sql, format: "json"}, null, true);
    let cols = [];                    // [{name, type}]: the x-columns header (a MAP and a ROW are both objects)
    try { cols = JSON.parse(headers.get("x-columns") || "[]"); } catch (e) { /* no types: decide by value */ }
    if (!cols.length && rows.length) cols = Object.keys(rows[0]).map((name) => ({name, type: null}));
    result.tHead.replaceChildren(el("tr", {}, ...cols.map((c) => headCell(c.name, c.type))));
    result.tBodies[0].replaceChildren(...rows.map((r) => el("tr", {}, ...cols.map((c) => cell(r[c.name], c.type)))));
    const ms = (performance.now() - started).toFixed(0);
    $("query-status").textContent = `${rows.length} row${rows.length === 1 ? "" : "s"} in ${ms} ms`;
  } catch (e) {
    result.tHead.replaceChildren();
    result.tBodies[0].replaceChildren();
    $("query-status").textContent = "error";
    const d = e.body.details || {};
    let line = d.line, column = d.column;
    const m = /Line (\d+), Col: (\d+)/.exec(e.message);
    if (line == null && m) { line = +m[1]; column = +m[2]; }
    const where = line != null ? `\nat line ${line}, column ${column}` : "";
    showError($("query-error"), `${e.body.error_code || "Error"}: ${d.rendered || e.message}${where}`);
    if (line != null) moveCaret($("query-sql"), line, column);
  }
}

function moveCaret(area, line, column) {   // put the caret where the error is
  const lines = area.value.split("\n");
  let pos = 0;
  for (let i = 0; i < Math.min(line - 1, lines.length); i++) pos += lines[i].length + 1;
  pos = Math.min(area.value.length, pos + Math.max(0, (column || 1) - 1));
  area.setSelectionRange(pos, pos);
}

$("query-form").addEventListener("submit", (ev) => { ev.preventDefault(); runQuery(); });
$("query-sql").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); runQuery(); }
});

// ------------------------------------------------------------------------------------------ change feed
function stopFeed(message) {
  const cur = current;
  if (cur && cur.feed) { cur.feed.abort.abort(); cur.feed = null; }
  $("feed-toggle").textContent = "Watch";
  $("feed-view").disabled = false;
  if (message !== undefined) $("feed-status").textContent = message;
}

async function watchFeed() {          // POST /egress/<view>: NDJSON lines, one per step, read as they come
  const cur = current, view = $("feed-view").value;
  const cols = (cur.columns || {})[view] || [];
  const feed = {view, abort: new AbortController()};
  cur.feed = feed;
  $("feed-toggle").textContent = "Stop";
  $("feed-view").disabled = true;
  $("feed-status").textContent = "connecting...";
  const table = $("feed-rows");
  table.tHead.replaceChildren(el("tr", {}, headCell("step", null), headCell("change", null),
    ...cols.map((c) => headCell(c.name, c.type))));
  table.tBodies[0].replaceChildren();
  let count = 0;
  const show = (line) => {
    if (line.error) return stopFeed("stream ended: " + (line.error.message || JSON.stringify(line.error)));
    if (!Array.isArray(line.json_data)) return;
    const trs = line.json_data.map((ch) => {
      const ins = "insert" in ch, row = ins ? ch.insert : ch.delete;
      return el("tr", {class: ins ? "insert" : "delete"}, el("td", {class: "num"}, line.sequence_number),
        el("td", {class: "change"}, ins ? "+ insert" : "- delete"), ...cols.map((c) => cell(row[c.name], c.type)));
    });
    count += trs.length;
    const body = table.tBodies[0];
    body.prepend(...trs.reverse());
    while (body.rows.length > FEED_ROWS) body.lastElementChild.remove();
    $("feed-status").textContent = `watching ${view}: ${count} change${count === 1 ? "" : "s"}`;
  };
  try {
    const r = await fetch(pipelinePath(cur.name, "/egress/" + encodeURIComponent(view)),
                          {method: "POST", headers: authHeaders(), signal: feed.abort.signal});
    if (!r.ok) {
      let body = {};
      try { body = await r.json(); } catch (e) { /* not JSON */ }
      return stopFeed(`cannot watch ${view}: ${body.message || "HTTP " + r.status}`);
    }
    if (cur.feed === feed) $("feed-status").textContent = `watching ${view}: no changes yet`;
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      const {value, done} = await reader.read();
      if (done || cur.feed !== feed) break;
      buf += value;
      for (let n = buf.indexOf("\n"); n >= 0; n = buf.indexOf("\n")) {
        const text = buf.slice(0, n).trim();
        buf = buf.slice(n + 1);
        if (text && cur.feed === feed) show(JSON.parse(text));
      }
    }
    if (cur.feed === feed) stopFeed(`stream of ${view} ended`);
  } catch (e) {
    if (cur.feed === feed) stopFeed(`stream of ${view} failed: ${e.message}`);
  }
}

$("feed-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  if (current && current.feed) stopFeed("stopped"); else if (current) watchFeed();
});

// ------------------------------------------------------------------------------------------ routing, polling
function route() {
  const m = /^#\/pipelines\/(.+)$/.exec(location.hash);
  const name = m ? decodeURIComponent(m[1]) : null;
  $("list-view").hidden = !!name;
  $("pipeline-view").hidden = !name;
  if (current && current.name !== name) stopFeed("");
  if (name && (!current || current.name !== name)) {
    current = {name, samples: [], lastErrorsAt: 0, programLoaded: false, columns: {}, feed: null};
    $("pipeline-name").textContent = name;
    document.title = `${name} - sqlengine console`;
    $("program-code").textContent = "";
    $("counts").tBodies[0].replaceChildren();
    for (const id of ["connectors", "error-rows"]) { const b = $(id).tBodies[0]; b.replaceChildren(); delete b.dataset.key; }
    for (const id of ["query-result", "feed-rows"]) {
      $(id).tHead.replaceChildren();
      $(id).tBodies[0].replaceChildren();
    }
    $("query-status").textContent = "";
    showError($("query-error"), "");
    showError($("pipeline-error"), "");
    $("query-sql").value = "";
  } else if (!name) {
    current = null;
    document.title = "sqlengine console";
  }
  tick();
}

async function tick() {
  if (authNeeded || busy) return;
  busy = true;
  try {
    if (current) await refreshPipeline(); else await refreshList();
  } catch (e) {
    if (e.status !== 401) $("connection").textContent = "error: " + e.message;
  } finally {
    busy = false;
  }
}

window.addEventListener("hashchange", route);
window.addEventListener("pagehide", () => stopFeed());   // (a navigation alone may leave the stream open)
setInterval(tick, 1000);
route();

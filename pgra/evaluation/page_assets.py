"""The HTML, CSS and script of ``results.html`` (plain, no library; filled by :mod:`pgra.evaluation.page`)."""

PAGE_TEMPLATE = r"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{{TITLE}}</title>
<style>
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; max-width: 1400px; }
h1 { font-size: 1.4em; } h2 { font-size: 1.15em; margin-top: 1.6em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: .5em 0; font-size: .9em; }
th, td { border: 1px solid #ccc; padding: .25em .5em; text-align: left; vertical-align: top; }
th.sortable { cursor: pointer; background: #f3f3f3; } th.sortable:hover { background: #e6e6e6; }
td.num { text-align: right; white-space: nowrap; } .below { color: #a33; } .sig { font-weight: bold; }
.controls { display: flex; gap: 1em; flex-wrap: wrap; align-items: center; margin: .5em 0; }
.ok { color: #176a2c; } .bad { color: #b3261e; } .muted { color: #777; }
#inputs tr.row { cursor: pointer; } #inputs tr.row:hover { background: #f5f8ff; } #inputs tr.open { background: #e8f0ff; }
.browser { display: flex; gap: 1em; align-items: flex-start; }
.browser > .list { flex: 3; min-width: 0; overflow: auto; max-height: 95vh; }
#inputs th { font-size: .8em; position: sticky; top: 0; background: #f3f3f3; }
#inputs td:nth-child(2) { min-width: 16em; }
#detail { flex: 2; border: 1px solid #99b; padding: .6em 1em; background: #fafbff; position: sticky; top: .5em;
          max-height: 95vh; overflow: auto; }
.method { margin: .6em 0; } .evidence { margin: .2em 0 .2em 1.2em; font-size: .9em; }
figure { display: inline-block; margin: .5em 1em .5em 0; max-width: 620px; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; } figcaption { font-size: .85em; color: #555; }
pre { background: #f6f6f6; padding: .6em; overflow: auto; max-height: 30em; font-size: .8em; }
</style>
</head>
<body>
<h1>{{TITLE}}</h1>
<p id="subtitle" class="muted"></p>
<h2>Results</h2>
<div id="results"></div>
<h2>Differences from the reference</h2>
<div id="differences"></div>
<h2>Inputs</h2>
<div class="controls">
  <label>task <select id="task"></select></label>
  <label><input type="checkbox" id="disagree"> methods disagree</label>
  <label>wrong for <select id="wrong"><option value="">any method or none</option></select></label>
  <label>text <input type="search" id="q" placeholder="search inputs"></label>
  <span id="count"></span>
</div>
<div class="browser">
  <div class="list"><div id="pager"></div><table id="inputs"></table></div>
  <div id="detail" hidden></div>
</div>
<h2>Figures</h2>
<div id="figures"></div>
<h2>Provenance</h2>
<div id="provenance"></div>
{{DATA}}
<script>
"use strict";
// Every value from the data reaches the DOM escaped: markup is built only with the tag H`...`, which escapes each
// value it interpolates (a value that H itself built stays markup), and put() is the one place that sets innerHTML.
const D = window.PGRA_DATA;
const PAGE_SIZE = 50;
const state = {task: D.tasks[0] || "", disagree: false, wrong: "", q: "", open: "", page: 0};
const el = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"'`]/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;", "`": "&#96;"}[c]));
class Markup { constructor(text) { this.text = text; } }
const piece = (v) => v instanceof Markup ? v.text : Array.isArray(v) ? v.map(piece).join("") : esc(v);
const H = (strings, ...values) => new Markup(strings.reduce((out, s, i) => out + piece(values[i - 1]) + s));
const cat = (...parts) => new Markup(parts.map(piece).join(""));
const put = (node, markup) => {
  if (!(markup instanceof Markup)) throw new TypeError("markup must be built with H");
  node.innerHTML = markup.text;
};
const own = (o, k) => o !== null && typeof o === "object" && Object.prototype.hasOwnProperty.call(o, k) ? o[k] : undefined;
// a link to a file of the experiment: a path that would read as a URL scheme (javascript:...) stays a relative path
const href = (path) => /^[a-z][a-z0-9+.-]*:/i.test(String(path)) ? "./" + path : String(path);
const isNum = (x) => typeof x === "number" && Number.isFinite(x);
const fixed = (x, digits) => isNum(x) ? x.toFixed(digits) : "–";
const pct = (x) => isNum(x) ? (100 * x).toFixed(1) : "–";
const named = (task, label) => {
  const word = own(own(D.label_words, task), label);
  return label === null || label === undefined ? "none" : (word !== undefined && word !== label ? `${label} (${word})` : String(label));
};

function readHash() {
  const h = new URLSearchParams(location.hash.slice(1));
  if (h.has("task") && D.tasks.includes(h.get("task"))) state.task = h.get("task");
  state.disagree = h.get("disagree") === "1";
  state.wrong = D.methods.includes(h.get("wrong")) ? h.get("wrong") : "";
  state.q = h.get("q") || "";
  state.open = h.get("open") || "";
  state.page = Math.max(0, parseInt(h.get("page") || "0", 10) || 0);
}
function writeHash() {
  const h = new URLSearchParams();
  h.set("task", state.task);
  if (state.disagree) h.set("disagree", "1");
  if (state.wrong) h.set("wrong", state.wrong);
  if (state.q) h.set("q", state.q);
  if (state.open) h.set("open", state.open);
  if (state.page) h.set("page", String(state.page));
  history.replaceState(null, "", "#" + h.toString());
}

function firstCell(task, method) {
  return D.cells.filter((c) => c.task === task && c.method === method).sort((a, b) => a.seed - b.seed)[0];
}
function sortable(table) {
  table.querySelectorAll("th.sortable").forEach((th, col) => {
    th.addEventListener("click", () => {
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      const dir = th.dataset.dir === "asc" ? -1 : 1;
      th.dataset.dir = dir === 1 ? "asc" : "desc";
      rows.sort((a, b) => {
        const x = a.cells[col].dataset.v, y = b.cells[col].dataset.v;
        const nx = parseFloat(x), ny = parseFloat(y);
        if (!Number.isNaN(nx) && !Number.isNaN(ny)) return dir * (nx - ny);
        return dir * String(x).localeCompare(String(y));
      });
      rows.forEach((r) => body.appendChild(r));
    });
  });
}

// "↑" when every seed's best dev score came at its last evaluation, "↑k/n" when k of its n seeds' did (as results.md)
const improving = (v) => !isNum(v.still_improving) || v.still_improving < 1 ? "" :
  " ↑" + (v.still_improving === v.n ? "" : `${v.still_improving}/${v.n}`);

function renderResults() {
  const metric = (t) => (own(own(D.summary, D.methods[0]), t) || {}).metric;
  const head = ["method", ...D.tasks.map((t) => `${t} (${metric(t)}, %)`), "avg"];
  const flagged = D.methods.some((m) => D.tasks.some((t) => improving(own(own(D.summary, m), t) || {})));
  const rows = D.methods.map((m) => {
    const s = own(D.summary, m) || {};
    const cells = D.tasks.map((t) => {
      const v = own(s, t);
      if (!v) return H`<td data-v="-1" class="num">–</td>`;
      const cell = firstCell(t, m);
      const text = `${pct(v.mean)}${v.n > 1 ? " ± " + pct(v.std) : ""} (${v.seed_independent ? "det." : v.n})`;
      const link = cell ? H`<a href="${href(cell.path + "/cell.json")}" title="the cell's record">${text}</a>` : text;
      const c = own(own(own(D.compare || {}, "cells") || {}, m) || {}, t);
      const paper = c ? H`<br><span class="muted" title="published value; ours − published">paper ${c.paper.toFixed(1)} (${c.difference >= 0 ? "+" : ""}${c.difference.toFixed(1)})${c.outside ? " †" : ""}</span>` : "";
      return H`<td class="num${v.below_linear_probe ? " below" : ""}" data-v="${v.mean}">${link}${v.below_linear_probe ? " ▽" : ""}${improving(v)}${paper}</td>`;
    });
    const avg = (own(s, "average") || {}).mean;
    return H`<tr><td data-v="${m}">${m}</td>${cells}<td class="num" data-v="${avg ?? -1}">${pct(avg)}</td></tr>`;
  });
  put(el("results"), cat(H`<table id="results-table"><thead><tr>${head.map((h) => H`<th class="sortable">${h}</th>`)}</tr></thead>`,
    H`<tbody>${rows}</tbody></table><p class="muted">Mean ± standard deviation over seeds (seeds; det.: `,
    H`seed-independent, one run), in percent (results.json holds the same values as fractions: 85.3 here is 0.853 there)`,
    H`${D.floor ? H`; ▽: below ${D.floor}` : ""}${flagged ? cat(H`; ↑: the best dev score came at the last evaluation, `,
    H`still improving: more steps would change the number (↑k/n: k of n seeds)`) : ""}. Click a header to sort, a value to open its cell.</p>`));
  sortable(el("results-table"));
}

function renderDifferences() {
  const rows = D.methods.filter((m) => m !== D.reference).map((m) => {
    const s = own(D.significance, m) || {};
    const cells = D.tasks.map((t) => {
      const v = own(s, t);
      if (!v) return H`<td class="num" data-v="0">–</td>`;
      const sig = (v.p_holm_all ?? v.p_value) < 0.05;
      const least = 1 / (((D.bootstrap || {}).n_resamples || 0) + 1);
      const p = v.p_value <= least * (1 + 1e-9) ? `<${+least.toPrecision(1)}` : `=${fixed(v.p_value, 3)}`;
      return H`<td class="num${sig ? " sig" : ""}" data-v="${v.delta}">${v.delta >= 0 ? "+" : ""}${pct(v.delta)} (p${p})${sig ? "*" : ""}</td>`;
    });
    return H`<tr><td data-v="${m}">${m}</td>${cells}</tr>`;
  });
  put(el("differences"), cat(H`<table id="diff-table"><thead><tr><th class="sortable">method</th>`,
    H`${D.tasks.map((t) => H`<th class="sortable">${t}: Δ (p)</th>`)}</tr></thead><tbody>${rows}</tbody></table>`,
    H`<p class="muted">Difference from ${D.reference} in points, paired bootstrap over inputs and seeds `,
    H`(${(D.bootstrap || {}).n_resamples} resamples); *: Holm-adjusted p &lt; 0.05 (the average: its own p).</p>`));
  sortable(el("diff-table"));
}

function renderFigures() {
  const png = (src) => String(src).startsWith("data:image/png;base64,") ? src : "";
  put(el("figures"), D.figures.length ? H`${D.figures.map((f) =>
    H`<figure><img alt="${f.title}" src="${png(f.src)}"><figcaption><b>${f.title}</b>: ${f.caption}</figcaption></figure>`)}`
    : H`<p class="muted">No analyses yet: run <code>pgra analyze</code>.</p>`);
}

function firstPrediction(input, method) {
  const runs = own(input.p, method);
  return runs && runs.length ? runs.slice().sort((a, b) => a[0] - b[0])[0][1] : undefined;
}
function methodsOf(input) { return D.methods.filter((m) => own(input.p, m)); }
function inputsOf(task) { return own(D.inputs, task) || []; }
function filtered() {
  const q = state.q.toLowerCase();
  return inputsOf(state.task).filter((x) => {
    if (state.disagree && new Set(methodsOf(x).map((m) => firstPrediction(x, m))).size < 2) return false;
    if (state.wrong && (firstPrediction(x, state.wrong) === undefined || firstPrediction(x, state.wrong) === x.label)) return false;
    if (q && !String(x.text).toLowerCase().includes(q) && !String(x.id).toLowerCase().includes(q)) return false;
    return true;
  });
}

function renderInputs() {
  const rows = filtered();
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  state.page = Math.min(state.page, pages - 1);
  el("count").textContent = `${rows.length} of ${inputsOf(state.task).length} inputs`;
  put(el("pager"), pages > 1 ? cat(H`<button id="prev" ${state.page ? "" : H`disabled`}>previous</button> page ${state.page + 1} of ${pages} `,
    H`<button id="next" ${state.page < pages - 1 ? "" : H`disabled`}>next</button>`) : H``);
  if (pages > 1) {
    el("prev").onclick = () => { state.page--; update(); };
    el("next").onclick = () => { state.page++; update(); };
  }
  const methods = D.methods.filter((m) => inputsOf(state.task).some((x) => own(x.p, m)));
  const body = rows.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE).map((x) => {
    const cells = methods.map((m) => {
      const p = firstPrediction(x, m);
      return p === undefined ? H`<td class="muted">–</td>` : H`<td class="${p === x.label ? "ok" : "bad"}">${p ?? "none"}</td>`;
    });
    return H`<tr class="row${x.id === state.open ? " open" : ""}" data-id="${x.id}"><td>${x.id}</td><td>${x.text}</td><td>${x.label}</td>${cells}</tr>`;
  });
  put(el("inputs"), H`<thead><tr><th>id</th><th>input</th><th>gold</th>${methods.map((m) => H`<th>${m}</th>`)}</tr></thead><tbody>${body}</tbody>`);
  el("inputs").querySelectorAll("tr.row").forEach((tr) => tr.addEventListener("click", () => { state.open = tr.dataset.id; update(); }));
}

function renderDetail() {
  const box = el("detail");
  const x = inputsOf(state.task).find((i) => i.id === state.open);
  if (!x) { box.hidden = true; box.textContent = ""; return; }
  const texts = own(D.texts, state.task) || {};
  const runs = methodsOf(x).map((m) => x.p[m].slice().sort((a, b) => a[0] - b[0]).map(([seed, pred, scores, evidence]) => {
    const probs = Object.entries(scores || {}).map(([k, v]) => `${k}: ${fixed(v, 3)}`).join(", ");
    const items = (evidence || []).map(([key, score, rank]) => {
      const t = own(texts, key) || {text: key};
      const kind = String(key).startsWith("t:") ? H`demonstration, label <b>${named(state.task, t.label)}</b>` :
        H`${own(D.score_names, m) || "score"} ${fixed(score, 3)}, first-stage rank ${rank ?? "–"}`;
      return H`<div class="evidence">• ${t.text} <span class="muted">(${kind})</span></div>`;
    });
    return cat(H`<div class="method" data-method="${m}" data-seed="${seed}"><b>${m}</b> seed ${seed}: `,
      H`<span class="${pred === x.label ? "ok" : "bad"} prediction">${named(state.task, pred)}</span> <span class="muted">(${probs})</span>${items}</div>`);
  }));
  put(box, H`<h3 id="detail-id">${x.id}</h3><p id="detail-text">${x.text}</p><p>gold: <b id="detail-gold">${named(state.task, x.label)}</b></p>${runs}`);
  box.hidden = false;
}

function renderProvenance() {
  const p = D.provenance || {};
  put(el("provenance"), cat(H`<p>pgra commit(s): <code>${(p.commits || []).join(", ")}</code>; split: ${D.split}; `,
    H`experiment: <code>${D.directory}</code></p><details><summary>versions</summary><pre>${JSON.stringify(p.versions, null, 2)}</pre></details>`,
    H`<details><summary>config</summary><pre>${JSON.stringify(p.config, null, 2)}</pre></details>`));
}

function update() { writeHash(); renderInputs(); renderDetail(); }

function init() {
  readHash();
  el("subtitle").textContent = `${D.tasks.length} task(s), ${D.methods.length} method(s), ${D.cells.length} cell(s); split ${D.split}; reference ${D.reference}`;
  put(el("task"), H`${D.tasks.map((t) => H`<option value="${t}"${t === state.task ? H` selected` : ""}>${t}</option>`)}`);
  put(el("wrong"), cat(H`<option value="">any method or none</option>`,
    H`${D.methods.map((m) => H`<option value="${m}"${m === state.wrong ? H` selected` : ""}>${m}</option>`)}`));
  el("disagree").checked = state.disagree;
  el("q").value = state.q;
  el("task").onchange = (e) => { state.task = e.target.value; state.open = ""; state.page = 0; update(); };
  el("disagree").onchange = (e) => { state.disagree = e.target.checked; state.page = 0; update(); };
  el("wrong").onchange = (e) => { state.wrong = e.target.value; state.page = 0; update(); };
  el("q").oninput = (e) => { state.q = e.target.value; state.page = 0; update(); };
  renderResults(); renderDifferences(); renderFigures(); renderProvenance(); update();
}
init();
</script>
</body>
</html>
"""

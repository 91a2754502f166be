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
.browser > .list { flex: 3; min-width: 0; overflow-x: auto; }
#inputs th { font-size: .8em; } #inputs td:nth-child(2) { min-width: 16em; }
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
const D = window.PGRA_DATA;
const PAGE_SIZE = 50;
const state = {task: D.tasks[0] || "", disagree: false, wrong: "", q: "", open: "", page: 0};
const el = (id) => document.getElementById(id);
const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
const named = (task, label) => {
  const words = (D.label_words || {})[task] || {};
  return label === null || label === undefined ? "none" : (words[label] && words[label] !== label ? `${label} (${words[label]})` : String(label));
};
const pct = (x) => (x === null || x === undefined || Number.isNaN(x)) ? "–" : (100 * x).toFixed(1);

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

function renderResults() {
  const head = ["method", ...D.tasks.map((t) => t + " (" + ((D.summary[D.methods[0]] || {})[t] || {}).metric + ")"), "avg"];
  let html = "<table id='results-table'><thead><tr>" + head.map((h) => `<th class="sortable">${esc(h)}</th>`).join("") + "</tr></thead><tbody>";
  for (const m of D.methods) {
    const s = D.summary[m] || {};
    html += `<tr><td data-v="${esc(m)}">${esc(m)}</td>`;
    for (const t of D.tasks) {
      const v = s[t];
      if (!v) { html += "<td data-v='-1' class='num'>–</td>"; continue; }
      const cell = firstCell(t, m);
      const text = `${pct(v.mean)}${v.n > 1 ? " ± " + pct(v.std) : ""} (${v.seed_independent ? "det." : v.n})`;
      const link = cell ? `<a href="${esc(cell.path)}/cell.json" title="the cell's record">${text}</a>` : text;
      html += `<td class="num${v.below_linear_probe ? " below" : ""}" data-v="${v.mean}">${link}${v.below_linear_probe ? " ▽" : ""}</td>`;
    }
    html += `<td class="num" data-v="${(s.average || {}).mean ?? -1}">${pct((s.average || {}).mean)}</td></tr>`;
  }
  el("results").innerHTML = html + "</tbody></table><p class='muted'>Mean ± standard deviation over seeds (seeds; det.: " +
    "seed-independent, one run), in percent" + (D.floor ? "; ▽: below " + esc(D.floor) : "") + ". Click a header to sort, a value to open its cell.</p>";
  sortable(el("results-table"));
}

function renderDifferences() {
  let html = "<table id='diff-table'><thead><tr><th class='sortable'>method</th>" +
    D.tasks.map((t) => `<th class="sortable">${esc(t)}: Δ (p)</th>`).join("") + "</tr></thead><tbody>";
  for (const m of D.methods) {
    if (m === D.reference) continue;
    const s = D.significance[m] || {};
    html += `<tr><td data-v="${esc(m)}">${esc(m)}</td>`;
    for (const t of D.tasks) {
      const v = s[t];
      if (!v) { html += "<td class='num' data-v='0'>–</td>"; continue; }
      const sig = v.p_value < 0.05;
      html += `<td class="num${sig ? " sig" : ""}" data-v="${v.delta}">${v.delta >= 0 ? "+" : ""}${pct(v.delta)} (p=${v.p_value.toFixed(3)})${sig ? "*" : ""}</td>`;
    }
    html += "</tr>";
  }
  el("differences").innerHTML = html + `</tbody></table><p class="muted">Difference from ${esc(D.reference)} in points, ` +
    `paired bootstrap over inputs and seeds (${esc(D.bootstrap.n_resamples)} resamples); *: p &lt; 0.05.</p>`;
  sortable(el("diff-table"));
}

function renderFigures() {
  el("figures").innerHTML = D.figures.length ? D.figures.map((f) =>
    `<figure><img alt="${esc(f.title)}" src="${f.src}"><figcaption><b>${esc(f.title)}</b>: ${esc(f.caption)}</figcaption></figure>`).join("")
    : "<p class='muted'>No analyses yet: run <code>pgra analyze</code>.</p>";
}

function firstPrediction(input, method) {
  const runs = input.p[method];
  return runs && runs.length ? runs.slice().sort((a, b) => a[0] - b[0])[0][1] : undefined;
}
function methodsOf(input) { return D.methods.filter((m) => input.p[m]); }
function filtered() {
  const q = state.q.toLowerCase();
  return (D.inputs[state.task] || []).filter((x) => {
    if (state.disagree && new Set(methodsOf(x).map((m) => firstPrediction(x, m))).size < 2) return false;
    if (state.wrong && (firstPrediction(x, state.wrong) === undefined || firstPrediction(x, state.wrong) === x.label)) return false;
    if (q && !x.text.toLowerCase().includes(q) && !x.id.toLowerCase().includes(q)) return false;
    return true;
  });
}

function renderInputs() {
  const rows = filtered();
  const pages = Math.max(1, Math.ceil(rows.length / PAGE_SIZE));
  state.page = Math.min(state.page, pages - 1);
  el("count").textContent = `${rows.length} of ${(D.inputs[state.task] || []).length} inputs`;
  el("pager").innerHTML = pages > 1 ? `<button id="prev" ${state.page ? "" : "disabled"}>previous</button> page ${state.page + 1} of ${pages} ` +
    `<button id="next" ${state.page < pages - 1 ? "" : "disabled"}>next</button>` : "";
  if (pages > 1) {
    el("prev").onclick = () => { state.page--; update(); };
    el("next").onclick = () => { state.page++; update(); };
  }
  const methods = D.methods.filter((m) => (D.inputs[state.task] || []).some((x) => x.p[m]));
  let html = "<thead><tr><th>id</th><th>input</th><th>gold</th>" + methods.map((m) => `<th>${esc(m)}</th>`).join("") + "</tr></thead><tbody>";
  for (const x of rows.slice(state.page * PAGE_SIZE, (state.page + 1) * PAGE_SIZE)) {
    html += `<tr class="row${x.id === state.open ? " open" : ""}" data-id="${esc(x.id)}"><td>${esc(x.id)}</td><td>${esc(x.text)}</td><td>${esc(x.label)}</td>`;
    for (const m of methods) {
      const p = firstPrediction(x, m);
      html += p === undefined ? "<td class='muted'>–</td>" : `<td class="${p === x.label ? "ok" : "bad"}">${esc(p ?? "none")}</td>`;
    }
    html += "</tr>";
  }
  el("inputs").innerHTML = html + "</tbody>";
  el("inputs").querySelectorAll("tr.row").forEach((tr) => tr.addEventListener("click", () => { state.open = tr.dataset.id; update(); }));
}

function renderDetail() {
  const box = el("detail");
  const x = (D.inputs[state.task] || []).find((i) => i.id === state.open);
  if (!x) { box.hidden = true; box.innerHTML = ""; return; }
  const texts = D.texts[state.task] || {};
  let html = `<h3 id="detail-id">${esc(x.id)}</h3><p id="detail-text">${esc(x.text)}</p><p>gold: <b id="detail-gold">${esc(named(state.task, x.label))}</b></p>`;
  for (const m of methodsOf(x)) {
    for (const [seed, pred, scores, evidence] of x.p[m].slice().sort((a, b) => a[0] - b[0])) {
      const probs = Object.entries(scores).map(([k, v]) => `${esc(k)}: ${v.toFixed(3)}`).join(", ");
      html += `<div class="method" data-method="${esc(m)}" data-seed="${seed}"><b>${esc(m)}</b> seed ${seed}: ` +
        `<span class="${pred === x.label ? "ok" : "bad"} prediction">${esc(named(state.task, pred))}</span> <span class="muted">(${probs})</span>`;
      for (const [key, score, rank] of evidence) {
        const t = texts[key] || {text: key};
        const kind = key.startsWith("t:") ? `demonstration, label <b>${esc(named(state.task, t.label))}</b>` :
          `score ${score === null ? "–" : score.toFixed(3)}, first-stage rank ${rank ?? "–"}`;
        html += `<div class="evidence">• ${esc(t.text)} <span class="muted">(${kind})</span></div>`;
      }
      html += "</div>";
    }
  }
  box.innerHTML = html;
  box.hidden = false;
}

function renderProvenance() {
  const p = D.provenance;
  el("provenance").innerHTML = `<p>pgra commit(s): <code>${p.commits.map(esc).join(", ")}</code>; split: ${esc(D.split)}; ` +
    `experiment: <code>${esc(D.directory)}</code></p><details><summary>versions</summary><pre>${esc(JSON.stringify(p.versions, null, 2))}</pre></details>` +
    `<details><summary>config</summary><pre>${esc(JSON.stringify(p.config, null, 2))}</pre></details>`;
}

function update() { writeHash(); renderInputs(); renderDetail(); }

function init() {
  readHash();
  el("subtitle").textContent = `${D.tasks.length} task(s), ${D.methods.length} method(s), ${D.cells.length} cell(s); split ${D.split}; reference ${D.reference}`;
  el("task").innerHTML = D.tasks.map((t) => `<option${t === state.task ? " selected" : ""}>${esc(t)}</option>`).join("");
  el("wrong").innerHTML += D.methods.map((m) => `<option value="${esc(m)}"${m === state.wrong ? " selected" : ""}>${esc(m)}</option>`).join("");
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

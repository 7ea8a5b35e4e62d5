// The isohost live page: polls GET /api/status once a second and draws what it holds. Plain
// JavaScript and SVG, nothing from the network. Key figures carry data attributes so that a
// test can read them from the DOM: each worker's row is tr[data-pid][data-env][data-state],
// each figure td[data-field][data-bytes] (raw bytes; the text is rounded).
"use strict";

const MB = 1e6;
const MIB = 1 << 20;
const SVG_NS = "http://www.w3.org/2000/svg";

const state = { history: [], lastT: 0, capacity: 600, interval: 1 };

// ---- formatting -------------------------------------------------------------------------

function isNum(v) { return typeof v === "number" && isFinite(v); }
function mb(bytes) { return isNum(bytes) ? (bytes / MB).toFixed(1) + " MB" : "–"; }
function gb(bytes) { return isNum(bytes) ? (bytes / 1e9).toFixed(1) + " GB" : "–"; }
function mib(bytes) { return isNum(bytes) ? (bytes / MIB).toFixed(0) + " MiB" : "–"; }
function seconds(s) {
  if (!isNum(s)) return "–";
  if (s < 60) return s.toFixed(0) + " s";
  if (s < 3600) return Math.floor(s / 60) + " min " + Math.floor(s % 60) + " s";
  return Math.floor(s / 3600) + " h " + Math.floor((s % 3600) / 60) + " min";
}

// A colour per environment, the same in bars, charts and rows: hues far apart, handed out in
// the order of the environments' names (the host lists every configured one), so they stay
// put while the page runs.
const HUES = [210, 28, 140, 280, 0, 175, 50, 320, 95, 245];
const envHues = new Map();
function learnEnvs(names) {
  for (const name of [...names].sort()) {
    if (!envHues.has(name)) envHues.set(name, HUES[envHues.size % HUES.length]);
  }
}
function envColor(env, lightness) {
  if (!envHues.has(env)) learnEnvs([env]);
  return "hsl(" + envHues.get(env) + ", 60%, " + (lightness || 45) + "%)";
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null) continue;
    if (k === "text") e.textContent = v;
    else if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c) e.append(c);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

// ---- stacked bars -----------------------------------------------------------------------

// segments: [{value, color, label, cls}], scale: the bytes of a full bar.
function bar(segments, scale, tall) {
  const b = el("div", { class: tall ? "bar tall" : "bar" });
  for (const s of segments) {
    if (!isNum(s.value) || s.value <= 0 || scale <= 0) continue;
    const seg = el("div", { class: "seg " + (s.cls || ""), title: s.label });
    seg.style.width = (100 * Math.min(s.value, scale) / scale) + "%";
    seg.style.backgroundColor = s.color;
    b.append(seg);
  }
  return b;
}

function barRow(container, label, sub, segments, scale, value, attrs, tall) {
  container.append(el("div", { class: "bar-label" }, label, sub ? el("small", { text: " " + sub }) : null));
  const b = bar(segments, scale, tall);
  for (const [k, v] of Object.entries(attrs || {})) b.setAttribute(k, v);
  container.append(b);
  container.append(el("div", { class: "bar-value", text: value }));
}

function legend(container, items) {
  const l = el("div", { class: "legend" });
  for (const [color, text, cls] of items) {
    const sw = el("i", { class: cls || "" });
    sw.style.backgroundColor = color;
    l.append(el("span", {}, sw, text));
  }
  container.append(l);
}

// RAM of one worker as the status splits it: fixed (PSS when it became ready) and what it has
// taken since (its models, caches, tensors; a release or a reap gives it back).
function ramSegments(w) {
  const pss = isNum(w.pss) ? w.pss : 0;
  const fixed = isNum(w.fixed_ram) ? Math.min(w.fixed_ram, pss) : pss;
  return [
    { value: fixed, color: envColor(w.env), label: w.env + " fixed at ready: " + mb(fixed) },
    { value: pss - fixed, color: envColor(w.env, 70), cls: "hatched",
      label: w.env + " taken since ready: " + mb(pss - fixed) },
  ];
}

// VRAM of one worker: fixed (its CUDA context and what torch does not count), allocated by the
// allocator, and reclaimable (the allocator's cache, which release gives back).
function vramSegments(w) {
  const vram = isNum(w.vram) ? w.vram : 0;
  const fixed = isNum(w.fixed_vram) ? Math.min(w.fixed_vram, vram) : vram;
  const reclaimable = isNum(w.reclaimable_vram) ? Math.min(w.reclaimable_vram, vram - fixed) : 0;
  const allocated = vram - fixed - reclaimable;
  return [
    { value: fixed, color: envColor(w.env), label: w.env + " fixed (context): " + mib(fixed) },
    { value: allocated, color: envColor(w.env, 60), label: w.env + " allocated: " + mib(allocated) },
    { value: reclaimable, color: envColor(w.env, 76), cls: "hatched",
      label: w.env + " reclaimable (cache): " + mib(reclaimable) },
  ];
}

function drawRam(status) {
  const machine = document.getElementById("ram-machine");
  const processes = document.getElementById("ram-processes");
  machine.replaceChildren();
  processes.replaceChildren();
  const workers = status.workers || [];
  const zygotes = status.zygotes || [];
  const host = status.host || {};
  const ours = workers.concat(zygotes).reduce((a, p) => a + (isNum(p.pss) ? p.pss : 0), 0) +
               (isNum(host.pss) ? host.pss : 0);
  const sys = status.system_memory;
  if (sys && isNum(sys.total) && isNum(sys.available)) {
    const segments = [];
    for (const w of workers) segments.push(...ramSegments(w));
    for (const z of zygotes) segments.push({ value: z.pss, color: envColor(z.env, 85), label: "zygote " + z.env + ": " + mb(z.pss) });
    segments.push({ value: host.pss, color: "#495057", label: "host: " + mb(host.pss) });
    const other = Math.max(0, sys.total - sys.available - ours);
    segments.push({ value: other, color: "var(--other)", label: "other processes and the kernel: " + mb(other) });
    barRow(machine, "machine", gb(sys.total), segments, sys.total,
           mb(ours) + " ours, " + gb(sys.available) + " free",
           { id: "ram-machine-bar", "data-total": sys.total, "data-available": sys.available }, true);
  }
  const rows = workers.map(w => ({ kind: "worker", p: w }))
    .concat(zygotes.filter(z => isNum(z.pss)).map(z => ({ kind: "zygote", p: z })));
  const scale = Math.max(1, ...rows.map(r => (isNum(r.p.pss) ? r.p.pss : 0)), isNum(host.pss) ? host.pss : 0);
  for (const r of rows) {
    const p = r.p;
    const segments = r.kind === "worker" ? ramSegments(p)
      : [{ value: p.pss, color: envColor(p.env, 85), label: "zygote " + p.env + ": " + mb(p.pss) }];
    barRow(processes, (r.kind === "zygote" ? "zygote " : "") + p.env, "pid " + p.pid, segments, scale,
           mb(p.pss), { "data-ram-pid": p.pid, "data-bytes": isNum(p.pss) ? p.pss : "" });
  }
  if (isNum(host.pss)) {
    barRow(processes, "host", "pid " + host.pid, [{ value: host.pss, color: "#495057", label: "host" }],
           scale, mb(host.pss), { "data-ram-pid": host.pid, "data-bytes": host.pss });
  }
  legend(processes, [["hsl(0, 0%, 40%)", "fixed: PSS when the worker became ready"],
                     ["hsl(0, 0%, 70%)", "taken since ready", "seg hatched"],
                     ["var(--other)", "other processes"], ["var(--free)", "available"]]);
}

function drawVram(status) {
  const devicesBox = document.getElementById("vram-devices");
  const workersBox = document.getElementById("vram-workers");
  devicesBox.replaceChildren();
  workersBox.replaceChildren();
  const workers = status.workers || [];
  const devices = status.devices || [];
  if (devices.length === 0) {
    devicesBox.append(el("div", { class: "bar-label", id: "vram-none",
      text: "no GPU" + (status.gpu ? ": " + status.gpu : "") }));
  }
  for (const d of devices) {
    const segments = [];
    for (const w of workers) {
      // A worker's VRAM is on its device; without NVML attribution per device, all GPUs show it
      // only when the host has one.
      if (devices.length === 1 || w.device === d.index) segments.push(...vramSegments(w));
    }
    const workersVram = isNum(d.workers_vram) ? d.workers_vram : segments.reduce((a, s) => a + (s.value || 0), 0);
    segments.push({ value: d.foreign, color: "var(--foreign)", label: "other processes: " + mib(d.foreign) });
    const rest = (d.used || 0) - workersVram - (isNum(d.foreign) ? d.foreign : 0);
    segments.push({ value: rest, color: "var(--other)", label: "used, not attributed: " + mib(rest) });
    barRow(devicesBox, "GPU " + d.index, d.name + ", " + mib(d.total), segments, d.total,
           mib(d.used) + " used, " + mib(d.free) + " free",
           { "data-device": d.index, "data-used": d.used, "data-total": d.total, "data-free": d.free }, true);
  }
  const scale = Math.max(1, ...workers.map(w => (isNum(w.vram) ? w.vram : 0)));
  for (const w of workers) {
    barRow(workersBox, w.env, "pid " + w.pid, vramSegments(w), scale, mib(w.vram),
           { "data-vram-pid": w.pid, "data-bytes": isNum(w.vram) ? w.vram : "" });
  }
  legend(workersBox, [["hsl(0, 0%, 40%)", "fixed: context"], ["hsl(0, 0%, 58%)", "allocated"],
                      ["hsl(0, 0%, 76%)", "reclaimable: allocator cache", "seg hatched"],
                      ["var(--foreign)", "other processes"], ["var(--free)", "free"]]);
}

// ---- time series ------------------------------------------------------------------------

// Stacked areas of `series` (key -> {color, label, values: Map t -> bytes}) over `times`,
// with optional lines (used, total) on top.
function drawChart(svgEl, times, series, lines, unit, unitName) {
  svgEl.replaceChildren();
  // Drawn in the element's own pixels, so text is not stretched with the width.
  const W = Math.max(300, Math.round(svgEl.clientWidth || 900));
  const H = Math.max(120, Math.round(svgEl.clientHeight || 190));
  const L = 74, R = 28, T = 10, B = 22;
  svgEl.setAttribute("viewBox", "0 0 " + W + " " + H);
  if (times.length === 0) return;
  const t1 = times[times.length - 1];
  // The span held, at least a minute, at most what isohost-web keeps.
  const span = Math.min(state.capacity * state.interval, Math.max(60, t1 - times[0]));
  const t0 = t1 - span;
  const x = t => L + (W - L - R) * (t - t0) / (t1 - t0 || 1);
  const stacks = times.map(() => 0);
  const layers = [];
  for (const s of series) {
    const lower = stacks.slice();
    times.forEach((t, i) => { stacks[i] += s.values.get(t) || 0; });
    layers.push({ s, lower, upper: stacks.slice() });
  }
  let top = Math.max(1, ...stacks);
  for (const l of lines) for (const t of times) top = Math.max(top, l.values.get(t) || 0);
  // Four gridlines at a round step in the unit shown (1, 2, 2.5 or 5 times a power of ten).
  const raw = top / unit / 4;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = unit * power * ([1, 2, 2.5, 5, 10].find(m => m * power >= raw) || 10);
  top = step * 4;
  const y = v => T + (H - T - B) * (1 - v / top);
  for (let k = 0; k <= 4; k++) {
    const v = step * k;
    svgEl.append(svg("line", { class: "grid", x1: L, x2: W - R, y1: y(v), y2: y(v) }));
    const label = svg("text", { x: L - 4, y: y(v) + 4, "text-anchor": "end" });
    label.textContent = +(v / unit).toFixed(1) + (k === 4 ? " " + unitName : "");
    svgEl.append(label);
  }
  const tick = [10, 15, 30, 60, 120, 300].find(s => span / s <= 6) || 600;
  for (let ago = 0; ago <= span + 0.001; ago += tick) {
    const label = svg("text", { x: x(t1 - ago), y: H - 6, "text-anchor": ago === 0 ? "end" : "middle" });
    label.textContent = ago === 0 ? "now" : ago < 60 ? "-" + ago + " s" : "-" + ago / 60 + " min";
    svgEl.append(label);
  }
  for (const { s, lower, upper } of layers) {
    let d = "";
    times.forEach((t, i) => { d += (i ? "L" : "M") + x(t).toFixed(1) + "," + y(upper[i]).toFixed(1); });
    for (let i = times.length - 1; i >= 0; i--) d += "L" + x(times[i]).toFixed(1) + "," + y(lower[i]).toFixed(1);
    const path = svg("path", { d: d + "Z", fill: s.color, "fill-opacity": "0.85", "data-series": s.key });
    const title = svg("title", {});
    title.textContent = s.label;
    path.append(title);
    svgEl.append(path);
  }
  for (const l of lines) {
    let d = "";
    times.forEach((t, i) => {
      const v = l.values.get(t);
      if (isNum(v)) d += (d ? "L" : "M") + x(t).toFixed(1) + "," + y(v).toFixed(1);
    });
    if (d) svgEl.append(svg("path", { d, class: l.cls }));
  }
}

function seriesOf(points, pick) {
  const map = new Map();
  for (const p of points) {
    for (const item of pick(p)) {
      if (!isNum(item.value)) continue;
      if (!map.has(item.key)) map.set(item.key, { key: item.key, color: item.color, label: item.label, values: new Map() });
      map.get(item.key).values.set(p.t, item.value);
    }
  }
  return [...map.values()];
}

function drawHistory() {
  const points = state.history;
  const times = points.map(p => p.t);
  document.getElementById("history-minutes").textContent = String(Math.round(state.capacity * state.interval / 60));
  const ram = seriesOf(points, p => [
    ...p.workers.map(w => ({ key: "w" + w.pid, value: w.pss, color: envColor(w.env), label: w.env + " (pid " + w.pid + ")" })),
    ...p.zygotes.map(z => ({ key: "z" + z.pid, value: z.pss, color: envColor(z.env, 85), label: "zygote " + z.env })),
    { key: "host", value: p.host_pss, color: "#495057", label: "host" },
  ]);
  drawChart(document.getElementById("chart-ram"), times, ram, [], MB, "MB");

  const box = document.getElementById("chart-vram");
  const last = points.length ? points[points.length - 1] : null;
  const devices = last ? last.devices : [];
  // One chart per device, kept across redraws.
  const wanted = new Set(devices.map(d => "chart-vram-" + d.index));
  for (const f of [...box.children]) if (!wanted.has(f.dataset.chart)) f.remove();
  for (const d of devices) {
    const id = "chart-vram-" + d.index;
    let figure = box.querySelector('[data-chart="' + id + '"]');
    if (!figure) {
      figure = el("figure", { "data-chart": id },
        el("figcaption", { text: "VRAM of GPU " + d.index + " (" + d.name + "): workers stacked, used (line), total (dashed)" }),
        svg("svg", { id, viewBox: "0 0 900 220", preserveAspectRatio: "none", role: "img" }));
      box.append(figure);
    }
    const only = devices.length === 1;
    const workers = seriesOf(points, p => only ? p.workers.map(w => ({ key: "w" + w.pid, value: w.vram, color: envColor(w.env), label: w.env + " (pid " + w.pid + ")" })) : []);
    const used = new Map(), total = new Map();
    for (const p of points) {
      const dev = p.devices.find(x => x.index === d.index);
      if (dev) { used.set(p.t, dev.used); total.set(p.t, dev.total); }
    }
    drawChart(figure.querySelector("svg"), times, workers,
              [{ values: used, cls: "used" }, { values: total, cls: "total" }], MIB, "MiB");
  }
}

// ---- footprint table --------------------------------------------------------------------

// A figure in bytes: exact in data-bytes, rounded in the text.
function bytesCell(field, value, format) {
  return el("td", { class: "num", "data-field": field, "data-bytes": isNum(value) ? value : null,
                    text: format(value) });
}

function numberCell(field, value, text) {
  return el("td", { class: "num", "data-field": field, "data-value": isNum(value) ? value : null, text });
}

function drawTable(metrics) {
  const status = metrics.status || {};
  const envs = metrics.envs || {};
  const body = document.getElementById("footprint-workers");
  const others = document.getElementById("footprint-others");
  body.replaceChildren();
  others.replaceChildren();
  const workers = status.workers || [];
  document.getElementById("footprint-empty").hidden = workers.length > 0;
  for (const w of workers) {
    const env = envs[w.env] || {};
    const a = env.last_admission;
    const sw = el("span", { class: "swatch" });
    sw.style.backgroundColor = envColor(w.env);
    body.append(el("tr", { class: "worker", "data-env": w.env, "data-pid": w.pid, "data-state": w.state,
                           "data-generation": w.generation },
      el("td", { "data-field": "env" }, sw, w.env),
      el("td", { class: "num", "data-field": "pid", text: String(w.pid) }),
      el("td", { class: "num", "data-field": "generation", text: String(w.generation) }),
      el("td", { class: "state-" + w.state, "data-field": "state", text: w.state }),
      bytesCell("pss", w.pss, mb),
      bytesCell("private", w.private, mb),
      bytesCell("rss", w.rss, mb),
      bytesCell("vram", w.vram, mib),
      bytesCell("fixed_ram", w.fixed_ram, mb),
      bytesCell("fixed_vram", w.fixed_vram, mib),
      bytesCell("reclaimable_vram", w.reclaimable_vram, mib),
      numberCell("calls", w.calls, isNum(w.calls) ? String(w.calls) : "–"),
      numberCell("idle", w.idle_seconds, seconds(w.idle_seconds)),
      el("td", { "data-field": "last_admission",
                 text: a ? a.action + " for " + a["for"] + ", " + seconds(a.seconds_ago) + " ago" : "" })));
  }
  const host = status.host || {};
  for (const z of status.zygotes || []) {
    others.append(el("tr", { class: "other zygote", "data-env": z.env, "data-pid": z.pid, "data-state": z.state },
      el("td", { text: z.env }), el("td", { class: "num", text: String(z.pid) }), el("td", { text: "" }),
      el("td", { text: "zygote, " + z.state }), bytesCell("pss", z.pss, mb),
      bytesCell("private", z.private, mb), bytesCell("rss", z.rss, mb),
      el("td", { colspan: 7 })));
  }
  if (isNum(host.pid)) {
    others.append(el("tr", { class: "other host", "data-pid": host.pid },
      el("td", { text: "(host)" }), el("td", { class: "num", text: String(host.pid) }), el("td", { text: "" }),
      el("td", { text: "serving" }), bytesCell("pss", host.pss, mb),
      bytesCell("private", host.private, mb), bytesCell("rss", host.rss, mb),
      el("td", { colspan: 7 })));
  }
}

// ---- polling ----------------------------------------------------------------------------

function showError(text) {
  const e = document.getElementById("status-error");
  e.hidden = !text;
  e.textContent = text || "";
}

function render(answer) {
  state.capacity = answer.capacity || state.capacity;
  state.interval = answer.interval_seconds || state.interval;
  for (const p of answer.history || []) {
    if (p.t > state.lastT) { state.history.push(p); state.lastT = p.t; }
  }
  if (state.history.length > state.capacity) state.history.splice(0, state.history.length - state.capacity);
  const metrics = answer.latest;
  if (metrics && metrics.envs) learnEnvs(Object.keys(metrics.envs));
  if (answer.error) showError("the host does not answer: " + answer.error + " (showing the last sample)");
  else showError("");
  if (!metrics) return;
  const status = metrics.status || {};
  document.getElementById("host-pid").textContent = status.host ? String(status.host.pid) : "–";
  document.getElementById("uptime").textContent = seconds(metrics.uptime_seconds);
  const at = document.getElementById("sample-at");
  at.dataset.unix = String(answer.latest_at);
  at.textContent = new Date(answer.latest_at * 1000).toLocaleTimeString();
  drawRam(status);
  drawVram(status);
  drawTable(metrics);
  drawHistory();
  document.body.dataset.samples = String(state.history.length);
}

async function poll() {
  try {
    const response = await fetch("/api/status?since=" + state.lastT, { cache: "no-store" });
    if (!response.ok) throw new Error("HTTP " + response.status);
    render(await response.json());
  } catch (e) {
    showError("the page's server does not answer (" + e.message + "); isohost-web may have stopped");
  }
  setTimeout(poll, state.interval * 1000);
}

poll();

// isohost's side panel in ComfyUI: the isolated workers' states and memory, once a second, from
// GET /isohost/status on ComfyUI's own server (status_route.py; docs/comfyui.md, "The side
// panel"). Plain DOM and SVG, nothing fetched from anywhere else, and read-only: no button here
// changes the pool.
//
// What a test (or a person with the inspector) can read: every figure carries its bytes in
// data-value, every worker's row is #isohost-worker-ENV with data-pid, data-state and
// data-generation, a zygote's #isohost-zygote-ENV, a device's #isohost-device-INDEX, and
// #isohost-status says whether the pool answered (data-available) and when (data-sampled-at).
import { app } from "../../scripts/app.js";
import { api } from "../../scripts/api.js";

const ROUTE = "/isohost/status";
const POLL_MS = 1000;
// The history the panel draws: its own samples while it is open, one a second, ten minutes.
const HISTORY_POINTS = 600;
const SVG_NS = "http://www.w3.org/2000/svg";
// One colour per environment, in the configuration's order.
const PALETTE = ["#4e9af1", "#f1a34e", "#5cc98b", "#d36ad6", "#e8d44d", "#4ed1d1", "#f16a6a",
  "#9a8cf1"];
const SHADES = {
  comfyui: "#8a8f98", zygote: "#b7a06a", other: "#5a5f68", available: "transparent",
  foreign: "#7a5f68", free: "transparent", reclaimable: "#9fd3a0",
};

const STYLE = `
.isohost-panel { padding: 8px; font-size: 12px; color: var(--fg-color, #ddd);
  overflow-y: auto; height: 100%; box-sizing: border-box; }
.isohost-panel h3 { font-size: 13px; margin: 12px 0 4px; font-weight: 600; }
.isohost-panel h2 { font-size: 14px; margin: 0 0 2px; font-weight: 600; }
.isohost-panel .isohost-note { color: var(--descrip-text, #999); margin: 2px 0; }
.isohost-panel .isohost-bar { display: block; width: 100%; height: 14px; margin: 3px 0;
  border: 1px solid var(--border-color, #555); border-radius: 3px; box-sizing: border-box; }
.isohost-panel .isohost-legend { display: flex; flex-wrap: wrap; gap: 2px 10px; margin: 2px 0 4px; }
.isohost-panel .isohost-swatch { display: inline-block; width: 9px; height: 9px; margin-right: 4px;
  border: 1px solid var(--border-color, #555); vertical-align: -1px; }
.isohost-panel .isohost-worker { margin: 6px 0 8px; }
.isohost-panel .isohost-worker-head { display: flex; justify-content: space-between; gap: 6px; }
.isohost-panel .isohost-env { font-weight: 600; }
.isohost-panel .isohost-state { padding: 0 5px; border-radius: 3px;
  background: var(--comfy-input-bg, #333); }
.isohost-panel table { border-collapse: collapse; width: 100%; margin-top: 4px; font-size: 10.5px;
  font-variant-numeric: tabular-nums; }
.isohost-panel th, .isohost-panel td { text-align: right; padding: 1px 2px; white-space: nowrap;
  border-bottom: 1px solid var(--border-color, #444); }
.isohost-panel th:first-child, .isohost-panel td:first-child { text-align: left; }
.isohost-panel .isohost-table { overflow-x: auto; }
`;

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, String(value));
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

const isNumber = (v) => typeof v === "number" && Number.isFinite(v);

// RAM in decimal units as `isohost ps` prints it, VRAM in binary units.
function ramText(bytes) {
  if (!isNumber(bytes)) return "-";
  return bytes >= 1e10 ? `${(bytes / 1e9).toFixed(1)} GB` : `${Math.round(bytes / 1e6)} MB`;
}
function vramText(bytes) {
  if (!isNumber(bytes)) return "-";
  return bytes >= 10 * 2 ** 30 ? `${(bytes / 2 ** 30).toFixed(1)} GiB`
    : `${Math.round(bytes / 2 ** 20)} MiB`;
}

// A figure: its text, its bytes (or number) in data-value, its name in data-field.
function figure(tag, field, value, text) {
  return el(tag, { "data-field": field, "data-value": isNumber(value) ? value : "" }, text);
}

// A stacked bar: segments [{label, bytes, color}] over `scale` bytes, in SVG.
function stackedBar(id, segments, scale) {
  const svg = document.createElementNS(SVG_NS, "svg");
  svg.setAttribute("class", "isohost-bar");
  svg.setAttribute("viewBox", "0 0 1000 10");
  svg.setAttribute("preserveAspectRatio", "none");
  if (id) svg.setAttribute("id", id);
  let x = 0;
  for (const s of segments) {
    if (!isNumber(s.bytes) || s.bytes <= 0 || !(scale > 0)) continue;
    const width = Math.min(1000 - x, (s.bytes / scale) * 1000);
    if (width <= 0) break;
    const rect = document.createElementNS(SVG_NS, "rect");
    rect.setAttribute("x", x);
    rect.setAttribute("y", 0);
    rect.setAttribute("width", Math.max(width, 1.5));  // a sliver stays visible
    rect.setAttribute("height", 10);
    rect.setAttribute("fill", s.color);
    rect.setAttribute("data-segment", s.label);
    rect.setAttribute("data-value", s.bytes);
    const title = document.createElementNS(SVG_NS, "title");
    title.textContent = `${s.label}: ${s.text ?? ramText(s.bytes)}`;
    rect.append(title);
    svg.append(rect);
    x += width;
  }
  return svg;
}

function legend(segments) {
  return el("div", { class: "isohost-legend" }, ...segments.filter((s) => isNumber(s.bytes))
    .map((s) => el("span", {}, el("span", { class: "isohost-swatch",
      style: `background:${s.color}` }), `${s.label} ${s.text ?? ramText(s.bytes)}`)));
}

function sum(values) {
  return values.reduce((a, v) => a + (isNumber(v) ? v : 0), 0);
}

class Panel {
  constructor(container) {
    this.container = container;
    this.stopped = false;
    this.timer = null;
    this.colors = new Map();
    this.history = [];  // {t, pss, vram}: the isolated workers' totals per sample
    this.root = el("div", { class: "isohost-panel", id: "isohost-panel" });
    this.status = el("div", { class: "isohost-note", id: "isohost-status",
      "data-available": "unknown" }, "asking the pool...");
    this.body = el("div", { id: "isohost-body" });
    this.root.append(el("h2", {}, "isohost: isolated workers"), this.status, this.body);
    container.replaceChildren(this.root);
    this.poll();
  }

  stop() {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  async poll() {
    if (this.stopped) return;
    try {
      const response = await api.fetchApi(ROUTE, { cache: "no-store" });
      if (!response.ok) throw new Error(`${ROUTE} answered ${response.status}`);
      this.draw(await response.json());
    } catch (error) {
      this.status.dataset.available = "false";
      this.status.textContent = `no answer from ComfyUI: ${error.message ?? error}`;
    }
    if (!this.stopped) this.timer = setTimeout(() => this.poll(), POLL_MS);
  }

  color(env) {
    if (!this.colors.has(env)) this.colors.set(env, PALETTE[this.colors.size % PALETTE.length]);
    return this.colors.get(env);
  }

  draw(s) {
    for (const e of s.environments ?? []) this.color(e.name);
    const sampled = new Date((s.sampled_at ?? 0) * 1000);
    this.status.dataset.available = String(Boolean(s.available));
    this.status.dataset.sampledAt = String(s.sampled_at ?? "");
    this.status.textContent = s.available
      ? `${(s.workers ?? []).length} worker(s), sampled ${sampled.toLocaleTimeString()}`
      : `no view: ${s.reason}`;
    const workers = s.workers ?? [];
    const zygotes = s.zygotes ?? [];
    if (s.available) {
      this.history.push({ t: s.sampled_at, pss: sum(workers.map((w) => w.pss)) + sum(zygotes.map((z) => z.pss)),
        vram: (s.devices ?? []).length ? sum(workers.map((w) => w.vram)) : null });
      if (this.history.length > HISTORY_POINTS) this.history.shift();
    }
    const parts = [this.notLoadedSection(s.not_loaded ?? []),
      this.ramSection(s, workers, zygotes), this.vramSection(s, workers),
      this.historySection(), this.workersSection(workers, s), this.zygotesSection(zygotes)];
    this.body.replaceChildren(...parts.filter(Boolean));
  }

  ramSection(s, workers, zygotes) {
    const machine = s.machine ?? {};
    const perWorker = workers.map((w) => ({ label: `${w.env} (${w.pid})`, bytes: w.pss,
      color: this.color(w.env) }));
    const zygotePss = sum(zygotes.map((z) => z.pss));
    const host = s.host?.pss;
    const used = isNumber(machine.total) && isNumber(machine.available)
      ? machine.total - machine.available : null;
    const other = isNumber(used) ? Math.max(0, used - sum(perWorker.map((p) => p.bytes))
      - zygotePss - (isNumber(host) ? host : 0)) : null;
    const machineSegments = [...perWorker,
      { label: "zygotes", bytes: zygotePss, color: SHADES.zygote },
      { label: "ComfyUI", bytes: host, color: SHADES.comfyui },
      { label: "other processes", bytes: other, color: SHADES.other },
      { label: "available", bytes: machine.available, color: SHADES.available }];
    const workersTotal = sum(perWorker.map((p) => p.bytes)) + zygotePss;
    // The workers' own bar: each worker's PSS, its private part solid, its share of pages it
    // shares (libraries, a zygote's) lighter.
    const split = [];
    for (const w of workers) {
      const c = this.color(w.env);
      const priv = isNumber(w.private) && isNumber(w.pss) ? Math.min(w.private, w.pss) : w.pss;
      split.push({ label: `${w.env} private`, bytes: priv, color: c });
      split.push({ label: `${w.env} shared`, bytes: isNumber(w.pss) ? w.pss - priv : null,
        color: `${c}80` });
    }
    split.push({ label: "zygotes", bytes: zygotePss, color: SHADES.zygote });
    return el("section", { id: "isohost-ram", "data-total": machine.total ?? "",
      "data-available": machine.available ?? "" },
      el("h3", {}, `RAM (PSS) of ${ramText(machine.total)}`),
      stackedBar("isohost-ram-bar", machineSegments, machine.total),
      legend(machineSegments.filter((x) => x.bytes > 0 || x.label === "available")),
      el("div", { class: "isohost-note" }, `isolated workers and zygotes: ${ramText(workersTotal)}`),
      stackedBar("isohost-ram-workers-bar", split, workersTotal));
  }

  vramSection(s, workers) {
    const section = el("section", { id: "isohost-vram" }, el("h3", {}, "VRAM"));
    const devices = s.devices ?? [];
    if (!devices.length) {
      section.append(el("div", { class: "isohost-note", id: "isohost-gpu-note" },
        s.gpu ? `no GPU view: ${s.gpu}` : "no GPU"));
      return section;
    }
    for (const d of devices) {
      const segments = [
        { label: "workers, fixed", bytes: d.fixed, color: "#4e9af1" },
        { label: "workers, reclaimable", bytes: d.reclaimable, color: SHADES.reclaimable },
        { label: "other processes", bytes: d.foreign, color: SHADES.foreign },
        { label: "free", bytes: d.free, color: SHADES.free },
      ].map((x) => ({ ...x, text: vramText(x.bytes) }));
      section.append(el("div", { id: `isohost-device-${d.index}`, "data-index": d.index,
        "data-total": d.total ?? "", "data-used": d.used ?? "", "data-free": d.free ?? "",
        "data-workers-vram": d.workers_vram ?? "" },
        el("div", {}, `GPU ${d.index} ${d.name ?? ""}: ${vramText(d.used)} used of ${vramText(d.total)}`),
        stackedBar(`isohost-device-${d.index}-bar`, segments, d.total), legend(segments)));
    }
    const total = sum(devices.map((d) => d.total));
    const perWorker = workers.map((w) => ({ label: `${w.env} (${w.pid})`, bytes: w.vram,
      color: this.color(w.env), text: vramText(w.vram) }));
    section.append(el("div", { class: "isohost-note" }, "per worker"),
      stackedBar("isohost-vram-workers-bar", perWorker, total), legend(perWorker));
    return section;
  }

  workersSection(workers, s) {
    const section = el("section", { id: "isohost-workers" }, el("h3", {}, "Workers"));
    if (!workers.length) {
      const envs = (s.environments ?? []).map((e) => e.name).join(", ");
      section.append(el("div", { class: "isohost-note" }, s.available
        ? `none running${envs ? ` (environments: ${envs}; a worker starts at its first node)` : ""}`
        : "none"));
      return section;
    }
    const maxPss = Math.max(...workers.map((w) => (isNumber(w.rss) ? w.rss : w.pss) || 0));
    for (const w of workers) {
      const c = this.color(w.env);
      const priv = isNumber(w.private) && isNumber(w.pss) ? Math.min(w.private, w.pss) : w.pss;
      const ram = [{ label: "private", bytes: priv, color: c },
        { label: "shared (PSS share)", bytes: isNumber(w.pss) ? w.pss - priv : null, color: `${c}80` },
        { label: "RSS beyond PSS", bytes: isNumber(w.rss) && isNumber(w.pss) ? w.rss - w.pss : null,
          color: `${c}30` }];
      section.append(el("div", { class: "isohost-worker", "data-env": w.env },
        el("div", { class: "isohost-worker-head" },
          el("span", {}, el("span", { class: "isohost-swatch", style: `background:${c}` }),
            el("span", { class: "isohost-env" }, w.env), ` pid ${w.pid} · gen ${w.generation}`),
          el("span", { class: "isohost-state" }, w.state)),
        stackedBar(null, ram, maxPss),
        el("div", { class: "isohost-note" }, `PSS ${ramText(w.pss)}, private ${ramText(w.private)}, `
          + `RSS ${ramText(w.rss)}; VRAM ${vramText(w.vram)}; ${w.calls} calls, `
          + `idle ${isNumber(w.idle_seconds) ? w.idle_seconds.toFixed(1) : "-"} s`)));
    }
    // Narrow enough for the sidebar; the row's data attributes hold the rest.
    const head = el("tr", {}, ...["env", "pid", "state", "PSS", "VRAM", "calls"]
      .map((h) => el("th", {}, h)));
    const rows = workers.map((w) => el("tr", { id: `isohost-worker-${w.env}`,
      class: "isohost-worker-row", "data-env": w.env, "data-pid": w.pid,
      "data-generation": w.generation, "data-state": w.state, "data-private": w.private ?? "",
      "data-rss": w.rss ?? "", "data-idle-seconds": w.idle_seconds ?? "" },
      el("td", { "data-field": "env" }, w.env),
      figure("td", "pid", w.pid, w.pid),
      el("td", { "data-field": "state" }, w.state),
      figure("td", "pss", w.pss, ramText(w.pss)),
      figure("td", "vram", w.vram, vramText(w.vram)),
      figure("td", "calls", w.calls, w.calls)));
    section.append(el("div", { class: "isohost-table" },
      el("table", { id: "isohost-workers-table" }, el("thead", {}, head), el("tbody", {}, ...rows))));
    return section;
  }

  // The isolated workers' PSS and VRAM over the samples this panel has taken, each line on its
  // own scale (its peak is printed beside it).
  historySection() {
    if (this.history.length < 2) return null;
    const first = this.history[0].t;
    const span = Math.max(1, this.history[this.history.length - 1].t - first);
    const line = (key, color) => {
      const peak = Math.max(...this.history.map((h) => (isNumber(h[key]) ? h[key] : 0)), 1);
      const points = this.history.map((h) =>
        `${(((h.t - first) / span) * 1000).toFixed(1)},${(40 - ((h[key] ?? 0) / peak) * 38).toFixed(1)}`);
      const path = document.createElementNS(SVG_NS, "polyline");
      path.setAttribute("points", points.join(" "));
      path.setAttribute("fill", "none");
      path.setAttribute("stroke", color);
      path.setAttribute("stroke-width", "2");
      path.setAttribute("vector-effect", "non-scaling-stroke");
      path.setAttribute("data-series", key);
      path.setAttribute("data-peak", peak);
      return { path, peak };
    };
    const pss = line("pss", "#4e9af1");
    // Without a GPU view there is no VRAM to draw.
    const vram = this.history.some((h) => isNumber(h.vram)) ? line("vram", "#f1a34e") : null;
    const svg = document.createElementNS(SVG_NS, "svg");
    svg.setAttribute("id", "isohost-history-chart");
    svg.setAttribute("viewBox", "0 0 1000 40");
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("style", "width:100%;height:48px");
    const series = [{ label: "workers' PSS, peak", bytes: pss.peak, color: "#4e9af1" }];
    svg.append(pss.path);
    if (vram) {
      svg.append(vram.path);
      series.push({ label: "workers' VRAM, peak", bytes: vram.peak, color: "#f1a34e",
        text: vramText(vram.peak) });
    }
    return el("section", { id: "isohost-history", "data-points": this.history.length },
      el("h3", {}, `Last ${Math.round(span)} s`), svg, legend(series));
  }

  // First, since only ComfyUI's log said so before: a pack left out at start is a node missing
  // from the menu with no other sign.
  notLoadedSection(notLoaded) {
    if (!notLoaded.length) return null;
    return el("section", { id: "isohost-not-loaded" }, el("h3", {}, "Not loaded"),
      ...notLoaded.map((n) => el("div", { class: "isohost-not-loaded", "data-env": n.environment,
        "data-pack": n.pack ?? "" },
        el("div", {}, `${n.pack ?? "every pack"} (environment ${n.environment})`),
        el("div", { class: "isohost-note" }, n.reason))));
  }

  zygotesSection(zygotes) {
    if (!zygotes.length) return null;
    const rows = zygotes.map((z) => el("tr", { id: `isohost-zygote-${z.env}`, "data-env": z.env,
      "data-pid": z.pid, "data-state": z.state },
      el("td", {}, z.env), figure("td", "pid", z.pid, z.pid), el("td", {}, z.state),
      figure("td", "pss", z.pss, ramText(z.pss)), figure("td", "forks", z.forks, z.forks)));
    return el("section", { id: "isohost-zygotes" }, el("h3", {}, "Zygotes"),
      el("div", { class: "isohost-table" }, el("table", {},
        el("thead", {}, el("tr", {}, ...["env", "pid", "state", "PSS", "forks"]
          .map((h) => el("th", {}, h)))), el("tbody", {}, ...rows))));
  }
}

let current = null;

app.registerExtension({
  name: "isohost.panel",
  async setup() {
    if (!document.getElementById("isohost-panel-style")) {
      document.head.append(el("style", { id: "isohost-panel-style" }, STYLE));
    }
    app.extensionManager.registerSidebarTab({
      id: "isohost",
      icon: "pi pi-server",
      title: "isohost",
      tooltip: "isohost: isolated workers and their memory",
      type: "custom",
      // ComfyUI may hand the same element again when it re-renders the slot.
      render: (container) => {
        if (current && current.container === container && !current.stopped) return;
        current?.stop();
        current = new Panel(container);
      },
      destroy: () => {
        current?.stop();
        current = null;
      },
    });
  },
});

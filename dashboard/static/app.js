// The distflow dashboard: one page, no build step, no network beyond its
// own server. State arrives as snapshots over server-sent events.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const jobColor = { chief: "#6c3fd1", worker: "#1479c9", ps: "#0f9488", evaluator: "#b4531f" };
  const palette = ["#1479c9", "#e4572e", "#17a398", "#f3a712", "#6c3fd1", "#a8c256", "#d7263d", "#2e4057",
    "#ff8c42", "#0f9488", "#c84c9e", "#7d8597"];
  const hist = { t: [], loss: [], acc: [], eps: [], step: {} }; // step: name -> values
  let stepNames = [];
  const charts = {};
  let graphNodes = -1, traceMTime = -1, lastSeq = -1;

  const fmt = {
    num(v, d) { return v == null || isNaN(v) ? "–" : v.toFixed(d); },
    int(v) { return v == null || v < 0 ? "–" : Math.round(v).toLocaleString("en-US"); },
    bytes(v) {
      if (!v) return "–";
      const u = ["B", "KiB", "MiB", "GiB"]; let i = 0;
      while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
      return v.toFixed(v < 10 && i > 0 ? 1 : 0) + " " + u[i];
    },
    dur(s) {
      if (s == null) return "–";
      if (s < 60) return s.toFixed(0) + " s";
      const m = Math.floor(s / 60); if (m < 60) return m + " m " + Math.floor(s % 60) + " s";
      return Math.floor(m / 60) + " h " + (m % 60) + " m";
    },
    // mem shows zero as "0 B" (an idle device), and always one decimal.
    mem(v) {
      if (v == null || v < 0) return "–";
      const u = ["B", "KiB", "MiB", "GiB", "TiB"]; let i = 0;
      while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
      return (i ? v.toFixed(1) : String(v)) + " " + u[i];
    },
    age(s) { return s < 10 ? s.toFixed(1) + " s" : fmt.dur(s); },
    ms(s) { return s == null || s <= 0 ? "–" : s < 1 ? (s * 1000).toFixed(1) + " ms" : s.toFixed(2) + " s"; },
    time(t) { const d = new Date(t * 1000); return d.toTimeString().slice(0, 8); },
  };
  const esc = (s) => String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));

  // ---- charts ----
  function chartSize(el) { return { width: Math.max(300, el.clientWidth), height: 200 }; }
  function makeChart(id, series, data) {
    const el = $(id);
    el.innerHTML = "";
    const opts = Object.assign(chartSize(el), {
      legend: { show: series.length > 1 && series.length <= 9 },
      cursor: { drag: { x: true, y: false } },
      scales: { x: { time: true } },
      axes: [{ stroke: "#6b7385", grid: { stroke: "#eef1f6" } }, { stroke: "#6b7385", grid: { stroke: "#eef1f6" }, size: 56 }],
      series: [{}].concat(series),
    });
    return new uPlot(opts, data, el);
  }
  function line(label, color) { return { label: label, stroke: color, width: 2, spanGaps: true, points: { show: false } }; }
  function initCharts() {
    charts.loss = makeChart("chart-loss", [line("loss", "#e4572e")], [hist.t, hist.loss]);
    charts.acc = makeChart("chart-accuracy", [line("accuracy", "#17a398")], [hist.t, hist.acc]);
    charts.eps = makeChart("chart-eps", [line("examples/s", "#1479c9")], [hist.t, hist.eps]);
    buildStepChart();
  }
  function buildStepChart() {
    const series = stepNames.map((n, i) => line(n.replace("/job:", "").replace("/task:", " "), palette[i % palette.length]));
    charts.step = makeChart("chart-step", series, [hist.t].concat(stepNames.map((n) => hist.step[n])));
  }
  function pushPoint(p) {
    if (!p) return;
    const n = hist.t.length;
    if (n && hist.t[n - 1] >= p.t) return;
    hist.t.push(p.t);
    hist.loss.push(p.loss == null ? null : p.loss);
    hist.acc.push(p.accuracy == null ? null : p.accuracy);
    hist.eps.push(p.examples_per_second);
    let added = false;
    for (const name in p.step_seconds || {}) {
      if (!hist.step[name]) { hist.step[name] = new Array(n).fill(null); stepNames.push(name); added = true; }
    }
    for (const name of stepNames) { const v = (p.step_seconds || {})[name]; hist.step[name].push(v == null ? null : v); }
    const max = 900;
    if (hist.t.length > max) {
      const cut = hist.t.length - max;
      for (const a of [hist.t, hist.loss, hist.acc, hist.eps]) a.splice(0, cut);
      for (const name of stepNames) hist.step[name].splice(0, cut);
    }
    return added;
  }
  function redrawCharts(rebuildStep) {
    if (!charts.loss) return;
    charts.loss.setData([hist.t, hist.loss]);
    charts.acc.setData([hist.t, hist.acc]);
    charts.eps.setData([hist.t, hist.eps]);
    if (rebuildStep) buildStepChart();
    else charts.step.setData([hist.t].concat(stepNames.map((n) => hist.step[n])));
  }
  window.addEventListener("resize", () => {
    for (const k in charts) { const el = charts[k].root.parentNode; charts[k].setSize(chartSize(el)); }
  });

  // ---- cluster ----
  // A task's devices: "CPU" without accelerators, unknown until its
  // metrics have been read.
  function devText(d) {
    return d.name + " (" + d.platform + ", card " + d.card + ", logical GPU " + d.logical_gpu + ") " + fmt.mem(d.in_use_bytes) + " in use, peak " + fmt.mem(d.peak_bytes) +
      (d.limit_bytes > 0 ? " of " + fmt.mem(d.limit_bytes) : "");
  }
  function devsKnown(t) { return (t.devices && t.devices.length) || t.metrics_url; }
  function devsTitle(t) { return t.devices && t.devices.length ? t.devices.map(devText).join("\n") : "CPU"; }
  function devsFull(t) {
    if (!devsKnown(t)) return "";
    if (!t.devices || !t.devices.length) return "<div class=devs><div>CPU</div></div>";
    return "<div class=devs>" + t.devices.map((d) => "<div><b>" + esc(d.name) + "</b> " + esc(devText(d).slice(d.name.length + 1)) + "</div>").join("") + "</div>";
  }
  function devsCompact(t) {
    if (!devsKnown(t)) return "";
    // One short line on a small card: "GPU:0 12.3 MiB", or "2× GPU 20.1 MiB"
    // in use together; each device in full on hover.
    const ds = t.devices || [];
    const short = !ds.length ? "CPU" : ds.length === 1 ? ds[0].name + " " + fmt.mem(ds[0].in_use_bytes) :
      ds.length + "× " + ds[0].name.replace(/:\d+$/, "") + " " + fmt.mem(ds.reduce((a, d) => a + d.in_use_bytes, 0));
    return '<div class=devs title="' + esc(devsTitle(t)) + '">' + esc(short) + "</div>";
  }
  function renderCluster(tasks) {
    const byJob = new Map();
    for (const t of tasks) { if (!byJob.has(t.job)) byJob.set(t.job, []); byJob.get(t.job).push(t); }
    const maxStep = Math.max(1, ...tasks.map((t) => t.global_step));
    const trainingJob = (j) => j === "worker" || j === "chief";
    const compact = tasks.length > 24; // many tasks: small cards, details in the tooltip
    let html = "";
    for (const [job, list] of byJob) {
      html += '<div class="job"><div class="job-name ' + esc(job) + '">' + esc(job) + " <span class=muted>" + list.length + "</span></div><div class=tasks>";
      for (const t of list) {
        const training = job === "worker" || job === "chief";
        if (compact) {
          html += '<div class="task compact ' + esc(t.state) + '" data-task="' + esc(t.name) + '" data-state="' + esc(t.state) + '" title="' +
            esc(t.name + " · " + t.address + " · " + t.state + (t.error ? " · " + t.error : "") + (devsKnown(t) ? "\n" + devsTitle(t) : "")) + '">' +
            '<div class=top><span class=name>' + esc(job) + " " + t.index + '</span><span class="dot ' + esc(t.state) + '"></span></div>' +
            '<div class=nums><span>step <b class=step>' + fmt.int(t.global_step) + "</b></span><span>" +
            (training ? "<b>" + fmt.num(t.step_rate, 1) + "</b>/s" : "<b>" + fmt.bytes(t.variable_bytes) + "</b>") + "</span>" +
            "<span>cpu <b>" + fmt.num(t.cpu * 100, 0) + "%</b></span><span>♥ <b class=hb>" + fmt.age(t.heartbeat_age) + "</b></span></div>" +
            devsCompact(t) +
            (t.global_step >= 0 ? '<div class=bar><div style="width:' + (100 * t.global_step / maxStep).toFixed(1) + '%;background:' + (jobColor[job] || "#888") + '"></div></div>' : "") +
            "</div>";
          continue;
        }
        html += '<div class="task ' + esc(t.state) + '" data-task="' + esc(t.name) + '" data-state="' + esc(t.state) + '">' +
          '<div class=top><span class=name>' + esc(job) + " " + t.index + '</span><span class="badge ' + esc(t.state) + '">' + esc(t.state) + "</span></div>" +
          '<div class=addr>' + esc(t.address) + "</div>" +
          '<div class=nums>' +
          (training ? "<span>step <b class=step>" + fmt.int(t.global_step) + "</b></span>" : "<span>" + esc(t.variables) + " vars</span>") +
          "<span>" + (training ? "<b>" + fmt.num(t.step_rate, 1) + "</b> steps/s" : "<b>" + fmt.bytes(t.variable_bytes) + "</b>") + "</span>" +
          "<span>cpu <b>" + fmt.num(t.cpu * 100, 0) + "%</b></span>" +
          "<span>mem <b>" + fmt.bytes(t.memory_bytes) + "</b></span>" +
          "<span>♥ <b class=hb>" + fmt.age(t.heartbeat_age) + "</b></span>" +
          "<span>" + (training ? "step <b>" + fmt.ms(t.step_seconds) + "</b>" : "") + "</span>" +
          "</div>" +
          devsFull(t) +
          (t.global_step >= 0 && trainingJob(job) ? '<div class=bar><div style="width:' + (100 * t.global_step / maxStep).toFixed(1) + '%;background:' + (jobColor[job] || "#888") + '"></div></div>' : "") +
          (t.error && t.state !== "done" ? '<div class=err title="' + esc(t.error) + '">' + esc(t.error) + "</div>" : "") +
          (t.metrics_url ? '<a href="' + esc(t.metrics_url) + '" target=_blank>metrics</a>' : "") +
          (t.restarts ? ' <span class=muted>restarted ' + t.restarts + "×</span>" : "") +
          "</div>";
      }
      html += "</div></div>";
    }
    $("cluster").innerHTML = html || '<p class="muted">waiting for the cluster…</p>';
  }

  // ---- events ----
  function renderEvents(events) {
    // Many tasks starting together make one line, not one each.
    const folded = [];
    for (const e of events) {
      const last = folded[folded.length - 1];
      if (e.kind === "started" && last && last.kind === "started" && Math.floor(last.t) === Math.floor(e.t)) {
        last.n = (last.n || 1) + 1;
        last.task = "";
        last.message = last.n + " tasks answer";
        continue;
      }
      folded.push(Object.assign({}, e));
    }
    const list = folded.reverse().slice(0, 200);
    $("events").innerHTML = list.map((e) =>
      "<li><time>" + fmt.time(e.t) + '</time><span class="kind ' + esc(e.kind) + '">' + esc(e.kind) + "</span><span>" +
      (e.task ? "<b>" + esc(e.task.replace("/job:", "").replace("/task:", " ")) + "</b> " : "") + esc(e.message) + "</span></li>").join("") ||
      '<li class="muted">nothing yet</li>';
  }
  let allEvents = [];
  function mergeEvents(evs) {
    const last = allEvents.length ? allEvents[allEvents.length - 1].seq : 0;
    for (const e of evs || []) if (e.seq > last) allEvents.push(e);
    if (allEvents.length > 500) allEvents.splice(0, allEvents.length - 500);
  }

  // ---- snapshot ----
  function apply(s) {
    if (s.seq === lastSeq) return;
    lastSeq = s.seq;
    $("title").textContent = s.title;
    document.title = s.title + " · distflow";
    const p = s.point || (s.history && s.history[s.history.length - 1]);
    if (p) {
      $("global-step").textContent = fmt.int(p.step);
      $("loss").textContent = fmt.num(p.loss, 4);
      $("accuracy").textContent = p.accuracy == null ? "–" : (100 * p.accuracy).toFixed(2) + "%";
      $("eps").textContent = fmt.int(p.examples_per_second);
    }
    const up = s.tasks.filter((t) => t.state === "running" || t.state === "straggler").length;
    const lost = s.tasks.filter((t) => t.state === "lost").length;
    $("task-count").innerHTML = up + "/" + s.tasks.length + (lost ? ' <span style="color:#ff6b7a">' + lost + " lost</span>" : "");
    $("uptime").textContent = fmt.dur(s.uptime) + (s.finished ? " ✓" : "");
    renderCluster(s.tasks);
    mergeEvents(s.events);
    renderEvents(allEvents);
    if (s.graph_nodes !== graphNodes && s.graph_nodes > 0) { graphNodes = s.graph_nodes; loadGraph(); }
    if (s.trace && s.trace.mtime !== traceMTime) { traceMTime = s.trace.mtime; loadTrace(s.trace); }
  }

  function connect() {
    const es = new EventSource("/api/events");
    es.addEventListener("open", () => { $("conn").textContent = "live"; $("conn").className = "conn live"; });
    es.addEventListener("error", () => { $("conn").textContent = "reconnecting…"; $("conn").className = "conn off"; });
    es.addEventListener("snapshot", (ev) => {
      const s = JSON.parse(ev.data);
      const rebuild = pushPoint(s.point);
      redrawCharts(rebuild);
      apply(s);
    });
  }

  // ---- graph ----
  function loadGraph() {
    fetch("/api/graph").then((r) => r.ok ? r.json() : null).then((g) => { if (g) renderGraph(g); }).catch(() => {});
  }
  // A node's group: its top name scope; a node outside any scope ("Cast_5",
  // "IsVariableInitialized_3") joins the others of its base name.
  function scopeOf(name) {
    const i = name.indexOf("/");
    return i < 0 ? name.replace(/_\d+$/, "") : name.slice(0, i);
  }
  let graphData = null, graphColors = new Map();
  function findNodes() {
    const q = $("graph-search").value.trim().toLowerCase();
    if (!graphData || !q) { $("graph-find").innerHTML = ""; return; }
    const hits = graphData.nodes.filter((n) => n.name.toLowerCase().includes(q) || n.op.toLowerCase() === q);
    $("graph-find").innerHTML = hits.slice(0, 100).map((n) => '<div><i style="background:' + (graphColors.get(n.task) || "#888") + '"></i>' +
      esc(n.name) + ' <span class=muted>(' + esc(n.op) + ") on</span> " + esc(n.task) + "</div>").join("") +
      (hits.length > 100 ? '<div class=muted>… ' + (hits.length - 100) + " more</div>" : "") + (hits.length ? "" : '<div class=muted>no such node</div>');
  }
  $("graph-search").addEventListener("input", findNodes);
  function renderGraph(g) {
    const groups = new Map(); const nodeGroup = new Map();
    const taskColor = new Map(); let ci = 0;
    graphData = g; graphColors = taskColor;
    for (const n of g.nodes) {
      if (!taskColor.has(n.task)) taskColor.set(n.task, palette[ci++ % palette.length]);
      const key = n.task + "|" + scopeOf(n.name);
      if (!groups.has(key)) groups.set(key, { key: key, task: n.task, scope: scopeOf(n.name), n: 0, ops: {}, ins: new Set(), depth: 0 });
      const gr = groups.get(key); gr.n++; gr.ops[n.op] = (gr.ops[n.op] || 0) + 1;
      nodeGroup.set(n.name, gr);
    }
    for (const n of g.nodes) {
      const to = nodeGroup.get(n.name);
      for (const i of n.inputs || []) { const from = nodeGroup.get(i); if (from && from !== to) to.ins.add(from); }
    }
    const list = Array.from(groups.values());
    for (let it = 0; it < list.length; it++) { // longest path, bounded (scopes may form cycles)
      let changed = false;
      for (const gr of list) for (const f of gr.ins) if (f.depth + 1 > gr.depth && f.depth + 1 < list.length) { gr.depth = f.depth + 1; changed = true; }
      if (!changed) break;
    }
    const cols = new Map();
    for (const gr of list) { if (!cols.has(gr.depth)) cols.set(gr.depth, []); cols.get(gr.depth).push(gr); }
    const W = 170, H = 38, GX = 60, GY = 12;
    let maxRows = 0;
    for (const [d, c] of cols) {
      c.sort((a, b) => a.task < b.task ? -1 : a.task > b.task ? 1 : a.scope < b.scope ? -1 : 1);
      c.forEach((gr, i) => { gr.x = 10 + d * (W + GX); gr.y = 10 + i * (H + GY); });
      maxRows = Math.max(maxRows, c.length);
    }
    const width = 20 + cols.size * (W + GX), height = 20 + maxRows * (H + GY);
    let svg = '<svg xmlns="http://www.w3.org/2000/svg" width="' + width + '" height="' + height + '">' +
      '<defs><marker id="arr" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#9aa3b5"/></marker>' +
      '<marker id="arrx" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="6" markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#d7263d"/></marker></defs>';
    let crossing = 0;
    for (const gr of list) for (const f of gr.ins) {
      const x1 = f.x + W, y1 = f.y + H / 2, x2 = gr.x, y2 = gr.y + H / 2;
      const cross = f.task !== gr.task; if (cross) crossing++;
      const mx = (x1 + x2) / 2;
      svg += '<path d="M' + x1 + "," + y1 + " C" + mx + "," + y1 + " " + mx + "," + y2 + " " + x2 + "," + y2 + '" fill="none" stroke="' +
        (cross ? "#d7263d" : "#c3c9d6") + '" stroke-width="' + (cross ? 1.6 : 1) + '"' + (cross ? ' stroke-dasharray="4 3" marker-end="url(#arrx)"' : ' marker-end="url(#arr)"') + "/>";
    }
    for (const gr of list) {
      const c = taskColor.get(gr.task);
      const top = Object.entries(gr.ops).sort((a, b) => b[1] - a[1]).slice(0, 3).map((e) => e[0] + (e[1] > 1 ? "×" + e[1] : "")).join(", ");
      svg += '<g><title>' + esc(gr.scope + " on " + gr.task + ": " + gr.n + " nodes (" + Object.entries(gr.ops).map((e) => e[0] + " " + e[1]).join(", ") + ")") + "</title>" +
        '<rect x="' + gr.x + '" y="' + gr.y + '" width="' + W + '" height="' + H + '" rx="5" fill="' + c + '22" stroke="' + c + '"/>' +
        '<text x="' + (gr.x + 6) + '" y="' + (gr.y + 15) + '" font-weight="600">' + esc(trim(gr.scope, 20)) + ' <tspan fill="#6b7385" font-weight="400">(' + gr.n + ")</tspan></text>" +
        '<text x="' + (gr.x + 6) + '" y="' + (gr.y + 30) + '" fill="#6b7385">' + esc(trim(top, 26)) + "</text></g>";
    }
    svg += "</svg>";
    const counts = new Map();
    for (const n of g.nodes) counts.set(n.task, (counts.get(n.task) || 0) + 1);
    let legend = '<div class="placement">';
    for (const [t, c] of taskColor) legend += '<div><i style="background:' + c + '"></i>' + esc(t) + ": <b>" + counts.get(t) + "</b> nodes</div>";
    legend += '<div><i style="background:#d7263d"></i>' + crossing + " edges cross tasks (Send/Recv)</div></div>";
    $("graph").innerHTML = svg + legend;
    $("graph-info").textContent = g.nodes.length + " nodes in " + list.length + " scopes on " + taskColor.size + " tasks";
    findNodes();
  }
  function trim(s, n) { return s.length > n ? s.slice(0, n - 1) + "…" : s; }

  // ---- trace ----
  function loadTrace(info) {
    $("trace-info").innerHTML = esc(info.name) + " · " + fmt.bytes(info.bytes) + ' · <a href="' + esc(info.url) + '" download>download</a> (open in Perfetto or chrome://tracing)';
    fetch(info.url).then((r) => r.ok ? r.json() : null).then((t) => { if (t) renderTrace(t); }).catch(() => {});
  }
  function renderTrace(t) {
    const evs = Array.isArray(t) ? t : (t.traceEvents || []);
    const pname = {}, tname = {}, rows = new Map(), open = {};
    const spans = [];
    for (const e of evs) {
      if (e.ph === "M" && e.name === "process_name") pname[e.pid] = e.args && e.args.name;
      else if (e.ph === "M" && e.name === "thread_name") tname[e.pid + ":" + e.tid] = e.args && e.args.name;
      else if (e.ph === "X") spans.push({ pid: e.pid, tid: e.tid, ts: +e.ts, dur: +(e.dur || 0), name: e.name, cat: e.cat });
      else if (e.ph === "B") (open[e.pid + ":" + e.tid] = open[e.pid + ":" + e.tid] || []).push(e);
      else if (e.ph === "E") { const b = (open[e.pid + ":" + e.tid] || []).pop(); if (b) spans.push({ pid: b.pid, tid: b.tid, ts: +b.ts, dur: e.ts - b.ts, name: b.name, cat: b.cat }); }
    }
    if (!spans.length) { $("trace").innerHTML = '<p class="muted">the trace has no spans</p>'; return; }
    let t0 = Infinity, t1 = -Infinity;
    for (const s of spans) { const k = s.pid + ":" + s.tid; if (!rows.has(k)) rows.set(k, rows.size); t0 = Math.min(t0, s.ts); t1 = Math.max(t1, s.ts + s.dur); }
    const keys = Array.from(rows.keys()).sort((a, b) => { const [pa, ta] = a.split(":").map(Number), [pb, tb] = b.split(":").map(Number); return pa - pb || ta - tb; });
    keys.forEach((k, i) => rows.set(k, i));
    const RH = 16, LW = 190, width = Math.max(600, $("trace").clientWidth), height = Math.min(40 + keys.length * RH, 2000);
    const cv = document.createElement("canvas"); const dpr = window.devicePixelRatio || 1;
    cv.width = width * dpr; cv.height = height * dpr; cv.style.height = height + "px";
    const c = cv.getContext("2d"); c.scale(dpr, dpr);
    c.font = "11px system-ui, sans-serif"; c.fillStyle = "#fff"; c.fillRect(0, 0, width, height);
    const sx = (width - LW - 10) / Math.max(1, t1 - t0);
    keys.forEach((k, i) => {
      const [pid, tid] = k.split(":");
      c.fillStyle = i % 2 ? "#f7f8fb" : "#fff"; c.fillRect(0, 20 + i * RH, width, RH);
      c.fillStyle = "#1d2330"; c.fillText(trim((pname[pid] || "pid " + pid) + " · " + (tname[k] || "tid " + tid), 30), 4, 20 + i * RH + 12);
    });
    const colorOf = {}; let ci = 0;
    for (const s of spans) {
      const y = 20 + rows.get(s.pid + ":" + s.tid) * RH + 2; if (y > height) continue;
      const key = s.cat || s.name; if (!colorOf[key]) colorOf[key] = palette[ci++ % palette.length];
      const x = LW + (s.ts - t0) * sx, w = Math.max(1, s.dur * sx);
      c.fillStyle = colorOf[key]; c.fillRect(x, y, w, RH - 4);
      if (w > 40) { c.fillStyle = "#fff"; c.fillText(trim(s.name, Math.floor(w / 6)), x + 2, y + 10); }
    }
    c.fillStyle = "#6b7385"; c.fillText("0", LW, 12); const total = (t1 - t0) / 1000;
    c.fillText(total.toFixed(2) + " ms", width - 70, 12);
    $("trace").innerHTML = ""; $("trace").appendChild(cv);
  }

  // ---- start ----
  fetch("/api/history").then((r) => r.json()).then((s) => {
    for (const p of s.history || []) pushPoint(p);
    initCharts();
    apply(s);
  }).catch(() => initCharts()).finally(connect);
})();

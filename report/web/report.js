// The behaviour of report.html (embedded at build time, runs offline). It reads the report's
// JSON from the page and builds every view from it. Strings from the traced program (kernel
// names, paths, the command line) are only ever set as textContent, never parsed as HTML.
(function () {
  "use strict";
  const R = JSON.parse(document.getElementById("vt-data").textContent);
  const $ = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  const bytes = (b) => {
    if (b == null) return "–";
    let v = Number(b), u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    return u === 0 ? `${v} B` : `${v.toFixed(2)} ${units[u]}`;
  };
  // Times adapt to their size: 850 µs, 12.5 ms, 3.250 s.
  const secs = (ns) => {
    if (ns == null) return "–";
    const s = ns / 1e9;
    if (Math.abs(s) >= 1) return `${s.toFixed(3)} s`;
    if (Math.abs(s) >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
    return `${(s * 1e6).toFixed(1)} µs`;
  };
  // A stack as a list of frames, innermost first; every string goes in as textContent.
  const frameText = (f) => {
    const where = f.file ? ` (${f.file}:${f.line})` : "";
    if (f.function) return f.function + where + (f.python ? "  [python]" : "");
    const mod = (f.module || "??").split("/").pop();
    return `${mod}+${f.offset || "0x0"}`;
  };
  const stackView = (a) => {
    const d = $("details", { class: "stack" });
    d.append($("summary", { text: `${bytes(a.bytes)}${a.count ? ` in ${a.count}` : ""} — ${a.site || "?"}${a.library ? "  [" + a.library + "]" : ""}` }));
    const ol = $("ol", { class: "frames" });
    for (const f of a.stack || []) ol.append($("li", { class: f.python ? "code py" : "code", text: frameText(f) }));
    d.append(ol);
    return d;
  };
  const stat = (label, value, cls, id) =>
    $("div", { class: "stat " + (cls || ""), ...(id ? { "data-stat": id } : {}) },
      $("div", { class: "label", text: label }), $("div", { class: "value", text: value }));

  // ---- theme and keyboard -------------------------------------------------------------------
  const root = document.documentElement;
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  root.dataset.theme = dark ? "dark" : "light";
  const toggle = () => { root.dataset.theme = root.dataset.theme === "dark" ? "light" : "dark"; };
  document.getElementById("theme").addEventListener("click", toggle);
  const charts = [];
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT") return;
    if (ev.key === "t") toggle();
    for (const c of charts) {
      const { min, max } = c.scales.x;
      if (min == null) continue;
      const w = max - min;
      if (ev.key === "ArrowLeft") c.setScale("x", { min: min - w / 4, max: max - w / 4 });
      if (ev.key === "ArrowRight") c.setScale("x", { min: min + w / 4, max: max + w / 4 });
      if (ev.key === "+" || ev.key === "=") c.setScale("x", { min: min + w / 4, max: max - w / 4 });
      if (ev.key === "-") c.setScale("x", { min: min - w / 2, max: max + w / 2 });
      if (ev.key === "0") c.setScale("x", { min: c.data[0][0], max: c.data[0][c.data[0].length - 1] });
    }
  });

  // ---- sortable tables ----------------------------------------------------------------------
  function table(columns, rows, id) {
    const t = $("table", id ? { "data-table": id } : {});
    const head = $("tr");
    const body = $("tbody");
    const render = () => {
      body.replaceChildren(...rows.map((r) => $("tr", {}, ...columns.map((c) =>
        $("td", { class: c.num ? "num" : (c.code ? "code" : ""), text: c.fmt ? c.fmt(r[c.key], r) : String(r[c.key] ?? "") })))));
    };
    columns.forEach((c, i) => {
      const th = $("th", { tabindex: "0", scope: "col", text: c.label });
      const sort = () => {
        const dir = th.getAttribute("aria-sort") === "descending" ? 1 : -1;
        head.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        rows.sort((a, b) => {
          const x = a[c.key], y = b[c.key];
          return (typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y))) * dir;
        });
        render();
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); } });
      head.append(th);
      void i;
    });
    t.append($("thead", {}, head), body);
    render();
    return t;
  }

  // ---- icicle graph ---------------------------------------------------------------------------
  // The live set at the peak as a tree: by owning library, then site, when the report has
  // libraries; by memory kind and site otherwise. Widths are bytes; every label is textContent.
  function peakTree(peak) {
    const rootNode = { name: "live at peak", value: 0, children: new Map() };
    const add = (path, value) => {
      let n = rootNode;
      n.value += value;
      for (const name of path) {
        if (!n.children.has(name)) n.children.set(name, { name, value: 0, children: new Map() });
        n = n.children.get(name);
        n.value += value;
      }
    };
    const groups = peak.by_stack || peak.by_site || [];
    for (const g of groups) {
      const frames = (g.stack || []).filter((f) => !f.internal).map((f) => f.function || f.module || "?").reverse();
      const path = frames.length ? frames : (g.library ? [g.library, g.site] : [g.site]);
      add(path, g.bytes);
    }
    return rootNode;
  }
  function icicle(tree, total) {
    const box = $("div", { class: "icicle", role: "img", "aria-label": "icicle graph of the live set at the peak" });
    const palette = ["#93c5fd", "#a5b4fc", "#c4b5fd", "#f9a8d4", "#fcd34d", "#86efac", "#67e8f9"];
    const row = (nodes, depth) => {
      if (!nodes.length || depth > 12) return;
      const r = $("div", { class: "icicle-row" });
      const next = [];
      let offset = 0;
      for (const { node, left } of nodes) {
        if (left > offset) r.append($("div", { class: "icicle-gap", style: `width:${(100 * (left - offset) / total).toFixed(4)}%` }));
        const cell = $("div", { class: "icicle-cell", title: `${node.name}: ${bytes(node.value)}`,
          style: `width:${(100 * node.value / total).toFixed(4)}%;background:${palette[depth % palette.length]}` });
        cell.append($("span", { text: `${node.name} ${bytes(node.value)}` }));
        r.append(cell);
        let childLeft = left;
        for (const c of [...node.children.values()].sort((a, b) => b.value - a.value)) {
          next.push({ node: c, left: childLeft });
          childLeft += c.value;
        }
        offset = left + node.value;
      }
      box.append(r);
      row(next, depth + 1);
    };
    if (total > 0) row([{ node: tree, left: 0 }], 0);
    return box;
  }

  // ---- the page -----------------------------------------------------------------------------
  const run = R.run || {};
  document.getElementById("cmd").textContent = (run.command || []).join(" ");
  const main = document.getElementById("main");
  if (run.stand_in) main.append($("div", { class: "banner warn", id: "standin", text: "Recorded on the CPU stand-in for CUDA (tests and demo), not on a real GPU." }));
  if (run.complete === false) main.append($("div", { class: "banner bad", text: "The run was cut short: a process ended without flushing (crash, kill or _exit). Everything that left it is shown." }));
  for (const p of run.problems || []) main.append($("div", { class: "banner bad", text: p }));
  if (run.dropped_events) main.append($("div", { class: "banner bad", text: `${run.dropped_events} events were dropped (buffer full).` }));
  const unprofiled = (R.processes || []).filter((p) => p.profiled === false);
  for (const p of unprofiled) main.append($("div", { class: "banner bad", text: `Process ${p.pid} (${(p.exe || "").split("/").pop()}) was not profiled: ${p.not_profiled_reason}. The device memory it used is unknown and not in this report.` }));
  if (!(R.devices || []).length && !unprofiled.length) main.append($("div", { class: "banner", text: "No CUDA device memory was used by this run." }));
  // Launches off (--launches=off): launch counts, the kernel at the peak and the launch rhythm
  // are unknown, not zero.
  const noLaunches = (R.processes || []).filter((p) => p.launches && p.launches.recorded === false);
  if (noLaunches.length) {
    const who = noLaunches.length < (R.processes || []).length ? ` in process${noLaunches.length > 1 ? "es" : ""} ${noLaunches.map((p) => p.pid).join(", ")}` : "";
    main.append($("div", { class: "banner", id: "launches-off", text: `Kernel launches were not recorded${who} (--launches=off): no launch counts, no kernel at the peak, no iterations found by the launch rhythm.` }));
  }
  const launchesOff = (p) => !!(p && p.launches && p.launches.recorded === false);

  const procDevice = (host, index) => {
    for (const p of R.processes || []) if (p.host === host) for (const d of p.devices || []) if (d.index === index) return [p, d];
    return [null, null];
  };

  for (const d of R.devices || []) {
    const [proc, pd] = procDevice(d.host, d.index);
    const card = $("section", { class: "card", "data-device": String(d.index) });
    card.append($("h2", { text: `Device ${d.index}: ${d.name}${d.host ? " on " + d.host : ""}` }));
    const frac = d.total_bytes ? d.peak.bytes / d.total_bytes : 0;
    const allOoms = (R.oom || []).filter((o) => o.device === d.index);
    const ooms = allOoms.filter((o) => !o.recovered);
    const recovered = allOoms.filter((o) => o.recovered);
    const growth = (R.growth || []).filter((g) => g.device === d.index);
    const alloc = pd && pd.allocator;
    const leaks = (R.leaks || []).filter((l) => l.device === d.index);
    const leakBytes = leaks.reduce((s, l) => s + l.bytes, 0);
    const reserved = pd && pd.reserved ? pd.reserved.peak_bytes : d.peak.bytes;
    const head = $("div", { class: "headline" },
      stat("Peak in use", bytes(d.peak.bytes), "", "peak"),
      stat("Peak at", secs(d.peak.time_ns), "", "peak-time"),
      stat("Capacity", bytes(d.total_bytes), "", "capacity"),
      stat("Headroom at peak", d.total_bytes ? `${bytes(d.total_bytes - d.peak.bytes)} (${(100 * (1 - frac)).toFixed(1)}%)` : "–", frac > 0.8 ? "warn" : "ok", "headroom"),
      stat("Out of memory", ooms.length ? `${ooms.length}× (${bytes(ooms[0].requested_bytes)} asked)` : "no", ooms.length ? "bad" : "ok", "oom"),
      stat("Leak suspects", leaks.length ? `${leaks.reduce((s, l) => s + l.count, 0)} (${bytes(leakBytes)})` : "none", leaks.length ? "warn" : "ok", "leaks"),
      stat("Reserved, not in use, at peak", bytes(Math.max(0, reserved - d.peak.bytes)), "", "slack"));
    if (growth.length)
      head.append(stat("Grows per iteration", bytes(growth.reduce((s, g) => s + g.bytes_per_iteration, 0)), "warn", "growth"));
    if (alloc && alloc.at_peak)
      head.append(stat("Allocator free at peak", `${bytes(alloc.at_peak.free_bytes)} in ${alloc.at_peak.free_blocks} blocks`, alloc.at_peak.external_fragmentation > 0.5 ? "warn" : "", "alloc-free"));
    if (d.peak.phase) head.append(stat("Phase at peak", d.peak.phase, "", "phase"));
    card.append(head);
    if (recovered.length)
      card.append($("div", { class: "muted", "data-recovered": String(recovered.length), text: `${recovered.length} failed driver allocation(s) were retried after the allocator freed its cache, and then worked: not out-of-memory errors of the program.` }));
    if (frac > 0.8) card.append($("div", { class: "banner warn", text: `The peak used ${(100 * frac).toFixed(1)}% of the device: above 80% of capacity.` }));

    // Timeline.
    card.append($("h3", { text: "Live device memory over time" }));
    const chartBox = $("div", { class: "chart", "data-chart": String(d.index) });
    card.append(chartBox, $("div", { class: "chart-help", text: "Drag to zoom, double-click to reset; keys: ← → pan, + − zoom, 0 reset, t theme. Markers: peak (P), out of memory (OOM), end." }));
    main.append(card);
    // In use (max per bucket), the footprint where pools reserve more, and launches per bucket:
    // three series of different bucketing, aligned on one time axis with uPlot.join.
    const series2 = (tl, col) => {
      const pts = (tl && tl.points) || [];
      return [pts.map((p) => p[0] / 1e9), pts.map((p) => p[col])];
    };
    const sets = [series2(d.timeline, 1)];
    const labels = [{ label: "in use (max per bucket)", stroke: "#2563eb", fill: "rgba(37,99,235,0.12)", width: 1.5, value: (u, v) => bytes(v), spanGaps: true }];
    const reservedTl = pd && pd.reserved && pd.reserved.timeline;
    if (reservedTl) {
      sets.push(series2(reservedTl, 1));
      labels.push({ label: "reserved (pools)", stroke: "#9333ea", width: 1.5, dash: [6, 3], value: (u, v) => bytes(v), spanGaps: true });
    }
    if (alloc && alloc.free_timeline && alloc.free_timeline.points.length) {
      sets.push(series2(alloc.free_timeline, 1));
      labels.push({ label: "reserved by the allocator but free", stroke: "#059669", width: 1.5, dash: [2, 2], value: (u, v) => v == null ? "–" : bytes(v), spanGaps: true });
    }
    const launchTl = pd && pd.launches && pd.launches.timeline;
    if (launchTl && launchTl.points.length) {
      const lp = launchTl.points;
      sets.push([lp.map((p) => p[0] / 1e9), lp.map((p, i) => p[2] - (i ? lp[i - 1][2] : 0))]);
      labels.push({ label: "kernel launches per bucket", stroke: "rgba(107,114,128,0.7)", width: 1, scale: "launches", paths: typeof uPlot.paths?.bars === "function" ? uPlot.paths.bars({ size: [0.9, 6] }) : undefined, fill: "rgba(107,114,128,0.25)", value: (u, v) => v == null ? "–" : String(v) });
    }
    const hasData = sets[0][0].length > 0;
    if (hasData && typeof uPlot !== "undefined") {
      const data = sets.length > 1 && uPlot.join ? uPlot.join(sets) : sets[0];
      const marks = [{ x: d.peak.time_ns / 1e9, label: "P" }, ...ooms.map((o) => ({ x: o.time_ns / 1e9, label: "OOM" })), { x: (run.duration_ns || 0) / 1e9, label: "end" }];
      const css = getComputedStyle(root);
      const axes = [{ label: "time since start", space: 90, values: (u, v) => v.map((x) => secs(x * 1e9)), stroke: css.getPropertyValue("--muted") },
                    { values: (u, v) => v.map(bytes), size: 90, space: 40, stroke: css.getPropertyValue("--muted") }];
      if (launchTl) axes.push({ scale: "launches", side: 1, grid: { show: false }, size: 50, stroke: css.getPropertyValue("--muted") });
      const opts = {
        width: Math.max(320, chartBox.clientWidth || 900), height: 320,
        scales: { x: { time: false }, launches: { range: (u, mn, mx) => [0, Math.max(1, mx) * 4] } },
        axes,
        series: [{ label: "time" }, ...labels],
        hooks: { draw: [(u) => {
          const ctx = u.ctx;
          ctx.save();
          for (const m of marks) {
            const x = Math.round(u.valToPos(m.x, "x", true));
            if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
            ctx.strokeStyle = m.label === "OOM" ? "#dc2626" : (m.label === "P" ? "#d97706" : "#6b7280");
            ctx.setLineDash([4, 3]);
            ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
            ctx.fillStyle = ctx.strokeStyle; ctx.font = "12px sans-serif"; ctx.fillText(m.label, x + 3, u.bbox.top + 12);
          }
          ctx.restore();
        }] },
      };
      charts.push(new uPlot(opts, data, chartBox));
    }

    if (pd) {
      // The device's own live set at its peak (every process's); a report without it (older, or
      // one process) has it in its process's entry.
      const pk = d.peak.by_site ? d.peak : pd.peak;
      const procs = d.peak.by_process || [];
      if (procs.length > 1) {
        card.append($("h3", { text: "Live at the peak, by process" }));
        card.append(table([{ key: "pid", label: "pid", num: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }], procs.slice(), "peak-processes"));
      }
      card.append($("h3", { text: "Live at the peak, by site" }));
      card.append(table([{ key: "site", label: "site", code: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "count", label: "allocations", num: true }], (pk.by_site || []).slice(), "peak-sites"));
      if ((pk.by_library || []).length) {
        card.append($("h3", { text: "Live at the peak, by library (who holds the memory)" }));
        card.append(table([{ key: "library", label: "library", code: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "count", label: "allocations", num: true }], pk.by_library.slice(), "peak-libraries"));
      }
      const withStacks = (pk.largest || []).filter((a) => (a.stack || []).length).slice(0, 10);
      if (withStacks.length) {
        card.append($("h3", { text: "Stacks of the largest allocations live at the peak" }));
        const box = $("div", { "data-stacks": "peak" });
        for (const a of withStacks) box.append(stackView(a));
        card.append(box);
      }
      card.append($("h3", { text: "Live at the peak, as an icicle graph" }));
      card.append(icicle(peakTree(pk), d.peak.bytes));
      card.append($("h3", { text: "Largest allocations live at the peak" }));
      card.append(table([{ key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "site", label: "site", code: true }, { key: "library", label: "library" }, { key: "api", label: "api" }, { key: "kind", label: "kind" },
        { key: "time_ns", label: "allocated at", num: true, fmt: secs }, { key: "thread", label: "thread", num: true },
        { key: "last_kernel", label: "last kernel before it", code: true, fmt: (v) => launchesOff(proc) ? "not recorded" : String(v ?? "") }],
        (pk.largest || []).slice(), "peak-largest"));
      if ((pd.pools || []).length) {
        card.append($("h3", { text: "Fragmentation: stream-ordered pools, reserved vs in use" }));
        const slack = Math.max(0, (pd.reserved ? pd.reserved.peak_bytes : 0) - d.peak.bytes);
        card.append($("div", { class: "muted", "data-fragmentation": "1", text: `At the reserved peak the pools held ${bytes(slack)} more than was allocated from them: freed memory the pools keep for reuse, unavailable to other processes.` }));
        card.append(table([{ key: "pool", label: "pool", code: true }, { key: "peak_reserved_bytes", label: "peak reserved", num: true, fmt: bytes },
          { key: "reserved_bytes", label: "reserved at end", num: true, fmt: bytes }, { key: "used_bytes", label: "in use at end", num: true, fmt: bytes }], pd.pools.slice(), "pools"));
      }
      if (alloc) {
        card.append($("h3", { text: "Fragmentation: the allocator's view (blocks inside its segments)" }));
        const rows = [["at the in-use peak", alloc.at_peak], ["when most was free", alloc.most_free], ["at the end", alloc.now]]
          .filter(([, f]) => f).map(([when, f]) => ({ when, ...f }));
        card.append(table([{ key: "when", label: "when" }, { key: "reserved_bytes", label: "reserved", num: true, fmt: bytes }, { key: "in_use_bytes", label: "in use", num: true, fmt: bytes },
          { key: "free_bytes", label: "free", num: true, fmt: bytes }, { key: "free_blocks", label: "free blocks", num: true }, { key: "largest_free_block_bytes", label: "largest free block", num: true, fmt: bytes },
          { key: "external_fragmentation", label: "external fragmentation", num: true, fmt: (v) => (100 * v).toFixed(1) + "%" }], rows, "allocator"));
        card.append($("div", { class: "muted", text: "External fragmentation = 1 − largest free block / free bytes: how much of the allocator's free memory is in pieces smaller than its largest." }));
        card.append(table([{ key: "name", label: "pool", code: true }, { key: "peak_reserved_bytes", label: "peak reserved", num: true, fmt: bytes },
          { key: "peak_in_use_bytes", label: "peak in use", num: true, fmt: bytes }, { key: "ooms", label: "OOMs", num: true }], (alloc.pools || []).slice(), "allocator-pools"));
      }
      if (growth.length) {
        card.append($("h3", { text: "Growing across iterations" }));
        card.append($("div", { class: "muted", text: `Iterations: ${proc && proc.iterations ? proc.iterations.count + " (from " + proc.iterations.source + ")" : "?"}. What each site allocated in an iteration and still held at the end.` }));
        card.append(table([{ key: "site", label: "site", code: true }, { key: "bytes_per_iteration", label: "per iteration", num: true, fmt: bytes },
          { key: "iterations", label: "iterations", num: true }, { key: "first_iteration", label: "since iteration", num: true }, { key: "since_ns", label: "since", num: true, fmt: secs },
          { key: "bytes", label: "grown", num: true, fmt: bytes }], growth.slice(), "growth"));
      }
      card.append($("h3", { text: "Kernels launched" }));
      if (launchesOff(proc))
        card.append($("div", { class: "muted", "data-launches": "off", text: "Not recorded: this run had --launches=off (VRAMTRACE_LAUNCHES=off), so the kernel launches, and the kernel at the peak, are unknown." }));
      else
        card.append(table([{ key: "name", label: "kernel", code: true }, { key: "launches", label: "launches", num: true }], ((pd.launches || {}).top || []).slice(), "kernels"));
    }

    for (const o of ooms) {
      const box = $("div", { class: "finding", "data-oom": "1" });
      const free = o.free_bytes, total = o.total_bytes;
      box.append($("div", { text: `Out of memory at ${secs(o.time_ns)}: ${o.api} asked for ${bytes(o.requested_bytes)} (pid ${o.pid}, thread ${o.thread}).` }));
      if (o.allocator) box.append($("div", { text: `${o.allocator.pool} could not serve a request of ${bytes(o.allocator.requested_bytes)}.` }));
      if ((o.findings || []).length) {
        const list = $("ol", { class: "findings", "data-findings": String(o.findings.length) });
        for (const f of o.findings) {
          const li = $("li", { "data-kind": f.kind });
          li.append($("div", { class: "finding-title", text: f.title }));
          const ev = Object.entries(f.evidence || {}).filter(([, v]) => typeof v !== "object")
            .map(([k, v]) => `${k.replace(/_/g, " ")}: ${/bytes$/.test(k) ? bytes(v) : (typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : v)}`).join("; ");
          if (ev) li.append($("div", { class: "muted", text: "Evidence: " + ev }));
          li.append($("div", { text: "Try: " + f.suggestion }));
          list.append(li);
        }
        box.append($("div", { text: "Likely causes, most likely first:" }), list);
      }
      if (free != null) {
        const other = Math.max(0, total - free - o.live_bytes);
        box.append($("div", { text: `The driver reported ${bytes(free)} free of ${bytes(total)}; this process held ${bytes(o.live_bytes)}; other processes, contexts and the driver held ${bytes(other)}.` }));
        if (!(o.findings || []).length) box.append($("div", { class: "muted", text: o.requested_bytes > free
          ? `The request was ${bytes(o.requested_bytes - free)} larger than all free memory: reduce what is live (largest below) or the request itself.`
          : `The request fitted in free memory but no contiguous block was large enough: fragmentation.` }));
      }
      const oomProc = (R.processes || []).find((p) => p.pid === o.pid);
      if (launchesOff(oomProc)) box.append($("div", { class: "muted", text: "Last kernel launched before it: not recorded (--launches=off)." }));
      else if (o.last_kernel) box.append($("div", { class: "muted", text: `Last kernel launched before it: ${o.last_kernel}` }));
      card.append($("h3", { text: "Out of memory" }), box);
      if (o.site && (o.stack || []).length) box.append(stackView({ bytes: o.requested_bytes, site: "requested by " + o.site, library: o.library, stack: o.stack }));
      card.append(table([{ key: "site", label: "live then, by site", code: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "count", label: "allocations", num: true }], (o.live_by_site || []).slice(), "oom-sites"));
      if ((o.live_by_library || []).length)
        card.append(table([{ key: "library", label: "live then, by library", code: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "count", label: "allocations", num: true }], o.live_by_library.slice(), "oom-libraries"));
    }

    const retained = (R.retained || []).filter((x) => x.device === d.index);
    if (retained.length) {
      card.append($("h3", { text: "Retained by allocators at exit (cached, not leaked)" }));
      card.append(table([{ key: "pool", label: "pool", code: true }, { key: "retained_bytes", label: "free, cached", num: true, fmt: bytes },
        { key: "reserved_bytes", label: "reserved", num: true, fmt: bytes }, { key: "blocks_in_use", label: "blocks still in use", num: true }], retained.slice(), "retained"));
    }
    if (leaks.length) {
      card.append($("h3", { text: "Leak suspects: still live when the process ended" }));
      const rows = leaks.map((l) => ({ ...l, sizes_text: (l.sizes || []).map((s) => `${s.count}× ${bytes(s.bytes)}`).join(", ") }));
      card.append(table([{ key: "site", label: "site", code: true }, { key: "library", label: "library" }, { key: "bytes", label: "bytes", num: true, fmt: bytes }, { key: "count", label: "allocations", num: true },
        { key: "pid", label: "pid", num: true }, { key: "sizes_text", label: "sizes" }], rows, "leaks"));
      const leakStacks = leaks.filter((l) => (l.stack || []).length).slice(0, 10);
      if (leakStacks.length) {
        const box = $("div", { "data-stacks": "leaks" });
        for (const l of leakStacks) box.append(stackView(l));
        card.append(box);
      }
    }
    void proc;
  }

  if ((R.ranks || []).length) {
    const w = R.worst_rank, im = R.rank_imbalance;
    const card = $("section", { class: "card", "data-ranks": String(R.ranks.length) }, $("h2", { text: `Ranks: ${R.ranks.length}` }));
    card.append($("div", { class: "headline" },
      stat("Worst rank", `rank ${w.rank}: ${bytes(w.peak_bytes)}`, "", "worst-rank"),
      stat("Smallest rank peak", bytes(im.min_peak_bytes), "", "min-rank"),
      stat("Spread", bytes(im.spread_bytes), im.max_over_mean > 1.2 ? "warn" : "ok", "spread"),
      stat("Max / mean", im.max_over_mean.toFixed(2), im.max_over_mean > 1.2 ? "warn" : "ok", "imbalance")));
    card.append(table([{ key: "rank", label: "rank", num: true }, { key: "host", label: "host" }, { key: "pid", label: "pid", num: true },
      { key: "peak_device", label: "device", num: true }, { key: "peak_bytes", label: "peak", num: true, fmt: bytes }, { key: "oom", label: "OOMs", num: true }],
      R.ranks.slice(), "ranks"));
    main.append(card);
  }

  // NVTX ranges as phases: by name, and the iterations found.
  for (const p of R.processes || []) {
    if (!p.phases) continue;
    const card = $("section", { class: "card", "data-phases": String(p.pid) }, $("h2", { text: `Phases (NVTX ranges) of pid ${p.pid}` }));
    if (p.iterations && p.iterations.count) card.append($("div", { class: "muted", text: `Iterations: ${p.iterations.count}, from ${p.iterations.source}.` }));
    else if (launchesOff(p)) card.append($("div", { class: "muted", text: "Iterations: none found; the launch rhythm was not recorded (--launches=off)." }));
    card.append(table([{ key: "name", label: "range", code: true }, { key: "count", label: "times", num: true }, { key: "total_ns", label: "total time", num: true, fmt: secs }],
      (p.phases.by_name || []).slice(), "phases"));
    main.append(card);
  }

  const procs = $("section", { class: "card" }, $("h2", { text: "Processes" }));
  procs.append(table([{ key: "pid", label: "pid", num: true }, { key: "host", label: "host" }, { key: "cmd", label: "command line", code: true },
    { key: "status", label: "ended" }, { key: "events", label: "events", num: true }, { key: "dropped_events", label: "dropped", num: true }],
    (R.processes || []).map((p) => ({ ...p, cmd: (p.cmdline || []).join(" "), status: p.clean_exit ? "exit()" : "cut short" })), "processes"));
  main.append(procs);
  document.body.dataset.ready = "1";
})();

// The behaviour of report.html (embedded at build time, runs offline). It reads the report's
// JSON from the page and builds every view from it: first what happened, why and what to try,
// then memory over time, then what was live at the peak and at each out-of-memory error. The
// same views render two runs side by side for `vramtrace diff --html`. Strings from the traced
// program (kernel names, paths, the command line) are only ever set as textContent or as
// attribute values, never parsed as HTML.
(function () {
  "use strict";
  // The page's data writes each distinct stack frame once, in D.frames; stacks hold indexes.
  const unpackFrames = (D) => {
    if (!Array.isArray(D.frames)) return D;
    const F = D.frames;
    const walk = (x) => {
      if (Array.isArray(x)) { for (const v of x) if (v && typeof v === "object") walk(v); return; }
      for (const k in x) {
        const v = x[k];
        if (k === "stack" && Array.isArray(v)) x[k] = v.map((i) => (typeof i === "number" ? F[i] || {} : i));
        else if (v && typeof v === "object" && k !== "frames") walk(v);
      }
    };
    walk(D);
    return D;
  };
  let DATA = unpackFrames(JSON.parse(document.getElementById("vt-data").textContent));
  const $ = (tag, attrs, ...kids) => {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const k of kids) if (k != null) e.append(k);
    return e;
  };
  const known = (v) => v != null && !(typeof v === "number" && !Number.isFinite(v));

  // ---- units --------------------------------------------------------------------------------
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  const bytes = (b) => {
    if (!known(b)) return "unknown";
    let v = Math.abs(Number(b)), u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    const s = u === 0 ? `${v} B` : `${v.toFixed(2)} ${units[u]}`;
    return b < 0 ? "−" + s : s;
  };
  // Axis ticks: whole binary units where they are whole (512 MiB, 1 GiB, 1.5 GiB).
  const tickBytes = (b) => {
    if (!b) return "0";
    let v = b, u = 0;
    while (v >= 1024 && u < units.length - 1) { v /= 1024; u++; }
    return `${Number.isInteger(v) ? v : +v.toFixed(2)} ${units[u]}`;
  };
  // Times since the start of the run, adapted to their size: 850 µs, 12.5 ms, 3.250 s.
  const secs = (ns) => {
    if (!known(ns)) return "unknown";
    const s = ns / 1e9;
    if (Math.abs(s) >= 60) return `${Math.floor(s / 60)} min ${(s % 60).toFixed(1)} s`;
    if (Math.abs(s) >= 1) return `${s.toFixed(3)} s`;
    if (Math.abs(s) >= 1e-3) return `${(s * 1e3).toFixed(2)} ms`;
    if (s === 0) return "0 s";
    return `${(s * 1e6).toFixed(1)} µs`;
  };
  // Axis ticks of time: no trailing zeros (100 ms, 1.2 s).
  const tickSecs = (s) => {
    if (s === 0) return "0";
    if (Math.abs(s) >= 1) return `${+s.toFixed(3)} s`;
    if (Math.abs(s) >= 1e-3) return `${+(s * 1e3).toFixed(3)} ms`;
    return `${+(s * 1e6).toFixed(2)} µs`;
  };
  const pct = (x) => `${(100 * x).toFixed(x < 0.1 ? 1 : 0)} %`;
  const plural = (n, w) => `${n} ${w}${n === 1 ? "" : "s"}`;

  // ---- long names ---------------------------------------------------------------------------
  // C++ names (demangled kernels and functions) are shortened for display: template arguments
  // collapse to <…>, the parameter list and the return type are dropped; the full name stays
  // in the title attribute. A trailing " (file:line)" is kept.
  function shortName(name) {
    if (name == null) return "";
    const s0 = String(name);
    let s = s0, loc = "";
    const m = s.match(/ \([^()]*:\d+\)$/);
    if (m) { loc = m[0]; s = s.slice(0, -loc.length); }
    // The file of a location by its name alone: a long directory would push the line, the part
    // that tells rows apart, out of a narrow column.
    loc = loc.replace(/^ \([^()]*\/([^()/]*:\d+)\)$/, " ($1)");
    if (s.length <= 56) return s + loc;
    // Not a C++ name (a path, a Python line): only cut in the middle when very long.
    if (!/[(<]|::/.test(s)) { const t = s + loc; return t.length > 120 ? t.slice(0, 50) + "…" + t.slice(-69) : t; }
    // A call operator (lambdas inside kernels' template arguments: "::{lambda()#1}::operator()()
    // const") has no angle bracket and is parsed through; an operator with one (operator<,
    // operator->) would upset the bracket count: such names are only cut.
    const t = s.replace(/\boperator\(\)/g, "\u0001");
    if (/\boperator\b/.test(t)) return s0.length > 160 ? s0.slice(0, 157) + "…" : s0;
    let out = "", depth = 0;
    for (const c of t) {
      if (c === "<") { if (depth === 0) out += "<…"; depth++; continue; }
      if (c === ">" && depth > 0) { depth--; if (depth === 0) out += ">"; continue; }
      if (depth === 0) out += c;
    }
    if (depth !== 0) out = s;
    out = out.replace(/\s+(const|volatile|&&?)\s*$/, "").trim();
    if (out.endsWith(")")) {
      let d = 0, i = out.length - 1;
      for (; i >= 0; i--) {
        if (out[i] === ")") d++;
        else if (out[i] === "(" && --d === 0) break;
      }
      if (i > 0 && out.slice(i) !== "(anonymous namespace)") out = out.slice(0, i).trim();
    }
    // The return type: everything before the last space outside parentheses and brackets.
    let d = 0, cut = -1;
    for (let i = 0; i < out.length; i++) {
      const c = out[i];
      if (c === "(" || c === "{" || c === "[") d++;
      else if (c === ")" || c === "}" || c === "]") d--;
      else if (c === " " && d === 0) cut = i;
    }
    if (cut > 0) out = out.slice(cut + 1);
    out = out.replace(/\u0001/g, "operator()");
    if (out.length > 120) out = out.slice(0, 60) + "…" + out.slice(-59);
    return (out || s0) + loc;
  }
  // A cell or label with the short name shown and the full one on demand (hover, or a click
  // that expands it in place).
  const nameEl = (tag, name, cls) => {
    const full = String(name ?? "");
    const short = shortName(full);
    const e = $(tag, { class: cls, text: short, title: full });
    if (short !== full) {
      e.classList.add("shortened");
      e.addEventListener("click", (ev) => { if (ev.target === e) { e.textContent = e.textContent === short ? full : short; e.classList.toggle("expanded"); } });
    }
    return e;
  };

  // ---- stacks -------------------------------------------------------------------------------
  // Each frame's class is the collector's (report.json's frame "class", collector/analysis/
  // stacks.h): CPython's own native frames and the C runtime's start-up frames ("interpreter")
  // say nothing about who holds memory: folded away. Native frames of libraries (torch, cuBLAS,
  // the program's own) are kept.
  const isInterpreter = (f) => f.class === "interpreter";
  const base = (p) => String(p || "").split("/").pop();
  const frameLabel = (f) => {
    if (f.python) return `${f.function || "?"} (${base(f.file)}:${f.line})`;
    if (f.function) return f.function + (f.file ? ` (${base(f.file)}:${f.line})` : "");
    return `${base(f.module) || "??"}+${f.offset || "0x0"}`;
  };
  const visibleFrames = (stack) => (stack || []).filter((f) => f.class !== "internal" && !isInterpreter(f));
  // nn.Module's call machinery (three frames between a module's caller and its forward, at each
  // level of nesting): the icicle folds it so that the forwards nest as the modules do; a
  // stack's own list keeps it.
  const isModuleCall = (f) => f.class === "module_call";
  // PyTorch's dispatcher (at::_ops::X::call, c10::impl::wrap_kernel_functor..., VariableType,
  // the CUDA kernels' wrappers) and the caching allocator under it ("torch_native"): twenty
  // native frames between a Python line and its memory that all say one thing, the operator it
  // called (the frame's "operator", where it calls one). The icicle folds each run of PyTorch's
  // native frames into one frame named by the outermost operator (aten::conv2d); a box of the
  // icicle's tools unfolds them.
  const isTorchNative = (f) => f.class === "torch_native";
  const operatorOf = (run) => {
    // The outermost operator of the run (frames innermost first: the last that names one).
    for (let i = run.length - 1; i >= 0; i--) if (run[i].operator) return run[i].operator;
    return null;
  };
  // Each frame's label, or a folded run's { label, full }.
  const foldDispatcher = (frames) => {
    const out = [];
    for (let i = 0; i < frames.length;) {
      if (!isTorchNative(frames[i])) { out.push(frameLabel(frames[i++])); continue; }
      let j = i;
      while (j < frames.length && isTorchNative(frames[j])) j++;
      const run = frames.slice(i, j);
      const op = operatorOf(run);
      if (op || run.length > 1) {
        const name = op || "PyTorch native code";
        out.push({ label: name, full: `${name}: ${plural(run.length, "native frame")} of PyTorch folded (its dispatcher, kernels and caching allocator), outermost ${frameLabel(run[run.length - 1])}` });
      } else out.push(...run.map(frameLabel));
      i = j;
    }
    return out;
  };
  const stackList = (stack) => {
    const ol = $("ol", { class: "frames" });
    const frames = stack || [];
    let folded = 0, shown = 0;
    // The folded runs are notes between frames, not frames: the numbers count frames only.
    const flush = () => { if (folded) { ol.append($("li", { class: "folded", text: `${plural(folded, "interpreter frame")} folded` })); folded = 0; } };
    for (const f of frames) {
      if (f.class === "internal") continue;
      if (isInterpreter(f)) { folded++; continue; }
      flush();
      const li = nameEl("li", frameLabel(f), f.python ? "code py" : "code");
      li.value = ++shown;
      ol.append(li);
    }
    flush();
    if (!frames.length) ol.append($("li", { class: "muted", text: "no stack recorded" }));
    return ol;
  };

  // ---- theme and keyboard -------------------------------------------------------------------
  const root = document.documentElement;
  const dark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  root.dataset.theme = dark ? "dark" : "light";
  const charts = [];
  const redraw = () => { for (const c of charts) c.redraw(false); };
  const toggle = () => { root.dataset.theme = root.dataset.theme === "dark" ? "light" : "dark"; redraw(); };
  document.getElementById("theme").addEventListener("click", toggle);
  document.addEventListener("keydown", (ev) => {
    if (ev.target.tagName === "INPUT") return;
    if (ev.key === "t") toggle();
    for (const c of charts) {
      const { min, max } = c.scales.x;
      if (min == null) continue;
      const w = max - min;
      if (c._vtZoom && ["ArrowLeft", "ArrowRight", "+", "=", "-", "0"].includes(ev.key)) c._vtZoom(ev.key !== "0");
      if (ev.key === "ArrowLeft") c.setScale("x", { min: min - w / 4, max: max - w / 4 });
      if (ev.key === "ArrowRight") c.setScale("x", { min: min + w / 4, max: max + w / 4 });
      if (ev.key === "+" || ev.key === "=") c.setScale("x", { min: min + w / 4, max: max - w / 4 });
      if (ev.key === "-") c.setScale("x", { min: min - w / 2, max: max + w / 2 });
      if (ev.key === "0") c.setScale("x", { min: c.data[0][0], max: c.data[0][c.data[0].length - 1] });
    }
  });
  window.addEventListener("resize", () => { for (const c of charts) { const w = c.root.parentElement.clientWidth; if (w > 0) c.setSize({ width: w, height: c.height }); } });

  // ---- tables -------------------------------------------------------------------------------
  // Sortable, with fixed column widths (numbers never squeezed by a long name: long names are
  // shortened and cut with an ellipsis, the full text on hover or click), and at most `limit`
  // rows in the DOM with a "show more" button: a report of tens of thousands of sites stays fast.
  function table(columns, rows, id, opts = {}) {
    const limitStep = opts.limit || 25;
    let shown = limitStep;
    const t = $("table", { "data-table": id });
    const cg = $("colgroup");
    if (opts.expand) cg.append($("col", { style: "width:2em" }));
    // Fixed widths for figures and labels; each name column keeps at least 14em, and a table
    // that does not fit scrolls sideways instead of squeezing its columns.
    let minEm = opts.expand ? 2 : 0;
    for (const c of columns) {
      const w = c.width || (c.num ? "8.5em" : (c.code ? "" : "9em"));
      cg.append($("col", { style: w ? `width:${w}` : null }));
      minEm += w ? parseFloat(w) : 14;
    }
    t.style.minWidth = `${minEm}em`;
    const head = $("tr");
    const body = $("tbody");
    const more = $("button", { type: "button", class: "more" });
    const cell = (c, r) => {
      const v = r[c.key];
      const text = c.fmt ? c.fmt(v, r) : String(v ?? "");
      if (c.code) return nameEl("td", text, "code");
      return $("td", { class: c.num ? "num" : "", text, title: c.num ? null : text });
    };
    const render = () => {
      const trs = [];
      for (const r of rows.slice(0, shown)) {
        const tr = $("tr");
        if (opts.expand) {
          // Whether the row expands, without building what it expands to (built on a click).
          const td = $("td", { class: "exp" });
          if (opts.expandable ? opts.expandable(r) : opts.expand(r)) {
            const b = $("button", { type: "button", class: "twisty", "aria-expanded": "false", title: "show the stack", text: "▸" });
            let extra = null;
            b.addEventListener("click", () => {
              if (extra) { extra.remove(); extra = null; b.textContent = "▸"; b.setAttribute("aria-expanded", "false"); return; }
              extra = $("tr", { class: "detail" }, $("td", { colspan: String(columns.length + 1) }, opts.expand(r)));
              tr.after(extra); b.textContent = "▾"; b.setAttribute("aria-expanded", "true");
            });
            td.append(b);
          }
          tr.append(td);
        }
        for (const c of columns) tr.append(cell(c, r));
        trs.push(tr);
      }
      body.replaceChildren(...trs);
      const left = rows.length - shown;
      more.hidden = left <= 0;
      more.textContent = `Show ${Math.min(left, limitStep * 4)} more of ${rows.length}`;
    };
    more.addEventListener("click", () => { shown += limitStep * 4; render(); });
    if (opts.expand) head.append($("th", { class: "exp", "aria-label": "stack" }));
    columns.forEach((c) => {
      const th = $("th", { tabindex: "0", scope: "col", text: c.label, class: c.num ? "num" : null });
      const sort = () => {
        const dir = th.getAttribute("aria-sort") === "descending" ? 1 : -1;
        head.querySelectorAll("th").forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", dir === 1 ? "ascending" : "descending");
        rows.sort((a, b) => {
          const x = a[c.key], y = b[c.key];
          return (typeof x === "number" && typeof y === "number" ? x - y : String(x ?? "").localeCompare(String(y ?? ""))) * dir;
        });
        render();
      };
      th.addEventListener("click", sort);
      th.addEventListener("keydown", (ev) => { if (ev.key === "Enter" || ev.key === " ") { ev.preventDefault(); sort(); } });
      head.append(th);
    });
    t.append(cg, $("thead", {}, head), body);
    render();
    // What the page left out of a long list (its largest entries are kept): the total of the
    // rest, so the rows and this line add up to the whole.
    const rest = opts.rest && opts.rest.entries > 0
      ? $("div", { class: "muted small rest", "data-rest": id, text: `…and ${opts.rest.entries.toLocaleString("en-US")} more ${opts.restLabel || "rows"}, ${bytes(opts.rest.bytes)}${opts.rest.count ? ` in ${opts.rest.count.toLocaleString("en-US")} blocks` : ""} (the smallest, summed in the page; all of them in report.json)` })
      : null;
    return $("div", { class: "table-wrap" }, t, more, rest);
  }
  const bar = (frac, color) => $("div", { class: "bar" }, $("div", { style: `width:${(100 * Math.max(0, Math.min(1, frac))).toFixed(2)}%;background:${color || "var(--accent)"}` }));

  // ---- categories ---------------------------------------------------------------------------
  const catColors = { parameters: "#3b82f6", gradients: "#8b5cf6", optimizer_state: "#ec4899", activations: "#f59e0b",
    temporaries: "#eab308", inputs: "#14b8a6", workspaces: "#06b6d4", communication: "#84cc16", private_pool: "#a855f7",
    allocator_cache: "#94a3b8", outside_pytorch: "#64748b", unclassified: "#cbd5e1", live: "#3b82f6" };
  const spare = ["#0ea5e9", "#f97316", "#22c55e", "#d946ef", "#f43f5e", "#10b981"];
  const catColor = (name, i) => catColors[name] || spare[i % spare.length];
  // Each category's title as the collector words it (report.json's categories.titles, read by
  // analyse()); a report from before them: the key's words, and this one that would not say
  // what it is alone.
  let catTitles = {};
  const catNames = { private_pool: "CUDA-graph / private pools" };
  const catLabel = (name) => catTitles[name] || catNames[name] || String(name).replace(/_/g, " ");
  // What leaks[].kept names: what the forwards kept across iterations.
  const keptKinds = { kept_graph: "autograd graph", kept_outputs: "outputs" };
  // The private pools the start-up hook saw at the end: which are CUDA graphs', their segments.
  function privatePoolsLine(pools) {
    if (!Array.isArray(pools) || !pools.length) return null;
    const one = (p) => `${p.cuda_graph ? "CUDA graph pool" : "private pool"} (${(p.pool_id || []).join(", ")}) ${bytes(p.bytes)} in ${plural(p.segments, "segment")}, ${bytes(p.in_use_bytes)} in use`;
    return $("div", { class: "muted small", "data-private-pools": String(pools.length), text: `Private pools at the end (counted whole, free bytes included, as CUDA-graph / private pools): ${pools.map(one).join("; ")}.` });
  }

  // ---- the program and its verdict ----------------------------------------------------------
  // What the collector decided, as report.json's diagnosis says it: the device the page heads
  // with, the OOM it is about (an index into report.json's oom) and whether it ended its process,
  // the effective limit. The page decides none of these; a report without a diagnosis gets no
  // verdict.
  function analyse(R) {
    const procs = R.processes || [];
    catTitles = Object.assign({}, ...(R.devices || []).map((x) => (x.categories && x.categories.titles) || {}));
    const procOf = (pid) => procs.find((p) => p.pid === pid);
    const fatal = (o) => o.fatal === true;
    const oomsOf = (dev) => (R.oom || []).filter((o) => o.device === dev && !o.recovered);
    const D = R.diagnosis || null;
    const dev = D && known(D.device) ? D.device : null;
    const d = (R.devices || []).find((x) => x.index === dev) || null;
    const limit = D && D.limit && known(D.limit.bytes) ? D.limit : null;
    const verdictOom = !!D && D.verdict === "oom";
    const oom = verdictOom && known(D.oom_index) ? (R.oom || [])[D.oom_index] || null : null;
    const died = !!(oom && D.fatal);
    // Who died of an OOM: the collector's (processes[].died_of_oom); a report from before it:
    // the processes of the fatal OOMs.
    const diedPids = new Set(procs.some((p) => typeof p.died_of_oom === "boolean")
      ? procs.filter((p) => p.died_of_oom).map((p) => p.pid) : (R.oom || []).filter(fatal).map((o) => o.pid));
    // One clock for every time on the page, the chart's axis included: from the run's first CUDA
    // work (report.json's run.cuda_start_ns), as the summary counts; a report without it counts
    // from the start.
    const origin = R.run && known(R.run.cuda_start_ns) ? R.run.cuda_start_ns : null;
    const at = (ns) => !known(ns) ? "unknown" : (ns >= (origin || 0) ? secs(ns - (origin || 0)) : `−${secs(origin - ns)}`);
    const when = (ns) => `${at(ns)} after ${origin != null ? "the first CUDA work" : "the start"}`;
    return { R, procs, procOf, fatal, oomsOf, D, dev, d, limit, verdictOom, oom, died, diedPids, origin, at, when };
  }

  // The collector's remedies, already those that fit the program (PyTorch's for a PyTorch
  // process, CUDA's for a native one).
  const remediesOf = (A) => (A.D && Array.isArray(A.D.remedies) ? A.D.remedies : []);
  // Evidence as labelled figures in human units: bytes in binary units, times on the page's clock.
  function evidenceList(ev, A) {
    // Typed (the diagnosis' cause, a finding's evidence_shown): each figure by its type.
    if (Array.isArray(ev)) return ev.filter((e) => e && e.label).map((e) => ({ label: e.label,
      value: known(e.bytes) ? bytes(e.bytes) : known(e.count) ? String(e.count) : known(e.fraction) ? pct(e.fraction)
        : known(e.time_ns) ? A.when(e.time_ns) : Array.isArray(e.sites) ? e.sites.slice(0, 3).map((x) => `${shortName(x.name)} (${bytes(x.bytes)})`).join("; ")
        : String(e.value ?? "") }));
    // A report from before evidence_shown: the figures by their keys' words.
    const out = [];
    for (const [k, v] of Object.entries(ev || {})) {
      if (v == null) continue;
      const label = k.replace(/_(bytes|ns)$/, "").replace(/^bytes_/, "").replace(/_/g, " ");
      let value;
      if (Array.isArray(v)) {
        const parts = v.filter((x) => x && typeof x === "object" && x.site).slice(0, 3).map((x) => `${shortName(x.site)} (${bytes(x.bytes)})`);
        if (!parts.length) continue;
        value = parts.join("; ");
      } else if (typeof v === "object") continue;
      else if (/(^|_)bytes(_|$)/.test(k)) value = bytes(v);
      else if (/_ns$/.test(k)) value = A.when(v);
      else if (/fragmentation|fraction/.test(k) && typeof v === "number") value = pct(v);
      else value = typeof v === "number" && !Number.isInteger(v) ? v.toFixed(3) : String(v);
      out.push({ label, value });
    }
    return out;
  }
  // The collector's cause, drawn with its evidence.
  const causeOf = (A) => (A.D && A.D.cause ? { title: A.D.cause.title, evidence: evidenceList(A.D.cause.evidence, A) } : null);

  // ---- the first screen: what happened, why, what to try --------------------------------------
  // The verdict's headline and the lines under it, in the diagnosis' figures.
  function verdictText(A) {
    const d = A.d, o = A.oom, D = A.D, limit = A.limit;
    const limitText = limit ? (limit.title || bytes(limit.bytes)) : null;
    let head;
    const sub = [];
    if (A.verdictOom && o) {
      // The request as the program's allocator asked, and the OOMs on the device: the
      // collector's (a report from before them: read off the OOM and the list).
      const req = known(D.asked_bytes) ? D.asked_bytes : o.allocator && known(o.allocator.requested_bytes) ? o.allocator.requested_bytes : o.requested_bytes;
      head = A.died ? `Out of memory: the program died on device ${o.device} at ${A.at(o.time_ns)}` : `Out of memory on device ${o.device} at ${A.at(o.time_ns)}; the program went on`;
      const driverReq = req !== o.requested_bytes ? ` (the allocator asked the driver for ${bytes(o.requested_bytes)})` : "";
      sub.push(`It asked for ${bytes(req)}${driverReq} while ${bytes(o.live_bytes)} was live in this process` + (limit ? `, against a limit of ${bytes(limit.bytes)}` : "") + ".");
      if (limit && limit.kind && limit.kind !== "device") sub.push(`The limit is ${limitText}.`);
      const n = known(D.ooms_on_device) ? D.ooms_on_device : A.oomsOf(A.dev).length;
      if (n > 1) sub.push(`${n} out-of-memory errors on this device in all.`);
    } else if (A.verdictOom) {
      head = `Out of memory on device ${A.dev}`;
    } else if (d) {
      const lim = limit ? limit.bytes : null;
      head = `Peak ${bytes(d.peak.bytes)}${known(lim) ? ` of ${bytes(lim)} (${pct(d.peak.bytes / lim)})` : ""} on device ${d.index} at ${A.at(d.peak.time_ns)}`;
      if (known(D.headroom_bytes) && limit) sub.push(D.headroom_bytes > 0 ? `${bytes(D.headroom_bytes)} headroom left under ${limitText}.` : `No headroom: the peak reached ${limitText}.`);
      if (D.growth && known(D.growth.bytes_per_iteration)) sub.push(`Memory grows by ${bytes(D.growth.bytes_per_iteration)} every iteration (${bytes(D.growth.kept_bytes)} kept so far): given enough iterations it runs out.`);
      if (D.recovered_ooms) sub.push(`${plural(D.recovered_ooms, "allocation")} failed and worked when retried after the allocator freed its cache.`);
    } else {
      head = "No CUDA device memory was used by this run.";
    }
    if (A.verdictOom && limit && limit.kind !== "device" && !sub.some((s) => s.startsWith("The limit"))) sub.push(`The limit is ${limitText}.`);
    if (A.verdictOom && known(D.headroom_bytes) && D.headroom_bytes > 0) sub.push(`${bytes(D.headroom_bytes)} was still under the limit: the request did not fit in it.`);
    if (A.origin > 0 && (d || o)) sub.push(`Times count from the first CUDA work, ${secs(A.origin)} after the start.`);
    return { head, sub };
  }
  // One remedy: what it saves, the one peak it leads to (for PyTorch, the replay of the run's
  // requests with the remedy applied, through PyTorch's allocator) said as the bound it is (a
  // floor when the job died in its first step, a ceiling where only the most it can need is
  // known), as report.json says it.
  function remedyItem(x) {
    const li = $("li", { "data-kind": x.kind });
    const t = $("div", { class: "remedy-title" }, $("span", { text: x.title }));
    if (known(x.saves_bytes) && x.saves_bytes > 0) t.append($("span", { class: "saves", text: `saves ~${bytes(x.saves_bytes)}` }));
    li.append(t);
    const w = x.replayed;
    // A replay over the limit names the request it could not serve when it has one (as the
    // summary says it).
    const said = !w ? "" : w.verdict === "fits"
      ? `; replayed through PyTorch's allocator: fits under ${bytes(w.limit_bytes)}` + (w.up_to_recorded_oom ? " as far as the run got" : "")
      : !w.oom ? "; replayed through PyTorch's allocator: over the limit"
      : `; replayed through PyTorch's allocator: runs out at a ${bytes(w.oom.requested_bytes)} request` + (w.oom.module ? ` in ${w.oom.module}` : "");
    const predicted = w && w.completed_by_prediction ? `; the step the run never finished is predicted (${w.completed_by_prediction.predicted_requests} requests)` : "";
    const grows = x.leaves_growth ? "; memory still grows every iteration" : "";
    // How a change of what each request is (bf16, checkpointing) was weighed, as the summary says.
    const weighed = !w ? "" : w.weighed_on_fake_step ? "; its effect weighed on the step run on fake tensors with it and without it"
      : w.not_weighed_on_fake_step ? `; estimated from the recorded requests, ${w.not_weighed_on_fake_step}` : "";
    if (x.outcome) {
      // The collector's words, which the summary prints too.
      li.append($("div", { class: "predicted small" + (w && known(x.predicted_peak_bytes) ? " replayed" : ""), text: x.outcome }));
    } else if (known(x.predicted_peak_bytes) && known(x.predicted_peak_high_bytes)) {
      li.append($("div", { class: "predicted small", text: `peak with it: between ${bytes(x.predicted_peak_bytes)} and ${bytes(x.predicted_peak_high_bytes)}` + grows }));
    } else if (known(x.predicted_peak_bytes)) {
      const how = x.predicted_peak_is_lower_bound ? "at least " : x.predicted_peak_is_upper_bound ? "at most " : w ? "" : "about ";
      li.append($("div", { class: "predicted small" + (w ? " replayed" : ""), text: `peak with it: ${how}${bytes(x.predicted_peak_bytes)}` + said + predicted + weighed + grows }));
    } else if (x.not_replayed_because) {
      li.append($("div", { class: "predicted small", text: `not replayed: ${x.not_replayed_because}` + grows }));
    } else if (x.leaves_growth) li.append($("div", { class: "predicted small", text: "memory still grows every iteration" }));
    if (x.how) li.append($("code", { class: "how", text: x.how }));
    if (x.assumption) li.append($("div", { class: "muted small", text: x.assumption }));
    return li;
  }
  // The likely cause with its evidence, and what to try: the top three remedies, the rest folded.
  function whyGrid(A, title) {
    const cause = causeOf(A);
    const rem = remediesOf(A);
    if (!cause && !rem.length) return null;
    const grid = $("div", { class: "why" });
    if (cause) {
      const c = $("div", { class: "cause", id: title ? null : "cause" }, $("h3", { text: "Likely cause" }), $("div", { class: "cause-title", text: cause.title }));
      if (cause.evidence.length) {
        const dl = $("dl", { class: "evidence" });
        for (const e of cause.evidence.slice(0, 6)) dl.append($("dt", { text: e.label }), nameEl("dd", e.value));
        c.append(dl);
      }
      grid.append(c);
    }
    if (rem.length) {
      // Advice after an OOM; for a run that fit (the collector's verdict), what would take less.
      const r = $("div", { class: "remedies", id: title ? null : "remedies" }, $("h3", { text: A.verdictOom ? "What to try" : "To use less memory" }));
      const ol = $("ol");
      for (const x of rem.slice(0, 3)) ol.append(remedyItem(x));
      r.append(ol);
      if (rem.length > 3) {
        const more = $("details", { class: "more-remedies" }, $("summary", { text: `${rem.length - 3} more` }));
        const ol2 = $("ol", { start: "4" });
        for (const x of rem.slice(3)) ol2.append(remedyItem(x));
        more.append(ol2);
        r.append(more);
      }
      grid.append(r);
    }
    return grid;
  }
  // `fold`: the cause and remedies closed under a line that says whose they are (a plan's report,
  // where the plan's own come first).
  function summary(A, title, fold) {
    const box = $("section", { class: "card summary" + (A.verdictOom ? " is-oom" : ""), id: title ? null : "summary", "data-verdict": A.verdictOom ? "oom" : "peak" });
    const { head, sub } = verdictText(A);
    box.append($("div", { class: "verdict" }, $("h2", { id: fold ? null : "verdict", text: (title ? title + ": " : "") + head }), $("div", { class: "verdict-sub", text: sub.join(" ") })));
    const why = whyGrid(A, title);
    if (why && fold) box.append($("details", { class: "more-remedies folded-why" }, $("summary", { text: fold }), why));
    else if (why) box.append(why);
    return box;
  }

  // ---- the first screen of `vramtrace plan` -------------------------------------------------
  // The step the plan stopped before, as report.json's plan says it: its predicted peak against
  // the limit, whether it fits and by how much, the largest batch that fits, each remedy's
  // replayed peak, what the prediction could not see and what the fake steps cost. Whether
  // anything fits is the collector's (each "fits"); the page only words it. Several processes
  // or devices each get their block.
  const planLosses = { model: "the model's own loss", cross_entropy: "an assumed cross-entropy loss", sum: "an assumed sum of the outputs as the loss" };
  // The limit the step is held to: PyTorch's per-process fraction where it is below the device's.
  const planLimit = (d) => known(d.fraction_limit_bytes) && (!known(d.limit_bytes) || d.fraction_limit_bytes < d.limit_bytes)
    ? { bytes: d.fraction_limit_bytes, words: `PyTorch's per-process fraction of ${bytes(d.fraction_limit_bytes)}`, label: "Limit (per process fraction)" }
    : { bytes: d.limit_bytes, words: `a limit of ${bytes(d.limit_bytes)}`, label: "Limit" };
  function planDevice(p, d, many) {
    const box = $("div", { class: "plan-device", "data-plan-device": String(d.device) });
    const who = many ? `Process ${p.pid}, device ${d.device}` : `Device ${d.device}`;
    if (!d.predicted) {
      box.append($("div", { class: "plan-line bad", text: `${who}: no prediction: ${d.error || "no reason given"}.` }));
      return { box, remBox: null };
    }
    const lim = planLimit(d);
    const fits = d.fits === true;
    const outcome = fits ? `fits, ${bytes(d.free_bytes)} to spare` : `will run out of memory, ${bytes(d.over_bytes)} over`;
    box.append($("div", { class: "plan-line " + (fits ? "ok" : "bad"), "data-plan-step": fits ? "fits" : "oom",
      text: `${who}: the whole step peaks at ${bytes(d.peak_bytes)} against ${lim.words}: ${outcome}.` }));
    const parts = [`PyTorch reserved ${bytes(d.reserved_peak_bytes)} + ${bytes(d.outside_bytes)} outside PyTorch at that peak`];
    if ((d.predicted_batches || []).length) parts.push(`fake steps run at ${(d.predicted_batches.length > 1 ? "batches " : "batch ") + d.predicted_batches.join(" and ")}`);
    if (known(d.limit_bytes)) parts.push(`the device's limit, ${bytes(d.limit_bytes)}${d.limit_source ? ": " + d.limit_source : ""}`);
    box.append($("div", { class: "muted small", text: parts.join("; ") + "." }));
    const largest = known(d.largest_batch) ? `${d.largest_batch_at_least ? "at least " : ""}${d.largest_batch}` : "none";
    box.append($("div", { class: "headline plan-stats" },
      stat("Predicted step peak", bytes(d.peak_bytes), fits ? "ok" : "bad", "plan-peak"),
      stat(lim.label, bytes(lim.bytes), "", "plan-limit"),
      fits ? stat("To spare", bytes(d.free_bytes), "ok", "plan-spare") : stat("Over the limit", bytes(d.over_bytes), "bad", "plan-over"),
      stat(`Largest batch that fits (this one: ${d.batch})`, largest, known(d.largest_batch) ? "" : "bad", "plan-largest")));
    const rem = d.remedies || [];
    let remBox = null;
    if (rem.length) {
      const ol = $("ol", { class: "plan-remedies" });
      for (const m of rem) {
        const li = $("li", { "data-kind": m.kind });
        const t = $("div", { class: "plan-remedy-title" }, $("span", { text: String(m.label || m.kind) }));
        if (m.replayed) t.append($("span", { class: "verdict-chip " + (m.fits ? "ok" : "bad"), text: m.fits ? "fits" : "runs out" }));
        li.append(t);
        li.append($("div", { class: "predicted small", text: m.replayed
          ? `peak with it: ${bytes(m.peak_bytes)}; replayed through PyTorch's allocator: ${m.fits ? `fits under ${bytes(lim.bytes)}` : `runs out of memory under ${bytes(lim.bytes)}`}`
          : `not replayed: ${m.not_replayed_because || "no reason given"}` }));
        ol.append(li);
      }
      remBox = $("div", { class: "remedies plan-remedies-box" }, $("h3", { text: many ? `What to try on device ${d.device}` : "What to try, each replayed on the predicted step" }), ol);
    }
    return { box, remBox };
  }
  function planCard(A) {
    const procs = (A.R.plan && A.R.plan.processes) || [];
    if (!procs.length) return null;
    const many = procs.length > 1 || procs.some((p) => (p.devices || []).length > 1);
    const devs = procs.flatMap((p) => (p.devices || []).map((d) => ({ p, d })));
    const predicted = devs.filter((x) => x.d.predicted);
    const oom = predicted.some((x) => x.d.fits === false);
    const box = $("section", { class: "card summary plan" + (oom ? " is-oom" : ""), id: "plan", "data-plan": oom ? "oom" : (predicted.length ? "fits" : "none") });
    const batches = [...new Set(procs.map((p) => p.batch))];
    const head = procs.length === 1 ? `Plan: stopped before the first training step (batch ${procs[0].batch})`
      : `Plan: ${procs.length} processes stopped before their first training step (batch ${batches.join(", ")})`;
    // The step's outcome in the headline when there is one device to speak of.
    const one = predicted.length === 1 && devs.length === 1 ? predicted[0].d : null;
    const outcome = one ? (one.fits ? `: the step fits on device ${one.device}` : `: the step will run out of memory on device ${one.device}`) : "";
    const sub = procs.map((p) => {
      const rng = p.rng_restored ? "the RNG states restored" : "the RNG states not read (none to restore)";
      const loss = planLosses[p.loss] ? `, with ${planLosses[p.loss]}` : "";
      const how = p.loss === "program" ? "the program's own loop ran its steps on fake tensors (its loss, scaler, zero_grad and accumulation)" : "the step was predicted on fake tensors";
      return `vramtrace plan stopped process ${p.pid} at ${A.at(p.stopped_ns)}, before its step ran on the GPU: ${how} in ${secs(p.fake_step_seconds * 1e9)}${loss}; ${rng}, the model and optimizer put back.`;
    });
    box.append($("div", { class: "verdict" }, $("h2", { id: "verdict", text: head + outcome }), $("div", { class: "verdict-sub", text: sub.join(" ") })));
    const shown = devs.map(({ p, d }) => planDevice(p, d, many));
    // How the steps ran (the program's own loop's, the stand-in's, values read from fake tensors),
    // as the hook said it.
    const notes = procs.flatMap((p) => (p.notes || []).map((n) => (procs.length > 1 ? `process ${p.pid}: ` : "") + n));
    if (notes.length) {
      const ul = $("ul", { class: "plan-notes small" });
      for (const n of notes) ul.append($("li", { text: n }));
      box.append(ul);
    }
    const unseen = procs.flatMap((p) => (p.unseen || []).map((u) => (procs.length > 1 ? `process ${p.pid}: ` : "") + u));
    let unseenBox = null;
    if (unseen.length) {
      const ul = $("ul", { class: "plan-unseen" });
      for (const u of unseen) ul.append($("li", { text: u }));
      unseenBox = $("div", { class: "plan-unseen-box" }, $("h3", { text: "What the prediction could not see" }), ul);
    }
    // One device: its remedies beside what the prediction could not see; several: each
    // device's remedies in its block, what was not seen after them.
    if (shown.length === 1) {
      box.append(shown[0].box);
      const grid = $("div", { class: "why plan-why" }, shown[0].remBox, unseenBox);
      if (grid.childElementCount) box.append(grid);
    } else {
      for (const s of shown) { if (s.remBox) s.box.append(s.remBox); box.append(s.box); }
      if (unseenBox) box.append(unseenBox);
    }
    return box;
  }

  // ---- memory over time -----------------------------------------------------------------------
  // A step chart: each sample is what was live from its time until the next (what a memory
  // timeline is), stacked by category when the report has them; the effective limit, the peak,
  // each OOM and the phases drawn on it; the time axis spans the whole run.
  function binarySplits(u, axis, min, max) {
    const span = Math.max(1, max - Math.max(0, min));
    let step = 1;
    while (span / step > 6) step *= 2;
    const out = [];
    for (let v = 0; v <= max + 0.5; v += step) if (v >= min) out.push(v);
    return out;
  }
  // The chart's samples: PyTorch's categories over time when the report has them, else the
  // device's live bytes (each bucket's lowest and highest figure at their moments, in time order;
  // a report without them: the highest from the bucket's start).
  function chartSamples(d) {
    const cat = d.categories && d.categories.timeline && (d.categories.timeline.points || []).length ? d.categories : null;
    if (cat) {
      const cols = cat.timeline.columns || ["time_ns", ...(cat.order || [])];
      return { cat, names: cols.slice(1), pts: cat.timeline.points };
    }
    const pts = [];
    for (const p of (d.timeline && d.timeline.points) || []) {
      if (p.length < 6) { pts.push([p[0], p[1]]); continue; }
      const [lo, hi] = [[p[5], p[3]], [p[4], p[1]]];
      if (lo[0] === hi[0]) pts.push(hi);
      else pts.push(...(lo[0] < hi[0] ? [lo, hi] : [hi, lo]));
    }
    return { cat: null, names: ["live"], pts };
  }
  // The chart's figures: its time origin and span, the stacked series, the byte axis' top and
  // the limit line.
  function chartFigures(A, d, ooms) {
    const R = A.R;
    let { cat, names, pts } = chartSamples(d);
    // Where the collector ends the run's timelines: its end, or the last CUDA work of a process
    // whose time after it went to predicting its first step at exit (an older report: its end).
    const run = R.run || {};
    const end = Math.max(known(run.timeline_end_ns) ? run.timeline_end_ns : (run.duration_ns || 0), ...ooms.map((o) => o.time_ns || 0), (d.peak || {}).time_ns || 0, pts.length ? pts[pts.length - 1][0] : 0);
    // The axis starts at the first CUDA activity on the device: a job that spends seconds in
    // imports and data loading before its first allocation would otherwise draw all of its
    // work in the chart's last sliver. Every time below is from there; the caption says the offset.
    const firstActive = pts.find((p) => p.slice(1).some((v) => v > 0));
    const starts = [firstActive && firstActive[0], (((d.timeline && d.timeline.points) || [])[0] || [])[0], (d.peak || {}).time_ns,
      ...ooms.map((o) => o.time_ns), ...(d.phases || []).map((p) => p.start_ns)].filter((v) => known(v) && v >= 0);
    // The page's clock when the report has it (the run's first CUDA work, the same for every
    // device); an older report's: this device's first activity.
    const t0 = A.origin != null ? A.origin : (starts.length && pts.length ? Math.min(...starts) : 0);
    pts = pts.filter((p) => A.origin != null || p[0] >= t0).map((p) => [Math.max(0, p[0] - t0), ...p.slice(1)]);
    const span = end - t0;
    const keep = names.map((n, k) => pts.some((p) => (p[k + 1] || 0) > 0));
    const idx = names.map((n, k) => k).filter((k) => keep[k]);
    if (!idx.length && pts.length) idx.push(0);
    const rows = pts.slice();
    if (!rows.length || rows[0][0] > 0) rows.unshift([0, ...names.map(() => 0)]);
    if (span > rows[rows.length - 1][0]) rows.push([span, ...rows[rows.length - 1].slice(1)]);
    const xs = rows.map((p) => p[0] / 1e9);
    const raw = idx.map((k) => rows.map((p) => p[k + 1] || 0));
    const cum = [];
    raw.forEach((r, j) => cum.push(r.map((v, i) => v + (j ? cum[j - 1][i] : 0))));
    const top = cum.length ? Math.max(...cum[cum.length - 1]) : 0;
    const peakB = Math.max(top, (d.peak || {}).bytes || 0, ...ooms.map((o) => (o.live_bytes || 0) + (o.requested_bytes || 0)));
    const limit = A.dev === d.index && A.limit ? A.limit : (known(d.total_bytes) ? { bytes: d.total_bytes, title: "device memory" } : null);
    // Whether the limit is close enough to the peak to draw: the collector's (limit_in_chart).
    const showLimit = !!limit && d.limit_in_chart === true;
    const ymax = Math.max(1, showLimit ? Math.max(peakB, limit.bytes) * 1.06 : peakB * 1.12);
    return { cat, names, pts, end, t0, span, idx, xs, raw, cum, limit, showLimit, ymax };
  }
  // What is drawn over the series: the phases as bands with their names where they fit, the
  // limit as a line, the peak and each OOM as marks.
  function chartOverlays(C, marks, phases, muted, card) {
    const phaseColor = { forward: "rgba(59,130,246,0.10)", backward: "rgba(168,85,247,0.10)", optimizer: "rgba(34,197,94,0.12)", evaluation: "rgba(107,114,128,0.12)" };
    const drawAxes = [(u) => {
      if (!phases.length) return;
      const ctx = u.ctx; ctx.save();
      ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
      const top = u.bbox.top, h = u.bbox.height;
      for (const p of phases) {
        // Clipped to the plot: zoomed in, a band may start or end outside it.
        const x0 = Math.max(u.bbox.left, u.valToPos(p.start_ns / 1e9, "x", true)), x1 = Math.min(u.bbox.left + u.bbox.width, u.valToPos(p.end_ns / 1e9, "x", true));
        if (x1 < u.bbox.left || x0 > u.bbox.left + u.bbox.width) continue;
        ctx.fillStyle = phaseColor[p.phase] || "rgba(107,114,128,0.08)";
        ctx.fillRect(x0, top, Math.max(1, x1 - x0), h);
      }
      ctx.restore();
    }];
    // Phase names over the bands where they fit, under the top edge.
    const drawSeries = [(u, si) => {
      if (si !== u.series.length - 1 || !phases.length) return;
      const ctx = u.ctx, dpr = devicePixelRatio;
      ctx.save();
      ctx.textAlign = "left"; ctx.textBaseline = "top";
      ctx.fillStyle = muted(); ctx.font = `${11 * dpr}px sans-serif`;
      let lastEnd = -1e9;
      for (const p of phases) {
        const x0 = u.valToPos(p.start_ns / 1e9, "x", true), x1 = u.valToPos(p.end_ns / 1e9, "x", true);
        const t = `${p.phase}${known(p.iteration) ? " " + p.iteration : ""}`;
        const w = ctx.measureText(t).width + 6 * dpr;
        if (x1 - x0 < w || x0 < lastEnd || x0 < u.bbox.left || x1 > u.bbox.left + u.bbox.width) continue;
        ctx.fillText(t, x0 + 3 * dpr, u.bbox.top + u.bbox.height - 14 * dpr);
        lastEnd = x0 + w;
      }
      ctx.restore();
    }];
    const draw = [(u) => {
      const ctx = u.ctx; const dpr = devicePixelRatio;
      ctx.save();
      ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
      ctx.font = `${12 * dpr}px sans-serif`;
      if (C.showLimit) {
        const limit = C.limit;
        const y = Math.round(u.valToPos(limit.bytes, "y", true));
        ctx.strokeStyle = "#dc2626"; ctx.lineWidth = 1.5 * dpr; ctx.setLineDash([8 * dpr, 4 * dpr]);
        ctx.beginPath(); ctx.moveTo(u.bbox.left, y); ctx.lineTo(u.bbox.left + u.bbox.width, y); ctx.stroke();
        ctx.fillStyle = "#dc2626";
        const t = `limit ${bytes(limit.bytes)}${limit.kind && limit.kind !== "device" ? " (" + limit.kind.replace(/_/g, " ") + ")" : ""}`;
        // At the left, unless a mark's label is there: then at the right.
        const crowded = marks.some((m) => known(m.x) && u.valToPos(m.x / 1e9, "x", true) < u.bbox.left + u.bbox.width * 0.4);
        ctx.fillText(t, crowded ? u.bbox.left + u.bbox.width - ctx.measureText(t).width - 6 * dpr : u.bbox.left + 6 * dpr, y - 5 * dpr);
      }
      let row = 0;
      for (const m of marks) {
        if (!known(m.x)) continue;
        const x = Math.round(u.valToPos(m.x / 1e9, "x", true));
        if (x < u.bbox.left - 1 || x > u.bbox.left + u.bbox.width + 1) continue;
        ctx.strokeStyle = m.color; ctx.fillStyle = m.color; ctx.lineWidth = 1.5 * dpr; ctx.setLineDash([4 * dpr, 3 * dpr]);
        ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
        const w = ctx.measureText(m.label).width;
        const tx = x + 4 * dpr + w > u.bbox.left + u.bbox.width ? x - w - 4 * dpr : x + 4 * dpr;
        const ty = u.bbox.top + (14 + 14 * (row++ % 3)) * dpr;
        // On the card's colour: readable over the limit line and the areas.
        ctx.fillStyle = card();
        ctx.fillRect(tx - 2 * dpr, ty - 11 * dpr, w + 4 * dpr, 14 * dpr);
        ctx.fillStyle = m.color;
        ctx.fillText(m.label, tx, ty);
      }
      ctx.restore();
    }];
    return { drawAxes, drawSeries, draw };
  }
  // A step chart's series: each category stacked (the first at the bottom), and their total.
  function chartSeries(C) {
    const stepped = typeof uPlot !== "undefined" && uPlot.paths && uPlot.paths.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined;
    const series = [{ label: "time", value: (u, v) => v == null ? "" : secs(v * 1e9) }];
    const data = [C.xs];
    for (let j = C.raw.length - 1; j >= 0; j--) {
      const name = C.names[C.idx[j]];
      const col = catColor(name, j);
      const rj = C.raw[j];
      series.push({ label: C.cat ? catLabel(name) : "live in this device", stroke: col, fill: col + (C.cat ? "d9" : "33"), width: C.cat ? 0 : 1.5,
        paths: stepped, points: { show: false }, value: (u, v, si, i) => i == null ? "" : bytes(rj[i]) });
      data.push(C.cum[j]);
    }
    if (C.cat && C.raw.length > 1) {
      series.push({ label: "total", stroke: () => getComputedStyle(root).getPropertyValue("--fg").trim() || "#1f2937", width: 1, paths: stepped, points: { show: false }, value: (u, v) => v == null ? "" : bytes(v) });
      data.push(C.cum[C.cum.length - 1]);
    }
    return { stepped, series, data };
  }
  // `share` (the diff's two runs): one time axis and one byte axis for every chart in it, the
  // cursor and the zoom of one followed by the others.
  function memoryChart(A, d, pd, host, height, share) {
    const ooms = (A.R.oom || []).filter((o) => o.device === d.index && !o.recovered && (!host || o.host == null || o.host === host));
    const C = chartFigures(A, d, ooms);
    const { t0, span, ymax, xs } = C;
    if (share) { share.xEnd = Math.max(share.xEnd || 0, span); share.yMax = Math.max(share.yMax || 0, ymax); }
    const { stepped, series, data } = chartSeries(C);
    const box = $("div", { class: "chart", "data-chart": String(d.index), "data-x-end-ns": String(C.end), "data-x-start-ns": String(t0), "data-stepped": stepped ? "1" : "0",
      "data-limit": C.showLimit ? String(C.limit.bytes) : null, "data-marks": String(1 + ooms.length) });
    const rel = (ns) => known(ns) ? ns - t0 : ns;
    const marks = [{ x: rel((d.peak || {}).time_ns), label: `peak ${bytes((d.peak || {}).bytes)}`, color: "#d97706" }];
    ooms.forEach((o, i) => marks.push({ x: rel(o.time_ns), label: ooms.length > 1 ? `OOM ${i + 1}` : `OOM: asked ${bytes(o.requested_bytes)}`, color: "#dc2626" }));
    const allPhases = (d.phases || []).filter((p) => known(p.start_ns) && known(p.end_ns)).map((p) => ({ ...p, start_ns: p.start_ns - t0, end_ns: p.end_ns - t0 }));
    // More phases than a chart has room for (a band every few pixels) pile up into stripes:
    // then only those at the peak and at each OOM are drawn.
    const atMoment = (p) => [rel((d.peak || {}).time_ns), ...ooms.map((o) => rel(o.time_ns))].some((t) => known(t) && p.start_ns <= t && t <= p.end_ns);
    const phases = allPhases.length > 300 ? allPhases.filter(atMoment) : allPhases;
    let zoomed = false;
    const draw = () => {
      const width = Math.max(320, box.clientWidth || host_width(box));
      // The axes' spans (shared by the diff's charts), for tests and tools.
      box.dataset.xMaxNs = String(share ? share.xEnd : span);
      box.dataset.yMax = String(Math.round(share ? share.yMax : ymax));
      // Colours from the theme at each draw: the theme toggle redraws the chart.
      const muted = () => getComputedStyle(root).getPropertyValue("--muted").trim() || "#666";
      const card = () => getComputedStyle(root).getPropertyValue("--card").trim() || "#fff";
      const opts = {
        width, height: height || 300,
        scales: { x: { time: false, range: (u, lo, hi) => (zoomed ? [lo, hi] : [0, Math.max((share ? share.xEnd : span) / 1e9, 1e-9)]) }, y: { range: () => [0, share ? share.yMax : ymax] } },
        legend: { live: true },
        cursor: { points: { show: false }, ...(share ? { sync: { key: share.key, setSeries: false } } : {}) },
        axes: [{ space: 90, values: (u, v) => v.map(tickSecs), stroke: muted, grid: { stroke: "rgba(128,128,128,0.15)" } },
               { values: (u, v) => { const t = v.map(tickBytes); box.dataset.yticks = t.join(","); return t; }, splits: binarySplits, size: 80, stroke: muted, grid: { stroke: "rgba(128,128,128,0.15)" } }],
        series,
        hooks: chartOverlays(C, marks, phases, muted, card),
      };
      // The legend shows the breakdown at the peak while the pointer is not over the chart.
      const pt = rel((d.peak || {}).time_ns);
      let peakIdx = null;
      if (known(pt)) {
        peakIdx = 0;
        while (peakIdx + 1 < xs.length && xs[peakIdx + 1] <= pt / 1e9) peakIdx++;
        opts.hooks.setCursor = [(u) => { if (u.cursor.idx == null) u.setLegend({ idx: peakIdx }, false); }];
      }
      // Zoom (a drag, the keys) until a double-click or "0": the range then spans the run again.
      opts.hooks.setSelect = [(u) => { if (u.select.width > 0) zoomed = true; }];
      opts.hooks.setScale = [(u, key) => {
        if (key !== "x") return;
        box.dataset.xRange = `${u.scales.x.min},${u.scales.x.max}`;
        if (!share || share.syncing) return;
        share.syncing = true;
        for (const c of share.charts) if (c !== u) { c._vtZoom(zoomed); c.setScale("x", { min: u.scales.x.min, max: u.scales.x.max }); }
        share.syncing = false;
      }];
      box.addEventListener("dblclick", () => { zoomed = false; });
      const u = new uPlot(opts, data, box);
      u._vtZoom = (z) => { zoomed = z; };
      charts.push(u);
      if (share) share.charts.push(u);
      if (peakIdx != null) setTimeout(() => u.setLegend({ idx: peakIdx }, false), 0);
    };
    // Said under the chart, where the axis starts.
    const offset = t0 > 0 ? $("div", { class: "muted small", "data-time-offset": String(t0),
      text: A.origin != null ? `Time from the first CUDA work of the job, ${secs(t0)} after it started (the ${secs(t0)} before it are left out), as every time on this page.`
        : `Time from the first CUDA activity on this device, ${secs(t0)} after the process started (the ${secs(t0)} before it are left out).` }) : null;
    // The time the timeline leaves out at its end (a first-step death's prediction at exit), in
    // the collector's words.
    const untimed = ((A.R.run || {}).predicted_at_exit || []).map((x) => $("div", { class: "muted small", "data-predicted-at-exit": String(x.pid), text: x.note }));
    return { box, draw, hasData: C.pts.length > 0, notes: [offset, ...untimed].filter(Boolean) };
  }
  const host_width = (el) => (el.parentElement && el.parentElement.clientWidth) || 900;

  // ---- breakdown at a moment ------------------------------------------------------------------
  // What was live at the peak or at an OOM: by category, by module, by site (the Python line or
  // native function), by library; each site expandable to its stack.
  function categoryPanel(cats, order, total) {
    const names = (order && order.length ? order : Object.keys(cats)).filter((n) => cats[n] > 0);
    const sum = names.reduce((s, n) => s + cats[n], 0) || 1;
    const rows = names.map((n, i) => ({ name: catLabel(n), key: n, bytes: cats[n], share: cats[n] / sum, i })).sort((a, b) => b.bytes - a.bytes);
    const t = table([{ key: "name", label: "category", width: "17.5em" }, { key: "bytes", label: "live", num: true, fmt: bytes },
      { key: "share", label: "share", width: "11em", fmt: (v, r) => pct(v) }], rows, "categories", { limit: 12 });
    // The share column draws a bar next to its figure.
    t.querySelectorAll("tbody tr").forEach((tr, i) => { const c = tr.lastElementChild; c.prepend(bar(rows[i].share, catColor(rows[i].key, rows[i].i))); });
    void total;
    return t;
  }
  // What a module's blocks at this moment were: its class and where it is defined, its blocks
  // by category, the lines of the program that ran it, each with the stack recorded there.
  function moduleDetail(leaf, siteEntry) {
    const box = $("div", { class: "moddetail", "data-module-detail": leaf.module });
    const about = [leaf.type, leaf.forward_at ? `forward at ${leaf.forward_at}` : null, known(leaf.count) ? plural(leaf.count, "block") : null].filter(Boolean);
    if (about.length) box.append($("div", { class: "muted small", text: about.join(" · ") }));
    const cats = Object.entries(leaf.categories || (leaf.category ? { [leaf.category]: leaf.bytes } : {})).filter(([, v]) => v > 0);
    if (cats.length) box.append($("div", { class: "small", text: cats.map(([k, v]) => `${catLabel(k)} ${bytes(v)}`).join(", ") }));
    const sites = (leaf.sites || []).length ? leaf.sites : (leaf.site ? [{ site: leaf.site, bytes: leaf.bytes }] : []);
    let stacks = 0;
    for (const x of sites.slice(0, 5)) {
      box.append($("div", { class: "labelled small" }, "Run from ", nameEl("span", x.site, "code"), `: ${bytes(x.bytes)}${known(x.count) ? " in " + plural(x.count, "block") : ""}`));
      const e = siteEntry(x.site);
      if (e && (e.stack || []).length) { box.append(stackList(e.stack)); stacks++; }
    }
    if ((leaf.stack || []).length) { box.append(stackList(leaf.stack)); stacks++; }
    if (!stacks) box.append($("div", { class: "muted small", text: "No stack recorded for these blocks: PyTorch's trace gives each block its module and the line that ran it." }));
    return box;
  }
  function moduleTree(list, total, siteEntry = () => null, rest = null) {
    const rootNode = { name: "", bytes: 0, children: new Map(), leaf: null };
    for (const m of list) {
      let n = rootNode;
      n.bytes += m.bytes;
      for (const part of String(m.module || "(no module)").split(".")) {
        if (!n.children.has(part)) n.children.set(part, { name: part, bytes: 0, children: new Map(), leaf: null });
        n = n.children.get(part);
        n.bytes += m.bytes;
      }
      n.leaf = m;
    }
    const scale = Math.max(total || 0, rootNode.bytes) || 1;
    const box = $("div", { class: "modtree", "data-modules": String(list.length) });
    const render = (node, path, depth, into) => {
      // Largest first; equal ones in their natural order (blocks.2 before blocks.10).
      const kids = [...node.children.values()].sort((a, b) => b.bytes - a.bytes || a.name.localeCompare(b.name, "en", { numeric: true }));
      const shown = kids.slice(0, 20);
      for (const k of shown) {
        // A chain of single children collapses into one dotted name (layer3.2.conv2).
        let n = k, name = k.name;
        while (n.children.size === 1 && !n.leaf) { n = [...n.children.values()][0]; name += "." + n.name; }
        const full = path ? path + "." + name : name;
        const row = $("div", { class: "modrow" }, nameEl("span", full, "code modname"), bar(n.bytes / scale), $("span", { class: "num", text: bytes(n.bytes) }));
        if (n.leaf && (n.leaf.category || n.leaf.site)) row.append($("span", { class: "muted small", text: [n.leaf.category && catLabel(n.leaf.category), n.leaf.site].filter(Boolean).join(" · "), title: n.leaf.site || "" }));
        if (n.children.size) {
          const det = $("details", { open: depth < 1 ? "" : null }, $("summary", {}, row));
          const inner = $("div", { class: "modkids" });
          let filled = false;
          const fill = () => { if (!filled) { filled = true; render(n, full, depth + 1, inner); } };
          if (depth < 1) fill();
          det.addEventListener("toggle", fill);
          det.append(inner);
          into.append(det);
        } else if (n.leaf) {
          // A leaf expands to its blocks' lines and stacks.
          const det = $("details", { class: "modleaf", "data-leaf": full }, $("summary", {}, row));
          det.addEventListener("toggle", () => { if (det.open && det.childElementCount === 1) det.append(moduleDetail(n.leaf, siteEntry)); });
          into.append(det);
        } else into.append($("div", { class: "modleaf" }, row));
      }
      if (kids.length > shown.length) into.append($("div", { class: "muted small", text: `${kids.length - shown.length} more modules, ${bytes(kids.slice(20).reduce((s, x) => s + x.bytes, 0))}` }));
    };
    render(rootNode, "", 0, box);
    if (rest && rest.entries > 0) box.append($("div", { class: "muted small rest", "data-rest": "modules", text: `…and ${rest.entries.toLocaleString("en-US")} more modules, ${bytes(rest.bytes)} (the smallest, summed in the page)` }));
    return box;
  }
  // A library's row expands to the largest stacks through which it held memory at the moment.
  function libraryStacks(lib, m) {
    const has = (l) => (l || []).some((x) => x.library === lib && (x.stack || []).length);
    const from = has(m.stacks) ? m.stacks : (has(m.sites) ? m.sites : []);
    const mine = from.filter((x) => x.library === lib && (x.stack || []).length).slice(0, 3);
    if (!mine.length) return null;
    const box = $("div", { class: "libstacks" });
    const total = from.filter((x) => x.library === lib).length;
    for (const x of mine) box.append($("div", { class: "small labelled" }, `${bytes(x.bytes)}${known(x.count) ? " in " + plural(x.count, "block") : ""} at `, nameEl("span", x.site || "?", "code")), stackList(x.stack));
    if (total > mine.length) box.append($("div", { class: "muted small", text: `${total - mine.length} more stacks of ${lib}: in the site table and the icicle graph.` }));
    return box;
  }
  function breakdown(A, d, pd) {
    const R = A.R;
    const wrap = $("div", { class: "breakdown" });
    const ooms = (R.oom || []).filter((o) => o.device === d.index && !o.recovered && (!pd || !pd._pid || o.pid === pd._pid));
    const moments = [];
    // A moment of a running job: what is live now, first.
    const now = R.live && R.live.running ? (R.live.now || []).find((n) => n.device === d.index && (n.host == null || d.host == null || n.host === d.host)) : null;
    if (now) moments.push({ id: "now", label: `Now (${bytes(now.bytes)} live)`, bytes: now.bytes, sites: now.by_site || [], libs: now.by_library || [],
      sitesRest: now.by_site_rest, libsRest: now.by_library_rest, stacks: [], cats: null, modules: null });
    // The device's own live set at its peak, every process's; else (one process, an older
    // report) its process's.
    const pk = (d.peak.by_process || []).length > 1 && d.peak.by_site ? d.peak : pd && pd.peak;
    if (pd) moments.push({ id: "peak", label: `At the peak (${bytes(d.peak.bytes)}, ${A.at(d.peak.time_ns)})`, bytes: d.peak.bytes, sites: pk.by_site || [], libs: pk.by_library || [],
      sitesRest: pk.by_site_rest, libsRest: pk.by_library_rest, stacks: pk.by_stack || [],
      cats: d.categories && d.categories.at_peak, modules: (d.peak && d.peak.by_module) || null, modulesRest: d.peak && d.peak.by_module_rest,
      lines: (d.peak && d.peak.by_line) || (pk && pk.by_line) || [], linesRest: (d.peak && d.peak.by_line_rest) || (pk && pk.by_line_rest), tops: (d.peak && d.peak.by_top_module) || [] });
    ooms.forEach((o, i) => moments.push({ id: `oom${i}`, label: `At OOM ${ooms.length > 1 ? i + 1 + " " : ""}(${A.at(o.time_ns)}, ${bytes(o.live_bytes)} live)`, bytes: o.live_bytes, sites: o.live_by_site || [], libs: o.live_by_library || [],
      sitesRest: o.live_by_site_rest, libsRest: o.live_by_library_rest, stacks: [],
      cats: o.categories || null, modules: o.by_module || null, modulesRest: o.by_module_rest, oom: o }));
    // At the end: what was still live; when a process died, what it held then (the collector's
    // live_at_death), else what was left at exit (leak suspects and what was kept).
    const atExit = d.categories && d.categories.at_exit;
    const dead = (R.live_at_death || []).filter((l) => l.device === d.index);
    const left = dead.length ? dead : (R.leaks || []).filter((l) => l.device === d.index);
    if ((atExit && Object.values(atExit).some((v) => v > 0)) || left.length) {
      const died = dead.length > 0 || ooms.some(A.fatal);
      moments.push({ id: "exit", label: died ? "When it died" : "At exit", bytes: left.reduce((s, l) => s + l.bytes, 0), sites: left.slice(), libs: [], cats: atExit, modules: null, sitesRest: dead.length ? R.live_at_death_rest : R.leaks_rest });
    }
    if (!moments.length) return wrap;
    const tabs = $("div", { class: "tabs", role: "tablist" });
    const panel = $("div", { class: "tabpanel" });
    const show = (m, btn) => {
      tabs.querySelectorAll("button").forEach((b) => b.setAttribute("aria-selected", String(b === btn)));
      panel.dataset.moment = m.id;
      const grid = $("div", { class: "grid2" });
      const card = (t, body) => $("div", { class: "panel" }, $("h3", { text: t }), body);
      const wide = (el) => { el.style.gridColumn = "1 / -1"; return el; };
      if (m.cats && Object.values(m.cats).some((v) => v > 0)) grid.append(card("By category", categoryPanel(m.cats, d.categories && d.categories.order, m.bytes)));
      // A module's line is found among the sites by its text, or as the "(file:line)" of one.
      const siteEntry = (text) => text ? m.sites.find((x) => x.site === text) || m.sites.find((x) => String(x.site || "").endsWith(`(${text})`)) : null;
      if (m.modules && m.modules.length) {
        const c = card("By module", moduleTree(m.modules, m.bytes, siteEntry, m.modulesRest));
        // The top-level modules' totals, as report.json's by_top_module gives them.
        if ((m.tops || []).length) c.append($("div", { class: "muted small", "data-top-modules": String(m.tops.length), text: `Top-level modules: ${m.tops.map((t) => `${t.module} ${bytes(t.bytes)}`).join(", ")}` }));
        grid.append(c);
      } else if (m.oom && m.oom.module) grid.append(card("Module running", $("div", { class: "code", text: m.oom.module })));
      // PyTorch's blocks by the Python line that made them, each line's categories and module.
      if ((m.lines || []).length) {
        const rows = m.lines.map((l) => ({ ...l, module: l.module || "", what: Object.entries(l.categories || {}).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]).map(([k, v]) => `${catLabel(k)} ${bytes(v)}`).join(", ") }));
        // The whole row: a line's path, its module and its categories need the width.
        grid.append(wide(card("By Python line (PyTorch's blocks)", table([{ key: "site", label: "Python line", code: true }, { key: "module", label: "module", code: true, width: "20em" },
          { key: "what", label: "categories", width: "24em" }, { key: "bytes", label: "live", num: true, fmt: bytes }, { key: "count", label: "blocks", num: true, width: "6em" }],
        rows, `${m.id}-lines`, { rest: m.linesRest, restLabel: "lines" }))));
      }
      const site = table([{ key: "site", label: "site (Python line or function)", code: true }, { key: "bytes", label: "live", num: true, fmt: bytes }, { key: "count", label: "blocks", num: true, width: "6em" }],
        m.sites.slice(), m.id === "peak" ? "peak-sites" : (m.id === "exit" ? "exit-sites" : (m.id === "now" ? "now-sites" : "oom-sites")), { expand: (r) => stackList(r.stack), expandable: (r) => (r.stack || []).length > 0, rest: m.sitesRest, restLabel: "sites" });
      grid.append(card("By site", site));
      if (m.libs.length) grid.append(card("By library (who holds it)", table([{ key: "library", label: "library", code: true }, { key: "bytes", label: "live", num: true, fmt: bytes }, { key: "count", label: "blocks", num: true, width: "6em" }],
        m.libs.slice(), m.id === "peak" ? "peak-libraries" : (m.id === "exit" ? "exit-libraries" : (m.id === "now" ? "now-libraries" : "oom-libraries")), { expand: (r) => libraryStacks(r.library, m), expandable: (r) => [m.stacks, m.sites].some((l) => (l || []).some((x) => x.library === r.library && (x.stack || []).length)), rest: m.libsRest, restLabel: "libraries" })));
      panel.replaceChildren(grid);
    };
    moments.forEach((m, i) => {
      const b = $("button", { type: "button", role: "tab", "data-moment": m.id, text: m.label });
      // The reader's choice, kept when a live page renders itself again.
      b.addEventListener("click", () => { wrap.dataset.chosen = m.id; show(m, b); });
      tabs.append(b);
      if (i === 0) setTimeout(() => 0);
    });
    wrap.append(tabs, panel);
    show(moments[0], tabs.firstChild);
    return wrap;
  }

  // ---- icicle graph ---------------------------------------------------------------------------
  // The live set at the peak by stack, outermost frame on top; the interpreter's frames folded.
  // Click a frame to zoom into it, the path above to zoom out; search marks the matching frames.
  function peakTree(peak, unfold = false) {
    const rootNode = { name: "blocks live at the peak", full: "blocks live at the peak", value: 0, children: new Map(), parent: null, folded: 0 };
    const add = (path, value) => {
      let n = rootNode;
      n.value += value;
      for (const item of path) {
        const name = typeof item === "string" ? item : item.label;
        if (!n.children.has(name)) n.children.set(name, { name: typeof item === "string" ? shortName(name) : name, full: typeof item === "string" ? name : item.full, value: 0, children: new Map(), parent: n });
        n = n.children.get(name);
        n.value += value;
      }
    };
    for (const g of peak.by_stack || peak.by_site || []) {
      const visible = visibleFrames(g.stack).filter((f) => !isModuleCall(f));
      const folded = foldDispatcher(visible);
      if (folded.length < visible.length) rootNode.folded++;
      const frames = (unfold ? visible.map(frameLabel) : folded).reverse();
      add(frames.length ? frames : (g.library ? [g.library, g.site || "?"] : [g.site || "?"]), g.bytes);
    }
    // The smallest stacks the page did not keep, as one frame: the graph still sums to the whole.
    const rest = peak.by_stack ? peak.by_stack_rest : peak.by_site_rest;
    if (rest && rest.entries > 0) add([`${rest.entries.toLocaleString("en-US")} smaller stacks`], rest.bytes);
    return rootNode;
  }
  // `rebuild(unfold)`: the tree again with PyTorch's dispatcher unfolded or folded.
  function icicle(tree, rebuild) {
    const wrap = $("div", { class: "icicle-wrap" });
    const search = $("input", { type: "search", placeholder: "Search frames (function, file, library)", "aria-label": "search frames" });
    const found = $("span", { class: "muted small" });
    const crumbs = $("div", { class: "crumbs" });
    const box = $("div", { class: "icicle", role: "img", "aria-label": "icicle graph of the live memory at the peak" });
    const tools = $("div", { class: "icicle-tools" }, search, found);
    if (rebuild && tree.folded) {
      const unfold = $("input", { type: "checkbox", "data-unfold-dispatcher": "1" });
      unfold.addEventListener("change", () => { tree = rebuild(unfold.checked); focus = tree; render(); });
      tools.append($("label", { class: "small" }, unfold, " show PyTorch's dispatcher frames"));
    }
    wrap.append(tools, crumbs, box);
    const palette = ["#93c5fd", "#a5b4fc", "#c4b5fd", "#f9a8d4", "#fcd34d", "#86efac", "#67e8f9"];
    let focus = tree;
    const render = () => {
      box.replaceChildren();
      const total = focus.value || 1;
      const chain = [];
      for (let n = focus; n; n = n.parent) chain.unshift(n);
      crumbs.replaceChildren(...chain.map((n, i) => {
        const b = $("button", { type: "button", class: "crumb", text: `${n.name} (${bytes(n.value)})`, title: n.full });
        b.addEventListener("click", () => { focus = n; render(); });
        return i < chain.length - 1 ? [b, " › "] : [b];
      }).flat());
      let level = [{ node: focus, left: 0 }];
      for (let depth = 0; level.length && depth < 40; depth++) {
        const r = $("div", { class: "icicle-row" });
        const next = [];
        let offset = 0;
        for (const { node, left } of level) {
          if (left > offset) r.append($("div", { class: "icicle-gap", style: `width:${(100 * (left - offset) / total).toFixed(4)}%` }));
          const cell = $("div", { class: "icicle-cell", title: `${node.full}\n${bytes(node.value)} (${pct(node.value / (tree.value || 1))} of the live memory at the peak)`,
            style: `width:${(100 * node.value / total).toFixed(4)}%;background:${palette[depth % palette.length]}` });
          cell.append($("span", { text: `${node.name} ${bytes(node.value)}` }));
          cell._node = node;
          cell.addEventListener("click", () => { focus = node; render(); });
          r.append(cell);
          let childLeft = left;
          // Frames narrower than 0.2 % of the view are left out: thousands of stacks draw fast.
          for (const c of [...node.children.values()].sort((a, b) => b.value - a.value)) {
            if (c.value / total >= 0.002) next.push({ node: c, left: childLeft });
            childLeft += c.value;
          }
          offset = left + node.value;
        }
        box.append(r);
        level = next;
      }
      mark();
    };
    const mark = () => {
      const q = search.value.trim().toLowerCase();
      let hit = 0;
      const counted = new Set();
      const walk = (n, inside) => {
        const m = q && n.full.toLowerCase().includes(q);
        if (m && !inside) hit += n.value;
        for (const c of n.children.values()) walk(c, inside || m);
      };
      if (q) walk(tree, false);
      for (const cell of box.querySelectorAll(".icicle-cell")) {
        const m = q && cell._node.full.toLowerCase().includes(q);
        cell.classList.toggle("hit", !!m);
        cell.classList.toggle("dim", !!q && !m);
      }
      void counted;
      found.textContent = q ? `${bytes(hit)} (${pct(hit / (tree.value || 1))}) under frames matching “${search.value.trim()}”` : "Click a frame to zoom in.";
    };
    search.addEventListener("input", mark);
    if (tree.value > 0) render();
    return wrap;
  }

  // ---- one run --------------------------------------------------------------------------------
  const stat = (label, value, cls, id) =>
    $("div", { class: "stat " + (cls || ""), ...(id ? { "data-stat": id } : {}) },
      $("div", { class: "label", text: label }), $("div", { class: "value", text: value }));
  const launchesOff = (p) => !!(p && p.launches && p.launches.recorded === false);
  // Launches recorded until stopped_ns only (PyTorch's hook marks the iterations itself).
  const launchesStopped = (p, t) => !!(p && p.launches && p.launches.stopped_ns != null && t != null && t >= p.launches.stopped_ns);
  const stoppedWhy = "launch recording stopped once PyTorch's start-up hook marked the iterations; vramtrace run --launches=on keeps it";
  // What the reader must know before the figures: a stand-in run, a run cut short, dropped
  // events, processes not profiled, launches not recorded.
  function runBanners(A, main, title) {
    const R = A.R, run = R.run || {};
    if (run.stand_in) main.append($("div", { class: "banner warn", id: title ? null : "standin", text: "Recorded on the CPU stand-in for CUDA (tests and demo), not on a real GPU." }));
    const running = !!(R.live && R.live.running);
    if (run.complete === false && !running) main.append($("div", { class: "banner bad", text: "The run was cut short: a process ended without flushing (crash, kill or _exit). Everything that left it is shown." }));
    for (const p of run.problems || []) main.append($("div", { class: "banner bad", text: p }));
    if (run.dropped_events) main.append($("div", { class: "banner bad", text: `${run.dropped_events} events were dropped (buffer full).` }));
    const unprofiled = A.procs.filter((p) => p.profiled === false);
    for (const p of unprofiled) main.append($("div", { class: "banner bad", text: `Process ${p.pid} (${base(p.exe)}) was not profiled: ${p.not_profiled_reason}. The device memory it used is unknown and not in this report.` }));
    const noLaunches = A.procs.filter(launchesOff);
    if (noLaunches.length) {
      const who = noLaunches.length < A.procs.length ? ` in process${noLaunches.length > 1 ? "es" : ""} ${noLaunches.map((p) => p.pid).join(", ")}` : "";
      main.append($("div", { class: "banner", id: title ? null : "launches-off", text: `Kernel launches were not recorded${who} (--launches=off): no launch counts, no kernel at the peak, no iterations found by the launch rhythm.` }));
    }
    // --torch=sampled: what the block view lacks, and a peak it did not see.
    for (const p of A.procs) {
      const sm = (p.torch_allocator_trace || {}).sampled;
      if (!sm) continue;
      // By default the trace is sampled where it would cost more than its budget of an
      // iteration: the collector's note says how much.
      const cost = (p.torch_allocator_trace || {}).cost;
      const why = cost && cost.note ? cost.note : "--torch=sampled";
      main.append($("div", { class: "banner", "data-sampled": "gaps", text: `PyTorch's blocks were recorded in the sampled iterations only in process ${p.pid} (${why}): ${sm.gaps.length} stretch${sm.gaps.length === 1 ? "" : "es"} without them, where what was made and freed is known, not when (their blocks are unclassified).` }));
      for (const k of sm.peak_between || []) {
        // A steady run's highest moment traced stands for the peak; else the device's peak in
        // the stretch is shown, where only what lives all through it is known block by block.
        const dev = (A.R.devices || []).find((d) => d.index === k.device);
        const moment = ((dev && dev.categories) || {}).at_peak_moment || {};
        const shown = moment.kind === "allocator_in_use_peak" ? "the blocks shown are of the highest moment traced"
          : "what was made and freed then is unclassified; the blocks shown are those live all through it (parameters, optimizer state)";
        main.append($("div", { class: "banner warn", "data-sampled": "peak", text: `Device ${k.device}: PyTorch's peak of allocated memory, ${bytes(k.bytes)}, came between ${A.at(k.start_ns)} and ${A.at(k.end_ns)}, while the trace was off: ${shown} (--torch=full records every one).` }));
      }
    }
    return { running, unprofiled };
  }
  // The first screen's verdict (the diagnosis'), or why there is none.
  function verdictCard(A, main, title, slot, devices, running, unprofiled, fold) {
    if (devices.length || A.verdictOom) {
      if (A.D) (slot ? slot.summary : main).append(summary(A, title, fold));
    } else if (running && A.R.live.cuda_used === false) {
      // A moment of a running job before its first CUDA work: nothing to draw yet, and why.
      main.append($("section", { class: "card summary", id: "summary", "data-verdict": "no-cuda-yet" },
        $("div", { class: "verdict" }, $("h2", { id: "verdict", text: "The job has not used CUDA yet" }),
          $("div", { class: "verdict-sub", text: "No process of it has created a CUDA context or allocated device memory so far; its memory is shown here from its first CUDA work on." }))));
    } else if (!unprofiled.length) main.append($("div", { class: "banner", text: "No CUDA device memory was used by this run." }));
  }
  // What the collector found left on a device at the end: what was live when a process died
  // (live_at_death), and of leaks[] the leak suspects and the blocks kept across iterations by
  // the forwards (`kept`: the diagnosis' cause, not leaks).
  function leftAtEnd(R, d) {
    const leaks = (R.leaks || []).filter((l) => l.device === d.index);
    return { dead: (R.live_at_death || []).filter((l) => l.device === d.index), suspects: leaks.filter((l) => !l.kept), kept: leaks.filter((l) => l.kept) };
  }
  const countOf = (list) => list.reduce((s, l) => s + l.count, 0);
  const bytesOf = (list) => list.reduce((s, l) => s + l.bytes, 0);
  // A device's headline figures: its peak, limit, headroom, OOMs, leaks, growth and allocator.
  function deviceHeadline(A, d, pd, ooms) {
    const R = A.R;
    const deviceLimit = A.dev === d.index && A.limit ? A.limit : (known(d.total_bytes) ? { bytes: d.total_bytes, kind: "device" } : null);
    const diedHere = ooms.some(A.fatal);
    const { dead, suspects, kept } = leftAtEnd(R, d);
    const reserved = pd && pd.reserved ? pd.reserved.peak_bytes : d.peak.bytes;
    // How close the peak came to the limit: the collector's level (ok, near, over; unknown).
    const level = d.peak.headroom_level;
    const headroom = A.dev === d.index && A.D && known(A.D.headroom_bytes) ? A.D.headroom_bytes : (deviceLimit ? deviceLimit.bytes - d.peak.bytes : null);
    const head = $("div", { class: "headline" },
      stat("Peak in use", bytes(d.peak.bytes), "", "peak"),
      stat("Peak at", A.at(d.peak.time_ns), "", "peak-time"),
      stat(deviceLimit && deviceLimit.kind && deviceLimit.kind !== "device" ? `Limit (${deviceLimit.kind.replace(/_/g, " ")})` : "Capacity", bytes(deviceLimit ? deviceLimit.bytes : d.total_bytes), "", "capacity"),
      stat("Headroom at peak", diedHere ? "none: out of memory" : (known(headroom) && deviceLimit ? `${bytes(headroom)} (${pct(Math.max(0, headroom) / deviceLimit.bytes)})` : "unknown"),
        diedHere || level === "over" ? "bad" : (level === "near" || ooms.length ? "warn" : "ok"), "headroom"),
      stat("Out of memory", ooms.length ? `${ooms.length}× (${bytes(ooms[0].requested_bytes)} asked)` : "no", ooms.length ? "bad" : "ok", "oom"),
      dead.length ? stat("Live when it died", `${countOf(dead)} blocks (${bytes(bytesOf(dead))})`, "", "leaks")
        : stat("Leak suspects", suspects.length ? `${countOf(suspects)} (${bytes(bytesOf(suspects))})` : "none", suspects.length ? "warn" : "ok", "leaks"));
    if (kept.length) head.append(stat("Kept across iterations", `${countOf(kept)} blocks (${bytes(bytesOf(kept))})`, "warn", "kept"));
    // What stream-ordered pools reserved beyond their allocations; a caching allocator's free
    // memory is the "Allocator free at peak" card (and the allocator cache category).
    if (reserved > d.peak.bytes) head.append(stat("Reserved, not in use, at peak", bytes(reserved - d.peak.bytes), "", "slack"));
    const growth = (R.growth || []).filter((g) => g.device === d.index);
    if (growth.length) head.append(stat("Grows per iteration", bytes(growth.reduce((s, g) => s + g.bytes_per_iteration, 0)), "warn", "growth"));
    const alloc = pd && pd.allocator;
    if (alloc && alloc.at_peak) head.append(stat("Allocator free at peak", `${bytes(alloc.at_peak.free_bytes)} in ${alloc.at_peak.free_blocks} blocks`, alloc.at_peak.fragmentation_level === "high" ? "warn" : "", "alloc-free"));
    if (d.peak.phase) head.append(stat("Phase at peak", d.peak.phase, "", "phase"));
    return head;
  }
  // One OOM: its request, the memory then, its findings (each with what to try, in the words
  // the collector chose for the program), the last kernel and the request's stack.
  function oomBox(A, d, o, i, n) {
    const box = $("div", { class: "finding", "data-oom": "1" });
    const total = known(o.total_bytes) ? o.total_bytes : d.total_bytes;
    box.append($("h3", { text: `Out of memory${n > 1 ? " " + (i + 1) : ""} at ${A.at(o.time_ns)}${A.fatal(o) ? ": the process died" : ""}` }));
    // A pool's OOM (api "pool NAME") is a request made to the pool, not by it.
    const api = String(o.api || "");
    const what = [(api.startsWith("pool ") ? `A request of ${bytes(o.requested_bytes)} to ${api.slice(5)}` : `${api} asked for ${bytes(o.requested_bytes)}`) + ` (pid ${o.pid}, thread ${o.thread})`];
    if (o.phase) what.push(`in ${o.phase}${known(o.iteration) ? " of iteration " + o.iteration : ""}`);
    if (o.module) what.push(`in module ${o.module}`);
    box.append($("div", { text: what.join(", ") + "." }));
    if (o.python_site) box.append($("div", { class: "labelled" }, "Python line: ", nameEl("span", o.python_site, "code")));
    // The error the program raised for it, as it printed it (PyTorch's OutOfMemoryError).
    if (o.exception && o.exception.message) box.append($("details", { class: "exception", "data-oom-exception": "1" },
      $("summary", { text: `The program's error: ${o.exception.type || "exception"}` }), $("div", { class: "code muted small", text: o.exception.message })));
    if (o.allocator) box.append($("div", { text: `${o.allocator.pool} could not serve a request of ${bytes(o.allocator.requested_bytes)}.` }));
    if (known(o.free_bytes)) {
      const others = known(o.held_by_others_bytes) ? o.held_by_others_bytes : (known(total) ? Math.max(0, total - o.free_bytes - o.live_bytes) : null);
      box.append($("div", { text: `The driver reported ${bytes(o.free_bytes)} free${known(total) ? " of " + bytes(total) : ""}; this process held ${bytes(o.live_bytes)}` +
        (known(others) ? `; other processes, contexts and the driver held ${bytes(others)}.` : ".") }));
    } else box.append($("div", { text: `This process held ${bytes(o.live_bytes)} when it asked.` }));
    if ((o.findings || []).length) {
      const list = $("ol", { class: "findings", "data-findings": String(o.findings.length) });
      for (const f of o.findings) {
        const li = $("li", { "data-kind": f.kind }, $("div", { class: "finding-title", text: f.title }));
        const ev = evidenceList(f.evidence_shown || f.evidence, A);
        if (ev.length) li.append($("div", { class: "muted", text: "Evidence: " + ev.map((e) => `${e.label}: ${e.value}`).join("; ") }));
        li.append($("div", { text: "Try: " + f.suggestion }));
        list.append(li);
      }
      box.append($("div", { text: "Possible causes, most likely first:" }), list);
    }
    const proc = A.procOf(o.pid);
    if (launchesOff(proc)) box.append($("div", { class: "muted", text: "Last kernel launched before it: not recorded (--launches=off)." }));
    else if (launchesStopped(proc, o.time_ns)) box.append($("div", { class: "muted", text: `Last kernel launched before it: not recorded (${stoppedWhy}).` }));
    else if (o.last_kernel) box.append($("div", { class: "muted labelled" }, "Last kernel launched before it: ", nameEl("span", o.last_kernel, "code")));
    if ((o.stack || []).length) {
      const det = $("details", { class: "stack" }, $("summary", {}, "Stack of the request: ", nameEl("span", o.site || "?", "code"), o.library ? `  [${o.library}]` : ""));
      det.append(stackList(o.stack));
      box.append(det);
    }
    // The largest allocations live when it asked (the driver's; for PyTorch, its segments).
    if ((o.largest_live || []).length) {
      const det = $("details", { class: "segments", "data-oom-largest": String(o.largest_live.length) }, $("summary", { text: `Largest allocations live when it asked: ${plural(o.largest_live.length, "allocation")}` }));
      det.append(table([{ key: "bytes", label: "size", num: true, fmt: bytes }, { key: "site", label: "site", code: true }, { key: "library", label: "library", code: true, width: "12em" },
        { key: "api", label: "api", width: "9em" }, { key: "time_ns", label: "allocated at", num: true, fmt: A.at }],
      o.largest_live.slice(), `oom${i}-largest`, { expand: (r) => stackList(r.stack), expandable: (r) => (r.stack || []).length > 0, rest: o.largest_live_rest, restLabel: "allocations" }));
      box.append(det);
    }
    return box;
  }
  // The allocator's free bytes inside its segments over time and its largest free block
  // (report.json's allocator.free_timeline and largest_free_timeline: each bucket's last
  // figure), as two lines: the gap between them is the free memory in smaller pieces.
  function fragmentationChart(alloc, A) {
    const tl = alloc.free_timeline, lg = alloc.largest_free_timeline;
    if (!tl || !lg || !(tl.points || []).length || !(lg.points || []).length) return null;
    const col = (t, name) => (t.columns || []).indexOf(name);
    const series = (t) => t.points.map((p) => [p[0], p[col(t, "last_bytes")]]);
    const free = series(tl), largest = series(lg);
    const t0 = Math.min(free[0][0], largest[0][0]), t1 = Math.max(free[free.length - 1][0], largest[largest.length - 1][0]);
    const freeMax = Math.max(...free.map((p) => p[1]));
    const top = Math.max(1, freeMax, ...largest.map((p) => p[1]));
    const W = 1000, H = 120;
    const x = (t) => (t1 > t0 ? (t - t0) / (t1 - t0) : 0) * W, y = (v) => H - (v / top) * (H - 4);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
    svg.setAttribute("preserveAspectRatio", "none");
    svg.setAttribute("style", "width:100%;height:120px;display:block");
    const line = (pts, color) => {
      const pl = document.createElementNS(ns, "polyline");
      pl.setAttribute("points", pts.map(([t, v]) => `${x(t).toFixed(1)},${y(v).toFixed(1)}`).join(" "));
      pl.setAttribute("fill", "none");
      pl.setAttribute("stroke", color);
      pl.setAttribute("stroke-width", "1.5");
      pl.setAttribute("vector-effect", "non-scaling-stroke");
      svg.append(pl);
    };
    line(free, "#94a3b8");
    line(largest, "#3b82f6");
    return $("div", { class: "frag-chart", "data-fragmentation-over-time": String(free.length) },
      $("div", { class: "muted small", text: `Over time, from ${A.at(t0)} to ${A.at(t1)}: free inside the segments (grey, at most ${bytes(freeMax)}) and the largest free block (blue); the gap between them is free memory in smaller pieces.` }), svg);
  }
  // What was live at the device's peak in detail: by stack (the icicle), PyTorch's blocks, the
  // largest driver allocations, stream-ordered pools, the allocator's fragmentation, growth and
  // the kernels launched.
  function peakDetails(A, d, pd, proc, card) {
    const R = A.R;
    // Several processes: every process's at the device's peak.
    const pk = (d.peak.by_process || []).length > 1 && d.peak.by_site ? d.peak : pd.peak;
    const tree = peakTree(pk);
    if (tree.value > 0) card.append($("h3", { text: `Live at the peak by stack (interpreter${tree.folded ? ", nn.Module call and PyTorch dispatcher" : " and nn.Module call"} frames folded)` }), icicle(tree, (unfold) => peakTree(pk, unfold)));
    const largest = (pk.largest || []).slice();
    // PyTorch's own blocks (tensors) by category, module and line; the driver's allocations
    // (the caching allocator's segments, each named by whichever line made it) one click away.
    const blocks = (pk.blocks || d.peak.blocks || []).slice();
    let segmentsBox = card;
    if (blocks.length) {
      card.append($("h3", { text: "Largest PyTorch blocks (tensors) live at the peak" }));
      const shown = blocks.map((b) => ({ ...b, category: catLabel(b.category), who: b.name || b.module || "", line: b.site || "(line unknown)",
        when: [b.phase, known(b.iteration) ? `iteration ${b.iteration}` : ""].filter(Boolean).join(", ") }));
      card.append(table([{ key: "bytes", label: "size", num: true, fmt: bytes }, { key: "category", label: "category", width: "11em" },
        { key: "who", label: "tensor or module", code: true }, { key: "line", label: "Python line", code: true }, { key: "when", label: "made in", width: "13em" }],
      shown, "peak-blocks"));
      if (largest.length) {
        segmentsBox = $("details", { class: "segments", "data-segments": "1" }, $("summary", { text: `Driver allocations live at the peak (the caching allocator's segments): the largest ${plural(largest.length, "allocation")}` }));
        card.append(segmentsBox);
      }
    }
    if (largest.length) {
      if (!blocks.length) card.append($("h3", { text: "Largest blocks live at the peak" }));
      segmentsBox.append(table([{ key: "bytes", label: "size", num: true, fmt: bytes }, { key: "site", label: "site", code: true }, { key: "library", label: "library", code: true, width: "12em" },
        { key: "api", label: "api", width: "9em" }, { key: "time_ns", label: "allocated at", num: true, fmt: A.at },
        { key: "last_kernel", label: "last kernel before it", code: true, fmt: (v, r) => launchesOff(proc) || launchesStopped(proc, r.time_ns) ? "not recorded" : String(v ?? "") }],
      largest, "peak-largest", { expand: (r) => stackList(r.stack), expandable: (r) => (r.stack || []).length > 0, rest: pk.largest_rest, restLabel: "blocks" }));
    }
    // The tensors the start-up hook named (parameters, gradients, optimizer state, by their
    // module's names) live at the peak, with their shapes: folded, largest first.
    const tensors = ((pk.tensors || d.peak.tensors || []).slice()).sort((a, b) => (b.bytes || 0) - (a.bytes || 0));
    if (tensors.length) {
      // report.json keeps the largest of them; named_tensors counts them all.
      const all = (pk.tensors ? pk.named_tensors : d.peak.named_tensors);
      const of = known(all) && all > tensors.length ? `the largest ${tensors.length} of ${all} tensors` : plural(tensors.length, "tensor");
      const box = $("details", { class: "segments", "data-tensors": String(tensors.length) }, $("summary", { text: `Named tensors live at the peak (parameters, gradients, optimizer state): ${of}, ${bytes(tensors.reduce((t, x) => t + (x.bytes || 0), 0))}` }));
      box.append(table([{ key: "bytes", label: "size", num: true, fmt: bytes }, { key: "category", label: "category", width: "11em", fmt: (v) => catLabel(v) },
        { key: "name", label: "tensor", code: true }, { key: "shape", label: "shape", width: "12em", fmt: (v) => Array.isArray(v) ? `[${v.join(", ")}]` : String(v ?? "") },
        { key: "dtype", label: "dtype", width: "8em", code: true }], tensors, "peak-tensors"));
      card.append(box);
    }
    if ((pd.pools || []).length) {
      card.append($("h3", { text: "Stream-ordered pools: reserved vs in use" }));
      const slack = Math.max(0, (pd.reserved ? pd.reserved.peak_bytes : 0) - d.peak.bytes);
      card.append($("div", { class: "muted", "data-fragmentation": "1", text: `At the reserved peak the pools held ${bytes(slack)} more than was allocated from them: freed memory the pools keep for reuse, unavailable to other processes.` }));
      card.append(table([{ key: "pool", label: "pool", code: true }, { key: "peak_reserved_bytes", label: "peak reserved", num: true, fmt: bytes },
        { key: "reserved_bytes", label: "reserved at end", num: true, fmt: bytes }, { key: "used_bytes", label: "in use at end", num: true, fmt: bytes }], pd.pools.slice(), "pools"));
    }
    const alloc = pd.allocator;
    if (alloc) {
      card.append($("h3", { text: "Fragmentation: the allocator's view (blocks inside its segments)" }));
      const rows = [["at the in-use peak", alloc.at_peak], ["when most was free", alloc.most_free], ["at the end", alloc.now]]
        .filter(([, f]) => f).map(([when, f]) => ({ when, ...f }));
      card.append(table([{ key: "when", label: "when", width: "11em" }, { key: "reserved_bytes", label: "reserved", num: true, fmt: bytes }, { key: "in_use_bytes", label: "in use", num: true, fmt: bytes },
        { key: "free_bytes", label: "free", num: true, fmt: bytes }, { key: "free_blocks", label: "free blocks", num: true }, { key: "largest_free_block_bytes", label: "largest free block", num: true, fmt: bytes },
        { key: "external_fragmentation", label: "external fragmentation", num: true, width: "10em", fmt: (v) => (100 * v).toFixed(1) + "%" }], rows, "allocator"));
      card.append($("div", { class: "muted small", text: "External fragmentation = 1 − largest free block / free bytes: how much of the allocator's free memory is in pieces smaller than its largest." }));
      const over = fragmentationChart(alloc, A);
      if (over) card.append(over);
      card.append(table([{ key: "name", label: "pool", code: true }, { key: "peak_reserved_bytes", label: "peak reserved", num: true, fmt: bytes },
        { key: "peak_in_use_bytes", label: "peak in use", num: true, fmt: bytes }, { key: "ooms", label: "OOMs", num: true }], (alloc.pools || []).slice(), "allocator-pools"));
    }
    const growth = (R.growth || []).filter((g) => g.device === d.index);
    if (growth.length) {
      card.append($("h3", { text: "Growing across iterations" }));
      card.append($("div", { class: "muted", text: `Iterations: ${proc && proc.iterations ? proc.iterations.count + " (from " + proc.iterations.source + ")" : "unknown"}. What each site allocated in an iteration and still held at the end.` }));
      card.append(table([{ key: "site", label: "site", code: true }, { key: "bytes_per_iteration", label: "per iteration", num: true, fmt: bytes },
        { key: "iterations", label: "iterations", num: true }, { key: "first_iteration", label: "since iteration", num: true }, { key: "since_ns", label: "since", num: true, fmt: A.at },
        { key: "bytes", label: "grown", num: true, fmt: bytes }], growth.slice(), "growth", { expand: (r) => stackList(r.stack), expandable: (r) => (r.stack || []).length > 0, rest: R.growth_rest, restLabel: "growing sites" }));
    }
    card.append($("h3", { text: "Kernels launched" }));
    if (launchesOff(proc))
      card.append($("div", { class: "muted", "data-launches": "off", text: "Not recorded: this run had --launches=off (VRAMTRACE_LAUNCHES=off), so the kernel launches, and the kernel at the peak, are unknown." }));
    else if (((pd.launches || {}).top || []).length) {
      if (pd.launches.stopped_ns != null) card.append($("div", { class: "muted", "data-launches": "stopped", text: `Counted until ${A.at(pd.launches.stopped_ns)} only: ${stoppedWhy}.` }));
      card.append(table([{ key: "name", label: "kernel", code: true }, { key: "launches", label: "launches", num: true }], pd.launches.top.slice(), "kernels"));
    } else card.append($("div", { class: "muted", text: "No kernel launches recorded on this device." }));
    // The driver's memory calls on this device (report.json's devices[].apis), and the pinned
    // host memory of the process (processes[].pinned_host): not device memory, but the same
    // program's.
    const apis = Object.entries(d.apis || {}).map(([api, v]) => ({ api, ...v }));
    if (apis.length) {
      card.append($("h3", { text: "Driver memory calls on this device" }));
      card.append(table([{ key: "api", label: "call", code: true }, { key: "calls", label: "calls", num: true }, { key: "failed", label: "failed", num: true },
        { key: "bytes", label: "bytes asked", num: true, fmt: bytes }, { key: "freed", label: "frees", num: true }], apis, "apis"));
    }
    const pinned = proc && proc.pinned_host;
    if (pinned && pinned.peak_bytes > 0)
      card.append($("div", { class: "muted", "data-pinned-host": "1", text: `Pinned host memory of process ${proc.pid}: at most ${bytes(pinned.peak_bytes)}, ${bytes(pinned.final_live_bytes || 0)} at the end (${Object.entries(pinned.apis || {}).filter(([, v]) => v && v.bytes > 0).map(([k]) => k).join(", ") || "page-locked"}).` }));
  }
  // What allocators kept cached at the end, and what was still live (leak suspects, or what a
  // process that died of out-of-memory never got to free).
  function endOfRun(A, d, card) {
    const R = A.R;
    const retained = (R.retained || []).filter((x) => x.device === d.index);
    if (retained.length) {
      card.append($("h3", { text: "Retained by allocators at exit (cached, not leaked)" }));
      card.append(table([{ key: "pool", label: "pool", code: true }, { key: "retained_bytes", label: "free, cached", num: true, fmt: bytes },
        { key: "reserved_bytes", label: "reserved", num: true, fmt: bytes }, { key: "blocks_in_use", label: "blocks still in use", num: true }], retained.slice(), "retained"));
    }
    const { dead, suspects, kept } = leftAtEnd(R, d);
    const sites = (title, list, id, rest, extra = []) => {
      if (!list.length) return;
      card.append($("h3", { text: title }));
      const rows = list.map((l) => ({ ...l, kept_text: keptKinds[l.kept] || l.kept, sizes_text: (l.sizes || []).map((s) => `${s.count}× ${bytes(s.bytes)}`).join(", ") }));
      card.append(table([{ key: "site", label: "site", code: true }, ...extra, { key: "library", label: "library", code: true, width: "10em" }, { key: "bytes", label: "live", num: true, fmt: bytes }, { key: "count", label: "blocks", num: true, width: "6em" },
        { key: "pid", label: "pid", num: true, width: "6em" }, { key: "sizes_text", label: "sizes", width: "12em" }], rows, id, { expand: (r) => stackList(r.stack), expandable: (r) => (r.stack || []).length > 0, rest, restLabel: "sites" }));
    };
    sites("Live when the process died (it never got to free them: not leaks)", dead, "live-at-death", R.live_at_death_rest);
    // leaks[] was cut to its largest sites as a whole: the rest is said under the last of its tables.
    sites("Leak suspects: still live when the process ended", suspects, "leaks", kept.length ? null : R.leaks_rest);
    sites("Kept across iterations by the forwards (the diagnosis' cause, not leaked)", kept, "kept", R.leaks_rest, [{ key: "kept_text", label: "kept", width: "9em" }]);
  }
  // One device's card: its chart (in the diff's aligned row when it is the diagnosed one), its
  // headline figures, its OOMs, what was live and the details of its peak.
  function deviceCard(A, d, main, title, slot, share, later) {
    const R = A.R;
    let proc = null, pd = null;
    for (const p of A.procs) if (!pd && p.host === d.host) for (const dd of p.devices || []) if (!pd && dd.index === d.index) { proc = p; pd = dd; }
    if (pd) pd._pid = proc.pid;
    const card = $("section", { class: "card", "data-device": String(d.index) });
    card.append($("h2", { text: `Device ${d.index}: ${d.name || "unknown"}${d.host ? " on " + d.host : ""}` }));
    const aligned = slot && d.index === A.dev && !slot.chart.childElementCount;
    const chart = memoryChart(A, d, pd, d.host, title ? 240 : 290, aligned ? share : null);
    if (chart.hasData) {
      const what = d.categories && d.categories.timeline ? "Memory by category over time" : "Live device memory over time";
      if (aligned) slot.chart.append($("h3", { class: "chart-title", text: `${title}: ${what.toLowerCase()}, device ${d.index}` }), chart.box, ...chart.notes);
      else card.append($("h3", { class: "chart-title", text: what }), chart.box, ...chart.notes,
        $("div", { class: "chart-help", text: "Step chart of what was live. Drag to zoom, double-click to reset; keys ← → pan, + − zoom, 0 reset, t theme." }));
      later.push(chart.draw);
    }
    if (d.categories && d.categories.note) card.append($("div", { class: "muted small", text: d.categories.note }));
    const pools = d.categories && privatePoolsLine(d.categories.private_pools);
    if (pools) card.append(pools);
    const ooms = A.oomsOf(d.index);
    card.append(deviceHeadline(A, d, pd, ooms));
    const recovered = (R.oom || []).filter((o) => o.device === d.index && o.recovered);
    if (recovered.length) card.append($("div", { class: "muted", "data-recovered": String(recovered.length), text: `${recovered.length} failed driver allocation(s) were retried after the allocator freed its cache, and then worked: not out-of-memory errors of the program.` }));
    main.append(card);
    ooms.forEach((o, i) => card.append(oomBox(A, d, o, i, ooms.length)));
    card.append($("h3", { text: "What was live" }), breakdown(A, d, pd));
    if ((d.peak.by_process || []).length > 1) {
      card.append($("h3", { text: "Live at the peak, by process" }));
      card.append(table([{ key: "pid", label: "pid", num: true }, { key: "bytes", label: "bytes", num: true, fmt: bytes }], d.peak.by_process.slice(), "peak-processes"));
    }
    if (pd) peakDetails(A, d, pd, proc, card);
    endOfRun(A, d, card);
  }
  // The ranks' peaks, each process's NVTX ranges and the processes.
  function runTables(A, main) {
    const R = A.R;
    if ((R.ranks || []).length) {
      const w = R.worst_rank || {}, im = R.rank_imbalance || {};
      const card = $("section", { class: "card", "data-ranks": String(R.ranks.length) }, $("h2", { text: `Ranks: ${R.ranks.length}` }));
      card.append($("div", { class: "headline" },
        stat("Worst rank", `rank ${w.rank}: ${bytes(w.peak_bytes)}`, "", "worst-rank"),
        stat("Smallest rank peak", bytes(im.min_peak_bytes), "", "min-rank"),
        stat("Spread", bytes(im.spread_bytes), im.imbalance_level === "high" ? "warn" : "ok", "spread"),
        stat("Max / mean", known(im.max_over_mean) ? im.max_over_mean.toFixed(2) : "unknown", im.imbalance_level === "high" ? "warn" : "ok", "imbalance")));
      card.append(table([{ key: "rank", label: "rank", num: true }, { key: "host", label: "host" }, { key: "pid", label: "pid", num: true },
        { key: "peak_device", label: "device", num: true }, { key: "peak_bytes", label: "peak", num: true, fmt: bytes }, { key: "oom", label: "OOMs", num: true }],
      R.ranks.slice(), "ranks"));
      main.append(card);
    }
    for (const p of A.procs) {
      if (!p.phases) continue;
      const card = $("section", { class: "card", "data-phases": String(p.pid) }, $("h2", { text: `Phases (NVTX ranges) of pid ${p.pid}` }));
      if (p.iterations && p.iterations.count) card.append($("div", { class: "muted", text: `Iterations: ${p.iterations.count}, from ${p.iterations.source}.` }));
      else if (launchesOff(p)) card.append($("div", { class: "muted", text: "Iterations: none found; the launch rhythm was not recorded (--launches=off)." }));
      card.append(table([{ key: "name", label: "range", code: true }, { key: "count", label: "times", num: true }, { key: "total_ns", label: "total time", num: true, fmt: secs }],
        (p.phases.by_name || []).slice(), "phases"));
      main.append(card);
    }
    const procs = $("section", { class: "card" }, $("h2", { text: "Processes" }));
    procs.append(table([{ key: "pid", label: "pid", num: true, width: "6em" }, { key: "host", label: "host" }, { key: "cmd", label: "command line", code: true },
      { key: "status", label: "ended", width: "12em" }, { key: "events", label: "events", num: true }, { key: "dropped_events", label: "dropped", num: true }],
    A.procs.map((p) => ({ ...p, cmd: (p.cmdline || []).join(" "), status: A.diedPids.has(p.pid) ? "died: out of memory" : (p.still_running ? "running" : (p.clean_exit ? "exit()" : "cut short")) })), "processes"));
    // What each process's library said of itself (its notices) and the allocations the driver
    // refused, by error: report.json's lists, each on the page.
    for (const p of A.procs) {
      const failed = (p.failed_allocations || []).filter((f) => f && f.count > 0);
      if (failed.length) procs.append($("div", { class: "muted small", "data-failed": String(p.pid), text: `pid ${p.pid}: allocations that failed for another reason than memory: ${failed.map((f) => `${f.error} × ${f.count}`).join(", ")}` }));
      for (const n of (p.notices || []).slice(0, 10)) procs.append($("div", { class: "muted small", "data-notice": String(p.pid), text: `pid ${p.pid}: ${n}` }));
      if ((p.notices || []).length > 10) procs.append($("div", { class: "muted small", text: `pid ${p.pid}: ${p.notices.length - 10} more notices (processes[].notices in report.json)` }));
    }
    if (A.procs.length) main.append(procs);  // none before a job's first CUDA work
  }
  // `vramtrace run --preflight`'s check of its own prediction, from report.json's preflight: per
  // process and device, the first step's reserved peak predicted before it ran beside the one the
  // run recorded over the same two iterations, or why they were not compared.
  function preflightCard(A) {
    const procs = (A.R.preflight && A.R.preflight.processes) || [];
    if (!procs.length) return null;
    const box = $("section", { class: "card", id: "preflight" }, $("h2", { text: "Pre-flight: the first step predicted before it ran" }));
    const ul = $("ul", { class: "preflight" });
    for (const p of procs) {
      const how = `${p.loss === "program" ? "run by the program's own loop on fake tensors, in a copy of the process," : "predicted on fake tensors"} in ${secs((p.fake_step_seconds || 0) * 1e9)} at ${A.at(p.asked_ns)}`;
      for (const d of p.devices || []) {
        const who = `Process ${p.pid}, device ${d.device} (batch ${d.batch})`;
        let text;
        if (!d.predicted) text = `${who}: no prediction: ${d.error || "unknown"}`;
        else {
          text = `${who}: predicted ${bytes(d.predicted_reserved_peak_bytes)} reserved` + (known(d.limit_bytes) ? ` against a limit of ${bytes(d.limit_bytes)} (${d.predicted_fits ? "fits" : "runs out"})` : "") + `, ${how}; `;
          text += d.compared && known(d.error_percent)
            ? `the step took ${bytes(d.recorded_reserved_peak_bytes)} (error ${d.error_percent >= 0 ? "+" : ""}${d.error_percent.toFixed(1)} %; PyTorch reserved, the first two iterations).`
            : `not compared: ${d.not_compared_because || "unknown"}.`;
        }
        ul.append($("li", { "data-compared": d.compared ? "yes" : "no", text }));
      }
      // What the stand-in step assumed of the program's loop (report.json's, the hook's words).
      for (const a of p.assumed || []) ul.append($("li", { class: "muted", "data-assumed": String(p.pid), text: `Process ${p.pid}: assumed ${a}` }));
    }
    box.append(ul);
    return box;
  }

  // `share` (the diff): the verdict and the chart of the diagnosed device go to the slots of
  // this run's side in the aligned rows above the columns. Returns what draws its charts.
  function renderRun(R, main, title, share) {
    const A = analyse(R);
    const slot = share && share.slots[title];
    const later = [];
    const { running, unprofiled } = runBanners(A, main, title);
    const devices = (R.devices || []).slice().sort((a, b) => (a.index === A.dev ? -1 : 0) - (b.index === A.dev ? -1 : 0));
    // A plan's report: the predicted step first; the run's own verdict, of what ran up to the
    // stop, under it.
    const plan = title ? null : planCard(A);
    if (plan) main.append(plan);
    verdictCard(A, main, plan ? "Up to the stop" : title, slot, devices, running, unprofiled,
      plan ? "The run's own diagnosis: its cause and remedies, from what ran up to the stop" : null);
    const preflight = title ? null : preflightCard(A);
    if (preflight) main.append(preflight);
    for (const d of devices) deviceCard(A, d, main, title, slot, share, later);
    runTables(A, main);
    return later;
  }

  // ---- the page -------------------------------------------------------------------------------
  const main = document.getElementById("main");
  let later = [];
  if (DATA.diff) {
    // Two runs side by side, named A and B, with the sites whose live memory changed.
    const { a, b, names, changes } = DATA.diff;
    document.querySelector("header h1").textContent = "vramtrace diff";
    document.getElementById("cmd").textContent = `A: ${names[0]}   B: ${names[1]}`;
    const sum = $("section", { class: "card", id: "diff-changes" }, $("h2", { text: "What changed from A to B" }));
    const rows = [];
    // PyTorch runs: by category, and PyTorch's blocks by the Python line that made them, not the
    // caching allocator's segments (each named by whichever line made it, or by a frame inside
    // the allocator).
    const catRows = [];
    for (const c of changes || []) {
      if (c.torch) {
        for (const k of c.torch.categories || []) if (k.a || k.b) catRows.push({ scope: c.scope, category: k.title, a: k.a, b: k.b, change: k.b - k.a });
        for (const l of c.torch.lines || []) rows.push({ scope: c.scope, site: l.site, what: l.what || "", a: l.a, b: l.b, change: l.b - l.a });
        continue;
      }
      for (const s of c.changes || []) rows.push({ scope: c.scope, site: s.site, a: s.a, b: s.b, change: s.b - s.a });
    }
    const peaks = (changes || []).map((c) => `${c.scope}: A ${bytes(c.a_peak)}, B ${bytes(c.b_peak)} (${known(c.a_peak) && known(c.b_peak) ? (c.b_peak >= c.a_peak ? "+" : "") + bytes(c.b_peak - c.a_peak) : "only in one run"})`);
    for (const p of peaks) sum.append($("div", { class: "diff-peak", text: "Peak of " + p }));
    // The scope column only when the runs have several devices or ranks.
    const oneScope = new Set([...rows, ...catRows].map((r) => r.scope)).size <= 1;
    const signed = (v) => (v > 0 ? "+" : "") + bytes(v);
    if (catRows.length) sum.append(table([...(oneScope ? [] : [{ key: "scope", label: "scope", width: "15em" }]), { key: "category", label: "PyTorch's memory at the peak, by category" },
      { key: "a", label: "A", num: true, fmt: bytes }, { key: "b", label: "B", num: true, fmt: bytes }, { key: "change", label: "change", num: true, fmt: (v) => v ? signed(v) : "-" }], catRows, "diff-categories", { limit: 12 }));
    if (!rows.length) sum.append($("div", { class: "muted", text: "No site's live memory at the peak changed." }));
    sum.append(table([...(oneScope ? [] : [{ key: "scope", label: "scope", width: "15em" }]), { key: "site", label: catRows.length ? "Python line or site whose live memory at the peak changed" : "site whose live memory at the peak changed", code: true },
      ...(catRows.length ? [{ key: "what", label: "holding", width: "22em" }] : []), { key: "a", label: "A", num: true, fmt: bytes }, { key: "b", label: "B", num: true, fmt: bytes },
      { key: "change", label: "change", num: true, fmt: (v) => (v > 0 ? "+" : "") + bytes(v) }], rows, "diff", { limit: 8 }));
    // The two charts on one time axis and one byte axis (the cursor and the zoom of one followed
    // by the other), the verdicts side by side, the sites that changed, then each run's views
    // in its column.
    const cell = (run, what) => $("div", { class: "run-col", "data-run": run, "data-aligned": what });
    const share = { key: "vt-diff", charts: [], slots: { A: { summary: cell("A", "summary"), chart: cell("A", "chart") }, B: { summary: cell("B", "summary"), chart: cell("B", "chart") } } };
    const verdicts = $("div", { class: "side-by-side", id: "diff-verdicts" }, share.slots.A.summary, share.slots.B.summary);
    const chartsRow = $("section", { class: "card", id: "diff-charts" }, $("h2", { text: "Memory over time: A and B on the same axes" }),
      $("div", { class: "side-by-side" }, share.slots.A.chart, share.slots.B.chart),
      $("div", { class: "chart-help", text: "Step charts of what was live, same time and byte scales. Drag to zoom both, double-click to reset; keys ← → pan, + − zoom, 0 reset." }));
    const cols = $("div", { class: "side-by-side" });
    const ca = $("div", { class: "run-col", "data-run": "A" }), cb = $("div", { class: "run-col", "data-run": "B" });
    cols.append(ca, cb);
    chartsRow.insertBefore($("div", { class: "diff-peak-line", text: peaks.map((p) => "Peak of " + p).join("; ") }), chartsRow.children[1]);
    main.append(chartsRow, verdicts, sum, cols);
    later = [...renderRun(a, ca, "A", share), ...renderRun(b, cb, "B", share)];
    if (!share.slots.A.chart.childElementCount && !share.slots.B.chart.childElementCount) chartsRow.remove();
  } else {
    later = renderReport(DATA);
  }
  if (typeof uPlot !== "undefined") for (const f of later) f();
  if (!DATA.diff && DATA.live) live();
  // Ready after the charts' first legends (set in timers queued before this one).
  setTimeout(() => { document.body.dataset.ready = "1"; }, 0);

  // One run's page; returns what draws its charts once it is in the document.
  function renderReport(D) {
    const cmd = ((D.run || {}).command || []).join(" ");
    document.getElementById("cmd").textContent = cmd;
    document.getElementById("cmd").title = cmd;
    return renderRun(D, main, null);
  }

  // ---- a moment of a running job ----------------------------------------------------------------
  // A report of a moment of a running `vramtrace run` (its "live" object): served by --serve, the
  // page asks its server for the report of each moment (page.json, every 2 s, one request at a
  // time) and renders itself again, keeping where the reader is (the scroll, each device's moment
  // tab), until the job has ended and the final report has come; a snapshot's file says when it
  // was taken.
  function rerender(D) {
    const y = window.scrollY;
    const tabs = {};
    main.querySelectorAll("section[data-device]").forEach((sec) => {
      const chosen = sec.querySelector(".breakdown[data-chosen]");
      if (chosen) tabs[sec.dataset.device] = chosen.dataset.chosen;
    });
    for (const c of charts) c.destroy();
    charts.length = 0;
    main.replaceChildren();
    DATA = D;
    const draw = renderReport(D);
    if (typeof uPlot !== "undefined") for (const f of draw) f();
    main.querySelectorAll("section[data-device]").forEach((sec) => {
      const b = tabs[sec.dataset.device] && sec.querySelector(`.tabs button[data-moment="${tabs[sec.dataset.device]}"]`);
      if (b && b.getAttribute("aria-selected") !== "true") b.click();
    });
    window.scrollTo(0, y);
  }
  function live() {
    const status = $("span", { id: "live", class: "live", role: "status" });
    const theme = document.getElementById("theme");
    theme.before(status);
    const clock = (d) => d.toLocaleTimeString("en-GB", { hour12: false });
    const taken = () => { const t = Date.parse(DATA.generated_at); return Number.isFinite(t) ? clock(new Date(t)) : "an unknown time"; };
    const set = (state, text) => { status.dataset.state = state; status.textContent = text; };
    const ended = () => set("ended", "job ended — final report");
    const meta = document.querySelector('meta[name="vramtrace-live"]');
    if (!DATA.live.running) return ended();
    if (!meta || !/^https?:$/.test(location.protocol)) {
      return set("moment", DATA.live.snapshot ? `snapshot ${DATA.live.snapshot} of the running job, taken at ${taken()}` : `the running job at ${taken()}`);
    }
    const params = new URLSearchParams(location.search);
    const id = new Uint32Array(2);
    crypto.getRandomValues(id);
    params.set("client", Array.from(id, (x) => x.toString(16)).join(""));
    const url = `${meta.getAttribute("content") || "page.json"}?${params}`;
    let paused = false, etag = null, updates = 0, failures = 0, timer = null, lastAnswer = new Date();
    const pause = $("button", { type: "button", id: "live-pause", text: "Pause", title: "Stop updating the page (the job runs on)" });
    pause.addEventListener("click", () => {
      paused = !paused;
      pause.textContent = paused ? "Resume" : "Pause";
      clearTimeout(timer);
      if (paused) set("paused", `live — paused at ${clock(new Date())}`);
      else poll();
    });
    theme.before(pause);
    set("live", `live — updated ${clock(lastAnswer)}`);
    // Not while the reader types in the page (a search box): the next answer is rendered then.
    const typing = () => { const a = document.activeElement; return !!a && a.tagName === "INPUT" && main.contains(a); };
    async function poll() {
      let next = 2000;
      try {
        const res = await fetch(url, { cache: "no-store", headers: etag ? { "If-None-Match": etag } : {} });
        if (res.status === 200) {
          const D = unpackFrames(JSON.parse(await res.text()));
          if (paused) return;
          if (typing()) etag = null;
          else { etag = res.headers.get("ETag"); rerender(D); document.body.dataset.updates = String(++updates); }
        } else if (res.status !== 304) throw new Error(`HTTP ${res.status}`);
        if (paused) return;
        failures = 0;
        lastAnswer = new Date();
        if (DATA.live && DATA.live.running === false) { pause.remove(); return ended(); }
        set("live", `live — updated ${clock(lastAnswer)}`);
      } catch (e) {
        failures++;
        set("lost", `live — no answer from vramtrace since ${clock(lastAnswer)}: the job may have ended (its report.html is in the run's folder); trying again`);
        next = Math.min(30000, 2000 * failures);
      }
      timer = setTimeout(poll, next);
    }
    timer = setTimeout(poll, 2000);
  }
})();

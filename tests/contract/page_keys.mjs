// The HTML page reads report.json only through keys the contract declares: each report is
// opened in headless Chromium (as tests/html/html_test.mjs does) with JSON.parse wrapped so
// that every object of a report is a Proxy recording the keys the page reads of it; every key
// read must be a property that report/report.schema.json declares. Keys the page sets on the
// report's objects itself are its own. The reports: stand-in runs of the test programs (an
// OOM, a leak that grows, a fragmented pool, several processes, two devices, PyTorch's
// categories, `vramtrace plan`'s predicted step), a diff page and a snapshot of a running job. The page must read the diagnosis'
// decisions (its OOM, whether it was fatal, its cause and remedies) rather than make its own,
// and every list the reports have (each key of a non-empty array) must be one the page reads.
//   node tests/contract/page_keys.mjs BUILD_DIR
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../report/web/package.json"));
const { chromium } = require("playwright-core");
const build = resolve(process.argv[2] || "build");

// Every property name the schema declares, at any depth.
const declared = new Set();
(function walk(n) {
  if (Array.isArray(n)) return n.forEach(walk);
  if (n && typeof n === "object") {
    for (const k of Object.keys(n.properties || {})) declared.add(k);
    Object.values(n).forEach(walk);
  }
})(JSON.parse(readFileSync(join(here, "../../report/report.schema.json"), "utf8")));

const temps = [];
const env = { ...process.env, LD_LIBRARY_PATH: join(build, "standin") };
function profile(name, argv, extraEnv = {}) {
  const out = mkdtempSync(join(tmpdir(), `vt-keys-${name}-`));
  temps.push(out);
  try {
    execFileSync(join(build, "bin/vramtrace"), ["run", "-o", out, "--", ...argv],
                 { env: { ...env, ...extraEnv }, stdio: "pipe" });
  } catch (e) { /* the program's own exit code is passed through */ }
  return out;
}
const prog = (p) => join(build, "tests/programs", p);
const fakeTorch = join(here, "../programs/fake_torch");
const runs = {
  basic: profile("basic", [prog("basic")]),
  oom: profile("oom", [prog("oom")], { VRAMTRACE_STANDIN_DEVICE_BYTES: "67108864" }),
  leak: profile("leak", [prog("leak_steps"), "step"]),
  frag: profile("frag", [prog("frag_pool")]),
  workers: profile("workers", [prog("workers")]),
  two: profile("two", [prog("two_devices")], { VRAMTRACE_STANDIN_DEVICES: "2" }),
  torch: profile("torch", ["python3", join(here, "../programs/py_torch_train.py")],
                 { PYTHONPATH: fakeTorch, VRAMTRACE_STANDIN_DEVICE_BYTES: String(80 << 20),
                   FAKE_TORCH_CUDART: join(build, "standin/libcudart.so.13"),
                   VRAMTRACE_TORCH_TRACE: "full" }),
};
// `vramtrace plan`: the process stopped before its first training step, the step predicted
// (report.json's plan, which the page's first screen draws).
{
  const out = mkdtempSync(join(tmpdir(), "vt-keys-plan-"));
  temps.push(out);
  try {
    execFileSync(join(build, "bin/vramtrace"),
                 ["plan", "-o", out, "--", "python3", join(here, "../programs/py_torch_plan.py"),
                  "--fraction", "0.875"],
                 { env: { ...env, PYTHONPATH: fakeTorch, VRAMTRACE_STANDIN_DEVICE_BYTES: String(80 << 20),
                          FAKE_TORCH_CUDART: join(build, "standin/libcudart.so.13") }, stdio: "pipe" });
  } catch (e) { /* the report is what is tested */ }
  runs.plan = out;
}
const pages = Object.entries(runs).map(([name, dir]) => [name, join(dir, "report.html")]);
const diffDir = mkdtempSync(join(tmpdir(), "vt-keys-diff-"));
temps.push(diffDir);
try {
  execFileSync(join(build, "bin/vramtrace"),
               ["diff", join(runs.basic, "report.json"), join(runs.leak, "report.json"), "--html",
                join(diffDir, "diff.html")], { stdio: "pipe" });
} catch (e) { /* a regression exits 1; the page is what is tested */ }
pages.push(["diff", join(diffDir, "diff.html")]);
// A snapshot of a running job (cli/live_report.h's "live" object: what is live now, by site and
// library), made from the leak run's report as the launcher would make it while it ran.
{
  const r = JSON.parse(readFileSync(join(runs.leak, "report.json"), "utf8"));
  const d = r.devices[0];
  r.live = { running: true, snapshot: 1, now: [{ host: d.host || "", device: d.index, bytes: d.peak.bytes,
    count: 1, by_site: d.peak.by_site || [], by_library: d.peak.by_library || [],
    by_process: [{ pid: r.processes[0].pid, bytes: d.peak.bytes, count: 1 }] }] };
  for (const p of r.processes) p.still_running = true;
  const dir = mkdtempSync(join(tmpdir(), "vt-keys-live-"));
  temps.push(dir);
  writeFileSync(join(dir, "report.json"), JSON.stringify(r));
  execFileSync(join(build, "bin/vt_render_html"), [join(dir, "report.json"), join(dir, "report.html")]);
  pages.push(["live", join(dir, "report.html")]);
}

// Runs in the page before report.js: the reports' objects become recording proxies.
function record() {
  const read = new Set(), set = new Set();
  window.__vtKeys = { read, set };
  const wrap = (v, inReport) => {
    if (!v || typeof v !== "object") return v;
    const isReport =
        inReport || (!Array.isArray(v) && Object.prototype.hasOwnProperty.call(v, "schema"));
    for (const k of Object.keys(v)) v[k] = wrap(v[k], isReport);
    if (!isReport || Array.isArray(v)) return v;
    return new Proxy(v, {
      get(t, k, r) {
        if (typeof k === "string" && !(k in Object.prototype) && k !== "toJSON" && k !== "then")
          read.add(k);
        return Reflect.get(t, k, r);
      },
      has(t, k) {
        if (typeof k === "string") read.add(k);
        return Reflect.has(t, k);
      },
      set(t, k, v2, r) {
        if (typeof k === "string") set.add(k);
        return Reflect.set(t, k, v2, r);
      },
    });
  };
  const parse = JSON.parse;
  JSON.parse = function (text, reviver) { return wrap(parse.call(JSON, text, reviver), false); };
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"],
});
let failures = 0;
const allRead = new Set();
for (const [name, path] of pages) {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
  const errors = [];
  page.on("pageerror", (e) => errors.push(String(e)));
  await page.addInitScript(record);
  await page.goto("file://" + path);
  await page.waitForSelector("body[data-ready='1']", { timeout: 20000 });
  // Open every collapsed part, so that the code behind it runs too.
  await page.evaluate(() => {
    document.querySelectorAll("details").forEach((d) => { d.open = true; });
  });
  await page.waitForTimeout(200);
  const { read, set } = await page.evaluate(() => ({
    read: [...window.__vtKeys.read], set: [...window.__vtKeys.set] }));
  // DATA.diff: the page tells a diff page (a wrapper of two reports) from a report by it.
  const own = new Set([...set, "diff"]);
  // Not report keys: what the page's copy of the report adds (report/html_report.cpp,
  // page_data(): "<key>_rest" totals of cut lists, the "frames" table) and CUDA API names, the
  // keys of maps that the schema declares through additionalProperties.
  const pageOnly = (k) => k.endsWith("_rest") || k === "frames" || /^cu[A-Z]\w*$/.test(k);
  const undeclared = read.filter((k) => !declared.has(k) && !own.has(k) && !/^\d+$/.test(k) &&
                                        !pageOnly(k));
  read.forEach((k) => allRead.add(k));
  const ok = read.length > 0 && undeclared.length === 0 && errors.length === 0;
  console.log(`${ok ? "PASS" : "FAIL"}  ${name}: ${read.length} report keys read` +
              (undeclared.length
                 ? `; not in report.schema.json: ${undeclared.sort().join(", ")}` : "") +
              (errors.length ? `; page errors: ${errors.join("; ")}` : ""));
  if (!ok) failures++;
  await page.close();
}
await browser.close();
// The collector's decisions the page draws instead of making them: the OOM the verdict is about
// and whether it was fatal (the oom run's diagnosis has both); whether a plan's step and each
// of its remedies fit.
for (const k of ["oom_index", "fatal", "remedies", "cause", "plan", "fits", "over_bytes"]) {
  const ok = allRead.has(k);
  console.log(`${ok ? "PASS" : "FAIL"}  the page reads the collector's ${k}`);
  if (!ok) failures++;
}
// Every list a report has is on the page: each key of a non-empty array in the reports above
// is one the page reads.
const lists = new Set();
(function walkAll(dirs) {
  const walk = (v) => {
    if (Array.isArray(v)) return v.slice(0, 5).forEach(walk);
    if (!v || typeof v !== "object") return;
    for (const [k, x] of Object.entries(v)) {
      if (Array.isArray(x) && x.length) lists.add(k);
      walk(x);
    }
  };
  for (const d of dirs) walk(JSON.parse(readFileSync(join(d, "report.json"), "utf8")));
})(Object.values(runs));
const unread = [...lists].filter((k) => !allRead.has(k)).sort();
console.log(`${unread.length ? "FAIL" : "PASS"}  every list of the reports is on the page (${lists.size} lists)` +
            (unread.length ? `; not read: ${unread.join(", ")}` : ""));
if (unread.length) failures++;
console.log(`${allRead.size} distinct report keys read by the page; ${failures} failure(s)`);
if (!failures) for (const t of temps) rmSync(t, { recursive: true, force: true });
process.exit(failures ? 1 : 0);

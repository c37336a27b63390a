// HTML report tests: reports made from stand-in runs are opened from file:// in headless
// Chromium (Debian's, driven by playwright-core). Asserts the headline figures on the page, no
// console errors, no network requests, and that strings from the traced program render as text.
// Reports with the shapes of real workloads (fixtures.mjs: long C++ names, deep Python stacks,
// tens of thousands of blocks, the analysis fields) are rendered by vt_render_html and checked
// for what a person whose job just died needs on the first screen. Saves screenshots in
// BUILD/tests/html/ (docs/report-oom*.png are copies of them, for the README).
//   node tests/html/html_test.mjs BUILD_DIR
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

import { torchOom, nativeOom, big, longKernel, torchPlan } from "./fixtures.mjs";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../report/web/package.json"));
const { chromium } = require("playwright-core");

const build = resolve(process.argv[2] || "build");
const shots = join(build, "tests/html");
mkdirSync(shots, { recursive: true });
let failures = 0;
const check = (what, ok, detail = "") => {
  console.log(`${ok ? "PASS" : "FAIL"}  ${what}${ok ? "" : "  " + detail}`);
  if (!ok) failures++;
};

const temps = [];  // removed at the end when every check passed
function profile(name, argv, env = {}, options = []) {
  const out = mkdtempSync(join(tmpdir(), `vt-html-${name}-`));
  temps.push(out);
  try {
    execFileSync(join(build, "bin/vramtrace"), ["run", ...options, "-o", out, "--", ...argv], {
      env: { ...process.env, LD_LIBRARY_PATH: join(build, "standin"), ...env }, stdio: "pipe" });
  } catch (e) { /* the command's own exit code is passed through; the report is what we test */ }
  return join(out, "report.html");
}

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});

async function open(path, theme, width = 1366, height = 900) {
  const page = await browser.newPage({ viewport: { width, height }, colorScheme: theme });
  const errors = [], requests = [], dialogs = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith("file://")) requests.push(r.url()); });
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
  await page.goto("file://" + path);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10000 });
  return { page, errors, requests, dialogs };
}

// JSON with its objects' keys sorted (the report writes them sorted): equal data, equal text.
const canon = (x) => JSON.stringify(x, (k, v) => (v && typeof v === "object" && !Array.isArray(v) ? Object.fromEntries(Object.entries(v).sort(([p], [q]) => (p < q ? -1 : 1))) : v));
const stat = (page, id) => page.locator(`[data-stat='${id}'] .value`).first().textContent();

// 1. The bundled example: leak, OOM, pool, 2 GiB stand-in device.
const demo = profile("demo", [join(build, "examples/train_sim")],
                     { VRAMTRACE_STANDIN_DEVICE_BYTES: String(2 * 1024 ** 3) });
check("demo report written", existsSync(demo));
{
  const { page, errors, requests } = await open(demo, "light");
  check("peak shown", (await stat(page, "peak")) === "780.00 MiB", await stat(page, "peak"));
  check("capacity shown", (await stat(page, "capacity")) === "2.00 GiB", await stat(page, "capacity"));
  check("OOM shown with its request", (await stat(page, "oom")).startsWith("1× ("), await stat(page, "oom"));
  check("leak suspects shown", (await stat(page, "leaks")) === "20 (80.00 MiB)", await stat(page, "leaks"));
  check("stand-in labelled", await page.locator("#standin").isVisible());
  check("timeline drawn", (await page.locator("[data-chart='0'] canvas").count()) === 1);
  check("OOM panel", (await page.locator("[data-oom]").count()) === 1);
  check("OOM panel names the free memory", (await page.locator("[data-oom]").textContent()).includes("The driver reported 1.42 GiB free of 2.00 GiB; this process held 592.00 MiB"));
  const cells = await page.locator(".icicle-cell").allTextContents();
  check("icicle graph of the live set at the peak", cells.includes("blocks live at the peak 780.00 MiB") && cells.some((c) => c.startsWith("main ")) && cells.includes("cuMemAllocAsync 192.00 MiB") && !cells.some((c) => c.startsWith("cuMemAlloc_v2") || c.includes("vramtrace::")), cells.join(" | "));
  const chart = page.locator("[data-chart='0']");
  check("step chart to the end of the run with the device's capacity and the peak and OOM marks", (await chart.getAttribute("data-stepped")) === "1" && (await chart.getAttribute("data-marks")) === "2" && Number(await chart.getAttribute("data-x-end-ns")) > 0);
  check("kernel launches listed", (await page.locator("[data-table='kernels'] tbody tr").count()) > 0);
  check("launches recorded: no not-recorded banner", (await page.locator("#launches-off").count()) === 0);
  // Sorting: click "bytes" in the largest-allocations table twice -> ascending.
  const th = page.locator("[data-table='peak-largest'] th.num").first();
  await th.click(); await th.click();
  const first = await page.locator("[data-table='peak-largest'] tbody tr td.num").first().textContent();
  check("table sorts ascending on second click", first === "4.00 MiB", first);
  await page.keyboard.press("t");
  check("theme toggles with t", (await page.evaluate(() => document.documentElement.dataset.theme)) === "dark");
  await page.screenshot({ path: join(shots, "demo-dark.png"), fullPage: false });
  await page.keyboard.press("t");
  await page.screenshot({ path: join(shots, "demo-light.png"), fullPage: true });
  check("no console errors", errors.length === 0, errors.join("; "));
  check("no network requests", requests.length === 0, requests.join(", "));
  await page.close();
}

// 2. Hostile strings: a kernel named render<script>, a command-line argument that is a tag.
const evil = profile("evil", [join(build, "tests/programs/evil_names"), "<img src=x onerror=alert(1)>"]);
{
  const { page, errors, requests, dialogs } = await open(evil, "dark");
  const kernel = await page.locator("[data-table='kernels'] tbody td").first().textContent();
  check("kernel name rendered as text", kernel === "void render<script>(int*)", kernel);
  check("command line rendered as text", (await page.locator("#cmd").textContent()).includes("<img src=x onerror=alert(1)>"));
  check("no element injected", (await page.locator("main img, main script").count()) === 0);
  check("the page holds exactly its own three scripts", (await page.locator("script").count()) === 3);
  check("no dialog opened", dialogs.length === 0, dialogs.join("; "));
  check("no console errors (evil)", errors.length === 0, errors.join("; "));
  check("no network requests (evil)", requests.length === 0, requests.join(", "));
  await page.close();
}

// 2b. --launches=off: the page says launches were not recorded where their counts and the kernel
// at the peak would be; the memory figures are those of the default run.
const noLaunches = profile("nolaunches", [join(build, "tests/programs/basic")], {}, ["--launches=off"]);
{
  const { page, errors } = await open(noLaunches, "light");
  check("launches off: peak as with launches", (await stat(page, "peak")) === "13.00 MiB", await stat(page, "peak"));
  const banner = (await page.locator("#launches-off").count()) ? await page.locator("#launches-off").textContent() : "";
  check("launches off: banner says they were not recorded", banner === "Kernel launches were not recorded (--launches=off): no launch counts, no kernel at the peak, no iterations found by the launch rhythm.", banner);
  const section = (await page.locator("[data-launches='off']").count()) ? await page.locator("[data-launches='off']").textContent() : "";
  check("launches off: kernels section says not recorded, no table", section.startsWith("Not recorded: this run had --launches=off") && (await page.locator("[data-table='kernels']").count()) === 0, section);
  const last = await page.locator("[data-table='peak-largest'] tbody tr").evaluateAll((rows) => rows.map((r) => r.lastElementChild.textContent));
  check("launches off: last kernel before each allocation is not recorded", last.length === 3 && last.every((t) => t === "not recorded"), last.join(" | "));
  check("launches off: no launch series on the chart", !(await page.locator(".u-legend").textContent()).includes("kernel launches per bucket"));
  check("no console errors (launches off)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 3. Ten million events: the report is downsampled in the collector (the exact peak kept), so
// the page stays small.
{
  const dir = mkdtempSync(join(tmpdir(), "vt-html-10m-"));
  execFileSync(join(build, "bin/vt_synth_trace"), [join(dir, "t.vtrace"), "10000000"]);
  execFileSync(join(build, "bin/vramtrace"), ["report", join(dir, "t.vtrace"), "-o", dir], { stdio: "pipe" });
  const t0 = Date.now();
  const { page, errors } = await open(join(dir, "report.html"), "light");
  const ms = Date.now() - t0;
  // The time is printed, not asserted: it is the machine's speed; what keeps it short is
  // asserted (the timeline downsampled, below, and the DOM bounded).
  console.log(`      10M-event report ready in ${ms} ms`);
  check("10M-event report: the DOM stays small", (await page.evaluate(() => document.getElementsByTagName("*").length)) < 5000);
  check("10M-event report keeps the exact peak", (await stat(page, "peak")) === "15.85 GiB", await stat(page, "peak"));
  const rep = JSON.parse(readFileSync(join(dir, "report.json"), "utf8"));
  check("10M-event peak in bytes: 1000 x 16 MiB + 6 x 38 MiB", rep.devices[0].peak.bytes === (1000 * 16 + 6 * 38) * 1048576, String(rep.devices[0].peak.bytes));
  check("10M-event timeline downsampled to at most 2048 points", rep.devices[0].timeline.points.length <= 2048, String(rep.devices[0].timeline.points.length));
  rmSync(dir, { recursive: true, force: true });
  check("no console errors (10M)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 5. The allocator's view: a fragmenting pool (vramtrace.h) and its OOM's ranked findings; growth.
const frag = profile("frag", [join(build, "tests/programs/frag_pool")]);
{
  const { page, errors } = await open(frag, "light");
  const kinds = await page.locator("[data-findings] li").evaluateAll((els) => els.map((e) => e.dataset.kind));
  check("OOM findings listed, fragmentation first", kinds[0] === "fragmentation", kinds.join(","));
  const title = await page.locator("[data-findings] li .finding-title").first().textContent();
  check("finding title with its figures", title === "32.00 MiB reserved by arena was free, in 8 blocks, but the largest (4.00 MiB) is smaller than the request (8.00 MiB)", title);
  const rows = await page.locator("[data-table='allocator'] tbody tr").allTextContents();
  // Both pools of the device summed: 80 MiB reserved, 32 in use, 9 free blocks (8 x 4 MiB in
  // the arena, 16 MiB in the cache), 1 - 16/48 = 66.7 %.
  check("allocator table at the end", rows.includes("at the end80.00 MiB32.00 MiB48.00 MiB916.00 MiB66.7%"), rows.join(" | "));
  const ret = await page.locator("[data-table='retained'] tbody td").first().textContent();
  check("retained pool listed", ret === "arena", ret);
  check("no console errors (frag)", errors.length === 0, errors.join("; "));
  await page.close();
}
const grow = profile("growth", [join(build, "tests/programs/leak_steps"), "nvtx"]);
{
  const { page, errors } = await open(grow, "light");
  check("growth per iteration in the headline", (await stat(page, "growth")) === "1.00 MiB", await stat(page, "growth"));
  check("phase at the peak", (await stat(page, "phase")) === "train_step", await stat(page, "phase"));
  const site = await page.locator("[data-table='growth'] tbody td.code").first().textContent();
  check("growing site listed", site.startsWith("keep_history() (") && site.endsWith("leak_steps.cu:24)"), site);
  const phase = await page.locator("[data-table='phases'] tbody tr").first().textContent();
  check("NVTX phases listed", phase.startsWith("train_step10"), phase);
  check("no console errors (growth)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 4. Stacks: who holds the memory (library table) and the stack of the largest allocation.
const chain = profile("stacks", [join(build, "tests/programs/callchain")]);
{
  const { page, errors } = await open(chain, "light");
  const lib = await page.locator("[data-table='peak-libraries'] tbody td.code").first().textContent();
  check("library breakdown shown", lib === "callchain", lib);
  await page.locator("[data-table='peak-libraries'] tbody tr button.twisty").first().click();
  const libStack = await page.locator("[data-table='peak-libraries'] tr.detail").first().innerText();
  check("a library's row expands to the stacks through which it held memory", libStack.includes("allocate_weights") && libStack.includes("callchain.cu:8"), libStack.slice(0, 300));
  const summary = await page.locator("[data-table='peak-largest'] tbody td.code").first().textContent();
  check("largest allocation's stack summarised by its site", summary.includes("allocate_weights(unsigned long)") && summary.includes("callchain.cu:8"), summary);
  await page.locator("[data-table='peak-largest'] button.twisty").first().click();
  const frames = await page.locator("[data-table='peak-largest'] tr.detail li").allTextContents();
  check("stack frames listed", frames.some((f) => f.startsWith("main (") && f.endsWith("callchain.cu:19)")), frames.join(" | "));
  check("no console errors (stacks)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 6. A process vramtrace could not profile (CUPTI held by another tool): the page says so in a
// banner, with the reason, instead of showing an empty device as if nothing was used.
const unprof = profile("unprofiled", [join(build, "tests/programs/basic")],
                       { VRAMTRACE_STANDIN_CUPTI_BUSY: "nsys<b>" });
{
  const { page, errors } = await open(unprof, "light");
  const banners = await page.locator(".banner.bad").allTextContents();
  check("not-profiled banner with the reason", banners.length === 1 &&
        /^Process \d+ \(basic\) was not profiled: CUPTI is already held by another tool \(nsys<b>\); this process runs without memory profiling\. The device memory it used is unknown and not in this report\.$/.test(banners[0]),
        banners.join(" | "));
  check("the holder's name rendered as text", (await page.locator("main b").count()) === 0);
  check("no console errors (unprofiled)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 6b. The allocator trace sampled on the stand-in PyTorch (tests/programs/py_torch_sampled.py
// inner: step 75 widens its batch inside the model, its inputs as every step's, so the trace
// stays off), as the default samples it where it would cost more than its budget (0 here:
// always): banners for the trace's gaps, saying why, and for PyTorch's peak that came in one;
// the device's peak, inside a gap, has what is not known unclassified.
const srcDir = resolve(here, "../..");
const sampledRun = profile("sampled", ["python3", join(srcDir, "tests/programs/py_torch_sampled.py"), "inner"], {
  FAKE_TORCH_CUDART: join(build, "standin/libcudart.so.13"),
  PYTHONPATH: join(srcDir, "tests/programs/fake_torch"),
  VRAMTRACE_STANDIN_DEVICE_BYTES: String(80 << 20), VRAMTRACE_TORCH_TRACE_BUDGET: "0" });
{
  const { page, errors } = await open(sampledRun, "light");
  const gaps = await page.locator("[data-sampled='gaps']").allTextContents();
  check("sampled: a banner for the gaps", gaps.length === 1 && /^PyTorch's blocks were recorded in the sampled iterations only in process \d+ \(the trace would cost [\d.]+ % of an iteration, 3 blocks in [\d.]+ ms, over its budget of 0 %; --torch=full records every one\): 2 stretches without them, where what was made and freed is known, not when \(their blocks are unclassified\)\.$/.test(gaps[0]), gaps.join(" | "));
  const peak = await page.locator("[data-sampled='peak']").allTextContents();
  check("sampled: a banner for the peak between the windows", peak.length === 1 && /^Device 0: PyTorch's peak of allocated memory, 18\.50 MiB, came between [\d.]+ ms and [\d.]+ ms, while the trace was off: what was made and freed then is unclassified; the blocks shown are those live all through it \(parameters, optimizer state\)/.test(peak[0]), peak.join(" | "));
  const peakCats = await page.locator("[data-table='peak-blocks'] tbody tr td:nth-child(2)").allTextContents();
  check("sampled: the blocks at the peak are those known all through the gap", peakCats.join(",") === "parameters,parameters,optimizer state,optimizer state", peakCats.join(","));
  const legend = await page.locator(".u-legend").textContent();
  check("sampled: at the peak, unclassified 16 MiB beside parameters and optimizer state", /unclassified:?\s*16\.00 MiB/.test(legend) && /parameters:?\s*2\.00 MiB/.test(legend) && /optimizer state:?\s*2\.00 MiB/.test(legend) && /gradients:?\s*0 B/.test(legend), legend);
  check("no console errors (sampled)", errors.length === 0, errors.join("; "));
  await page.screenshot({ path: join(shots, "sampled.png") });
  await page.close();
}

// ---- reports with the shapes of real workloads --------------------------------------------------
function render(name, report) {
  const dir = mkdtempSync(join(tmpdir(), `vt-html-${name}-`));
  temps.push(dir);
  writeFileSync(join(dir, "report.json"), JSON.stringify(report));
  execFileSync(join(build, "bin/vt_render_html"), [join(dir, "report.json"), join(dir, "report.html")]);
  return join(dir, "report.html");
}
// Layout checks any page must pass: no text "NaN"/"undefined"; no table cell narrower than what
// it holds (figures and short labels never cut; long names cut with an ellipsis but keep room);
// no table row taller than two lines (a long name does not make a row a screen high).
async function layout(page, what) {
  const text = await page.locator("body").innerText();
  check(`${what}: no NaN or undefined on the page`, !/\bNaN\b|\bundefined\b/.test(text), (text.match(/.{0,40}(NaN|undefined).{0,40}/) || [""])[0]);
  const bad = await page.evaluate(() => {
    const out = [];
    for (const c of document.querySelectorAll("main table td, main table th")) {
      if (!c.offsetParent || c.closest("tr.detail")) continue;
      if (c.classList.contains("code")) { if (c.clientWidth < 72) out.push(`code cell ${c.clientWidth}px: ${c.textContent.slice(0, 40)}`); continue; }
      if (c.scrollWidth > c.clientWidth + 1) out.push(`${c.tagName} ${c.clientWidth}<${c.scrollWidth}: ${c.textContent.slice(0, 40)}`);
    }
    for (const r of document.querySelectorAll("main table tbody tr:not(.detail)")) if (r.offsetParent && r.getBoundingClientRect().height > 48) out.push(`row ${Math.round(r.getBoundingClientRect().height)}px: ${r.textContent.slice(0, 60)}`);
    return out;
  });
  check(`${what}: every column as wide as its content, rows at most two lines`, bad.length === 0, bad.slice(0, 5).join(" | "));
}
const inFirstScreen = (page, sel) => page.locator(sel).first().evaluate((e) => { const r = e.getBoundingClientRect(); return r.height > 0 && r.top >= 0 && r.bottom <= window.innerHeight; });

// 7. A PyTorch ResNet-50 that died of OOM under its per-process memory fraction.
const torchRep = torchOom();
const torchHtml = render("torch", torchRep);
for (const width of [1400, 1000]) {
  const { page, errors, requests } = await open(torchHtml, "light", width, 900);
  const w = `torch OOM at ${width} px`;
  const verdict = await page.locator("#verdict").textContent();
  // One clock: the OOM 2.5635 s after the start is 1.363 s after the first CUDA work (1.2 s).
  check(`${w}: the verdict says it died of OOM, when and where`, verdict === "Out of memory: the program died on device 0 at 1.363 s", verdict);
  const sub = await page.locator(".verdict-sub").first().textContent();
  check(`${w}: the verdict names the request, the live memory and the effective limit`, sub.startsWith("It asked for 2.00 GiB while ") && sub.includes("against a limit of 16.00 GiB") && sub.includes("The limit is PyTorch's per-process memory fraction (16.00 GiB)."), sub);
  check(`${w}: the verdict says which clock its time is on`, sub.endsWith(" Times count from the first CUDA work, 1.200 s after the start."), sub);
  const clocks = await page.evaluate(() => [document.querySelector("[data-stat='peak-time'] .value").textContent, document.querySelector("[data-oom] h3").textContent,
    [...document.querySelectorAll(".tabs button")].map((b) => b.textContent).join(" | ")]);
  check(`${w}: the peak, the OOM and the moments on the same clock`, clocks[0] === "1.361 s" && clocks[1] === "Out of memory at 1.363 s: the process died" && clocks[2].includes("At the peak (15.23 GiB, 1.361 s)") && clocks[2].includes("At OOM (1.363 s, "), JSON.stringify(clocks));
  if (width === 1400) {
    for (const sel of ["#verdict", "#cause", "#remedies", "[data-chart='0'] canvas"]) check(`${w}: ${sel} on the first screen`, await inFirstScreen(page, sel));
  } else {
    for (const sel of ["#verdict", "#cause", "#remedies"]) check(`${w}: ${sel} on the first screen`, await inFirstScreen(page, sel));
  }
  const cause = await page.locator("#cause").innerText();
  check(`${w}: the cause with its evidence in human units`, cause.includes("Activations of the forward pass filled the memory") && /activations live\s+\d+\.\d\d GiB/.test(cause) && cause.includes("request\t2.00 GiB") || cause.includes("request\n2.00 GiB"), cause);
  const rem = await page.locator("#remedies > ol > li").evaluateAll((ls) => ls.map((l) => [l.dataset.kind, l.querySelector(".saves")?.textContent]));
  check(`${w}: the remedies headed as advice after the OOM`, (await page.locator("#remedies > h3").textContent()) === "What to try");
  check(`${w}: the top three remedies with what each saves`, rem.length === 3 && rem[0][0] === "mixed_precision" && /^saves ~\d+\.\d\d GiB$/.test(rem[0][1]) && rem[2][0] === "smaller_batch", JSON.stringify(rem));
  const headroom = await page.locator("[data-stat='headroom']").first();
  check(`${w}: no green headroom for a job that died at its limit`, (await headroom.locator(".value").textContent()) === "none: out of memory" && (await headroom.getAttribute("class")).includes("bad"));
  check(`${w}: what was live when it died is not called leaks`, (await page.locator("[data-stat='leaks'] .label").textContent()) === "Live when it died");
  check(`${w}: the capacity stat is the effective limit`, (await stat(page, "capacity")) === "16.00 GiB" && (await page.locator("[data-stat='capacity'] .label").textContent()) === "Limit (per process fraction)");
  const chart = page.locator("[data-chart='0']");
  check(`${w}: the chart is a step chart spanning the run, with the limit and every mark`, (await chart.getAttribute("data-stepped")) === "1" && Number(await chart.getAttribute("data-x-end-ns")) === torchRep.run.duration_ns &&
        Number(await chart.getAttribute("data-limit")) === 16 * 1024 ** 3 && (await chart.getAttribute("data-marks")) === "2");
  const ticks = (await chart.getAttribute("data-yticks")).split(",");
  check(`${w}: the memory axis has round binary ticks`, ticks.length >= 3 && ticks.every((t) => /^(0|\d+ (KiB|MiB|GiB))$/.test(t)) && ticks.includes("16 GiB"), ticks.join(","));
  const legend = await page.locator(".u-legend").first().textContent();
  check(`${w}: the chart is stacked by category`, ["parameters", "gradients", "optimizer state", "activations", "allocator cache"].every((c) => legend.includes(c)), legend);
  check(`${w}: private pools in the legend by their title`, legend.includes("CUDA-graph / private pools"), legend);
  const pools = await page.locator("[data-private-pools]").first().textContent();
  check(`${w}: which private pools are CUDA graphs'`, pools === "Private pools at the end (counted whole, free bytes included, as CUDA-graph / private pools): CUDA graph pool (1, 0) 96.00 MiB in 3 segments, 80.00 MiB in use; private pool (0, 1) 32.00 MiB in 1 segment, 0 B in use.", pools);
  const siteCell = page.locator("[data-table='peak-sites'] tbody td.code").first();
  check(`${w}: a site's file by its name, the whole path on hover`, /^forward \(resnet\.py:\d+\)$/.test(await siteCell.textContent()) &&
        (await siteCell.getAttribute("title")).startsWith("forward (/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:"), await siteCell.textContent());
  // Every list report.json has: PyTorch's blocks by Python line with their categories and
  // module, the top-level modules' totals, the largest allocations live at the OOM.
  const lines = await page.locator("[data-table='peak-lines'] tbody tr").evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => c.textContent)));
  check(`${w}: the peak's Python lines, each with its module and categories`, lines.length === 3 && lines[0][0] === "/work/resnet/train.py:88" && lines[0][1] === "layer3.0.conv2" &&
        /^activations \d+\.\d\d GiB$/.test(lines[0][2]) && lines[1][2].startsWith("optimizer state "), JSON.stringify(lines));
  const catTitles = await page.locator("[data-table='categories'] tbody tr td:first-child").allTextContents();
  check(`${w}: the categories by the collector's titles`, catTitles.includes("allocator cache (reserved, free)") && catTitles.includes("optimizer state"), JSON.stringify(catTitles));
  const tops = await page.locator("[data-top-modules]").textContent();
  check(`${w}: the top-level modules' totals`, tops.startsWith("Top-level modules: layer3 ") && tops.includes(", fc "), tops);
  const apiRow = await page.locator("[data-table='apis'] tbody tr").first().evaluate((r) => [...r.children].map((c) => c.textContent).join(" | "));
  check(`${w}: the driver's memory calls on the device`, apiRow === "cuMemAlloc | 82 | 1 | 8.14 GiB | 3", apiRow);
  const frag = page.locator("[data-fragmentation-over-time='3']");
  check(`${w}: the allocator's free memory and largest free block over time`, (await frag.count()) === 1 && (await frag.locator("polyline").count()) === 2 &&
        (await frag.locator("div").first().textContent()).includes("at most 2.00 GiB"), `${await frag.count()} ${await frag.locator("polyline").count()} ${await page.locator("[data-fragmentation-over-time]").count()}`);
  const evidence = await page.locator("[data-oom] ol.findings li .muted").first().textContent();
  check(`${w}: a finding's evidence as the collector words and types it`, /^Evidence: live in this process: [\d.]+ GiB; requested: 2\.00 GiB; the GPU's capacity: [\d.]+ GiB; free blocks: 9; external fragmentation: 25 ?%; largest live sites: forward \(resnet\.py:150\) \(1\.00 GiB\)$/.test(evidence), evidence);
  check(`${w}: the program's own error at the OOM, folded`, (await page.locator("[data-oom-exception] summary").first().textContent()) === "The program's error: torch.OutOfMemoryError" &&
        (await page.locator("[data-oom-exception] div").first().textContent()).startsWith("CUDA out of memory. Tried to allocate 2.00 GiB."));
  check(`${w}: the largest allocations live at the OOM`, (await page.locator("[data-oom-largest='5'] [data-table='oom0-largest'] tbody tr").count()) === 5);
  const kernel = page.locator("[data-table='kernels'] tbody td.code").first();
  check(`${w}: a long kernel name shown short, the full name on hover`, (await kernel.textContent()) === "at::native::elementwise_kernel<…>" && (await kernel.getAttribute("title")) === longKernel(0), await kernel.textContent());
  const kernelNames = await page.locator("[data-table='kernels'] tbody td.code").allTextContents();
  check(`${w}: kernels with lambdas and call operators in their templates shown short too`,
        kernelNames.includes("at::native::vectorized_elementwise_kernel<…>") && kernelNames.every((k) => k.length <= 60), kernelNames.slice(0, 4).join(" | "));
  await kernel.click();
  check(`${w}: a click shows the full name`, (await kernel.textContent()) === longKernel(0));
  await kernel.click();
  const oomLine = await page.locator("[data-oom] > div").first().textContent();
  check(`${w}: an allocator's OOM reads as a request made to it`, /^A request of 2\.00 GiB to PyTorch caching allocator \(pid \d+, thread \d+\), in forward of iteration 3, in module layer4\.0\.conv2\.$/.test(oomLine), oomLine);
  const cells = await page.locator(".icicle-cell").allTextContents();
  check(`${w}: the icicle graph folds CPython's and the C runtime's frames`, cells.length > 10 && !cells.some((c) => /^(_PyEval|_PyObject|slot_tp|_start|__libc_start|Py_BytesMain|python3|_PyFunction)/.test(c)) &&
        cells.some((c) => c.startsWith("<module> (train.py:140)")) && cells.some((c) => c.startsWith("forward (resnet.py:150)")) &&
        cells.some((c) => c.startsWith("aten::conv2d ")), cells.slice(0, 12).join(" | "));
  check(`${w}: the icicle graph folds PyTorch's dispatcher into the operator it serves`,
        cells.some((c) => c.startsWith("aten::batch_norm ")) && !cells.some((c) => /^(c10::|at::_ops::|at::native::|torch::autograd::)/.test(c)),
        cells.filter((c) => /^(aten|c10|at::)/.test(c)).slice(0, 6).join(" | "));
  const opTitle = await page.locator(".icicle-cell", { hasText: "aten::conv2d" }).first().getAttribute("title");
  check(`${w}: the operator's box says what it folds`, opTitle.startsWith("aten::conv2d: 18 native frames of PyTorch folded (its dispatcher, kernels and caching allocator), outermost torch::autograd::THPVariable_conv2d"), opTitle);
  await page.locator("[data-unfold-dispatcher]").check();
  const unfolded = await page.locator(".icicle-cell").allTextContents();
  check(`${w}: a box unfolds the dispatcher's frames`, unfolded.some((c) => c.startsWith("at::_ops::conv2d::call ")) && unfolded.some((c) => c.startsWith("c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc ")) && !unfolded.some((c) => c.startsWith("aten::")),
        unfolded.filter((c) => /^(aten|c10|at::)/.test(c)).slice(0, 6).join(" | "));
  await page.locator("[data-unfold-dispatcher]").uncheck();
  const blockRows = await page.locator("[data-table='peak-blocks'] tbody tr").evaluateAll((rows) => rows.slice(0, 2).map((r) => [...r.children].map((c) => c.textContent).join(" | ")));
  check(`${w}: the largest PyTorch blocks by size, category, module and line`,
        blockRows[0] === "280.00 MiB | activations | layer3.0.conv1 | /work/resnet/train.py:88 | forward, iteration 3" && blockRows[1] === "280.00 MiB | activations | layer3.0.conv2 | /work/resnet/train.py:88 | forward, iteration 3", blockRows.join(" / "));
  const segments = page.locator("[data-segments]");
  check(`${w}: the driver's segments one click away, closed`, (await segments.count()) === 1 && !(await segments.evaluate((e) => e.open)) &&
        (await segments.locator("summary").textContent()) === "Driver allocations live at the peak (the caching allocator's segments): the largest 30 allocations" &&
        (await segments.locator("[data-table='peak-largest']").count()) === 1);
  const named = page.locator("[data-tensors]");
  const tensorRows = await named.locator("[data-table='peak-tensors'] tbody tr").evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => c.textContent).join(" | ")));
  check(`${w}: the named tensors at the peak, folded, largest first with shape and dtype`, (await named.count()) === 1 && !(await named.evaluate((e) => e.open)) &&
        (await named.locator("summary").textContent()) === "Named tensors live at the peak (parameters, gradients, optimizer state): the largest 3 of 212 tensors, 20.00 MiB" &&
        tensorRows.length === 3 && tensorRows[0] === "8.00 MiB | parameters | fc.weight | 1000x2048 | float32" && tensorRows[1] === "8.00 MiB | optimizer state | fc.weight.exp_avg | 1000x2048 | float32",
        tensorRows.join(" / "));
  const offset = await page.locator("[data-time-offset]").first().textContent();
  check(`${w}: the time axis starts at the first CUDA work and says where that was`,
        offset === "Time from the first CUDA work of the job, 1.200 s after it started (the 1.200 s before it are left out), as every time on this page." &&
        (await chart.getAttribute("data-x-start-ns")) === "1200000000", offset);
  check(`${w}: the icicle graph folds nn.Module's call machinery`, !cells.some((c) => /^(_call_impl|_wrapped_call_impl|inner) \(module\.py:/.test(c)), cells.filter((c) => c.includes("module.py")).slice(0, 4).join(" | "));
  await page.locator(".icicle-cell", { hasText: "main (train.py:131)" }).first().click();
  await page.locator(".icicle-cell", { hasText: "train_step (train.py:88)" }).first().click().catch(() => {});
  const crumbs = await page.locator(".crumbs .crumb").count();
  check(`${w}: a click on a frame zooms into it`, crumbs >= 2, String(crumbs));
  await page.locator(".crumbs .crumb").first().click();
  await page.locator(".icicle-tools input[type=search]").fill("conv.py");
  const found = await page.locator(".icicle-tools span").textContent();
  check(`${w}: search marks the frames and sums their memory`, /^\d+\.\d\d GiB \(\d+ %\) under frames matching “conv.py”$/.test(found) && (await page.locator(".icicle-cell.hit").count()) > 0, found);
  const tabs = await page.locator(".tabs button").allTextContents();
  check(`${w}: breakdown at the peak, at the OOM and when it died`, tabs.length === 3 && tabs[0].startsWith("At the peak") && tabs[1].startsWith("At OOM") && tabs[2] === "When it died", tabs.join(" | "));
  const catRows = await page.locator("[data-table='categories'] tbody tr").allTextContents();
  check(`${w}: by category at the peak, largest first`, catRows[0].startsWith("activations"), catRows.join(" | "));
  check(`${w}: by module, a tree sized by bytes`, (await page.locator(".modtree").first().getAttribute("data-modules")) === "64" && (await page.locator(".modtree .modname").first().textContent()) === "layer3");
  // A module's leaf expands to the line that ran it and the stack recorded at that line.
  await page.locator(".modtree .modkids details:not(.modleaf) > summary").first().click();
  const leaf = page.locator(".modtree details.modleaf").first();
  const leafName = await leaf.locator(".modname").textContent();
  await leaf.locator("summary").click();
  const leafText = await leaf.locator(".moddetail").innerText();
  check(`${w}: a module's leaf expands to its line and stack`, /^layer3\.\d\.(conv[123]|bn3)$/.test(leafName) && /^activations [\d.]+ (MiB|GiB)\nRun from (resnet\.py:1\d\d|forward \(resnet\.py:1\d\d\)): /.test(leafText) && leafText.includes("_conv_forward (conv.py:549)") && leafText.includes("interpreter frames folded"), `${leafName}: ${leafText.slice(0, 300)}`);
  await page.locator("[data-table='peak-sites'] button.twisty").first().click();
  const frames = await page.locator("[data-table='peak-sites'] tr.detail li").allTextContents();
  check(`${w}: a site expands to its stack, interpreter frames folded`, frames.includes("5 interpreter frames folded") && frames.some((f) => f.startsWith("forward (resnet.py:")) && !frames.some((f) => f.startsWith("_PyEval")), frames.slice(0, 6).join(" | "));
  await page.locator(".tabs button").nth(1).click();
  check(`${w}: the OOM tab shows what was live then`, (await page.locator(".tabpanel").getAttribute("data-moment")) === "oom0" && (await page.locator("[data-table='oom-sites'] tbody tr").count()) === 25);
  await page.locator(".tabs button").first().click();
  const oomText = await page.locator("[data-oom]").textContent();
  check(`${w}: the OOM panel with phase, module and the driver's figures`, oomText.includes("in forward of iteration 3, in module layer4.0.conv2") && /free of 140\.40 GiB; this process held [\d.]+ GiB; other processes, contexts and the driver held 1\.10 GiB/.test(oomText), oomText.slice(0, 400));
  await page.evaluate(() => window.scrollTo(0, 0));
  await layout(page, w);
  await page.screenshot({ path: join(shots, width === 1400 ? "report-oom.png" : "report-oom-1000.png") });
  if (width === 1400) await page.screenshot({ path: join(shots, "report-oom-full.png"), fullPage: true });
  check(`no console errors (${w})`, errors.length === 0, errors.join("; "));
  check(`no network requests (${w})`, requests.length === 0, requests.join(", "));
  await page.close();
}
// Without JavaScript: the <noscript> summary written by the C++ side.
{
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 }, javaScriptEnabled: false });
  await page.goto("file://" + torchHtml);
  const text = await page.locator("body").innerText();
  check("JavaScript off: the times on the page's clock, and which", text.includes("Times count from the first CUDA work, 1.200 s after the start") &&
        text.includes("): peak 15.23 GiB at 1.361 s of ") && text.includes("Out of memory on device 0 at 1.363 s: "), text.slice(0, 600));
  check("JavaScript off: the summary says what happened", text.includes("Out of memory: the program died") && text.includes("Limit: PyTorch's per-process memory fraction (16.00 GiB) (16.00 GiB)") &&
        text.includes("Device 0 (NVIDIA H200): peak ") && text.includes("asked for 2.00 GiB") && text.includes("Likely cause: Activations of the forward pass") && text.includes("What to try:") && text.includes("Train in bf16 with autocast (saves about"), text.slice(0, 600));
  await page.close();
}

// 7b. The same job with a batch that fits: the verdict is the peak against the effective limit.
{
  const r = torchOom();
  r.oom = []; r.leaks = []; r.live_at_death = [];
  r.processes[0].clean_exit = true; r.processes[0].exit_code = 0;
  r.diagnosis = { ...r.diagnosis, verdict: "peak", headroom_bytes: 16 * 1024 ** 3 - r.devices[0].peak.bytes, cause: null, fatal_ooms: 0, recovered_ooms: 2 };
  delete r.diagnosis.oom_index; delete r.diagnosis.fatal;
  const peakHtml = render("torch-peak", r);
  const { page, errors } = await open(peakHtml, "light", 1400, 900);
  const verdict = await page.locator("#verdict").textContent();
  check("torch peak: the verdict is the peak against the limit", verdict === "Peak 15.23 GiB of 16.00 GiB (95 %) on device 0 at 1.361 s", verdict);
  const sub = await page.locator(".verdict-sub").textContent();
  check("torch peak: the headroom under the limit and the retried allocations", sub === "790.34 MiB headroom left under PyTorch's per-process memory fraction (16.00 GiB). 2 allocations failed and worked when retried after the allocator freed its cache. Times count from the first CUDA work, 1.200 s after the start.", sub);
  check("torch peak: the remedies without a cause", (await page.locator("#cause").count()) === 0 && (await page.locator("#remedies > ol > li").count()) === 3);
  check("torch peak: the remedies headed as what would take less, not as a failure's advice", (await page.locator("#remedies > h3").textContent()) === "To use less memory");
  check("torch peak: no OOM mark on the chart", (await page.locator("[data-chart='0']").getAttribute("data-marks")) === "1");
  check("torch peak: headroom in red at 95 %", (await stat(page, "headroom")) === "790.34 MiB (4.8 %)" && (await page.locator("[data-stat='headroom']").getAttribute("class")).includes("bad"), await stat(page, "headroom"));
  await layout(page, "torch peak");
  check("no console errors (torch peak)", errors.length === 0, errors.join("; "));
  await page.close();
  const plain = await browser.newPage({ viewport: { width: 1400, height: 900 }, javaScriptEnabled: false });
  await plain.goto("file://" + peakHtml);
  const text = await plain.locator("body").innerText();
  check("torch peak, JavaScript off: the remedies headed as the page heads them", text.includes("To use less memory:") && !text.includes("What to try"), text.slice(0, 600));
  await plain.close();
}

// 7c. A moment of a running job before its first CUDA work: the page says so.
{
  const r = { schema: "vramtrace.report/1", generated_at: "2026-12-04T16:00:00Z", run: { command: ["python3", "train.py"], duration_ns: 0, complete: true, stand_in: false, problems: [] },
    devices: [], processes: [], oom: [], leaks: [], growth: [], retained: [], ranks: [],
    live: { running: true, now: [], cuda_used: false, note: "the job has not used CUDA yet: no process of it has created a CUDA context or allocated device memory so far" } };
  const { page, errors } = await open(render("precuda", r), "light", 1400, 900);
  check("before CUDA: the verdict says the job has not used CUDA yet", (await page.locator("#verdict").textContent()) === "The job has not used CUDA yet" &&
        (await page.locator(".verdict-sub").textContent()) === "No process of it has created a CUDA context or allocated device memory so far; its memory is shown here from its first CUDA work on.");
  await page.screenshot({ path: join(shots, "report-precuda.png") });
  check("no console errors (before CUDA)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7c2. The verdict's figures are the collector's: the request as the program's allocator asked
// for it and the count of OOMs on the device come from the diagnosis, not from the page's own
// reading of the OOM and the list.
{
  const r = torchOom();
  r.diagnosis = { ...r.diagnosis, asked_bytes: 3 * 1024 ** 3, ooms_on_device: 3 };
  const { page, errors } = await open(render("torch-verdict-values", r), "light", 1400, 900);
  const sub = (await page.locator(".verdict-sub").allTextContents()).join(" | ");
  check("the verdict's request and count are the diagnosis'", sub.startsWith("It asked for 3.00 GiB (the allocator asked the driver for 2.00 GiB) while ") && sub.includes("3 out-of-memory errors on this device in all."), sub);
  check("no console errors (verdict values)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7c3. Who died is the collector's: a process it says did not die of its OOM is not marked
// so, whatever the OOM list says.
{
  const r = torchOom();
  r.processes = r.processes.map((p) => ({ ...p, died_of_oom: false }));
  const { page, errors } = await open(render("torch-died-of-oom", r), "light", 1400, 900);
  const ended = await page.locator("[data-table='processes'] tbody tr").first().innerText();
  check("who died: the collector's processes[].died_of_oom", !ended.includes("died: out of memory") && ended.includes("cut short"), ended);
  check("no console errors (who died)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7d. Two OOMs, the first survived: the verdict is about the one the diagnosis names (oom[1],
// fatal), never one the page would pick itself; only that one is marked as the death.
{
  const r = torchOom();
  const first = { ...r.oom[0], time_ns: r.oom[0].time_ns - 500e6, requested_bytes: 1024 ** 3, allocator: { ...r.oom[0].allocator, requested_bytes: 1024 ** 3 } };
  delete first.fatal;
  r.oom = [first, r.oom[0]];
  r.diagnosis = { ...r.diagnosis, oom_index: 1, recovered_ooms: 1, ooms_on_device: 2 };
  // A remedy whose replay ran over the limit with no request named (as the H200 first-step
  // reports have it).
  r.diagnosis.remedies = [{ ...r.diagnosis.remedies[1], predicted_peak_bytes: 20 * 1024 ** 3, replayed: { verdict: "oom", reserved_peak_bytes: 20 * 1024 ** 3, limit_bytes: 16 * 1024 ** 3, up_to_recorded_oom: false } }, ...r.diagnosis.remedies];
  const { page, errors } = await open(render("torch-two-ooms", r), "light", 1400, 900);
  check("two OOMs: a replay over the limit with no request named", (await page.locator("#remedies li .predicted").first().textContent()) === "peak with it: 20.00 GiB; replayed through PyTorch's allocator: over the limit");
  const verdict = await page.locator("#verdict").textContent();
  const sub = await page.locator(".verdict-sub").first().textContent();
  check("two OOMs: the verdict is the diagnosis' OOM", verdict === "Out of memory: the program died on device 0 at 1.363 s" && sub.startsWith("It asked for 2.00 GiB while ") && sub.includes("2 out-of-memory errors on this device in all."), `${verdict} | ${sub}`);
  const heads = await page.locator("[data-oom] h3").allTextContents();
  check("two OOMs: only the fatal one is the death", JSON.stringify(heads) === '["Out of memory 1 at 863.50 ms","Out of memory 2 at 1.363 s: the process died"]', JSON.stringify(heads));
  check("no console errors (two OOMs)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7e. `vramtrace plan`: the first screen is the plan (report.json's plan, copied from a real
// run on the stand-in PyTorch): the step it stopped before, predicted over the limit, the
// largest batch that fits, each remedy's replayed peak, what the prediction could not see and
// what it cost; the run's own verdict (what it held at the stop) under it.
{
  const html = render("plan", torchPlan());
  for (const width of [1400, 1000]) {
    const { page, errors, requests } = await open(html, "light", width, 900);
    const w = `plan at ${width} px`;
    check(`${w}: the headline says it was a plan, the batch and the step's outcome`,
          (await page.locator("#verdict").textContent()) === "Plan: stopped before the first training step (batch 10240): the step will run out of memory on device 0", await page.locator("#verdict").textContent());
    const sub = await page.locator("#plan .verdict-sub").textContent();
    check(`${w}: when it stopped and what the fake steps cost`, sub === "vramtrace plan stopped process 10774 at 1.32 ms, before its step ran on the GPU: the step was predicted on fake tensors in 351.5 µs; the RNG states not read (none to restore), the model and optimizer put back.", sub);
    const line = await page.locator("[data-plan-device='0'] .plan-line").textContent();
    check(`${w}: the whole step's predicted peak against the tighter limit, and by how much it runs out`,
          line === "Device 0: the whole step peaks at 96.00 MiB against PyTorch's per-process fraction of 70.00 MiB: will run out of memory, 26.00 MiB over." &&
          (await page.locator("#plan").getAttribute("data-plan")) === "oom" && (await page.locator("[data-plan-step]").getAttribute("data-plan-step")) === "oom", line);
    const detail = await page.locator("[data-plan-device='0'] .muted").first().textContent();
    check(`${w}: what the peak is made of, the fake steps' batches and the device's limit with its source`,
          detail === "PyTorch reserved 96.00 MiB + 0 B outside PyTorch at that peak; fake steps run at batches 5120 and 10240; the device's limit, 75.00 MiB: the device's capacity less an estimated 5.00 MiB for the CUDA context (no OOM recorded to measure it).", detail);
    const stats = await page.locator("#plan .stat").evaluateAll((ss) => ss.map((x) => `${x.dataset.stat}|${x.className}|${x.querySelector(".label").textContent}|${x.querySelector(".value").textContent}`));
    check(`${w}: the plan's figures`, JSON.stringify(stats) === JSON.stringify(["plan-peak|stat bad|Predicted step peak|96.00 MiB", "plan-limit|stat |Limit (per process fraction)|70.00 MiB",
      "plan-over|stat bad|Over the limit|26.00 MiB", "plan-largest|stat |Largest batch that fits (this one: 10240)|6826"]), JSON.stringify(stats));
    const rem = await page.locator("#plan .plan-remedies > li").evaluateAll((ls) => ls.map((l) => [l.dataset.kind, l.querySelector(".plan-remedy-title span").textContent, l.querySelector(".verdict-chip").textContent, l.querySelector(".predicted").textContent]));
    check(`${w}: each remedy's replayed peak, fits or not`, JSON.stringify(rem) === JSON.stringify([
      ["smaller_batch", "halve the batch", "fits", "peak with it: 46.00 MiB; replayed through PyTorch's allocator: fits under 70.00 MiB"],
      ["mixed_precision", "bf16 autocast", "fits", "peak with it: 56.00 MiB; replayed through PyTorch's allocator: fits under 70.00 MiB"],
      ["activation_checkpointing", "checkpoint the repeated blocks", "runs out", "peak with it: 76.00 MiB; replayed through PyTorch's allocator: runs out of memory under 70.00 MiB"],
      ["expandable_segments", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True", "runs out", "peak with it: 86.00 MiB; replayed through PyTorch's allocator: runs out of memory under 70.00 MiB"]]), JSON.stringify(rem));
    const unseen = await page.locator("#plan .plan-unseen li").allTextContents();
    check(`${w}: what the prediction could not see`, JSON.stringify(unseen) === JSON.stringify(torchPlan().plan.processes[0].unseen) && (await page.locator("#plan .plan-unseen-box h3").textContent()) === "What the prediction could not see", unseen.join(" | "));
    for (const sel of ["#verdict", "[data-plan-device='0'] .plan-line", "#plan .plan-stats", "#plan .plan-remedies > li:last-child", "#plan .plan-unseen li:last-child"])
      check(`${w}: ${sel} on the first screen`, await inFirstScreen(page, sel));
    const own = page.locator("#plan + section.summary");
    check(`${w}: the run's own verdict under the plan, of what ran up to the stop, its remedies folded`,
          (await own.locator(".verdict h2").textContent()) === "Up to the stop: Peak 22.00 MiB of 70.00 MiB (31 %) on device 0 at 692.4 µs" &&
          (await own.locator("details.folded-why summary").textContent()) === "The run's own diagnosis: its cause and remedies, from what ran up to the stop" &&
          !(await own.locator("details.folded-why").evaluate((e) => e.open)) && (await page.locator("#summary, #remedies, #cause").count()) === 0,
          await own.locator(".verdict h2").textContent());
    await layout(page, w);
    await page.screenshot({ path: join(shots, width === 1400 ? "report-plan.png" : "report-plan-1000.png") });
    check(`no console errors (${w})`, errors.length === 0, errors.join("; "));
    check(`no network requests (${w})`, requests.length === 0, requests.join(", "));
    await page.close();
  }
  const plain = await browser.newPage({ viewport: { width: 1400, height: 900 }, javaScriptEnabled: false });
  await plain.goto("file://" + html);
  const text = await plain.locator("body").innerText();
  const want = ["Plan: stopped before the first training step (batch 10240)",
    "Process 10774 (batch 10240): the step was predicted on fake tensors in 351.5 µs; nothing of it ran on the GPU",
    "Device 0: the whole step peaks at 96.00 MiB against PyTorch's per-process fraction of 70.00 MiB: will run out of memory, 26.00 MiB over",
    "Device 0: the largest batch that fits: 6826 (this one: 10240)",
    "Device 0: halve the batch: peak 46.00 MiB (fits)", "Device 0: bf16 autocast: peak 56.00 MiB (fits)",
    "Device 0: checkpoint the repeated blocks: peak 76.00 MiB (runs out)", "Device 0: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: peak 86.00 MiB (runs out)",
    "What the prediction could not see:", ...torchPlan().plan.processes[0].unseen];
  const lines = text.split("\n").map((l) => l.trim());
  const missing = want.filter((l) => !lines.includes(l));
  check("plan, JavaScript off: the same facts, the plan first", missing.length === 0 && text.indexOf("Plan: stopped") < text.indexOf("No out-of-memory error"), missing.join(" | "));
  await plain.close();
}
// The batch that fits (the plan of the batch-4096 run): the headline and the device's line say
// so, with what the limit spares.
{
  const { page, errors } = await open(render("plan-fits", torchPlan({ fits: true })), "light", 1400, 900);
  check("plan that fits: the headline", (await page.locator("#verdict").textContent()) === "Plan: stopped before the first training step (batch 4096): the step fits on device 0", await page.locator("#verdict").textContent());
  const line = await page.locator("[data-plan-device='0'] .plan-line").textContent();
  check("plan that fits: the step against the device's limit, what it spares", line === "Device 0: the whole step peaks at 46.00 MiB against a limit of 75.00 MiB: fits, 29.00 MiB to spare." &&
        (await page.locator("#plan").getAttribute("data-plan")) === "fits" && !(await page.locator("#plan").getAttribute("class")).includes("is-oom"), line);
  const stats = await page.locator("#plan .stat").evaluateAll((ss) => ss.map((x) => `${x.dataset.stat}|${x.className}|${x.querySelector(".label").textContent}|${x.querySelector(".value").textContent}`));
  check("plan that fits: its figures", JSON.stringify(stats) === JSON.stringify(["plan-peak|stat ok|Predicted step peak|46.00 MiB", "plan-limit|stat |Limit|75.00 MiB",
    "plan-spare|stat ok|To spare|29.00 MiB", "plan-largest|stat |Largest batch that fits (this one: 4096)|7168"]), JSON.stringify(stats));
  const chips = await page.locator("#plan .verdict-chip").allTextContents();
  check("plan that fits: every remedy replayed fits", chips.join(",") === "fits,fits,fits,fits", chips.join(","));
  check("no console errors (plan that fits)", errors.length === 0, errors.join("; "));
  await page.close();
}
// A bf16 remedy of the run that was estimated from its recorded requests says why it was not
// weighed on fake steps (report.json's replayed.not_weighed_on_fake_step), as the summary does.
{
  const r = torchPlan({ fits: true });
  const why = "not weighed on fake steps: a run that finishes its steps runs them only with VRAMTRACE_TORCH_PREDICT=always (seconds of its own time as the second step begins)";
  r.diagnosis.remedies.push({ kind: "mixed_precision", title: "Run the forward in bf16 mixed precision (torch.autocast)", saves_bytes: 20 * 1048576, predicted_peak_bytes: 26 * 1048576,
    replayed: { verdict: "fits", limit_bytes: 75 * 1048576, reserved_peak_bytes: 26 * 1048576, up_to_recorded_oom: false, not_weighed_on_fake_step: why } });
  const { page, errors } = await open(render("not-weighed", r), "light", 1400, 900);
  const texts = await page.locator("li[data-kind='mixed_precision'] .predicted").allTextContents();
  const said = texts.filter((t) => t.includes("estimated from"));
  check("a remedy estimated from the recorded requests says why it was not weighed on fake steps", said.length === 1 &&
        said[0] === `peak with it: 26.00 MiB; replayed through PyTorch's allocator: fits under 75.00 MiB; estimated from the recorded requests, ${why}`, JSON.stringify(texts));
  check("no console errors (not weighed)", errors.length === 0, errors.join("; "));
  await page.close();
}
// A remedy's outcome in the collector's words (report.json's remedies[].outcome) is what the
// page says of it, as the summary prints it: none of the page's own sentence.
{
  const r = torchPlan({ fits: true });
  const outcome = "peak with it: at most 30.00 MiB; replayed through PyTorch's allocator: runs out at a 8.00 MiB request in fc2";
  r.diagnosis.remedies.push({ kind: "no_grad", title: "Run the evaluation under torch.no_grad()", saves_bytes: 20 * 1048576, predicted_peak_bytes: 26 * 1048576,
    predicted_peak_is_upper_bound: false, outcome, replayed: { verdict: "fits", limit_bytes: 75 * 1048576, reserved_peak_bytes: 26 * 1048576, up_to_recorded_oom: false } });
  const html = render("outcome", r);
  const { page, errors } = await open(html, "light", 1400, 900);
  const texts = await page.locator("li[data-kind='no_grad'] .predicted").allTextContents();
  check("a remedy's outcome is the collector's sentence", texts.length === 1 && texts[0] === outcome, JSON.stringify(texts));
  check("no console errors (outcome)", errors.length === 0, errors.join("; "));
  await page.close();
  const off = await browser.newPage({ viewport: { width: 1400, height: 900 }, javaScriptEnabled: false });
  await off.goto("file://" + html);
  const text = await off.locator("body").innerText();
  check("JavaScript off: the remedy's outcome in the same words", text.includes("Run the evaluation under torch.no_grad() (saves about 20.00 MiB): " + outcome), text.slice(0, 1500));
  await off.close();
}
// A device with no prediction, and strings from the program that are tags: said as text, on the
// page and without JavaScript.
{
  const r = torchPlan();
  const p = r.plan.processes[0];
  p.devices = [{ device: 0, batch: 10240, predicted: false, predicted_batches: [], error: "<img src=x onerror=alert(1)> has no meta kernel" }];
  p.unseen = ["<script>alert(2)</script> ran outside the fake mode"];
  const html = render("plan-hostile", r);
  const { page, errors, dialogs } = await open(html, "light", 1400, 900);
  check("plan without a prediction: the headline names no outcome", (await page.locator("#verdict").textContent()) === "Plan: stopped before the first training step (batch 10240)" && (await page.locator("#plan").getAttribute("data-plan")) === "none");
  const line = await page.locator("[data-plan-device='0'] .plan-line").textContent();
  check("plan without a prediction: why, as text", line === "Device 0: no prediction: <img src=x onerror=alert(1)> has no meta kernel." && (await page.locator("#plan .stat").count()) === 0, line);
  check("plan: what was not seen, as text", (await page.locator("#plan .plan-unseen li").textContent()) === "<script>alert(2)</script> ran outside the fake mode");
  check("plan: no element injected, no dialog", (await page.locator("main img, main script").count()) === 0 && dialogs.length === 0, dialogs.join("; "));
  check("no console errors (plan without a prediction)", errors.length === 0, errors.join("; "));
  await page.close();
  const plain = await browser.newPage({ javaScriptEnabled: false });
  await plain.goto("file://" + html);
  const text = await plain.locator("body").innerText();
  check("plan, JavaScript off: the program's strings as text", text.includes("Device 0: no prediction: <img src=x onerror=alert(1)> has no meta kernel") &&
        text.includes("<script>alert(2)</script> ran outside the fake mode") && (await plain.locator("img").count()) === 0 && (await plain.locator("body script").count()) === 3, text.slice(0, 400));
  await plain.close();
}

// 7f. A first-step death whose step the start-up hook then predicted on fake tensors at exit:
// the chart ends at the last CUDA work the collector names (run.timeline_end_ns), the seconds
// after it are said in the collector's words, not drawn, and the breakdowns are the
// collector's: the OOM's categories (oom[].categories, not read off the chart) and what was
// live when the process died (live_at_death).
{
  const GiB = 1024 ** 3;
  const r = torchOom();
  const lastWork = r.oom[0].time_ns + 30e6;
  r.run.duration_ns = lastWork + 9.5e9;
  r.run.timeline_end_ns = lastWork;
  const note = "Process 31337 died in its first training step: from its last CUDA work (1.393 s) to its exit (10.893 s), 9.500 s went to predicting the rest of that step on fake tensors, which used no device memory; the timeline ends at its last CUDA work.";
  r.run.predicted_at_exit = [{ pid: 31337, last_work_ns: lastWork, exit_ns: r.run.duration_ns, note }];
  // Not the chart's last point: the page must take the OOM's own.
  r.oom[0].categories = { activations: 12 * GiB, allocator_cache: 3 * GiB, parameters: GiB };
  const dead = r.live_at_death[0];
  const { page, errors } = await open(render("torch-first-step", r), "light", 1400, 900);
  const chart = page.locator("[data-chart='0']");
  check("first-step death: the chart ends at the last CUDA work, not at the exit",
        Number(await chart.getAttribute("data-x-end-ns")) === lastWork && Number(await chart.getAttribute("data-x-max-ns")) === lastWork - 1.2e9,
        `${await chart.getAttribute("data-x-end-ns")} ${await chart.getAttribute("data-x-max-ns")}`);
  const said = await page.locator("[data-predicted-at-exit='31337']").allTextContents();
  check("first-step death: the prediction's time said under the chart, in the collector's words", said.length === 1 && said[0] === note, said.join(" | "));
  check("first-step death: the headline says what was live when it died",
        (await page.locator("[data-stat='leaks'] .label").textContent()) === "Live when it died" && (await stat(page, "leaks")) === `421 blocks (${(dead.bytes / GiB).toFixed(2)} GiB)`, await stat(page, "leaks"));
  const deadRows = await page.locator("[data-table='live-at-death'] tbody tr:not(.detail)").evaluateAll((rows) => rows.map((x) => [...x.children].map((c) => c.textContent).join(" | ")));
  check("first-step death: live_at_death listed as such, and no leak suspects",
        deadRows.length === 1 && deadRows[0].endsWith(` | libtorch_cuda.so | ${(dead.bytes / GiB).toFixed(2)} GiB | 421 | 31337 | 200× 64.00 MiB`) && (await page.locator("[data-table='leaks']").count()) === 0 &&
        (await page.locator("h3", { hasText: "Live when the process died (it never got to free them: not leaks)" }).count()) === 1, deadRows.join(" / "));
  await page.locator(".tabs button[data-moment='oom0']").click();
  const cats = await page.locator("[data-table='categories'] tbody tr").evaluateAll((rows) => rows.map((x) => [...x.children].map((c) => c.textContent).join(" | ")));
  check("first-step death: the OOM's categories are report.json's oom[].categories",
        JSON.stringify(cats) === JSON.stringify(["activations | 12.00 GiB | 75 %", "allocator cache (reserved, free) | 3.00 GiB | 19 %", "parameters | 1.00 GiB | 6.3 %"]), JSON.stringify(cats));
  await page.locator(".tabs button[data-moment='exit']").click();
  const exitRows = await page.locator("[data-table='exit-sites'] tbody tr:not(.detail)").count();
  check("first-step death: the last tab is what was live when it died", (await page.locator(".tabs button[data-moment='exit']").textContent()) === "When it died" && exitRows === 1, String(exitRows));
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: join(shots, "report-first-step.png") });
  check("no console errors (first-step death)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7g. A clean exit with memory left: leaks[] with `kept` (what the forwards kept across
// iterations: the diagnosis' cause) is not called a leak suspect; the rest are.
{
  const GiB = 1024 ** 3, MiB = 1024 ** 2;
  const r = torchOom();
  r.oom = []; r.live_at_death = [];
  r.processes[0].clean_exit = true; r.processes[0].exit_code = 0;
  r.diagnosis = { ...r.diagnosis, verdict: "peak", headroom_bytes: 16 * GiB - r.devices[0].peak.bytes, cause: null, fatal_ooms: 0, recovered_ooms: 0 };
  delete r.diagnosis.oom_index; delete r.diagnosis.fatal;
  r.leaks = [
    { device: 0, pid: 31337, site: "forward (resnet.py:150)", library: "libtorch_cuda.so", bytes: 3 * GiB, count: 128, sizes: [{ bytes: 24 * MiB, count: 128 }], stack: [], kept: "kept_graph" },
    { device: 0, pid: 31337, site: "evaluate (train.py:120)", library: "libtorch_cuda.so", bytes: 64 * MiB, count: 2, sizes: [{ bytes: 32 * MiB, count: 2 }], stack: [] },
  ];
  const { page, errors } = await open(render("torch-kept", r), "light", 1400, 900);
  check("kept: the leak suspects leave out what was kept", (await stat(page, "leaks")) === "2 (64.00 MiB)" && (await page.locator("[data-stat='leaks'] .label").textContent()) === "Leak suspects", await stat(page, "leaks"));
  check("kept: what the forwards kept has its own figure", (await stat(page, "kept")) === "128 blocks (3.00 GiB)" && (await page.locator("[data-stat='kept'] .label").textContent()) === "Kept across iterations", await stat(page, "kept"));
  // Each row's first cell is its expand button's.
  const rowsOf = (id) => page.locator(`[data-table='${id}'] tbody tr:not(.detail)`).evaluateAll((rows) => rows.map((x) => [...x.children].map((c) => c.textContent).join(" | ")));
  const suspects = await rowsOf("leaks"), kept = await rowsOf("kept");
  check("kept: the leak suspects' table", JSON.stringify(suspects) === JSON.stringify([" | evaluate (train.py:120) | libtorch_cuda.so | 64.00 MiB | 2 | 31337 | 2× 32.00 MiB"]), JSON.stringify(suspects));
  check("kept: the kept blocks' table, with what kept them", JSON.stringify(kept) === JSON.stringify([" | forward (resnet.py:150) | autograd graph | libtorch_cuda.so | 3.00 GiB | 128 | 31337 | 128× 24.00 MiB"]) &&
        (await page.locator("h3", { hasText: "Kept across iterations by the forwards (the diagnosis' cause, not leaked)" }).count()) === 1, JSON.stringify(kept));
  check("kept: the last tab is at exit", (await page.locator(".tabs button[data-moment='exit']").textContent()) === "At exit");
  check("no console errors (kept)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 7h. `vramtrace run --preflight`: report.json's preflight (its keys as the collector writes
// them, from a real run's) on the page: each process and device's predicted reserved peak
// beside the one recorded over the same two iterations, or why they were not compared.
{
  const GiB = 1024 ** 3;
  const r = torchOom();
  const assumed = "each iteration's output and loss let go as it ends: the model's caller, step (/work/main/scripts/gpu/plan_job.py:72), keeps the output in a local it reads only through its attributes, gone when it returns";
  r.preflight = { processes: [{ pid: 640, batch: 4, asked_ns: 12655323704, fake_step_seconds: 2.54348226, loss: "model", rng_restored: true, assumed: [assumed], devices: [
    { device: 0, batch: 4, predicted: true, compared: true, error_percent: 3.454231433506045, limit_bytes: 84480622592, predicted_fits: true,
      predicted_peak_bytes: 7537164288, predicted_reserved_peak_bytes: 7537164288, recorded_from_ns: 10111533634, recorded_reserved_peak_bytes: 7285506048, recorded_to_ns: 13310464410 },
    { device: 1, batch: 4, predicted: true, compared: false, limit_bytes: 16 * GiB, predicted_fits: false, predicted_peak_bytes: 20 * GiB, predicted_reserved_peak_bytes: 20 * GiB,
      not_compared_because: "the step ran out of memory" }] }] };
  const { page, errors } = await open(render("torch-preflight", r), "light", 1400, 900);
  const lines = await page.locator("#preflight li:not([data-assumed])").allTextContents();
  check("pre-flight: the heading", (await page.locator("#preflight h2").textContent()) === "Pre-flight: the first step predicted before it ran");
  check("pre-flight: the prediction beside the step as it ran, and one not compared, with why",
        JSON.stringify(lines) === JSON.stringify([
          "Process 640, device 0 (batch 4): predicted 7.02 GiB reserved against a limit of 78.68 GiB (fits), predicted on fake tensors in 2.543 s at 11.455 s; the step took 6.79 GiB (error +3.5 %; PyTorch reserved, the first two iterations).",
          "Process 640, device 1 (batch 4): predicted 20.00 GiB reserved against a limit of 16.00 GiB (runs out), predicted on fake tensors in 2.543 s at 11.455 s; not compared: the step ran out of memory."]),
        lines.join(" | "));
  check("pre-flight: which were compared", JSON.stringify(await page.locator("#preflight li:not([data-assumed])").evaluateAll((ls) => ls.map((l) => l.dataset.compared))) === '["yes","no"]');
  const said = await page.locator("#preflight li[data-assumed='640']").allTextContents();
  check("pre-flight: what the stand-in step assumed of the loop, in the hook's words", JSON.stringify(said) === JSON.stringify([`Process 640: assumed ${assumed}`]), said.join(" | "));
  const none = await open(render("torch-no-preflight", torchOom()), "light", 1400, 900);
  check("pre-flight: no card without a pre-flight", (await none.page.locator("#preflight").count()) === 0);
  await none.page.close();
  check("no console errors (pre-flight)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 8. A native CUDA program's OOM: the page draws the collector's diagnosis, findings and
// remedies, all in CUDA's terms.
{
  const { page, errors } = await open(render("native", nativeOom()), "light", 1400, 900);
  const text = await page.locator("main").innerText();
  const kinds = await page.locator("#remedies li").evaluateAll((ls) => ls.map((l) => l.dataset.kind));
  check("native OOM: the collector's remedies, as it ranked them", JSON.stringify(kinds) === '["free_per_iteration","smaller_working_set"]', JSON.stringify(kinds));
  check("native OOM: the collector's cause", (await page.locator("#cause .cause-title").textContent()).startsWith("Live memory grew by 2.00 GiB per iteration"));
  check("native OOM: no PyTorch advice for a C++ program", !/loss\.item|\.detach|checkpointing|mixed precision|bf16/.test(text), (text.match(/.{0,60}(loss\.item|checkpointing|bf16).{0,60}/) || [""])[0]);
  check("native OOM: CUDA advice instead", text.includes("cudaFree/cudaFreeAsync") && text.includes("stream-ordered pool"));
  check("native OOM: evidence in human units", text.includes("since\t482.7 µs after the start") || text.includes("since\n482.7 µs after the start") || text.includes("since: 482.7 µs after the start"), (text.match(/.{0,30}since.{0,40}/) || [""])[0]);
  check("native OOM: the driver's figures with the device's own total", text.includes("The driver reported 3.50 GiB free of 80.00 GiB; this process held 76.00 GiB; other processes, contexts and the driver held 512.00 MiB."));
  check("native OOM: no dash where the value is known", !/ of –|free of –|\bheld –/.test(text));
  const cells = await page.locator(".icicle-cell").allTextContents();
  check("native OOM: no _start or __libc_start_main rows in the icicle graph, main kept", cells.some((c) => c.startsWith("main ")) && !cells.some((c) => /^(_start|__libc_start)/.test(c)), cells.join(" | "));
  check("native OOM: the limit is the device's memory", (await page.locator(".verdict-sub").textContent()).includes("against a limit of 80.00 GiB"));
  const ended = await page.locator("[data-table='processes'] tbody tr").first().innerText();
  check("native OOM: the process table says who died, as the collector says it", ended.includes("died: out of memory"), ended);
  check("native OOM: the library's notices and the refused allocations, by process",
        (await page.locator("[data-notice='777']").textContent()) === "pid 777: CUPTI: 3 activity records dropped" &&
        (await page.locator("[data-failed='777']").textContent()) === "pid 777: allocations that failed for another reason than memory: CUDA error 1 (invalid value) × 2");
  await layout(page, "native OOM");
  await page.screenshot({ path: join(shots, "report-native-oom.png") });
  check("no console errors (native OOM)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 9. A big run: 20,000 sites at the peak and at the OOM, 2,048 timeline points in 12
// categories, 2,000 phases, 5,000 modules. What is in the DOM is bounded (rows behind "show
// more", frames under 0.2 % of the view left out), whatever the machine's speed.
{
  const bigHtml = render("big", big(20000));
  const t0 = Date.now();
  const { page, errors } = await open(bigHtml, "light", 1400, 900);
  console.log(`      big report (${(readFileSync(bigHtml).length / 1e6).toFixed(1)} MB) ready in ${Date.now() - t0} ms`);
  const rows = await page.locator("[data-table='peak-sites'] tbody tr").count();
  check("big report: 25 site rows in the DOM, the rest behind a button", rows === 25 && (await page.locator("[data-table='peak-sites'] + button.more").textContent()) === "Show 100 more of 500", String(rows));
  await page.locator("[data-table='peak-sites'] + button.more").click();
  check("big report: show more adds 100 rows", (await page.locator("[data-table='peak-sites'] tbody tr").count()) === 125);
  // The page keeps the 500 largest of the 20,000 sites (the report's order kept) and sums the
  // others: site i holds 1 MiB + (i % 4096) KiB in 1 + (i % 5) blocks.
  const fixture = big(20000).processes[0].devices[0].peak.by_site;
  const kept = fixture.map((s, i) => [s.bytes, i]).sort((x, y) => y[0] - x[0]).slice(0, 500);
  const keptSet = new Set(kept.map(([, i]) => i));
  const restBytes = fixture.reduce((s, x, i) => s + (keptSet.has(i) ? 0 : x.bytes), 0);
  const restBlocks = fixture.reduce((s, x, i) => s + (keptSet.has(i) ? 0 : x.count), 0);
  check("big report: the rest of the fixture: 55.35 GiB in 58,500 blocks", restBytes === 59426467840 && restBlocks === 58500, `${restBytes} ${restBlocks}`);
  const restLine = await page.locator("[data-rest='peak-sites']").textContent();
  check("big report: a line says what the 19,500 smaller sites held", restLine === "…and 19,500 more sites, 55.35 GiB in 58,500 blocks (the smallest, summed in the page; all of them in report.json)", restLine);
  const data = await page.evaluate(() => JSON.parse(document.getElementById("vt-data").textContent));
  const pk = data.processes[0].devices[0].peak;
  check("big report: kept sites and the rest add up to the whole", pk.by_site.reduce((s, x) => s + x.bytes, 0) + pk.by_site_rest.bytes === fixture.reduce((s, x) => s + x.bytes, 0) &&
        pk.by_site.length === 500 && pk.by_site_rest.entries === 19500 && pk.by_stack.length === 500 && pk.largest.length === 100 && data.oom[0].live_by_site.length === 500);
  const src = big(20000);
  check("big report: the figures are exact (peak, categories, timeline, OOM)", data.devices[0].peak.bytes === src.devices[0].peak.bytes && data.devices[0].peak.time_ns === src.devices[0].peak.time_ns &&
        canon(data.devices[0].categories) === canon(src.devices[0].categories) && canon(data.devices[0].timeline) === canon(src.devices[0].timeline) &&
        ["time_ns", "requested_bytes", "live_bytes", "device"].every((k) => data.oom[0][k] === src.oom[0][k]));
  check("big report: the page embeds at most 1.5 MB of data", data && (await page.evaluate(() => document.getElementById("vt-data").textContent.length)) < 1.5e6, String(await page.evaluate(() => document.getElementById("vt-data").textContent.length)));
  const n = await page.locator(".icicle-cell").count();
  check("big report: the icicle graph draws at most 500 per row of frames", n > 0 && n <= 40 * 500, String(n));
  check("big report: the whole DOM stays small", (await page.evaluate(() => document.getElementsByTagName("*").length)) < 20000, String(await page.evaluate(() => document.getElementsByTagName("*").length)));
  check("no console errors (big)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 10. diff --html: runs A and B in the same views side by side.
{
  const a = torchOom();
  const b = torchOom();
  // B: half the batch, a peak of 9 GiB under the same 16 GiB memory fraction.
  b.diagnosis = { ...a.diagnosis, verdict: "peak", headroom_bytes: 7 * 1024 ** 3, cause: null, remedies: [], fatal_ooms: 0 };
  delete b.diagnosis.oom_index; delete b.diagnosis.fatal;
  const f = 9 * 1024 ** 3 / a.devices[0].peak.bytes;
  b.devices[0].categories.timeline.points = a.devices[0].categories.timeline.points.map(([t, ...v]) => [t, ...v.map((x) => Math.round(x * f))]);
  b.devices[0].timeline.points = a.devices[0].timeline.points.map(([t, x]) => [t, Math.round(x * f)]);
  b.oom = [];
  b.leaks = []; b.live_at_death = [];
  b.run.command = ["python3", "train.py", "--arch", "resnet50", "--batch-size", "256"];
  b.processes[0].clean_exit = true; b.processes[0].exit_code = 0;
  b.devices[0].peak.bytes = 9 * 1024 ** 3;
  b.devices[0].peak.by_site = b.devices[0].peak.by_site.map((s) => ({ ...s, bytes: Math.round(s.bytes / 2) }));
  b.processes[0].devices[0].peak.by_site = b.processes[0].devices[0].peak.by_site.map((s) => ({ ...s, bytes: Math.round(s.bytes / 2) }));
  // Half the batch, half the activations: at train.py:88; the model's state the same.
  b.devices[0].categories.at_peak = { ...a.devices[0].categories.at_peak, activations: a.devices[0].categories.at_peak.activations / 2 };
  b.devices[0].peak.by_line = a.devices[0].peak.by_line.map((l) => l.categories.activations ? { ...l, bytes: l.bytes / 2, categories: { activations: l.bytes / 2 } } : l);
  const dir = mkdtempSync(join(tmpdir(), "vt-html-diff-"));
  temps.push(dir);
  writeFileSync(join(dir, "a.json"), JSON.stringify(a));
  writeFileSync(join(dir, "b.json"), JSON.stringify(b));
  execFileSync(join(build, "bin/vramtrace"), ["diff", join(dir, "a.json"), join(dir, "b.json"), "--html", join(dir, "diff.html")], { stdio: "pipe" });
  const { page, errors } = await open(join(dir, "diff.html"), "light", 1400, 900);
  check("diff: the header names runs A and B", (await page.locator("#cmd").textContent()) === "A: python3 train.py --arch resnet50 --batch-size 512 --amp off   B: python3 train.py --arch resnet50 --batch-size 256");
  const va = await page.locator("[data-run='A'] #verdict, [data-run='A'] .verdict h2").first().textContent();
  const vb = await page.locator("[data-run='B'] .verdict h2").first().textContent();
  check("diff: A's verdict and B's side by side", va.startsWith("A: Out of memory: the program died") && vb === "B: Peak 9.00 GiB of 16.00 GiB (56 %) on device 0 at 1.361 s", `${va} | ${vb}`);
  check("diff: both runs have their chart", (await page.locator("[data-run='A'] [data-chart] canvas").count()) === 1 && (await page.locator("[data-run='B'] [data-chart] canvas").count()) === 1);
  // The two charts compare at a glance: one row, the same size, the same time and byte axes
  // (A's: its OOM near 16 GiB; B's 9 GiB peak drawn on that scale, not stretched to fill it).
  const ca = page.locator("[data-run='A'][data-aligned='chart'] [data-chart]"), cb = page.locator("[data-run='B'][data-aligned='chart'] [data-chart]");
  const [ba, bb] = [await ca.boundingBox(), await cb.boundingBox()];
  check("diff: A's and B's charts side by side in one row, the same size", ba && bb && ba.y === bb.y && ba.height === bb.height && Math.abs(ba.width - bb.width) <= 1 && bb.x > ba.x + ba.width, JSON.stringify([ba, bb]));
  const axes = async (c) => [await c.getAttribute("data-x-max-ns"), await c.getAttribute("data-y-max")];
  const [xa, ya] = await axes(ca), [xb, yb] = await axes(cb);
  // Each from its first CUDA activity: the longer of the two spans.
  const [sa, sb] = [Number(await ca.getAttribute("data-x-start-ns")), Number(await cb.getAttribute("data-x-start-ns"))];
  check("diff: A and B on the same time and byte axes", xa === xb && ya === yb && Number(ya) > 16 * 1024 ** 3 && sa > 0 && Number(xa) === Math.max(a.run.duration_ns - sa, b.run.duration_ns - sb), `${xa} ${xb} ${ya} ${yb}`);
  check("diff: the y ticks are the same on both", (await ca.getAttribute("data-yticks")) === (await cb.getAttribute("data-yticks")));
  // Zooming one zooms the other to the same span ("+" zooms every chart; a drag on A too).
  const ov = await page.locator("[data-run='A'][data-aligned='chart'] .u-over").boundingBox();
  await page.mouse.move(ov.x + ov.width * 0.6, ov.y + 40); await page.mouse.down();
  await page.mouse.move(ov.x + ov.width * 0.9, ov.y + 50, { steps: 4 }); await page.mouse.up();
  const [ra, rb] = [await ca.getAttribute("data-x-range"), await cb.getAttribute("data-x-range")];
  check("diff: a drag on A's chart zooms B's to the same span", ra && ra === rb && Number(ra.split(",")[0]) > 0.5 * Number(xa) / 1e9, `${ra} | ${rb}`);
  await page.keyboard.press("0");
  check("diff: 0 resets both to the whole run", (await ca.getAttribute("data-x-range")) === (await cb.getAttribute("data-x-range")) && Number((await ca.getAttribute("data-x-range")).split(",")[0]) === 0, await ca.getAttribute("data-x-range"));
  const peak = await page.locator(".diff-peak").first().textContent();
  check("diff: the peak change", peak.startsWith("Peak of device 0") && peak.includes("B 9.00 GiB"), peak);
  // PyTorch runs: by category and by the Python line of PyTorch's blocks, not by the segments.
  const diffRows = await page.locator("[data-table='diff'] tbody tr").evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => c.textContent).join(" | ")));
  check("diff: the Python lines whose PyTorch blocks changed, with what they hold", diffRows.length === 1 &&
        diffRows[0] === `/work/resnet/train.py:88 | activations; module layer3.0.conv2 | ${(a.devices[0].categories.at_peak.activations / 1024 ** 3).toFixed(2)} GiB | ${(a.devices[0].categories.at_peak.activations / 2 / 1024 ** 3).toFixed(2)} GiB | −${(a.devices[0].categories.at_peak.activations / 2 / 1024 ** 3).toFixed(2)} GiB`, diffRows.join(" / "));
  const catRows = await page.locator("[data-table='diff-categories'] tbody tr").evaluateAll((rows) => rows.map((r) => [...r.children].map((c) => c.textContent).join(" | ")));
  check("diff: PyTorch's memory by category, A and B", catRows.includes("parameters | 97.00 MiB | 97.00 MiB | -") &&
        catRows.some((r) => r.startsWith("activations | ") && r.endsWith(` | −${(a.devices[0].categories.at_peak.activations / 2 / 1024 ** 3).toFixed(2)} GiB`)), catRows.join(" / "));
  await layout(page, "diff");
  await page.screenshot({ path: join(shots, "diff.png") });
  check("no console errors (diff)", errors.length === 0, errors.join("; "));
  await page.close();
  const plain = await browser.newPage({ javaScriptEnabled: false });
  await plain.goto("file://" + join(dir, "diff.html"));
  const text = await plain.locator("body").innerText();
  check("diff, JavaScript off: the peaks, the changed sites and both runs' summaries", text.includes("What changed from A to B") && text.includes("forward (/opt/venv/lib/python3.12/site-packages/torchvision/models/resnet.py:146)\t3.59 GiB\t1.80 GiB") &&
        text.includes("Run A") && text.includes("Out of memory: the program died") && text.includes("Run B") && text.includes("No out-of-memory error"), text.slice(0, 400));
  await plain.close();
}

// Three worker processes on one device: the live set at the device's peak is every worker's
// (8 + 16 + 24 MiB), by process, and its largest allocations are the three workers'.
const workers = profile("workers", [join(build, "tests/programs/workers")]);
{
  const { page, errors } = await open(workers, "light");
  const procs = await page.locator("[data-table='peak-processes'] tbody tr").evaluateAll((rows) => rows.map((r) => r.lastElementChild.textContent));
  check("by process at the device's peak: 24, 16 and 8 MiB", JSON.stringify(procs.slice().sort()) === JSON.stringify(["16.00 MiB", "24.00 MiB", "8.00 MiB"]), procs.join(" | "));
  const largest = await page.locator("[data-table='peak-largest'] tbody tr").count();
  check("largest allocations at the peak: the three workers'", largest === 3, String(largest));
  check("no console errors (workers)", errors.length === 0, errors.join("; "));
  await page.close();
}

await browser.close();
if (!failures) for (const dir of temps) rmSync(dir, { recursive: true, force: true });
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);

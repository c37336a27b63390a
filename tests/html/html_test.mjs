// HTML report tests: reports made from stand-in runs are opened from file:// in headless
// Chromium (Debian's, driven by playwright-core). Asserts the headline figures on the page, no
// console errors, no network requests, and that strings from the traced program render as text.
// Saves screenshots in BUILD/tests/html/ (one is copied into docs/ for the README).
//   node tests/html/html_test.mjs BUILD_DIR
import { execFileSync } from "node:child_process";
import { mkdirSync, mkdtempSync, existsSync, readFileSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

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

async function open(path, theme) {
  const page = await browser.newPage({ viewport: { width: 1366, height: 900 }, colorScheme: theme });
  const errors = [], requests = [], dialogs = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(String(e)));
  page.on("request", (r) => { if (!r.url().startsWith("file://")) requests.push(r.url()); });
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss(); });
  await page.goto("file://" + path);
  await page.waitForSelector("body[data-ready='1']", { timeout: 10000 });
  return { page, errors, requests, dialogs };
}

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
  check("icicle graph of the live set at the peak", cells.includes("live at peak 780.00 MiB") && cells.some((c) => c.startsWith("main ")) && cells.includes("cuMemAllocAsync 192.00 MiB") && !cells.some((c) => c.startsWith("cuMemAlloc_v2") || c.includes("vramtrace::")), cells.join(" | "));
  check("kernel launches drawn on the time axis", (await page.locator(".u-legend").textContent()).includes("kernel launches per bucket"));
  check("launches recorded: no not-recorded banner", (await page.locator("#launches-off").count()) === 0);
  // Sorting: click "bytes" in the largest-allocations table twice -> ascending.
  const th = page.locator("[data-table='peak-largest'] th").first();
  await th.click(); await th.click();
  const first = await page.locator("[data-table='peak-largest'] tbody tr td").first().textContent();
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

// 3. Ten million events: the report is downsampled in the collector (the exact peak kept) and
// opens in under 2 s.
{
  const dir = mkdtempSync(join(tmpdir(), "vt-html-10m-"));
  execFileSync(join(build, "bin/vt_synth_trace"), [join(dir, "t.vtrace"), "10000000"]);
  execFileSync(join(build, "bin/vramtrace"), ["report", join(dir, "t.vtrace"), "-o", dir], { stdio: "pipe" });
  const t0 = Date.now();
  const { page, errors } = await open(join(dir, "report.html"), "light");
  const ms = Date.now() - t0;
  check(`10M-event report opens in under 2 s (${ms} ms)`, ms < 2000, `${ms} ms`);
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
  const site = await page.locator("[data-table='growth'] tbody td").first().textContent();
  check("growing site listed", site.startsWith("keep_history() (") && site.endsWith("leak_steps.cu:20)"), site);
  const phase = await page.locator("[data-table='phases'] tbody tr").first().textContent();
  check("NVTX phases listed", phase.startsWith("train_step10"), phase);
  check("no console errors (growth)", errors.length === 0, errors.join("; "));
  await page.close();
}

// 4. Stacks: who holds the memory (library table) and the stack of the largest allocation.
const chain = profile("stacks", [join(build, "tests/programs/callchain")]);
{
  const { page, errors } = await open(chain, "light");
  const lib = await page.locator("[data-table='peak-libraries'] tbody td").first().textContent();
  check("library breakdown shown", lib === "callchain", lib);
  const summary = await page.locator("[data-stacks='peak'] summary").first().textContent();
  check("largest allocation's stack summarised by its site", summary.includes("allocate_weights(unsigned long)") && summary.includes("callchain.cu:8"), summary);
  const frames = await page.locator("[data-stacks='peak'] details").first().locator("li").allTextContents();
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

// 7. Three worker processes on one device: the live set at the device's peak is every
// worker's (8 + 16 + 24 MiB), by process and by site, not one worker's.
const workers = profile("workers", [join(build, "tests/programs/workers")]);
{
  const { page, errors } = await open(workers, "light");
  const procs = await page.locator("[data-table='peak-processes'] tbody tr").evaluateAll((rows) => rows.map((r) => r.lastElementChild.textContent));
  check("by process at the device's peak: 24, 16 and 8 MiB", JSON.stringify(procs.slice().sort()) === JSON.stringify(["16.00 MiB", "24.00 MiB", "8.00 MiB"]), procs.join(" | "));
  const site = await page.locator("[data-table='peak-sites'] tbody tr").first().locator("td").allTextContents();
  check("by site at the device's peak: 48 MiB in 3 allocations", site[1] === "48.00 MiB" && site[2] === "3", site.join(" | "));
  const largest = await page.locator("[data-table='peak-largest'] tbody tr").count();
  check("largest allocations at the peak: the three workers'", largest === 3, String(largest));
  check("no console errors (workers)", errors.length === 0, errors.join("; "));
  await page.close();
}

await browser.close();
if (!failures) for (const dir of temps) rmSync(dir, { recursive: true, force: true });
console.log(failures ? `${failures} failed` : "all passed");
process.exit(failures ? 1 : 0);

// The live page in headless Chromium (Debian's, driven by playwright-core), over loopback:
// `vramtrace run --serve` of tests/programs/live_steps, a stand-in job that the test drives step
// by step through files. The page updates itself while the job allocates (the peak, what is
// live now, the growth per iteration), shows the OOM when it happens, keeps the reader's scroll
// and moment tab across updates, and once the job has ended shows the final report (the same
// figures as report.json) and keeps working. Nothing here waits a fixed time: every wait is
// for what the page shows, with a generous bound.
//   node tests/html/live_test.mjs BUILD_DIR
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../report/web/package.json"));
const { chromium } = require("playwright-core");

const build = resolve(process.argv[2] || "build");
const MiB = 1024 * 1024;
const LONG = 120000;
let failures = 0;
const check = (what, ok, detail = "") => {
  console.log(`${ok ? "PASS" : "FAIL"}  ${what}${ok ? "" : "  " + detail}`);
  if (!ok) failures++;
};

const root = mkdtempSync(join(tmpdir(), "vt-live-html-"));
const work = join(root, "work"), out = join(root, "run");
mkdirSync(work);
const touch = (name) => writeFileSync(join(work, name), "");
const until = async (what, cond, timeout = LONG) => {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    const v = await cond();
    if (v) return v;
    await new Promise((r) => setTimeout(r, 50));
  }
  check(`${what} (within ${timeout / 1000} s)`, false);
  return null;
};
const step = async (name, done) => { touch(name); await until(`${done} written`, () => existsSync(join(work, done))); };

const job = spawn(join(build, "bin/vramtrace"), ["run", "--serve", "-o", out, "--", join(build, "tests/programs/live_steps"), work], {
  env: { ...process.env, LD_LIBRARY_PATH: join(build, "standin"), VRAMTRACE_STANDIN_DEVICE_BYTES: String(256 * MiB), VRAMTRACE_FLUSH_MS: "20" },
  stdio: ["ignore", "pipe", "pipe"],
});
let stderr = "";
job.stderr.on("data", (d) => { stderr += d; });
let exitCode = null;
const exited = new Promise((r) => job.on("exit", (code) => { exitCode = code; r(); }));
// The URL carries the server's token (every request must); the page passes it on to page.json.
const url = await until("the URL on stderr", () => (stderr.match(/vramtrace: live report: (http:\/\/127\.0\.0\.1:\d+\/\?token=[0-9a-f]{32})\n/) || [])[1]);
const origin = url.replace(/\?.*$/, "");
await until("the job started", () => existsSync(join(work, "started")));

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const page = await browser.newPage({ viewport: { width: 1366, height: 900 } });
const errors = [], foreign = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(String(e)));
page.on("request", (r) => { if (!r.url().startsWith(origin)) foreign.push(r.url()); });
await page.goto(url);
await page.waitForSelector("body[data-ready='1']", { timeout: LONG });
const text = (sel) => page.evaluate((s) => { const e = document.querySelector(s); return e ? e.textContent : null; }, sel);
const stat = (id) => text(`[data-stat='${id}'] .value`);
const state = () => page.evaluate(() => (document.getElementById("live") || {}).dataset?.state || null);
check("the served page says it is live", (await state()) === "live", await text("#live"));
check("the live line says when it was updated", /^live — updated \d\d:\d\d:\d\d$/.test(await text("#live") || ""), await text("#live"));

// Each step's 16 MiB appears on the page as the job goes, without a reload.
await step("step-1", "done-1");
check("step 1: the peak is 16 MiB", !!(await until("the page's peak at 16 MiB", async () => (await stat("peak")) === "16.00 MiB")), await stat("peak"));
const updatesAfter1 = Number(await page.evaluate(() => document.body.dataset.updates || 0));
check("the page rendered itself again (no reload)", updatesAfter1 > 0, String(updatesAfter1));
const nowTab = await text(".tabs button[data-moment='now']");
check("what is live now is the first tab", nowTab === "Now (16.00 MiB live)", nowTab);
const site = await text("[data-table='now-sites'] tbody td.code");
check("live now by line: grow_step", (site || "").startsWith("grow_step"), site);

// The reader scrolls and picks the peak's tab: both kept across updates.
await page.locator(".tabs button[data-moment='peak']").first().click();
await page.evaluate(() => window.scrollTo(0, 400));
await step("step-2", "done-2");
await until("the page's peak at 32 MiB", async () => (await stat("peak")) === "32.00 MiB");
check("the scroll kept across an update", Math.abs((await page.evaluate(() => window.scrollY)) - 400) < 2, String(await page.evaluate(() => window.scrollY)));
check("the moment tab kept across an update", (await page.evaluate(() => document.querySelector(".tabpanel").dataset.moment)) === "peak");
await page.evaluate(() => window.scrollTo(0, 0));
await step("step-3", "done-3");
check("step 3: the peak is 48 MiB", !!(await until("the page's peak at 48 MiB", async () => (await stat("peak")) === "48.00 MiB")), await stat("peak"));
check("growth per iteration so far", !!(await until("the growth", async () => (await stat("growth")) === "16.00 MiB")), await stat("growth"));
check("the chart is drawn", (await page.locator("[data-chart='0'] canvas").count()) === 1);

// The OOM shows when it happens; the job runs on (not a death).
await step("oom", "oom-done");
const oom = await until("the OOM on the page", async () => ((await stat("oom")) || "").startsWith("1×") && stat("oom"));
check("the OOM with its request", oom === "1× (1.00 GiB asked)", oom);
check("the OOM's panel", (await page.locator("[data-oom]").count()) === 1);
const verdict = await text("#verdict");
// Which OOM ends a process is known when it ends: while it runs, none is said to have killed it.
check("the verdict does not say the running job died", !!verdict && !verdict.includes("died"), verdict);
check("no cut-short banner while it runs", !((await page.locator(".banner.bad").allTextContents()).some((t) => t.includes("cut short"))));

// The end: the final report, on the page, which keeps working after vramtrace has stopped.
touch("end");
const endAt = Date.now();
await until("job ended on the page", async () => (await state()) === "ended", LONG);
check("the page says the job ended", (await text("#live")) === "job ended — final report", await text("#live"));
await until("vramtrace exited", () => exitCode !== null);
// Printed, not asserted (the machine's speed): the final report, then the page's last fetch.
console.log(`      vramtrace exited ${Date.now() - endAt} ms after the job's end, the page having fetched the final report`);
check("vramtrace exits as its command did", exitCode === 0, `${exitCode}: ${stderr}`);
const final = JSON.parse(readFileSync(join(out, "report.json"), "utf8"));
check("the page holds the final report", (await stat("peak")) === "48.00 MiB" && (await page.evaluate(() => document.querySelectorAll(".tabs button[data-moment='now']").length)) === 0 &&
  final.devices[0].peak.bytes === 48 * MiB, `${await stat("peak")}`);
const leaks = await stat("leaks");
check("final: the leak suspects of the end", leaks === "none", leaks);
const th = page.locator("[data-table='processes'] th").first();
await th.click();
check("the page still works once the server has gone (a table sorts)", (await th.getAttribute("aria-sort")) !== null);
const ended = await page.locator("[data-table='processes'] tbody td").nth(3).textContent();
check("the process ended with exit()", ended === "exit()", ended);
check("no console errors", errors.length === 0, errors.join("; "));
check("no request but to vramtrace's server", foreign.length === 0, foreign.join(", "));
await page.screenshot({ path: join(root, "live-final.png"), fullPage: false });

await browser.close();
await exited;
if (!failures) rmSync(root, { recursive: true, force: true });
else console.log(`kept for a look: ${root}`);
console.log(`live page test: ${failures} failure(s)`);
process.exit(failures ? 1 : 0);

// Opens report.html files in headless Chromium (Debian's, driven by playwright-core) and prints,
// for each, the size of its embedded JSON and of the page, and the time from navigation until
// the page says it is ready (its charts and tables drawn): the median of RUNS opens.
//   node bench/html_open.mjs [--runs N] NAME=REPORT.html...
import { readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../report/web/package.json"));
const { chromium } = require("playwright-core");
let args = process.argv.slice(2), runs = 3;
if (args[0] === "--runs") { runs = Number(args[1]); args = args.slice(2); }
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"] });
const mb = (n) => (n / 1e6).toFixed(2);
console.log("report                          page MB  data MB  report.json MB  open ms (median of " + runs + ")  all");
for (const arg of args) {
  const [name, path] = arg.includes("=") ? arg.split("=") : [arg, arg];
  const html = readFileSync(path, "latin1");
  const a = html.indexOf('id="vt-data">'), b = html.indexOf("</script>", a);
  let json = "-";
  try { json = mb(statSync(join(dirname(path), "report.json")).size); } catch { /* a diff or a fixture */ }
  const times = [];
  for (let i = 0; i < runs; i++) {
    const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
    const t0 = Date.now();
    await page.goto("file://" + path);
    await page.waitForSelector("body[data-ready='1']", { state: "attached", timeout: 120000 });
    times.push(Date.now() - t0);
    await page.close();
  }
  const sorted = times.slice().sort((x, y) => x - y);
  console.log(`${name.padEnd(30)} ${mb(html.length).padStart(8)} ${mb(b - a).padStart(8)} ${String(json).padStart(15)} ${String(sorted[Math.floor(runs / 2)]).padStart(8)}  ${times.join(" ")}`);
}
await browser.close();

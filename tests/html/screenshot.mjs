// Screenshots of a report.html in headless Chromium, as the README shows them: the first screen
// at 1400x900 and at 1000x900.
//   node tests/html/screenshot.mjs REPORT.html OUT.png   (also writes OUT-1000.png)
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(here, "../../report/web/package.json"));
const { chromium } = require("playwright-core");
const [report, out] = process.argv.slice(2);
if (!report || !out) {
  console.error("usage: node tests/html/screenshot.mjs REPORT.html OUT.png");
  process.exit(2);
}
const browser = await chromium.launch({ executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"] });
for (const width of [1400, 1000]) {
  const page = await browser.newPage({ viewport: { width, height: 900 }, colorScheme: "light" });
  await page.goto("file://" + resolve(report));
  await page.waitForSelector("body[data-ready='1']", { timeout: 30000 });
  const path = width === 1400 ? out : out.replace(/\.png$/, "-1000.png");
  await page.screenshot({ path });
  console.log(path);
  await page.close();
}
await browser.close();

#!/usr/bin/env node
/**
 * A PNG of a harness report (or any local HTML file) taken by Debian's headless Chromium, for
 * docs and for reviewing a CI artefact without opening a browser. The report is self-contained
 * (inline SVG, no scripts), so Chromium is told to reach nothing: no network services, no
 * profile of its own user (a fresh one in a temporary directory, removed afterwards).
 *
 *   node scripts/report-screenshot.mjs REPORT.html OUT.png [--width 1400] [--height 2400]
 *
 * CHROMIUM=/path/to/chromium picks another binary (default /usr/bin/chromium).
 */
import { spawnSync } from "node:child_process"
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import { join, resolve } from "node:path"
import { pathToFileURL } from "node:url"

const usage = "usage: node scripts/report-screenshot.mjs REPORT.html OUT.png [--width 1400] [--height 2400]"
const args = process.argv.slice(2)
const flag = (name, fallback) => {
  const at = args.indexOf(name)
  if (at === -1) return fallback
  const value = Number(args.splice(at, 2)[1])
  if (!Number.isInteger(value) || value < 100 || value > 20_000) {
    console.error(`report-screenshot: ${name} takes whole pixels from 100 to 20000`)
    process.exit(2)
  }
  return value
}
const width = flag("--width", 1400)
const height = flag("--height", 2400)
if (args.length !== 2) {
  console.error(usage)
  process.exit(2)
}
const [page, out] = args.map((path) => resolve(path))
if (!existsSync(page)) {
  console.error(`report-screenshot: ${page} does not exist`)
  process.exit(2)
}
const chromium = process.env.CHROMIUM ?? "/usr/bin/chromium"
if (!existsSync(chromium)) {
  console.error(`report-screenshot: no Chromium at ${chromium}. On Debian or Ubuntu install it with\n  apt-get install -y chromium   (sudo apt-get install -y chromium without root)\nor point CHROMIUM at a Chromium or Chrome binary.`)
  process.exit(2)
}

const profile = mkdtempSync(join(tmpdir(), "report-screenshot-"))
try {
  const run = spawnSync(chromium, [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", `--user-data-dir=${profile}`, `--screenshot=${out}`, `--window-size=${width},${height}`,
    pathToFileURL(page).href
  ], { encoding: "utf8", timeout: 60_000 })
  if (run.error !== undefined || run.status !== 0 || !existsSync(out)) {
    console.error(`report-screenshot: chromium failed (${run.error?.message ?? `exit ${run.status}`})\n${run.stderr ?? ""}`)
    process.exit(1)
  }
  console.log(`${out}: ${(statSync(out).size / 1024).toFixed(0)} KB, ${width}×${height}`)
} finally {
  rmSync(profile, { recursive: true, force: true })
}

/**
 * The harness measuring itself: the built-in `health` scenario (GET /healthz, no laws) at a
 * fixed rate, then its own CPU per request and memory against the targets (>= 2,000 requests/s
 * using < 0.3 ms of harness CPU per request, RSS flat). Prints figures and PASS or FAIL; no test
 * asserts on them.
 *
 *   npm run harness:bench [-- --rate 2000 --duration 20 --target URL]
 *
 * Without --target the harness starts the service too, which then shares the machine's cores.
 */
import { parseArguments } from "./Cli.ts"
import { runHarness, summaryOf } from "./main.ts"

const targetRate = 2000
const targetCpuMs = 0.3

const given = process.argv.slice(2)
const defaults: Array<[string, string]> = [["--scenario", "health"], ["--rate", String(targetRate)], ["--duration", "20"], ["--report", "bench/results/harness-bench"]]
const argv = [...given]
for (const [flag, value] of defaults) {
  const open = flag === "--rate" && given.includes("--connections")
  if (!given.some((argument) => argument === flag || argument.startsWith(`${flag}=`)) && !open) argv.push(flag, value)
}
const parsed = parseArguments(argv)
if (parsed.command === "help") {
  console.log(`harness:bench: the harness measuring itself (the health scenario at ${targetRate} requests/s for 20 s unless flags say otherwise); it takes the run flags of npm run harness.\n\n${parsed.text}`)
  process.exit(0)
}
if (parsed.command !== "run") {
  console.error(parsed.command === "error" ? `harness:bench: ${parsed.message}` : "harness:bench takes the run flags of npm run harness")
  process.exit(2)
}
const { result, files } = await runHarness(parsed, {
  log: (line) => process.stderr.write(`${line}\n`),
  out: (line) => process.stdout.write(`${line}\n`),
  progress: { write: (text) => process.stderr.write(text), isTTY: process.stderr.isTTY === true }
})
console.log(summaryOf(result, files))
const cpuMs = result.cpu.harness_ms_per_request ?? Infinity
const rss = result.cpu.harness_rss_mb
const checks = [
  [`rate ${result.rate_per_s.toFixed(0)}/s >= ${targetRate}/s`, result.rate_per_s >= targetRate * 0.99],
  [`harness CPU ${Number.isFinite(cpuMs) ? cpuMs.toFixed(3) : "n/a"} ms per request < ${targetCpuMs} ms`, cpuMs < targetCpuMs],
  [`no errors (${result.errors})`, result.errors === 0]
] as const
for (const [what, ok] of checks) console.log(`${ok ? "PASS" : "FAIL"}  ${what}`)
console.log(`RSS MB: ${rss.start.toFixed(0)} at the start, ${rss.end.toFixed(0)} at the end, ${rss.peak.toFixed(0)} peak`)
console.log(`RSS MB every 10 s: ${rss.samples.map(([second, mb]) => `${second}s ${mb}`).join(", ")}`)
process.exit(checks.every(([, ok]) => ok) ? 0 : 1)

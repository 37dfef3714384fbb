/**
 * The harness measuring itself: the built-in `health` scenario (GET /healthz, no laws) at a
 * fixed rate, then autocannon at the same rate, with as many connections as the harness has
 * sockets, against the same target in the same run; each one's CPU per request, and the
 * harness's memory, against the targets (>= 2,000 requests/s using < 0.3 ms of harness CPU per
 * request and at most twice autocannon's, RSS flat). Prints figures and PASS or FAIL; no test
 * asserts on them.
 *
 *   npm run harness:bench [-- --rate 2000 --duration 20 --target URL]
 *
 * Without --target both drive a plain node:http responder in a process of its own (/healthz
 * answers 200 with a small JSON body): the driver's own cost and its ceiling, with no service
 * behind it. Both drivers run in this one process, one after the other.
 */
import autocannon from "autocannon"
import { fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import { parseArguments } from "./Cli.ts"
import { runHarness, summaryOf } from "./main.ts"

/** `responder PORT`: the plain node:http responder this bench drives without --target (its own process, so its CPU is not the driver's). */
if (process.argv[2] === "responder") {
  const { createServer } = await import("node:http")
  const body = "{\"status\":\"ok\"}"
  const server = createServer((request, response) => {
    if (request.url === "/healthz") {
      response.writeHead(200, { "content-type": "application/json", "content-length": body.length }).end(body)
    } else response.writeHead(204).end()
  })
  server.listen(0, "127.0.0.1", () => process.send!((server.address() as { port: number }).port))
  await new Promise(() => {})
}

const targetRate = 2000
const targetCpuMs = 0.3

const given = process.argv.slice(2)
const responder = given.some((argument) => argument === "--target" || argument.startsWith("--target="))
  ? null
  : fork(fileURLToPath(import.meta.url), ["responder"], {
    execArgv: ["--import", "tsx"],
    stdio: ["ignore", "inherit", "inherit", "ipc"]
  })
if (responder !== null) {
  const port = await new Promise<number>((listening) =>
    responder.once("message", (message) => listening(message as number))
  )
  given.push("--target", `http://127.0.0.1:${port}`)
}
const defaults: Array<[string, string]> = [["--scenario", "health"], ["--rate", String(targetRate)], [
  "--duration",
  "20"
], ["--report", "bench/results/harness-bench"]]
const argv = [...given]
for (const [flag, value] of defaults) {
  const open = flag === "--rate" && given.includes("--connections")
  if (!given.some((argument) => argument === flag || argument.startsWith(`${flag}=`)) && !open) argv.push(flag, value)
}
const parsed = parseArguments(argv)
if (parsed.command === "help") {
  responder?.kill()
  console.log(
    `harness:bench: the harness measuring itself (the health scenario at ${targetRate} requests/s for 20 s unless flags say otherwise); it takes the run flags of npm run harness.\n\n${parsed.text}`
  )
  process.exit(0)
}
if (parsed.command !== "run") {
  responder?.kill()
  console.error(
    parsed.command === "error"
      ? `harness:bench: ${parsed.message}`
      : "harness:bench takes the run flags of npm run harness"
  )
  process.exit(2)
}
const { result, files } = await runHarness(parsed, {
  log: (line) => process.stderr.write(`${line}\n`),
  out: (line) => process.stdout.write(`${line}\n`),
  progress: { write: (text) => process.stderr.write(text), isTTY: process.stderr.isTTY === true }
})
console.log(summaryOf(result, files))

/** autocannon against the same target, at the same rate and for as long, with as many connections as the harness's sockets. */
const autocannonCost = async () => {
  const rate = parsed.model.kind === "open" ? parsed.model.rate : undefined
  const before = process.cpuUsage()
  const run = await autocannon({
    url: `${parsed.targetUrls[0]!.replace(/\/$/, "")}/healthz`,
    connections: parsed.sockets,
    duration: parsed.durationSeconds,
    ...(rate === undefined ? {} : { overallRate: rate })
  })
  const used = process.cpuUsage(before)
  const requests = run.requests.total
  return {
    requests,
    rate: requests / parsed.durationSeconds,
    errors: run.errors + run.non2xx + run.timeouts,
    cpuMs: requests === 0 ? Infinity : (used.user + used.system) / 1000 / requests,
    p99: run.latency.p99
  }
}
const cannon = await autocannonCost()
responder?.kill()
const cpuMs = result.cpu.harness_ms_per_request ?? Infinity
const rss = result.cpu.harness_rss_mb
console.log(
  `autocannon, same target, rate and duration (${parsed.sockets} connections): ${cannon.requests} requests, ${
    cannon.rate.toFixed(0)
  }/s, ` +
    `${cannon.errors} errors, p99 ${cannon.p99} ms, ${cannon.cpuMs.toFixed(3)} ms CPU per request`
)
console.log(
  `harness: ${result.requests} requests, ${result.rate_per_s.toFixed(0)}/s, ${cpuMs.toFixed(3)} ms CPU per request = ${
    (cpuMs / cannon.cpuMs).toFixed(2)
  }× autocannon's`
)
const checks = [
  [`rate ${result.rate_per_s.toFixed(0)}/s >= ${targetRate}/s`, result.rate_per_s >= targetRate * 0.99],
  [
    `harness CPU ${Number.isFinite(cpuMs) ? cpuMs.toFixed(3) : "n/a"} ms per request < ${targetCpuMs} ms`,
    cpuMs < targetCpuMs
  ],
  [`harness CPU per request ${(cpuMs / cannon.cpuMs).toFixed(2)}× autocannon's <= 2×`, cpuMs <= 2 * cannon.cpuMs],
  [`no errors (${result.errors})`, result.errors === 0]
] as const
for (const [what, ok] of checks) console.log(`${ok ? "PASS" : "FAIL"}  ${what}`)
console.log(
  `RSS MB: ${rss.start.toFixed(0)} at the start, ${rss.end.toFixed(0)} at the end, ${rss.peak.toFixed(0)} peak`
)
console.log(`RSS MB every 10 s: ${rss.samples.map(([second, mb]) => `${second}s ${mb}`).join(", ")}`)
process.exit(checks.every(([, ok]) => ok) ? 0 : 1)

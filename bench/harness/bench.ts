/**
 * The harness measuring itself against autocannon: the built-in `health` scenario (GET /healthz,
 * no laws) at a fixed rate, and autocannon at the same rate with as many connections as the
 * harness has sockets, against the same target, in this one process; each one's CPU per request
 * and their ratio against the targets (>= 2,000 requests/s using < 0.3 ms of harness CPU per
 * request and at most twice autocannon's, RSS flat from round to round). Prints figures and PASS
 * or FAIL; no test asserts on them.
 *
 *   npm run harness:bench [-- --rounds 3 --rate 2000 --duration 15 --target URL]
 *
 * The method, so that neither driver is timed cold and a drift of the machine falls on both:
 * `--rounds` rounds (default 3), each a timed window of `--duration` seconds for each driver,
 * the two windows of a round back to back, the harness first in odd rounds and autocannon first
 * in even ones. Every timed window follows an untimed warm-up of the same driver (`warmupSeconds`
 * at the same rate: its JIT, its connections and its first collections out of the window), then
 * a full collection (neither driver pays for the other's garbage in the heap they share). A
 * round's ratio is its two windows' CPU per request; the verdict reads the median of the rounds'
 * ratios, and of the harness's CPU per request. The harness's session (its client and its
 * scenario) is opened once for all its windows. No report is written.
 *
 * Without --target both drive a plain node:http responder in a process of its own (/healthz
 * answers 200 with a small JSON body): the driver's own cost and its ceiling, with no service
 * behind it.
 */
import autocannon from "autocannon"
import { fork } from "node:child_process"
import { fileURLToPath } from "node:url"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { parseArguments, type RunOptions } from "./Cli.ts"
import { closeSession, driveLoad, type Io, judgeLoad, openSession, type Session } from "./Run.ts"

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
const defaultRounds = 3
const defaultDurationSeconds = 15
/**
 * RSS is flat when each round ends within this much of the first round's end (MB): measured after
 * a full collection before each window, the heap holds what the drivers keep, not their garbage.
 */
const rssGrowthBoundMb = 32
/** Each timed window follows this much of the same driver at the same rate, untimed. */
const warmupSeconds = 3

/**
 * A full collection before each timed window: both drivers share one heap, and a major
 * collection falls where the old generation happens to fill, in whichever window runs then (the
 * third round's second window, run after run), so without it one driver pays for the other's
 * garbage. Each still pays its own scavenges in its window.
 */
setFlagsFromString("--expose-gc")
const collectGarbage = runInNewContext("gc") as () => void

/** What one timed window of one driver measured. */
interface Window {
  readonly requests: number
  readonly ratePerS: number
  readonly errors: number
  readonly cpuMsPerRequest: number
  readonly p99Ms: number
  /** The harness's own verdict on its pace (null for autocannon). */
  readonly pace: string | null
}

/** `--rounds N`, the bench's own flag, taken out of the run flags. */
const roundsOf = (given: Array<string>): number | string => {
  const at = given.findIndex((argument) => argument === "--rounds" || argument.startsWith("--rounds="))
  if (at < 0) return defaultRounds
  const inline = given[at]!.includes("=")
  const text = inline ? given[at]!.slice("--rounds=".length) : given[at + 1]
  given.splice(at, inline ? 1 : 2)
  const rounds = Number(text)
  return Number.isInteger(rounds) && rounds >= 1 && rounds <= 20 ? rounds : `--rounds takes 1 to 20, not ${text}`
}

const given = process.argv.slice(2)
const rounds = roundsOf(given)
if (typeof rounds === "string") {
  console.error(`harness:bench: ${rounds}`)
  process.exit(2)
}
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
  String(defaultDurationSeconds)
]]
const argv = [...given]
for (const [flag, value] of defaults) {
  const open = flag === "--rate" && given.includes("--connections")
  if (!given.some((argument) => argument === flag || argument.startsWith(`${flag}=`)) && !open) argv.push(flag, value)
}
const parsed = parseArguments(argv)
if (parsed.command === "help") {
  responder?.kill()
  console.log(
    `harness:bench: the harness measuring itself against autocannon (the health scenario at ${targetRate} requests/s, ${defaultRounds} rounds of ${defaultDurationSeconds} s a driver unless flags say otherwise); it takes --rounds N and the run flags of npm run harness.\n\n${parsed.text}`
  )
  process.exit(0)
}
const refusal = parsed.command === "error"
  ? parsed.message
  : parsed.command !== "run"
  ? "it takes the run flags of npm run harness"
  : parsed.scenario !== "health"
  ? `it drives the health scenario only (autocannon asks for /healthz), not ${parsed.scenario}`
  : parsed.findCapacity !== null
  ? "--find-capacity is a run of its own (npm run harness)"
  : null
if (refusal !== null || parsed.command !== "run") {
  responder?.kill()
  console.error(`harness:bench: ${refusal}`)
  process.exit(2)
}
const options: RunOptions = parsed
const io: Io = {
  log: (line) => process.stderr.write(`${line}\n`),
  out: (line) => process.stdout.write(`${line}\n`),
  progress: { write: (text) => process.stderr.write(text), isTTY: process.stderr.isTTY === true }
}

/** The harness: an untimed warm-up, then its timed window over the same session. */
const harnessWindow = async (session: Session, label: string): Promise<Window> => {
  const model = options.model
  await driveLoad(session, {
    model,
    durationMs: warmupSeconds * 1000,
    maxRequests: null,
    warmupMs: 0,
    judgedCap: null,
    label: `${label} harness warm-up  `
  })
  collectGarbage()
  const figures = await driveLoad(session, {
    model,
    durationMs: options.durationSeconds * 1000,
    maxRequests: options.maxRequests,
    warmupMs: 0,
    judgedCap: null,
    label: `${label} harness  `
  })
  const { saturation, rate } = judgeLoad(session, figures, model)
  const requests = figures.load.requests
  return {
    requests,
    ratePerS: rate,
    errors: figures.load.errors,
    cpuMsPerRequest: requests === 0 ? Infinity : figures.harnessCpuSeconds * 1000 / requests,
    p99Ms: figures.load.latency_ms.p99,
    pace: saturation.verdict
  }
}

/** autocannon against the same target, at the same rate, with as many connections as the harness's sockets. */
const autocannonRun = async (seconds: number) => {
  const rate = options.model.kind === "open" ? options.model.rate : undefined
  const before = process.cpuUsage()
  const run = await autocannon({
    url: `${options.targetUrls[0]!.replace(/\/$/, "")}/healthz`,
    connections: options.sockets,
    duration: seconds,
    ...(rate === undefined ? {} : { overallRate: rate })
  })
  const used = process.cpuUsage(before)
  const requests = run.requests.total
  return {
    requests,
    ratePerS: requests / seconds,
    errors: run.errors + run.non2xx + run.timeouts,
    cpuMsPerRequest: requests === 0 ? Infinity : (used.user + used.system) / 1000 / requests,
    p99Ms: run.latency.p99,
    pace: null
  }
}

/** autocannon: an untimed warm-up, then its timed window. */
const autocannonWindow = async (label: string): Promise<Window> => {
  io.log(`${label} autocannon warm-up (${warmupSeconds} s), then ${options.durationSeconds} s timed`)
  await autocannonRun(warmupSeconds)
  collectGarbage()
  return autocannonRun(options.durationSeconds)
}

const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const middle = Math.floor(sorted.length / 2)
  return sorted.length % 2 === 1 ? sorted[middle]! : (sorted[middle - 1]! + sorted[middle]!) / 2
}
const rssMb = () => process.memoryUsage.rss() / 2 ** 20
const windowText = (window: Window) =>
  `${window.requests} requests, ${window.ratePerS.toFixed(0)}/s, ${window.errors} errors, p99 ${window.p99Ms} ms, ${
    window.cpuMsPerRequest.toFixed(3)
  } ms CPU a request${window.pace === null ? "" : ` (${window.pace})`}`

const measured: Array<{ readonly harness: Window; readonly cannon: Window; readonly ratio: number }> = []
const rss: Array<number> = []
const rssStart = rssMb()
const session = await openSession(options, io, {})
try {
  if (!session.setUp) throw new Error(session.failures.join("; "))
  for (let round = 1; round <= rounds; round++) {
    const label = `round ${round}/${rounds}`
    let harness: Window
    let cannon: Window
    if (round % 2 === 1) {
      harness = await harnessWindow(session, label)
      cannon = await autocannonWindow(label)
    } else {
      cannon = await autocannonWindow(label)
      harness = await harnessWindow(session, label)
    }
    rss.push(rssMb())
    const ratio = harness.cpuMsPerRequest / cannon.cpuMsPerRequest
    measured.push({ harness, cannon, ratio })
    console.log(`${label} (${round % 2 === 1 ? "harness first" : "autocannon first"}): ratio ${ratio.toFixed(2)}×`)
    console.log(`  harness     ${windowText(harness)}`)
    console.log(`  autocannon  ${windowText(cannon)} (${options.sockets} connections)`)
  }
} finally {
  await closeSession(session)
  responder?.kill()
}

const ratios = measured.map((round) => round.ratio)
const medianRatio = median(ratios)
const medianCpuMs = median(measured.map((round) => round.harness.cpuMsPerRequest))
const slowest = Math.min(...measured.map((round) => round.harness.ratePerS))
const errors = measured.reduce((sum, round) => sum + round.harness.errors, 0)
const rssGrowthMb = Math.max(...rss) - rss[0]!
const cpuText = (ms: number) => Number.isFinite(ms) ? ms.toFixed(3) : "n/a"
console.log(
  `median of ${rounds} rounds: harness ${cpuText(medianCpuMs)} ms CPU a request, ${
    medianRatio.toFixed(2)
  }× autocannon's (rounds ${ratios.map((ratio) => `${ratio.toFixed(2)}×`).join(", ")})`
)
const targetFor = options.model.kind === "open" ? Math.min(targetRate, options.model.rate) : 0
const checks = [
  [
    `rate: every harness window >= ${targetFor}/s (${
      measured.map((round) => round.harness.ratePerS.toFixed(0)).join(", ")
    })`,
    slowest >= targetFor * 0.99
  ],
  [`harness CPU ${cpuText(medianCpuMs)} ms per request (median) < ${targetCpuMs} ms`, medianCpuMs < targetCpuMs],
  [`harness CPU per request ${medianRatio.toFixed(2)}× autocannon's (median of the rounds) <= 2×`, medianRatio <= 2],
  [`no errors (${errors})`, errors === 0],
  [
    `RSS flat: ${rssGrowthMb >= 0 ? "+" : ""}${
      rssGrowthMb.toFixed(0)
    } MB at a round's end over the first round's <= ${rssGrowthBoundMb} MB`,
    rssGrowthMb <= rssGrowthBoundMb
  ]
] as const
for (const [what, ok] of checks) console.log(`${ok ? "PASS" : "FAIL"}  ${what}`)
console.log(
  `RSS MB: ${rssStart.toFixed(0)} at the start; at each round's end ${
    rss.map((mb) => mb.toFixed(0)).join(", ")
  }; peak ${Math.max(rssStart, ...rss, session.rss.peak).toFixed(0)}`
)
process.exit(checks.every(([, ok]) => ok) ? 0 : 1)

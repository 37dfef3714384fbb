import { parseArgs } from "node:util"
import { makeProcessor } from "./Processor.ts"
import { parseFaults, startProcessorServer } from "./Server.ts"

/**
 * `npm run processor:sandbox -- --port 12111`: the sandbox processor (./Processor.ts) on
 * 127.0.0.1, for running the service with `ACQUIRER=stripe STRIPE_API_BASE=http://127.0.0.1:12111`
 * (docs/processor.md has the flags and the admin routes).
 */

const usage = `usage: npm run processor:sandbox -- [--port 12111] [--secret-key sk_test_…]
  [--webhook-url http://127.0.0.1:3000/… --webhook-secret whsec_…]
  [--error-rate 0..1] [--lost-answer-rate 0..1] [--latency-ms N] [--duplicate-rate 0..1] [--search-lag-ms N]
  [--dispute-open-after-ms N] [--dispute-close-after-ms N] [--refund-fail-after-ms N]`

const fail = (message: string): never => {
  process.stderr.write(`${message}\n${usage}\n`)
  process.exit(2)
}

const { values } = (() => {
  try {
    return parseArgs({
      options: {
        port: { type: "string", default: "12111" },
        "secret-key": { type: "string" },
        "webhook-url": { type: "string" },
        "webhook-secret": { type: "string" },
        "error-rate": { type: "string" },
        "lost-answer-rate": { type: "string" },
        "latency-ms": { type: "string" },
        "duplicate-rate": { type: "string" },
        "search-lag-ms": { type: "string" },
        "dispute-open-after-ms": { type: "string", default: "60000" },
        "dispute-close-after-ms": { type: "string", default: "60000" },
        "refund-fail-after-ms": { type: "string", default: "60000" }
      },
      strict: true
    })
  } catch (error) {
    return fail(error instanceof Error ? error.message : String(error))
  }
})()

const integer = (name: string, text: string | undefined, maximum: number) => {
  const n = /^\d+$/.test(text ?? "") ? Number(text) : Number.NaN
  return Number.isSafeInteger(n) && n <= maximum ? n : fail(`--${name} must be an integer from 0 to ${maximum}`)
}

const port = integer("port", values.port, 65_535)
const faultFlags = {
  errorRate: values["error-rate"],
  lostAnswerRate: values["lost-answer-rate"],
  latencyMs: values["latency-ms"],
  duplicateRate: values["duplicate-rate"],
  searchLagMs: values["search-lag-ms"]
}
const faults = parseFaults(
  Object.fromEntries(Object.entries(faultFlags).filter(([, v]) => v !== undefined).map(([k, v]) => [k, Number(v)]))
)
if (typeof faults === "string") fail(faults)
if ((values["webhook-url"] === undefined) !== (values["webhook-secret"] === undefined)) {
  fail("--webhook-url and --webhook-secret go together")
}

const processor = makeProcessor({
  ...(values["secret-key"] === undefined ? {} : { secretKey: values["secret-key"] }),
  disputeOpenAfterMs: integer("dispute-open-after-ms", values["dispute-open-after-ms"], 86_400_000),
  disputeCloseAfterMs: integer("dispute-close-after-ms", values["dispute-close-after-ms"], 86_400_000),
  refundFailAfterMs: integer("refund-fail-after-ms", values["refund-fail-after-ms"], 60_000)
})
processor.setFaults(faults as Exclude<typeof faults, string>)

const running = await startProcessorServer({
  processor,
  port,
  tickMs: 1_000,
  ...(values["webhook-url"] === undefined
    ? {}
    : { webhook: { url: values["webhook-url"], secret: values["webhook-secret"]! } })
})
process.stdout.write(`sandbox processor on ${running.url} (faults ${JSON.stringify(processor.faults())})\n`)
const stop = () => void running.close().then(() => process.exit(0))
process.on("SIGINT", stop)
process.on("SIGTERM", stop)

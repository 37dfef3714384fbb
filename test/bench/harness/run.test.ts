import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseArguments, type RunOptions } from "../../../bench/harness/Cli.ts"
import type { Scenario, SetupContext } from "../../../bench/harness/Contract.ts"
import { type Io, main, runHarness } from "../../../bench/harness/main.ts"
import type { HarnessResult } from "../../../bench/harness/Result.ts"
import { freshDatabase } from "../../support/database.ts"
import { killServices, type ServiceProcess, startService } from "../../support/service.ts"

const quietIo = () => {
  const lines: Array<string> = []
  const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
  return { io, lines }
}

const options = (argv: Array<string>) => {
  const parsed = parseArguments(argv)
  if (parsed.command !== "run") throw new Error(`not a run: ${JSON.stringify(parsed)}`)
  return parsed as RunOptions
}

const reportOf = (directory: string) => readdirSync(directory)

describe("the harness against a running service", () => {
  let service: ServiceProcess
  let directory: string

  beforeAll(async () => {
    service = await startService(await freshDatabase("harness"), { RATE_LIMIT_PER_SECOND: "1000000" })
    directory = mkdtempSync(join(tmpdir(), "payments-harness-test-"))
  })
  afterAll(() => {
    killServices()
    rmSync(directory, { recursive: true, force: true })
  })

  it(
    "drives the health scenario for a bounded number of requests and writes the JSON result and the HTML page",
    async () => {
      // The load lasts 0.6 s: one pause of the service can leave a few answers past its window, and
      // the saturation verdict (tested on its own in test/harness) would fail a run this test is not about.
      const first = quietIo()
      const code = await main([
        "--target",
        service.baseUrl,
        "--scenario",
        "health",
        "--rate",
        "500",
        "--duration",
        "60",
        "--max-requests",
        "300",
        "--allow-saturation",
        "--report",
        join(directory, "a")
      ], first.io)
      expect(code, first.lines.join("\n")).toBe(0)
      const files = reportOf(join(directory, "a"))
      const json = files.find((f) => f.endsWith(".json"))!
      expect(files.filter((f) => f.endsWith(".html"))).toHaveLength(1)
      const result = JSON.parse(readFileSync(join(directory, "a", json), "utf8")) as HarnessResult
      expect(result.requests).toBe(300)
      expect(result.scripts).toBe(300)
      expect(result.status_codes).toEqual({ "200": 300 })
      expect(result.routes.map((r) => [r.route, r.requests])).toEqual([["GET /healthz", 300]])
      expect(result.timeline.reduce((n, s) => n + s.requests, 0)).toBe(300)
      expect(result.latency_ms.p50).toBeGreaterThan(0)
      expect(result.cpu.harness_ms_per_request).toBeGreaterThan(0)
      expect(result.cpu.service_s).toBeNull()
      expect(result.passed).toBe(true)
      expect(first.lines.join("\n")).toContain("PASSED")
      expect(readFileSync(join(directory, "a", json.replace(/\.json$/, ".html")), "utf8")).toContain("GET /healthz")

      // A second shard misses its objective: it exits 1, and so does the merge of both, with every request counted.
      const second = quietIo()
      const missed = await main([
        "--target",
        service.baseUrl,
        "--scenario",
        "health",
        "--connections",
        "4",
        "--max-requests",
        "200",
        "--slo",
        "rate>1000000",
        "--report",
        join(directory, "b")
      ], second.io)
      expect(missed, second.lines.join("\n")).toBe(1)
      expect(second.lines.join("\n")).toMatch(/slo rate>1000000\s+MISSED/)
      const other = reportOf(join(directory, "b")).find((f) => f.endsWith(".json"))!
      const merging = quietIo()
      const merged = await main([
        "merge",
        join(directory, "a", json),
        join(directory, "b", other),
        "--report",
        join(directory, "merged")
      ], merging.io)
      expect(merged).toBe(1)
      const mergedJson = reportOf(join(directory, "merged")).find((f) => f.endsWith(".json"))!
      const mergedResult = JSON.parse(readFileSync(join(directory, "merged", mergedJson), "utf8")) as HarnessResult
      expect(mergedResult.requests).toBe(500)
      expect(mergedResult.status_codes).toEqual({ "200": 500 })
      expect(mergedResult.config.shards).toHaveLength(2)
      expect(existsSync(join(directory, "merged", mergedJson.replace(/\.json$/, ".html")))).toBe(true)
    },
    180_000
  )

  it("refuses a result file it cannot read, and an unknown scenario, with exit code 2", async () => {
    const { io, lines } = quietIo()
    expect(await main(["merge", join(directory, "missing.json")], io)).toBe(2)
    expect(await main(["--target", service.baseUrl, "--scenario", "no-such-scenario", "--keys", "x"], io)).toBe(2)
    expect(lines.join("\n")).toContain("no scenario 'no-such-scenario'")
  })
})

/** A scenario that creates its merchants on the harness's own service and checks one law. */
const merchantScenario = (plantViolation: boolean): Scenario => {
  let context: SetupContext
  const keys: Array<string> = []
  const statuses: Array<number> = []
  return {
    name: "test-merchants",
    requestsPerScript: 1,
    setup: async (given) => {
      context = given
      for (let i = 0; i < given.merchants; i++) {
        const created = await given.embedded!.createMerchant(`Harness test ${i}`, null)
        expect(created.merchantId).toMatch(/^mer_/)
        keys.push(created.apiKey)
      }
    },
    runScript: async (index, intendedStartMs) => {
      const response = await context.transport.send({
        method: "GET",
        path: "/api/v1/merchants/me",
        headers: { authorization: `Bearer ${keys[index % keys.length]}` },
        body: null
      }, intendedStartMs)
      statuses.push(response?.status ?? 0)
    },
    drain: async () => {},
    checkLaws: async () => [{
      law: "merchants-known",
      description: "Every merchant the harness created answers with its record.",
      checked: statuses.length,
      violations: [
        ...statuses.filter((s) => s !== 200).map((s) => ({ paymentId: null, message: `answered ${s}`, requests: [] })),
        ...(plantViolation
          ? [{ paymentId: "pay_planted", message: "planted violation", requests: ["GET /api/v1/merchants/me -> 200"] }]
          : [])
      ]
    }],
    close: async () => {}
  }
}

describe("the harness on its own embedded service", () => {
  it("starts the service, creates merchants through it, runs the scripts and reports a violated law", async () => {
    const directory = mkdtempSync(join(tmpdir(), "payments-harness-embedded-"))
    try {
      const { io, lines } = quietIo()
      const { result, files } = await runHarness(
        options([
          "--scenario",
          "health",
          "--merchants",
          "2",
          "--rate",
          "200",
          "--max-requests",
          "100",
          "--report",
          directory
        ]),
        io,
        { scenario: merchantScenario(true) }
      )
      expect(result.requests, lines.join("\n")).toBe(100)
      expect(result.status_codes).toEqual({ "200": 100 })
      expect(result.routes.map((r) => r.route)).toEqual(["GET /api/v1/merchants/me"])
      expect(result.config.embedded).toBe(true)
      expect(result.cpu.service_s).not.toBeNull()
      expect(result.laws).toEqual([expect.objectContaining({
        law: "merchants-known",
        checked: 100,
        held: false,
        violation_count: 1,
        first_violations: [{
          paymentId: "pay_planted",
          message: "planted violation",
          requests: ["GET /api/v1/merchants/me -> 200"]
        }]
      })])
      expect(result.passed).toBe(false)
      expect(files.every((file) => existsSync(file))).toBe(true)
      expect(readFileSync(files[1]!, "utf8")).toContain("planted violation")
    } finally {
      rmSync(directory, { recursive: true, force: true })
    }
  }, 240_000)
})

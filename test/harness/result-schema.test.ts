import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseArguments } from "../../bench/harness/Cli.ts"
import type { Scenario, Transport } from "../../bench/harness/Contract.ts"
import { type Io, main, runHarness } from "../../bench/harness/main.ts"
import { validate } from "../support/jsonSchema.ts"

const schema = JSON.parse(readFileSync(join(import.meta.dirname, "../../docs/harness-result.schema.json"), "utf8"))

const quietIo = () => {
  const lines: Array<string> = []
  const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
  return { io, lines }
}

/** The one result a run wrote into `directory`. */
const resultIn = (directory: string) => {
  const json = readdirSync(directory).filter((f) => f.endsWith(".json"))
  expect(json).toHaveLength(1)
  return {
    file: join(directory, json[0]!),
    result: JSON.parse(readFileSync(join(directory, json[0]!), "utf8")) as Record<string, unknown>
  }
}

describe("the result's JSON Schema (docs/harness-result.schema.json) against real results", () => {
  let server: Server
  let target: string
  let directory: string
  beforeAll(async () => {
    // The health scenario needs nothing but /healthz: a plain server in this process is a real target.
    server = createServer((_request, response) =>
      response.writeHead(200, { "content-type": "application/json" }).end("{\"status\":\"ok\"}")
    )
    await new Promise<void>((listening) => server.listen(0, "127.0.0.1", listening))
    target = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    directory = mkdtempSync(join(tmpdir(), "payments-harness-schema-"))
  })
  afterAll(async () => {
    await new Promise((closed) => server.close(closed))
    rmSync(directory, { recursive: true, force: true })
  })

  const run = async (name: string, argv: ReadonlyArray<string>) => {
    const { io, lines } = quietIo()
    const code = await main(
      ["--target", target, "--scenario", "health", "--report", join(directory, name), ...argv],
      io
    )
    const { file, result } = resultIn(join(directory, name))
    expect(validate(schema, result), lines.join("\n")).toEqual([])
    return { code, file, result, lines }
  }

  it(
    "a plain run, a run along stages with a warm-up, objectives per route and --abort-on-fail, and their merge",
    async () => {
      // --allow-saturation: on a busy machine the driver may fall behind, and this test is about the keys, not the pace.
      const plain = await run("plain", [
        "--rate",
        "200",
        "--max-requests",
        "200",
        "--slo",
        "p99<5s,errors<1%",
        "--allow-saturation"
      ])
      expect(plain.code, plain.lines.join("\n")).toBe(0)
      expect(plain.result).toMatchObject({ format: "payments-harness/2", requests: 200, config: { rate_per_s: 200 } })
      // The report's series over time: what was issued and offered each second, each route's own percentiles.
      const seconds = plain.result["timeline"] as Array<
        { issued: number; requests: number; offered_per_s: number | null }
      >
      expect(seconds.reduce((n, s) => n + s.issued, 0)).toBe(200)
      expect(seconds[0]!.offered_per_s).toBe(200)
      const route = (plain.result["routes"] as Array<{ timeline: Array<{ requests: number }> }>)[0]!
      expect(route.timeline.reduce((n, s) => n + s.requests, 0)).toBe(200)
      // p99 under a microsecond cannot hold: the run stops long before its 3 s.
      const shaped = await run("shaped", [
        "--stages",
        "1s:100,2s:100-200",
        "--warmup",
        "500ms",
        "--slo",
        "p99<0.001ms",
        "--slo",
        "GET /healthz:errors<1%,rate>1",
        "--abort-on-fail",
        "--allow-saturation"
      ])
      expect(shaped.code).toBe(1)
      expect(shaped.result).toMatchObject({
        config: { stages: "1s 100/s, 2s 100→200/s", warmup_s: 0.5, abort_on_fail: true },
        aborted: { objective: "p99<0.001ms" }
      })
      expect((shaped.result["slo"] as Array<{ route: string | null }>).map((o) => o.route)).toEqual([
        null,
        "GET /healthz",
        "GET /healthz"
      ])
      expect(shaped.result["stage_spans"]).toEqual([{ stage: 0, text: "1s 100/s", from_s: 0, to_s: 1 }, {
        stage: 1,
        text: "2s 100→200/s",
        from_s: 1,
        to_s: 3
      }])
      const merging = quietIo()
      // The merge judges the first result's objectives (p99<5s, errors<1%) over both: met.
      expect(await main(["merge", plain.file, shaped.file, "--report", join(directory, "merged")], merging.io)).toBe(0)
      expect(validate(schema, resultIn(join(directory, "merged")).result)).toEqual([])
    },
    120_000
  )

  it("a capacity search: its steps, the sustained rate and the plot", async () => {
    const capacity = await run("capacity", [
      "--find-capacity",
      "--rate",
      "100",
      "--step-duration",
      "1s",
      "--slo",
      "p99<2s"
    ])
    const figures = capacity.result["capacity"] as {
      steps: Array<unknown>
      plot: string
      sustained_per_s: number | null
    }
    expect(figures.steps.length).toBeGreaterThan(0)
    expect(figures.steps.length).toBeLessThanOrEqual(12)
    expect(capacity.code).toBe(figures.sustained_per_s === null ? 1 : 0)
    const plot = join(directory, "capacity", figures.plot)
    expect(existsSync(plot)).toBe(true)
    expect(readFileSync(plot, "utf8")).toContain("<svg")
    expect(readFileSync(capacity.file.replace(/\.json$/, ".html"), "utf8")).toContain("<h2>Capacity</h2>")
  }, 180_000)

  it(
    "numbers the scripts on across the steps of a capacity search (a scenario derives its idempotency keys from them)",
    async () => {
      const indices: Array<number> = []
      let transport: Transport | null = null
      const scenario: Scenario = {
        name: "indices",
        requestsPerScript: 1,
        setup: async (context) => void (transport = context.transport),
        runScript: async (index, intendedStartMs) => {
          indices.push(index)
          await transport!.send({ method: "GET", path: "/healthz", headers: {}, body: null }, intendedStartMs)
        },
        drain: async () => {},
        checkLaws: async () => [],
        close: async () => {}
      }
      const parsed = parseArguments([
        "--target",
        target,
        "--scenario",
        "health",
        "--find-capacity",
        "--rate",
        "20",
        "--step-duration",
        "1s",
        "--slo",
        "p99<1ms",
        "--report",
        join(directory, "indices")
      ])
      if (parsed.command !== "run") throw new Error(JSON.stringify(parsed))
      const { result } = await runHarness(parsed, quietIo().io, { scenario })
      expect(result.capacity!.steps.length).toBeGreaterThan(1)
      expect(new Set(indices).size).toBe(indices.length)
      expect(Math.max(...indices)).toBe(indices.length - 1)
    },
    120_000
  )

  it("the validator is not a rubber stamp: an older key, a missing one, a measured value without its unit", async () => {
    const { result } = resultIn(join(directory, "plain"))
    const { rate_per_s, ...withoutRate } = result
    expect(validate(schema, { ...withoutRate, rate: rate_per_s })).toEqual([
      "/: lacks required rate_per_s",
      "/: has rate, which the schema does not list"
    ])
    const slo = (result["slo"] as Array<Record<string, unknown>>).map(({ measured_ms, ...rest }) => ({
      ...rest,
      actual: measured_ms
    }))
    expect(validate(schema, { ...result, slo }).join("\n")).toContain("has actual, which the schema does not list")
    expect(validate(schema, { ...result, format: "payments-harness/1" })).toEqual([
      "/format: is \"payments-harness/1\", not \"payments-harness/2\""
    ])
  })
})

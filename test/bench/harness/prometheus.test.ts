import { describe, expect, it } from "vitest"
import { prometheusText, servePrometheus } from "../../../bench/harness/Prometheus.ts"
import { freePort } from "../../../src/platform/Database.ts"

const figures = {
  offeredPerSecond: 200,
  achievedPerSecond: 198.5,
  routes: [{
    route: "POST /api/v1/transactions",
    statusCodes: new Map<number | "dropped" | "refused", number>([[201, 90], ["dropped", 1]]),
    count: 91,
    quantilesMs: [[0.5, 12], [0.99, 250]] as ReadonlyArray<readonly [number, number]>
  }],
  requestsSent: 92,
  inFlight: 1,
  lawsViolated: 0
}

describe("the harness's own metrics (--prometheus-port)", () => {
  it("in the Prometheus text format: rates, answers by route and status, latency quantiles in seconds, laws violated", () => {
    const text = prometheusText(figures)
    expect(text).toContain(
      "# TYPE harness_offered_requests_per_second gauge\nharness_offered_requests_per_second 200\n"
    )
    expect(text).toContain("harness_achieved_requests_per_second 198.5\n")
    expect(text).toContain(`harness_responses_total{route="POST /api/v1/transactions",status="201"} 90\n`)
    expect(text).toContain(`harness_responses_total{route="POST /api/v1/transactions",status="dropped"} 1\n`)
    expect(text).toContain(`harness_latency_seconds{route="POST /api/v1/transactions",quantile="0.99"} 0.25\n`)
    expect(text).toContain(`harness_latency_seconds_count{route="POST /api/v1/transactions"} 91\n`)
    expect(text).toContain("harness_laws_violated 0\n")
    // Every sample line is `name{labels} value` or `name value`, under a TYPE line of its name.
    for (const line of text.trim().split("\n").filter((l) => !l.startsWith("#"))) {
      expect(line).toMatch(/^[a-z_]+(\{[^}]*\})? -?[0-9.e+-]+$/)
    }
    expect(prometheusText({ ...figures, offeredPerSecond: null })).not.toContain("harness_offered_requests_per_second")
  })

  it("served at /metrics on 127.0.0.1", async () => {
    const port = await freePort()
    const server = await servePrometheus(port, () => figures)
    try {
      const reply = await fetch(`http://127.0.0.1:${port}/metrics`)
      expect(reply.status).toBe(200)
      expect(reply.headers.get("content-type")).toBe("text/plain; version=0.0.4")
      expect(await reply.text()).toBe(prometheusText(figures))
      expect((await fetch(`http://127.0.0.1:${port}/other`)).status).toBe(404)
    } finally {
      await new Promise((done) => server.close(done))
    }
  })
})

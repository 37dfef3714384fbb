import fc from "fast-check"
import * as hdr from "hdr-histogram-js"
import { describe, expect, it } from "vitest"
import { renderHarnessReport } from "../../../bench/harness/Html.ts"
import { missingShards, summaryOf } from "../../../bench/harness/main.ts"
import { decodeHistogram, Recorder, recordMicros, routeTemplate } from "../../../bench/harness/Recorder.ts"
import { type HarnessResult, mergeResults } from "../../../bench/harness/Result.ts"

interface Sample {
  readonly route: string
  readonly status: number | "dropped"
  readonly latencyMs: number
  readonly atMs: number
}

/** A harness result made from recorded samples, as a run would write it. */
const resultOf = (
  samples: ReadonlyArray<Sample>,
  startEpochMs = 1_800_000_000_000,
  laws: HarnessResult["laws"] = []
): HarnessResult => {
  const recorder = new Recorder(0)
  for (const s of [...samples].sort((a, b) => a.atMs - b.atMs)) recorder.record(s.route, s.status, s.latencyMs, s.atMs)
  const figures = recorder.finish(Math.max(0, ...samples.map((s) => s.atMs)))
  return {
    format: "payments-harness/2",
    scenario: "test",
    started_at: new Date(startEpochMs).toISOString(),
    ended_at: new Date(startEpochMs + 10_000).toISOString(),
    start_epoch_ms: startEpochMs,
    config: {
      target: "http://127.0.0.1:1",
      embedded: false,
      model: "open",
      rate_per_s: 10,
      arrival: "constant",
      connections: null,
      duration_s: 10,
      max_requests: null,
      merchants: 1,
      seed: 1,
      slo: "p99<500ms",
      shards: ["0/1"]
    },
    load_s: 10,
    scripts: samples.length,
    scripts_late: 0,
    ...figures,
    rate_per_s: figures.requests / 10,
    cpu: {
      harness_s: 1,
      harness_ms_per_request: null,
      service_s: null,
      service_ms_per_request: null,
      harness_rss_mb: { start: 1, end: 1, peak: 1, samples: [[0, 1]] }
    },
    laws,
    slo: [],
    passed: true
  }
}

const sample = fc.record({
  route: fc.constantFrom("GET /healthz", "POST /api/v1/transactions", "GET /api/v1/transactions/:id"),
  status: fc.constantFrom<number | "dropped">(200, 201, 409, 503, "dropped"),
  latencyMs: fc.double({ min: 0.01, max: 60_000, noNaN: true }),
  atMs: fc.integer({ min: 0, max: 9_999 })
})

describe("results and their merge", () => {
  it("merging two shards' results gives the histograms and counts of one run over all their requests", () => {
    fc.assert(
      fc.property(
        fc.array(sample, { minLength: 1, maxLength: 300 }),
        fc.array(sample, { minLength: 1, maxLength: 300 }),
        (a, b) => {
          const merged = mergeResults([resultOf(a), resultOf(b)])
          const whole = resultOf([...a, ...b])
          expect(merged.requests).toBe(whole.requests)
          expect(merged.errors).toBe(whole.errors)
          expect(merged.status_codes).toEqual(whole.status_codes)
          expect(merged.latency_ms).toEqual(whole.latency_ms)
          // A route's own seconds hold percentiles, which do not add up: a merge leaves them out.
          expect(merged.routes.map(({ histogram_us: _, ...rest }) => rest)).toEqual(
            whole.routes.map(({ histogram_us: _, timeline: __, socket_wait_ms: ___, service_ms: ____, ...rest }) =>
              rest
            )
          )
          // The encoded histograms hold the same counts.
          const m = decodeHistogram(merged.histogram_us), w = decodeHistogram(whole.histogram_us)
          expect(m.totalCount).toBe(w.totalCount)
          expect(m.outputPercentileDistribution()).toBe(w.outputPercentileDistribution())
          // The timeline, second by second (both shards started together).
          expect(merged.timeline.map((s) => [s.at_s, s.requests, s.errors, s.latency_ms])).toEqual(
            whole.timeline.map((s) => [s.at_s, s.requests, s.errors, s.latency_ms])
          )
          expect(merged.config.shards).toEqual(["0/1", "0/1"])
        }
      ),
      { numRuns: 8, seed: 26 }
    )
  })

  it("lines the shards' timelines up by wall clock", () => {
    const a = resultOf([{ route: "GET /healthz", status: 200, latencyMs: 1, atMs: 500 }], 1_800_000_000_000)
    const b = resultOf([{ route: "GET /healthz", status: 200, latencyMs: 2, atMs: 500 }], 1_800_000_002_000)
    const merged = mergeResults([a, b])
    expect(merged.timeline.map((s) => [s.at_s, s.requests])).toEqual([[0, 1], [2, 1]])
    expect(merged.rate_per_s).toBeCloseTo(a.rate_per_s + b.rate_per_s)
  })

  it("keeps every law: a violation in one shard fails the merge and is listed", () => {
    const held = {
      law: "ledger-balances",
      description: "Every payment's ledger balances.",
      checked: 10,
      held: true,
      violation_count: 0,
      first_violations: []
    }
    const broken = {
      ...held,
      checked: 5,
      held: false,
      violation_count: 1,
      first_violations: [{
        paymentId: "pay_1",
        message: "debits 100, credits 90",
        requests: ["POST /api/v1/transactions -> 201"]
      }]
    }
    const merged = mergeResults([resultOf([], undefined, [held]), resultOf([], undefined, [broken])])
    expect(merged.laws).toEqual([{ ...broken, checked: 15 }])
    expect(merged.passed).toBe(false)
    const html = renderHarnessReport(merged)
    expect(html).toContain("pay_1")
    expect(html).toContain("POST /api/v1/transactions -&gt; 201")
    expect(html).toContain("FAILED")
  })
})

describe("a merge's totals", () => {
  /** Shard `index` of `count`: an open load of `rate`/s over `merchants` merchants, against `target`. */
  const shard = (
    index: number,
    count: number,
    rate: number,
    merchants: number,
    target: string,
    startEpochMs: number,
    requests: number
  ): HarnessResult => {
    const samples = Array.from(
      { length: requests },
      (_, i) => ({ route: "GET /healthz", status: 200, latencyMs: 1 + index, atMs: (i * 10) % 9_000 })
    )
    const result = resultOf(samples, startEpochMs)
    return {
      ...result,
      config: {
        ...result.config,
        target,
        rate_per_s: rate,
        merchants,
        seed: 40 + index,
        max_requests: 1_000,
        shards: [`${index}/${count}`],
        start_at: "2027-01-15T08:00:00.000Z"
      },
      cpu: {
        ...result.cpu,
        harness_rss_mb: { start: 50 + index, end: 60, peak: 70 + index, samples: [[0, 50], [10, 60 + index * 10]] }
      }
    }
  }
  const start = 1_800_000_000_000
  const shards = [
    shard(0, 3, 100, 5, "http://a.example:3000", start, 30),
    shard(1, 3, 50, 3, "http://b.example:3000", start + 250, 20),
    shard(2, 3, 25, 2, "http://a.example:3000", start + 100, 10)
  ]

  it("states the total offered rate, every merchant and each shard, not shard 0's figures", () => {
    const merged = mergeResults(shards)
    expect(merged.config).toMatchObject({
      model: "open",
      rate_per_s: 175,
      merchants: 10,
      max_requests: 3_000,
      target: "http://a.example:3000, http://b.example:3000",
      shards: ["0/3", "1/3", "2/3"],
      start_at: "2027-01-15T08:00:00.000Z"
    })
    expect(merged.requests).toBe(60)
    expect(merged.rate_per_s).toBeCloseTo(shards.reduce((n, r) => n + r.rate_per_s, 0))
    expect(
      merged.per_shard!.map((s) => [s.shard, s.target, s.rate_per_s, s.merchants, s.seed, s.requests, s.start_epoch_ms])
    ).toEqual([
      ["0/3", "http://a.example:3000", 100, 5, 40, 30, start],
      ["1/3", "http://b.example:3000", 50, 3, 41, 20, start + 250],
      ["2/3", "http://a.example:3000", 25, 2, 42, 10, start + 100]
    ])
    // From the first shard's start to the last one's end; memory as the largest shard's.
    expect(merged.load_s).toBeCloseTo(10.25)
    expect(merged.cpu.harness_rss_mb).toEqual({ start: 52, end: 60, peak: 72, samples: [[0, 50], [10, 80]] })
    // A merge of merges keeps every shard.
    const again = mergeResults([mergeResults(shards.slice(0, 2)), shards[2]!])
    expect(again.config).toMatchObject({ rate_per_s: 175, merchants: 10, shards: ["0/3", "1/3", "2/3"] })
    expect(again.per_shard).toEqual(merged.per_shard)
  })

  it("prints and renders the totals and each shard, and notes a shard missing or given twice", () => {
    const merged = mergeResults(shards)
    const summary = summaryOf(merged, [])
    expect(summary).toMatch(/load\s+open, 175 requests\/s constant \(the total of 3 shards\)/)
    expect(summary).toMatch(/merchants\s+10 \(the total of 3 shards\)/)
    expect(summary).toMatch(
      /shard 1\/3\s+50\/s offered, 3 merchants, seed 41: 20 requests, 2\.0\/s, 0 errors, passed; against http:\/\/b\.example:3000/
    )
    expect(summary).toMatch(/shard starts\s+0\.250 s apart/)
    const html = renderHarnessReport(merged)
    expect(html).toContain("<td>+0.250 s</td>")
    expect(html).toContain("175 requests/s")
    expect(missingShards(merged.config.shards)).toBeNull()
    expect(missingShards(["0/3", "2/3", "2/3"])).toBe(
      "shard 1/3 missing; shard 2/3 given more than once: the totals are those of the results given"
    )
    expect(missingShards(["0/2", "0/3"])).toContain("shards of 2 and 3 merged together")
  })

  it("adds open shards' rates and closed shards' connections apart", () => {
    const closed = {
      ...shards[1]!,
      config: { ...shards[1]!.config, model: "closed" as const, rate_per_s: null, arrival: null, connections: 8 }
    }
    const closedToo = { ...closed, config: { ...closed.config, shards: ["0/3"] } }
    expect(mergeResults([closedToo, closed]).config).toMatchObject({
      model: "closed",
      connections: 16,
      rate_per_s: null,
      arrival: null
    })
    const mixed = mergeResults([shards[0]!, closed, shards[2]!])
    expect(mixed.config).toMatchObject({ model: "mixed", rate_per_s: 125, arrival: "constant", connections: 8 })
    expect(summaryOf(mixed, [])).toMatch(
      /load\s+open, 125 requests\/s constant \+ closed, 8 connections \(the total of 3 shards\)/
    )
    expect(summaryOf(mixed, [])).toMatch(/shard 1\/3\s+8 connections, 3 merchants/)
  })
})

describe("routes", () => {
  it("replace ids by :id and drop the query", () => {
    expect(routeTemplate("GET", "/api/v1/transactions/pay_3Fh9aZx_Qk2LmN0p")).toBe("GET /api/v1/transactions/:id")
    expect(routeTemplate("POST", "/api/v1/transactions/pay_abcdefghij/refund")).toBe(
      "POST /api/v1/transactions/:id/refund"
    )
    expect(routeTemplate("GET", "/api/v1/transactions?per_page=20&after=pay_x")).toBe("GET /api/v1/transactions")
    expect(routeTemplate("POST", "/api/v1/api_keys/key_AbCdEf123456/rotate")).toBe("POST /api/v1/api_keys/:id/rotate")
    expect(routeTemplate("GET", "/api/v1/webhooks/deliveries/12345")).toBe("GET /api/v1/webhooks/deliveries/:id")
    expect(routeTemplate("GET", "/api/v1/merchants/me/balance")).toBe("GET /api/v1/merchants/me/balance")
    expect(routeTemplate("GET", "/healthz")).toBe("GET /healthz")
  })

  it("keep each method of a path apart, asked again and again", () => {
    for (let i = 0; i < 3; i++) {
      expect(routeTemplate("GET", "/api/v1/transactions/pay_abcdefghij")).toBe("GET /api/v1/transactions/:id")
      expect(routeTemplate("DELETE", "/api/v1/transactions/pay_abcdefghij")).toBe("DELETE /api/v1/transactions/:id")
      expect(routeTemplate("HEAD", "/healthz")).toBe("HEAD /healthz")
      expect(routeTemplate("GET", "/healthz")).toBe("GET /healthz")
    }
    // Past the paths it keeps, it starts over and still answers alike.
    for (let i = 0; i < 5000; i++) routeTemplate("GET", `/api/v1/transactions/pay_${i}abcdefghij`)
    expect(routeTemplate("GET", "/api/v1/transactions/pay_abcdefghij")).toBe("GET /api/v1/transactions/:id")
    expect(routeTemplate("POST", "/api/v1/transactions/pay_abcdefghij")).toBe("POST /api/v1/transactions/:id")
  })
})

describe("the recorder's histograms", () => {
  it("count a value in the bucket hdr-histogram-js's own recordValue counts it in, at 2 and 3 digits", () => {
    for (const digits of [2, 3] as const) {
      const build = () =>
        hdr.build({
          lowestDiscernibleValue: 1,
          highestTrackableValue: 600_000_000,
          numberOfSignificantValueDigits: digits,
          autoResize: false
        })
      fc.assert(
        fc.property(
          fc.array(fc.oneof(fc.integer({ min: 1, max: 5_000 }), fc.integer({ min: 1, max: 600_000_000 })), {
            minLength: 1,
            maxLength: 50
          }),
          (values) => {
            const own = build(), theirs = build()
            for (const value of values) {
              recordMicros(own, value)
              theirs.recordValue(value)
            }
            expect(hdr.encodeIntoCompressedBase64(own)).toBe(hdr.encodeIntoCompressedBase64(theirs))
            expect([own.totalCount, own.minNonZeroValue, own.maxValue]).toEqual([
              theirs.totalCount,
              theirs.minNonZeroValue,
              theirs.maxValue
            ])
          }
        ),
        { numRuns: 300, seed: 38 }
      )
      // Every bucket's edges.
      const own = build(), theirs = build()
      for (let power = 0; power < 30; power++) {
        for (const value of [2 ** power - 1, 2 ** power, 2 ** power + 1]) {
          if (value < 1) continue
          recordMicros(own, value)
          theirs.recordValue(value)
        }
      }
      recordMicros(own, 600_000_000)
      theirs.recordValue(600_000_000)
      expect(hdr.encodeIntoCompressedBase64(own)).toBe(hdr.encodeIntoCompressedBase64(theirs))
    }
  })
})

describe("the HTML report", () => {
  it("is one self-contained page with the charts, the percentiles per route and the status codes", () => {
    const html = renderHarnessReport(resultOf([
      { route: "GET /healthz", status: 200, latencyMs: 1.5, atMs: 10 },
      { route: "GET /<script>", status: "dropped", latencyMs: 10_000, atMs: 1_500 }
    ]))
    expect(html.startsWith("<!doctype html>")).toBe(true)
    // Latency over time, by percentile, each route's over time (2), socket wait and service time, offered against achieved, status codes, CPU.
    expect(html.match(/<svg /g)?.length).toBe(8)
    expect(html).toContain("latency by percentile")
    expect(html).toContain("GET /healthz: latency over time")
    expect(html).toContain("GET /healthz")
    expect(html).toContain("GET /&lt;script&gt;")
    expect(html).toContain("dropped")
    expect(html).toContain("This scenario checks no laws.")
    expect(html).not.toMatch(/<script|https?:\/\/(?!127\.0\.0\.1)/)
  })
})

describe("the series over time", () => {
  it("counts each request in the second it was issued (its intended start) and each route's answers in the second they came", () => {
    const recorder = new Recorder(0)
    // In the order answered: issued and answered within second 1; issued at 2.2 s, answered at 2.3 s; issued at 0.5 s, answered at 2.5 s.
    recorder.record("GET /b", 200, 100, 1_200)
    recorder.record("GET /b", 200, 100, 2_300)
    recorder.record("GET /a", 200, 2_000, 2_500)
    const figures = recorder.finish(3_000)
    expect(figures.timeline.map((s) => [s.at_s, s.issued, s.requests])).toEqual([[0, 1, 0], [1, 1, 1], [2, 1, 2]])
    expect(figures.routes.map((r) => [r.route, r.timeline!.map((s) => [s.at_s, s.requests])])).toEqual([["GET /a", [[
      2,
      1
    ]]], ["GET /b", [[1, 1], [2, 1]]]])
    // Two significant digits: within 1% of the latency recorded.
    expect(Math.abs(figures.routes[0]!.timeline![0]!.p99_ms - 2_000) / 2_000).toBeLessThan(0.01)
  })

  it("plots latency by percentile out to what the count resolves, and marks the stages and the warm-up on the timeline", () => {
    const samples = Array.from(
      { length: 1_000 },
      (_, i) => ({ route: "GET /healthz", status: 200, latencyMs: 1 + i / 100, atMs: i * 10 })
    )
    const base = resultOf(samples)
    const html = renderHarnessReport({
      ...base,
      config: { ...base.config, warmup_s: 2, stages: "5s 0→100/s, 5s 100/s" },
      stage_spans: [{ stage: 0, text: "5s 0→100/s", from_s: 0, to_s: 5 }, {
        stage: 1,
        text: "5s 100/s",
        from_s: 5,
        to_s: 10
      }]
    })
    // 1,000 answers resolve p99.9, not p99.99.
    expect(html).toContain(">99.9%</text>")
    expect(html).not.toContain(">99.99%</text>")
    expect(html).toContain("stage 2: 5s 100/s")
    expect(html).toContain("end of warm-up")
  })
})

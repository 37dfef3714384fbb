import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import type { LawResult, Scenario } from "../../bench/harness/Contract.ts"
import { cutoffAwayFrom, settleNow } from "../../bench/harness/Embedded.ts"
import { plantedBugVariable } from "../../bench/harness/PlantedService.ts"
import { servicesOn } from "../../bench/harness/scenarios/CardNetwork.ts"
import { makeScenario, type MerchantsOptions } from "../../bench/harness/scenarios/merchants.ts"
import { Merchants } from "../../src/services/Merchants.ts"
import { freshDatabase } from "../support/database.ts"
import { startServiceEntry, testTransport } from "../support/harness.ts"
import { killServices } from "../support/service.ts"

/**
 * The simulator's merchants, endpoints and laws against the real service over HTTP (the
 * harness's production mode), bounded by the number of scripts: every law holds on the service
 * as it is, and a planted bug is caught with its law named.
 */
afterAll(() => killServices())

const settlementCutoffMinutes = cutoffAwayFrom(Date.now())
const serviceEnvironment = {
  WEBHOOK_ALLOW_PRIVATE_URLS: "true",
  WEBHOOK_RETRY_SCHEDULE: "1s,2s",
  WEBHOOK_TIMEOUT: "2s",
  RATE_LIMIT_PER_SECOND: "100000",
  // No cut-off during the test: the harness settles once the laws read the payments unsettled.
  SETTLEMENT_CUTOFF: `${String(Math.floor(settlementCutoffMinutes / 60)).padStart(2, "0")}:${
    String(settlementCutoffMinutes % 60).padStart(2, "0")
  }`
}

const scenarioOptions = (extra: Partial<MerchantsOptions>): MerchantsOptions => ({
  timeScale: 1 / 20_000,
  maxThinkMs: 1_000,
  maxBackoffMs: 300,
  // The service here has no practical rate limit; the harness's own tests push one (test/harness/planted-laws.test.ts).
  rateLimitPush: false,
  ...extra
})

/** Runs `scripts` scripts, `concurrency` at a time, then drains and checks the laws. */
const run = async (
  entry: string,
  options: MerchantsOptions,
  scripts: number,
  extraEnv: Record<string, string> = {}
) => {
  const started = Date.now()
  const databaseUrl = await freshDatabase("harness")
  const service = await startServiceEntry(entry, databaseUrl, { ...serviceEnvironment, ...extraEnv })
  const transport = testTransport(service.baseUrl)
  const scenario: Scenario = makeScenario(options)
  const lines: Array<string> = []
  // Merchants made as the harness's embedded target makes them: the service's Merchants service on its database.
  const services = servicesOn(databaseUrl, { RESPONSE_ENCRYPTION_KEY: "ab".repeat(32) })
  try {
    const embedded = {
      databaseUrl,
      webhookRetryScheduleMs: [1_000, 2_000],
      webhookTimeoutMs: 2_000,
      rateLimitPerSecond: 100_000,
      settlementCutoffMinutes,
      settle: () =>
        settleNow(extraEnv[plantedBugVariable] ?? null, {
          ...serviceEnvironment,
          ...extraEnv,
          DATABASE_URL: databaseUrl,
          RESPONSE_ENCRYPTION_KEY: "ab".repeat(32)
        }),
      createMerchant: (name: string, webhookUrl: string | null) =>
        services.runPromise(Effect.flatMap(Merchants, (m) => m.create({ name, webhookUrl }))).then((created) => ({
          merchantId: created.merchant.id,
          apiKey: created.secret
        }))
    }
    await scenario.setup({
      targetUrl: service.baseUrl,
      apiKeys: null,
      embedded,
      merchants: 3,
      seed: 7,
      webhookHost: "127.0.0.1",
      shard: { index: 0, count: 1 },
      transport,
      log: (line) => lines.push(line)
    })
    const phases: Array<string> = []
    let at = started
    const phase = (name: string) => {
      phases.push(`${name} ${Date.now() - at} ms`)
      at = Date.now()
    }
    phase("setup")
    let next = 0
    const worker = async () => {
      while (next < scripts) await scenario.runScript(next++, performance.now())
    }
    await Promise.all(Array.from({ length: 8 }, worker))
    phase("scripts")
    await scenario.drain(60_000)
    phase("drain")
    const laws = await scenario.checkLaws()
    phase("laws")
    return { laws, sent: transport.sent(), lines, phases }
  } finally {
    await scenario.close()
    await services.dispose()
    transport.close()
    service.child.kill("SIGTERM")
    await service.exited
  }
}

const broken = (laws: ReadonlyArray<LawResult>) =>
  laws.filter((l) => l.violations.length > 0).map((l) =>
    `${l.law}: ${l.violations.slice(0, 3).map((v) => `${v.message} [${v.requests.join("; ")}]`).join(" | ")}`
  )

describe("harness: the merchants scenario over HTTP", () => {
  it("holds every law against the service as it is", async () => {
    const { laws, sent } = await run(
      "src/main.ts",
      scenarioOptions({
        mix: {
          refund: 0.6,
          overRefund: 0.3,
          manualCapture: 0.4,
          racingOperations: 0.2,
          duplicateCreate: 0.1,
          keyReuseMismatch: 0.05
        },
        disputes: 0.05
      }),
      40
    )
    expect(broken(laws)).toEqual([])
    const byName = new Map(laws.map((l) => [l.law, l]))
    // Each law was checked on something: the payments, their events and deliveries, the answers.
    for (
      const law of [
        "one-payment-per-key",
        "answers-match-record",
        "event-per-change",
        "ledger-balanced",
        "balances",
        "webhook-every-event-delivered",
        "webhook-signed",
        "webhook-order",
        "webhook-2xx-ends-delivery",
        "nothing-pending"
      ]
    ) {
      expect(byName.get(law)?.checked, law).toBeGreaterThan(0)
    }
    expect(sent).toBeGreaterThan(40)
  }, 240_000)

  it("names the law a planted refund bug breaks, with the payment and its requests", async () => {
    const { laws } = await run(
      "bench/harness/PlantedService.ts",
      scenarioOptions({
        mix: {
          refund: 0.95,
          overRefund: 0.6,
          manualCapture: 0,
          racingOperations: 0,
          duplicateCreate: 0,
          keyReuseMismatch: 0,
          keyRotationsPerMerchantDay: 0,
          declineTokens: 0,
          riskyTokens: 0
        },
        disputes: 0
      }),
      24,
      { [plantedBugVariable]: "refund-over-remainder" }
    )
    const violated = laws.filter((l) => l.violations.length > 0)
    // The database refuses to record a refund above the capture, so the bug surfaces as the
    // answer: a 500 where the documented answer to a refund above the remainder is a 422.
    expect(violated.map((l) => l.law)).toContain("answers-match-record")
    const first = violated.find((l) => l.law === "answers-match-record")!.violations.find((v) =>
      v.message.startsWith("refund-above-remainder-refused")
    )!
    expect(first.paymentId).toMatch(/^pay_/)
    expect(first.requests.some((r) => r.includes("/refund"))).toBe(true)
  }, 240_000)
})

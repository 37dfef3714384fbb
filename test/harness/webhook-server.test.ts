import { afterEach, describe, expect, it } from "vitest"
import { startWebhookServer, type WebhookServer } from "../../bench/harness/scenarios/WebhookServer.ts"
import { Auditor } from "../../sim/checks/Auditor.ts"
import { defaultFaults, type FaultRates } from "../../sim/engine/Options.ts"
import { Prng } from "../../sim/engine/Prng.ts"
import { makeSimulatedEndpoints } from "../../sim/world/Endpoints.ts"
import { postEvent, signedWith } from "../support/webhookPost.ts"

/** The simulator's endpoints behind the harness's node:http server: the same checks and seeded fates, over a socket. */
const secret = "whsec_test_secret"
let server: WebhookServer | null = null
afterEach(async () => {
  await server?.close()
  server = null
})

const quiet: FaultRates = {
  ...defaultFaults,
  webhook4xx: 0,
  webhook5xx: 0,
  webhookSlow: 0,
  webhookLagging: 0,
  webhookNoAnswer: 0,
  webhookOutagesPerDay: 0
}

/** `faults`; the endpoints' window (where outages fall) began `pastMs` ago. */
const start = async (faults: FaultRates, pastMs = 0) => {
  const auditor = new Auditor(() => Date.now())
  const window = { startMs: Date.now() - pastMs, endMs: Date.now() }
  const endpoints = makeSimulatedEndpoints({
    prng: new Prng(1),
    faults,
    auditor,
    window,
    nowMs: () => Date.now(),
    lastCrashMs: () => -1,
    secretsOf: () => [secret],
    overNetwork: true
  })
  server = await startWebhookServer({ host: "127.0.0.1", endpoints, timeoutMs: 2_000, latencyScale: 1 / 100 })
  return { auditor, endpoints, url: server.urlOf(0) }
}

/** POSTs an event as the service's dispatcher does; the status, or null when the connection dropped. */
const post = postEvent
const signed = signedWith(secret)

describe("harness webhook server", () => {
  it("answers a signed POST 200 and counts it acknowledged; a badly signed one breaks webhook-signature", async () => {
    const { auditor, endpoints, url } = await start(quiet)
    expect(await post(url, { id: "evt_a" }, 1, signed)).toBe(200)
    expect(auditor.violations).toEqual([])
    expect(Number.isNaN(endpoints.receipts.ackedAtMs[endpoints.receipts.ofDelivery("whd_evt_a")]!)).toBe(false)
    expect(await post(url, { id: "evt_b" }, 1, (_body, t) => `t=${t},v1=${"0".repeat(64)}`)).toBe(200)
    expect(auditor.violations.map((v) => v.invariant)).toEqual(["webhook-signature"])
  })

  it("turns the seeded fates into a 5xx, or a connection dropped (outage)", async () => {
    const failing = await start({ ...quiet, webhook5xx: 1 })
    expect([500, 502, 503]).toContain(await post(failing.url, { id: "evt_c" }, 1, signed))
    await server!.close()
    // Outages of at least 5 minutes, all begun within the last minute: the endpoint is down now.
    const down = await start({ ...quiet, webhookOutagesPerDay: 10_000 }, 60_000)
    expect(await post(down.url, { id: "evt_d" }, 1, signed)).toBeNull()
  })

  it("notes an attempt after a 2xx for the final audit instead of failing at once (over a network the 2xx may arrive late)", async () => {
    const { auditor, endpoints, url } = await start(quiet)
    expect(await post(url, { id: "evt_e" }, 1, signed)).toBe(200)
    expect(await post(url, { id: "evt_e" }, 2, signed)).toBe(200)
    expect(auditor.violations).toEqual([])
    expect(endpoints.receipts.retriedAfterAck).toEqual([{ deliveryId: "whd_evt_e", attempt: 1, next: 2 }])
  })
})

import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { Webhooks } from "../../src/services/Webhooks.ts"
import { StoreUnavailable } from "../../src/store/Store.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import { seedEvent, seedMerchant } from "./support.ts"
import { after, noAnswer, status, VirtualWebhooks } from "./virtual.ts"

/** Endpoint actors under virtual time (./virtual.ts): exact times, and absence checked exactly. */

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const day = 86_400_000

const merchant = (h: VirtualWebhooks, id: string, url: string) =>
  seedMerchant(h.state, { id, url, secret: `whsec_${id}`, atMs: t0 })

describe("webhook endpoint actors", () => {
  it("an attempt the store fails to record is logged as such; the worker goes on, and the delivery is retried after its lease", () => {
    let failRecords = 1
    const h = new VirtualWebhooks({
      startMs: t0,
      respond: () => status(200),
      wrapStore: (store) => ({
        ...store,
        recordAttempt: (...args) =>
          failRecords-- > 0
            ? Effect.fail(new StoreUnavailable({ cause: "test: connection lost" }))
            : store.recordAttempt(...args)
      })
    })
    merchant(h, "mer_a", "https://a.example/hook")
    seedEvent(h.state, { id: "evt_a", merchantId: "mer_a", atMs: t0 })
    const engine = h.start({}, { pollIntervalMs: day, concurrencyPerEndpoint: 1 })
    const a = h.delivery("mer_a")
    expect(h.posts.map((p) => [p.url, p.atMs, p.end])).toEqual([["https://a.example/hook", t0, "answered"]])
    expect(h.logs.map((l) => [l.level, l.message])).toEqual([["WARN", `webhook delivery ${a.id} attempt not recorded`]])
    expect(h.logs[0]!.details).toContain("StoreUnavailable")
    expect(a).toMatchObject({ status: "pending", attempts: [] })
    // The endpoint's one worker still serves new work at once.
    engine.run(Effect.flatMap(Webhooks, (w) => w.sendTest("mer_a", "payment.refunded")))
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0])
    // The unrecorded one is attempted again when its lease ends, and recorded.
    const leaseMs = engine.config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs
    h.runUntil(t0 + leaseMs)
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0, t0 + leaseMs])
    expect(h.deliveries("mer_a").find((d) => d.id === a.id)).toMatchObject({
      status: "succeeded",
      attempts: [{ attempt: 1, at: t0 + leaseMs }]
    })
    expect(h.logs).toHaveLength(1)
  })

  it("an attempt right after its claim signs with the secrets the claim read, without renewing its lease; one that waited past claimFreshMs renews first", () => {
    const renewals: Array<number> = []
    const h: VirtualWebhooks = new VirtualWebhooks({
      startMs: t0,
      respond: () => after(6_000, status(200)),
      wrapStore: (store) => ({
        ...store,
        renewLease: (...args) =>
          Effect.suspend(() => {
            renewals.push(h.nowMs)
            return store.renewLease(...args)
          })
      })
    })
    merchant(h, "mer_a", "https://a.example/hook")
    seedEvent(h.state, { id: "evt_1", merchantId: "mer_a", atMs: t0 })
    seedEvent(h.state, { id: "evt_2", merchantId: "mer_a", atMs: t0 })
    // One worker: both claimed by one poll at t0, the second waits 6 s for the first to be answered.
    h.start({}, { pollIntervalMs: day, concurrencyPerEndpoint: 1 })
    expect(WebhookDispatcher.defaultOptions.claimFreshMs).toBe(5_000)
    h.runUntil(t0 + 12_000)
    expect(h.posts.map((p) => [p.atMs, p.end])).toEqual([[t0, "answered"], [t0 + 6_000, "answered"]])
    // The first went at once on its claim; the second's claim was 6 s old: renewed at its start.
    expect(renewals).toEqual([t0 + 6_000])
    // Both signed with the merchant's secret.
    for (const post of h.posts) expect(post.headers["x-service-signature"]).toMatch(/^t=\d+,v1=[0-9a-f]{64}$/)
    expect(h.deliveries("mer_a").map((d) => d.status)).toEqual(["succeeded", "succeeded"])
  })

  it("a full mailbox's claim the store fails to take back waits for its lease; the poll's claims after it are given back for the next poll", () => {
    let failReleases = 1
    const h = new VirtualWebhooks({
      startMs: t0,
      respond: () => after(500, status(200)),
      wrapStore: (store) => ({
        ...store,
        releaseLease: (...args) =>
          failReleases-- > 0
            ? Effect.fail(new StoreUnavailable({ cause: "test: connection lost" }))
            : store.releaseLease(...args)
      })
    })
    merchant(h, "mer_a", "https://a.example/hook")
    for (let i = 1; i <= 4; i++) seedEvent(h.state, { id: `evt_${i}`, merchantId: "mer_a", atMs: t0 })
    // One worker, one place in the mailbox: of the first poll's 4 claims one is handed out and
    // the second does not fit; its give-back fails, and the last two are given back.
    const engine = h.start({}, { pollIntervalMs: 1_000, concurrencyPerEndpoint: 1, queueCapacity: 1 })
    expect(h.logs.map((l) => [l.level, l.message])).toEqual([
      [
        "WARN",
        "webhook claim not given back (a full mailbox): taken over when its lease ends; the poll's claims after it were given back"
      ]
    ])
    expect(h.logs[0]!.details).toContain("StoreUnavailable")
    // The two given back are claimed by the next poll and delivered one after the other.
    h.runUntil(t0 + 5_000)
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0 + 1_000, t0 + 1_500])
    const stuck = h.deliveries("mer_a").filter((d) => d.status !== "succeeded")
    expect(stuck).toMatchObject([{ status: "pending", attempts: [] }])
    // The one still leased is taken over when its lease ends, not before.
    const leaseMs = engine.config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs
    h.runUntil(t0 + leaseMs - 1)
    expect(h.posts).toHaveLength(3)
    h.runUntil(t0 + leaseMs)
    expect(h.posts.map((p) => p.atMs)).toEqual([t0, t0 + 1_000, t0 + 1_500, t0 + leaseMs])
    expect(h.posts[3]!.headers["x-service-delivery-id"]).toBe(stuck[0]!.id)
    h.runUntil(t0 + leaseMs + 500)
    expect(h.deliveries("mer_a").every((d) => d.status === "succeeded" && d.attempts.length === 1)).toBe(true)
    expect(h.logs).toHaveLength(1)
  })

  it("a defect in a poll is logged as an error and the poller goes on: the next poll delivers", () => {
    // The first poll hits a bug (a defect, not an unavailable store): before, it ended the poller
    // for good and this process sent no webhook again.
    let crashPolls = 1
    const h = new VirtualWebhooks({
      startMs: t0,
      respond: () => status(200),
      wrapStore: (store) => ({
        ...store,
        poll: (input) => (crashPolls-- > 0 ? Effect.die(new Error("bug in the store")) : store.poll(input))
      })
    })
    merchant(h, "mer_a", "https://a.example/hook")
    seedEvent(h.state, { id: "evt_a", merchantId: "mer_a", atMs: t0 })
    h.start({}, { pollIntervalMs: 1_000 })
    expect(h.posts).toHaveLength(0)
    expect(h.logs.map((l) => [l.level, l.message])).toEqual([["ERROR", "webhook poll crashed; polling goes on"]])
    expect(h.logs[0]!.details).toContain("bug in the store")
    h.runUntil(t0 + 1_000)
    expect(h.posts.map((p) => p.atMs)).toEqual([t0 + 1_000])
    expect(h.delivery("mer_a")).toMatchObject({ status: "succeeded" })
  })

  it("defects in one endpoint's workers restart those workers only; the claimed delivery is retried after each lease, same delivery id", () => {
    // Endpoint a's first 8 POSTs hit a bug (a defect, not a failed delivery): as many crashes as
    // the endpoint has workers, so the 9th POST is only made if crashed workers are restarted.
    const crashes = WebhookDispatcher.defaultOptions.concurrencyPerEndpoint
    let postsToA = 0
    const h = new VirtualWebhooks({
      startMs: t0,
      seed: 3,
      respond: (post) =>
        post.url.startsWith("https://a.") && ++postsToA <= crashes
          ? Effect.die(new Error("bug in the transport"))
          : status(200)
    })
    merchant(h, "mer_a", "https://a.example/hook")
    merchant(h, "mer_b", "https://b.example/hook")
    seedEvent(h.state, { id: "evt_a", merchantId: "mer_a", atMs: t0 })
    seedEvent(h.state, { id: "evt_b", merchantId: "mer_b", atMs: t0 })
    const engine = h.start({}, { pollIntervalMs: day })

    // At t0: both endpoints were called; the other merchant's endpoint is not held up by the crash.
    expect(h.posts.map((p) => [p.url, p.atMs, p.end])).toEqual([
      ["https://a.example/hook", t0, "died"],
      ["https://b.example/hook", t0, "answered"]
    ])
    expect(h.delivery("mer_b")).toMatchObject({
      status: "succeeded",
      attempts: [{ attempt: 1, at: t0, responseStatus: 200 }]
    })
    // The crash was logged as such; it is not a failed attempt.
    expect(h.logs.map((l) => [l.level, l.message])).toEqual([["ERROR", "webhook endpoint worker crashed; restarting"]])
    expect(h.logs[0]!.details).toContain("bug in the transport")
    // The crashed attempt recorded nothing: the delivery stays claimed until its lease ends.
    const a = h.delivery("mer_a")
    expect(a).toMatchObject({ status: "pending", attempts: [] })

    // Lease = WEBHOOK_TIMEOUT + margin, from the attempt's start: each take-over comes exactly
    // then, not a millisecond before, and the next crash leaves it claimed for another lease.
    const leaseMs = engine.config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs
    for (let k = 1; k <= crashes; k++) {
      const dueMs = t0 + k * leaseMs
      h.runUntil(dueMs - 1)
      expect(h.postsTo("https://a.")).toHaveLength(k)
      expect(h.delivery("mer_a")).toEqual(a)
      h.runUntil(dueMs)
      expect(h.postsTo("https://a.")).toHaveLength(k + 1)
      expect(h.postsTo("https://a.")[k]).toMatchObject({ atMs: dueMs, end: k < crashes ? "died" : "answered" })
    }
    // The last take-over was answered: same delivery id, still attempt 1 (no crash recorded an attempt).
    const deliveredMs = t0 + crashes * leaseMs
    const retried = h.delivery("mer_a")
    expect(retried.id).toBe(a.id)
    expect(retried.status).toBe("succeeded")
    expect(retried.attempts).toEqual([{
      attempt: 1,
      at: deliveredMs,
      responseStatus: 200,
      durationMs: 0,
      error: null
    }])
    const toA = h.postsTo("https://a.")
    expect(new Set(toA.map((p) => p.headers["x-service-delivery-id"]))).toEqual(new Set([a.id]))
    expect(new Set(toA.map((p) => p.headers["x-service-delivery-attempt"]))).toEqual(new Set(["1"]))
    expect(new Set(toA.map((p) => p.body))).toEqual(new Set([toA[0]!.body]))
    expect(h.logs.map((l) => l.message)).toEqual(Array(crashes).fill("webhook endpoint worker crashed; restarting"))
    // The endpoint's restarted workers still serve new work at once.
    engine.run(Effect.flatMap(Webhooks, (w) => w.sendTest("mer_a", "payment.refunded")))
    expect(h.postsTo("https://a.")).toHaveLength(crashes + 2)
    expect(h.postsTo("https://a.").at(-1)).toMatchObject({ atMs: deliveredMs, end: "answered" })
    // Nothing more, for anyone.
    h.runUntil(t0 + 7 * day)
    expect(h.posts).toHaveLength(crashes + 3)
    expect(h.postsTo("https://b.")).toHaveLength(1)
    expect(h.logs).toHaveLength(crashes)
  })

  it("a dead endpoint holds only its own 8 slots: the other endpoint is served at once, its 9th attempt waits for a slot", () => {
    const slots = WebhookDispatcher.defaultOptions.concurrencyPerEndpoint
    expect(slots).toBe(8)
    const h = new VirtualWebhooks({
      startMs: t0,
      respond: (post) => (post.url.startsWith("https://dead.") ? noAnswer : status(200))
    })
    merchant(h, "mer_dead", "https://dead.example/hook")
    merchant(h, "mer_live", "https://live.example/hook")
    for (let i = 1; i <= slots + 1; i++) seedEvent(h.state, { id: `evt_dead_${i}`, merchantId: "mer_dead", atMs: t0 })
    seedEvent(h.state, { id: "evt_live", merchantId: "mer_live", atMs: t0 })
    const engine = h.start({}, { pollIntervalMs: day })
    const timeoutMs = engine.config.webhookTimeoutMs

    // At t0: 8 POSTs to the dead endpoint in flight, the live one answered; the 9th waits.
    expect(h.postsTo("https://dead.")).toHaveLength(slots)
    expect(h.postsTo("https://dead.").every((p) => p.atMs === t0 && p.end === "in flight")).toBe(true)
    expect(h.postsTo("https://live.")).toMatchObject([{ atMs: t0, end: "answered" }])
    expect(h.delivery("mer_live")).toMatchObject({ status: "succeeded", completedAt: t0 })
    h.runUntil(t0 + timeoutMs - 1)
    expect(h.postsTo("https://dead.")).toHaveLength(slots)
    expect(h.deliveries("mer_dead").every((d) => d.status === "pending" && d.attempts.length === 0)).toBe(true)

    // At the timeout the 8 are given up and recorded; a freed slot takes the 9th: late, never early.
    h.runUntil(t0 + timeoutMs)
    const dead = h.postsTo("https://dead.")
    expect(dead).toHaveLength(slots + 1)
    expect(dead.slice(0, slots).every((p) => p.end === "interrupted" && p.endedAtMs === t0 + timeoutMs)).toBe(true)
    expect(dead[slots]).toMatchObject({ atMs: t0 + timeoutMs, end: "in flight" })
    const deliveries = h.deliveries("mer_dead")
    const ninth = deliveries.find((d) => d.id === dead[slots]!.headers["x-service-delivery-id"])!
    expect(ninth).toMatchObject({ status: "pending", attempts: [] })
    const others = deliveries.filter((d) => d !== ninth)
    expect(others).toHaveLength(slots)
    for (const d of others) {
      expect(d.status).toBe("retrying")
      expect(d.attempts).toMatchObject([{ attempt: 1, at: t0, responseStatus: null, durationMs: timeoutMs }])
      expect(d.nextAttemptAt).toBe(t0 + 60_000)
    }
    // The 9th's own timeout counts from its late start; its retry from that start.
    h.runUntil(t0 + 2 * timeoutMs)
    expect(h.deliveries("mer_dead").find((d) => d.id === ninth.id)).toMatchObject({
      status: "retrying",
      attempts: [{ attempt: 1, at: t0 + timeoutMs, durationMs: timeoutMs }],
      nextAttemptAt: t0 + timeoutMs + 60_000
    })
    expect(h.postsTo("https://live.")).toHaveLength(1)
    expect(h.logs).toEqual([])
  })
})

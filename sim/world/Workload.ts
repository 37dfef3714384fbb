import { Effect, Fiber } from "effect"
import type { Auditor } from "../checks/Auditor.ts"
import type { SimOptions } from "../engine/Options.ts"
import type { Prng } from "../engine/Prng.ts"
import { boundaryTargets } from "./Boundary.ts"
import { type Call, makeClient, noHeaders } from "./workload/Client.ts"
import { paymentScript, type ScriptWorld } from "./workload/PaymentScript.ts"
import { makeReading } from "./workload/Reading.ts"
import type { ClientPort, Expectation, Merchant, Pace, WorkloadHooks, WorkloadStats } from "./workload/Types.ts"

/**
 * Simulated merchants. Each payment is a script run by its own fiber: create (sometimes twice
 * at once with the same idempotency key, sometimes re-using the key with another body), wait
 * for the outcome, review a held payment, capture or void a manual one (sometimes both at
 * once), refund partially, fully or above the remainder (sometimes two refunds at once). Every
 * merchant rotates its API key now and then while its requests are in flight. Clients retry like
 * real ones: after a dropped connection, a 409 `idempotency_in_progress`, a 429 or a 503.
 *
 * This module puts the workload together and runs what is not one payment's script: the arrivals,
 * key rotations, batches and rate limit pushes. The parts live beside it (sim/world/workload/): the
 * shared shapes (Types.ts), the client with its retries (Client.ts), how answers are read
 * (Reading.ts) and the payment script's phases (PaymentScript.ts).
 */

export type {
  ClientPort,
  Expectation,
  IssuedKey,
  KeyWay,
  Merchant,
  Pace,
  WorkloadHooks,
  WorkloadStats
} from "./workload/Types.ts"

/** Virtual time: every wait as the story says. */
export const exactPace: Pace = { think: Effect.sleep, backoff: Effect.sleep, idle: Effect.sleep }

/** How a keyed create sent its key, by its code in `ScriptWorld.keyWays` (`keyWayCodes`). */
const keyWayNames = ["", "in the header", "in the body", "in both", "in both, different, then in the body"]

export interface WorkloadOptions<R, P> {
  readonly options: Pick<SimOptions, "mix" | "payments">
  /** Every choice of the merchants is drawn from it, in a fixed order (the trace depends on it). */
  readonly prng: Prng
  readonly service: ClientPort<R, P>
  readonly auditor: Auditor
  readonly trace: { record(line: string): void }
  /** No story waits past it (a refund's delay, a rotation's gap). */
  readonly horizonEndMs: number
  readonly pace?: Pace
  readonly hooks?: Partial<WorkloadHooks>
}

/** What the workload's own actors (beyond the payment scripts) work with. */
interface WorkloadWorld<R, P> extends ScriptWorld {
  readonly service: ClientPort<R, P>
  readonly trace: { record(line: string): void }
  readonly backoff: Pace["backoff"]
  readonly idle: Pace["idle"]
  /** The payments `arrivals` starts. */
  readonly payments: number
}

export const makeWorkload = <R, P>(setup: WorkloadOptions<R, P>) => {
  const { options, prng, service, auditor, trace, horizonEndMs, pace = exactPace } = setup
  const stats: WorkloadStats = {
    requests: 0,
    byStatus: {},
    dropped: 0,
    lostCreates: 0,
    scriptsStarted: 0,
    scriptsFinished: 0,
    rotations: 0,
    keyRecoveries: 0,
    keyWays: { header: 0, body: 0, both: 0, different: 0 },
    keyWaysRetried: { header: 0, body: 0, both: 0, different: 0 },
    boundaryPlanned: 0,
    boundaryExact: Object.fromEntries(boundaryTargets.map((t) => [String(t / 1e6), 0])),
    disputesInScript: 0,
    operationsWhileDisputed: 0,
    refundsAfterLostDispute: 0,
    refundsAfterWonDispute: 0,
    batchPayments: 0,
    rateLimitPushes: 0
  }
  const hooks: WorkloadHooks = {
    onPaymentFinished: setup.hooks?.onPaymentFinished ?? ((_paymentId: string): Effect.Effect<void> => Effect.void),
    disputeNow: setup.hooks?.disputeNow ?? null,
    resolveDisputeNow: setup.hooks?.resolveDisputeNow ?? null
  }
  const reading = makeReading(auditor)
  const { send, sendBoth } = makeClient({
    service,
    auditor,
    trace,
    stats,
    prng,
    backoff: pace.backoff,
    errorOf: reading.errorOf
  })
  const world: WorkloadWorld<R, P> = {
    mix: options.mix,
    prng,
    stats,
    auditor,
    think: pace.think,
    horizonEndMs,
    hooks,
    send,
    sendBoth,
    reading,
    /**
     * One a created payment, in creation order, checked at the end of the run: a list, not a map
     * by payment (one entry a payment for the whole run, never looked up before the end).
     */
    expectations: [] as Array<Expectation>,
    scriptPayments: new Map(),
    keyWays: new Map(),
    amountsOf: new Map(),
    service,
    trace,
    backoff: pace.backoff,
    idle: pace.idle,
    payments: options.payments
  }
  return {
    stats,
    expectations: world.expectations,
    arrivals: (merchants: ReadonlyArray<Merchant>, startMs: number) => arrivals(world, merchants, startMs),
    script: (merchant: Merchant, n: number) => script(world, merchant, n),
    rotations: (merchant: Merchant) => rotations(world, merchant),
    batch: (merchant: Merchant, count: number, tag: string, draws: Prng) => batch(world, merchant, count, tag, draws),
    pushRateLimit: (merchant: Merchant, tag: string, plan: RateLimitPush) => pushRateLimit(world, merchant, tag, plan),
    auditCreateKeys: (payments: Iterable<CreatedPayment>) => auditCreateKeys(world, payments)
  }
}

/** A push past the rate limit: `burst` requests at once, then `steady` more, one every `gapMs`. */
interface RateLimitPush {
  readonly burst: number
  readonly steady: number
  readonly gapMs: number
}

/** A payment as the store or the API records it, for the one-payment-per-key law. */
interface CreatedPayment {
  readonly id: string
  readonly merchantId: string
  readonly idempotencyKey: string | null
  readonly metadata: Readonly<Record<string, string>> | null
}

/** A merchant locked out by a lost rotation answer: the operator issues a new key (`payments` CLI). */
const recoverKey = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant) =>
  Effect.gen(function*() {
    while (true) {
      const issued = world.service.isUp ? yield* world.service.issueKey(merchant) : null
      if (issued !== null) {
        merchant.apiKey = issued.secret
        merchant.keyId = issued.record.id
        merchant.keyGeneration++
        world.stats.keyRecoveries++
        world.trace.record(
          `m${merchant.index} locked out by a lost rotation answer; new key ${issued.record.id} issued out of band`
        )
        return
      }
      yield* world.backoff(60_000)
    }
  })

/** Rotates the merchant's API key now and then, sometimes twice at once. */
export const rotations = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant) =>
  Effect.gen(function*() {
    const meanMs = 86_400_000 / Math.max(1e-9, world.mix.keyRotationsPerMerchantDay)
    while (true) {
      if (world.mix.keyRotationsPerMerchantDay === 0) return
      const before = yield* Effect.clockWith((c) => c.currentTimeMillis)
      const gapMs = world.prng.exponential(meanMs)
      if (before + gapMs >= world.horizonEndMs) return
      yield* world.idle(gapMs)
      const call: Call = {
        merchant,
        method: "POST",
        path: `/api/v1/api_keys/${merchant.keyId}/rotate`,
        body: "{}",
        allow401: true
      }
      const racing = world.prng.chance(world.mix.racingOperations)
      // From the first commit of a rotation until the merchant holds its answer, the key it
      // uses may already be revoked (a twin rotation won, or a reply was lost and retried).
      merchant.keyUncertain = true
      const answers = racing ? yield* world.sendBoth(call, call) : [yield* world.send(call)]
      const won = answers.filter((a) => a?.status === 201)
      world.auditor.check(
        won.length <= 1,
        "one-rotation-wins",
        () => `two rotations of ${merchant.keyId} both succeeded`
      )
      for (const answer of answers) {
        world.reading.expect(
          answer === null || answer.status === 201 || answer.status === 401 || answer.status === 409,
          () => `rotate ${merchant.keyId}`,
          answer
        )
      }
      const winner = won[0]
      if (winner !== undefined && winner !== null) {
        const issued = (JSON.parse(winner.body) as { api_key: { id: string; key: string } }).api_key
        merchant.apiKey = issued.key
        merchant.keyId = issued.id
        merchant.keyGeneration++
        world.stats.rotations++
      } else if (answers.some((a) => a === null || a.status === 401)) {
        // No answer, or a 401 on a retry: a rotation may have happened with its reply lost (a
        // crash between its commit and the reply). The merchant finds out with the key it
        // holds; when that key is revoked, it is locked out of the API and gets a new key out
        // of band, as from the operator's CLI.
        const probe = yield* world.send({
          merchant,
          method: "GET",
          path: "/api/v1/merchants/me",
          body: null,
          allow401: true
        })
        if (probe?.status === 401) yield* recoverKey(world, merchant)
      }
      merchant.keyUncertain = false
    }
  })

/**
 * A batch of payments one merchant sends at once (a marketplace's payout run, a subscription
 * renewal): `count` keyed creates in the same instant, automatic capture, then left to their
 * flows. Each is a script of its own (the run waits for them). Its choices are drawn from
 * `draws`, not the workload's stream. The simulator aims batches at an endpoint that answers
 * slowly (sim/engine/Simulator.ts), so that endpoint's webhook queue outlives its leases.
 */
export const batch = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant, count: number, tag: string, draws: Prng) =>
  Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) => {
    world.stats.scriptsStarted++
    world.stats.batchPayments++
    const key = `batch-${tag}-${i}`
    const body =
      `{"transaction":{"amount_cents":${
        draws.int(50, 50_000)
      },"currency":"USD","card_token":"tok_batch_${merchant.index}_${tag}_${i}",` +
      `"card_last_four":"${draws.int(1000, 9999)}","card_brand":"visa","metadata":{"order":"${key}"}}}`
    return Effect.ensuring(
      world.send({ merchant, method: "POST", path: "/api/v1/transactions", body, key, replays: [] }, (response) => {
        if (response === null) {
          world.stats.lostCreates++
          return
        }
        world.reading.expect(response.status === 201, () => `batch create ${key}`, response)
        const transaction = world.reading.parseTransaction(response)
        if (transaction !== null) {
          world.expectations.push({
            paymentId: transaction.id,
            capturedCents: null,
            refundedCents: 0,
            uncertain: false
          })
        }
      }),
      Effect.sync(() => void world.stats.scriptsFinished++)
    )
  }, { concurrency: "unbounded", discard: true })

/**
 * Pushes one API key past its rate limit on purpose (the rate limiter's law, sim/checks/RateLimitLaw.ts):
 * a new key of the merchant (`POST /api/v1/api_keys`, used by nothing else and never rotated),
 * then `burst` requests in one instant and `steady` more, one every `gapMs` (faster than the
 * refill), each `GET /api/v1/merchants/me` sent once (a 429 is not retried: it is the point).
 * A script of its own (the run waits for it).
 */
export const pushRateLimit = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant, tag: string, plan: RateLimitPush) =>
  Effect.suspend(() => {
    world.stats.scriptsStarted++
    return Effect.ensuring(pushing(world, merchant, tag, plan), Effect.sync(() => void world.stats.scriptsFinished++))
  })
const pushing = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant, tag: string, plan: RateLimitPush) =>
  Effect.gen(function*() {
    const created = yield* world.send({
      merchant,
      method: "POST",
      path: "/api/v1/api_keys",
      body: `{"name":"rate limit push ${tag}"}`,
      key: `push-key-${tag}`,
      replays: []
    })
    if (created === null || created.status !== 201) return
    const secret = (JSON.parse(created.body) as { api_key: { key: string } }).api_key.key
    world.stats.rateLimitPushes++
    const counts: Record<string, number> = {}
    const fire = Effect.suspend(() =>
      world.service.send(
        world.service.request("GET", "/api/v1/merchants/me", secret, null, noHeaders),
        (response) =>
          Effect.sync(() => {
            world.stats.requests++
            const status = response === null ? "dropped" : response.status
            world.stats.byStatus[status] = (world.stats.byStatus[status] ?? 0) + 1
            counts[status] = (counts[status] ?? 0) + 1
            if (response !== null) {
              world.auditor.check(
                response.status !== 500,
                "no-internal-errors",
                () => `GET /api/v1/merchants/me answered 500: ${response.body}`
              )
            }
          })
      )
    )
    const sent: Array<Fiber.Fiber<void>> = []
    for (let i = 0; i < plan.burst; i++) sent.push(yield* Effect.forkDetach(fire))
    for (let i = 0; i < plan.steady; i++) {
      yield* Effect.sleep(plan.gapMs)
      sent.push(yield* Effect.forkDetach(fire))
    }
    yield* Fiber.joinAll(sent)
    world.trace.record(
      `m${merchant.index} rate limit push ${tag}: ${plan.burst} at once, ${plan.steady} every ${plan.gapMs} ms -> ${
        Object.entries(counts).sort().map(([status, n]) => `${status}:${n}`).join(" ")
      }`
    )
  })

/** Poisson arrivals of payments over the first 90% of the horizon, each script on its own fiber. */
export const arrivals = <R, P>(world: WorkloadWorld<R, P>, merchants: ReadonlyArray<Merchant>, startMs: number) =>
  Effect.gen(function*() {
    const spanMs = (world.horizonEndMs - startMs) * 0.9
    const meanGapMs = spanMs / Math.max(1, world.payments)
    for (let n = 0; n < world.payments; n++) {
      yield* Effect.sleep(world.prng.exponential(meanGapMs))
      const merchant = world.prng.pick(merchants)
      world.stats.scriptsStarted++
      yield* Effect.forkDetach(script(world, merchant, n))
    }
  })

/** Script number `n` of `merchant`, to its end (and what runs then: `hooks.onPaymentFinished`). */
export const script = <R, P>(world: WorkloadWorld<R, P>, merchant: Merchant, n: number) =>
  Effect.ensuring(
    paymentScript(world, merchant, n),
    Effect.suspend(() => {
      world.stats.scriptsFinished++
      const paymentId = world.scriptPayments.get(n)
      world.scriptPayments.delete(n)
      return paymentId === undefined ? Effect.void : world.hooks.onPaymentFinished(paymentId)
    })
  )

/**
 * One payment per key, as the client knows its keys (CONTRACT section 5), whichever way it sent
 * them: every payment of a keyed script (its `order-n` metadata) is counted against the script's
 * key, whatever key the payment row records (none, when a bug dropped it). `payments` are the
 * run's, from the store or the API.
 */
export const auditCreateKeys = <R, P>(world: WorkloadWorld<R, P>, payments: Iterable<CreatedPayment>) => {
  const seen = new Map<string, { readonly id: string; readonly key: string | null }>()
  for (const payment of payments) {
    const order = payment.metadata?.order
    if (order === undefined || !order.startsWith("order-")) continue
    const code = world.keyWays.get(Number(order.slice(6)))
    if (code === undefined) continue
    const scoped = `${payment.merchantId} ${order}`
    const other = seen.get(scoped)
    world.auditor.check(
      other === undefined,
      "one-transaction-per-key",
      () =>
        `idempotency key create-${order.slice(6)} of ${payment.merchantId} (sent ${
          keyWayNames[code]
        }): transactions ${other?.id} and ${payment.id} ` +
        `(their rows record the keys ${other?.key ?? "none"} and ${payment.idempotencyKey ?? "none"})`
    )
    if (other === undefined) seen.set(scoped, { id: payment.id, key: payment.idempotencyKey })
  }
}

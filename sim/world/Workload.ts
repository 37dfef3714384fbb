import type { HttpMethod } from "effect/http"
import { hash as oneShotHash } from "node:crypto"
import { Effect, Fiber } from "effect"
import { type Auditor, passed } from "../checks/Auditor.ts"
import type { SimResponse } from "./Http.ts"
import type { SimOptions } from "../engine/Options.ts"
import type { Prng } from "../engine/Prng.ts"
import { isoAt } from "../../src/domain/Time.ts"
import { type AmountHistory, type BoundaryPlan, boundaryTargets, planBoundary } from "./Boundary.ts"

/**
 * Simulated merchants. Each payment is a script run by its own fiber: create (sometimes twice
 * at once with the same idempotency key, sometimes re-using the key with another body), wait
 * for the outcome, review a held payment, capture or void a manual one (sometimes both at
 * once), refund partially, fully or above the remainder (sometimes two refunds at once). Every
 * merchant rotates its API key now and then while its requests are in flight. Clients retry like
 * real ones: after a dropped connection, a 409 `idempotency_in_progress`, a 429 or a 503.
 */
export interface Merchant {
  readonly index: number
  readonly id: string
  apiKey: string
  keyId: string
  /** Bumped at every rotation: a 401 on an older key is expected, on the current one it is a bug. */
  keyGeneration: number
  /**
   * Set while a rotation is in flight or its outcome is unknown (a twin won, a reply was lost):
   * the key may already be revoked (CONTRACT section 4: at once), so a 401 is expected.
   */
  keyUncertain?: boolean
}

/** The fields of an answered transaction that the merchant reads (CONTRACT's names). */
interface Transaction {
  readonly id: string
  readonly status: string
  readonly amount_cents: number
  readonly captured_amount_cents: number
  readonly refunded_amount_cents: number
  readonly fraud_case_id: string | null
  readonly fraud_score: number | null
  readonly failure_code: string | null
  /** The dispute's status and amount (null: none). */
  readonly dispute: { readonly status: string; readonly amount_cents: number } | null
}

/** What the merchant was told about a payment: the money the service accepted to move. */
export interface Expectation {
  readonly paymentId: string
  capturedCents: number | null
  refundedCents: number
  /**
   * A money-moving request never got a final answer (the client gave up): whether it was applied
   * cannot be known, so the amounts cannot be predicted. A lost acknowledgement (503 after the
   * commit, a crash between commit and reply) is not enough: the client retries with the same
   * idempotency key and is then told what was applied.
   */
  uncertain: boolean
}

export interface WorkloadStats {
  requests: number
  byStatus: Record<string, number>
  dropped: number
  lostCreates: number
  scriptsStarted: number
  scriptsFinished: number
  rotations: number
  /** Merchants locked out by a rotation whose answer was lost, given a new key out of band. */
  keyRecoveries: number
  /** Keyed creates by how they sent the key, and of them those sent more than once (a dropped connection, a 503). */
  keyWays: Record<KeyWay, number>
  keyWaysRetried: Record<KeyWay, number>
  /** Boundary-directed creates (sim/world/Boundary.ts): planned, and screened with exactly the planned score, by target output. */
  boundaryPlanned: number
  boundaryExact: Record<string, number>
  /** Disputes opened while the merchant's script ran, and the refunds, captures and voids it sent while one was open. */
  disputesInScript: number
  operationsWhileDisputed: number
  /** Refunds a script sent once its dispute was resolved (`refundAfterDispute`), after a lost one and after a won one. */
  refundsAfterLostDispute: number
  refundsAfterWonDispute: number
  /** Payments sent in batches (`batch`): a merchant's many creates at once. */
  batchPayments: number
  /** Keys pushed past their rate limit (`pushRateLimit`). */
  rateLimitPushes: number
}

/**
 * How a keyed create sends its idempotency key (CONTRACT section 5): the `X-Idempotency-Key`
 * header, the `transaction.idempotency_key` field, both (equal), or both with different values
 * first (422, nothing created; then sent again with the field alone).
 */
export type KeyWay = "header" | "body" | "both" | "different"

/**
 * What the merchants need of the service, and nothing more: the port the simulator provides
 * in-process under virtual time (sim/world/Service.ts `SimulatedService`) and the harness over real
 * HTTP under real time (bench/harness/scenarios/merchants.ts). `R` is the port's request, `P`
 * a request sent whose answer is awaited later.
 */
export interface ClientPort<R, P> {
  /** A request with the merchant's key (`apiKey`), a JSON body (null: none) and extra headers (lower-case names). */
  request(method: HttpMethod.HttpMethod, path: string, apiKey: string | null, body: string | null, headers: Readonly<Record<string, string>>): R
  /** Sends it now and goes on with `then` of its answer: null when the connection was refused, reset or timed out. */
  send<A>(request: R, then: (response: SimResponse | null) => Effect.Effect<A>): Effect.Effect<A>
  /** Sends it now, its answer awaited later (`awaitEither`, then `answerOf`). */
  open(request: R): Effect.Effect<P>
  /** The first of two sent requests to be answered (`b` null: the one). */
  awaitEither(a: P, b: P | null): Effect.Effect<P>
  /** The answer of a request `awaitEither` gave back (null: none came). */
  answerOf(pending: P): SimResponse | null
  /** Whether the service is reachable for `issueKey` now. */
  readonly isUp: boolean
  /**
   * A new API key for a merchant locked out by a rotation whose answer was lost, issued out of
   * band (the operator's CLI in the simulator; a spare key of the merchant over HTTP). Null: not now.
   */
  issueKey(merchant: Merchant): Effect.Effect<IssuedKey | null>
}

/** A key issued out of band (the shape `ApiKeys.create` answers). */
export interface IssuedKey {
  readonly record: { readonly id: string }
  readonly secret: string
}

/**
 * How the merchants wait: `think` between the steps of a story (minutes to hours of a
 * merchant's life), `backoff` before a client retry. The simulator sleeps exactly (virtual
 * time); the harness scales and bounds them to fit a run of minutes.
 */
export interface Pace {
  readonly think: (ms: number) => Effect.Effect<void>
  readonly backoff: (ms: number) => Effect.Effect<void>
  /** Between a merchant's key rotations (a day on average): scaled like `think`, never cut short. */
  readonly idle: (ms: number) => Effect.Effect<void>
}

/** Virtual time: every wait as the story says. */
export const exactPace: Pace = { think: Effect.sleep, backoff: Effect.sleep, idle: Effect.sleep }

const maximumAttempts = 400

const keyWayCodes: Record<KeyWay, number> = { header: 1, body: 2, both: 3, different: 4 }
const keyWayNames = ["", "in the header", "in the body", "in both", "in both, different, then in the body"]
/** The currencies and the card brands the fraud model tells apart (the rarer brands are pooled as one). */
const distinctCurrencies = ["USD", "EUR", "GBP", "CAD", "AUD", "JPY"]
const distinctBrands = ["visa", "mastercard", "amex", "discover"]
const rotated = <A>(items: ReadonlyArray<A>, first: number) => [...items.slice(first), ...items.slice(0, first)]

const digest = (text: string) => oneShotHash("sha1", text, "base64")

/** The extra headers of a request without an idempotency key: one shared empty record (only read). */
const noHeaders: Readonly<Record<string, string>> = {}

/** A request's final answer as it is (`send` without a `finish`). */
const final = (response: SimResponse | null) => response

/**
 * What the workload runs after a script's payment is settled and while it runs: given when the
 * workload is made. Defaults: nothing after a script, no card network to ask.
 */
export interface WorkloadHooks {
  readonly onPaymentFinished: (paymentId: string) => Effect.Effect<void>
  /**
   * The card network disputes the payment now (sim/world/Disputes.ts `openNow`): true once opened.
   * With `resolveInScript`, its resolve waits for `resolveDisputeNow`. Null: no network to ask.
   */
  readonly disputeNow: ((paymentId: string, resolveInScript?: boolean) => Effect.Effect<boolean>) | null
  /** The network resolves now the dispute it opened to be resolved in the script (`resolveNow`): the outcome acknowledged, or null. */
  readonly resolveDisputeNow: ((paymentId: string) => Effect.Effect<"won" | "lost" | null>) | null
}

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

export const makeWorkload = <R, P>(setup: WorkloadOptions<R, P>) => {
  const { options, prng, service, auditor, trace, horizonEndMs, pace = exactPace } = setup
  const { think, backoff, idle } = pace
  const stats: WorkloadStats = {
    requests: 0, byStatus: {}, dropped: 0, lostCreates: 0, scriptsStarted: 0, scriptsFinished: 0, rotations: 0, keyRecoveries: 0,
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
  /** The merchants' last payments by currency, as the client knows them (boundary-directed amounts). */
  const amountsOf = new Map<number, Map<string, Array<number>>>()
  /**
   * One a created payment, in creation order, checked at the end of the run: a list, not a map
   * by payment (one entry a payment for the whole run, never looked up before the end).
   */
  const expectations: Array<Expectation> = []
  /** The payment each script created, and what runs when its script ends (sim/world/Disputes.ts). */
  const scriptPayments = new Map<number, string>()
  const hooks: WorkloadHooks = {
    onPaymentFinished: setup.hooks?.onPaymentFinished ?? ((_paymentId: string): Effect.Effect<void> => Effect.void),
    disputeNow: setup.hooks?.disputeNow ?? null,
    resolveDisputeNow: setup.hooks?.resolveDisputeNow ?? null
  }
  /**
   * Idempotency: per key, the request that owns it and the answer it got. A script's keys
   * (`create-n`, `capture-n`, `refund-n-r`...: its number n) are sent by no other script and never
   * after it ends, so each script keeps its own few owners in a list (`Keyed.replays`), searched by
   * key: the same owners a table per merchant and key would find, without a look-up in a table
   * of every running script's keys, and they go with the script (no forgetting step).
   */
  // The first answer's body itself, compared exactly (no hash per keyed answer), and the request
  // as its own fields (method, path, body), compared exactly.
  interface ReplayOwner {
    readonly key: string
    readonly method: string
    readonly path: string
    readonly body: string
    readonly status: number
    readonly answer: string
  }
  const mix = options.mix

  interface Unkeyed {
    readonly merchant: Merchant
    readonly method: HttpMethod.HttpMethod
    readonly path: string
    readonly body: string | null
    readonly key?: undefined
    /** Do not retry a dropped connection (an unkeyed create could run twice). */
    readonly noRetryOnDrop?: boolean
    /** A 401 is an acceptable answer (racing key rotations). */
    readonly allow401?: boolean
    /** The extra headers, when not the ones `key` implies (a key sent in the body only, or two different keys). */
    readonly headers?: Readonly<Record<string, string>>
  }
  interface Keyed extends Omit<Unkeyed, "key"> {
    readonly key: string
    /** The replay owners of the script that sends it (see `ReplayOwner`). */
    readonly replays: Array<ReplayOwner>
    /** Counts the attempts sent (a create's retries, for the statistics). */
    readonly sent?: { count: number }
  }
  type Call = Unkeyed | Keyed

  const byStatus = stats.byStatus
  const record = (call: Call, generation: number, response: SimResponse | null) => {
    stats.requests++
    // The status as a number is the same key as its text (`byStatus[201]` is `byStatus["201"]`),
    // without a string made for it; the trace line writes it out as the same digits.
    const status = response === null ? "dropped" : response.status
    byStatus[status] = (byStatus[status] ?? 0) + 1
    trace.record(`m${call.merchant.index} k${generation} ${call.method} ${call.path}${call.key === undefined ? "" : ` key=${call.key}`} ${call.body ?? ""} -> ${status} ${response?.body ?? ""}`)
  }

  const checkReplay = (call: Call, response: SimResponse) => {
    if (call.key === undefined) return
    const status = response.status
    if (status === 401 || status === 429 || status >= 500) return
    const code = status === 409 || status === 422 ? (JSON.parse(response.body) as { error?: { code?: string } }).error?.code : undefined
    if (code === "idempotency_in_progress") return
    const key = call.key
    // The request itself, not a digest of it: method, path and body (a null body as ""), compared
    // exactly, without a hash per keyed answer.
    const body = call.body ?? ""
    const replays = call.replays
    let owner: ReplayOwner | undefined
    for (let i = 0; owner === undefined && i < replays.length; i++) if (replays[i]!.key === key) owner = replays[i]
    if (owner === undefined) {
      if (code !== "idempotency_key_reused") replays.push({ key, method: call.method, path: call.path, body, status, answer: response.body })
      return
    }
    if (owner.method === call.method && owner.path === call.path && owner.body === body) {
      const same = owner.status === status && owner.answer === response.body
      auditor.check(same, "idempotent-replay", same ? passed : () =>
        `key ${key}: replay answered ${status} ${response.body.slice(0, 200)} but the first answer was ${owner.status} with another body (sha1 ${digest(owner.answer)})`)
    } else {
      auditor.check(code === "idempotency_key_reused", "idempotency-key-reused", () => `key ${key} re-used with another request answered ${status}`)
    }
  }

  /**
   * One logical request with client retries; `finish` of its final answer (null when it never got
   * one). Plain steps rather than a generator (every request of the run goes through here), one
   * attempt per call, the final answer handed to `finish` in the step that reads it (no
   * `Effect.map` of two steps after it). The first attempt is sent when this is called: call it
   * as the request is sent, from the running client (`yield* send(...)`, or inside a suspend).
   */
  const send: {
    (call: Call): Effect.Effect<SimResponse | null>
    <A>(call: Call, finish: (response: SimResponse | null) => A): Effect.Effect<A>
  } = <A>(call: Call, finish: (response: SimResponse | null) => A = final as never) => attemptAt(call, 0, finish)

  /** One attempt, sent when this is called: `service.send` is eager. */
  const attemptAt = <A>(call: Call, attempt: number, finish: (response: SimResponse | null) => A): Effect.Effect<A> => {
    if (attempt >= maximumAttempts) return Effect.succeed(finish(null))
    const generation = call.merchant.keyGeneration
    return service.send(requestOf(call), (response) => {
      const next = answered(call, attempt, generation, response, finish)
      // `answered` gives back the answer itself when it is final, else the effect that retries:
      // one comparison where `Effect.isEffect` looked the answer up for Effect's type id.
      return next === response ? Effect.succeed(finish(response)) : next as Effect.Effect<A>
    })
  }

  const requestOf = (call: Call) =>
    service.request(call.method, call.path, call.merchant.apiKey, call.body, call.headers ?? (call.key === undefined ? noHeaders : { "x-idempotency-key": call.key }))

  /**
   * What the client does with the answer to one attempt (sent with the key of `generation`): the
   * final answer, or the effect that retries (after its wait) and gives `finish` of the final answer.
   */
  const answered = <A>(
    call: Call,
    attempt: number,
    generation: number,
    response: SimResponse | null,
    finish: (response: SimResponse | null) => A
  ): SimResponse | null | Effect.Effect<A> => {
    record(call, generation, response)
    if (call.key !== undefined && call.sent !== undefined) call.sent.count++
    if (response === null) {
      stats.dropped++
      if (call.noRetryOnDrop === true) return null
      return Effect.andThen(backoff(Math.min(30_000, 500 * 2 ** Math.min(attempt, 6)) + prng.int(0, 500)), again(call, attempt, finish))
    }
    const status = response.status
    // The checks of every answer build their message only on a failure (`passed` otherwise).
    auditor.check(status !== 500, "no-internal-errors", status !== 500 ? passed : () => `${call.method} ${call.path} answered 500: ${response.body}`)
    if (status > 500) {
      // CONTRACT section 3: the only other 5xx is 503 service_unavailable, with Retry-After.
      const error = errorOf(response)
      auditor.check(
        status === 503 && error?.code === "service_unavailable" && error.type === "api_error" && response.headers["retry-after"] !== undefined,
        "service-unavailable-answer",
        () => `${call.method} ${call.path} answered ${status} ${response.body.slice(0, 200)} (retry-after ${response.headers["retry-after"]})`
      )
    }
    checkReplay(call, response)
    if (status === 401) {
      if (call.allow401 === true) return response
      const expected = call.merchant.keyGeneration !== generation || call.merchant.keyUncertain === true
      auditor.check(expected, "valid-key-accepted", expected ? passed : () => `${call.method} ${call.path}: the current API key was refused`)
      // Try again with the key the merchant holds by then (after a rotation or its recovery).
      if (call.merchant.keyGeneration === generation) return Effect.andThen(backoff(5_000 + prng.int(0, 1_000)), again(call, attempt, finish))
      return again(call, attempt, finish)
    }
    if (status === 429 || status === 503 || (status === 409 && response.body.includes("idempotency_in_progress"))) {
      const retryAfterSeconds = Number(response.headers["retry-after"] ?? "1")
      return Effect.andThen(backoff(Math.max(1, retryAfterSeconds) * 1_000 + prng.int(0, 1_000)), again(call, attempt, finish))
    }
    return response
  }
  /** The next attempt, sent when it runs (after a wait). */
  const again = <A>(call: Call, attempt: number, finish: (response: SimResponse | null) => A) =>
    Effect.suspend(() => attemptAt(call, attempt + 1, finish))

  const { awaitEither, answerOf } = service

  /**
   * Two logical requests at once (racing): both first attempts are sent together, and each answer
   * is handled as it arrives, in the order they arrive, by this one fiber (no fiber per request
   * beyond the service's own, as `Effect.all` with concurrency 2 would fork, plus the fiber that
   * runs them). A request that must retry while the other is still unanswered goes on
   * concurrently with it (`Effect.all`: the rare case).
   */
  const sendBoth = (a: Call, b: Call): Effect.Effect<[SimResponse | null, SimResponse | null]> =>
    Effect.suspend(() => {
      const generationA = a.merchant.keyGeneration
      const sentA = service.open(requestOf(a))
      return Effect.flatMap(sentA, (pendingA) => {
        const generationB = b.merchant.keyGeneration
        return Effect.flatMap(service.open(requestOf(b)), (pendingB) =>
          Effect.flatMap(awaitEither(pendingA, pendingB), (first) => {
            const firstIsA = first === pendingA
            const answerOfFirst = answerOf(first)
            const next = firstIsA
              ? answered(a, 0, generationA, answerOfFirst, final)
              : answered(b, 0, generationB, answerOfFirst, final)
            const other = firstIsA ? pendingB : pendingA
            // The other request's answer, handled when it arrives.
            const rest = Effect.flatMap(awaitEither(other, null), (pending) => {
              const answer = answerOf(pending)
              const last = firstIsA ? answered(b, 0, generationB, answer, final) : answered(a, 0, generationA, answer, final)
              return last === answer ? Effect.succeed(answer) : last as Effect.Effect<SimResponse | null>
            })
            // The first answer final (the common case): the pair in request order in one step.
            if (next === answerOfFirst) {
              return Effect.map(rest, (last): [SimResponse | null, SimResponse | null] => (firstIsA ? [next, last] : [last, next]))
            }
            const both = Effect.all([next as Effect.Effect<SimResponse | null>, rest], { concurrency: 2 })
            return Effect.map(both, ([x, y]): [SimResponse | null, SimResponse | null] => (firstIsA ? [x, y] : [y, x]))
          }))
      })
    })

  const parseTransaction = (response: SimResponse): Transaction | null => {
    if (response.status < 200 || response.status >= 300) return null
    const parsed = (JSON.parse(response.body) as { transaction: Transaction }).transaction
    // Only the fields the script reads are kept: the script holds its transaction for hours of
    // virtual time, and the whole parsed answer (card, metadata, five fraud explanations, time
    // stamps: some twenty objects and strings) would survive young-generation collections and be
    // copied into the old one; this way it dies young, and one small record is kept.
    return checkedTransaction({
      id: parsed.id,
      status: parsed.status,
      amount_cents: parsed.amount_cents,
      captured_amount_cents: parsed.captured_amount_cents,
      refunded_amount_cents: parsed.refunded_amount_cents,
      fraud_case_id: parsed.fraud_case_id,
      fraud_score: parsed.fraud_score,
      failure_code: parsed.failure_code,
      dispute: parsed.dispute === null || parsed.dispute === undefined ? null : { status: parsed.dispute.status, amount_cents: parsed.dispute.amount_cents }
    })
  }
  /** The amount laws of a transaction just read (every answer's, whether parsed or known). */
  const checkedTransaction = (transaction: Transaction): Transaction => {
    // Its fields as they are, not copied into a record of the store's names first.
    auditor.checkAmountsOf(
      transaction.id,
      transaction.status,
      transaction.amount_cents,
      transaction.captured_amount_cents,
      transaction.refunded_amount_cents,
      transaction.failure_code,
      // A lost dispute's amount went back to the cardholder without a refund (a refund of the rest then makes it `refunded`).
      transaction.dispute?.status === "lost" ? transaction.dispute.amount_cents : 0
    )
    return transaction
  }

  /** The CONTRACT section 3 error of an answer, or undefined (a success, or a body that is not one). */
  const errorOf = (response: SimResponse | null): { readonly type?: string; readonly code?: string } | undefined => {
    if (response === null || response.status < 400) return undefined
    try {
      return (JSON.parse(response.body) as { error?: { type?: string; code?: string } }).error
    } catch {
      return undefined
    }
  }
  const errorCode = (response: SimResponse | null) => errorOf(response)?.code ?? null

  /** `what` names the request, written out only when the check fails (no text built a passing answer). */
  const expect = (condition: boolean, what: () => string, response: SimResponse | null) =>
    auditor.check(condition, "expected-answer", condition ? passed : () => `${what()}: got ${response === null ? "no answer" : `${response.status} ${response.body.slice(0, 300)}`}`)

  /**
   * The last transaction a script parsed and the exact body it came from: an answer with exactly
   * that body is not parsed again (the same text gives the same transaction; the script never
   * changes one), and its amount laws are still checked.
   */
  interface Known {
    body: string
    transaction: Transaction
  }
  const parseKnown = (response: SimResponse, known: Known): Transaction | null => {
    if (response.status < 200 || response.status >= 300) return null
    if (response.body === known.body) return checkedTransaction(known.transaction)
    const transaction = parseTransaction(response)!
    known.body = response.body
    known.transaction = transaction
    return transaction
  }

  const get = (merchant: Merchant, id: string, known: Known) =>
    send({ merchant, method: "GET", path: `/api/v1/transactions/${id}`, body: null }, (r) => (r === null ? null : parseKnown(r, known)))

  /** Polls until the automatic flow has done what it can (no longer pending or mid-flow). */
  const settleFlow = (merchant: Merchant, known: Known) =>
    Effect.gen(function*() {
      let current = known.transaction
      for (let polls = 0; polls < 60 && current.status === "pending"; polls++) {
        yield* think(prng.exponential(3_000))
        current = (yield* get(merchant, current.id, known)) ?? current
      }
      return current
    })

  /** How the next keyed create sends its key (the mix's shares; the rest: the header). */
  const keyWay = (): KeyWay => {
    const roll = prng.float()
    let edge = mix.bodyKey ?? 0
    if (roll < edge) return "body"
    if (roll < (edge += mix.bothKeys ?? 0)) return "both"
    if (roll < edge + (mix.differentKeys ?? 0)) return "different"
    return "header"
  }
  /**
   * The keyed creates as the client knows them: by script number (its `order-n` metadata), how
   * it sent its key (`keyWayCodes`). The one-payment-per-key law reads this, not the key the
   * payment row records (`auditCreateKeys`).
   */
  const keyWays = new Map<number, number>()

  /**
   * One payment per key, as the client knows its keys (CONTRACT section 5), whichever way it sent
   * them: every payment of a keyed script (its `order-n` metadata) is counted against the script's
   * key, whatever key the payment row records (none, when a bug dropped it). `payments` are the
   * run's, from the store or the API.
   */
  const auditCreateKeys = (payments: Iterable<{ readonly id: string; readonly merchantId: string; readonly idempotencyKey: string | null; readonly metadata: Readonly<Record<string, string>> | null }>) => {
    const seen = new Map<string, { readonly id: string; readonly key: string | null }>()
    for (const payment of payments) {
      const order = payment.metadata?.order
      if (order === undefined || !order.startsWith("order-")) continue
      const code = keyWays.get(Number(order.slice(6)))
      if (code === undefined) continue
      const scoped = `${payment.merchantId} ${order}`
      const other = seen.get(scoped)
      auditor.check(other === undefined, "one-transaction-per-key", () =>
        `idempotency key create-${order.slice(6)} of ${payment.merchantId} (sent ${keyWayNames[code]}): transactions ${other?.id} and ${payment.id} ` +
        `(their rows record the keys ${other?.key ?? "none"} and ${payment.idempotencyKey ?? "none"})`)
      if (other === undefined) seen.set(scoped, { id: payment.id, key: payment.idempotencyKey })
    }
  }

  /** The merchant's last payments by currency as the client knows them (the fraud model's usual amount: at most 50). */
  const remember = (merchantIndex: number, currency: string, amountCents: number) => {
    let byCurrency = amountsOf.get(merchantIndex)
    if (byCurrency === undefined) amountsOf.set(merchantIndex, byCurrency = new Map())
    let amounts = byCurrency.get(currency)
    if (amounts === undefined) byCurrency.set(currency, amounts = [])
    amounts.push(amountCents)
    if (amounts.length > 50) amounts.shift()
  }
  const historyOf = (merchantIndex: number, currency: string): AmountHistory => {
    const amounts = amountsOf.get(merchantIndex)?.get(currency) ?? []
    let sumCents = 0
    for (const a of amounts) sumCents += a
    return { count: amounts.length, sumCents }
  }

  const tokens = ["tok_decline_insufficient_funds", "tok_decline_do_not_honor", "tok_decline_expired_card"]
  const currencies = ["USD", "USD", "USD", "EUR", "GBP", "CAD", "AUD", "JPY"]
  const brands = ["visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay"]

  /**
   * A refund once the payment's dispute was resolved (docs/api.md, Disputes): after a lost one the
   * charged-back amount is no longer refundable (above what is left: 422), after a won one it is
   * again (the whole remainder: 200). The transaction as it is afterwards.
   */
  const refundAfterDispute = (merchant: Merchant, id: string, n: number, outcome: "won" | "lost", known: Known, expectation: Expectation, replays: Array<ReplayOwner>) =>
    Effect.gen(function*() {
      let transaction: Transaction = (yield* get(merchant, id, known)) ?? known.transaction
      if (transaction.status !== "captured" && transaction.status !== "settled") return transaction
      const unrefunded = transaction.captured_amount_cents - transaction.refunded_amount_cents
      const chargedBack = outcome === "lost" ? transaction.dispute?.amount_cents ?? 0 : 0
      const left = unrefunded - chargedBack
      // After a lost dispute, half the time above what is left (into the charged-back money).
      const above = outcome === "lost" && chargedBack > 0 && (left <= 0 || prng.chance(0.5))
      if (!above && left <= 0) return transaction
      const whole = !above && prng.chance(0.5)
      const amountCents = above ? left + prng.int(1, chargedBack) : whole ? left : prng.int(1, left)
      if (outcome === "lost") stats.refundsAfterLostDispute++
      else stats.refundsAfterWonDispute++
      const refund: SimResponse | null = yield* send({
        merchant, method: "POST", path: `/api/v1/transactions/${id}/refund`, key: `refund-${n}-after-dispute`, replays,
        body: whole ? "{}" : JSON.stringify({ amount_cents: amountCents })
      })
      if (refund === null) expectation.uncertain = true
      if (refund?.status === 200) {
        expectation.refundedCents += amountCents
        transaction = parseKnown(refund, known) ?? transaction
      }
      expect(refund === null || refund.status === (above ? 422 : 200),
        () => `refund ${amountCents} of ${id} after a ${outcome} dispute (${unrefunded} not refunded, ${chargedBack} charged back)`, refund)
      return transaction
    })

  const paymentScript = (merchant: Merchant, n: number) =>
    Effect.gen(function*() {
      /** This script's idempotency keys and their first answers (`ReplayOwner`). */
      const replays: Array<ReplayOwner> = []
      const roll = prng.float()
      let token = roll < mix.declineTokens
        ? prng.pick(tokens)
        : roll < mix.declineTokens + mix.riskyTokens
        ? (prng.chance(0.7) ? "tok_risk_review" : "tok_risk_highest")
        : roll < mix.declineTokens + mix.riskyTokens + 0.005
        ? "tok_network_timeout"
        // No draw of its own (the roll decides won or lost too): without dispute tokens the
        // draws, and so the simulator's traces, are the same.
        : roll < mix.declineTokens + mix.riskyTokens + 0.005 + (mix.disputeTokens ?? 0)
        ? (Math.floor(roll * 1e6) % 2 === 0 ? "tok_dispute_won" : "tok_dispute_lost")
        : `tok_card_${merchant.index}_${prng.int(0, 999)}`
      const manual = prng.chance(mix.manualCapture)
      let currency = prng.pick(currencies)
      let amount = prng.chance(0.05) ? prng.int(100_000, 5_000_000) : prng.int(50, 50_000)
      const key = prng.chance(mix.idempotencyKey) ? `create-${n}` : undefined
      const way = key === undefined ? null : keyWay()
      // Boundary-directed: a new card, and the amount, currency, brand and countries that put
      // the score on a threshold (sim/world/Boundary.ts).
      let boundary: BoundaryPlan | null = null
      if (prng.chance(mix.boundaryScores ?? 0)) {
        const target = prng.pick(boundaryTargets)
        const first = prng.int(0, distinctCurrencies.length - 1)
        const firstBrand = prng.int(0, distinctBrands.length - 1)
        const nowMs = yield* Effect.clockWith((c) => c.currentTimeMillis)
        boundary = planBoundary(target, rotated(distinctCurrencies, first), rotated(distinctBrands, firstBrand), (c) => historyOf(merchant.index, c), isoAt(nowMs))
        if (boundary !== null) {
          stats.boundaryPlanned++
          token = `tok_edge_${merchant.index}_${n}`
          currency = boundary.currency
          amount = boundary.amountCents
        }
      }
      // The create body as `JSON.stringify` writes it, the same bytes, written out: every value
      // is a number or a plain ASCII word (tokens, currencies, brands, keys), so nothing needs escaping.
      const keyInBody = key !== undefined && way !== "header"
      const fields = (amountCents: number) => {
        const lastFour = prng.int(1000, 9999)
        const drawn = prng.pick(brands)
        const brand = boundary?.cardBrand ?? drawn
        return `{"transaction":{"amount_cents":${amountCents},"currency":"${currency}","card_token":"${token}","card_last_four":"${lastFour}","card_brand":"${brand}",${
          manual ? `"capture_method":"manual",` : ""
        }${keyInBody ? `"idempotency_key":"${key}",` : ""}"metadata":{"order":"order-${n}"${boundary?.countryMismatch === true ? `,"ip_country":"US","card_country":"GB"` : ""}}}}`
      }
      const body = fields(amount)
      const path = "/api/v1/transactions"
      const sent = { count: 0 }
      const create: Call = key === undefined
        ? { merchant, method: "POST", path, body, noRetryOnDrop: true }
        : way === "body" || way === "different"
        ? { merchant, method: "POST", path, body, key, replays, headers: noHeaders, sent }
        : { merchant, method: "POST", path, body, key, replays, sent }
      if (key !== undefined && way !== null) {
        keyWays.set(n, keyWayCodes[way])
        stats.keyWays[way]++
        if (way === "different") {
          // Two different keys: refused whole (CONTRACT section 5), nothing created; the client
          // then sends the create again with the field alone.
          const refused = yield* send({ merchant, method: "POST", path, body, headers: { "x-idempotency-key": `${key}-header` } })
          const error = errorOf(refused) as { code?: string; param?: string } | undefined
          expect(refused === null || (refused.status === 422 && error?.code === "validation_failed" && error.param === "transaction.idempotency_key"),
            () => `create with header key ${key}-header and body key ${key}`, refused)
        }
      }
      let response: SimResponse | null
      // The first create's answer as parsed, when it was (racing twins): not parsed a second time.
      let parsed: Transaction | null | undefined
      if (key !== undefined && prng.chance(mix.duplicateCreate)) {
        const [first, second] = yield* sendBoth(create, create)
        response = first
        const a = parsed = first === null ? null : parseTransaction(first)
        // The twin's answer is mostly the replay, the same status and text: the same transaction,
        // whose amount laws are checked again as read, without parsing the text again.
        const b = second === null
          ? null
          : first !== null && second.status === first.status && second.body === first.body
          ? (a === null ? null : checkedTransaction(a))
          : parseTransaction(second)
        auditor.check(a === null || b === null || a.id === b.id, "one-transaction-per-key", () => `duplicate creates with key ${key} gave ${a?.id} and ${b?.id}`)
      } else {
        response = yield* send(create)
      }
      if (way !== null && sent.count > 1) stats.keyWaysRetried[way]++
      if (response === null) {
        stats.lostCreates++
        return
      }
      expect(response.status === 201, () => `create ${key ?? "(no key)"}`, response)
      let transaction: Transaction | null = parsed === undefined ? parseTransaction(response) : parsed === null ? null : checkedTransaction(parsed)
      if (transaction === null) return
      remember(merchant.index, currency, amount)
      const known: Known = { body: response.body, transaction }
      const expectation: Expectation = { paymentId: transaction.id, capturedCents: null, refundedCents: 0, uncertain: false }
      expectations.push(expectation)
      scriptPayments.set(n, transaction.id)
      // Two answers at most (racing requests): no list of them made for the look.
      const unanswered = (response: SimResponse | null, other: SimResponse | undefined | null = undefined) => {
        if (response === null || other === null) expectation.uncertain = true
      }
      if (key !== undefined && prng.chance(mix.keyReuseMismatch)) {
        const other = yield* send({ ...create, body: fields(amount + 1) })
        expect(errorCode(other) === "idempotency_key_reused", () => `re-used key ${key} with another body`, other)
      }
      transaction = yield* settleFlow(merchant, known)
      const id = transaction.id
      if (boundary !== null && transaction.fraud_score === 1 / (1 + Math.exp(-boundary.outputMillionths / 1e6))) {
        const target = String(boundary.outputMillionths / 1e6)
        stats.boundaryExact[target] = (stats.boundaryExact[target] ?? 0) + 1
      }

      // Fraud review of a held payment.
      if (transaction.status === "authorized" && transaction.fraud_case_id !== null && prng.chance(mix.review)) {
        yield* think(prng.exponential(10 * 60_000))
        const decision = prng.chance(0.7) ? "false_positive" : "confirmed_fraud"
        const fraudCaseId = transaction.fraud_case_id
        const reviewed = yield* send({
          merchant, method: "POST", path: `/api/v1/fraud/cases/${fraudCaseId}/review`,
          body: JSON.stringify({ status: decision }), key: `review-${n}`, replays
        })
        expect(reviewed?.status === 200, () => `review ${fraudCaseId}`, reviewed)
        yield* think(1_000)
        transaction = (yield* get(merchant, id, known)) ?? transaction
        if (decision === "confirmed_fraud") expect(transaction.status === "blocked", () => `confirmed fraud on ${id}`, null)
      }
      if (transaction.status === "captured") expectation.capturedCents = transaction.amount_cents

      // Manual capture or void.
      if (transaction.status === "authorized" && manual) {
        yield* think(prng.exponential(30 * 60_000))
        if (prng.chance(mix.racingOperations)) {
          const [captured, voided] = yield* sendBoth(
            { merchant, method: "POST", path: `/api/v1/transactions/${id}/capture`, body: "{}", key: `capture-${n}`, replays },
            { merchant, method: "POST", path: `/api/v1/transactions/${id}/void`, body: "{}", key: `void-${n}`, replays }
          )
          unanswered(captured, voided)
          const wins = (captured?.status === 200 ? 1 : 0) + (voided?.status === 200 ? 1 : 0)
          expect(wins === 1 || (captured?.status === 409 && voided?.status === 409), () => `racing capture and void of ${id} (one wins)`, captured)
          if (captured?.status === 200) expectation.capturedCents = transaction.amount_cents
          if (captured !== null && captured.status === 200) transaction = parseKnown(captured, known) ?? transaction
        } else {
          const action = prng.weighted({ full: 50, partial: 25, void: 25 })
          if (action === "void") {
            const voided = yield* send({ merchant, method: "POST", path: `/api/v1/transactions/${id}/void`, body: "{}", key: `void-${n}`, replays })
            unanswered(voided)
            expect(voided?.status === 200 || voided?.status === 409, () => `void ${id}`, voided)
          } else {
            const amountCents = action === "full" ? transaction.amount_cents : prng.int(1, transaction.amount_cents)
            const captured = yield* send({
              merchant, method: "POST", path: `/api/v1/transactions/${id}/capture`,
              body: action === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents }), key: `capture-${n}`, replays
            })
            unanswered(captured)
            expect(captured?.status === 200 || captured?.status === 409, () => `capture ${id}`, captured)
            if (captured?.status === 200) {
              expectation.capturedCents = amountCents
              transaction = parseKnown(captured, known) ?? transaction
              expect(transaction.captured_amount_cents === amountCents, () => `capture ${id} of ${amountCents}`, captured)
            }
          }
        }
      }

      // A dispute while the script runs (sometimes after a partial refund): refunds, a capture
      // and a void meet it open. Its own refunds take the place of the ones below.
      const disputeNow = hooks.disputeNow
      let disputed = false
      if (disputeNow !== null && (transaction.status === "captured" || transaction.status === "settled") && prng.chance(mix.disputeDuringScript ?? 0)) {
        yield* think(Math.max(0, Math.min(prng.exponential(20 * 60_000), horizonEndMs - (yield* Effect.clockWith((c) => c.currentTimeMillis)))))
        transaction = (yield* get(merchant, id, known)) ?? transaction
        const before: number = transaction.captured_amount_cents - transaction.refunded_amount_cents
        if (prng.chance(0.5) && before > 1 && (transaction.status === "captured" || transaction.status === "settled")) {
          const amountCents = prng.int(1, before - 1)
          const refunded: SimResponse | null = yield* send({
            merchant, method: "POST", path: `/api/v1/transactions/${id}/refund`, key: `refund-${n}-before-dispute`, replays,
            body: JSON.stringify({ amount_cents: amountCents })
          })
          unanswered(refunded)
          expect(refunded?.status === 200, () => `refund ${amountCents} of ${before} on ${id}`, refunded)
          if (refunded?.status === 200) {
            expectation.refundedCents += amountCents
            transaction = parseKnown(refunded, known) ?? transaction
          }
        }
        // Some scripts wait for the dispute's outcome and then refund (the network resolves it at
        // once): a refund after a lost dispute may not take the charged-back money.
        const resolveDisputeNow = hooks.resolveDisputeNow
        const resolveInScript = resolveDisputeNow !== null && prng.chance(mix.refundAfterDispute ?? 0)
        if (yield* disputeNow(id, resolveInScript)) {
          stats.disputesInScript++
          disputed = true
          transaction = (yield* get(merchant, id, known)) ?? transaction
          const dispute = transaction.dispute
          if (dispute !== null && dispute.status === "open") {
            stats.operationsWhileDisputed += 3
            // A captured payment cannot be captured or voided, disputed or not.
            for (const operation of ["capture", "void"] as const) {
              const answer: SimResponse | null = yield* send({
                merchant, method: "POST", path: `/api/v1/transactions/${id}/${operation}`, body: "{}", key: `${operation}-${n}-disputed`, replays
              })
              unanswered(answer)
              expect(answer === null || (answer.status === 409 && errorCode(answer) === "invalid_state"), () => `${operation} of ${id} while disputed`, answer)
            }
            // A refund takes at most what the dispute leaves; above that it is refused while the
            // dispute is open (409), and judged by its outcome once it was resolved meanwhile.
            const rest: number = transaction.captured_amount_cents - transaction.refunded_amount_cents
            const free = rest - dispute.amount_cents
            const within = free > 0 && prng.chance(0.5)
            const amountCents = within ? prng.int(1, free) : prng.int(Math.max(1, free + 1), rest)
            const refund: SimResponse | null = yield* send({
              merchant, method: "POST", path: `/api/v1/transactions/${id}/refund`, key: `refund-${n}-disputed`, replays,
              body: JSON.stringify({ amount_cents: amountCents })
            })
            unanswered(refund)
            if (refund?.status === 200) {
              expectation.refundedCents += amountCents
              transaction = parseKnown(refund, known) ?? transaction
            }
            if (within) expect(refund === null || refund.status === 200, () => `refund ${amountCents} of ${id}, ${free} not disputed`, refund)
            else if (refund !== null && refund.status !== 409) {
              const now = (yield* get(merchant, id, known)) ?? transaction
              const outcome = now.dispute?.status
              expect(outcome === "won" ? refund.status === 200 : outcome === "lost" && refund.status === 422,
                () => `refund ${amountCents} of ${id} with ${dispute.amount_cents} of ${rest} disputed (dispute now ${outcome})`, refund)
            }
          }
          if (resolveInScript && resolveDisputeNow !== null) {
            const outcome = yield* resolveDisputeNow(id)
            if (outcome !== null) transaction = yield* refundAfterDispute(merchant, id, n, outcome, known, expectation, replays)
          }
        }
      }

      // Refunds: partial, full, above the remainder, racing.
      if (!disputed && (transaction.status === "captured" || transaction.status === "settled") && prng.chance(mix.refund)) {
        const delayMs = prng.chance(0.7) ? prng.exponential(20 * 60_000) : prng.int(3_600_000, 30 * 3_600_000)
        yield* think(Math.max(0, Math.min(delayMs, horizonEndMs - (yield* Effect.clockWith((c) => c.currentTimeMillis)))))
        transaction = (yield* get(merchant, id, known)) ?? transaction
        const refunds = prng.int(1, 3)
        for (let r = 0; r < refunds; r++) {
          const remainder: number = transaction.captured_amount_cents - transaction.refunded_amount_cents
          if (remainder <= 0 || (transaction.status !== "captured" && transaction.status !== "settled")) break
          const path = `/api/v1/transactions/${id}/refund`
          const kind = prng.chance(mix.overRefund) ? "over" : prng.chance(mix.racingOperations) ? "race" : prng.weighted({ partial: 60, full: 40 })
          if (kind === "over") {
            const over: number = remainder + prng.int(1, 5_000)
            const refused: SimResponse | null = yield* send({ merchant, method: "POST", path, body: JSON.stringify({ amount_cents: over }), key: `refund-${n}-${r}`, replays })
            unanswered(refused)
            auditor.check(refused?.status === 422, "refund-above-remainder-refused", () =>
              `refund of ${over} on ${id} with ${remainder} left answered ${refused?.status} ${refused?.body.slice(0, 300)}`)
            if (refused?.status === 200) {
              expectation.refundedCents += over
              transaction = parseKnown(refused, known) ?? transaction
            }
          } else if (kind === "race") {
            const each = Math.max(1, Math.ceil(remainder * 0.6))
            const body = JSON.stringify({ amount_cents: each })
            const [first, second] = yield* sendBoth(
              { merchant, method: "POST", path, body, key: `refund-${n}-${r}a`, replays },
              { merchant, method: "POST", path, body, key: `refund-${n}-${r}b`, replays }
            )
            unanswered(first, second)
            const accepted = (first?.status === 200 ? 1 : 0) + (second?.status === 200 ? 1 : 0)
            auditor.check(accepted * each <= remainder, "refunds-within-capture", () => `racing refunds on ${id}: ${accepted} × ${each} accepted with ${remainder} left`)
            expectation.refundedCents += accepted * each
            transaction = (yield* get(merchant, id, known)) ?? transaction
          } else {
            const amountCents: number = kind === "full" || remainder === 1 ? remainder : prng.int(1, remainder - 1)
            const refunded: SimResponse | null = yield* send({
              merchant, method: "POST", path, key: `refund-${n}-${r}`, replays,
              body: kind === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents })
            })
            unanswered(refunded)
            expect(refunded?.status === 200, () => `refund ${amountCents} of ${remainder} on ${id}`, refunded)
            if (refunded?.status === 200) {
              expectation.refundedCents += amountCents
              transaction = parseKnown(refunded, known) ?? transaction
            }
          }
        }
      }
    })

  /** A merchant locked out by a lost rotation answer: the operator issues a new key (`payments` CLI). */
  const recoverKey = (merchant: Merchant) =>
    Effect.gen(function*() {
      while (true) {
        const issued = service.isUp ? yield* service.issueKey(merchant) : null
        if (issued !== null) {
          merchant.apiKey = issued.secret
          merchant.keyId = issued.record.id
          merchant.keyGeneration++
          stats.keyRecoveries++
          trace.record(`m${merchant.index} locked out by a lost rotation answer; new key ${issued.record.id} issued out of band`)
          return
        }
        yield* backoff(60_000)
      }
    })

  /** Rotates the merchant's API key now and then, sometimes twice at once. */
  const rotations = (merchant: Merchant) =>
    Effect.gen(function*() {
      const meanMs = 86_400_000 / Math.max(1e-9, mix.keyRotationsPerMerchantDay)
      while (true) {
        if (mix.keyRotationsPerMerchantDay === 0) return
        const before = yield* Effect.clockWith((c) => c.currentTimeMillis)
        const gapMs = prng.exponential(meanMs)
        if (before + gapMs >= horizonEndMs) return
        yield* idle(gapMs)
        const call: Call = { merchant, method: "POST", path: `/api/v1/api_keys/${merchant.keyId}/rotate`, body: "{}", allow401: true }
        const racing = prng.chance(mix.racingOperations)
        // From the first commit of a rotation until the merchant holds its answer, the key it
        // uses may already be revoked (a twin rotation won, or a reply was lost and retried).
        merchant.keyUncertain = true
        const answers = racing ? yield* sendBoth(call, call) : [yield* send(call)]
        const won = answers.filter((a) => a?.status === 201)
        auditor.check(won.length <= 1, "one-rotation-wins", () => `two rotations of ${merchant.keyId} both succeeded`)
        for (const answer of answers) {
          expect(answer === null || answer.status === 201 || answer.status === 401 || answer.status === 409, () => `rotate ${merchant.keyId}`, answer)
        }
        const winner = won[0]
        if (winner !== undefined && winner !== null) {
          const issued = (JSON.parse(winner.body) as { api_key: { id: string; key: string } }).api_key
          merchant.apiKey = issued.key
          merchant.keyId = issued.id
          merchant.keyGeneration++
          stats.rotations++
        } else if (answers.some((a) => a === null || a.status === 401)) {
          // No answer, or a 401 on a retry: a rotation may have happened with its reply lost (a
          // crash between its commit and the reply). The merchant finds out with the key it
          // holds; when that key is revoked, it is locked out of the API and gets a new key out
          // of band, as from the operator's CLI.
          const probe = yield* send({ merchant, method: "GET", path: "/api/v1/merchants/me", body: null, allow401: true })
          if (probe?.status === 401) yield* recoverKey(merchant)
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
  const batch = (merchant: Merchant, count: number, tag: string, draws: Prng) =>
    Effect.forEach(Array.from({ length: count }, (_, i) => i), (i) => {
      stats.scriptsStarted++
      stats.batchPayments++
      const key = `batch-${tag}-${i}`
      const body = `{"transaction":{"amount_cents":${draws.int(50, 50_000)},"currency":"USD","card_token":"tok_batch_${merchant.index}_${tag}_${i}",` +
        `"card_last_four":"${draws.int(1000, 9999)}","card_brand":"visa","metadata":{"order":"${key}"}}}`
      return Effect.ensuring(
        send({ merchant, method: "POST", path: "/api/v1/transactions", body, key, replays: [] }, (response) => {
          if (response === null) {
            stats.lostCreates++
            return
          }
          expect(response.status === 201, () => `batch create ${key}`, response)
          const transaction = parseTransaction(response)
          if (transaction !== null) expectations.push({ paymentId: transaction.id, capturedCents: null, refundedCents: 0, uncertain: false })
        }),
        Effect.sync(() => void stats.scriptsFinished++)
      )
    }, { concurrency: "unbounded", discard: true })

  /**
   * Pushes one API key past its rate limit on purpose (the rate limiter's law, sim/checks/RateLimitLaw.ts):
   * a new key of the merchant (`POST /api/v1/api_keys`, used by nothing else and never rotated),
   * then `burst` requests in one instant and `steady` more, one every `gapMs` (faster than the
   * refill), each `GET /api/v1/merchants/me` sent once (a 429 is not retried: it is the point).
   * A script of its own (the run waits for it).
   */
  const pushRateLimit = (merchant: Merchant, tag: string, plan: { readonly burst: number; readonly steady: number; readonly gapMs: number }) =>
    Effect.suspend(() => {
      stats.scriptsStarted++
      return Effect.ensuring(pushing(merchant, tag, plan), Effect.sync(() => void stats.scriptsFinished++))
    })
  const pushing = (merchant: Merchant, tag: string, plan: { readonly burst: number; readonly steady: number; readonly gapMs: number }) =>
    Effect.gen(function*() {
      const created = yield* send({ merchant, method: "POST", path: "/api/v1/api_keys", body: `{"name":"rate limit push ${tag}"}`, key: `push-key-${tag}`, replays: [] })
      if (created === null || created.status !== 201) return
      const secret = (JSON.parse(created.body) as { api_key: { key: string } }).api_key.key
      stats.rateLimitPushes++
      const counts: Record<string, number> = {}
      const fire = Effect.suspend(() =>
        service.send(service.request("GET", "/api/v1/merchants/me", secret, null, noHeaders), (response) =>
          Effect.sync(() => {
            stats.requests++
            const status = response === null ? "dropped" : response.status
            byStatus[status] = (byStatus[status] ?? 0) + 1
            counts[status] = (counts[status] ?? 0) + 1
            if (response !== null) auditor.check(response.status !== 500, "no-internal-errors", () => `GET /api/v1/merchants/me answered 500: ${response.body}`)
          })))
      const sent: Array<Fiber.Fiber<void>> = []
      for (let i = 0; i < plan.burst; i++) sent.push(yield* Effect.forkDetach(fire))
      for (let i = 0; i < plan.steady; i++) {
        yield* Effect.sleep(plan.gapMs)
        sent.push(yield* Effect.forkDetach(fire))
      }
      yield* Fiber.joinAll(sent)
      trace.record(`m${merchant.index} rate limit push ${tag}: ${plan.burst} at once, ${plan.steady} every ${plan.gapMs} ms -> ${
        Object.entries(counts).sort().map(([status, n]) => `${status}:${n}`).join(" ")}`)
    })

  /** Poisson arrivals of payments over the first 90% of the horizon, each script on its own fiber. */
  const arrivals = (merchants: ReadonlyArray<Merchant>, startMs: number) =>
    Effect.gen(function*() {
      const spanMs = (horizonEndMs - startMs) * 0.9
      const meanGapMs = spanMs / Math.max(1, options.payments)
      for (let n = 0; n < options.payments; n++) {
        yield* Effect.sleep(prng.exponential(meanGapMs))
        const merchant = prng.pick(merchants)
        stats.scriptsStarted++
        yield* Effect.forkDetach(script(merchant, n))
      }
    })

  /** Script number `n` of `merchant`, to its end (and what runs then: `hooks.onPaymentFinished`). */
  const script = (merchant: Merchant, n: number) =>
    Effect.ensuring(paymentScript(merchant, n), Effect.suspend(() => {
      stats.scriptsFinished++
      const paymentId = scriptPayments.get(n)
      scriptPayments.delete(n)
      return paymentId === undefined ? Effect.void : hooks.onPaymentFinished(paymentId)
    }))

  return { stats, expectations, arrivals, script, rotations, batch, pushRateLimit, auditCreateKeys }
}

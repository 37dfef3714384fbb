import type { HttpMethod } from "@effect/platform"
import { hash as oneShotHash } from "node:crypto"
import { Effect } from "effect"
import { ApiKeys } from "../src/services/ApiKeys.ts"
import type { Auditor } from "./Auditor.ts"
import { makeRequest, type SimResponse } from "./Http.ts"
import type { SimOptions } from "./Options.ts"
import type { Prng } from "./Prng.ts"
import { answerOf, awaitEither, type SimulatedService } from "./Service.ts"
import type { Trace } from "./Trace.ts"

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

interface Transaction {
  readonly id: string
  readonly status: string
  readonly amount_cents: number
  readonly captured_amount_cents: number
  readonly refunded_amount_cents: number
  readonly fraud_case_id: string | null
  readonly capture_method: string
  readonly failure_code: string | null
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
}

const maximumAttempts = 400

const digest = (text: string) => oneShotHash("sha1", text, "base64")

export const makeWorkload = (
  options: SimOptions,
  prng: Prng,
  service: SimulatedService,
  auditor: Auditor,
  trace: Trace,
  horizonEndMs: number
) => {
  const stats: WorkloadStats = { requests: 0, byStatus: {}, dropped: 0, lostCreates: 0, scriptsStarted: 0, scriptsFinished: 0, rotations: 0, keyRecoveries: 0 }
  /**
   * One a created payment, in creation order, checked at the end of the run: a list, not a map
   * by payment (one entry a payment for the whole run, never looked up before the end).
   */
  const expectations: Array<Expectation> = []
  /** The payment each script created, and what runs when its script ends (sim/Disputes.ts). */
  const scriptPayments = new Map<number, string>()
  const hooks = { onPaymentFinished: (_paymentId: string): Effect.Effect<void> => Effect.void }
  /** Idempotency: per merchant and key, the request that owns it and the answer it got. */
  // The first answer's body itself, compared exactly (no hash per keyed answer): the entries go
  // when their script ends (`forgetReplays`), so only the running scripts' answers stay on the
  // heap. The request is kept as its own fields (method, path, body), compared exactly; the map is
  // per merchant, then per key, so no scoped text is built (and hashed) per keyed answer.
  interface ReplayOwner {
    readonly method: string
    readonly path: string
    readonly body: string
    readonly status: number
    readonly answer: string
    readonly byKey: Map<string, ReplayOwner>
    readonly key: string
  }
  const replays = new Map<string, Map<string, ReplayOwner>>()
  const mix = options.mix
  /**
   * The replay entries of each script: its keys (`create-n`, `capture-n`, `refund-n-r`...: the
   * script's number after the first dash) are never sent by another script nor after it ends, so
   * its entries are forgotten then and the answers do not pile up over a run.
   */
  const scriptReplays = new Map<number, Array<ReplayOwner>>()
  const rememberReplay = (owner: ReplayOwner) => {
    const key = owner.key
    const n = Number.parseInt(key.slice(key.indexOf("-") + 1), 10)
    const list = scriptReplays.get(n)
    if (list === undefined) scriptReplays.set(n, [owner])
    else list.push(owner)
  }
  const forgetReplays = (n: number) => {
    const list = scriptReplays.get(n)
    if (list === undefined) return
    for (const owner of list) owner.byKey.delete(owner.key)
    scriptReplays.delete(n)
  }

  interface Call {
    readonly merchant: Merchant
    readonly method: HttpMethod.HttpMethod
    readonly path: string
    readonly body: string | null
    readonly key?: string
    /** Do not retry a dropped connection (an unkeyed create could run twice). */
    readonly noRetryOnDrop?: boolean
    /** A 401 is an acceptable answer (racing key rotations). */
    readonly allow401?: boolean
  }

  const record = (call: Call, generation: number, response: SimResponse | null) => {
    stats.requests++
    const status = response === null ? "dropped" : String(response.status)
    stats.byStatus[status] = (stats.byStatus[status] ?? 0) + 1
    trace.record(`m${call.merchant.index} k${generation} ${call.method} ${call.path}${call.key === undefined ? "" : ` key=${call.key}`} ${call.body ?? ""} -> ${status} ${response?.body ?? ""}`)
  }

  const checkReplay = (call: Call, response: SimResponse) => {
    if (call.key === undefined) return
    const status = response.status
    if (status === 401 || status === 429 || status >= 500) return
    const code = status === 409 || status === 422 ? (JSON.parse(response.body) as { error?: { code?: string } }).error?.code : undefined
    if (code === "idempotency_in_progress") return
    const key = call.key
    let byKey = replays.get(call.merchant.id)
    if (byKey === undefined) replays.set(call.merchant.id, byKey = new Map())
    // The request itself, not a digest of it: method, path and body (a null body as ""), compared
    // exactly, without a hash per keyed answer.
    const body = call.body ?? ""
    const owner = byKey.get(key)
    if (owner === undefined) {
      if (code !== "idempotency_key_reused") {
        const entry: ReplayOwner = { method: call.method, path: call.path, body, status, answer: response.body, byKey, key }
        byKey.set(key, entry)
        rememberReplay(entry)
      }
      return
    }
    if (owner.method === call.method && owner.path === call.path && owner.body === body) {
      auditor.check(owner.status === status && owner.answer === response.body, "idempotent-replay", () =>
        `key ${key}: replay answered ${status} ${response.body.slice(0, 200)} but the first answer was ${owner.status} with another body (sha1 ${digest(owner.answer)})`)
    } else {
      auditor.check(code === "idempotency_key_reused", "idempotency-key-reused", () => `key ${key} re-used with another request answered ${status}`)
    }
  }

  /**
   * One logical request with client retries; null when it never got a final answer. Plain steps
   * rather than a generator (every request of the run goes through here), one attempt per call.
   */
  const send = (call: Call): Effect.Effect<SimResponse | null> => Effect.suspend(() => attemptAt(call, 0))

  /** One attempt, sent when this is called (from `send`'s suspend or a retry's): `service.send` is eager. */
  const attemptAt = (call: Call, attempt: number): Effect.Effect<SimResponse | null> => {
    if (attempt >= maximumAttempts) return Effect.succeed(null)
    const generation = call.merchant.keyGeneration
    return service.send(requestOf(call), (response) => {
      const next = answered(call, attempt, generation, response)
      return Effect.isEffect(next) ? next : Effect.succeed(next)
    })
  }

  const requestOf = (call: Call) =>
    makeRequest(call.method, call.path, call.merchant.apiKey, call.body, call.key === undefined ? {} : { "x-idempotency-key": call.key })

  /**
   * What the client does with the answer to one attempt (sent with the key of `generation`): the
   * final answer, or the effect that retries (after its wait) and gives the final answer.
   */
  const answered = (call: Call, attempt: number, generation: number, response: SimResponse | null): SimResponse | null | Effect.Effect<SimResponse | null> => {
    // The next attempt, for the retrying branches only (a plain answer builds nothing).
    const again = () => Effect.suspend(() => attemptAt(call, attempt + 1))
    record(call, generation, response)
    if (response === null) {
      stats.dropped++
      if (call.noRetryOnDrop === true) return null
      return Effect.zipRight(Effect.sleep(Math.min(30_000, 500 * 2 ** Math.min(attempt, 6)) + prng.int(0, 500)), again())
    }
    auditor.check(response.status !== 500, "no-internal-errors", () => `${call.method} ${call.path} answered 500: ${response.body}`)
    if (response.status > 500) {
      // CONTRACT section 3: the only other 5xx is 503 service_unavailable, with Retry-After.
      const error = errorOf(response)
      auditor.check(
        response.status === 503 && error?.code === "service_unavailable" && error.type === "api_error" && response.headers["retry-after"] !== undefined,
        "service-unavailable-answer",
        () => `${call.method} ${call.path} answered ${response.status} ${response.body.slice(0, 200)} (retry-after ${response.headers["retry-after"]})`
      )
    }
    checkReplay(call, response)
    if (response.status === 401) {
      if (call.allow401 === true) return response
      auditor.check(call.merchant.keyGeneration !== generation || call.merchant.keyUncertain === true, "valid-key-accepted", () =>
        `${call.method} ${call.path}: the current API key was refused`)
      // Try again with the key the merchant holds by then (after a rotation or its recovery).
      if (call.merchant.keyGeneration === generation) return Effect.zipRight(Effect.sleep(5_000 + prng.int(0, 1_000)), again())
      return again()
    }
    if (response.status === 429 || response.status === 503 || (response.status === 409 && response.body.includes("idempotency_in_progress"))) {
      const retryAfterSeconds = Number(response.headers["retry-after"] ?? "1")
      return Effect.zipRight(Effect.sleep(Math.max(1, retryAfterSeconds) * 1_000 + prng.int(0, 1_000)), again())
    }
    return response
  }

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
            const next = firstIsA
              ? answered(a, 0, generationA, answerOf(pendingA))
              : answered(b, 0, generationB, answerOf(pendingB))
            const other = firstIsA ? pendingB : pendingA
            // The other request's answer, handled when it arrives.
            const rest = Effect.flatMap(awaitEither(other, null), (pending) => {
              const last = firstIsA ? answered(b, 0, generationB, answerOf(pending)) : answered(a, 0, generationA, answerOf(pending))
              return Effect.isEffect(last) ? last : Effect.succeed(last)
            })
            const both = Effect.isEffect(next)
              ? Effect.all([next, rest], { concurrency: 2 })
              : Effect.map(rest, (last) => [next, last] as const)
            return Effect.map(both, ([x, y]): [SimResponse | null, SimResponse | null] => (firstIsA ? [x, y] : [y, x]))
          }))
      })
    })

  const parseTransaction = (response: SimResponse): Transaction | null => {
    if (response.status < 200 || response.status >= 300) return null
    return checkedTransaction((JSON.parse(response.body) as { transaction: Transaction }).transaction)
  }
  /** The amount laws of a transaction just read (every answer's, whether parsed or known). */
  const checkedTransaction = (transaction: Transaction): Transaction => {
    auditor.checkAmounts({
      id: transaction.id,
      status: transaction.status as never,
      amountCents: transaction.amount_cents,
      capturedAmountCents: transaction.captured_amount_cents,
      refundedAmountCents: transaction.refunded_amount_cents,
      failureCode: transaction.failure_code
    })
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

  const expect = (condition: boolean, what: string, response: SimResponse | null) =>
    auditor.check(condition, "expected-answer", () => `${what}: got ${response === null ? "no answer" : `${response.status} ${response.body.slice(0, 300)}`}`)

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
    Effect.map(send({ merchant, method: "GET", path: `/api/v1/transactions/${id}`, body: null }), (r) => (r === null ? null : parseKnown(r, known)))

  /** Polls until the automatic flow has done what it can (no longer pending or mid-flow). */
  const settleFlow = (merchant: Merchant, known: Known) =>
    Effect.gen(function*() {
      let current = known.transaction
      for (let polls = 0; polls < 60 && current.status === "pending"; polls++) {
        yield* Effect.sleep(prng.exponential(3_000))
        current = (yield* get(merchant, current.id, known)) ?? current
      }
      return current
    })

  const tokens = ["tok_decline_insufficient_funds", "tok_decline_do_not_honor", "tok_decline_expired_card"]
  const currencies = ["USD", "USD", "USD", "EUR", "GBP", "CAD", "AUD", "JPY"]
  const brands = ["visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay"]

  const paymentScript = (merchant: Merchant, n: number) =>
    Effect.gen(function*() {
      const roll = prng.float()
      const token = roll < mix.declineTokens
        ? prng.pick(tokens)
        : roll < mix.declineTokens + mix.riskyTokens
        ? (prng.chance(0.7) ? "tok_risk_review" : "tok_risk_highest")
        : roll < mix.declineTokens + mix.riskyTokens + 0.005
        ? "tok_network_timeout"
        : `tok_card_${merchant.index}_${prng.int(0, 999)}`
      const manual = prng.chance(mix.manualCapture)
      const currency = prng.pick(currencies)
      const amount = prng.chance(0.05) ? prng.int(100_000, 5_000_000) : prng.int(50, 50_000)
      const key = prng.chance(mix.idempotencyKey) ? `create-${n}` : undefined
      const fields = (amountCents: number) => JSON.stringify({
        transaction: {
          amount_cents: amountCents,
          currency,
          card_token: token,
          card_last_four: String(prng.int(1000, 9999)),
          card_brand: prng.pick(brands),
          ...(manual ? { capture_method: "manual" } : {}),
          metadata: { order: `order-${n}` }
        }
      })
      const body = fields(amount)
      const create: Call = key === undefined
        ? { merchant, method: "POST", path: "/api/v1/transactions", body, noRetryOnDrop: true }
        : { merchant, method: "POST", path: "/api/v1/transactions", body, key }
      let response: SimResponse | null
      if (key !== undefined && prng.chance(mix.duplicateCreate)) {
        const [first, second] = yield* sendBoth(create, create)
        response = first
        const a = first === null ? null : parseTransaction(first)
        const b = second === null ? null : parseTransaction(second)
        auditor.check(a === null || b === null || a.id === b.id, "one-transaction-per-key", () => `duplicate creates with key ${key} gave ${a?.id} and ${b?.id}`)
      } else {
        response = yield* send(create)
      }
      if (response === null) {
        stats.lostCreates++
        return
      }
      expect(response.status === 201, `create ${key ?? "(no key)"}`, response)
      let transaction: Transaction | null = parseTransaction(response)
      if (transaction === null) return
      const known: Known = { body: response.body, transaction }
      const expectation: Expectation = { paymentId: transaction.id, capturedCents: null, refundedCents: 0, uncertain: false }
      expectations.push(expectation)
      scriptPayments.set(n, transaction.id)
      const unanswered = (...responses: ReadonlyArray<SimResponse | null>) => {
        if (responses.includes(null)) expectation.uncertain = true
      }
      if (key !== undefined && prng.chance(mix.keyReuseMismatch)) {
        const other = yield* send({ ...create, body: fields(amount + 1) })
        expect(errorCode(other) === "idempotency_key_reused", `re-used key ${key} with another body`, other)
      }
      transaction = yield* settleFlow(merchant, known)
      const id = transaction.id

      // Fraud review of a held payment.
      if (transaction.status === "authorized" && transaction.fraud_case_id !== null && prng.chance(mix.review)) {
        yield* Effect.sleep(prng.exponential(10 * 60_000))
        const decision = prng.chance(0.7) ? "false_positive" : "confirmed_fraud"
        const reviewed = yield* send({
          merchant, method: "POST", path: `/api/v1/fraud/cases/${transaction.fraud_case_id}/review`,
          body: JSON.stringify({ status: decision }), key: `review-${n}`
        })
        expect(reviewed?.status === 200, `review ${transaction.fraud_case_id}`, reviewed)
        yield* Effect.sleep(1_000)
        transaction = (yield* get(merchant, id, known)) ?? transaction
        if (decision === "confirmed_fraud") expect(transaction.status === "blocked", `confirmed fraud on ${id}`, null)
      }
      if (transaction.status === "captured") expectation.capturedCents = transaction.amount_cents

      // Manual capture or void.
      if (transaction.status === "authorized" && manual) {
        yield* Effect.sleep(prng.exponential(30 * 60_000))
        if (prng.chance(mix.racingOperations)) {
          const [captured, voided] = yield* sendBoth(
            { merchant, method: "POST", path: `/api/v1/transactions/${id}/capture`, body: "{}", key: `capture-${n}` },
            { merchant, method: "POST", path: `/api/v1/transactions/${id}/void`, body: "{}", key: `void-${n}` }
          )
          unanswered(captured, voided)
          const wins = [captured, voided].filter((r) => r?.status === 200).length
          expect(wins === 1 || (captured?.status === 409 && voided?.status === 409), `racing capture and void of ${id} (one wins)`, captured)
          if (captured?.status === 200) expectation.capturedCents = transaction.amount_cents
          if (captured !== null && captured.status === 200) transaction = parseKnown(captured, known) ?? transaction
        } else {
          const action = prng.weighted({ full: 50, partial: 25, void: 25 })
          if (action === "void") {
            const voided = yield* send({ merchant, method: "POST", path: `/api/v1/transactions/${id}/void`, body: "{}", key: `void-${n}` })
            unanswered(voided)
            expect(voided?.status === 200 || voided?.status === 409, `void ${id}`, voided)
          } else {
            const amountCents = action === "full" ? transaction.amount_cents : prng.int(1, transaction.amount_cents)
            const captured = yield* send({
              merchant, method: "POST", path: `/api/v1/transactions/${id}/capture`,
              body: action === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents }), key: `capture-${n}`
            })
            unanswered(captured)
            expect(captured?.status === 200 || captured?.status === 409, `capture ${id}`, captured)
            if (captured?.status === 200) {
              expectation.capturedCents = amountCents
              transaction = parseKnown(captured, known) ?? transaction
              expect(transaction.captured_amount_cents === amountCents, `capture ${id} of ${amountCents}`, captured)
            }
          }
        }
      }

      // Refunds: partial, full, above the remainder, racing.
      if ((transaction.status === "captured" || transaction.status === "settled") && prng.chance(mix.refund)) {
        const delayMs = prng.chance(0.7) ? prng.exponential(20 * 60_000) : prng.int(3_600_000, 30 * 3_600_000)
        yield* Effect.sleep(Math.max(0, Math.min(delayMs, horizonEndMs - (yield* Effect.clockWith((c) => c.currentTimeMillis)))))
        transaction = (yield* get(merchant, id, known)) ?? transaction
        const refunds = prng.int(1, 3)
        for (let r = 0; r < refunds; r++) {
          const remainder: number = transaction.captured_amount_cents - transaction.refunded_amount_cents
          if (remainder <= 0 || (transaction.status !== "captured" && transaction.status !== "settled")) break
          const path = `/api/v1/transactions/${id}/refund`
          const kind = prng.chance(mix.overRefund) ? "over" : prng.chance(mix.racingOperations) ? "race" : prng.weighted({ partial: 60, full: 40 })
          if (kind === "over") {
            const over: number = remainder + prng.int(1, 5_000)
            const refused: SimResponse | null = yield* send({ merchant, method: "POST", path, body: JSON.stringify({ amount_cents: over }), key: `refund-${n}-${r}` })
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
            const answers = yield* sendBoth(
              { merchant, method: "POST", path, body, key: `refund-${n}-${r}a` },
              { merchant, method: "POST", path, body, key: `refund-${n}-${r}b` }
            )
            unanswered(...answers)
            const accepted = answers.filter((a) => a?.status === 200).length
            auditor.check(accepted * each <= remainder, "refunds-within-capture", () => `racing refunds on ${id}: ${accepted} × ${each} accepted with ${remainder} left`)
            expectation.refundedCents += accepted * each
            transaction = (yield* get(merchant, id, known)) ?? transaction
          } else {
            const amountCents: number = kind === "full" || remainder === 1 ? remainder : prng.int(1, remainder - 1)
            const refunded: SimResponse | null = yield* send({
              merchant, method: "POST", path, key: `refund-${n}-${r}`,
              body: kind === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents })
            })
            unanswered(refunded)
            expect(refunded?.status === 200, `refund ${amountCents} of ${remainder} on ${id}`, refunded)
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
        const issued = service.isUp
          ? yield* service.withServices(Effect.flatMap(ApiKeys, (keys) => keys.create(merchant.id, "recovered"))).pipe(
            Effect.orElseSucceed(() => null)
          )
          : null
        if (issued !== null) {
          merchant.apiKey = issued.secret
          merchant.keyId = issued.record.id
          merchant.keyGeneration++
          stats.keyRecoveries++
          trace.record(`m${merchant.index} locked out by a lost rotation answer; new key ${issued.record.id} issued out of band`)
          return
        }
        yield* Effect.sleep(60_000)
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
        yield* Effect.sleep(gapMs)
        const call: Call = { merchant, method: "POST", path: `/api/v1/api_keys/${merchant.keyId}/rotate`, body: "{}", allow401: true }
        const racing = prng.chance(mix.racingOperations)
        // From the first commit of a rotation until the merchant holds its answer, the key it
        // uses may already be revoked (a twin rotation won, or a reply was lost and retried).
        merchant.keyUncertain = true
        const answers = racing ? yield* sendBoth(call, call) : [yield* send(call)]
        const won = answers.filter((a) => a?.status === 201)
        auditor.check(won.length <= 1, "one-rotation-wins", () => `two rotations of ${merchant.keyId} both succeeded`)
        for (const answer of answers) {
          expect(answer === null || answer.status === 201 || answer.status === 401 || answer.status === 409, `rotate ${merchant.keyId}`, answer)
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

  /** Poisson arrivals of payments over the first 90% of the horizon, each script on its own fiber. */
  const arrivals = (merchants: ReadonlyArray<Merchant>, startMs: number) =>
    Effect.gen(function*() {
      const spanMs = (horizonEndMs - startMs) * 0.9
      const meanGapMs = spanMs / Math.max(1, options.payments)
      for (let n = 0; n < options.payments; n++) {
        yield* Effect.sleep(prng.exponential(meanGapMs))
        const merchant = prng.pick(merchants)
        stats.scriptsStarted++
        yield* Effect.forkDaemon(Effect.ensuring(paymentScript(merchant, n), Effect.suspend(() => {
          stats.scriptsFinished++
          forgetReplays(n)
          const paymentId = scriptPayments.get(n)
          scriptPayments.delete(n)
          return paymentId === undefined ? Effect.void : hooks.onPaymentFinished(paymentId)
        })))
      }
    })

  return { stats, expectations, arrivals, rotations, hooks }
}

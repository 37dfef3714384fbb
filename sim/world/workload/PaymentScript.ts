import { Effect } from "effect"
import type { Auditor } from "../../checks/Auditor.ts"
import type { WorkloadMix } from "../../engine/Options.ts"
import type { Prng } from "../../engine/Prng.ts"
import { type AmountHistory, type BoundaryPlan, boundaryTargets, planBoundary } from "../Boundary.ts"
import type { SimResponse } from "../Http.ts"
import { type Call, type makeClient, noHeaders, type ReplayOwner } from "./Client.ts"
import type { Known, Reading } from "./Reading.ts"
import type { Expectation, KeyWay, Merchant, Pace, Transaction, WorkloadHooks, WorkloadStats } from "./Types.ts"

/**
 * One payment's script, phase by phase: plan the create, create (sometimes twice at once with the
 * same idempotency key, sometimes re-using the key with another body) and wait for the flow,
 * review a held payment, capture or void a manual one (sometimes both at once), meet a dispute
 * while the script runs, refund partially, fully or above the remainder (sometimes two refunds at
 * once). Every choice is drawn from the workload's one stream in this order: the simulator's
 * trace depends on it.
 */

/** What the scripts share: the workload's stream, figures, client, and what they leave for the final audit. */
export interface ScriptWorld {
  readonly mix: WorkloadMix
  readonly prng: Prng
  readonly stats: WorkloadStats
  readonly auditor: Auditor
  readonly think: Pace["think"]
  /** No wait of a script goes past it. */
  readonly horizonEndMs: number
  readonly hooks: WorkloadHooks
  readonly send: ReturnType<typeof makeClient<unknown, unknown>>["send"]
  readonly sendBoth: ReturnType<typeof makeClient<unknown, unknown>>["sendBoth"]
  readonly reading: Reading
  readonly expectations: Array<Expectation>
  /** The payment each script created, by script number, while the script runs. */
  readonly scriptPayments: Map<number, string>
  /**
   * The keyed creates as the client knows them: by script number (its `order-n` metadata), how
   * it sent its key (`keyWayCodes`). The one-payment-per-key law reads this, not the key the
   * payment row records (`Workload.auditCreateKeys`).
   */
  readonly keyWays: Map<number, number>
  /** The merchants' last payments by currency, as the client knows them (boundary-directed amounts). */
  readonly amountsOf: Map<number, Map<string, Array<number>>>
}

/** One script's payment once created: what it knows of it and what it was told of its money. */
interface Story {
  readonly merchant: Merchant
  readonly n: number
  readonly id: string
  /** This script's idempotency keys and their first answers (`ReplayOwner`). */
  readonly replays: Array<ReplayOwner>
  readonly known: Known
  readonly expectation: Expectation
  /** Captured by the merchant (`capture_method: manual`), not automatically. */
  readonly manual: boolean
  transaction: Transaction
  /** Marks the money uncertain when a request (of two at most: racing requests) got no final answer. */
  readonly unanswered: (response: SimResponse | null, other?: SimResponse | null) => void
}

export const keyWayCodes: Record<KeyWay, number> = { header: 1, body: 2, both: 3, different: 4 }
/** The currencies and the card brands the fraud model tells apart (the rarer brands are pooled as one). */
const distinctCurrencies = ["USD", "EUR", "GBP", "CAD", "AUD", "JPY"]
const distinctBrands = ["visa", "mastercard", "amex", "discover"]
const rotated = <A>(items: ReadonlyArray<A>, first: number) => [...items.slice(first), ...items.slice(0, first)]

const tokens = ["tok_decline_insufficient_funds", "tok_decline_do_not_honor", "tok_decline_expired_card"]
const currencies = ["USD", "USD", "USD", "EUR", "GBP", "CAD", "AUD", "JPY"]
const brands = ["visa", "mastercard", "amex", "discover", "jcb", "diners", "unionpay"]

/** Script number `n` of `merchant`, phase by phase (the payment it created in `scriptPayments` meanwhile). */
export const paymentScript = (ctx: ScriptWorld, merchant: Merchant, n: number) =>
  // The phases are plain generators this one delegates to: a phase costs no Effect of its own.
  Effect.gen(function*() {
    const s = yield* create(ctx, merchant, n)
    if (s === null) return
    yield* reviewHeld(ctx, s)
    yield* captureOrVoid(ctx, s)
    const disputed = yield* disputeDuringScript(ctx, s)
    // A dispute's own refunds take the place of these.
    if (!disputed) yield* refunds(ctx, s)
  })

/** The create's choices: its card token, currency, amount, capture method, idempotency key and how it is sent, and a boundary-directed plan. */
function* planCreate(ctx: ScriptWorld, merchant: Merchant, n: number) {
  const { prng, mix, stats } = ctx
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
  const way = key === undefined ? null : keyWay(ctx)
  // Boundary-directed: a new card, and the amount, currency, brand and countries that put
  // the score on a threshold (sim/world/Boundary.ts).
  let boundary: BoundaryPlan | null = null
  if (prng.chance(mix.boundaryScores ?? 0)) {
    const target = prng.pick(boundaryTargets)
    const first = prng.int(0, distinctCurrencies.length - 1)
    const firstBrand = prng.int(0, distinctBrands.length - 1)
    boundary = planBoundary(
      target,
      rotated(distinctCurrencies, first),
      rotated(distinctBrands, firstBrand),
      (c) => historyOf(ctx, merchant.index, c),
      yield* Effect.clockWith((c) => c.currentTimeMillis)
    )
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
  const plannedBoundary = boundary
  /** The create's body with `amountCents`: a new card's last four digits and brand drawn at each call. */
  const fields = (amountCents: number) => {
    const lastFour = prng.int(1000, 9999)
    const drawn = prng.pick(brands)
    const brand = plannedBoundary?.cardBrand ?? drawn
    return `{"transaction":{"amount_cents":${amountCents},"currency":"${currency}","card_token":"${token}","card_last_four":"${lastFour}","card_brand":"${brand}",${
      manual ? `"capture_method":"manual",` : ""
    }${keyInBody ? `"idempotency_key":"${key}",` : ""}"metadata":{"order":"order-${n}"${
      plannedBoundary?.countryMismatch === true ? `,"ip_country":"US","card_country":"GB"` : ""
    }}}}`
  }
  return { manual, currency, amount, key, way, boundary: plannedBoundary, fields }
}

/**
 * The create, sent as planned (sometimes twice at once with the same key, sometimes first with two
 * different keys), then the payment's story from its answer: sometimes the key re-used with another
 * body, then its automatic flow waited for. Null when no payment came of it.
 */
function* create(ctx: ScriptWorld, merchant: Merchant, n: number) {
  const { prng, mix, stats, auditor, send, sendBoth, keyWays, expectations, scriptPayments } = ctx
  const { parseTransaction, checkedTransaction, errorOf, errorCode, expect } = ctx.reading
  const replays: Array<ReplayOwner> = []
  const { manual, currency, amount, key, way, boundary, fields } = yield* planCreate(ctx, merchant, n)
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
      const refused = yield* send({
        merchant,
        method: "POST",
        path,
        body,
        headers: { "x-idempotency-key": `${key}-header` }
      })
      const error = errorOf(refused) as { code?: string; param?: string } | undefined
      expect(
        refused === null ||
          (refused.status === 422 && error?.code === "validation_failed" &&
            error.param === "transaction.idempotency_key"),
        () => `create with header key ${key}-header and body key ${key}`,
        refused
      )
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
    auditor.check(
      a === null || b === null || a.id === b.id,
      "one-transaction-per-key",
      () => `duplicate creates with key ${key} gave ${a?.id} and ${b?.id}`
    )
  } else {
    response = yield* send(create)
  }
  if (way !== null && sent.count > 1) stats.keyWaysRetried[way]++
  if (response === null) {
    stats.lostCreates++
    return null
  }
  expect(response.status === 201, () => `create ${key ?? "(no key)"}`, response)
  let transaction: Transaction | null = parsed === undefined
    ? parseTransaction(response)
    : parsed === null
    ? null
    : checkedTransaction(parsed)
  if (transaction === null) return null
  remember(ctx, merchant.index, currency, amount)
  const known: Known = { body: response.body, transaction }
  const expectation: Expectation = {
    paymentId: transaction.id,
    capturedCents: null,
    refundedCents: 0,
    uncertain: false
  }
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
  transaction = yield* settleFlow(ctx, merchant, known)
  const id = transaction.id
  if (boundary !== null && transaction.fraud_score === 1 / (1 + Math.exp(-boundary.outputMillionths / 1e6))) {
    const target = String(boundary.outputMillionths / 1e6)
    stats.boundaryExact[target] = (stats.boundaryExact[target] ?? 0) + 1
  }
  const story: Story = { merchant, n, id, replays, known, expectation, manual, transaction, unanswered }
  return story
}

/** Fraud review of a held payment (false positive or confirmed fraud). */
function* reviewHeld(ctx: ScriptWorld, s: Story) {
  const { prng, mix, think, send } = ctx
  const { expect } = ctx.reading
  const { merchant, n, id, replays, known, expectation } = s
  if (s.transaction.status === "authorized" && s.transaction.fraud_case_id !== null && prng.chance(mix.review)) {
    yield* think(prng.exponential(10 * 60_000))
    const decision = prng.chance(0.7) ? "false_positive" : "confirmed_fraud"
    const fraudCaseId = s.transaction.fraud_case_id
    const reviewed = yield* send({
      merchant,
      method: "POST",
      path: `/api/v1/fraud/cases/${fraudCaseId}/review`,
      body: JSON.stringify({ status: decision }),
      key: `review-${n}`,
      replays
    })
    expect(reviewed?.status === 200, () => `review ${fraudCaseId}`, reviewed)
    yield* think(1_000)
    s.transaction = (yield* get(ctx, merchant, id, known)) ?? s.transaction
    if (decision === "confirmed_fraud") {
      expect(s.transaction.status === "blocked", () => `confirmed fraud on ${id}`, null)
    }
  }
  if (s.transaction.status === "captured") expectation.capturedCents = s.transaction.amount_cents
}

/** A manual payment captured (fully or in part) or voided, sometimes both at once. */
function* captureOrVoid(ctx: ScriptWorld, s: Story) {
  const { prng, mix, think, send, sendBoth } = ctx
  const { parseKnown, expect } = ctx.reading
  const { merchant, n, id, replays, known, expectation, manual, unanswered } = s
  if (s.transaction.status === "authorized" && manual) {
    yield* think(prng.exponential(30 * 60_000))
    if (prng.chance(mix.racingOperations)) {
      const [captured, voided] = yield* sendBoth(
        {
          merchant,
          method: "POST",
          path: `/api/v1/transactions/${id}/capture`,
          body: "{}",
          key: `capture-${n}`,
          replays
        },
        { merchant, method: "POST", path: `/api/v1/transactions/${id}/void`, body: "{}", key: `void-${n}`, replays }
      )
      unanswered(captured, voided)
      const wins = (captured?.status === 200 ? 1 : 0) + (voided?.status === 200 ? 1 : 0)
      expect(
        wins === 1 || (captured?.status === 409 && voided?.status === 409),
        () => `racing capture and void of ${id} (one wins)`,
        captured
      )
      if (captured?.status === 200) expectation.capturedCents = s.transaction.amount_cents
      if (captured !== null && captured.status === 200) s.transaction = parseKnown(captured, known) ?? s.transaction
    } else {
      const action = prng.weighted({ full: 50, partial: 25, void: 25 })
      if (action === "void") {
        const voided = yield* send({
          merchant,
          method: "POST",
          path: `/api/v1/transactions/${id}/void`,
          body: "{}",
          key: `void-${n}`,
          replays
        })
        unanswered(voided)
        expect(voided?.status === 200 || voided?.status === 409, () => `void ${id}`, voided)
      } else {
        const amountCents = action === "full" ? s.transaction.amount_cents : prng.int(1, s.transaction.amount_cents)
        const captured = yield* send({
          merchant,
          method: "POST",
          path: `/api/v1/transactions/${id}/capture`,
          body: action === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents }),
          key: `capture-${n}`,
          replays
        })
        unanswered(captured)
        expect(captured?.status === 200 || captured?.status === 409, () => `capture ${id}`, captured)
        if (captured?.status === 200) {
          expectation.capturedCents = amountCents
          s.transaction = parseKnown(captured, known) ?? s.transaction
          expect(s.transaction.captured_amount_cents === amountCents, () => `capture ${id} of ${amountCents}`, captured)
        }
      }
    }
  }
}

/**
 * A dispute while the script runs (sometimes after a partial refund): refunds, a capture and a
 * void meet it open; some scripts then wait for its outcome and refund. Whether it was disputed.
 */
function* disputeDuringScript(ctx: ScriptWorld, s: Story) {
  const { prng, mix, stats, think, horizonEndMs, hooks } = ctx
  const { merchant, id, known } = s
  const disputeNow = hooks.disputeNow
  let disputed = false
  if (
    disputeNow !== null && (s.transaction.status === "captured" || s.transaction.status === "settled") &&
    prng.chance(mix.disputeDuringScript ?? 0)
  ) {
    yield* think(
      Math.max(
        0,
        Math.min(prng.exponential(20 * 60_000), horizonEndMs - (yield* Effect.clockWith((c) => c.currentTimeMillis)))
      )
    )
    s.transaction = (yield* get(ctx, merchant, id, known)) ?? s.transaction
    yield* refundBeforeDispute(ctx, s)
    // Some scripts wait for the dispute's outcome and then refund (the network resolves it at
    // once): a refund after a lost dispute may not take the charged-back money.
    const resolveDisputeNow = hooks.resolveDisputeNow
    const resolveInScript = resolveDisputeNow !== null && prng.chance(mix.refundAfterDispute ?? 0)
    if (yield* disputeNow(id, resolveInScript)) {
      stats.disputesInScript++
      disputed = true
      s.transaction = (yield* get(ctx, merchant, id, known)) ?? s.transaction
      const dispute = s.transaction.dispute
      if (dispute !== null && dispute.status === "open") yield* operateWhileDisputed(ctx, s, dispute)
      if (resolveInScript && resolveDisputeNow !== null) {
        const outcome = yield* resolveDisputeNow(id)
        if (outcome !== null) s.transaction = yield* refundAfterDispute(ctx, s, outcome)
      }
    }
  }
  return disputed
}

/** Sometimes a partial refund before the dispute opens. */
function* refundBeforeDispute(ctx: ScriptWorld, s: Story) {
  const { prng, send } = ctx
  const { parseKnown, expect } = ctx.reading
  const { merchant, n, id, replays, known, expectation, unanswered } = s
  const before: number = s.transaction.captured_amount_cents - s.transaction.refunded_amount_cents
  if (prng.chance(0.5) && before > 1 && (s.transaction.status === "captured" || s.transaction.status === "settled")) {
    const amountCents = prng.int(1, before - 1)
    const refunded: SimResponse | null = yield* send({
      merchant,
      method: "POST",
      path: `/api/v1/transactions/${id}/refund`,
      key: `refund-${n}-before-dispute`,
      replays,
      body: JSON.stringify({ amount_cents: amountCents })
    })
    unanswered(refunded)
    expect(refunded?.status === 200, () => `refund ${amountCents} of ${before} on ${id}`, refunded)
    if (refunded?.status === 200) {
      expectation.refundedCents += amountCents
      s.transaction = parseKnown(refunded, known) ?? s.transaction
    }
  }
}

/**
 * While the dispute is open: a capture and a void are refused as for any captured payment, a
 * refund takes at most what the dispute leaves.
 */
function* operateWhileDisputed(
  ctx: ScriptWorld,
  s: Story,
  dispute: { readonly status: string; readonly amount_cents: number }
) {
  const { prng, stats, send } = ctx
  const { parseKnown, expect, errorCode } = ctx.reading
  const { merchant, n, id, replays, known, expectation, unanswered } = s
  stats.operationsWhileDisputed += 3
  // A captured payment cannot be captured or voided, disputed or not.
  for (const operation of ["capture", "void"] as const) {
    const answer: SimResponse | null = yield* send({
      merchant,
      method: "POST",
      path: `/api/v1/transactions/${id}/${operation}`,
      body: "{}",
      key: `${operation}-${n}-disputed`,
      replays
    })
    unanswered(answer)
    expect(
      answer === null || (answer.status === 409 && errorCode(answer) === "invalid_state"),
      () => `${operation} of ${id} while disputed`,
      answer
    )
  }
  // A refund takes at most what the dispute leaves; above that it is refused while the
  // dispute is open (409), and judged by its outcome once it was resolved meanwhile.
  const rest: number = s.transaction.captured_amount_cents - s.transaction.refunded_amount_cents
  const free = rest - dispute.amount_cents
  const within = free > 0 && prng.chance(0.5)
  const amountCents = within ? prng.int(1, free) : prng.int(Math.max(1, free + 1), rest)
  const refund: SimResponse | null = yield* send({
    merchant,
    method: "POST",
    path: `/api/v1/transactions/${id}/refund`,
    key: `refund-${n}-disputed`,
    replays,
    body: JSON.stringify({ amount_cents: amountCents })
  })
  unanswered(refund)
  if (refund?.status === 200) {
    expectation.refundedCents += amountCents
    s.transaction = parseKnown(refund, known) ?? s.transaction
  }
  if (within) {
    expect(
      refund === null || refund.status === 200,
      () => `refund ${amountCents} of ${id}, ${free} not disputed`,
      refund
    )
  } else if (refund !== null && refund.status !== 409) {
    const now = (yield* get(ctx, merchant, id, known)) ?? s.transaction
    const outcome = now.dispute?.status
    expect(
      outcome === "won" ? refund.status === 200 : outcome === "lost" && refund.status === 422,
      () => `refund ${amountCents} of ${id} with ${dispute.amount_cents} of ${rest} disputed (dispute now ${outcome})`,
      refund
    )
  }
}

/** Refunds: partial, full, above the remainder, racing. */
function* refunds(ctx: ScriptWorld, s: Story) {
  const { prng, mix, auditor, think, send, sendBoth, horizonEndMs } = ctx
  const { parseKnown, expect } = ctx.reading
  const { merchant, n, id, replays, known, expectation, unanswered } = s
  if ((s.transaction.status === "captured" || s.transaction.status === "settled") && prng.chance(mix.refund)) {
    const delayMs = prng.chance(0.7) ? prng.exponential(20 * 60_000) : prng.int(3_600_000, 30 * 3_600_000)
    yield* think(Math.max(0, Math.min(delayMs, horizonEndMs - (yield* Effect.clockWith((c) => c.currentTimeMillis)))))
    s.transaction = (yield* get(ctx, merchant, id, known)) ?? s.transaction
    const refunds = prng.int(1, 3)
    for (let r = 0; r < refunds; r++) {
      const remainder: number = s.transaction.captured_amount_cents - s.transaction.refunded_amount_cents
      if (remainder <= 0 || (s.transaction.status !== "captured" && s.transaction.status !== "settled")) break
      const path = `/api/v1/transactions/${id}/refund`
      const kind = prng.chance(mix.overRefund)
        ? "over"
        : prng.chance(mix.racingOperations)
        ? "race"
        : prng.weighted({ partial: 60, full: 40 })
      if (kind === "over") {
        const over: number = remainder + prng.int(1, 5_000)
        const refused: SimResponse | null = yield* send({
          merchant,
          method: "POST",
          path,
          body: JSON.stringify({ amount_cents: over }),
          key: `refund-${n}-${r}`,
          replays
        })
        unanswered(refused)
        auditor.check(
          refused?.status === 422,
          "refund-above-remainder-refused",
          () =>
            `refund of ${over} on ${id} with ${remainder} left answered ${refused?.status} ${
              refused?.body.slice(0, 300)
            }`
        )
        if (refused?.status === 200) {
          expectation.refundedCents += over
          s.transaction = parseKnown(refused, known) ?? s.transaction
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
        auditor.check(
          accepted * each <= remainder,
          "refunds-within-capture",
          () => `racing refunds on ${id}: ${accepted} × ${each} accepted with ${remainder} left`
        )
        expectation.refundedCents += accepted * each
        s.transaction = (yield* get(ctx, merchant, id, known)) ?? s.transaction
      } else {
        const amountCents: number = kind === "full" || remainder === 1 ? remainder : prng.int(1, remainder - 1)
        const refunded: SimResponse | null = yield* send({
          merchant,
          method: "POST",
          path,
          key: `refund-${n}-${r}`,
          replays,
          body: kind === "full" ? "{}" : JSON.stringify({ amount_cents: amountCents })
        })
        unanswered(refunded)
        expect(refunded?.status === 200, () => `refund ${amountCents} of ${remainder} on ${id}`, refunded)
        if (refunded?.status === 200) {
          expectation.refundedCents += amountCents
          s.transaction = parseKnown(refunded, known) ?? s.transaction
        }
      }
    }
  }
}

/**
 * A refund once the payment's dispute was resolved (docs/api.md, Disputes): after a lost one the
 * charged-back amount is no longer refundable (above what is left: 422), after a won one it is
 * again (the whole remainder: 200). The transaction as it is afterwards.
 */
const refundAfterDispute = (ctx: ScriptWorld, s: Story, outcome: "won" | "lost") =>
  Effect.gen(function*() {
    const { prng, stats, send } = ctx
    const { parseKnown, expect } = ctx.reading
    const { merchant, n, id, replays, known, expectation } = s
    let transaction: Transaction = (yield* get(ctx, merchant, id, known)) ?? known.transaction
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
      merchant,
      method: "POST",
      path: `/api/v1/transactions/${id}/refund`,
      key: `refund-${n}-after-dispute`,
      replays,
      body: whole ? "{}" : JSON.stringify({ amount_cents: amountCents })
    })
    if (refund === null) expectation.uncertain = true
    if (refund?.status === 200) {
      expectation.refundedCents += amountCents
      transaction = parseKnown(refund, known) ?? transaction
    }
    expect(
      refund === null || refund.status === (above ? 422 : 200),
      () =>
        `refund ${amountCents} of ${id} after a ${outcome} dispute (${unrefunded} not refunded, ${chargedBack} charged back)`,
      refund
    )
    return transaction
  })

const get = (ctx: ScriptWorld, merchant: Merchant, id: string, known: Known) =>
  ctx.send(
    { merchant, method: "GET", path: `/api/v1/transactions/${id}`, body: null },
    (r) => (r === null ? null : ctx.reading.parseKnown(r, known))
  )

/** Polls until the automatic flow has done what it can (no longer pending or mid-flow). */
const settleFlow = (ctx: ScriptWorld, merchant: Merchant, known: Known) =>
  Effect.gen(function*() {
    let current = known.transaction
    for (let polls = 0; polls < 60 && current.status === "pending"; polls++) {
      yield* ctx.think(ctx.prng.exponential(3_000))
      current = (yield* get(ctx, merchant, current.id, known)) ?? current
    }
    return current
  })

/** How the next keyed create sends its key (the mix's shares; the rest: the header). */
const keyWay = ({ prng, mix }: ScriptWorld): KeyWay => {
  const roll = prng.float()
  let edge = mix.bodyKey ?? 0
  if (roll < edge) return "body"
  if (roll < (edge += mix.bothKeys ?? 0)) return "both"
  if (roll < edge + (mix.differentKeys ?? 0)) return "different"
  return "header"
}

/** The merchant's last payments by currency as the client knows them (the fraud model's usual amount: at most 50). */
const remember = ({ amountsOf }: ScriptWorld, merchantIndex: number, currency: string, amountCents: number) => {
  let byCurrency = amountsOf.get(merchantIndex)
  if (byCurrency === undefined) amountsOf.set(merchantIndex, byCurrency = new Map())
  let amounts = byCurrency.get(currency)
  if (amounts === undefined) byCurrency.set(currency, amounts = [])
  amounts.push(amountCents)
  if (amounts.length > 50) amounts.shift()
}
const historyOf = ({ amountsOf }: ScriptWorld, merchantIndex: number, currency: string): AmountHistory => {
  const amounts = amountsOf.get(merchantIndex)?.get(currency) ?? []
  let sumCents = 0
  for (const a of amounts) sumCents += a
  return { count: amounts.length, sumCents }
}

import type { Effect } from "effect"
import type { HttpMethod } from "effect/http"
import type { SimResponse } from "../Http.ts"

/**
 * The shapes the simulated merchants share between their parts (sim/world/Workload.ts and the
 * modules beside this one): the merchant as its client knows it, what it reads of a transaction
 * and was told of its money, the workload's figures, and the two ports it runs on (the service,
 * the pace of its waits).
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
export interface Transaction {
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
  request(
    method: HttpMethod.HttpMethod,
    path: string,
    apiKey: string | null,
    body: string | null,
    headers: Readonly<Record<string, string>>
  ): R
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

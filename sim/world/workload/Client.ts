import { Effect } from "effect"
import type { HttpMethod } from "effect/http"
import { hash as oneShotHash } from "node:crypto"
import { type Auditor, passed } from "../../checks/Auditor.ts"
import type { Prng } from "../../engine/Prng.ts"
import type { SimResponse } from "../Http.ts"
import type { Reading } from "./Reading.ts"
import type { ClientPort, Merchant, WorkloadStats } from "./Types.ts"

/**
 * The merchants' HTTP client: one logical request with the retries a real client makes (after a
 * dropped connection, a 401 on a key just rotated, a 409 `idempotency_in_progress`, a 429 or a
 * 503), or two at once (racing). Every answer is counted, traced and checked as it comes: no 500,
 * a well-formed 503, a valid key accepted, and an idempotency key's replay answering its first answer.
 */

const maximumAttempts = 400

const digest = (text: string) => oneShotHash("sha1", text, "base64")

/** The extra headers of a request without an idempotency key: one shared empty record (only read). */
export const noHeaders: Readonly<Record<string, string>> = {}

/** A request's final answer as it is (`send` without a `finish`). */
const final = (response: SimResponse | null) => response

/**
 * Idempotency: per key, the request that owns it and the answer it got. A script's keys
 * (`create-n`, `capture-n`, `refund-n-r`...: its number n) are sent by no other script and never
 * after it ends, so each script keeps its own few owners in a list (`Keyed.replays`), searched by
 * key: the same owners a table per merchant and key would find, without a look-up in a table
 * of every running script's keys, and they go with the script (no forgetting step).
 */
// The first answer's body itself, compared exactly (no hash per keyed answer), and the request
// as its own fields (method, path, body), compared exactly.
export interface ReplayOwner {
  readonly key: string
  readonly method: string
  readonly path: string
  readonly body: string
  readonly status: number
  readonly answer: string
}

export interface Unkeyed {
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
export interface Keyed extends Omit<Unkeyed, "key"> {
  readonly key: string
  /** The replay owners of the script that sends it (see `ReplayOwner`). */
  readonly replays: Array<ReplayOwner>
  /** Counts the attempts sent (a create's retries, for the statistics). */
  readonly sent?: { count: number }
}
export type Call = Unkeyed | Keyed

export interface ClientOptions<R, P> {
  readonly service: ClientPort<R, P>
  readonly auditor: Auditor
  readonly trace: { record(line: string): void }
  readonly stats: WorkloadStats
  /** The retries' jitter. */
  readonly prng: Prng
  readonly backoff: (ms: number) => Effect.Effect<void>
  readonly errorOf: Reading["errorOf"]
}

export const makeClient = <R, P>({ service, auditor, trace, stats, prng, backoff, errorOf }: ClientOptions<R, P>) => {
  const byStatus = stats.byStatus
  const record = (call: Call, generation: number, response: SimResponse | null) => {
    stats.requests++
    // The status as a number is the same key as its text (`byStatus[201]` is `byStatus["201"]`),
    // without a string made for it; the trace line writes it out as the same digits.
    const status = response === null ? "dropped" : response.status
    byStatus[status] = (byStatus[status] ?? 0) + 1
    trace.record(
      `m${call.merchant.index} k${generation} ${call.method} ${call.path}${
        call.key === undefined ? "" : ` key=${call.key}`
      } ${call.body ?? ""} -> ${status} ${response?.body ?? ""}`
    )
  }

  const checkReplay = (call: Call, response: SimResponse) => {
    if (call.key === undefined) return
    const status = response.status
    if (status === 401 || status === 429 || status >= 500) return
    const code = status === 409 || status === 422
      ? (JSON.parse(response.body) as { error?: { code?: string } }).error?.code
      : undefined
    if (code === "idempotency_in_progress") return
    const key = call.key
    // The request itself, not a digest of it: method, path and body (a null body as ""), compared
    // exactly, without a hash per keyed answer.
    const body = call.body ?? ""
    const replays = call.replays
    let owner: ReplayOwner | undefined
    for (let i = 0; owner === undefined && i < replays.length; i++) if (replays[i]!.key === key) owner = replays[i]
    if (owner === undefined) {
      if (code !== "idempotency_key_reused") {
        replays.push({ key, method: call.method, path: call.path, body, status, answer: response.body })
      }
      return
    }
    if (owner.method === call.method && owner.path === call.path && owner.body === body) {
      const same = owner.status === status && owner.answer === response.body
      auditor.check(
        same,
        "idempotent-replay",
        same ?
          passed :
          () =>
            `key ${key}: replay answered ${status} ${
              response.body.slice(0, 200)
            } but the first answer was ${owner.status} with another body (sha1 ${digest(owner.answer)})`
      )
    } else {
      auditor.check(
        code === "idempotency_key_reused",
        "idempotency-key-reused",
        () => `key ${key} re-used with another request answered ${status}`
      )
    }
  }

  /**
   * One logical request with client retries; `finish` of its final answer (null when it never got
   * one). Plain steps rather than a generator (every request of the run goes through here), one
   * attempt per call, the final answer handed to `finish` in the step that reads it (no
   * `Effect.map` of two steps after it). The first attempt is sent when this is called: call it
   * as the request is sent, from the running client (`yield* send(...)`, or inside a suspend).
   */
  const commandPath = /\/transactions\/[^/]+\/(capture|refund|void)$/
  /** A capture or refund not yet in the books (a cancel the service owes is its own business: the void is booked). */
  const awaitedMoney = /"processor_pending":\{"operation":"(capture|refund)"/
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
    service.request(
      call.method,
      call.path,
      call.merchant.apiKey,
      call.body,
      call.headers ?? (call.key === undefined ? noHeaders : { "x-idempotency-key": call.key })
    )

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
      return Effect.andThen(
        backoff(Math.min(30_000, 500 * 2 ** Math.min(attempt, 6)) + prng.int(0, 500)),
        again(call, attempt, finish)
      )
    }
    const status = response.status
    // The checks of every answer build their message only on a failure (`passed` otherwise).
    auditor.check(
      status !== 500,
      "no-internal-errors",
      status !== 500 ? passed : () => `${call.method} ${call.path} answered 500: ${response.body}`
    )
    if (status > 500) {
      // CONTRACT section 3: the only other 5xx is 503 service_unavailable, with Retry-After.
      const error = errorOf(response)
      auditor.check(
        status === 503 && error?.code === "service_unavailable" && error.type === "api_error" &&
          response.headers["retry-after"] !== undefined,
        "service-unavailable-answer",
        () =>
          `${call.method} ${call.path} answered ${status} ${response.body.slice(0, 200)} (retry-after ${
            response.headers["retry-after"]
          })`
      )
    }
    checkReplay(call, response)
    if (status === 401) {
      if (call.allow401 === true) return response
      const expected = call.merchant.keyGeneration !== generation || call.merchant.keyUncertain === true
      auditor.check(
        expected,
        "valid-key-accepted",
        expected ? passed : () => `${call.method} ${call.path}: the current API key was refused`
      )
      // Try again with the key the merchant holds by then (after a rotation or its recovery).
      if (call.merchant.keyGeneration === generation) {
        return Effect.andThen(backoff(5_000 + prng.int(0, 1_000)), again(call, attempt, finish))
      }
      return again(call, attempt, finish)
    }
    if (status === 429 || status === 503 || (status === 409 && response.body.includes("idempotency_in_progress"))) {
      const retryAfterSeconds = Number(response.headers["retry-after"] ?? "1")
      return Effect.andThen(
        backoff(Math.max(1, retryAfterSeconds) * 1_000 + prng.int(0, 1_000)),
        again(call, attempt, finish)
      )
    }
    if (status === 200 && awaitsProcessor(call, response)) return untilProcessorAnswered(call, 0, finish)
    return response
  }

  /**
   * A capture or refund whose outcome at a remote processor is not known yet (docs/api.md,
   * "Unknown outcomes at the processor"): accepted, and answered with the transaction still
   * showing it in `processor_pending`. That answer is stored under the request's key (a retry
   * replays it), so the merchant reads the transaction now and then until the processor has
   * answered, and takes that record as the command's answer.
   */
  const awaitsProcessor = (call: Call, response: SimResponse): boolean =>
    call.method === "POST" && commandPath.test(call.path) && awaitedMoney.test(response.body)

  const untilProcessorAnswered = <A>(
    call: Call,
    polls: number,
    finish: (response: SimResponse | null) => A
  ): Effect.Effect<A> =>
    polls >= maximumAttempts
      ? Effect.succeed(finish(null))
      : Effect.andThen(
        backoff(5_000 + prng.int(0, 1_000)),
        // Sent when it runs, after the wait (`send` is eager: built now, it would go to the instance running now).
        Effect.suspend(() =>
          Effect.flatMap(
            send({
              merchant: call.merchant,
              method: "GET",
              path: call.path.slice(0, call.path.lastIndexOf("/")),
              body: null
            }),
            (read) =>
              read !== null && read.status === 200 && !awaitedMoney.test(read.body)
                ? Effect.succeed(finish(read))
                : untilProcessorAnswered(call, polls + 1, finish)
          )
        )
      )

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
              const last = firstIsA
                ? answered(b, 0, generationB, answer, final)
                : answered(a, 0, generationA, answer, final)
              return last === answer ? Effect.succeed(answer) : last as Effect.Effect<SimResponse | null>
            })
            // The first answer final (the common case): the pair in request order in one step.
            if (next === answerOfFirst) {
              return Effect.map(
                rest,
                (last): [SimResponse | null, SimResponse | null] => (firstIsA ? [next, last] : [last, next])
              )
            }
            const both = Effect.all([next as Effect.Effect<SimResponse | null>, rest], { concurrency: 2 })
            return Effect.map(both, ([x, y]): [SimResponse | null, SimResponse | null] => (firstIsA ? [x, y] : [y, x]))
          }))
      })
    })

  return { send, sendBoth }
}

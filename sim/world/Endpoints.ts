import { Effect } from "effect"
import { createHmac, createSecretKey, hash } from "node:crypto"
import { type CallbackTimer, callbackTimerOf } from "../../src/platform/Timers.ts"
import {
  timedOut,
  type TransportResult,
  type WebhookRequest,
  type WebhookTransportShape
} from "../../src/platform/WebhookTransport.ts"
import type { AttemptAudit, DeliveryAudit } from "../../src/store/MemoryWebhookStore.ts"
import { type Auditor, passed } from "../checks/Auditor.ts"
import { grownTo } from "../engine/Columns.ts"
import { type Fence, heldBy } from "../engine/Fence.ts"
import type { FaultRates } from "../engine/Options.ts"
import type { Prng } from "../engine/Prng.ts"

export interface EndpointStats {
  posts: number
  answered2xx: number
  answered4xx: number
  answered5xx: number
  slow: number
  lagging: number
  noAnswer: number
  outageRefusals: number
}

/**
 * What the endpoints remember of each delivery, one slot a delivery (slots numbered in the order
 * of first POSTs), column by column: the delivery id, its latest POST (attempt and when), when
 * it acknowledged one with a 2xx, and which attempt numbers reached it (bits 0-30 of `mask`; any
 * other number in `others`). Numbers in typed arrays rather than an object a delivery: 100,000
 * payments make half a million deliveries, and every long-lived object is copied by the
 * collector as it ages (a typed array's numbers are never scanned). Times are ms since the run's
 * window opened. The end-of-run audit (`auditDeliveries`) reads the same slots.
 */
/** Attempts whose arrival times the endpoints keep per delivery (the default schedule makes 6). */
export const timedAttempts = 8

export class Receipts {
  /** @param baseMs epoch ms of the window start, from which the receipts count time. */
  constructor(readonly baseMs = 0) {}

  /** The delivery id of each slot (its length: the slots in use; `byDelivery` maps it back). */
  readonly deliveryIds: Array<string> = []
  /** When a 2xx acknowledged the delivery (NaN: none has yet). */
  ackedAtMs = new Float64Array(0)
  /**
   * 1 when that 2xx answered an attempt a paused instance had sent before its pause, read when it
   * resumed: by then its lease may have passed to its replacement, which makes the attempt again
   * and does not learn of the 2xx (the store refuses the stale holder's record), as when the
   * instance had died. docs/webhooks.md promises nothing after a 2xx was recorded, and says a
   * process stalled past its lease may have the attempt made again: so this 2xx forbids nothing.
   */
  ackReadAfterPause = new Uint8Array(0)
  mask = new Int32Array(0)
  /** Attempt numbers as the header gave them (any number, even NaN: compared as received). */
  lastAttempt = new Float64Array(0)
  lastAtMs = new Float64Array(0)
  /** Set by the end-of-run audit: a stored delivery of the event whose first POST made this slot was seen. */
  stored = new Uint8Array(0)
  /**
   * The body of an earlier POST found to name `checkedEventIds[slot]` (until a 2xx acknowledges
   * the delivery): a later attempt sending the very same text names the same event, with no second parse.
   */
  readonly checkedBodies: Array<string | null> = []
  readonly checkedEventIds: Array<string> = []
  /**
   * Over a real network: attempts that arrived after the endpoint wrote a 2xx to `attempt` of
   * the delivery (see `makeSimulatedEndpoints`'s `overNetwork`).
   */
  readonly retriedAfterAck: Array<{ readonly deliveryId: string; readonly attempt: number; readonly next: number }> = []
  /**
   * When each of the first `timedAttempts` attempt numbers of a slot's delivery reached the
   * endpoint, in ms from the window start (-1: not yet): a retry's first arrival, the first
   * attempt's last. The witness of the retry schedule, read at the end instead of the times the
   * service recorded. `timedAttempts` numbers a slot, from `slot * timedAttempts` (attempt 1 first).
   */
  attemptAtMs = new Int32Array(0)
  /** Attempt numbers outside 0-30 by slot (only a bug sends one). */
  private readonly others = new Map<number, Set<number>>()
  /** Delivery id → its slot. */
  private readonly byDelivery = new Map<string, number>()
  /**
   * Event id → the slot of the delivery its first POST carried (one delivery per event, the same
   * id on every attempt): a later attempt of that delivery finds its slot here, with no second
   * look-up by delivery id.
   */
  private readonly byEvent = new Map<string, number>()

  /** The slot the event's first POST made (-1: no POST of it reached an endpoint). */
  ofEvent(eventId: string) {
    return this.byEvent.get(eventId) ?? -1
  }

  /** The slot of a delivery (-1: no POST of it reached an endpoint). */
  ofDelivery(deliveryId: string) {
    return this.byDelivery.get(deliveryId) ?? -1
  }

  /**
   * The slot of `deliveryId` when its event's first POST made slot `first` (-1: none): that one
   * when it is this delivery's, with no look-up by delivery id; else `ofDelivery`.
   */
  ofDeliveryAfter(first: number, deliveryId: string) {
    return first >= 0 && this.deliveryIds[first] === deliveryId ? first : this.ofDelivery(deliveryId)
  }

  /** A new slot for the delivery, nothing received yet. */
  add(deliveryId: string) {
    const slot = this.deliveryIds.length
    if (slot === this.mask.length) this.grow()
    this.deliveryIds.push(deliveryId)
    this.checkedBodies.push(null)
    this.checkedEventIds.push("")
    this.byDelivery.set(deliveryId, slot)
    return slot
  }

  /** Makes `slot` the receipts of the event's first POST. */
  firstOfEvent(eventId: string, slot: number) {
    this.byEvent.set(eventId, slot)
  }

  private grow() {
    const size = this.mask.length + 1
    const acked = grownTo(this.ackedAtMs, size, (n) => new Float64Array(n))
    acked.fill(Number.NaN, this.ackedAtMs.length)
    this.ackedAtMs = acked
    this.ackReadAfterPause = grownTo(this.ackReadAfterPause, size, (n) => new Uint8Array(n))
    this.mask = grownTo(this.mask, size, (n) => new Int32Array(n))
    this.lastAttempt = grownTo(this.lastAttempt, size, (n) => new Float64Array(n))
    this.lastAtMs = grownTo(this.lastAtMs, size, (n) => new Float64Array(n))
    this.stored = grownTo(this.stored, size, (n) => new Uint8Array(n))
    const times = grownTo(this.attemptAtMs, this.mask.length * timedAttempts, (n) => new Int32Array(n))
    times.fill(-1, this.attemptAtMs.length)
    this.attemptAtMs = times
  }

  /** When attempt `attempt` of the slot's delivery first reached the endpoint (ms from the window start; -1: it did not, or it is not timed). */
  attemptAt(slot: number, attempt: number) {
    return slot < 0 || !(attempt >= 1 && attempt <= timedAttempts)
      ? -1
      : this.attemptAtMs[slot * timedAttempts + attempt - 1]!
  }

  /** Attempt `attempt` of the slot's delivery reached the endpoint at `atMs`. */
  received(slot: number, attempt: number, atMs: number) {
    this.lastAttempt[slot] = attempt
    this.lastAtMs[slot] = atMs
    // A retry's first arrival; the first attempt's last (sent again only when a crash lost its
    // outcome, and the schedule starts from the one the service recorded).
    if (
      Number.isInteger(attempt) && attempt >= 1 && attempt <= timedAttempts &&
      (attempt === 1 || this.attemptAtMs[slot * timedAttempts + attempt - 1] === -1)
    ) {
      this.attemptAtMs[slot * timedAttempts + attempt - 1] = Math.round(atMs)
    }
    if (Number.isInteger(attempt) && attempt >= 0 && attempt <= 30) this.mask[slot] = this.mask[slot]! | (1 << attempt)
    else {
      let others = this.others.get(slot)
      if (others === undefined) this.others.set(slot, others = new Set())
      others.add(attempt)
    }
  }

  /** Did attempt `attempt` of the slot's delivery reach the endpoint? (Slot -1: nothing did.) */
  has(slot: number, attempt: number) {
    if (slot < 0) return false
    return Number.isInteger(attempt) && attempt >= 0 && attempt <= 30
      ? (this.mask[slot]! & (1 << attempt)) !== 0
      : this.others.get(slot)?.has(attempt) === true
  }
}

/**
 * When each POST held one of its dispatcher's slots for its endpoint, as the endpoint saw it: from
 * its arrival until its answer, or the dispatcher's timeout when the answer comes later or never
 * (a refused connection holds none). The witness of a backlog: a dispatcher works at most its
 * endpoint concurrency of attempts at once, so a retry may start late only while that many are
 * held (`saturated`). Times in ms since the window opened; per URL in arrival order.
 */
export class HeldSlots {
  private readonly byUrl = new Map<string, Array<number>>()
  /** The longest hold recorded (a hold's end is at most this after its start). */
  private longestMs = 0

  /** A POST to `url` held a slot over [fromMs, toMs). */
  hold(url: string, fromMs: number, toMs: number) {
    if (!(toMs > fromMs)) return
    let spans = this.byUrl.get(url)
    if (spans === undefined) this.byUrl.set(url, spans = [])
    spans.push(fromMs, toMs)
    if (toMs - fromMs > this.longestMs) this.longestMs = toMs - fromMs
  }

  /** How many POSTs to `url` held a slot at every moment of [fromMs, toMs): the least count over the span. */
  leastHeld(url: string, fromMs: number, toMs: number): number {
    const spans = this.byUrl.get(url)
    if (spans === undefined || !(toMs > fromMs)) return 0
    // The spans that overlap: those that start before `toMs` and end after `fromMs` (starts only
    // grow, and a span lasts at most `longestMs`).
    let count = 0
    const changes: Array<number> = []
    for (let i = spans.length - 2; i >= 0; i -= 2) {
      const start = spans[i]!
      const end = spans[i + 1]!
      if (start < fromMs - this.longestMs) break
      if (start >= toMs || end <= fromMs) continue
      if (start <= fromMs) count++
      else changes.push(start, 1)
      if (end < toMs) changes.push(end, -1)
    }
    // In time order; at one instant a span ending and another starting leave the count as it was.
    const order = Array.from({ length: changes.length / 2 }, (_, k) => k).sort((a, b) =>
      changes[2 * a]! - changes[2 * b]! || changes[2 * b + 1]! - changes[2 * a + 1]!
    )
    let least = count
    for (let k = 0; k < order.length; k++) {
      const at = changes[2 * order[k]!]!
      count += changes[2 * order[k]! + 1]!
      const next = k + 1 < order.length ? changes[2 * order[k + 1]!]! : Number.POSITIVE_INFINITY
      if (next !== at && count < least) least = count
    }
    return least
  }
}

/**
 * Simulated merchant webhook endpoints. Each POST draws its fate from the seed: 2xx, 4xx, 5xx,
 * an answer after 30 s (past the dispatcher's timeout), no answer at all, or a refused
 * connection inside one of the endpoint's outage windows. The endpoints also check what they
 * receive: nothing for an event after it was acknowledged with a 2xx (unless the service
 * crashed before it could record that answer, or the answer reached an instance that a pause
 * held past its lease), attempt numbers that never go backwards.
 */
/** What `makeSimulatedEndpoints` draws from, checks with, and reads of the run. */
export interface SimulatedEndpointsOptions {
  readonly prng: Prng
  readonly faults: FaultRates
  readonly auditor: Auditor
  readonly window: { readonly startMs: number; readonly endMs: number }
  readonly nowMs: () => number
  readonly lastCrashMs: () => number
  /** The signing secrets the merchant behind this URL accepts now (current, and a rotated one in its overlap). */
  readonly secretsOf: (url: string) => ReadonlyArray<string>
  /**
   * Over a real network (the harness): a 2xx the endpoint wrote may reach the service after its
   * timeout fired (a stalled process). An attempt after it is then only noted
   * (`Receipts.retriedAfterAck`), for the final audit to check that the service recorded the
   * acknowledged attempt as unanswered; in-process the answer is read when it is given. Default false.
   */
  readonly overNetwork?: boolean
}

export const makeSimulatedEndpoints = (
  { prng, faults, auditor, window, nowMs, lastCrashMs, secretsOf, overNetwork = false }: SimulatedEndpointsOptions
) => {
  const stats: EndpointStats = {
    posts: 0,
    answered2xx: 0,
    answered4xx: 0,
    answered5xx: 0,
    slow: 0,
    lagging: 0,
    noAnswer: 0,
    outageRefusals: 0
  }
  const outages = new Map<string, ReadonlyArray<readonly [number, number]>>()
  /** By delivery: the attempts received, and when one was acknowledged with a 2xx. */
  const receipts = new Receipts(window.startMs)
  /** By endpoint: when each POST held a dispatcher's slot (the witness of a backlog). */
  const held = new HeldSlots()
  /** Epoch ms of the run's window: the receipts' times are counted from it. */
  const baseMs = window.startMs

  const outagesOf = (url: string) => {
    let windows = outages.get(url)
    if (windows === undefined) {
      const list: Array<readonly [number, number]> = []
      const days = (window.endMs - window.startMs) / 86_400_000
      const count = Math.floor(faults.webhookOutagesPerDay * days + prng.float())
      for (let i = 0; i < count; i++) {
        const start = window.startMs + Math.floor(prng.float() * (window.endMs - window.startMs))
        list.push([start, start + prng.int(5 * 60_000, 3 * 3_600_000)])
      }
      outages.set(url, windows = list)
    }
    return windows
  }

  /** What the endpoint does with a POST: refuse the connection, never answer, or answer after a latency. */
  type Fate =
    | { readonly _tag: "Refused" }
    | { readonly _tag: "NoAnswer" }
    | { readonly _tag: "Answer"; readonly status: number; readonly latencyMs: number; readonly slot: number }
  const refused: Fate = { _tag: "Refused" }
  const noAnswer: Fate = { _tag: "NoAnswer" }
  const refusedResult: TransportResult = { _tag: "Failed", error: "connection error: ECONNREFUSED" }
  /** `slot`: the receipts of the delivery answered. */
  const answerOf = (status: number, latencyMs: number, slot: number): Fate => ({
    _tag: "Answer",
    status,
    latencyMs,
    slot
  })

  /**
   * The clock's callback timer (null: none, as with `TestClock`; undefined until the first POST
   * asks): waiting on it is one `Effect.callback`, where `Effect.sleep` then a map take three more steps.
   */
  let timer: CallbackTimer | null | undefined
  /** `Effect.map(Effect.sleep(ms), f)`: `f` runs when the fiber resumes after `ms`, as it would after the sleep. */
  const after = <A>(ms: number, f: () => A): Effect.Effect<A> => {
    const t = timer
    if (t === undefined) {
      return Effect.flatMap(Effect.clockWith(callbackTimerOf), (found) => {
        timer = found
        return after(ms, f)
      })
    }
    if (t === null) return Effect.map(Effect.sleep(ms), f)
    return Effect.callback<A>((resume) => {
      t(ms, () => resume(Effect.sync(f)))
    })
  }

  /**
   * The answer as the dispatcher reads it, once `latencyMs` passed (a 2xx acknowledges the
   * delivery then), or when the paused instance it reached resumes (`afterPause`).
   */
  const settle = (
    { slot, status }: { readonly status: number; readonly slot: number },
    afterPause = false
  ): TransportResult => {
    if (status >= 200 && status < 300) {
      stats.answered2xx++
      receipts.ackedAtMs[slot] = nowMs() - baseMs
      receipts.ackReadAfterPause[slot] = afterPause ? 1 : 0
      receipts.checkedBodies[slot] = null
    } else if (status < 500) stats.answered4xx++
    else stats.answered5xx++
    return { _tag: "Answered", status, snippet: status < 300 ? "ok" : "simulated failure" }
  }
  const answer = (fate: { readonly status: number; readonly latencyMs: number; readonly slot: number }) =>
    after(fate.latencyMs, () => settle(fate))

  /**
   * Windows in which an endpoint answers slowly (`lagging`): each answer it gives then comes after
   * a latency its window draws (from the caller's stream, so the fates stay as drawn), whatever
   * the answer; refusals and silences stay as they are. By URL.
   */
  const lagWindows = new Map<
    string,
    Array<{ readonly fromMs: number; readonly toMs: number; readonly latencyMs: () => number }>
  >()
  /** The endpoint at `url` answers after `latencyMs()` from `fromMs` until `toMs` (epoch ms). */
  const lagging = (url: string, fromMs: number, toMs: number, latencyMs: () => number) => {
    let windows = lagWindows.get(url)
    if (windows === undefined) lagWindows.set(url, windows = [])
    windows.push({ fromMs, toMs, latencyMs })
  }
  /** The fate as drawn, its latency replaced inside a lag window. */
  const lagged = (url: string, fate: Fate): Fate => {
    if (fate._tag !== "Answer" || lagWindows.size === 0) return fate
    const windows = lagWindows.get(url)
    if (windows === undefined) return fate
    const now = nowMs()
    for (const w of windows) {
      if (now >= w.fromMs && now < w.toMs) {
        stats.lagging++
        return answerOf(fate.status, w.latencyMs(), fate.slot)
      }
    }
    return fate
  }

  /** Checks the POST as the merchant would, draws its fate from the seed, and lags it in a lag window. */
  const receive = (request: WebhookRequest): Fate => lagged(request.url, received(request))

  /** Checks the POST as the merchant would, and draws its fate from the seed. */
  const received = (request: WebhookRequest): Fate => {
    stats.posts++
    const eventId = request.headers["x-service-event-id"] ?? "?"
    const deliveryId = request.headers["x-service-delivery-id"] ?? "?"
    const attempt = Number(request.headers["x-service-delivery-attempt"])
    const now = nowMs()
    /** `now` as the receipts count time. */
    const at = now - baseMs
    const first = receipts.ofEvent(eventId)
    const firstDelivery = first < 0 ? undefined : receipts.deliveryIds[first]
    // Each check's message is a closure made only when it fails (`passed` otherwise): five a POST.
    const sameDelivery = deliveryId.startsWith("whd_") && (firstDelivery === undefined || firstDelivery === deliveryId)
    auditor.check(
      sameDelivery,
      "webhook-same-delivery-id",
      sameDelivery ?
        passed :
        () =>
          `event ${eventId}: attempt ${attempt} carries delivery id ${deliveryId}, earlier attempts ${firstDelivery}`
    )
    // The slot of `deliveryId`: the one the event's first POST made when it is that delivery (-1: none yet).
    const known = receipts.ofDeliveryAfter(first, deliveryId)
    const crashAt = lastCrashMs() - baseMs
    const ackedAt = known < 0 ? Number.NaN : receipts.ackedAtMs[known]!
    let notAcked = Number.isNaN(ackedAt) || crashAt >= ackedAt || receipts.ackReadAfterPause[known] === 1
    if (!notAcked && overNetwork) {
      receipts.retriedAfterAck.push({ deliveryId, attempt: receipts.lastAttempt[known]!, next: attempt })
      notAcked = true
    }
    auditor.check(
      notAcked,
      "webhook-nothing-after-2xx",
      notAcked ?
        passed :
        () => `delivery ${deliveryId} (event ${eventId}): attempt ${attempt} arrived after the endpoint acknowledged it`
    )
    const lastAttempt = known < 0 ? 0 : receipts.lastAttempt[known]!
    const lastAt = known < 0 ? 0 : receipts.lastAtMs[known]!
    const onwards = known < 0 || attempt >= lastAttempt || crashAt >= lastAt
    auditor.check(
      onwards,
      "webhook-attempt-numbers",
      onwards ? passed : () => `delivery ${deliveryId}: attempt ${attempt} after attempt ${lastAttempt}`
    )
    // One attempt reaches the endpoint once; only a crash may make the service send it again.
    const once = known < 0 || attempt !== lastAttempt || crashAt >= lastAt
    auditor.check(
      once,
      "webhook-once-per-attempt",
      once ? passed : () => `delivery ${deliveryId}: attempt ${attempt} arrived twice`
    )
    const slot = known >= 0 ? known : receipts.add(deliveryId)
    if (first < 0) receipts.firstOfEvent(eventId, slot)
    receipts.received(slot, attempt, at)
    const verified = verifySignature(request.headers["x-service-signature"], request.body, secretsOf(request.url), now)
    auditor.check(
      verified === null,
      "webhook-signature",
      verified === null ? passed : () => `event ${eventId} attempt ${attempt}: ${verified}`
    )
    const named = namesEvent(receipts, slot, request.body, eventId)
    auditor.check(named, "webhook-signature", named ? passed : () => `event ${eventId}: the body names another event`)
    if (inOutage(outagesOf(request.url), now)) {
      stats.outageRefusals++
      return refused
    }
    const roll = prng.float()
    let edge = faults.webhookNoAnswer
    if (roll < edge) {
      stats.noAnswer++
      return noAnswer
    }
    if (roll < (edge += faults.webhookSlow)) {
      stats.slow++
      return answerOf(200, prng.int(30_001, 90_000), slot)
    }
    if (roll < (edge += faults.webhookLagging)) {
      stats.lagging++
      return answerOf(200, prng.int(10_000, 29_000), slot)
    }
    if (roll < (edge += faults.webhook5xx)) return answerOf(prng.pick([500, 502, 503]), prng.int(5, 2_000), slot)
    if (roll < edge + faults.webhook4xx) return answerOf(prng.pick([400, 404, 410]), prng.int(5, 500), slot)
    return answerOf(200, prng.int(5, 800), slot)
  }

  /** The slot a POST holds from now: until its answer, or the dispatcher's timeout (`timeoutMs`; null: none). */
  const holdOf = (url: string, fate: Fate, timeoutMs: number | null) => {
    if (fate._tag === "Refused") return
    const at = nowMs() - baseMs
    const answerMs = fate._tag === "Answer" ? fate.latencyMs : Number.POSITIVE_INFINITY
    const heldMs = timeoutMs === null ? answerMs : Math.min(answerMs, timeoutMs)
    if (Number.isFinite(heldMs)) held.hold(url, at, at + heldMs)
  }

  /**
   * The endpoints as one instance reaches them: with `fence`, a dead instance's POST interrupts
   * its caller and a paused one's waits until it resumes (as `fenced` in sim/world/Service.ts does), checked in the step that receives it, when
   * the effect runs (not when it is built): one Effect step a POST less than a fence around it.
   */
  const transportOf = (fence: Fence | null): WebhookTransportShape => {
    /**
     * A POST, answered by the endpoint within `timeoutMs` (null: no timeout; past it, the
     * dispatcher's timeout at exactly `timeoutMs`, with no fiber racing the answer: an answer at
     * the very timeout still counts, as it wins the race).
     */
    const postOf = (request: WebhookRequest, timeoutMs: number | null): Effect.Effect<TransportResult> => {
      const t = timer
      if (t === undefined || t === null) {
        return Effect.suspend(() => {
          if (fence !== null && fence.dead) return Effect.interrupt
          if (fence !== null && fence.held !== null) return heldBy(fence, () => postOf(request, timeoutMs))
          const fate = receive(request)
          holdOf(request.url, fate, timeoutMs)
          if (fate._tag === "Refused") return Effect.succeed(refusedResult)
          if (fate._tag === "Answer" && (timeoutMs === null || fate.latencyMs <= timeoutMs)) return answer(fate)
          return timeoutMs === null ? Effect.never : after(timeoutMs, () => timedOut(timeoutMs))
        })
      }
      // With the clock's callback timer (known from the first POST on): one `Effect.callback` whose
      // registration, run when the effect runs, reads the fence, receives the POST and sets the
      // answer's timer (a suspend returning the async took one step more). As above, the answer
      // (or the timeout) is read when the fiber resumes.
      return Effect.callback<TransportResult>((resume) => {
        if (fence !== null && fence.dead) return resume(Effect.interrupt)
        if (fence !== null && fence.held !== null) return resume(heldBy(fence, () => postOf(request, timeoutMs)))
        const fate = receive(request)
        holdOf(request.url, fate, timeoutMs)
        if (fate._tag === "Refused") return resume(Effect.succeed(refusedResult))
        if (fate._tag === "Answer" && (timeoutMs === null || fate.latencyMs <= timeoutMs)) {
          // An answer reaching a paused instance is read when it resumes (a dead one never reads it).
          t(fate.latencyMs, () => {
            if (fence !== null && fence.held !== null) {
              fence.held.push(() => resume(fence.dead ? Effect.interrupt : Effect.sync(() => settle(fate, true))))
            } else resume(Effect.sync(() => settle(fate)))
          })
        } else if (timeoutMs !== null) t(timeoutMs, () => resume(Effect.sync(() => timedOut(timeoutMs))))
        // No answer and no timeout: never resumed, as `Effect.never`.
      })
    }
    return { post: (request) => postOf(request, null), postWithin: postOf }
  }
  const transport = transportOf(null)
  // `receive` and `settle` serve the same endpoints over real HTTP too (the harness's webhook
  // server, bench/harness/scenarios/Endpoints.ts): a POST is received and its fate drawn, and a
  // 2xx is settled as it is written.
  return { transport, fencedBy: transportOf, stats, receipts, held, receive, settle, lagging }
}

/** What an endpoint does with a POST (`receive`): refuse the connection, never answer, or answer after a latency. */
export type EndpointFate = ReturnType<ReturnType<typeof makeSimulatedEndpoints>["receive"]>

const inOutage = (windows: ReadonlyArray<readonly [number, number]>, now: number) => {
  for (let i = 0; i < windows.length; i++) {
    const window = windows[i]!
    if (now >= window[0] && now < window[1]) return true
  }
  return false
}

/**
 * The endpoint's own HMAC of each secret (made once per secret). The endpoint signs nothing with
 * the service's `hmacHex`: it checks the service's signatures with its own code, as a merchant
 * would. For a secret of at most 64 ASCII bytes that code is RFC 2104 on two one-shot hashes
 * (the inner pad as ASCII text, so "pad + t. + body" is one string), tried once against
 * `createHmac` on the secret before it is used; any other secret uses `createHmac` with a key
 * object (a string key is converted every call).
 */
type EndpointHmac = (message: string) => string
const endpointHmacs = new Map<string, EndpointHmac>()
const endpointHmac = (secret: string): EndpointHmac => {
  let hmac = endpointHmacs.get(secret)
  if (hmac !== undefined) return hmac
  const keyBytes = Buffer.from(secret, "utf8")
  const key = createSecretKey(keyBytes)
  const standard: EndpointHmac = (message) => createHmac("sha256", key).update(message).digest("hex")
  hmac = standard
  if (keyBytes.length <= 64 && keyBytes.every((b) => b < 0x80)) {
    let ipad = ""
    const outer = Buffer.alloc(96)
    for (let i = 0; i < 64; i++) {
      const b = keyBytes[i] ?? 0
      ipad += String.fromCharCode(b ^ 0x36)
      outer[i] = b ^ 0x5c
    }
    const padded: EndpointHmac = (message) => {
      // The inner digest as 32 "binary" (latin1) characters, one a byte: no hex to write, then read back.
      outer.write(hash("sha256", ipad + message, "binary"), 64, "binary")
      return hash("sha256", outer, "hex")
    }
    const sample = "1700000000.{\"id\":\"evt_é😀\"}"
    if (padded(sample) === standard(sample) && padded("") === standard("")) hmac = padded
  }
  endpointHmacs.set(secret, hmac)
  return hmac
}

/** The merchant's check (docs/webhooks.md): a fresh timestamp and an HMAC of "t.body" under an accepted secret. Null when valid. */
const verifySignature = (
  header: string | undefined,
  body: string,
  secrets: ReadonlyArray<string>,
  nowMs: number
): string | null => {
  if (header === undefined) return "unsigned POST"
  let timestamp: number | undefined
  const signatures: Array<string> = []
  // The parts of `header.split(",")`, in turn, read in place: no array of them, and no string
  // of a part or its name made (a name is compared where it stands; only a value is sliced).
  for (let start = 0; start >= 0;) {
    const comma = header.indexOf(",", start)
    /** Where the part ends (exclusive). */
    const stop = comma < 0 ? header.length : comma
    const partStart = start
    start = comma < 0 ? -1 : comma + 1
    const found = header.indexOf("=", partStart)
    const equals = found < 0 || found >= stop ? -1 : found
    /** The name's length: up to the first "=", or the whole part. */
    const nameLength = (equals < 0 ? stop : equals) - partStart
    const isT = nameLength === 1 && header.charCodeAt(partStart) === 116 // "t"
    const isV1 = nameLength === 2 && header.startsWith("v1", partStart)
    if (!(isT && timestamp === undefined) && !isV1) continue
    // As `part.split("=")[1]`: the value ends at a second "=" of the part, if any.
    let value: string | undefined
    if (equals >= 0) {
      const second = header.indexOf("=", equals + 1)
      value = header.slice(equals + 1, second < 0 || second >= stop ? stop : second)
    }
    if (isT && timestamp === undefined) timestamp = Number(value)
    else signatures.push(value ?? "")
  }
  if (timestamp === undefined || !Number.isSafeInteger(timestamp) || Math.abs(nowMs / 1000 - timestamp) > 300) {
    return `timestamp ${timestamp ?? Number.NaN} is not within 5 minutes of now`
  }
  const message = `${timestamp}.${body}`
  for (const secret of secrets) {
    const expected = endpointHmac(secret)(message)
    // A v1 value matches when it decodes to the expected bytes: the lowercase hex itself, or the
    // same digits in uppercase (Buffer.from(hex) ignores case); anything else decodes otherwise.
    for (let i = 0; i < signatures.length; i++) {
      const signature = signatures[i]!
      if (signature === expected || signature.toLowerCase() === expected) return null
    }
  }
  return `no v1 signature matches the merchant's ${secrets.length} secret(s)`
}

/** Does the body (valid JSON) name the event? A text already found to name it (the same bytes) is not parsed again. */
const namesEvent = (receipts: Receipts, slot: number, body: string, eventId: string) => {
  if (receipts.checkedBodies[slot] === body && receipts.checkedEventIds[slot] === eventId) return true
  if (bodyEventId(body) !== eventId) return false
  receipts.checkedBodies[slot] = body
  receipts.checkedEventIds[slot] = eventId
  return true
}

const bodyEventId = (body: string): string | undefined => {
  try {
    return (JSON.parse(body) as { id?: string }).id
  } catch {
    return undefined
  }
}

/**
 * A recorded attempt as the audit reads it. `cut`: the service recorded it as cut off by a lost
 * instance (CONTRACT.md section 8: no answer was recorded, and the attempt is sent again, as the
 * next attempt number, as soon as another instance takes the delivery over). A cut attempt is no
 * failure and no place in the retry schedule: the attempt after it takes its place.
 */
export type AuditedAttempt = AttemptAudit & { readonly cut?: boolean }
export type AuditedDelivery = Omit<DeliveryAudit, "attempts"> & { readonly attempts: ReadonlyArray<AuditedAttempt> }

/** What the delivery audit needs beside the deliveries: the schedule, the faults it allows for, and the witnesses. */
export interface DeliveryAuditOptions {
  readonly nowMs: number
  readonly scheduleMs: ReadonlyArray<number>
  readonly timeoutMs: number
  /**
   * How late a retry may reach its endpoint beyond the clock tolerance, with no witness of the
   * endpoint's backlog (`backlog` absent: the harness); and the slack of `webhook-deadline`.
   */
  readonly toleranceMs: number
  readonly crashesMs: ReadonlyArray<number>
  /**
   * The pauses of an instance, from the pause to its resume (Infinity: never resumed). A retry
   * due within a lease of one may be late: the paused instance holds the delivery's lease and
   * its POST waits with every other call it makes; resumed, it may hold a lease it then never
   * uses (it serves nothing new and is retired), which another dispatcher waits out.
   */
  readonly pausesMs?: ReadonlyArray<{ readonly fromMs: number; toMs: number }>
  /**
   * The witness of each endpoint's backlog (in-process: `HeldSlots`) and the attempts a
   * dispatcher works at once per endpoint (its concurrency, as the service runs it). With it a
   * retry may be late beyond the clock tolerance only while its endpoint held that many
   * attempts at every moment from its due time to its arrival (the dispatcher had no slot free
   * to start it): no fixed tolerance a schedule could hide in.
   */
  readonly backlog?: { readonly held: HeldSlots; readonly concurrency: number }
  /**
   * Over a real network (the harness), with a backlog witness: how late beyond the clock
   * tolerance a retry may still reach its endpoint with a slot free (the dispatcher's wake and
   * claim, the database's answer, the wire, the receiver's event loop). In-process (absent): 0.
   */
  readonly networkToleranceMs?: number
  /**
   * Over a real network (the harness): when the endpoint saw attempt `attempt` of a delivery end
   * (epoch ms: its answer written, or its connection closed by the service's timeout; NaN:
   * unknown). A retry is made once the attempt before it failed (docs/webhooks.md: "after the
   * first failed attempt"), so it is due at the later of its offset and that end: with offsets
   * shorter than the timeout (the harness's 1 s, 2 s... against 2 s) an attempt that timed out
   * pushes the next one past its offset. Absent (in-process, where offsets exceed the timeout): not read.
   */
  readonly attemptEndedAtMs?: (deliveryId: string, attempt: number) => number
  /**
   * How far one instance's clock may be off true time (half the clock tolerance). With it, each
   * attempt's recorded time must be when it reached the endpoint, within it: the time of its
   * start, as the schedule counts from (`webhook-attempt-time`). Absent (the harness: the
   * service's clock and the endpoints' are not the simulator's one clock): not checked.
   */
  readonly attemptTimeToleranceMs?: number
  /**
   * How far two instances' clocks may disagree (clock skew, docs/operations.md): times recorded
   * by different instances are compared within it (absent: 0).
   */
  readonly clockToleranceMs?: number
  /** What reached the endpoints (attempt numbers by delivery); the audit marks on them each event with a stored delivery. */
  readonly receipts: Receipts
  /**
   * Over a real network (the harness): an attempt that got no answer (a connection error or a
   * timeout) may never have reached the endpoint (a kept-alive connection closed under it);
   * only an answered attempt must have. In-process every recorded attempt reached it.
   */
  readonly unansweredMayBeLost?: boolean
}

// Deliveries in order per payment and URL: each one waits for the one before it (by sequence).
// What the order checks need of each ordered delivery, grouped by chain (payment and URL).
interface Link {
  readonly id: string
  readonly eventType: string
  readonly url: string
  readonly sequence: number
  readonly createdAtMs: number
  readonly endedAtMs: number | null
  readonly firstAttemptMs: number | undefined
  /** When it could start, once the delivery before it in its chain ended (null: still waiting; undefined: first of its chain). */
  readyAtMs?: number | null
}

/** A time for a message (a time that is no time is shown as it is). */
const when = (ms: number) => (Number.isFinite(ms) ? new Date(ms).toISOString() : String(ms))
const is2xx = (status: number | null) => status !== null && status >= 200 && status < 300

/** Attempts recorded as cut off (none but over a real cluster that lost an instance). */
const cutsOf = (attempts: ReadonlyArray<AuditedAttempt>) => {
  let cuts = 0
  for (let i = 0; i < attempts.length; i++) if (attempts[i]!.cut === true) cuts++
  return cuts
}

/**
 * Final webhook invariants over the stored deliveries: finished by their deadline, attempts at
 * the schedule's offsets (late only across a crash), nothing after a success, one delivery per event.
 */
export const auditDeliveries = (
  auditor: Auditor,
  /**
   * The stored deliveries, times in ms (their payloads are not needed), read once, one at a time:
   * at 100,000 payments they are ~500,000 records, too many to hold at once under the 2 GB heap.
   */
  deliveries: () => Iterable<AuditedDelivery>,
  options: DeliveryAuditOptions
) => {
  const receipts = options.receipts
  const lostOk = options.unansweredMayBeLost === true
  const clockToleranceMs = options.clockToleranceMs ?? 0
  // Events seen with a stored delivery: marked on the receipts of the event's first POST (one
  // look-up into a table the endpoints hold anyway, serving the attempt checks below too), or
  // kept in a set when none of its POSTs reached an endpoint.
  const unposted = new Set<string>()
  const totals = { deliveries: 0, succeeded: 0, failed: 0, open: 0, attempts: 0 }
  const scheduleMs = options.scheduleMs
  const lastOffset = scheduleMs[scheduleMs.length - 1] ?? 0
  const crashBetween = (fromMs: number, toMs: number) => options.crashesMs.some((c) => c >= fromMs && c <= toMs)
  /**
   * Whether a pause overlaps `[fromMs, toMs]`: as a crash's instant does, but for the whole pause,
   * since the paused instance keeps its leases (a successor lease taken as its held attempt ends
   * at the resume, too) until they expire, unless it uses them.
   */
  const pausedBetween = (fromMs: number, toMs: number) =>
    options.pausesMs?.some((pause) => pause.fromMs <= toMs && pause.toMs >= fromMs) === true
  /** When a delivery's last attempt ended it for good (a 2xx, or the last of the schedule); null while open. */
  const endedAtMs = (d: AuditedDelivery) => {
    const attempts = d.attempts
    for (let i = 0, place = 0; i < attempts.length; i++) {
      if (attempts[i]!.cut === true) continue
      if (is2xx(attempts[i]!.responseStatus) || place === scheduleMs.length) return attempts[i]!.at
      place++
    }
    return null
  }
  /** Chains by payment (most payments have one URL, so one chain), and all chains as they first appear. */
  const chainsOf = new Map<string, Array<Array<Link>>>()
  const chains: Array<Array<Link>> = []
  // One pass over the deliveries. The checks are reported as two passes would report them: the
  // order checks of every chain first, then each delivery's own laws in turn. A check that passes
  // is counted at once; a failed one (and the deadline of a delivery still open, which needs its
  // chain) is run after the order checks, in its turn.
  const deferred: Array<() => void> = []
  // A check that passes is counted with `pass`; a failed one is deferred with its message. The
  // messages are made by the functions below, outside the loop: no closure (and no scope kept
  // for one) per delivery or attempt while every check passes.
  const pass = (invariant: string) => auditor.check(true, invariant, passed)
  const fail = (invariant: string, message: () => string) => {
    deferred.push(() => auditor.check(false, invariant, message))
  }
  const moreThanOne = (d: AuditedDelivery) => () => `event ${d.eventId}: more than one delivery`
  const misnumbered = (d: AuditedDelivery, index: number, attempt: AuditedAttempt) => () =>
    `delivery ${d.id}: attempt ${index} numbered ${attempt.attempt}`
  const afterSuccess = (d: AuditedDelivery) => () => `delivery ${d.id}: attempts after a 2xx`
  const early = (d: AuditedDelivery, attempt: AuditedAttempt, atMs: number, dueMs: number) => () =>
    `delivery ${d.id}: attempt ${attempt.attempt} reached the endpoint at ${when(atMs)}, ${
      dueMs - atMs
    } ms before its offset from the first attempt's arrival (recorded at ${when(attempt.at)})`
  const late = (d: AuditedDelivery, attempt: AuditedAttempt, atMs: number, dueMs: number) => () =>
    `delivery ${d.id}: attempt ${attempt.attempt} reached the endpoint at ${when(atMs)}, ${
      atMs - dueMs
    } ms after its offset from the first attempt's arrival (or the end of the attempt before it, whichever is later)` +
    (backlog === undefined
      ? ""
      : ` (first attempt recorded at ${when(d.attempts[0]!.at)}; the endpoint held at least ${
        backlog.held.leastHeld(d.url, dueMs + lateToleranceMs - baseMs, atMs - baseMs)
      } of the ${backlog.concurrency} slots at every moment since it was due + ${lateToleranceMs} ms)`)
  const mistimed = (d: AuditedDelivery, attempt: AuditedAttempt, reachedMs: number) => () =>
    `delivery ${d.id}: attempt ${attempt.attempt} recorded at ${when(attempt.at)}, reached the endpoint at ${
      when(reachedMs)
    } (${attempt.at - reachedMs} ms apart, at most ${attemptTimeToleranceMs} ms: the clock of one instance)`
  const earlyRecorded = (d: AuditedDelivery, attempt: AuditedAttempt, dueMs: number) => () =>
    `delivery ${d.id}: attempt ${attempt.attempt} recorded at ${when(attempt.at)}, ${
      dueMs - attempt.at
    } ms before its offset from the first attempt as recorded (${when(d.attempts[0]!.at)})`
  const tooManyReceived = (d: AuditedDelivery, attempt: number) => () =>
    `delivery ${d.id}: the endpoint received attempt ${attempt}`
  const gaveUpUnseen = (d: AuditedDelivery) => () =>
    `delivery ${d.id}: failed, but its last retry (attempt ${scheduleMs.length + 1}) never reached the endpoint`
  const baseMs = receipts.baseMs
  /**
   * How early a retry may reach its endpoint, counted from the first attempt's arrival: over a
   * network an arrival lags the attempt's start by the connection's latency; and a retry made by
   * another instance than the first attempt was comes early by their clocks' disagreement (at most
   * the tolerance docs/operations.md "Clocks" allows). Late likewise, by that disagreement.
   */
  const earlyToleranceMs = (lostOk ? 1_000 : 0) + clockToleranceMs
  /**
   * How late: by that disagreement, and, with a witness of the endpoint's backlog, by nothing
   * more unless the endpoint was saturated; without one, by `toleranceMs` more.
   */
  const backlog = options.backlog
  const lateToleranceMs = (backlog === undefined ? options.toleranceMs : options.networkToleranceMs ?? 0) +
    clockToleranceMs
  /** Saturated from `fromMs` until `toMs` (epoch ms): its dispatcher could start nothing more meanwhile. */
  const saturated = (url: string, fromMs: number, toMs: number) =>
    backlog !== undefined && backlog.held.leastHeld(url, fromMs - baseMs, toMs - baseMs) >= backlog.concurrency
  const attemptTimeToleranceMs = options.attemptTimeToleranceMs
  const tooMany = (d: AuditedDelivery) => () => `delivery ${d.id}: ${d.attempts.length} attempts`
  const wrongEnd = (d: AuditedDelivery, last: AuditedAttempt | undefined) => () =>
    `delivery ${d.id}: ${d.status} after ${d.attempts.length} attempts (last answered ${
      last?.responseStatus ?? last?.error ?? "nothing"
    })`
  const neverReached = (d: AuditedDelivery, attempt: AuditedAttempt) => () =>
    `delivery ${d.id}: attempt ${attempt.attempt} recorded but never reached the endpoint`
  /** The deadline of a delivery still open, checked once its chain is known. */
  const deferDeadline = (d: AuditedDelivery, open: Link | null) => {
    const createdMs = d.createdAt
    deferred.push(() => {
      // Deadline: the whole schedule, the last attempt's timeout, and slack for crashes and polling,
      // counted from when the delivery before it in its payment's order ended (null: it has not).
      const readyMs = open === null || open.readyAtMs === undefined ? createdMs : open.readyAtMs
      const deadlineMs = readyMs === null
        ? Infinity
        : readyMs + lastOffset + options.timeoutMs + options.toleranceMs + 2 * 3_600_000
      auditor.check(
        options.nowMs < deadlineMs,
        "webhook-deadline",
        () =>
          `delivery ${d.id}: still ${d.status} ${((options.nowMs - createdMs) / 3_600_000).toFixed(1)} h after creation`
      )
    })
  }
  /** Adds an ordered delivery to its chain (its payment's and URL's); the link the deadline check reads. */
  const chainLink = (d: AuditedDelivery, order: NonNullable<AuditedDelivery["order"]>): Link => {
    const url = d.url
    const link: Link = {
      id: d.id,
      eventType: d.eventType,
      url,
      sequence: order.sequence,
      createdAtMs: d.createdAt,
      endedAtMs: endedAtMs(d),
      firstAttemptMs: d.attempts[0]?.at
    }
    const ofPayment = chainsOf.get(order.paymentId)
    if (ofPayment === undefined) {
      const chain = [link]
      chainsOf.set(order.paymentId, [chain])
      chains.push(chain)
    } else {
      let chain: Array<Link> | undefined
      for (const c of ofPayment) {
        if (c[0]!.url === url) {
          chain = c
          break
        }
      }
      if (chain !== undefined) chain.push(link)
      else {
        const created = [link]
        ofPayment.push(created)
        chains.push(created)
      }
    }
    return link
  }
  /**
   * Checks that the delivery is the first stored for its event; answers the slot of the event's
   * first POST (-1: none reached an endpoint).
   */
  const checkOnePerEvent = (d: AuditedDelivery): number => {
    // The first stored delivery of its event: the mark was not set (one look-up, not `has` then
    // `add`: the set grew iff no delivery before named the event).
    const first = receipts.ofEvent(d.eventId)
    let firstOfEvent: boolean
    if (first >= 0) {
      firstOfEvent = receipts.stored[first] === 0
      receipts.stored[first] = 1
    } else {
      const events = unposted.size
      firstOfEvent = unposted.add(d.eventId).size !== events
    }
    if (firstOfEvent) pass("webhook-one-delivery-per-event")
    else fail("webhook-one-delivery-per-event", moreThanOne(d))
    return first
  }
  /**
   * Each attempt's number, nothing after a 2xx, and its time: as recorded against the recorded
   * first attempt, as received against the first attempt's arrival, and the two against each other.
   */
  const checkAttempts = (d: AuditedDelivery, reached: number, cuts: number) => {
    const attempts = d.attempts
    // Attempts cut off take no place in the schedule: it starts at the first one not cut.
    const firstIndex = cuts === 0 ? 0 : attempts.findIndex((a) => a.cut !== true)
    const firstAt = receipts.attemptAt(reached, firstIndex + 1)
    // And as the service recorded them, exactly: an instance makes a retry only once its own clock
    // has passed the time stored from the first attempt's record (whichever instance made it), and
    // records the attempt by that clock, so no recorded retry precedes its offset from the recorded
    // first attempt, whatever the skew. (The first attempt's own time, not the delivery's
    // `firstFailedAt`: a wrong schedule start is what this catches.)
    const firstRecordedMs = attempts.length === 0 || firstIndex < 0 ? 0 : attempts[firstIndex]!.at
    for (let index = 0, place = -1; index < attempts.length; index++) {
      const attempt = attempts[index]!
      if (attempt.attempt === index + 1) pass("webhook-attempt-numbers")
      else fail("webhook-attempt-numbers", misnumbered(d, index, attempt))
      const success = is2xx(attempt.responseStatus)
      if (!success || index === attempts.length - 1) pass("webhook-nothing-after-2xx")
      else fail("webhook-nothing-after-2xx", afterSuccess(d))
      if (attempt.cut === true) continue
      // Its place in the schedule (its index when nothing was cut).
      place++
      const offsetMs = place === 0 ? undefined : scheduleMs[place - 1]
      if (offsetMs !== undefined) {
        const recordedDueMs = firstRecordedMs + offsetMs
        if (attempt.at >= recordedDueMs) pass("webhook-schedule")
        else fail("webhook-schedule", earlyRecorded(d, attempt, recordedDueMs))
      }
      const at = place === 0 || firstAt < 0 ? -1 : receipts.attemptAt(reached, index + 1)
      if (at >= 0) checkArrival(d, index, place, baseMs + firstAt, baseMs + at)
      if (attemptTimeToleranceMs !== undefined) checkAttemptTime(d, attempt, reached, attemptTimeToleranceMs)
    }
  }
  /** A retry reached its endpoint (at `atMs`) neither before its offset from the first attempt's arrival nor too long after. */
  const checkArrival = (d: AuditedDelivery, index: number, place: number, firstAtMs: number, atMs: number) => {
    const attempt = d.attempts[index]!
    const offsetDueMs = firstAtMs + (scheduleMs[place - 1] ?? Number.NaN)
    const previousEndMs = index === 0 || options.attemptEndedAtMs === undefined
      ? Number.NaN
      : options.attemptEndedAtMs(d.id, d.attempts[index - 1]!.attempt)
    const dueMs = previousEndMs > offsetDueMs ? previousEndMs : offsetDueMs
    if (atMs >= dueMs - earlyToleranceMs) pass("webhook-schedule")
    else fail("webhook-schedule", early(d, attempt, atMs, dueMs))
    if (
      atMs <= dueMs + lateToleranceMs || crashBetween(dueMs - options.timeoutMs - 60_000, atMs) ||
      pausedBetween(dueMs - options.timeoutMs - 60_000, atMs) ||
      saturated(d.url, dueMs + lateToleranceMs, atMs)
    ) {
      pass("webhook-schedule")
    } else fail("webhook-schedule", late(d, attempt, atMs, dueMs))
  }
  /**
   * The recorded time is the attempt's start, when it reached the endpoint (in-process, in the
   * same instant), by the clock of the instance that made it: the time the schedule counts from.
   * A cut attempt is recorded by the instance that took it over; a crash or a pause between
   * the two may hold a POST back.
   */
  const checkAttemptTime = (d: AuditedDelivery, attempt: AuditedAttempt, reached: number, toleranceMs: number) => {
    const reachedAt = receipts.attemptAt(reached, attempt.attempt)
    if (reachedAt < 0) return
    const reachedMs = baseMs + reachedAt
    if (
      Math.abs(attempt.at - reachedMs) <= toleranceMs + 1 ||
      crashBetween(
        Math.min(attempt.at, reachedMs) - options.timeoutMs - 60_000,
        Math.max(attempt.at, reachedMs)
      )
    ) {
      pass("webhook-attempt-time")
    } else fail("webhook-attempt-time", mistimed(d, attempt, reachedMs))
  }
  /** How many attempts, how the delivery ended, and that every recorded attempt reached its endpoint. */
  const checkEnd = (d: AuditedDelivery, reached: number, cuts: number) => {
    const attempts = d.attempts
    // The endpoint saw no more attempts than the schedule allows, and a delivery given up had its
    // last retry reach it (unless, over a network, that attempt got no answer).
    // (An attempt cut off is sent again as the next number: each cut adds one.)
    if (reached < 0 || receipts.lastAttempt[reached]! <= scheduleMs.length + 1 + cuts) pass("webhook-attempt-limit")
    else fail("webhook-attempt-limit", tooManyReceived(d, receipts.lastAttempt[reached]!))
    if (
      d.status !== "failed" || receipts.has(reached, scheduleMs.length + 1 + cuts) ||
      (lostOk && attempts[attempts.length - 1]?.responseStatus === null)
    ) {
      pass("webhook-give-up")
    } else fail("webhook-give-up", gaveUpUnseen(d))
    if (attempts.length - cuts <= scheduleMs.length + 1) pass("webhook-attempt-limit")
    else fail("webhook-attempt-limit", tooMany(d))
    // A 2xx ends the delivery and nothing else does: failed only after the last retry failed,
    // succeeded only on a 2xx, and nothing left open once the last retry failed.
    const last = attempts[attempts.length - 1]
    const lastSucceeded = last !== undefined && is2xx(last.responseStatus)
    const exhausted = attempts.length - cuts === scheduleMs.length + 1 && !lastSucceeded
    if (d.status === "succeeded" ? lastSucceeded : d.status === "failed" ? exhausted : !lastSucceeded && !exhausted) {
      pass("webhook-give-up")
    } else fail("webhook-give-up", wrongEnd(d, last))
    // Every attempt the store records reached the endpoint (none invented, none skipped), but
    // one cut off, which its instance may have lost before sending it.
    // The slot of the event's first POST is this delivery's when it carried this id (the
    // endpoints keep one slot per delivery id); none is looked up for no attempt (-1: nothing reached).
    for (let i = 0; i < attempts.length; i++) {
      const attempt = attempts[i]!
      if (
        receipts.has(reached, attempt.attempt) || (lostOk && attempt.responseStatus === null) || attempt.cut === true
      ) pass("webhook-attempt-recorded")
      else fail("webhook-attempt-recorded", neverReached(d, attempt))
    }
  }
  /** Each ordered delivery started only once the one before it in its chain had ended. */
  const checkOrder = (chain: Array<Link>) => {
    if (chain.length > 1) chain.sort((a, b) => a.sequence - b.sequence)
    for (let i = 1; i < chain.length; i++) {
      const d = chain[i]!
      const previous = chain[i - 1]!
      const previousEnd = previous.endedAtMs
      d.readyAtMs = previousEnd === null ? null : Math.max(d.createdAtMs, previousEnd + options.timeoutMs)
      const firstMs = d.firstAttemptMs
      // (Both times as recorded: by different instances, when a paused one resumed beside its replacement.)
      auditor.check(
        firstMs === undefined || (previousEnd !== null && previousEnd <= firstMs + clockToleranceMs),
        "webhook-order",
        () =>
          `delivery ${d.id} (${d.eventType}, sequence ${d.sequence}): attempted at ${
            firstMs === undefined ? undefined : when(firstMs)
          } before delivery ${previous.id} ` +
          `(${previous.eventType}, sequence ${previous.sequence}) of the same payment had ended (${
            previousEnd === null ? "still open" : when(previousEnd)
          })`
      )
    }
  }
  /** One delivery's own laws (the order checks wait for every chain). */
  const auditOne = (d: AuditedDelivery) => {
    const link = d.order === null ? null : chainLink(d, d.order)
    const attempts = d.attempts
    totals.deliveries++
    totals.attempts += attempts.length
    if (d.status === "succeeded") totals.succeeded++
    else if (d.status === "failed") totals.failed++
    else totals.open++
    const first = checkOnePerEvent(d)
    if (d.status === "succeeded" || d.status === "failed") auditor.check(true, "webhook-deadline", passed)
    else deferDeadline(d, link)
    // The retry times as the endpoint received them, not as the service recorded them: each
    // retry at its offset from the first attempt's arrival (every retried delivery's first attempt
    // failed). An attempt the endpoint never saw (over a network, one that got no answer) is not timed.
    const reached = attempts.length === 0 ? -1 : receipts.ofDeliveryAfter(first, d.id)
    const cuts = cutsOf(attempts)
    checkAttempts(d, reached, cuts)
    checkEnd(d, reached, cuts)
  }
  for (const d of deliveries()) auditOne(d)
  chainsOf.clear()
  // The order checks, chain by chain.
  for (const chain of chains) checkOrder(chain)
  // Then each delivery's own laws that failed (and the deadlines of those still open), in their turn.
  for (const run of deferred) run()
  /** Does the store hold a delivery of the event? (Read from the marks this audit made.) */
  const hasStoredDelivery = (eventId: string) => {
    const first = receipts.ofEvent(eventId)
    return first >= 0 ? receipts.stored[first] === 1 : unposted.has(eventId)
  }
  return { totals, hasStoredDelivery }
}

import type { Auditor } from "./Auditor.ts"

/**
 * Law `rate-limit`, written from docs/operations.md ("a key gets `RATE_LIMIT_PER_SECOND` per
 * instance (burst twice that)") and docs/api.md (a token bucket per key: `RATE_LIMIT_PER_SECOND`
 * refill, burst twice that): per key and per instance (each instance keeps its own buckets, full
 * when it first sees a key), the requests that get through and the ones refused with 429 are what
 * the token bucket lets through, within one token, in virtual time:
 *
 * - no more: in any window [a, b], at most `2r + r (b − a)` requests get through (the bucket held
 *   at most 2r tokens at `a`, and gained r a second), one more allowed for rounding;
 * - no fewer: a request is refused only when the bucket had less than one token: for some earlier
 *   moment u (a request that got through, or the bucket's first use), the requests in [u, t]
 *   spent at least `2r − 1 + r (t − u)`, one fewer allowed for rounding.
 *
 * Its record is what the simulator saw: each request's key (the secret sent), the instance that
 * served it, when it was sent, and its answer. A request is timed when the limiter saw it only
 * when nothing could hold its authentication back (`exact`: answered in the instant it was sent,
 * or sent while the database was not frozen and its instance not paused); the others are left out
 * of the counts the law could overstate. A 503 or a dropped connection may or may not have taken a
 * token: the first rule does not count it, the second does. Nothing is asked of the limiter.
 */
export interface RateLimitStats {
  /** Requests refused with 429, and of them those judged (timed exactly). */
  refused: number
  refusedJudged: number
  /** Keys (per instance) with more requests through than a full bucket holds: where the first rule bites. */
  keysPastBurst: number
}

interface Group {
  readonly secret: string
  /**
   * Over a real network (the harness): each request as [sent, answered], the limiter saw it
   * between the two. Absent: the times above are exact (in-process).
   */
  readonly spans: Array<{ readonly fromMs: number; readonly toMs: number; readonly status: number | null }>
  /** Exact times of requests that surely got through (a 2xx). */
  readonly through: Array<number>
  /** Exact times of requests that may have taken a token (any answer but 429 and 401, or none). */
  readonly maybe: Array<number>
  /** Exact times of refusals (429). */
  readonly refused: Array<number>
  /** A request that may have taken a token was not timed exactly: refusals are not judged. */
  uncertain: boolean
}

/**
 * A request sent with `secret` at `sentMs`, served by `instance`, answered `status` (null: no
 * answer reached the client); `exact`: the limiter saw it at `sentMs`; `answeredMs`: over a real
 * network, when its answer came (the limiter saw it in between).
 */
export interface RateLimitAnswer {
  readonly secret: string | undefined
  readonly instance: object
  readonly sentMs: number
  readonly status: number | null
  readonly exact: boolean
  readonly answeredMs?: number
}

export const rateLimitLaw = (auditor: Auditor, options: { readonly perSecond: number }) => {
  const capacity = 2 * options.perSecond
  const perMs = options.perSecond / 1000
  /** By instance (compared by identity), then by key. */
  const groups = new Map<object, Map<string, Group>>()
  const stats: RateLimitStats = { refused: 0, refusedJudged: 0, keysPastBurst: 0 }
  const groupOf = (instance: object, secret: string) => {
    let ofInstance = groups.get(instance)
    if (ofInstance === undefined) groups.set(instance, ofInstance = new Map())
    let group = ofInstance.get(secret)
    if (group === undefined) {
      ofInstance.set(secret, group = { secret, spans: [], through: [], maybe: [], refused: [], uncertain: false })
    }
    return group
  }
  const name = (secret: string) => `key …${secret.slice(-4)}`
  const at = (ms: number) => new Date(ms).toISOString()

  /** No more than the bucket lets through, in any window (`through` sorted). */
  const checkThrough = (group: Group, instance: number) => {
    const t = group.through
    if (t.length <= capacity + 1) return
    stats.keysPastBurst++
    // Window [t[j], t[k]] holds k − j + 1 requests; allowed: capacity + perMs (t[k] − t[j]) + 1.
    // That is (k − perMs t[k]) + (perMs t[j] − j) ≤ capacity: the largest second term so far decides.
    let best = Number.NEGATIVE_INFINITY
    let bestJ = 0
    for (let k = 0; k < t.length; k++) {
      const g = perMs * t[k]! - k
      if (g > best) {
        best = g
        bestJ = k
      }
      if (k - perMs * t[k]! + best > capacity + 1e-9) {
        const spanMs = t[k]! - t[bestJ]!
        auditor.fail(
          "rate-limit",
          `${name(group.secret)} on instance ${instance}: ${k - bestJ + 1} requests got through from ${
            at(t[bestJ]!)
          } to ${at(t[k]!)} (${spanMs} ms), ` +
            `the token bucket lets through at most ${capacity} + ${options.perSecond}/s × ${spanMs / 1000} s = ${
              capacity + perMs * spanMs
            } (one more for rounding)`
        )
        return
      }
    }
  }

  /** No fewer: each refusal had the bucket below one token (`maybe`, `refused` sorted). */
  const checkRefused = (group: Group, instance: number) => {
    if (group.uncertain) return
    const m = group.maybe
    let j = 0
    let best = Number.NEGATIVE_INFINITY
    for (const l of group.refused) {
      stats.refusedJudged++
      // Every request that may have taken a token by `l` (same instant included): their count is
      // N, and from the j-th on they spent N − j over [m[j], l].
      while (j < m.length && m[j]! <= l) {
        best = Math.max(best, perMs * m[j]! - j)
        j++
      }
      // Spent at least 2r − 1 + r (l − u) since some u, within one token: N − perMs l + best ≥ capacity − 2.
      if (!(j - perMs * l + best >= capacity - 2 - 1e-9)) {
        auditor.fail(
          "rate-limit",
          `${name(group.secret)} on instance ${instance}: refused at ${
            at(l)
          } with ${j} requests through or undecided before it on this instance, ` +
            `fewer than the token bucket (${capacity} + ${options.perSecond}/s) needs to run dry`
        )
        return
      }
    }
  }

  /**
   * Both rules when each request is known only within [sent, answered] (the harness): the limiter
   * saw it somewhere in between. A violation is reported only when every placement of the
   * requests in their spans breaks the bucket: requests j..k that got through all fall within
   * [sent of the first, the latest answer among them], and a refusal at L in [sent, answered] had
   * spent at most the requests whose spans meet [u, answered] since u, over at least sent − u.
   */
  const checkSpans = (group: Group, instance: number) => {
    const spans = [...group.spans].sort((a, b) => a.fromMs - b.fromMs)
    const through = spans.filter((r) => r.status !== null && r.status >= 200 && r.status < 300)
    if (through.length > capacity + 1) {
      stats.keysPastBurst++
      for (let j = 0, done = false; j < through.length && !done; j++) {
        let latestMs = Number.NEGATIVE_INFINITY
        for (let k = j; k < through.length; k++) {
          latestMs = Math.max(latestMs, through[k]!.toMs)
          if (k - j + 1 > capacity + perMs * (latestMs - through[j]!.fromMs) + 1 + 1e-9) {
            auditor.fail(
              "rate-limit",
              `${name(group.secret)} on instance ${instance}: ${k - j + 1} requests got through, all sent from ${
                at(through[j]!.fromMs)
              } and answered by ${at(latestMs)} ` +
                `(${
                  latestMs - through[j]!.fromMs
                } ms), the token bucket lets through at most ${capacity} + ${options.perSecond}/s × ${
                  (latestMs - through[j]!.fromMs) / 1000
                } s = ` +
                `${capacity + perMs * (latestMs - through[j]!.fromMs)} (one more for rounding)`
            )
            done = true
            break
          }
        }
      }
    }
    const maybe = spans.filter((r) => r.status !== 429)
    for (const refusal of spans) {
      if (refusal.status !== 429) continue
      stats.refusedJudged++
      // The most the requests could have spent since some u (a request's time, the bucket's first use), less the refill since.
      let most = Number.NEGATIVE_INFINITY
      for (const from of maybe) {
        if (from.fromMs > refusal.toMs) break
        let spent = 0
        for (const r of maybe) if (r.toMs >= from.fromMs && r.fromMs <= refusal.toMs) spent++
        most = Math.max(most, spent - perMs * (refusal.fromMs - from.toMs))
      }
      if (!(most >= capacity - 2 - 1e-9)) {
        auditor.fail(
          "rate-limit",
          `${name(group.secret)} on instance ${instance}: refused, sent at ${at(refusal.fromMs)} and answered at ${
            at(refusal.toMs)
          }, when at most ` +
            `${
              Number.isFinite(most) ? most.toFixed(1) : 0
            } tokens of the bucket (${capacity} + ${options.perSecond}/s) could have been spent`
        )
        return
      }
    }
  }

  return {
    stats,
    /** A request answered (or not): see `RateLimitAnswer`. */
    answered: ({ answeredMs, exact, instance, secret, sentMs, status }: RateLimitAnswer) => {
      if (secret === undefined || status === 401) return
      if (status === 429) stats.refused++
      const group = groupOf(instance, secret)
      // Over a real network the limiter saw it between the send and the answer (none: not judged).
      if (answeredMs !== undefined) {
        if (status === null) group.uncertain = true
        else group.spans.push({ fromMs: sentMs, toMs: answeredMs, status })
        return
      }
      // Through for sure: a 2xx (a 4xx might have been decided before the limiter saw it).
      const through = status !== null && status >= 200 && status < 300
      const maybe = status !== 429
      if (!exact) {
        if (maybe) group.uncertain = true
        return
      }
      if (through) group.through.push(sentMs)
      if (maybe) group.maybe.push(sentMs)
      else group.refused.push(sentMs)
    },
    /** At the end: both rules for every key on every instance. */
    audit: () => {
      let instance = 0
      const ascending = (a: number, b: number) => a - b
      for (const ofInstance of groups.values()) {
        instance++
        for (const group of ofInstance.values()) {
          group.through.sort(ascending)
          group.maybe.sort(ascending)
          group.refused.sort(ascending)
          if (group.spans.length > 0) {
            // A request with no answer may or may not have taken a token: the refusals are not judged.
            if (group.uncertain) {
              group.spans.splice(
                0,
                group.spans.length,
                ...group.spans.filter((r) => r.status !== 429)
              )
            }
            checkSpans(group, instance)
            continue
          }
          checkThrough(group, instance)
          checkRefused(group, instance)
        }
      }
    }
  }
}

export type RateLimitLaw = ReturnType<typeof rateLimitLaw>

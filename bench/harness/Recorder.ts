/**
 * What the driver records of every request: HDR histograms of latency (hdr-histogram-js) per
 * route and overall, status codes, and one histogram per second of the run for the
 * latency-over-time chart. Histograms are kept encoded (compressed base64) in the result, so
 * `harness merge` adds the shards' histograms instead of averaging their percentiles.
 */
import * as hdr from "hdr-histogram-js"

/** Latencies are recorded in microseconds, from 1 µs to 10 minutes, with 3 significant digits. */
const highestMicros = 600_000_000
const newHistogram = (digits: 2 | 3 = 3) =>
  hdr.build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: highestMicros,
    numberOfSignificantValueDigits: digits,
    autoResize: false
  })

const toMicros = (ms: number) => Math.min(highestMicros, Math.max(1, Math.round(ms * 1000)))

/** What `recordMicros` uses of the histograms `hdr.build` makes (its JS ones: no WebAssembly asked for). */
interface JsCounts {
  readonly subBucketHalfCountMagnitude: number
  incrementCountAtIndex(index: number): void
  updateMinAndMax(value: number): void
  incrementTotalCount(): void
}

/**
 * `histogram.recordValue(micros)` for a whole number of microseconds from 1 to `highestMicros`
 * (what `toMicros` gives), with the bucket found by integer arithmetic: hdr-histogram-js finds it
 * with `Math.log2` and two `Math.pow` per value, nine values a request, a measured share of the
 * driver's CPU. The same index as its `countsArrayIndex` (lowest discernible value 1, so a unit
 * magnitude of 0): bucket `floor(log2(v)) - m`, at least 0; sub-bucket `v >> bucket`; index
 * `(bucket + 1) * 2^m + sub-bucket - 2^m`, m being the sub-bucket half count's magnitude.
 */
export const recordMicros = (histogram: hdr.Histogram, micros: number) => {
  const counts = histogram as unknown as JsCounts
  const magnitude = counts.subBucketHalfCountMagnitude
  const bucket = Math.max(0, 31 - Math.clz32(micros) - magnitude)
  counts.incrementCountAtIndex(((bucket + 1) << magnitude) + (micros >>> bucket) - (1 << magnitude))
  counts.updateMinAndMax(micros)
  counts.incrementTotalCount()
}

/** An HTTP status; "dropped": sent and no answer (reset, timed out); "refused": no instance took the connection. */
export type Status = number | "dropped" | "refused"

/** A failure for the error rate: no answer (dropped, timed out, refused) or a 5xx. 4xx answers are the scenario's business. */
export const isError = (status: Status) => typeof status !== "number" || status >= 500

/**
 * The route of a path: the query dropped and every id-like segment (`pay_3Fh...`, digits)
 * replaced by `:id`, so per-route figures do not split by payment.
 */
export const routeTemplate = (method: string, path: string) => {
  let byMethod = templates.get(path)
  if (byMethod === undefined) {
    if (templates.size >= templatesKept) templates.clear()
    byMethod = new Map()
    templates.set(path, byMethod)
  }
  let template = byMethod.get(method)
  if (template === undefined) {
    template = templateOf(method, path)
    byMethod.set(method, template)
  }
  return template
}

/**
 * Templates by path, then method, as sent: most requests repeat a path (every one of `health`'s),
 * and splitting and matching each again was a measured share of the driver's CPU; keyed by the
 * path as it comes (no `METHOD path` key built and hashed per request). Paths with ids repeat
 * less; the map is emptied when it holds `templatesKept` paths.
 */
const templates = new Map<string, Map<string, string>>()
const templatesKept = 4096

const templateOf = (method: string, path: string) => {
  const query = path.indexOf("?")
  const bare = query === -1 ? path : path.slice(0, query)
  const segments = bare.split("/").map((segment) =>
    /^v\d+$/.test(segment) || segment === "" ?
      segment
      : /^\d+$/.test(segment) || /^[a-z]{2,8}_[A-Za-z0-9_-]{8,}$/.test(segment) || /\d/.test(segment) ?
      ":id"
      : segment
  )
  return `${method} ${segments.join("/")}`
}

export interface Percentiles {
  readonly p50: number
  readonly p90: number
  readonly p99: number
  readonly p999: number
  readonly max: number
  readonly mean: number
}

/** Percentiles of a histogram, in milliseconds. */
export const percentilesOf = (histogram: hdr.Histogram): Percentiles => {
  const ms = (micros: number) => Math.round(micros) / 1000
  return histogram.totalCount === 0
    ? { p50: 0, p90: 0, p99: 0, p999: 0, max: 0, mean: 0 }
    : {
      p50: ms(histogram.getValueAtPercentile(50)),
      p90: ms(histogram.getValueAtPercentile(90)),
      p99: ms(histogram.getValueAtPercentile(99)),
      p999: ms(histogram.getValueAtPercentile(99.9)),
      // From the buckets, as a decoded (merged) histogram reads it, not the exact value recorded.
      max: ms(histogram.getValueAtPercentile(100)),
      mean: ms(histogram.mean)
    }
}

export const encodeHistogram = (histogram: hdr.Histogram) => hdr.encodeIntoCompressedBase64(histogram)
export const decodeHistogram = (encoded: string) => hdr.decodeFromCompressedBase64(encoded, 32, false)

/** The sum of encoded histograms, decoded (with the precision of the first: per-second histograms keep 2 digits). */
export const mergeEncoded = (encoded: ReadonlyArray<string>) => {
  if (encoded.length === 0) return newHistogram()
  const total = decodeHistogram(encoded[0]!)
  for (const text of encoded.slice(1)) {
    const part = decodeHistogram(text)
    total.add(part)
    part.destroy()
  }
  return total
}

export interface RouteFigures {
  readonly route: string
  readonly requests: number
  readonly errors: number
  readonly status_codes: Record<string, number>
  readonly latency_ms: Percentiles
  /** The HDR histogram of the latencies in microseconds, encoded (compressed base64). */
  readonly histogram_us: string
  /** The route's answers second by second (seconds without one left out); absent in a merge and in older files. */
  readonly timeline?: ReadonlyArray<RouteSecond>
  /** Of its answered requests: the wait for a socket, and the service's time from the write to the answer (absent in a merge and in older files). */
  readonly socket_wait_ms?: Percentiles
  readonly service_ms?: Percentiles
}

/** Where an answered request's time went on the driver's side of the wire. */
export interface Phases {
  /** From the request handed to the transport to a socket ready to write on: its turn among the requests in flight, the client's queue, a connect. */
  readonly socketWaitMs: number
  /** From the write to the whole answer read. */
  readonly serviceMs: number
}

/** One second of a route's answers: how many, and their p50 and p99 (2 significant digits). */
export interface RouteSecond {
  readonly at_s: number
  readonly requests: number
  readonly p50_ms: number
  readonly p99_ms: number
}

export interface SecondFigures {
  /** The second's start, in seconds since the start of the run (when the answers came). */
  readonly at_s: number
  readonly requests: number
  readonly errors: number
  readonly latency_ms: Percentiles
  /** As `RouteFigures.histogram_us`, with 2 significant digits. */
  readonly histogram_us: string
  /**
   * Requests issued in this second (by intended start, or send for a script's later requests),
   * whenever they were answered: the load offered as it was met, against `requests` answered
   * (absent in older files).
   */
  readonly issued?: number
  /** The load model's offered rate at the middle of this second (null: closed model; absent in older files). */
  readonly offered_per_s?: number | null
}

interface RouteCounters {
  readonly histogram: hdr.Histogram
  readonly statusCodes: Map<Status, number>
  errors: number
  /** The second being filled, for the route's own timeline (2 digits, reset each second). */
  readonly second: hdr.Histogram
  readonly seconds: Array<RouteSecond>
  readonly socketWait: hdr.Histogram
  readonly service: hdr.Histogram
}

/**
 * Which requests of the load the objectives and the verdict judge (`--warmup`, `--abort-on-fail`):
 * those issued from `fromMs` on, at most `cap` of them in the order they were issued (null: no
 * cap). The others are recorded all the same, in the run's own figures.
 */
export interface JudgeRules {
  readonly fromMs: number
  readonly cap: number | null
  /** Sees every judged request as it is recorded (the abort watch). */
  readonly onJudged?: (route: string, status: Status, latencyMs: number) => void
}

export class Recorder {
  private readonly overall = newHistogram()
  private readonly socketWait = newHistogram()
  private readonly service = newHistogram()
  private readonly routes = new Map<string, RouteCounters>()
  private readonly seconds: Array<SecondFigures> = []
  /** The second being filled: a smaller histogram, encoded and dropped when the second ends (memory stays flat). */
  private current = newHistogram(2)
  private currentSecond = 0
  private currentErrors = 0
  requests = 0
  errors = 0
  /** Since the last `takeInterval`: for the progress line. */
  private intervalRequests = 0
  private intervalErrors = 0
  private interval = newHistogram(2)

  /**
   * When each request was answered, and when it was issued (its intended start, or its send):
   * ms, in recording order, for the achieved rate over a window.
   */
  private answeredAt = new Float64Array(4096)
  private issuedAt = new Float64Array(4096)
  private answered = 0
  /** Requests issued in each second of the run (index: the second), counted when they are recorded. */
  private issuedPerSecond: Array<number> = []

  /** The judged requests' own figures; null when every request is judged (this recorder's figures are theirs). */
  readonly judged: Recorder | null
  private admitted = 0

  constructor(private readonly startMs: number, private readonly rules: JudgeRules | null = null) {
    this.judged = rules === null ? null : new Recorder(startMs)
  }

  /** Whether a request issued at `issuedAtMs` is judged; asked once, when it is sent. */
  admit(issuedAtMs: number): boolean {
    if (this.rules === null) return true
    if (issuedAtMs < this.rules.fromMs || (this.rules.cap !== null && this.admitted >= this.rules.cap)) return false
    this.admitted++
    return true
  }

  /** The figures the objectives read: the judged requests'. */
  judgedFigures(): Recorder {
    return this.judged ?? this
  }

  /** Each route's answers so far by status, and its latency percentiles (ms), for live telemetry. */
  routesNow(): Array<
    {
      readonly route: string
      readonly statusCodes: ReadonlyMap<Status, number>
      readonly count: number
      readonly quantilesMs: ReadonlyArray<readonly [number, number]>
    }
  > {
    return [...this.routes].map(([route, counters]) => ({
      route,
      statusCodes: counters.statusCodes,
      count: counters.histogram.totalCount,
      quantilesMs: [0.5, 0.9, 0.99, 0.999].map((q) =>
        [q, counters.histogram.getValueAtPercentile(q * 100) / 1000] as const
      )
    }))
  }

  /** Requests answered (or given up) from `fromMs` (inclusive) to `toMs` (exclusive). */
  answeredBetween(fromMs: number, toMs: number): number {
    return this.countBetween(this.answeredAt, fromMs, toMs)
  }

  /** Requests issued from `fromMs` (inclusive) to `toMs` (exclusive), of those recorded so far. */
  issuedBetween(fromMs: number, toMs: number): number {
    return this.countBetween(this.issuedAt, fromMs, toMs)
  }

  private countBetween(times: Float64Array, fromMs: number, toMs: number) {
    let count = 0
    for (let i = 0; i < this.answered; i++) {
      const at = times[i]!
      if (at >= fromMs && at < toMs) count++
    }
    return count
  }

  record(route: string, status: Status, latencyMs: number, atMs: number, judged = true, phases: Phases | null = null) {
    if (judged && this.judged !== null) {
      this.judged.record(route, status, latencyMs, atMs)
      this.rules!.onJudged?.(route, status, latencyMs)
    }
    const micros = toMicros(latencyMs)
    const second = Math.max(0, Math.floor((atMs - this.startMs) / 1000))
    if (second > this.currentSecond) this.closeSeconds(second)
    const error = isError(status)
    recordMicros(this.overall, micros)
    recordMicros(this.current, micros)
    recordMicros(this.interval, micros)
    let counters = this.routes.get(route)
    if (counters === undefined) {
      counters = {
        histogram: newHistogram(),
        statusCodes: new Map(),
        errors: 0,
        second: newHistogram(2),
        seconds: [],
        socketWait: newHistogram(2),
        service: newHistogram(2)
      }
      this.routes.set(route, counters)
    }
    recordMicros(counters.histogram, micros)
    recordMicros(counters.second, micros)
    if (phases !== null) {
      const waitMicros = toMicros(phases.socketWaitMs)
      const serviceMicros = toMicros(phases.serviceMs)
      recordMicros(this.socketWait, waitMicros)
      recordMicros(this.service, serviceMicros)
      recordMicros(counters.socketWait, waitMicros)
      recordMicros(counters.service, serviceMicros)
    }
    counters.statusCodes.set(status, (counters.statusCodes.get(status) ?? 0) + 1)
    this.requests++
    this.intervalRequests++
    if (this.answered === this.answeredAt.length) {
      const grownAnswered = new Float64Array(this.answeredAt.length * 2)
      grownAnswered.set(this.answeredAt)
      this.answeredAt = grownAnswered
      const grownIssued = new Float64Array(this.issuedAt.length * 2)
      grownIssued.set(this.issuedAt)
      this.issuedAt = grownIssued
    }
    const issuedAtMs = atMs - latencyMs
    const issuedSecond = Math.max(0, Math.floor((issuedAtMs - this.startMs) / 1000))
    while (this.issuedPerSecond.length <= issuedSecond) this.issuedPerSecond.push(0)
    this.issuedPerSecond[issuedSecond]!++
    this.issuedAt[this.answered] = issuedAtMs
    this.answeredAt[this.answered++] = atMs
    if (error) {
      counters.errors++
      this.errors++
      this.currentErrors++
      this.intervalErrors++
    }
  }

  /** Ends every second before `second` (empty ones too: the timeline has no gaps). */
  private closeSeconds(second: number) {
    while (this.currentSecond < second) {
      this.seconds.push({
        at_s: this.currentSecond,
        requests: this.current.totalCount,
        errors: this.currentErrors,
        latency_ms: percentilesOf(this.current),
        histogram_us: encodeHistogram(this.current)
      })
      this.current.reset()
      this.currentErrors = 0
      for (const counters of this.routes.values()) {
        if (counters.second.totalCount === 0) continue
        counters.seconds.push({
          at_s: this.currentSecond,
          requests: counters.second.totalCount,
          p50_ms: Math.round(counters.second.getValueAtPercentile(50)) / 1000,
          p99_ms: Math.round(counters.second.getValueAtPercentile(99)) / 1000
        })
        counters.second.reset()
      }
      this.currentSecond++
    }
  }

  /** Requests and errors since the last call, and the whole run's p50 and p99 so far (ms). */
  /** The requests answered since the last call, their errors and their own percentiles (not the run's so far). */
  takeInterval() {
    const taken = {
      requests: this.intervalRequests,
      errors: this.intervalErrors,
      p50: this.interval.getValueAtPercentile(50) / 1000,
      p99: this.interval.getValueAtPercentile(99) / 1000
    }
    this.intervalRequests = 0
    this.intervalErrors = 0
    this.interval.reset()
    return taken
  }

  /** The figures so far; the second in progress is closed at `endMs`. */
  finish(endMs: number) {
    const last = Math.max(0, Math.ceil((endMs - this.startMs) / 1000))
    if (this.current.totalCount > 0 || this.currentSecond < last) {
      this.closeSeconds(Math.max(last, this.currentSecond + (this.current.totalCount > 0 ? 1 : 0)))
    }
    const statusCodes: Record<string, number> = {}
    const routes: Array<RouteFigures> = [...this.routes].sort(([a], [b]) => a.localeCompare(b)).map(
      ([route, counters]) => {
        const codes: Record<string, number> = {}
        for (const [status, count] of counters.statusCodes) {
          codes[String(status)] = count
          statusCodes[String(status)] = (statusCodes[String(status)] ?? 0) + count
        }
        return {
          route,
          requests: counters.histogram.totalCount,
          errors: counters.errors,
          status_codes: codes,
          latency_ms: percentilesOf(counters.histogram),
          histogram_us: encodeHistogram(counters.histogram),
          timeline: [...counters.seconds],
          socket_wait_ms: percentilesOf(counters.socketWait),
          service_ms: percentilesOf(counters.service)
        }
      }
    )
    return {
      requests: this.requests,
      errors: this.errors,
      status_codes: statusCodes,
      latency_ms: percentilesOf(this.overall),
      histogram_us: encodeHistogram(this.overall),
      routes,
      timeline: this.seconds.map((second) => ({ ...second, issued: this.issuedPerSecond[second.at_s] ?? 0 })),
      socket_wait_ms: percentilesOf(this.socketWait),
      socket_wait_histogram_us: encodeHistogram(this.socketWait),
      service_ms: percentilesOf(this.service),
      service_histogram_us: encodeHistogram(this.service)
    }
  }
}

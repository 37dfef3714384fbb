/**
 * Availability over the load: of the requests handed to the transport in a span of time, how
 * many got an answer (any status below 500) and how many failed: a 5xx, no answer after the
 * request went out ("dropped": reset or timed out), or no instance taking the connection
 * ("refused"). Counted by when each request was handed over, in buckets of 100 ms from the
 * load's start, so a fault's window (known only once it ended) is read after the fact, and a
 * request sent during a pause that timed out after it counts against the pause.
 */
import type { Status } from "./Recorder.ts"

export interface AvailabilityFigures {
  readonly requests: number
  /** Answered with a status below 500. */
  readonly answered: number
  readonly server_errors: number
  readonly dropped: number
  readonly refused: number
  /** answered / requests; null without requests. */
  readonly availability: number | null
}

const bucketMs = 100
/** Counters a bucket: answered, 5xx, dropped, refused. */
const width = 4

export class AvailabilityRecorder {
  private counts = new Float64Array(width * 1024)
  private buckets = 0

  /** @param startMs the load's start on the clock the transport reads. */
  constructor(private readonly startMs: number) {}

  record(status: Status, sentAtMs: number) {
    const bucket = Math.max(0, Math.floor((sentAtMs - this.startMs) / bucketMs))
    if ((bucket + 1) * width > this.counts.length) {
      const grown = new Float64Array(Math.max(this.counts.length * 2, (bucket + 1) * width))
      grown.set(this.counts)
      this.counts = grown
    }
    this.buckets = Math.max(this.buckets, bucket + 1)
    const column = typeof status === "number" ? (status < 500 ? 0 : 1) : status === "dropped" ? 2 : 3
    this.counts[bucket * width + column]!++
  }

  /** Requests handed over from `fromMs` (inclusive) to `toMs` (exclusive), ms since the load's start, to the bucket. */
  between(fromMs: number, toMs: number): AvailabilityFigures {
    const first = Math.max(0, Math.floor(fromMs / bucketMs))
    const last = Math.min(this.buckets, Math.ceil(toMs / bucketMs))
    const sums = [0, 0, 0, 0]
    for (let bucket = first; bucket < last; bucket++) {
      for (let column = 0; column < width; column++) sums[column]! += this.counts[bucket * width + column]!
    }
    return figuresOf(sums[0]!, sums[1]!, sums[2]!, sums[3]!)
  }

  overall(): AvailabilityFigures {
    return this.between(0, this.buckets * bucketMs)
  }
}

export const figuresOf = (
  answered: number,
  serverErrors: number,
  dropped: number,
  refused: number
): AvailabilityFigures => {
  const requests = answered + serverErrors + dropped + refused
  return {
    requests,
    answered,
    server_errors: serverErrors,
    dropped,
    refused,
    availability: requests === 0 ? null : answered / requests
  }
}

/** `whole` less `part` (the requests outside the faults' windows). */
export const without = (whole: AvailabilityFigures, part: AvailabilityFigures): AvailabilityFigures =>
  figuresOf(
    whole.answered - part.answered,
    whole.server_errors - part.server_errors,
    whole.dropped - part.dropped,
    whole.refused - part.refused
  )

export const sumOf = (parts: ReadonlyArray<AvailabilityFigures>): AvailabilityFigures =>
  figuresOf(
    parts.reduce((n, p) => n + p.answered, 0),
    parts.reduce((n, p) => n + p.server_errors, 0),
    parts.reduce((n, p) => n + p.dropped, 0),
    parts.reduce((n, p) => n + p.refused, 0)
  )

/**
 * Webhook redeliveries as the merchants' endpoints see them. Delivery is at least once
 * (CONTRACT.md section 8): an event may reach its endpoint again when an earlier attempt was cut
 * off before the service learnt its outcome: its answer never came in time (the endpoint held it,
 * or the service's timeout closed the connection first), or the process that sent it died or
 * stalled (a fault of the nemesis). Such a POST is a redelivery, counted here; a POST after the
 * endpoint answered the last one with a failure (4xx, 5xx, a dropped connection) is an ordinary
 * retry.
 *
 * What may excuse a redelivery is judged by the endpoints' own checks (sim/world/Endpoints.ts,
 * told of the faults) and the final audit: nothing after a 2xx the service recorded, and one
 * attempt number reaching the endpoint once unless a fault explains it. What is kept here is
 * what those checks cannot know: a service that records cut attempts (section 8) sends the
 * attempt cut off again as the NEXT number, so the same number twice is wrong there even across
 * a fault; `sameAttempt` lists those repeats for the final check.
 */

/** What the endpoint did with the latest POST of an event, as the service could have learnt it. */
type LastAnswer = "none" | "2xx" | "failure"

interface EventPosts {
  /** Numbers the event's POSTs; an answer belongs to the latest only. */
  posts: number
  attempt: number
  atMs: number
  answer: LastAnswer
}

/** A repeat of the same attempt number that a fault may explain (the final check reads it under section 8). */
export interface SameAttemptRepeat {
  readonly eventId: string
  readonly deliveryId: string
  readonly attempt: number
  /** Epoch ms of the first POST of that number and of its repeat. */
  readonly firstAtMs: number
  readonly atMs: number
  /** A fault began between the two. */
  readonly afterFault: boolean
}

export class Redeliveries {
  private readonly events = new Map<string, EventPosts>()
  /** POSTs of an event after one whose outcome the service did not learn from the endpoint. */
  count = 0
  /** Of them, those after a fault began (a process killed or paused since the earlier POST). */
  afterFault = 0
  readonly sameAttempt: Array<SameAttemptRepeat> = []

  /** @param lastFaultMs when the latest fault began (epoch ms; -Infinity: none yet). */
  constructor(private readonly lastFaultMs: () => number = () => Number.NEGATIVE_INFINITY) {}

  /**
   * A POST of `eventId` reached the endpoint at `atMs` (epoch ms). Returns its number among the
   * event's POSTs, for `answered`.
   */
  received(eventId: string, deliveryId: string, attempt: number, atMs: number): number {
    const last = this.events.get(eventId)
    if (last === undefined) {
      this.events.set(eventId, { posts: 1, attempt, atMs, answer: "none" })
      return 1
    }
    if (last.answer !== "failure") {
      const afterFault = this.lastFaultMs() >= last.atMs
      this.count++
      if (afterFault) this.afterFault++
      if (attempt === last.attempt) this.sameAttempt.push({ eventId, deliveryId, attempt, firstAtMs: last.atMs, atMs, afterFault })
    }
    last.posts++
    last.attempt = attempt
    last.atMs = atMs
    last.answer = "none"
    return last.posts
  }

  /**
   * The endpoint wrote an answer to POST number `post` of the event (a 2xx, a failure status), or
   * dropped its connection (`null`: a refused connection to the service). An answer never
   * written (the POST held, its connection closed first) leaves it unanswered.
   */
  answered(eventId: string, post: number, status: number | null) {
    const last = this.events.get(eventId)
    if (last === undefined || last.posts !== post) return
    last.answer = status !== null && status >= 200 && status < 300 ? "2xx" : "failure"
  }
}

/**
 * The repeats of one attempt number that section 8 forbids even across a fault, as messages of
 * `webhook-once-per-attempt`: none unless the service records cut attempts (then it numbers the
 * redelivery onwards). A repeat with no fault before it is not here: the endpoints refused it as
 * it came.
 */
export const sameNumberAfterCut = (repeats: ReadonlyArray<SameAttemptRepeat>, recordsCuts: boolean): Array<string> =>
  !recordsCuts ? [] : repeats.filter((repeat) => repeat.afterFault).map((repeat) =>
    `delivery ${repeat.deliveryId} (event ${repeat.eventId}): attempt ${repeat.attempt} arrived again at ${new Date(repeat.atMs).toISOString()} ` +
    `(first at ${new Date(repeat.firstAtMs).toISOString()}, a fault between): an attempt cut off is sent again as the next attempt number`)

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
import { grownTo } from "../../../sim/engine/Columns.ts"

/** What the endpoint did with the latest POST of an event, as the service could have learnt it. */
const unanswered = 0
const answered2xx = 1
const answeredFailure = 2

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

/**
 * The latest POST of each event, by the event's slot in the endpoints' receipts
 * (`Receipts.ofEvent`), in columns as the receipts keep theirs: a long run delivers millions of
 * events, and numbers in typed arrays cost the collector nothing.
 */
export class Redeliveries {
  /** POSTs of the event so far (0: none); an answer belongs to the latest only. */
  private posts = new Int32Array(0)
  private attempt = new Float64Array(0)
  private atMs = new Float64Array(0)
  private answer = new Uint8Array(0)
  /** POSTs of an event after one whose outcome the service did not learn from the endpoint. */
  count = 0
  /** Of them, those after a fault began (a process killed or paused since the earlier POST). */
  afterFault = 0
  readonly sameAttempt: Array<SameAttemptRepeat> = []

  /** @param lastFaultMs when the latest fault began (epoch ms; -Infinity: none yet). */
  constructor(private readonly lastFaultMs: () => number = () => Number.NEGATIVE_INFINITY) {}

  /**
   * A POST of the event in receipts slot `slot` reached the endpoint at `atMs` (epoch ms).
   * Returns its number among the event's POSTs, for `answered`.
   */
  received(slot: number, eventId: string, deliveryId: string, attempt: number, atMs: number): number {
    if (slot >= this.posts.length) this.grow(slot + 1)
    const posts = this.posts[slot]!
    if (posts > 0 && this.answer[slot] !== answeredFailure) {
      const afterFault = this.lastFaultMs() >= this.atMs[slot]!
      this.count++
      if (afterFault) this.afterFault++
      if (attempt === this.attempt[slot]) {
        this.sameAttempt.push({ eventId, deliveryId, attempt, firstAtMs: this.atMs[slot]!, atMs, afterFault })
      }
    }
    this.posts[slot] = posts + 1
    this.attempt[slot] = attempt
    this.atMs[slot] = atMs
    this.answer[slot] = unanswered
    return posts + 1
  }

  /**
   * The endpoint wrote an answer to POST number `post` of the event in `slot` (a 2xx, a failure
   * status), or dropped its connection (`null`: a refused connection to the service). An answer
   * never written (the POST held, its connection closed first) leaves it unanswered.
   */
  answered(slot: number, post: number, status: number | null) {
    if (slot < 0 || slot >= this.posts.length || this.posts[slot] !== post) return
    this.answer[slot] = status !== null && status >= 200 && status < 300 ? answered2xx : answeredFailure
  }

  private grow(size: number) {
    this.posts = grownTo(this.posts, size, (n) => new Int32Array(n))
    this.attempt = grownTo(this.attempt, size, (n) => new Float64Array(n))
    this.atMs = grownTo(this.atMs, size, (n) => new Float64Array(n))
    this.answer = grownTo(this.answer, size, (n) => new Uint8Array(n))
  }
}

/**
 * The repeats of one attempt number that section 8 forbids even across a fault, as messages of
 * `webhook-once-per-attempt`: none unless the service records cut attempts (then it numbers the
 * redelivery onwards). A repeat with no fault before it is not here: the endpoints refused it as
 * it came.
 */
export const sameNumberAfterCut = (repeats: ReadonlyArray<SameAttemptRepeat>, recordsCuts: boolean): Array<string> =>
  !recordsCuts ?
    [] :
    repeats.filter((repeat) => repeat.afterFault).map((repeat) =>
      `delivery ${repeat.deliveryId} (event ${repeat.eventId}): attempt ${repeat.attempt} arrived again at ${
        new Date(repeat.atMs).toISOString()
      } ` +
      `(first at ${
        new Date(repeat.firstAtMs).toISOString()
      }, a fault between): an attempt cut off is sent again as the next attempt number`
    )

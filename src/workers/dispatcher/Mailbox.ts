import { Effect } from "effect"

/**
 * An endpoint actor's bounded queue (src/workers/dispatcher/Endpoints.ts). It behaves as
 * `Queue.dropping` does (an offer beyond the capacity is refused; a taker waiting gets the next
 * item, first come first served), with a synchronous `offer` and `takeAll`, and a taker resumed
 * in the offer's own turn. A hot path (docs/architecture.md): every claim passes through it.
 */

/** A worker's place among its mailbox's takers while it waits (null: not waiting). */
export interface WaitingPlace<A> {
  taker: ((item: A) => void) | null
}

export class Mailbox<A> {
  private items: Array<A> = []
  private head = 0
  private readonly takers: Array<(item: A) => void> = []

  /** `taken` is told of each item as it leaves the mailbox for a taker (at the hand-over, before the taker resumes). */
  constructor(private readonly capacity: number, private readonly taken: (item: A) => void) {}

  /** False when full: the caller gives the item back. */
  offer(item: A): boolean {
    const taker = this.takers.shift()
    if (taker !== undefined) {
      taker(item)
      return true
    }
    if (this.items.length - this.head >= this.capacity) return false
    this.items.push(item)
    return true
  }

  /**
   * The next item, waiting for one when there is none. The wait registers no canceller (Effect
   * wraps every async that returns one in an interruption handler): the worker gives its waiting
   * place back with `cancel` once, from the one handler it runs under.
   */
  take(place: WaitingPlace<A>): Effect.Effect<A> {
    return Effect.callback<A>((resume) => {
      if (this.head < this.items.length) {
        const item = this.items[this.head]!
        this.items[this.head++] = undefined as never
        if (this.head === this.items.length) {
          this.items = []
          this.head = 0
        }
        this.taken(item)
        return resume(Effect.succeed(item))
      }
      const taker = (item: A) => {
        place.taker = null
        this.taken(item)
        resume(Effect.succeed(item))
      }
      place.taker = taker
      this.takers.push(taker)
    })
  }

  /** Takes back a worker's waiting place (its fiber is interrupted): no item is handed to it any more. */
  cancel(place: WaitingPlace<A>) {
    const taker = place.taker
    if (taker === null) return
    place.taker = null
    const index = this.takers.indexOf(taker)
    if (index >= 0) this.takers.splice(index, 1)
  }

  takeAll(): Array<A> {
    const items = this.items.slice(this.head)
    this.items = []
    this.head = 0
    return items
  }
}

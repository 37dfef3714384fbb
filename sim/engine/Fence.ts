import { Effect } from "effect"

/** Set when the instance dies: from then on it reaches nothing outside the process. */
export interface Fence {
  dead: boolean
  /**
   * While the instance is paused (sim/world/Service.ts `pause`): the calls it made to the outside since,
   * each resumed in order when it resumes. Null while it runs.
   */
  held: Array<() => void> | null
}

/**
 * A call of a paused instance to the outside: it waits until the instance resumes, then is made
 * (through the fence again: the instance may have died meanwhile). A pause thus lands at the
 * instance's next call to the outside, and whatever it computed before (times read, claims and
 * leases it believes it holds) it uses after, as a process stopped between two instructions does.
 */
export const heldBy = <A, E>(fence: Fence, call: () => Effect.Effect<A, E>): Effect.Effect<A, E> =>
  Effect.andThen(
    Effect.callback<void>((resume) => {
      fence.held!.push(() => resume(Effect.void))
    }),
    Effect.suspend(() => (fence.dead ? Effect.interrupt : fence.held !== null ? heldBy(fence, call) : call()))
  )

/**
 * Time as the load models see it. The driver runs on `realClock`; tests run the same scheduling
 * code on a `VirtualClock`, whose time moves only when every task is waiting on it.
 */
export interface Clock {
  /** Milliseconds on a monotonic clock (performance.now() for the real one). */
  now(): number
  /** Resolves once `now()` has reached `now() + ms`. */
  sleep(ms: number): Promise<void>
}

export const realClock: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((done) => setTimeout(done, Math.max(0, ms)))
}

/**
 * Waits on `clock` until the wall clock (`wallNowMs`, ms since the epoch) reads `epochMs`: the
 * moment shards on several machines start their load together (`--start-at`). It sleeps at most a
 * minute at a time and reads the wall clock again, so a long wait follows the wall clock rather
 * than drifting from it. Resolves with how late it woke (ms past `epochMs`; a time already past
 * resolves at once).
 */
export const waitUntilEpoch = async (
  epochMs: number,
  clock: Clock,
  wallNowMs: () => number = Date.now
): Promise<number> => {
  for (;;) {
    const leftMs = epochMs - wallNowMs()
    if (leftMs <= 0) return Math.max(0, -leftMs)
    await clock.sleep(Math.min(leftMs, 60_000))
  }
}

interface Waiter {
  readonly at: number
  readonly order: number
  readonly wake: () => void
}

/** Lets promise callbacks and I/O callbacks already queued run (no time passes). */
const settle = () => new Promise<void>((done) => setImmediate(done))

export class VirtualClock implements Clock {
  private time: number
  private order = 0
  private readonly waiters: Array<Waiter> = []

  constructor(startMs = 0) {
    this.time = startMs
  }

  now() {
    return this.time
  }

  sleep(ms: number) {
    return new Promise<void>((wake) => {
      this.waiters.push({ at: this.time + Math.max(0, ms), order: this.order++, wake })
    })
  }

  /**
   * Runs `task` to its end: whenever nothing else can run, time jumps to the earliest sleeper's
   * wake-up. Throws when the task waits on something other than this clock (it could never end)
   * or needs more than `maxSteps` wake-ups.
   */
  async run<A>(task: Promise<A>, maxSteps = 10_000_000): Promise<A> {
    let finished = false
    const result = task.finally(() => (finished = true))
    result.catch(() => {})
    for (let step = 0; step < maxSteps; step++) {
      await settle()
      if (finished) return result
      if (this.waiters.length === 0) {
        await settle()
        if (finished) return result
        throw new Error("VirtualClock: the task waits on something other than the clock")
      }
      let next = 0
      for (let i = 1; i < this.waiters.length; i++) {
        const a = this.waiters[i]!, b = this.waiters[next]!
        if (a.at < b.at || (a.at === b.at && a.order < b.order)) next = i
      }
      const waiter = this.waiters.splice(next, 1)[0]!
      this.time = Math.max(this.time, waiter.at)
      waiter.wake()
    }
    throw new Error(`VirtualClock: more than ${maxSteps} wake-ups`)
  }
}

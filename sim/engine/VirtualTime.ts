import { Clock, type Context, Duration, Effect, identity, type Logger, Random, References, Scheduler } from "effect"
import { MinHeap } from "../../src/platform/MinHeap.ts"
import type { MillisecondScheduler } from "../../src/platform/Timers.ts"

/**
 * Discrete-event virtual time.
 *
 * - A custom `Scheduler` queues every fiber task instead of handing it to the event loop, so
 *   the driver can run them to exhaustion deterministically (first in, first out, whatever the
 *   priority Effect gives a task: the order is the simulation's, and it is one order).
 * - A custom `Clock` answers the virtual time and turns every `sleep` into a wake-up in a
 *   priority queue ordered by (time, sequence number).
 * - `run` alternates: drain every runnable task (all fibers settle), then jump virtual time
 *   straight to the earliest wake-up and fire it. No real timers, no promises: the whole
 *   simulation is one synchronous loop, so the same seed replays the same interleaving.
 */
export interface Timer {
  readonly atMs: number
  readonly sequence: number
  fire: (() => void) | null
}

/** Wake-ups come out by time, then in the order they were scheduled (sequence numbers are unique). */
const firesBefore = (a: Timer, b: Timer) => a.atMs < b.atMs || (a.atMs === b.atMs && a.sequence < b.sequence)

export interface RunLimits {
  /** Stop before firing a wake-up later than this virtual time. */
  readonly untilMs?: number
  /** Stop as soon as this returns true (checked after every settle). */
  readonly stop?: () => boolean
}

export class VirtualTime {
  nowMs: number
  /** Fiber tasks run so far and wake-ups fired so far (for the report and the benchmark). */
  tasksRun = 0
  timersFired = 0
  /** Largest V8 heap in use seen (sampled every 4,096 wake-ups): the run's memory high-water mark. */
  peakHeapBytes = 0
  private readonly heap = new MinHeap<Timer>(firesBefore)
  private sequence = 0
  private tasks: Array<() => void> = []
  private taskHead = 0

  readonly scheduler: Scheduler.Scheduler
  readonly clock: Clock.Clock

  constructor(startMs: number) {
    this.nowMs = startMs
    // One dispatcher for every fiber: they all queue on the same list.
    const dispatcher: Scheduler.SchedulerDispatcher = {
      scheduleTask: (task) => {
        this.tasks.push(task)
      },
      flush: () => this.settle()
    }
    this.scheduler = {
      executionMode: "async",
      // Fibers run until they suspend; nothing else could use the time slice anyway.
      shouldYield: () => false,
      makeDispatcher: () => dispatcher
    }
    const nanos = () => BigInt(this.nowMs) * 1_000_000n
    this.clock = {
      currentTimeMillisUnsafe: () => this.nowMs,
      currentTimeMillis: Effect.sync(() => this.nowMs),
      currentTimeNanosUnsafe: nanos,
      currentTimeNanos: Effect.sync(nanos),
      monotonicTimeNanosUnsafe: nanos,
      monotonicTimeNanos: Effect.sync(nanos),
      sleep: (duration: Duration.Duration) => {
        const ms = Duration.toMillis(duration)
        if (!Number.isFinite(ms)) return Effect.never
        // No canceller: an interrupted sleep's wake-up stays queued and resumes nothing (the fiber
        // ignores a resume once interrupted). Effect wraps every async that returns a canceller
        // in an onInterrupt (about ten instructions), and a simulation sleeps ~12 times a payment.
        return Effect.callback<void>((resume) => {
          this.at(this.nowMs + Math.max(0, Math.ceil(ms)), () => resume(Effect.void))
        })
      },
      // A callback at a time, no fiber (src/platform/Timers.ts: callbackTimerOf asks for it).
      scheduleMs: (task: () => void, ms: number) => {
        if (!Number.isFinite(ms)) return () => {}
        const timer = this.at(this.nowMs + Math.max(0, Math.ceil(ms)), task)
        return () => this.cancel(timer)
      }
    } as Clock.Clock & MillisecondScheduler
  }

  /** Calls `fire` when virtual time reaches `atMs` (after everything runnable has settled). */
  at(atMs: number, fire: () => void): Timer {
    const timer: Timer = { atMs: Math.max(atMs, this.nowMs), sequence: this.sequence++, fire }
    this.heap.push(timer)
    return timer
  }

  cancel(timer: Timer) {
    timer.fire = null
  }

  /** Runs queued fiber tasks until none is left. */
  settle() {
    while (this.taskHead < this.tasks.length) {
      const task = this.tasks[this.taskHead++]!
      this.tasksRun++
      task()
      if (this.taskHead > 4096 && this.taskHead * 2 > this.tasks.length) {
        this.tasks = this.tasks.slice(this.taskHead)
        this.taskHead = 0
      }
    }
    this.tasks.length = 0
    this.taskHead = 0
  }

  /** The time of the next live wake-up, or null when nothing is scheduled. */
  nextWakeUpMs(): number | null {
    while (true) {
      const top = this.heap.peek()
      if (top === undefined) return null
      if (top.fire !== null) return top.atMs
      this.heap.pop()
    }
  }

  sampleHeap() {
    this.peakHeapBytes = Math.max(this.peakHeapBytes, process.memoryUsage().heapUsed)
  }

  /** Settles, then fires wake-ups in order until a limit is reached or nothing is left. */
  run(limits: RunLimits = {}) {
    const untilMs = limits.untilMs ?? Number.POSITIVE_INFINITY
    while (true) {
      this.settle()
      if (limits.stop !== undefined && limits.stop()) return
      const next = this.nextWakeUpMs()
      if (next === null || next > untilMs) {
        if (next !== null || untilMs !== Number.POSITIVE_INFINITY) {
          this.nowMs = Math.max(this.nowMs, Math.min(untilMs, next ?? untilMs))
        }
        return
      }
      const timer = this.heap.pop()!
      this.nowMs = timer.atMs
      const fire = timer.fire!
      timer.fire = null
      if ((++this.timersFired & 4095) === 0) this.sampleHeap()
      fire()
    }
  }

  /**
   * The services of a run: fibers forked with them (`Effect.runForkWith`) use this scheduler,
   * this clock and a seeded `Random`, with logging silenced (a warning logger is passed in by the
   * caller when wanted).
   */
  runtime(seed: number, logger?: Logger.Logger<unknown, void>): Context.Context<never> {
    const program = Effect.context<never>().pipe(
      Effect.provideService(Clock.Clock, this.clock),
      Effect.provideService(Scheduler.Scheduler, this.scheduler),
      Effect.provideService(References.MinimumLogLevel, logger === undefined ? "None" : "Warn"),
      logger === undefined ? identity : Effect.provideService(References.CurrentLoggers, new Set([logger])),
      Random.withSeed(seed)
    )
    return Effect.runSync(program)
  }
}

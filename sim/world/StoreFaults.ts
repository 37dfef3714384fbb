import { Effect, type Exit } from "effect"
import { type StoreShape, StoreUnavailable } from "../../src/store/Store.ts"
import type { SplitCommit } from "../checks/Auditor.ts"
import { type Fence, heldBy } from "../engine/Fence.ts"
import type { FaultRates } from "../engine/Options.ts"
import type { Prng } from "../engine/Prng.ts"

/**
 * Infrastructure faults of the main store, between the service and the audited memory store:
 *
 * - `storedown`: an operation fails with `StoreUnavailable` before it runs (nothing changes), as
 *   when the pool cannot reach the database;
 * - `storeoutage`: windows in which every operation fails that way;
 * - `storelost`: a payment commit (create, change) or an API key rotation happens, the auditor
 *   sees it, but the caller gets `StoreUnavailable`, as when the connection dies before the
 *   commit is acknowledged: the service cannot tell whether it happened, and a retry with the
 *   same idempotency key must find the payment or the applied command instead of doing it again
 *   (a lost rotation locks the merchant out: it must notice and get a new key out of band);
 * - `crashcommit`: right after a commit (payment create/change, key rotation, a stored response)
 *   the process crashes; the caller never continues (the operation does not return), and the
 *   service drops every reply still on its way;
 * - `storefreeze`: windows in which the database answers nothing (SIGSTOP, a network that drops
 *   packets): every call made in one is received but hangs; its caller gives up after
 *   `storeCallTimeoutMs` with `StoreUnavailable` (as the pool's connect and statement timeouts
 *   make it on PostgreSQL), and the call itself runs when the database thaws, in the order the
 *   calls were received, whether or not its caller still waits (docs/operations.md: "what the
 *   server received runs when it thaws"). A caller still waiting gets its outcome.
 *
 * Every decision is drawn from the store's own stream, in the order the operations run; the
 * freeze windows from their own (`store-freezes`), so a run without them draws as before.
 */
/**
 * How long a call waits for a frozen database before its caller gets `StoreUnavailable`: the
 * connect and statement timeouts and their margin (docs/operations.md: 2 s + 3 s + 0.5 s).
 */
export const storeCallTimeoutMs = 5_500
export interface StoreFaultStats {
  /** Operations that ran while faults were armed (after the boot). */
  operations: number
  /** Failed before running, at random. */
  unavailable: number
  /** Failed before running, inside an outage window. */
  outageRefusals: number
  outages: number
  /** Committed, answered `StoreUnavailable`. */
  lostCommits: number
  /** Of those, API key rotations lost by `rotationlost` (their own draw). */
  lostRotations: number
  /** Committed, then the process crashed. */
  commitCrashes: number
  freezes: number
  /** Calls received while frozen, and of them those whose caller gave up before the thaw. */
  frozenCalls: number
  frozenTimeouts: number
}

export interface StoreFaultHooks {
  /** Faults are armed only while this holds (not while the merchants are created at boot). */
  readonly armed: () => boolean
  readonly nowMs: () => number
  /**
   * Crashes the instance behind `fence` (null: the running one) at once; false when it cannot
   * (down already, past the horizon).
   */
  readonly crashAfterCommit: (what: string, fence: Fence | null) => boolean
  /** A line for the trace. */
  readonly record: (line: string) => void
  /** Calls `task` at virtual time `atMs`; the answer cancels it (needed only with freezes). */
  readonly at?: (atMs: number, task: () => void) => () => void
  /** Runs `effect` in a fiber of its own and hands its exit to `done` (needed only with freezes). */
  readonly runDetached?: (
    effect: Effect.Effect<unknown, unknown>,
    done: (exit: Exit.Exit<unknown, unknown>) => void
  ) => void
  /**
   * An API key rotation committed: `keyId` is revoked, by the instance behind `fence` (null: the
   * unfenced store). Told whatever the caller is told (a lost answer, a crash, a thaw).
   */
  readonly keyRevoked?: (keyId: string, fence: Fence | null) => void
}

/** What an operation committed, if anything: the record it concerns and whether a lost acknowledgement is meaningful. */
type Committed = (
  args: ReadonlyArray<unknown>,
  outcome: unknown
) => { readonly subject: string; readonly mayLose: boolean } | null

const committing: Readonly<Record<string, Committed>> = {
  insertPayment: (args, outcome) =>
    (outcome as { _tag: string })._tag === "Inserted"
      ? { subject: (args[0] as Parameters<StoreShape["insertPayment"]>[0]).payment.id, mayLose: true }
      : null,
  openPayment: (args, outcome) =>
    (outcome as { _tag: string })._tag === "Opened"
      ? { subject: (args[0] as Parameters<StoreShape["openPayment"]>[0]).change.payment.id, mayLose: true }
      : null,
  // A payment written once with its whole flow and, with a key, its stored response.
  insertCreated: (args, outcome) =>
    outcome === true
      ? { subject: (args[0] as Parameters<StoreShape["insertCreated"]>[0]).change.payment.id, mayLose: true }
      : null,
  // The change and, with a key, the stored response: a lost acknowledgement leaves the retry a replay.
  commitChange: (args, outcome) =>
    outcome === true
      ? { subject: (args[0] as Parameters<StoreShape["commitChange"]>[0]).change.payment.id, mayLose: true }
      : null,
  updatePayment: (_, outcome) => {
    const result = outcome as Effect.Success<ReturnType<StoreShape["updatePayment"]>>
    return result._tag === "Applied" ? { subject: result.change.payment.id, mayLose: true } : null
  },
  // The old key is revoked and the new one stored: a lost answer locks the merchant out, and it
  // must notice (its retry gets 401) and get a new key out of band (sim/world/Workload.ts recoverKey).
  rotateApiKey: (args, outcome) => (outcome === "rotated" ? { subject: `key ${String(args[1])}`, mayLose: true } : null)
}

/**
 * Commits whose fault decision needs no outcome (always a commit, never a lost answer): the crash
 * is drawn before the operation, in the step that draws its refusal (the same draws, in the same
 * order: nothing runs between them but the operation itself, which draws nothing), and only a
 * call drawn to crash waits for the outcome. The others go on with no step after the operation.
 */
const committedWhatever: Readonly<Record<string, (args: ReadonlyArray<unknown>) => string>> = {
  // The response is stored; a crash now leaves the client without it, and its retry gets the replay.
  completeIdempotencyKey: (args) => `key ${String(args[1])}`
}

/** What `faultyStore` wraps, and the streams and hooks its faults come from. */
export interface StoreFaultOptions {
  readonly store: StoreShape
  readonly prng: Prng
  readonly faults: FaultRates
  readonly window: { readonly startMs: number; readonly endMs: number }
  readonly hooks: StoreFaultHooks
  /** Commits of `store` split for this wrapper to finish (sim/checks/Auditor.ts auditedStore): by operation name; none: `{}`. */
  readonly splitCommits: Readonly<Record<string, SplitCommit>>
  /** The freeze windows' own stream (absent: no freezes). */
  readonly freezePrng?: Prng
  /** How long a caller waits for a frozen database (a planted bug may make it wait for the thaw). Default `storeCallTimeoutMs`. */
  readonly callTimeoutMs?: number
  /** The stream of `rotationLost` (absent: no rotation answer lost that way). */
  readonly rotationPrng?: Prng
}

export const faultyStore = (
  { store, prng, faults, window, hooks, splitCommits, freezePrng, callTimeoutMs = storeCallTimeoutMs, rotationPrng }:
    StoreFaultOptions
): {
  readonly store: StoreShape
  readonly fencedBy: (fence: Fence) => StoreShape
  readonly stats: StoreFaultStats
  /** Was the database frozen at `ms` (a call received then waits for the thaw or its timeout)? */
  readonly frozenAt: (ms: number) => boolean
} => {
  // Outage windows first, so the per-operation draws that follow do not move them.
  const outages: Array<readonly [number, number]> = []
  const days = (window.endMs - window.startMs) / 86_400_000
  const count = faults.storeOutagesPerDay > 0 ? Math.floor(faults.storeOutagesPerDay * days + prng.float()) : 0
  for (let i = 0; i < count; i++) {
    const start = window.startMs + Math.floor(prng.float() * (window.endMs - window.startMs))
    outages.push([start, start + prng.int(1_000, 90_000)])
  }
  // Freeze windows: each ends with a thaw that runs what was received meanwhile, in order.
  const freezes: Array<readonly [number, number]> = []
  const freezeCount = freezePrng !== undefined && faults.storeFreezesPerDay > 0
    ? Math.floor(faults.storeFreezesPerDay * days + freezePrng.float())
    : 0
  for (let i = 0; i < freezeCount; i++) {
    const start = window.startMs + Math.floor(freezePrng!.float() * (window.endMs - window.startMs))
    freezes.push([start, start + freezePrng!.int(40_000, 180_000)])
  }
  const received: Array<() => void> = []
  if (freezes.length > 0) {
    if (hooks.at === undefined || hooks.runDetached === undefined) {
      throw new Error("sim: store freezes need the `at` and `runDetached` hooks")
    }
    for (const [, thawMs] of freezes) {
      hooks.at(thawMs, () => {
        // Calls received during the freeze run now, in order; a call received at the thaw itself
        // (by a task these start) waits for no one.
        const thawing = received.splice(0)
        for (const run of thawing) run()
      })
    }
  }
  const stats: StoreFaultStats = {
    operations: 0,
    unavailable: 0,
    outageRefusals: 0,
    outages: count,
    lostCommits: 0,
    lostRotations: 0,
    commitCrashes: 0,
    freezes: freezeCount,
    frozenCalls: 0,
    frozenTimeouts: 0
  }

  const frozen = (now: number) => {
    for (let i = 0; i < freezes.length; i++) {
      const [from, to] = freezes[i]!
      if (now >= from && now < to) return true
    }
    return false
  }

  /**
   * A call received by the frozen database: `operation` runs at the thaw (in a fiber of its own:
   * the database does not wait for the caller), and the caller gets its outcome if still waiting,
   * else `StoreUnavailable` once `callTimeoutMs` has passed.
   */
  const receivedFrozen = (
    name: string,
    operation: () => Effect.Effect<unknown, unknown>
  ): Effect.Effect<unknown, unknown> =>
    Effect.callback<unknown, unknown>((resume) => {
      stats.frozenCalls++
      let waiting = true
      const cancel = Number.isFinite(callTimeoutMs)
        ? hooks.at!(hooks.nowMs() + callTimeoutMs, () => {
          if (!waiting) return
          waiting = false
          stats.frozenTimeouts++
          resume(Effect.fail(new StoreUnavailable({ cause: `sim: database frozen, ${name} unanswered` })))
        })
        : () => {}
      received.push(() =>
        hooks.runDetached!(operation(), (exit) => {
          if (!waiting) return
          waiting = false
          cancel()
          resume(exit)
        })
      )
    })

  const inOutage = (now: number) => {
    for (let i = 0; i < outages.length; i++) {
      const [from, to] = outages[i]!
      if (now >= from && now < to) return true
    }
    return false
  }

  const refuse = (): StoreUnavailable | null => {
    if (!hooks.armed()) return null
    stats.operations++
    const now = hooks.nowMs()
    if (inOutage(now)) {
      stats.outageRefusals++
      return new StoreUnavailable({ cause: "sim: store outage" })
    }
    if (prng.chance(faults.storeUnavailable)) {
      stats.unavailable++
      return new StoreUnavailable({ cause: "sim: store unavailable" })
    }
    return null
  }

  /**
   * Crashes the service right after a commit, when it can crash now (counted): then the process is
   * gone and nothing after the commit runs (the caller goes on with `Effect.never`; the crash
   * interrupts its fiber).
   */
  const crashNow = (name: string, subject: string, fence: Fence | null) => {
    if (!hooks.crashAfterCommit(`after ${name} ${subject}`, fence)) return false
    stats.commitCrashes++
    return true
  }

  /** After a commit drawn to crash: the crash, when the service can crash now (else the outcome goes back). */
  const crashAfter = (name: string, subject: string, outcome: unknown, fence: Fence | null): Effect.Effect<unknown> =>
    crashNow(name, subject, fence) ? Effect.never : Effect.succeed(outcome)

  const afterCommit = (
    name: string,
    subject: string,
    mayLose: boolean,
    outcome: unknown,
    fence: Fence | null
  ): Effect.Effect<unknown, StoreUnavailable> => {
    if (!hooks.armed()) return Effect.succeed(outcome)
    if (prng.chance(faults.crashAfterCommit) && crashNow(name, subject, fence)) return Effect.never
    if (mayLose && prng.chance(faults.storeLostCommit)) {
      stats.lostCommits++
      hooks.record(`store: ${name} ${subject} committed, answered unavailable`)
      return Effect.fail(new StoreUnavailable({ cause: "sim: connection lost before the commit was acknowledged" }))
    }
    if (name === "rotateApiKey" && rotationPrng !== undefined && rotationPrng.chance(faults.rotationLost ?? 0)) {
      stats.lostCommits++
      stats.lostRotations++
      hooks.record(`store: ${name} ${subject} committed, answered unavailable (a lost rotation answer)`)
      return Effect.fail(new StoreUnavailable({ cause: "sim: connection lost before the rotation was acknowledged" }))
    }
    return Effect.succeed(outcome)
  }

  /**
   * The store as one instance sees it: with `fence`, a dead instance's calls interrupt their
   * caller (as `fenced` in sim/world/Service.ts does), checked in the same step as the faults.
   */
  const wrap = (fence: Fence | null): StoreShape => {
    const wrapped: Record<string, unknown> = {}
    for (const [name, given] of Object.entries(store)) {
      if (typeof given !== "function") {
        wrapped[name] = given
        continue
      }
      // A rotation's commit is told (`keyRevoked`) in the step that makes it, whoever waits for it.
      const keyRevoked = hooks.keyRevoked
      const operation = name !== "rotateApiKey" || keyRevoked === undefined ?
        given :
        (...args: Array<unknown>) =>
          Effect.map((given as (...a: Array<unknown>) => Effect.Effect<unknown, unknown>)(...args), (outcome) => {
            if (outcome === "rotated") keyRevoked(String(args[1]), fence)
            return outcome
          })
      const committed = committing[name]
      const subjectOf = Object.hasOwn(committedWhatever, name) ? committedWhatever[name] : undefined
      const split = Object.hasOwn(splitCommits, name) ? splitCommits[name] : undefined
      const finish = committed === undefined ? undefined : (args: ReadonlyArray<unknown>, outcome: unknown) => {
        const commit = committed(args, outcome)
        return commit === null
          ? Effect.succeed(outcome)
          : afterCommit(name, commit.subject, commit.mayLose, outcome, fence)
      }
      /** The operation as the thawing database runs it: the auditor sees its commit; no fault is drawn for it. */
      const plain = (args: ReadonlyArray<unknown>) => (): Effect.Effect<unknown, unknown> => {
        if (split === undefined) {
          return (operation as (...a: Array<unknown>) => Effect.Effect<unknown, StoreUnavailable>)(...args)
        }
        const { effect, seen } = split(args)
        return Effect.map(effect, (outcome) => {
          seen(outcome)
          return outcome
        })
      }
      const call = (...args: Array<unknown>): Effect.Effect<unknown, unknown> =>
        Effect.suspend(() => {
          if (fence !== null && fence.dead) return Effect.interrupt
          if (fence !== null && fence.held !== null) return heldBy(fence, () => call(...args))
          if (freezes.length > 0 && hooks.armed() && frozen(hooks.nowMs())) return receivedFrozen(name, plain(args))
          const refusal = refuse()
          if (refusal !== null) return Effect.fail(refusal)
          if (split !== undefined) {
            // The layer below's look at the outcome (the auditor's), then the fault decision: one step.
            const { effect, seen } = split(args)
            return Effect.flatMap(effect, (outcome) => {
              seen(outcome)
              return finish === undefined ? Effect.succeed(outcome) : finish(args, outcome)
            })
          }
          const effect = (operation as (...a: Array<unknown>) => Effect.Effect<unknown, StoreUnavailable>)(...args)
          if (subjectOf !== undefined) {
            if (!hooks.armed() || !prng.chance(faults.crashAfterCommit)) return effect
            return Effect.flatMap(effect, (outcome) => crashAfter(name, subjectOf(args), outcome, fence))
          }
          if (finish === undefined) return effect
          return Effect.flatMap(effect, (outcome) => finish(args, outcome))
        })
      wrapped[name] = call
    }
    return wrapped as unknown as StoreShape
  }
  return { store: wrap(null), fencedBy: wrap, stats, frozenAt: (ms: number) => freezes.length > 0 && frozen(ms) }
}

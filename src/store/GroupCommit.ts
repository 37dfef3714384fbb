import { Effect } from "effect"
import type * as Pg from "pg"
import { type CallbackTimer, ioDeadlineTimer } from "../platform/Timers.ts"
import { isUnavailable, type Row } from "./PgRows.ts"
import { StoreUnavailable } from "./Store.ts"

/**
 * Group commit over the `pg` pool: concurrent callers of one named prepared statement share a
 * round trip and a commit, each unit a JSON row of the statement's input and each answered with
 * its own outcome. The create path's two statements (src/store/PgHotPath.ts) and the webhook
 * attempts' record (src/store/PgWebhookStore.ts) go through it.
 */

/**
 * Group commit tuning: units per statement, and statements of one kind in flight at once (of the
 * pool's 8). One in flight measured cheaper and faster than two at 8, 64 and 256 connections on
 * the create path (docs/performance.md, the dated table): what waits behind it shares the next
 * statement and its commit.
 */
export const maximumBatch = 32
export const maximumInFlight = 1

/**
 * How long a batched statement may stay unanswered before its connection is given up: past the
 * deadline of its units (they were answered 503 then), it is kept for its outcome (`onLate`), so
 * a database that thaws within this time leaves nothing behind; one silent for longer (a host cut
 * off) costs at most what a claim's lease does.
 */
export const lateStatementLimitMs = 60_000

/** What the batcher needs of a pool: `pg`'s `query` with a callback (a `Pg.Pool` is one). */
export interface StatementPool {
  readonly query: (
    config: Pg.QueryConfig,
    callback: (error: Error | undefined, result: Pg.QueryResult<Row>) => void
  ) => void
}

export interface BatcherOptions<U, R> {
  readonly pool: StatementPool
  /** The prepared statement's name and text: each connection plans it once. */
  readonly name: string
  readonly text: string
  /** The statement's parameters for a batch of units. */
  readonly values: (units: ReadonlyArray<U>) => Array<unknown>
  /** One outcome per unit, in the units' order (the statement answers one row per unit, by `ord`). */
  readonly outcomes: (rows: ReadonlyArray<Row>) => Array<R>
  /** Units of one key never share a statement (one payment's rows are written one unit at a time). */
  readonly keyOf: (unit: U) => string
  /** How long a unit may wait for its answer (undefined: as long as it takes). */
  readonly deadlineMs?: number | undefined
  /**
   * The outcomes of units whose caller is gone while their statement was out: answered
   * `StoreUnavailable` at their deadline, or interrupted. What the statement committed on behalf
   * of a caller that will never see its outcome is the store's to undo; an interrupted caller's
   * interruption ends once the promise returned (if any) settles, so what it left is undone by then.
   */
  readonly onLate?: (late: ReadonlyArray<{ readonly unit: U; readonly outcome: R }>) => Promise<void> | void
  /** The deadlines' timer: the wall clock's I/O timer (a connection's silence is real time), a manual one in tests. */
  readonly timer?: CallbackTimer
  /** Statements of this kind out at once (`maximumInFlight` unless given). */
  readonly inFlight?: number
}

interface Waiter<U, R> {
  readonly unit: U
  readonly key: string
  readonly resume: (effect: Effect.Effect<R, StoreUnavailable>) => void
  /** Set once its statement has finished, and called then by a caller interrupted meanwhile. */
  settled?: boolean
  onSettled?: () => void
  /**
   * Its caller is gone while its statement was still out (answered `StoreUnavailable` at its
   * deadline, or interrupted): its outcome goes to `onLate`.
   */
  late?: boolean
  /** Cancels the deadline's timer. */
  cancelDeadline?: () => void
}

const settle = <U, R>(waiter: Waiter<U, R>, outcome: Effect.Effect<R, StoreUnavailable>) => {
  if (waiter.settled === true) return
  waiter.settled = true
  waiter.cancelDeadline?.()
  waiter.resume(outcome)
  waiter.onSettled?.()
}

/**
 * The next batch out of `waiting` (taken out of it): in arrival order, up to `maximumBatch`
 * units, never two of one key (a unit whose key is in the batch already waits for the next one).
 */
const nextBatch = <U, R>(waiting: Array<Waiter<U, R>>): Array<Waiter<U, R>> => {
  const batch: Array<Waiter<U, R>> = []
  const keys = new Set<string>()
  for (let i = 0; i < waiting.length && batch.length < maximumBatch;) {
    const waiter = waiting[i]!
    if (keys.has(waiter.key)) {
      i++
      continue
    }
    keys.add(waiter.key)
    batch.push(waiter)
    waiting.splice(i, 1)
  }
  return batch
}

/**
 * Group commit: a unit goes out at once when fewer than `maximumInFlight` statements of its kind
 * are running; otherwise it waits, and the next statement takes everything that waited (up to
 * `maximumBatch`, never two units of one key). Every unit gets its own outcome. When a batch
 * fails on its data (a defect), each of its units runs again alone, so one bad unit fails only
 * itself; when the database is unreachable, every unit of the batch is `StoreUnavailable`.
 *
 * With `deadlineMs`, a unit not answered within it (waiting, or its statement sent to a database
 * that does not answer) is `StoreUnavailable` then. A unit still waiting never goes out; the
 * statement of one already sent keeps its connection until the database answers, and the outcomes
 * of such late units go to `onLate` (a late commit must not leave behind what its caller, told
 * 503, will never finish).
 */
export const makeBatcher = <U, R>(options: BatcherOptions<U, R>) => {
  const waiting: Array<Waiter<U, R>> = []
  let inFlight = 0
  const inFlightLimit = options.inFlight ?? maximumInFlight
  const deadlineMs = options.deadlineMs
  const timer = options.timer ?? ioDeadlineTimer

  /** The answer of a statement that ran: each unit's outcome to its caller, or to `onLate`. */
  const answered = (batch: ReadonlyArray<Waiter<U, R>>, rows: ReadonlyArray<Row>) => {
    const outcomes = options.outcomes(rows)
    if (outcomes.length !== batch.length) {
      // The statement answers one row per unit: anything else is a bug in it, never a unit's outcome.
      const error = new Error(`${options.name}: ${outcomes.length} outcomes for ${batch.length} units`)
      for (const w of batch) settle(w, Effect.die(error))
      return
    }
    const late: Array<{ unit: U; outcome: R }> = []
    const interrupted: Array<Waiter<U, R>> = []
    batch.forEach((w, i) => {
      const outcome = outcomes[i]!
      if (w.late !== true) settle(w, Effect.succeed(outcome))
      else {
        // A unit whose caller is gone is `onLate`'s. One interrupted (not yet settled) waits for it.
        late.push({ unit: w.unit, outcome })
        if (w.settled !== true) interrupted.push(w)
      }
    })
    if (late.length === 0) return
    const undone = options.onLate?.(late)
    const wake = () => {
      for (const w of interrupted) settle(w, Effect.void as Effect.Effect<never>)
    }
    if (undone === undefined) wake()
    else undone.then(wake, wake)
  }

  /** A statement that failed: an outage fails every unit; a batch's bad data runs each unit again alone. */
  const failed = (batch: ReadonlyArray<Waiter<U, R>>, error: Error & { code?: string }) => {
    if (isUnavailable(typeof error.code === "string" ? error.code : undefined)) {
      for (const w of batch) settle(w, Effect.fail(new StoreUnavailable({ cause: error })))
    } else if (batch.length > 1) {
      // A late unit's caller is gone: nothing of it committed, nothing to run again (an
      // interrupted caller waiting for it is told so).
      for (const w of batch) {
        if (w.late === true) settle(w, Effect.die(error))
        else execute([w])
      }
    } else {
      settle(batch[0]!, Effect.die(error))
    }
  }

  const execute = (batch: ReadonlyArray<Waiter<U, R>>) => {
    inFlight++
    const config = {
      name: options.name,
      text: options.text,
      values: options.values(batch.map((w) => w.unit)),
      ...(deadlineMs === undefined ? {} : { query_timeout: lateStatementLimitMs })
    } as Pg.QueryConfig
    options.pool.query(config, (error: (Error & { code?: string }) | undefined, result: Pg.QueryResult<Row>) => {
      inFlight--
      if (error === undefined || error === null) answered(batch, result.rows)
      else failed(batch, error)
      pump()
    })
  }

  const pump = () => {
    while (inFlight < inFlightLimit && waiting.length > 0) execute(nextBatch(waiting))
  }

  const giveUp = (waiter: Waiter<U, R>) => () => {
    if (waiter.settled === true) return
    const at = waiting.indexOf(waiter)
    if (at !== -1) waiting.splice(at, 1)
    else waiter.late = true
    settle(
      waiter,
      Effect.fail(new StoreUnavailable({ cause: new Error(`no answer from the database within ${deadlineMs} ms`) }))
    )
  }

  /**
   * Interrupted while still waiting: it never goes out. Once sent, its outcome is the database's,
   * and the interruption waits for it: whoever takes over after a hang-up (the payment's flow)
   * must find the unit committed or not, never race the statement still running (it did: the
   * flow looked for a payment the batch had not committed yet, and left it pending). The outcome
   * never reaches the interrupted caller: it is `onLate`'s. With a deadline, the interruption
   * waits until then at most.
   */
  const interrupted = (waiter: Waiter<U, R>) =>
    Effect.suspend(() => {
      const at = waiting.indexOf(waiter)
      if (at !== -1) {
        waiting.splice(at, 1)
        waiter.cancelDeadline?.()
        return Effect.void
      }
      if (waiter.settled === true) return Effect.void
      waiter.late = true
      return Effect.callback<void>((done) => {
        waiter.onSettled = () => done(Effect.void)
      })
    })

  return (unit: U): Effect.Effect<R, StoreUnavailable> =>
    Effect.callback<R, StoreUnavailable>((resume) => {
      const waiter: Waiter<U, R> = { unit, key: options.keyOf(unit), resume }
      if (deadlineMs !== undefined) waiter.cancelDeadline = timer(deadlineMs, giveUp(waiter))
      waiting.push(waiter)
      pump()
      return interrupted(waiter)
    })
}

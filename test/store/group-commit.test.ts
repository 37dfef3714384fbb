import { Cause, Effect, Exit, Fiber } from "effect"
import type * as Pg from "pg"
import { describe, expect, it } from "vitest"
import { VirtualTime } from "../../sim/engine/VirtualTime.ts"
import {
  type BatcherOptions,
  lateStatementLimitMs,
  makeBatcher,
  maximumBatch,
  maximumInFlight,
  type StatementPool
} from "../../src/store/GroupCommit.ts"
import type { Row } from "../../src/store/PgRows.ts"

/**
 * The group-commit batcher (src/store/GroupCommit.ts) over a pool whose statements the test
 * answers by hand, a manual deadline timer and the simulator's scheduler: every step is explicit,
 * nothing waits on real time.
 */

interface Unit {
  readonly id: string
  readonly key: string
}

/** A statement sent to the pool: its units, and the callback the test answers it with. */
interface Statement {
  readonly config: Pg.QueryConfig
  readonly units: ReadonlyArray<Unit>
  answered: boolean
  readonly callback: (error: Error | undefined, result: Pg.QueryResult<Row>) => void
}

interface ManualTimer {
  readonly delayMs: number
  readonly task: () => void
  cancelled: boolean
}

type Fate = "waiting" | "interrupted" | { readonly ok: string } | { readonly unavailable: true } | {
  readonly defect: string
}

/**
 * A batcher on a pool whose statements the test answers. Unless a test says otherwise it lets two
 * statements of its kind out at once (the service lets one): the cases below need a statement
 * running while others wait and one to end while another is still out.
 */
const setUp = (options: Partial<BatcherOptions<Unit, string>> = {}) => {
  const time = new VirtualTime(0)
  const runtime = time.runtime(1)
  const statements: Array<Statement> = []
  const timers = new Map<string, ManualTimer>()
  let inFlight = 0
  let mostInFlight = 0
  const pool: StatementPool = {
    query: (config, callback) => {
      inFlight++
      mostInFlight = Math.max(mostInFlight, inFlight)
      statements.push({ config, units: JSON.parse(config.values![0] as string), answered: false, callback })
    }
  }
  let unitOfTimer: string | null = null
  const batcher = makeBatcher<Unit, string>({
    pool,
    name: "test_statement",
    text: "SELECT 1",
    values: (units) => [JSON.stringify(units)],
    outcomes: (rows) => rows.map((r) => r.outcome as string),
    keyOf: (unit) => {
      // The batcher asks a unit's key, then sets its deadline: the timer is named after that unit.
      unitOfTimer = unit.id
      return unit.key
    },
    timer: (delayMs, task) => {
      const timer: ManualTimer = { delayMs, task, cancelled: false }
      timers.set(unitOfTimer!, timer)
      return () => {
        timer.cancelled = true
      }
    },
    inFlight: 2,
    ...options
  })
  const run = <A, E>(effect: Effect.Effect<A, E>) => {
    const fiber = Effect.runForkWith(runtime)(effect)
    time.settle()
    return fiber
  }
  const fateOf = (fiber: Fiber.Fiber<string, unknown>): Fate => {
    const exit = fiber.pollUnsafe()
    if (exit === undefined) return "waiting"
    if (Exit.isSuccess(exit)) return { ok: exit.value }
    if (Cause.hasInterruptsOnly(exit.cause)) return "interrupted"
    if (Cause.hasFails(exit.cause)) return { unavailable: true }
    return { defect: String((Cause.squash(exit.cause) as Error).message) }
  }
  const finish = (statement: Statement, error?: Error & { code?: string }, rows?: ReadonlyArray<Row>) => {
    expect(statement.answered).toBe(false)
    statement.answered = true
    inFlight--
    statement.callback(
      error,
      { rows: rows ?? statement.units.map((u) => ({ outcome: `done ${u.id}` })) } as Pg.QueryResult<Row>
    )
    time.settle()
  }
  return {
    statements,
    timers,
    mostInFlight: () => mostInFlight,
    call: (unit: Unit) => run(batcher(unit)),
    run,
    fateOf,
    /** Answers a statement with one row per unit (or `rows`). */
    answer: (statement: Statement, rows?: ReadonlyArray<Row>) => finish(statement, undefined, rows),
    /** Fails a statement with a SQLSTATE. */
    fail: (statement: Statement, code: string) =>
      finish(statement, Object.assign(new Error(`sqlstate ${code}`), { code })),
    /** Fires a unit's deadline. */
    deadline: (unitId: string) => {
      const timer = timers.get(unitId)!
      expect(timer.cancelled).toBe(false)
      timer.task()
      time.settle()
    },
    idsOf: (statement: Statement) => statement.units.map((u) => u.id)
  }
}

const unit = (id: string, key = id): Unit => ({ id, key })

describe("group commit (makeBatcher)", () => {
  it("a unit goes out at once while no statement of its kind runs; the next statement takes what waited, up to 32, never two of one key", () => {
    expect([maximumInFlight, maximumBatch]).toEqual([1, 32])
    const b = setUp({ inFlight: undefined })
    const first = b.call(unit("a"))
    expect(b.statements.map(b.idsOf)).toEqual([["a"]])
    // 35 more wait; w2 and w3 share a key.
    const waiting = Array.from({ length: 35 }, (_, i) => b.call(unit(`w${i + 1}`, i === 2 ? "w2" : `w${i + 1}`)))
    expect(b.statements).toHaveLength(1)
    expect(waiting.every((fiber) => b.fateOf(fiber) === "waiting")).toBe(true)
    // The statement ends: the next takes 32 of those waiting, in order, w3 left for a later one.
    b.answer(b.statements[0]!)
    expect(b.fateOf(first)).toEqual({ ok: "done a" })
    expect(b.statements).toHaveLength(2)
    const expected = ["w1", "w2", ...Array.from({ length: 30 }, (_, i) => `w${i + 4}`)]
    expect(b.idsOf(b.statements[1]!)).toEqual(expected)
    b.answer(b.statements[1]!)
    expect(b.idsOf(b.statements[2]!)).toEqual(["w3", "w34", "w35"])
    b.answer(b.statements[2]!)
    // Each caller got its own unit's outcome; never more than one statement out at once.
    expect(waiting.map(b.fateOf)).toEqual(Array.from({ length: 35 }, (_, i) => ({ ok: `done w${i + 1}` })))
    expect(b.statements).toHaveLength(3)
    expect(b.mostInFlight()).toBe(1)
  })

  it("with two statements of a kind allowed out, a unit goes out at once while fewer run", () => {
    const b = setUp()
    b.call(unit("a"))
    b.call(unit("b"))
    const waiting = b.call(unit("c"))
    expect(b.statements.map(b.idsOf)).toEqual([["a"], ["b"]])
    expect(b.fateOf(waiting)).toBe("waiting")
    b.answer(b.statements[1]!)
    expect(b.statements.map(b.idsOf)).toEqual([["a"], ["b"], ["c"]])
    expect(b.mostInFlight()).toBe(2)
  })

  it("a batch that fails on its data runs each unit again alone (one bad unit fails only itself); an outage fails every unit of its batch", () => {
    const b = setUp()
    b.call(unit("a"))
    b.call(unit("b"))
    const [x, y, z] = ["x", "y", "z"].map((id) => b.call(unit(id)))
    b.answer(b.statements[0]!)
    expect(b.idsOf(b.statements[2]!)).toEqual(["x", "y", "z"])
    // A unique violation (23505): each unit alone.
    b.fail(b.statements[2]!, "23505")
    expect(b.statements.slice(3).map(b.idsOf)).toEqual([["x"], ["y"], ["z"]])
    b.answer(b.statements[3]!)
    b.fail(b.statements[4]!, "23505")
    b.answer(b.statements[5]!)
    expect([x, y, z].map((f) => b.fateOf(f!))).toEqual([{ ok: "done x" }, { defect: "sqlstate 23505" }, {
      ok: "done z"
    }])
    // The connection lost (08006): every unit of the batch is unavailable, none runs again.
    const alone = b.call(unit("p"))
    const [q, r] = ["q", "r"].map((id) => b.call(unit(id)))
    b.answer(b.statements[1]!)
    const batch = b.statements.at(-1)!
    expect(b.idsOf(batch)).toEqual(["q", "r"])
    b.fail(batch, "08006")
    expect([q, r].map((f) => b.fateOf(f!))).toEqual([{ unavailable: true }, { unavailable: true }])
    expect(b.statements.at(-1)).toBe(batch)
    b.answer(b.statements.find((s) => b.idsOf(s).includes("p"))!)
    expect(b.fateOf(alone)).toEqual({ ok: "done p" })
  })

  it("a statement whose rows do not match its units is a defect for each unit, never another unit's outcome", () => {
    const b = setUp()
    const a = b.call(unit("a"))
    b.call(unit("b"))
    const [c, d] = ["c", "d"].map((id) => b.call(unit(id)))
    b.answer(b.statements[0]!)
    b.answer(b.statements[2]!, [{ outcome: "done c" }])
    expect(b.fateOf(a)).toEqual({ ok: "done a" })
    expect([c, d].map((f) => b.fateOf(f!))).toEqual([
      { defect: "test_statement: 1 outcomes for 2 units" },
      { defect: "test_statement: 1 outcomes for 2 units" }
    ])
  })

  it("deadline: a unit still waiting then is unavailable and never goes out; every settled unit's timer is cancelled", () => {
    const b = setUp({ deadlineMs: 5_000 })
    const a = b.call(unit("a"))
    b.call(unit("b"))
    const c = b.call(unit("c"))
    expect(b.timers.get("c")!.delayMs).toBe(5_000)
    // The statements carry a limit of their own, past the units' deadline (kept for `onLate`).
    expect(b.statements[0]!.config).toMatchObject({ name: "test_statement", query_timeout: lateStatementLimitMs })
    b.deadline("c")
    expect(b.fateOf(c)).toEqual({ unavailable: true })
    b.answer(b.statements[0]!)
    expect(b.fateOf(a)).toEqual({ ok: "done a" })
    expect(b.timers.get("a")!.cancelled).toBe(true)
    // c was not sent: nothing waits, nothing more goes out.
    expect(b.statements).toHaveLength(2)
  })

  it("deadline: a unit whose statement is out then is unavailable at once; its outcome, when the statement answers, goes to onLate and not to its caller", () => {
    const late: Array<Array<{ readonly unit: Unit; readonly outcome: string }>> = []
    const b = setUp({
      deadlineMs: 5_000,
      onLate: (units) => {
        late.push([...units])
      }
    })
    b.call(unit("a"))
    b.call(unit("b"))
    const [c, d] = ["c", "d"].map((id) => b.call(unit(id)))
    b.answer(b.statements[0]!)
    expect(b.idsOf(b.statements[2]!)).toEqual(["c", "d"])
    b.deadline("c")
    expect(b.fateOf(c!)).toEqual({ unavailable: true })
    expect(b.fateOf(d!)).toBe("waiting")
    b.answer(b.statements[2]!)
    expect(b.fateOf(d!)).toEqual({ ok: "done d" })
    expect(late).toEqual([[{ unit: unit("c"), outcome: "done c" }]])
    // A late unit of a batch that fails on its data is not run again: its caller was answered.
    b.answer(b.statements[1]!)
    b.call(unit("g"))
    b.call(unit("h"))
    const [e, f] = ["e", "f"].map((id) => b.call(unit(id)))
    b.answer(b.statements.at(-2)!)
    const batch = b.statements.at(-1)!
    expect(b.idsOf(batch)).toEqual(["e", "f"])
    b.deadline("e")
    b.fail(batch, "23505")
    expect(b.statements.at(-1)!.units).toEqual([unit("f")])
    b.answer(b.statements.at(-1)!)
    expect([e, f].map((x) => b.fateOf(x!))).toEqual([{ unavailable: true }, { ok: "done f" }])
    expect(late).toHaveLength(1)
  })

  it("without a deadline a statement has no limit of its own", () => {
    const b = setUp()
    b.call(unit("a"))
    expect(b.statements[0]!.config).not.toHaveProperty("query_timeout")
    expect(b.timers.size).toBe(0)
  })

  it("an interrupted caller: still waiting, its unit never goes out; once sent, the interruption waits for the statement, whose outcome goes to onLate", () => {
    const late: Array<string> = []
    const b = setUp({
      onLate: (units) => {
        late.push(...units.map(({ outcome, unit }) => `${unit.id}: ${outcome}`))
      }
    })
    b.call(unit("a"))
    const sent = b.call(unit("b"))
    const queued = b.call(unit("c"))
    b.run(Fiber.interrupt(queued))
    expect(b.fateOf(queued)).toBe("interrupted")
    const interrupting = b.run(Fiber.interrupt(sent))
    // The statement of b is still out: the interruption waits for it.
    expect(interrupting.pollUnsafe()).toBeUndefined()
    expect(b.fateOf(sent)).toBe("waiting")
    b.answer(b.statements[1]!)
    expect(interrupting.pollUnsafe()).toBeDefined()
    expect(b.fateOf(sent)).toBe("interrupted")
    expect(late).toEqual(["b: done b"])
    b.answer(b.statements[0]!)
    // c never went out.
    expect(b.statements.flatMap(b.idsOf)).toEqual(["a", "b"])
  })

  it("an interrupted caller's interruption ends once onLate has undone what its statement committed", async () => {
    let undo!: () => void
    const b = setUp({ onLate: () => new Promise<void>((done) => (undo = done)) })
    const sent = b.call(unit("a"))
    const interrupting = b.run(Fiber.interrupt(sent))
    b.answer(b.statements[0]!)
    // The outcome is onLate's, which is still undoing it: the interruption waits.
    expect(interrupting.pollUnsafe()).toBeUndefined()
    undo()
    await Promise.resolve()
    expect(interrupting.pollUnsafe()).toBeDefined()
    expect(b.fateOf(sent)).toBe("interrupted")
  })

  it("an interrupted caller whose batch fails on its data: not run again, and its interruption ends", () => {
    const late: Array<string> = []
    const b = setUp({
      onLate: (units) => {
        late.push(...units.map(({ unit }) => unit.id))
      }
    })
    b.call(unit("a"))
    b.call(unit("b"))
    const [c, d] = ["c", "d"].map((id) => b.call(unit(id)))
    b.answer(b.statements[0]!)
    const batch = b.statements.at(-1)!
    expect(b.idsOf(batch)).toEqual(["c", "d"])
    const interrupting = b.run(Fiber.interrupt(c!))
    expect(interrupting.pollUnsafe()).toBeUndefined()
    b.fail(batch, "23505")
    expect(interrupting.pollUnsafe()).toBeDefined()
    expect(b.fateOf(c!)).toBe("interrupted")
    expect(b.statements.at(-1)!.units).toEqual([unit("d")])
    b.answer(b.statements.at(-1)!)
    expect(b.fateOf(d!)).toEqual({ ok: "done d" })
    expect(late).toEqual([])
  })
})

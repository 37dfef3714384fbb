/**
 * The nemesis: faults injected into the cluster the harness started, one every period of the
 * load, each on an instance drawn from the seed (as Jepsen's nemesis does to a cluster):
 * - `kill`: kill -9 of a service process; after a while a new process starts on the same port
 *   (the fault ends when it answers /readyz);
 * - `pause`: SIGSTOP of a service process, SIGCONT after a while (its connections stay open,
 *   its requests unanswered meanwhile, its leases running out);
 * - `db-pause`: SIGSTOP of every process of the embedded PostgreSQL (postmaster and backends),
 *   SIGCONT after a while.
 * The plan is a pure function of the seed; the runner acts it out on a clock and marks each
 * fault's start and end, for the report's timeline and for laws that a fault may excuse.
 */
import { Prng } from "../../sim/engine/Prng.ts"
import { type AvailabilityFigures, type AvailabilityRecorder, sumOf, without } from "./Availability.ts"
import type { Clock } from "./Clock.ts"
import type { FaultLog, FaultWindow } from "./Contract.ts"

export const faultKinds = ["kill", "pause", "db-pause"] as const
export type FaultKind = (typeof faultKinds)[number]

export interface NemesisOptions {
  readonly kinds: ReadonlyArray<FaultKind>
  /** One fault every this long of load, the first one period after the load's start. */
  readonly everyMs: number
}

export interface PlannedFault {
  readonly kind: FaultKind
  /** The instance it strikes (null: the database, which every instance shares). */
  readonly instance: number | null
  /** When it starts, ms from the load's start. */
  readonly atMs: number
  /** How long the instance stays dead before its restart, or stopped, or the database stopped. */
  readonly lengthMs: number
}

/**
 * How long each kind of fault lasts, drawn between these bounds (ms), and never more than half
 * the period (faults never overlap: a next one waits for the last to end). A killed instance is
 * down a few seconds and then restarted; a pause stays below the client's timeout of 10 s and
 * the webhook lease (WEBHOOK_TIMEOUT + 30 s), so it stalls work rather than losing it.
 */
export const faultLengthsMs: Readonly<Record<FaultKind, readonly [number, number]>> = {
  "kill": [2_000, 5_000],
  "pause": [2_000, 6_000],
  "db-pause": [1_000, 4_000]
}

/** The faults of a load of `durationMs`: at every period strictly inside it, a kind and an instance drawn from the seed. */
export const planFaults = (
  options: NemesisOptions,
  run: { readonly seed: number; readonly instances: number; readonly durationMs: number }
): Array<PlannedFault> => {
  const prng = Prng.derive(run.seed, "harness-nemesis")
  const faults: Array<PlannedFault> = []
  for (let atMs = options.everyMs; atMs < run.durationMs; atMs += options.everyMs) {
    const kind = prng.pick(options.kinds)
    const instance = kind === "db-pause" ? null : prng.int(0, run.instances - 1)
    const [low, high] = faultLengthsMs[kind]
    const lengthMs = Math.min(prng.int(low, high), Math.floor(options.everyMs / 2))
    faults.push({ kind, instance, atMs, lengthMs })
  }
  return faults
}

/** The hands of the nemesis on the processes (bench/harness/Embedded.ts for the real ones). */
export interface FaultActuator {
  /** kill -9; resolves once the process is gone. Returns a note for the timeline (its pid). */
  kill(instance: number): Promise<string>
  /** A new process on the instance's port; resolves once it is ready. */
  restart(instance: number): Promise<string>
  pause(instance: number): Promise<string>
  resume(instance: number): Promise<string>
  pauseDatabase(): Promise<string>
  resumeDatabase(): Promise<string>
}

/** A fault as it happened; times on the runner's clock (ms from the load's start) and on the wall clock (epoch ms). */
export interface FaultMark {
  readonly kind: FaultKind
  readonly instance: number | null
  readonly plannedAtMs: number
  readonly startMs: number
  readonly startEpochMs: number
  endMs: number | null
  endEpochMs: number | null
  /** What the actuator said (pids, or an error), oldest first. */
  readonly notes: Array<string>
}

export interface Nemesis {
  readonly marks: ReadonlyArray<FaultMark>
  /** The marks as the scenario reads them (FaultLog: epoch ms). */
  readonly log: FaultLog
  /** Starts acting out `plan`, its times counted from `originMs` on the clock (the load's start). */
  start(plan: ReadonlyArray<PlannedFault>, originMs: number): void
  /** No fault starts any more; the one under way ends now (restart or resume). Resolves when it has. */
  stop(): Promise<void>
}

export const makeNemesis = (
  actuator: FaultActuator,
  clock: Clock,
  wallClock: () => number,
  log: (line: string) => void
): Nemesis => {
  const marks: Array<FaultMark> = []
  let stopped = false
  let wakeStop: () => void = () => {}
  const stopping = new Promise<void>((done) => (wakeStop = done))
  let running: Promise<void> = Promise.resolve()
  let originMs = 0
  /** Sleeps until `atMs` from the origin, or until `stop`; true when the time came. */
  const until = async (atMs: number) => {
    const waitMs = originMs + atMs - clock.now()
    if (waitMs > 0) await Promise.race([clock.sleep(waitMs), stopping])
    return !stopped
  }
  const note = async (mark: FaultMark, action: Promise<string>) => {
    try {
      mark.notes.push(await action)
    } catch (error) {
      mark.notes.push(`failed: ${error instanceof Error ? error.message : String(error)}`)
    }
  }
  const strike = async (fault: PlannedFault) => {
    const mark: FaultMark = {
      kind: fault.kind,
      instance: fault.instance,
      plannedAtMs: fault.atMs,
      startMs: clock.now() - originMs,
      startEpochMs: wallClock(),
      endMs: null,
      endEpochMs: null,
      notes: []
    }
    marks.push(mark)
    const target = fault.instance === null ? "the database" : `instance ${fault.instance}`
    log(
      `nemesis: ${fault.kind} of ${target} at ${(mark.startMs / 1000).toFixed(1)} s for ${
        (fault.lengthMs / 1000).toFixed(1)
      } s`
    )
    const instance = fault.instance ?? 0
    await note(
      mark,
      fault.kind === "kill"
        ? actuator.kill(instance)
        : fault.kind === "pause"
        ? actuator.pause(instance)
        : actuator.pauseDatabase()
    )
    // Over at its length, or at once when the load ends first.
    const endAtMs = clock.now() - originMs + fault.lengthMs
    await until(endAtMs)
    await note(
      mark,
      fault.kind === "kill"
        ? actuator.restart(instance)
        : fault.kind === "pause"
        ? actuator.resume(instance)
        : actuator.resumeDatabase()
    )
    mark.endMs = clock.now() - originMs
    mark.endEpochMs = wallClock()
    log(`nemesis: ${fault.kind} of ${target} over at ${(mark.endMs / 1000).toFixed(1)} s (${mark.notes.join("; ")})`)
  }
  return {
    marks,
    log: {
      lastStartedAtMs: () => marks.length === 0 ? Number.NEGATIVE_INFINITY : marks[marks.length - 1]!.startEpochMs,
      windows: () =>
        marks.map((m): FaultWindow => ({
          kind: m.kind,
          instance: m.instance,
          startedAtMs: m.startEpochMs,
          endedAtMs: m.endEpochMs
        }))
    },
    start(plan, origin) {
      originMs = origin
      running = (async () => {
        // In order: a fault whose time came while the last one lasted starts when it ended.
        for (const fault of plan) {
          if (!(await until(fault.atMs))) return
          await strike(fault)
        }
      })()
    },
    async stop() {
      stopped = true
      wakeStop()
      await running
    }
  }
}

/** A fault on the report's timeline, with the availability of the requests sent while it lasted. */
export interface FaultFigures {
  readonly kind: FaultKind
  /** The instance (from 0); null for the database. */
  readonly instance: number | null
  /** Seconds from the load's start (the timeline's seconds): when it was planned, began and ended. */
  readonly planned_s: number
  readonly start_s: number
  readonly end_s: number
  /** What was done (pids), or what failed. */
  readonly notes: ReadonlyArray<string>
  readonly availability: AvailabilityFigures
}

export interface ClusterAvailability {
  readonly overall: AvailabilityFigures
  /** The requests sent while some fault lasted, and the others. */
  readonly during_faults: AvailabilityFigures
  readonly outside_faults: AvailabilityFigures
  /** Requests a refused connection sent on to the next instance (the load balancer's retries). */
  readonly moved_on_refusal: number
}

/** The faults of the load as the report shows them, each with its window's availability; one still open ends at `loadEndMs`. */
export const faultFigures = (
  marks: ReadonlyArray<FaultMark>,
  recorder: AvailabilityRecorder,
  loadEndMs: number
): Array<FaultFigures> =>
  marks.map((mark) => {
    const endMs = mark.endMs ?? loadEndMs
    return {
      kind: mark.kind,
      instance: mark.instance,
      planned_s: Math.round(mark.plannedAtMs) / 1000,
      start_s: Math.round(mark.startMs) / 1000,
      end_s: Math.round(endMs) / 1000,
      notes: [...mark.notes],
      availability: recorder.between(mark.startMs, endMs)
    }
  })

export const clusterAvailability = (
  recorder: AvailabilityRecorder,
  faults: ReadonlyArray<FaultFigures>,
  movedOnRefusal: number
): ClusterAvailability => {
  const overall = recorder.overall()
  const during = sumOf(faults.map((fault) => fault.availability))
  return { overall, during_faults: during, outside_faults: without(overall, during), moved_on_refusal: movedOnRefusal }
}

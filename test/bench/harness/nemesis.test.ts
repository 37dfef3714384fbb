import { describe, expect, it } from "vitest"
import { AvailabilityRecorder } from "../../../bench/harness/Availability.ts"
import { VirtualClock } from "../../../bench/harness/Clock.ts"
import { renderHarnessReport } from "../../../bench/harness/Html.ts"
import { summaryOf } from "../../../bench/harness/main.ts"
import {
  clusterAvailability,
  type FaultActuator,
  faultFigures,
  faultLengthsMs,
  makeNemesis,
  planFaults
} from "../../../bench/harness/Nemesis.ts"
import { Recorder } from "../../../bench/harness/Recorder.ts"
import type { HarnessResult } from "../../../bench/harness/Result.ts"

describe("the nemesis's plan", () => {
  const run = { seed: 7, instances: 3, durationMs: 60_000 }

  it("is a fault every period strictly inside the load, drawn from the seed alone", () => {
    const plan = planFaults({ kinds: ["kill", "pause", "db-pause"], everyMs: 15_000 }, run)
    expect(plan.map((f) => f.atMs)).toEqual([15_000, 30_000, 45_000])
    expect(planFaults({ kinds: ["kill", "pause", "db-pause"], everyMs: 15_000 }, run)).toEqual(plan)
    // Another seed, another draw (over enough faults to tell).
    const long = { ...run, durationMs: 600_000 }
    expect(planFaults({ kinds: ["kill", "pause"], everyMs: 10_000 }, { ...long, seed: 8 })).not.toEqual(
      planFaults({ kinds: ["kill", "pause"], everyMs: 10_000 }, long)
    )
    for (const fault of planFaults({ kinds: ["kill", "pause", "db-pause"], everyMs: 10_000 }, long)) {
      if (fault.kind === "db-pause") expect(fault.instance).toBeNull()
      else expect([0, 1, 2]).toContain(fault.instance)
      const [low, high] = faultLengthsMs[fault.kind]
      expect(fault.lengthMs).toBeGreaterThanOrEqual(low)
      expect(fault.lengthMs).toBeLessThanOrEqual(high)
    }
  })

  it("draws every kind and every instance over a long run, and keeps each fault within half the period", () => {
    const plan = planFaults({ kinds: ["kill", "pause", "db-pause"], everyMs: 2_000 }, { ...run, durationMs: 600_000 })
    expect(new Set(plan.map((f) => f.kind))).toEqual(new Set(["kill", "pause", "db-pause"]))
    expect(new Set(plan.filter((f) => f.instance !== null).map((f) => f.instance))).toEqual(new Set([0, 1, 2]))
    expect(Math.max(...plan.map((f) => f.lengthMs))).toBeLessThanOrEqual(1_000)
    expect(planFaults({ kinds: ["kill"], everyMs: 15_000 }, { ...run, durationMs: 15_000 })).toEqual([])
  })
})

/** The processes as the nemesis would move them, on the virtual clock: a restart takes `restartMs`. */
const fakeActuator = (clock: VirtualClock, restartMs: number) => {
  const calls: Array<string> = []
  const act = (what: string, ms = 0) => async () => {
    if (ms > 0) await clock.sleep(ms)
    calls.push(`${clock.now()} ${what}`)
    return what
  }
  const actuator: FaultActuator = {
    kill: (i) => act(`kill ${i}`)(),
    restart: (i) => act(`restart ${i}`, restartMs)(),
    pause: (i) => act(`pause ${i}`)(),
    resume: (i) => act(`resume ${i}`)(),
    pauseDatabase: act("pause database"),
    resumeDatabase: act("resume database")
  }
  return { actuator, calls }
}

describe("the nemesis at work", () => {
  it("acts the plan out on the clock and marks each fault's start and end, a kill ending once its instance is back", async () => {
    const clock = new VirtualClock(5_000)
    const { actuator, calls } = fakeActuator(clock, 2_000)
    const wall = 1_800_000_000_000
    const nemesis = makeNemesis(actuator, clock, () => wall + clock.now(), () => {})
    nemesis.start([
      { kind: "kill", instance: 1, atMs: 10_000, lengthMs: 3_000 },
      { kind: "pause", instance: 0, atMs: 20_000, lengthMs: 4_000 },
      { kind: "db-pause", instance: null, atMs: 30_000, lengthMs: 1_500 }
    ], clock.now())
    await clock.run(clock.sleep(40_000).then(() => nemesis.stop()))
    expect(calls).toEqual([
      "15000 kill 1",
      "20000 restart 1",
      "25000 pause 0",
      "29000 resume 0",
      "35000 pause database",
      "36500 resume database"
    ])
    expect(nemesis.marks.map((m) => [m.kind, m.instance, m.startMs, m.endMs])).toEqual([
      ["kill", 1, 10_000, 15_000],
      ["pause", 0, 20_000, 24_000],
      ["db-pause", null, 30_000, 31_500]
    ])
    expect(nemesis.marks[0]!.notes).toEqual(["kill 1", "restart 1"])
    // The scenario reads them on the wall clock.
    expect(nemesis.log.lastStartedAtMs()).toBe(wall + 35_000)
    expect(nemesis.log.windows()[0]).toEqual({
      kind: "kill",
      instance: 1,
      startedAtMs: wall + 15_000,
      endedAtMs: wall + 20_000
    })
  })

  it("starts a fault whose time came during the last one when that one ends: faults never overlap", async () => {
    const clock = new VirtualClock(0)
    const { actuator, calls } = fakeActuator(clock, 3_000)
    const nemesis = makeNemesis(actuator, clock, () => clock.now(), () => {})
    nemesis.start([
      { kind: "kill", instance: 0, atMs: 2_000, lengthMs: 1_000 },
      { kind: "kill", instance: 1, atMs: 4_000, lengthMs: 1_000 }
    ], 0)
    await clock.run(clock.sleep(20_000).then(() => nemesis.stop()))
    expect(calls).toEqual(["2000 kill 0", "6000 restart 0", "6000 kill 1", "10000 restart 1"])
    expect(nemesis.marks.map((m) => [m.plannedAtMs, m.startMs, m.endMs])).toEqual([[2_000, 2_000, 6_000], [
      4_000,
      6_000,
      10_000
    ]])
  })

  it("ends the fault under way when the load ends, and starts no other", async () => {
    const clock = new VirtualClock(0)
    const { actuator, calls } = fakeActuator(clock, 0)
    const nemesis = makeNemesis(actuator, clock, () => clock.now(), () => {})
    nemesis.start([
      { kind: "pause", instance: 2, atMs: 1_000, lengthMs: 5_000 },
      { kind: "pause", instance: 1, atMs: 8_000, lengthMs: 5_000 }
    ], 0)
    await clock.run(clock.sleep(3_000).then(() => nemesis.stop()))
    expect(calls).toEqual(["1000 pause 2", "3000 resume 2"])
    expect(nemesis.marks.map((m) => [m.startMs, m.endMs])).toEqual([[1_000, 3_000]])
  })

  it("notes an action that failed and goes on", async () => {
    const clock = new VirtualClock(0)
    const { actuator } = fakeActuator(clock, 0)
    const failing: FaultActuator = { ...actuator, restart: () => Promise.reject(new Error("did not come up")) }
    const nemesis = makeNemesis(failing, clock, () => clock.now(), () => {})
    nemesis.start([{ kind: "kill", instance: 0, atMs: 1_000, lengthMs: 1_000 }], 0)
    await clock.run(clock.sleep(5_000).then(() => nemesis.stop()))
    expect(nemesis.marks[0]).toMatchObject({
      startMs: 1_000,
      endMs: 2_000,
      notes: ["kill 0", "failed: did not come up"]
    })
  })
})

const resultWith = (extra: Partial<HarnessResult>): HarnessResult => {
  const recorder = new Recorder(0)
  for (let ms = 0; ms < 10_000; ms += 100) {
    recorder.record("GET /healthz", ms >= 4_000 && ms < 6_000 ? "refused" : 200, 5, ms)
  }
  const figures = recorder.finish(10_000)
  return {
    format: "payments-harness/2",
    scenario: "test",
    started_at: "2026-11-28T10:00:00.000Z",
    ended_at: "2026-11-28T10:00:10.000Z",
    start_epoch_ms: 0,
    config: {
      target: "http://127.0.0.1:1,http://127.0.0.1:2",
      embedded: true,
      model: "open",
      rate_per_s: 10,
      arrival: "constant",
      connections: null,
      duration_s: 10,
      max_requests: null,
      merchants: 1,
      seed: 1,
      slo: null,
      shards: ["0/1"],
      instances: 2,
      nemesis: "kill every 4s"
    },
    load_s: 10,
    scripts: 100,
    scripts_late: 0,
    ...figures,
    rate_per_s: 10,
    cpu: {
      harness_s: 1,
      harness_ms_per_request: 10,
      service_s: 1,
      service_ms_per_request: 10,
      harness_rss_mb: { start: 1, end: 1, peak: 1, samples: [[0, 1]] }
    },
    laws: [],
    slo: [],
    passed: true,
    ...extra
  }
}

describe("faults on the report's timeline", () => {
  it("gives each fault its window's availability, and the figures in and out of the faults", () => {
    const availability = new AvailabilityRecorder(0)
    for (let ms = 0; ms < 10_000; ms += 100) {
      availability.record(ms >= 4_000 && ms < 6_000 ? "refused" : ms === 7_000 ? "dropped" : 200, ms)
    }
    const marks = [
      {
        kind: "kill" as const,
        instance: 1,
        plannedAtMs: 4_000,
        startMs: 4_000,
        startEpochMs: 0,
        endMs: 6_000,
        endEpochMs: 0,
        notes: ["pid 1 killed", "pid 2 ready"]
      },
      {
        kind: "pause" as const,
        instance: 0,
        plannedAtMs: 8_000,
        startMs: 8_000,
        startEpochMs: 0,
        endMs: null,
        endEpochMs: null,
        notes: []
      }
    ]
    const faults = faultFigures(marks, availability, 9_000)
    expect(faults).toEqual([
      {
        kind: "kill",
        instance: 1,
        planned_s: 4,
        start_s: 4,
        end_s: 6,
        notes: ["pid 1 killed", "pid 2 ready"],
        availability: { requests: 20, answered: 0, server_errors: 0, dropped: 0, refused: 20, availability: 0 }
      },
      // Still under way at the load's end: it ends there.
      {
        kind: "pause",
        instance: 0,
        planned_s: 8,
        start_s: 8,
        end_s: 9,
        notes: [],
        availability: { requests: 10, answered: 10, server_errors: 0, dropped: 0, refused: 0, availability: 1 }
      }
    ])
    const cluster = clusterAvailability(availability, faults, 3)
    expect(cluster.overall).toMatchObject({ requests: 100, answered: 79, refused: 20, dropped: 1 })
    expect(cluster.during_faults).toMatchObject({ requests: 30, answered: 10 })
    expect(cluster.outside_faults).toEqual({
      requests: 70,
      answered: 69,
      server_errors: 0,
      dropped: 1,
      refused: 0,
      availability: 69 / 70
    })
    expect(cluster.moved_on_refusal).toBe(3)
  })

  it("shows the faults in the summary and shades them on the HTML page's charts", () => {
    const availability = new AvailabilityRecorder(0)
    for (let ms = 0; ms < 10_000; ms += 100) availability.record(ms >= 4_000 && ms < 6_000 ? "refused" : 200, ms)
    const faults = faultFigures(
      [{
        kind: "kill",
        instance: 1,
        plannedAtMs: 4_000,
        startMs: 4_000,
        startEpochMs: 0,
        endMs: 6_000,
        endEpochMs: 0,
        notes: ["pid 41 killed"]
      }],
      availability,
      10_000
    )
    const result = resultWith({
      faults,
      availability: clusterAvailability(availability, faults, 0),
      figures: { redeliveries: 4 }
    })
    const summary = summaryOf(result, [])
    expect(summary).toMatch(/instances\s+2; nemesis kill every 4s/)
    expect(summary).toMatch(
      /fault kill instance 1\s+4\.0-6\.0 s: 0\.00% answered \(0 of 20; refused 20, dropped 0, 5xx 0\)/
    )
    expect(summary).toMatch(/availability\s+80\.00% answered/)
    expect(summary).toMatch(/availability outside faults\s+100\.00% answered/)
    expect(summary).toMatch(/redeliveries\s+4/)
    const html = renderHarnessReport(result)
    expect(html).toContain("Faults and availability")
    expect(html).toContain("pid 41 killed")
    // A band on each time chart (latency, throughput, the route's latency over time), titled with the fault.
    expect(html.match(/<rect [^>]*fill="#feb2b2"[^>]*><title>kill instance 1 4\.0-6\.0 s<\/title>/g)).toHaveLength(3)
    expect(html).toContain("The scenario's figures: redeliveries 4.")
    // A run without faults shows no band.
    expect(renderHarnessReport(resultWith({}))).not.toContain("<title>kill")
  })
})

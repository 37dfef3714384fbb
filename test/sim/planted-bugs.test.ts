import { describe, expect, it } from "vitest"
import { plantedBugNames, plantedBugs } from "../../sim/checks/PlantedBugs.ts"
import { defaultMix, defaultOptions, noFaults, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

/**
 * Every law the simulator promises (docs/simulation.md) has a bug planted on purpose that breaks
 * it; the auditor must report that very law, at the first seed, in a small run. The bugs sit
 * between the service and its store, inside the store, in the webhook transport, or (with the
 * simulated processor) in the connector between the service and the processor
 * (sim/checks/PlantedBugs.ts), never in src/.
 */
const scenario = (name: (typeof plantedBugNames)[number]): SimOptions => {
  const spec = plantedBugs[name].scenario as {
    seed?: number
    merchants?: number
    payments?: number
    hours?: number
    mix?: Partial<typeof defaultMix>
    faults?: Partial<typeof noFaults>
    processor?: boolean
  }
  return {
    ...defaultOptions,
    seed: spec.seed ?? 7,
    merchants: spec.merchants ?? 3,
    payments: spec.payments ?? 80,
    hours: spec.hours ?? 4,
    faults: { ...defaultOptions.faults, ...spec.faults },
    mix: { ...defaultMix, ...spec.mix },
    plantedBug: name,
    processor: spec.processor ?? false
  }
}

describe("planted bugs: the auditor sees each law broken", () => {
  for (const name of plantedBugNames.filter((n) => n !== "none")) {
    const law = plantedBugs[name].law
    it(`${name} → ${law}`, () => {
      const result = runSimulation(scenario(name))
      expect(result.ok).toBe(false)
      expect(result.violations.map((v) => v.invariant)).toContain(law)
    })
  }

  it("resumed-create-drops-key: only the client's view of its keys sees the second payment", () => {
    // The rows of the second payment record no key: the store's and the decisions' view of keys miss it.
    const result = runSimulation(scenario("resumed-create-drops-key"))
    expect(new Set(result.violations.map((v) => v.invariant))).toEqual(new Set(["one-transaction-per-key"]))
    expect(result.violations[0]!.message).toMatch(/their rows record the keys create-\d+ and none/)
  })

  it("retry-recorded-on-time: the endpoint's arrival times show the early retry that the store's record hides", () => {
    const result = runSimulation(scenario("retry-recorded-on-time"))
    const messages = result.violations.map((v) => `${v.invariant}: ${v.message}`)
    expect(
      messages.some((m) =>
        /^webhook-schedule: .* ms before its offset from the first attempt.s arrival \(recorded at/.test(m)
      )
    ).toBe(true)
    // The store's own times keep the schedule; and the first attempt is recorded 20 s before it reached the endpoint.
    expect(messages.some((m) => /before its offset from the first attempt as recorded/.test(m))).toBe(false)
    expect(messages.some((m) => /^webhook-attempt-time: .* \(-(19|20)\d{3} ms apart/.test(m))).toBe(true)
  })

  it("attempt-timed-from-end: the retries come late by the first attempt's duration, past any backlog; the recorded times are the ends", () => {
    const result = runSimulation(scenario("attempt-timed-from-end"))
    const messages = result.violations.map((v) => `${v.invariant}: ${v.message}`)
    expect(
      messages.some((m) =>
        /^webhook-schedule: .* ms after its offset from the first attempt.s arrival .*the endpoint held at least 0 of the 8 slots/
          .test(m)
      )
    ).toBe(true)
    expect(messages.some((m) => /^webhook-attempt-time: .* recorded at .*, reached the endpoint at /.test(m))).toBe(
      true
    )
  })

  it("retry-time-truncated: the times the service recorded show a retry early by less than the clock tolerance the endpoints' times allow", () => {
    const result = runSimulation(scenario("retry-time-truncated"))
    expect(result.violations.length).toBeGreaterThan(0)
    for (const violation of result.violations) {
      expect(violation.invariant).toBe("webhook-schedule")
      expect(violation.message).toMatch(
        /recorded at \S+, \d{1,3} ms before its offset from the first attempt as recorded/
      )
    }
  })

  it("fee-off-chart: a balanced pair outside the chart is reported as ledger-account and nothing else", () => {
    // Every other ledger law reads only the chart's accounts: without `ledger-account` this run passes.
    const result = runSimulation(scenario("fee-off-chart"))
    expect(result.ok).toBe(false)
    expect(new Set(result.violations.map((v) => v.invariant))).toEqual(new Set(["ledger-account"]))
    expect(result.violations.map((v) => v.message).join("\n")).toMatch(
      /posts to fee_receivable .*\n.*posts to fee_revenu /
    )
  })

  it("refund-posting-inverted: the accounts one by one show the refund taken from available before settlement; their sum does not", () => {
    const result = runSimulation(scenario("refund-posting-inverted"))
    expect(new Set(result.violations.map((v) => v.invariant))).toEqual(new Set(["ledger-matches-record"]))
    expect(result.violations[0]!.message).toMatch(
      /after a decision: merchant_pending \(before settlement\) is \d+, expected \d+/
    )
    expect(result.violations.map((v) => v.message).join("\n")).toMatch(
      /merchant_available \(before settlement\) is -\d+, expected 0/
    )
  })

  it("every planted bug names a law the auditor checks, and the laws are documented", async () => {
    const { readFileSync } = await import("node:fs")
    const doc = readFileSync(new URL("../../docs/simulation.md", import.meta.url), "utf8")
    for (const name of plantedBugNames.filter((n) => n !== "none")) {
      expect(doc).toContain(`\`${plantedBugs[name].law}\``)
    }
  })
})

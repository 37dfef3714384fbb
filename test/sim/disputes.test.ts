import { describe, expect, it } from "vitest"
import { Auditor } from "../../sim/checks/Auditor.ts"
import { defaultOptions, formatFaults, noFaults, parseFaults, type SimOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"
import * as Dispute from "../../src/domain/Dispute.ts"
import * as Payment from "../../src/domain/Payment.ts"
import { accepted, assessmentWithScore, createInput, makeWorld } from "../domain/fixtures.ts"
import { describeFailure } from "../support/simulation.ts"

// Disputes in the simulator: injected at a rate, with crashes and store faults around
// them; the auditor checks reserved money is conserved and every dispute resolves exactly once.

const small = (overrides: Partial<SimOptions>): SimOptions => ({
  ...defaultOptions,
  merchants: 3,
  payments: 120,
  hours: 6,
  ...overrides
})

describe("disputes in the simulator", () => {
  it("`dispute=` is a fault option that round-trips through the replay command", () => {
    const faults = parseFaults("none,dispute=0.25,crash=1")
    expect(faults.disputes).toBe(0.25)
    expect(parseFaults(formatFaults(faults))).toEqual(faults)
    expect(parseFaults("default").disputes).toBe(0.01)
  })

  it("holds every invariant with disputes, crashes, crashes after commits and lost acknowledgements, and replays exactly", () => {
    const options = small({
      // A seed whose run has notifications sent again (seed 13's had none once authentication
      // became one store call, which moved where the store faults land).
      seed: 16,
      faults: {
        ...defaultOptions.faults,
        disputes: 0.4,
        crashesPerHour: 2,
        crashAfterCommit: 0.01,
        storeLostCommit: 0.02
      }
    })
    const result = runSimulation(options)
    expect(describeFailure(result)).toBe("ok")
    expect(result.disputes.planned).toBeGreaterThan(5)
    expect(result.disputes.duplicates).toBeGreaterThan(0)
    // Some notifications met a crash, a store failure or a lost acknowledgement and were sent again.
    expect(result.disputes.retries).toBeGreaterThan(0)
    expect(runSimulation(options).traceHash).toBe(result.traceHash)
  })

  it("resends a notification whose acknowledgement a crash right after its commit swallowed", () => {
    // Seed 3: the first dispute open commits and the service dies before answering. The network
    // must time out and send again (the script used to inherit a finalizer's uninterruptibility,
    // so the timeout never fired and the dispute was left half-told).
    const result = runSimulation(small({
      seed: 3,
      faults: {
        ...defaultOptions.faults,
        disputes: 0.4,
        crashesPerHour: 2,
        crashAfterCommit: 0.01,
        storeLostCommit: 0.02
      }
    }))
    expect(describeFailure(result)).toBe("ok")
    expect(result.commitCrashes).toBeGreaterThan(0)
    expect(result.disputes.retries).toBeGreaterThan(0)
  })

  it("the auditor refuses a dispute whose money does not follow the rules", () => {
    const world = makeWorld()
    let payment = accepted(Payment.create(createInput("mer_1"), world.context())).payment
    const auditor = new Auditor(() => 0)
    const commit = (change: Payment.Change) => {
      auditor.onChange(payment, change)
      payment = change.payment
    }
    auditor.onChange(null, accepted(Payment.create(createInput("mer_1"), world.context())))
    // A score the model can give (the sigmoid of an output with 6 decimals): the auditor checks that too.
    const score = 1 / (1 + Math.exp(2.197225))
    const flow = accepted(
      Payment.advanceFlow(payment, {
        authorization: { _tag: "Approved", networkRiskSignal: 0.05 },
        screening: assessmentWithScore(score),
        thresholds: { review: 0.5, block: 0.8 }
      }, world.context())
    )
    commit(flow)
    const open = accepted(
      Dispute.apply(payment, {
        acquirerDisputeId: "dp_1",
        paymentId: payment.id,
        action: { _tag: "Open", reason: "fraudulent", amountCents: 4_000 }
      }, world.context())
    )
    commit(open)
    expect(auditor.violations).toEqual([])
    // A "won" that forgets to release the reserved money.
    const won = accepted(
      Dispute.apply(payment, {
        acquirerDisputeId: "dp_1",
        paymentId: payment.id,
        action: { _tag: "Resolve", outcome: "won" }
      }, world.context())
    )
    commit({ ...won, ledger: [] })
    expect(auditor.violations.map((v) => v.invariant)).toContain("ledger-matches-record")
  })

  it("without the option nothing is disputed", () => {
    const result = runSimulation(small({ seed: 3, faults: { ...noFaults, crashesPerHour: 1 } }))
    expect(describeFailure(result)).toBe("ok")
    expect(result.disputes.planned).toBe(0)
  })
})

import { describe, expect, it } from "vitest"
import { plantedBugNames, plantedBugs } from "../../sim/checks/PlantedBugs.ts"
import { defaultOptions } from "../../sim/engine/Options.ts"
import { runSimulation } from "../../sim/engine/Simulator.ts"

/**
 * The default sweep's own scenario (`npm run sim:sweep`: 20 merchants, 1,500 payments, 30 h,
 * default faults and mix), not a small one tuned for the bug: its workload reaches the corners
 * (every way to send a key, scores exactly on a threshold, disputes during scripts), and the bugs
 * that need them are caught within its first 5 seeds. Each run is a full simulation (seconds).
 */
describe("planted bugs in the default sweep", () => {
  // The bugs of the laws that read the client's keys, the endpoints' times, refunds and
  // disputes together and the fraud explanation, and the one only a score exactly on a threshold
  // shows: each is caught in the default sweep's own scenario, within its first 5 seeds.
  const swept = plantedBugNames.filter((n) => (plantedBugs[n] as { sweepSeed?: number }).sweepSeed !== undefined)
  for (const name of swept) {
    const { law, sweepSeed } = plantedBugs[name] as { law: string; sweepSeed: number }
    it(`${name} → ${law} in the default sweep at seed ${sweepSeed}`, () => {
      expect(sweepSeed).toBeLessThanOrEqual(5)
      const result = runSimulation({
        ...defaultOptions,
        seed: sweepSeed,
        merchants: 20,
        payments: 1500,
        hours: 30,
        plantedBug: name
      })
      expect(result.ok).toBe(false)
      expect(result.violations.map((v) => v.invariant)).toContain(law)
    }, 180_000)
  }

  it(
    "the default sweep's scenario reaches every way to send a key, exact threshold scores, disputes during scripts, refunds after a lost one, requests with a key a lost rotation revoked claims taken over after their lease and a key pushed past its rate limit",
    () => {
      const { workload, store, keys, leaseTakeovers, rateLimit } = runSimulation({
        ...defaultOptions,
        seed: 1,
        merchants: 20,
        payments: 1500,
        hours: 30
      })
      for (const way of ["header", "body", "both", "different"] as const) {
        expect(workload.keyWays[way]).toBeGreaterThan(0)
      }
      for (const way of ["header", "body", "both"] as const) expect(workload.keyWaysRetried[way]).toBeGreaterThan(0)
      for (const exact of Object.values(workload.boundaryExact)) expect(exact).toBeGreaterThan(0)
      expect(workload.disputesInScript).toBeGreaterThan(0)
      expect(workload.operationsWhileDisputed).toBeGreaterThan(0)
      expect(workload.refundsAfterLostDispute).toBeGreaterThan(0)
      // A rotation whose answer was lost, and its retry with the old key, which must be refused.
      expect(store.lostRotations).toBeGreaterThan(0)
      expect(keys.mustRefuse).toBeGreaterThan(0)
      // Claims that waited in a backed-up endpoint's queue past their lease, taken over.
      expect(workload.batchPayments).toBeGreaterThan(0)
      expect(leaseTakeovers).toBeGreaterThan(0)
      // A key pushed past its rate limit: past a full bucket, refusals judged.
      expect(rateLimit.keysPastBurst).toBeGreaterThan(0)
      expect(rateLimit.refusedJudged).toBeGreaterThan(0)
    },
    180_000
  )
})

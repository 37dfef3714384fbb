import { describe, expect, it } from "vitest"
import { cutoffAfterMs, owesSettlement } from "../../sim/checks/Reference.ts"

/** The laws' own reading of the settlement rules (sim/checks/Reference.ts), by hand-worked cases. */
describe("the laws' reference rules", () => {
  const at = (iso: string) => Date.parse(iso)
  it("the first cut-off strictly after an instant, at SETTLEMENT_CUTOFF minutes past midnight UTC", () => {
    expect(new Date(cutoffAfterMs(at("2026-01-05T10:00:00.000Z"), 0)).toISOString()).toBe("2026-01-06T00:00:00.000Z")
    expect(new Date(cutoffAfterMs(at("2026-01-06T00:00:00.000Z"), 0)).toISOString()).toBe("2026-01-07T00:00:00.000Z")
    expect(new Date(cutoffAfterMs(at("2026-01-05T10:00:00.000Z"), 17 * 60 + 30)).toISOString()).toBe("2026-01-05T17:30:00.000Z")
    expect(new Date(cutoffAfterMs(at("2026-01-05T17:30:00.001Z"), 17 * 60 + 30)).toISOString()).toBe("2026-01-06T17:30:00.000Z")
  })

  it("a captured payment owes its settlement until settled, refunded (in part or whole) or not", () => {
    const captured = { capturedAt: "2026-01-05T10:00:00.000Z", settledAt: null }
    expect(owesSettlement({ ...captured, status: "captured" })).toBe(true)
    expect(owesSettlement({ ...captured, status: "refunded" })).toBe(true)
    expect(owesSettlement({ ...captured, status: "settled", settledAt: "2026-01-06T00:00:00.000Z" })).toBe(false)
    expect(owesSettlement({ status: "voided", capturedAt: null, settledAt: null })).toBe(false)
    expect(owesSettlement({ status: "authorized", capturedAt: null, settledAt: null })).toBe(false)
  })
})

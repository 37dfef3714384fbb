import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { parseArguments, type RunOptions } from "../../bench/harness/Cli.ts"
import { type Io, runHarness } from "../../bench/harness/main.ts"
import { makeScenario, type MerchantsOptions } from "../../bench/harness/scenarios/merchants.ts"

/**
 * The harness as a user runs it (`npm run harness -- --planted-bug NAME`), embedded and kept
 * short (a few seconds of load): a retry counted from the last attempt breaks the retry schedule's
 * law, a refund taken from the wrong side of settlement breaks the ledger law account by account,
 * and the service as it is passes every law, the rate-limit push included. Each bug's scenario is
 * tilted so its path is taken many times (most webhook POSTs fail; most payments are refunded):
 * the outcome does not hang on one draw.
 */
const runWith = async (flags: ReadonlyArray<string>, scenarioOptions: MerchantsOptions) => {
  const parsed = parseArguments(["--duration", "6", "--rate", "20", "--merchants", "3", "--allow-saturation", ...flags])
  if (parsed.command !== "run") throw new Error(JSON.stringify(parsed))
  const directory = mkdtempSync(join(tmpdir(), "payments-harness-planted-"))
  const lines: Array<string> = []
  const io: Io = { log: (line) => lines.push(line), out: (line) => lines.push(line), progress: null }
  try {
    const { result } = await runHarness({ ...(parsed as RunOptions), reportDirectory: directory }, io, {
      scenario: makeScenario(scenarioOptions)
    })
    const violated = result.laws.filter((law) => !law.held)
    return {
      result,
      violated: violated.map((law) => law.law),
      messages: violated.flatMap((law) => law.first_violations.map((v) => v.message)),
      lines
    }
  } finally {
    rmSync(directory, { recursive: true, force: true })
  }
}

describe("the harness with a bug planted in the service it starts", () => {
  it("fails on a retry counted from the last attempt, naming webhook-retry-schedule", async () => {
    const { result, violated, messages } = await runWith(["--planted-bug", "retry-from-last-attempt"], {
      faults: { webhook5xx: 0.7 }
    })
    expect(result.passed).toBe(false)
    expect(result.config.planted_bug).toBe("retry-from-last-attempt")
    expect(violated).toContain("webhook-retry-schedule")
    expect(
      messages.some((m) =>
        /^webhook-schedule: delivery whd_\S+: attempt [3-5] reached the endpoint at .* ms after its offset/.test(m)
      )
    ).toBe(true)
  }, 240_000)

  it(
    "fails on a refund posted to the wrong side of settlement, naming ledger-balanced account by account",
    async () => {
      const { result, violated, messages } = await runWith(["--planted-bug", "refund-posting-inverted"], {
        mix: { refund: 0.9, overRefund: 0 }
      })
      expect(result.passed).toBe(false)
      expect(violated).toContain("ledger-balanced")
      expect(
        messages.some((m) =>
          /^ledger-matches-record: payment pay_\S+ .*merchant_(pending|available) \(before settlement\)/.test(m)
        )
      ).toBe(true)
    },
    240_000
  )

  it("passes on the service as it is, with the settlement and the rate-limit push judged", async () => {
    const { result, violated, lines } = await runWith([], {})
    expect(violated, lines.join("\n")).toEqual([])
    expect(result.passed).toBe(true)
    const checked = new Map(result.laws.map((law) => [law.law, law.checked]))
    expect(checked.get("settlement")).toBeGreaterThan(0)
    expect(checked.get("rate-limit")).toBeGreaterThan(400)
    expect(result.figures?.["rate_limit_push_refused"]).toBeGreaterThan(0)
  }, 240_000)

  it(
    "through the Stripe connector and the sandbox processor losing answers: passes as it is, fails on an authorization retried under a new key",
    async () => {
      // A third of the processor's answers lost after it acted: many retries in six seconds.
      const clean = await runWith(["--processor", "0.3"], {})
      expect(clean.violated, clean.lines.join("\n")).toEqual([])
      expect(clean.result.config.processor_lost_answer_share).toBe(0.3)
      const checked = new Map(clean.result.laws.map((law) => [law.law, law.checked]))
      expect(checked.get("processor-one-authorization")).toBeGreaterThan(20)
      expect(checked.get("processor-reconciled")).toBeGreaterThan(20)

      const planted = await runWith(["--processor", "0.3", "--planted-bug", "authorize-retry-new-key"], {})
      expect(planted.result.passed).toBe(false)
      expect(planted.violated).toContain("processor-one-authorization")
      expect(planted.messages.some((m) => /^payment pay_\S+: [2-9] PaymentIntents at the processor/.test(m))).toBe(true)
    },
    480_000
  )
})

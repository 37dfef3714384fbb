import { Effect, Layer } from "effect"
import fc from "fast-check"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { Acquirer, type AuthorizationRequest, sandboxAnswer } from "../../src/acquirer/Acquirer.ts"
import * as Fraud from "../../src/domain/Fraud.ts"
import type { AuthorizationOutcome } from "../../src/domain/Payment.ts"
import { type Client, client, createTransaction, startApp, type TestApp } from "../support/app.ts"

/**
 * The trained model through the API on PostgreSQL (docs/fraud-model.md): the documented fraud
 * patterns land in their bands, with every feature read from the store in the create's first
 * statement. A scripted network stands beside the sandbox: `tok_probe_*` is declined for its
 * first six attempts and then approved (card testing), and `tok_signal_NN_*` is approved with a
 * risk signal of NN/100 (a network that is unsure).
 */
const probes = new Map<string, Set<string>>()
const scripted = (request: AuthorizationRequest): AuthorizationOutcome | undefined => {
  if (request.cardToken.startsWith("tok_probe_")) {
    const seen = probes.get(request.cardToken) ?? new Set<string>()
    seen.add(request.paymentId)
    probes.set(request.cardToken, seen)
    return seen.size <= 6
      ? { _tag: "Declined", code: "do_not_honor", message: "The card issuer declined the payment." }
      : { _tag: "Approved", networkRiskSignal: 0.05 }
  }
  const signal = /^tok_signal_(\d\d)_/.exec(request.cardToken)
  if (signal !== null) return { _tag: "Approved", networkRiskSignal: Number(signal[1]) / 100 }
  return sandboxAnswer(request)
}
const scriptedAcquirer = Layer.succeed(Acquirer, {
  authorize: (request) =>
    Effect.suspend(() => {
      const answer = scripted(request)
      return answer === undefined ? Effect.never : Effect.succeed(answer)
    }),
  answerNow: scripted
})

let app: TestApp
beforeAll(async () => {
  app = await startApp({ label: "fraud-model", acquirer: scriptedAcquirer })
})
afterAll(async () => {
  await app?.close()
})

const newMerchant = async (): Promise<Client> => client(app.baseUrl, (await app.createMerchant()).key)
const band = (score: number) => Fraud.verdict(score, Fraud.defaultThresholds)

/** Ten ordinary payments of 50.00 on other cards: the merchant's usual amount. */
const withUsualAmounts = async (api: Client) => {
  for (let i = 0; i < 10; i++) await createTransaction(api, { card_token: `tok_regular_${i}`, amount_cents: 5_000 })
  return api
}

const caseOf = async (api: Client, id: string) => {
  const cases = await api.get("/api/v1/fraud/cases?per_page=100")
  return (cases.body.fraud_cases as Array<Record<string, any>>).find((c) => c.id === id)!
}

describe("the trained model's bands through the API", () => {
  it("card testing: six declined small attempts, then an approved one on the same card, is blocked", async () => {
    const api = await newMerchant()
    for (let i = 0; i < 6; i++) {
      expect((await createTransaction(api, { card_token: "tok_probe_1", amount_cents: 100 + i })).status).toBe("failed")
    }
    const approved = await createTransaction(api, { card_token: "tok_probe_1", amount_cents: 107 })
    expect(approved.status).toBe("blocked")
    expect(band(approved.fraud_score)).toBe("blocked")
    const fraudCase = await caseOf(api, approved.fraud_case_id)
    const values = Object.fromEntries(
      (fraudCase.explanations as Array<{ feature: string; value: number }>).map((e) => [e.feature, e.value])
    )
    // Read from the store in the create's first statement: six earlier attempts, all declined.
    expect(values.card_attempts_last_hour).toBeCloseTo(Math.log2(7), 6)
    expect(values.card_declines_last_day).toBe(6)
    expect(values.card_first_seen).toBe(0)
    expect(fraudCase.explanations[0].feature).toBe("card_declines_last_day")
    // An ordinary card at the same merchant still passes.
    expect((await createTransaction(api, { card_token: "tok_visa", amount_cents: 107 })).status).toBe("captured")
  })

  it("country mismatch (metadata.ip_country ≠ metadata.card_country) with an unsure network: held for review; matching countries pass", async () => {
    const api = await withUsualAmounts(await newMerchant())
    const matching = await createTransaction(api, {
      card_token: "tok_signal_30_a",
      metadata: { ip_country: "US", card_country: "us" },
      amount_cents: 5_000
    })
    expect(matching.status).toBe("captured")
    const mismatch = await createTransaction(api, {
      card_token: "tok_signal_30_b",
      metadata: { ip_country: "US", card_country: "NG" },
      amount_cents: 5_000
    })
    expect(mismatch.status).toBe("authorized")
    expect(band(mismatch.fraud_score)).toBe("review")
    expect(mismatch.fraud_explanations.map((e: { feature: string }) => e.feature)).toContain("country_mismatch")
  })

  it("a new card going far above the merchant's usual amount with an unsure network: review; at the usual amount: passed", async () => {
    const api = await withUsualAmounts(await newMerchant())
    expect((await createTransaction(api, { card_token: "tok_signal_30_c", amount_cents: 5_000 })).status).toBe(
      "captured"
    )
    const high = await createTransaction(api, { card_token: "tok_signal_30_d", amount_cents: 200_000 })
    expect(band(high.fraud_score)).toBe("review")
    const values = Object.fromEntries(
      (await caseOf(api, high.fraud_case_id)).explanations.map((e: any) => [e.feature, e.value])
    )
    // The merchant's usual amount (its last payments in USD) came from the store: 2,000.00 is 40× it, capped at 10×.
    expect(values.amount_vs_merchant_log10).toBe(1)
    expect(values.card_first_seen).toBe(1)
  })

  it("an amount spike on a known card with a wary network: review; the same card at its usual amount: passed", async () => {
    const api = await withUsualAmounts(await newMerchant())
    const usual = await createTransaction(api, { card_token: "tok_signal_90_e", amount_cents: 5_000 })
    expect(usual.status).toBe("captured")
    const spike = await createTransaction(api, { card_token: "tok_signal_90_e", amount_cents: 500_000 })
    expect(band(spike.fraud_score)).toBe("review")
    expect(spike.fraud_score).toBeGreaterThan(usual.fraud_score)
  })

  it("the sandbox tokens keep their bands on the trained model", async () => {
    const api = await newMerchant()
    expect(band((await createTransaction(api, { card_token: "tok_visa", amount_cents: 5_000 })).fraud_score)).toBe(
      "passed"
    )
    expect(band((await createTransaction(api, { card_token: "tok_risk_review", amount_cents: 5_000 })).fraud_score))
      .toBe("review")
    expect(band((await createTransaction(api, { card_token: "tok_risk_highest", amount_cents: 5_000 })).fraud_score))
      .toBe("blocked")
  })

  it("every case and transaction names the model, and its explanations add up to its output", async () => {
    const api = await newMerchant()
    const held = await createTransaction(api, { card_token: "tok_risk_review", amount_cents: 2_500, currency: "EUR" })
    const fraudCase = await caseOf(api, held.fraud_case_id)
    expect(fraudCase.model_version).toBe(Fraud.model.version)
    expect(held.fraud_model_version).toBe(Fraud.model.version)
    expect(fraudCase.explanations).toHaveLength(Fraud.featureNames.length)
    const sum = fraudCase.explanations.reduce((total: number, e: { contribution: number }) => total + e.contribution, 0)
    expect(fraudCase.base_value + sum).toBeCloseTo(fraudCase.model_output, 9)
    expect(fraudCase.risk_score).toBe(1 / (1 + Math.exp(-fraudCase.model_output)))
    expect(held.fraud_explanations).toEqual(fraudCase.explanations.slice(0, 5))
  })
})

describe("the score is the sigmoid of the case's model output, exactly, through the API on PostgreSQL", () => {
  const millionths = (value: number) => Math.round(value * 1e6)
  const payment = fc.record({
    // Unsure networks (tok_signal_NN) and the sandbox's review and block tokens, so every band is reached.
    signal: fc.oneof(
      fc.integer({ min: 0, max: 99 }).map((n) => `tok_signal_${String(n).padStart(2, "0")}`),
      fc.constantFrom("tok_risk_review", "tok_risk_highest", "tok_visa")
    ),
    card: fc.integer({ min: 0, max: 2 }),
    amount_cents: fc.integer({ min: 100, max: 5_000_000 }),
    currency: fc.constantFrom(...Fraud.currencies),
    card_brand: fc.constantFrom(...Fraud.cardBrands),
    metadata: fc.oneof(
      fc.constant({}),
      fc.record({ ip_country: fc.constantFrom("US", "NG"), card_country: fc.constantFrom("US", "GB") })
    )
  })
  const checked = { passed: 0, review: 0, blocked: 0 }

  it("for every screened payment: risk_score === fraud_score === 1 / (1 + e^−model_output), the band of that score, and base_value + Σ contributions = model_output", async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(payment, { minLength: 1, maxLength: 4 }), async (payments) => {
        // A merchant per run; a run's payments share up to three cards, so later ones carry a history.
        const api = await newMerchant()
        for (const [index, p] of payments.entries()) {
          const token = p.signal === "tok_visa" || p.signal.startsWith("tok_risk_") ? p.signal : `${p.signal}_${p.card}`
          const created = await createTransaction(api, {
            card_token: token,
            amount_cents: p.amount_cents,
            currency: p.currency,
            card_brand: p.card_brand,
            metadata: p.metadata
          }, `score-${index}`)
          const transaction = (await api.get(`/api/v1/transactions/${created.id}`)).body.transaction
          const score: number = transaction.fraud_score
          expect(typeof score).toBe("number")
          expect(created.fraud_score).toBe(score)
          // The thresholds compare the very score the API returns.
          const verdict = band(score)
          checked[verdict]++
          expect(transaction.status).toBe(
            verdict === "blocked" ? "blocked" : verdict === "review" ? "authorized" : "captured"
          )
          const events = (await api.get(`/api/v1/transactions/${created.id}/events`)).body.events as Array<
            { data: { fraud_score: number | null } }
          >
          for (const event of events) if (event.data.fraud_score !== null) expect(event.data.fraud_score).toBe(score)
          if (verdict === "passed") {
            expect(transaction.fraud_case_id).toBeNull()
            continue
          }
          const fraudCase = await caseOf(api, transaction.fraud_case_id)
          expect(fraudCase.risk_score).toBe(score)
          expect(fraudCase.risk_score).toBe(Fraud.sigmoid(fraudCase.model_output))
          expect(fraudCase.risk_score).toBe(1 / (1 + Math.exp(-fraudCase.model_output)))
          // Exact in decimal: the millionths of the base value and the contributions add up to the output's.
          const contributions = fraudCase.explanations.reduce(
            (sum: number, e: { contribution: number }) => sum + millionths(e.contribution),
            0
          )
          expect(millionths(fraudCase.base_value) + contributions).toBe(millionths(fraudCase.model_output))
          expect(fraudCase.model_output).toBe((millionths(fraudCase.base_value) + contributions) / 1e6)
        }
      }),
      { seed: 25, numRuns: 25 }
    )
    // The property saw every band (else it would prove little about cases).
    expect(checked.review).toBeGreaterThanOrEqual(3)
    expect(checked.blocked).toBeGreaterThanOrEqual(3)
    expect(checked.passed).toBeGreaterThanOrEqual(3)
  })
})

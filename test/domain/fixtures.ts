import type { Assessment } from "../../src/domain/Fraud.ts"
import { type IdKind, idPrefixes, type MintId } from "../../src/domain/Ids.ts"
import * as Payment from "../../src/domain/Payment.ts"

/** Ids from a counter: deterministic, unique within a run, and sorted in minting order. */
export const counterIds = (tag = ""): MintId => {
  let counter = 0
  return (kind: IdKind) => `${idPrefixes[kind]}_${tag}${String(++counter).padStart(8, "0")}`
}

/**
 * A clock that moves only when asked; every decision gets a later time than the one before (epoch
 * milliseconds, starting at `startIso`).
 */
export const steppingClock = (startIso: string) => {
  let ms = Date.parse(startIso)
  return {
    now: () => ms,
    advance: (byMs = 1_000) => (ms += byMs)
  }
}

/** A deterministic decision context: counter ids and a clock that advances one second per decision. */
export const makeWorld = (startIso = "2026-01-01T00:00:00.000Z", tag = "") => {
  const mintId = counterIds(tag)
  const clock = steppingClock(startIso)
  return {
    mintId,
    clock,
    /** The context for the next decision (time advances by `byMs` first). */
    context: (byMs = 1_000): Payment.Context => ({ now: clock.advance(byMs), mintId })
  }
}

export const createInput = (merchantId: string, overrides: Partial<Payment.CreateInput> = {}): Payment.CreateInput => ({
  merchantId,
  amountCents: 10_000,
  currency: "USD",
  cardBrand: "visa",
  cardLastFour: "4242",
  cardToken: "tok_visa",
  captureMethod: "automatic",
  idempotencyKey: null,
  metadata: {},
  ...overrides
})

/** An assessment with a chosen score (the model itself is tested in fraud.test.ts). */
export const assessmentWithScore = (score: number): Assessment => ({
  score,
  modelVersion: "test-model",
  baseValue: -4,
  output: 0,
  explanations: [{ feature: "network_risk_logit", value: 0.5, contribution: 3.6 }]
})

/** The change of an accepted decision; a refusal here is a broken test setup. */
export const accepted = (decision: Payment.Decision): Payment.Change => {
  if (!decision.ok) {
    throw new Error(`expected the decision to be accepted, got ${decision.refusal._tag}: ${decision.refusal.message}`)
  }
  return decision.change
}

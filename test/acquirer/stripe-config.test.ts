import { Effect, Exit, Redacted } from "effect"
import { describe, expect, it } from "vitest"
import { appConfig } from "../../src/platform/Config.ts"

// ACQUIRER=stripe and its STRIPE_* variables are checked at start, every problem named at once.

const problems = async (environment: Record<string, string>) => {
  const exit = await Effect.runPromiseExit(appConfig(environment))
  return Exit.isFailure(exit) ? String(exit.cause) : null
}

describe("the Stripe configuration", () => {
  it("is the sandbox by default, with no Stripe settings", async () => {
    expect(await Effect.runPromise(appConfig({}))).toMatchObject({ acquirer: "sandbox", stripe: null })
  })

  it("names what stripe needs and what is wrong, never echoing a secret", async () => {
    const missing = await problems({ ACQUIRER: "stripe" })
    expect(missing).toContain("STRIPE_SECRET_KEY must be set when ACQUIRER is stripe")
    expect(missing).toContain("STRIPE_WEBHOOK_SECRET must be set when ACQUIRER is stripe")
    const wrong = await problems({
      ACQUIRER: "paypal",
      STRIPE_SECRET_KEY: "pk_test_notsecret1",
      STRIPE_API_BASE: "http://stripe.example.com"
    })
    expect(wrong).toContain("ACQUIRER must be sandbox or stripe, got 'paypal'")
    expect(wrong).toContain("STRIPE_SECRET_KEY must be a key beginning sk_ or rk_")
    expect(wrong).not.toContain("pk_test_notsecret1")
    expect(wrong).toContain("STRIPE_API_BASE must be an https:// origin (http:// only on a loopback address)")
  })

  it("reads the settings, and allows http on loopback for the sandbox processor", async () => {
    const config = await Effect.runPromise(appConfig({
      ACQUIRER: "stripe",
      STRIPE_SECRET_KEY: "sk_test_abcdefgh",
      STRIPE_WEBHOOK_SECRET: "whsec_abcdefgh",
      STRIPE_API_BASE: "http://127.0.0.1:12111"
    }))
    expect(config.acquirer).toBe("stripe")
    expect(config.stripe?.apiBase).toBe("http://127.0.0.1:12111")
    expect(config.stripe && Redacted.value(config.stripe.secretKey)).toBe("sk_test_abcdefgh")
  })
})

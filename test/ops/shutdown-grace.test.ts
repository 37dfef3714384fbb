import { afterAll, describe, expect, it } from "vitest"
import { freshDatabase } from "../support/database.ts"
import { createMerchantWithCli, killServices, startService } from "../support/service.ts"

afterAll(killServices)

// SHUTDOWN_GRACE bounds how long a stop waits for requests in flight. The wait runs in a
// finalizer, which is uninterruptible: before the wait was made interruptible, the grace's
// timeout could not stop it, and a stop lasted as long as the slowest request.
describe("a stop with a request that will not finish within SHUTDOWN_GRACE", () => {
  it("cuts the request off at the grace and exits, instead of waiting for it", async () => {
    const databaseUrl = await freshDatabase("grace")
    const key = createMerchantWithCli(databaseUrl, "Grace").api_key.key
    // The network never answers tok_network_timeout: the create waits REQUEST_DEADLINE (60 s).
    const service = await startService(databaseUrl, {
      SHUTDOWN_GRACE: "1s",
      REQUEST_DEADLINE: "60s",
      ACQUIRER_TIMEOUT: "60s"
    })
    const body = JSON.stringify({
      transaction: {
        amount_cents: 1_000,
        currency: "USD",
        card_token: "tok_network_timeout",
        card_last_four: "0000",
        card_brand: "visa"
      }
    })
    const answered = fetch(`${service.baseUrl}/api/v1/transactions`, {
      method: "POST",
      body,
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }
    }).then((response) => response.status, () => "cut off")
    // The request is in flight once the service has seen it (its log has no line for it yet).
    await new Promise((done) => setTimeout(done, 1_000))
    const stoppedAt = Date.now()
    service.child.kill("SIGTERM")
    const exit = await Promise.race([
      service.exited,
      new Promise((done) => setTimeout(() => done("still running after 20 s"), 20_000))
    ])
    expect(exit).toBe(0)
    expect(Date.now() - stoppedAt).toBeLessThan(20_000)
    expect(service.stderr()).toContain("requests still in flight after SHUTDOWN_GRACE were cut off")
    expect(await answered).toBe("cut off")
  }, 120_000)
})

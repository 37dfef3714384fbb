import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import type { PaymentEvent } from "../../src/domain/Payment.ts"
import * as Config from "../../src/platform/Config.ts"
import * as Ids from "../../src/platform/Ids.ts"
import { WebhookTransport } from "../../src/platform/WebhookTransport.ts"
import { Webhooks } from "../../src/services/Webhooks.ts"
import * as WebhooksService from "../../src/services/Webhooks.ts"
import { emptyState, layerMemoryFrom, type MemoryState } from "../../src/store/MemoryStore.ts"
import { WebhookStore } from "../../src/store/WebhookStore.ts"
import * as WebhookDispatcher from "../../src/workers/WebhookDispatcher.ts"
import { eventually } from "./support.ts"

const t0 = Date.parse("2026-11-22T04:00:00.000Z")
const iso = (ms: number) => new Date(ms).toISOString()

const seedMerchant = (state: MemoryState, merchantId: string, url: string) => {
  state.merchants.set(merchantId, {
    id: merchantId, name: merchantId, webhookUrl: url, webhookSecret: `whsec_${merchantId}`, createdAt: iso(t0), updatedAt: iso(t0)
  })
  const event: PaymentEvent = {
    id: `evt_${merchantId}`, paymentId: `pay_${merchantId}`, merchantId, type: "payment.captured", sequence: 2, createdAt: iso(t0),
    data: { id: `pay_${merchantId}`, merchant_id: merchantId, status: "captured", amount_cents: 100, currency: "USD", captured_amount_cents: 100, refunded_amount_cents: 0, fraud_score: 0.1, failure_code: null }
  }
  state.outbox.push(event)
}

describe("webhook endpoint actors", () => {
  it.scoped("a defect in one endpoint's actor restarts that actor only; its claimed delivery is retried after the lease", () =>
    Effect.gen(function*() {
      yield* TestClock.setTime(t0)
      const state = emptyState()
      seedMerchant(state, "mer_a", "https://a.example/hook")
      seedMerchant(state, "mer_b", "https://b.example/hook")
      const calls: Array<string> = []
      // Endpoint a's first attempt hits a bug (a defect, not a failed delivery); everything else answers 200.
      const transport = Layer.succeed(WebhookTransport, {
        post: (request) =>
          Effect.suspend(() => {
            calls.push(request.url)
            if (request.url.startsWith("https://a.") && calls.filter((u) => u === request.url).length === 1) {
              return Effect.dieMessage("bug in the transport")
            }
            return Effect.succeed({ _tag: "Answered", status: 200, snippet: "" } as const)
          })
      })
      const config = Config.defaultsWith({ webhookAllowPrivateUrls: true })
      const engine = WebhookDispatcher.layerWith({ pollIntervalMs: 86_400_000 }).pipe(
        Layer.provideMerge(WebhooksService.layer),
        Layer.provideMerge(Layer.mergeAll(transport, Ids.layerSeeded(3), layerMemoryFrom(state))),
        Layer.provideMerge(Config.layerWith(config))
      )
      const delivery = (merchantId: string) =>
        Effect.flatMap(WebhookStore, (s) => s.listDeliveries(merchantId, {}, { page: 1, perPage: 10 })).pipe(Effect.map((p) => p.items[0]))

      yield* Effect.gen(function*() {
        yield* Effect.flatMap(Webhooks, (w) => w.wake)
        // The other merchant's endpoint is not held up by the crash.
        const b = (yield* eventually(delivery("mer_b"), (d) => d?.status === "succeeded"))!
        expect(b.attempts.map((a) => a.at)).toEqual([iso(t0)])
        yield* eventually(Effect.sync(() => calls.length), (n) => n === 2)
        // The crashed attempt recorded nothing: the delivery stays claimed until its lease ends.
        const a = (yield* delivery("mer_a"))!
        expect(a.status).toBe("pending")
        expect(a.attempts).toEqual([])
        // Lease = WEBHOOK_TIMEOUT + margin; then the restarted actor delivers it, same delivery id.
        yield* TestClock.adjust(config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs)
        const retried = (yield* eventually(delivery("mer_a"), (d) => d?.status === "succeeded"))!
        expect(retried.id).toBe(a.id)
        expect(retried.attempts).toHaveLength(1)
        expect(retried.attempts[0]!.at).toBe(iso(t0 + config.webhookTimeoutMs + WebhookDispatcher.defaultOptions.leaseMarginMs))
        expect(calls.filter((u) => u.startsWith("https://a."))).toHaveLength(2)
        expect(calls.filter((u) => u.startsWith("https://b."))).toHaveLength(1)
      }).pipe(Effect.provide(engine))
    }))
})

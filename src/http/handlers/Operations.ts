import { Effect } from "effect"
import { HttpApiBuilder } from "effect/http-api"
import * as Database from "../../platform/Database.ts"
import { prometheusText } from "../../platform/Metrics.ts"
import { makeGaugeSampler } from "../../services/Gauges.ts"
import { PgPool } from "../../store/PgPrepared.ts"
import { WebhookStore } from "../../store/WebhookStore.ts"
import { PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"

/** The operations group: liveness, readiness and metrics. */
export const OperationsLive = HttpApiBuilder.group(PaymentsApi, "operations", (handlers) =>
  Effect.gen(function*() {
    const pool = yield* Effect.serviceOption(PgPool)
    const sampleGauges = makeGaugeSampler(yield* Effect.serviceOption(WebhookStore), pool)
    const ready = Database.readiness(pool).pipe(
      Effect.as({ status: "ok" as const }),
      Effect.mapError(() => E.serviceUnavailable())
    )
    return handlers
      .handle("healthz", () => E.asAnswered(Effect.succeed({ status: "ok" as const })))
      .handle("readyz", () => E.asAnswered(ready))
      .handle("metrics", () => E.asAnswered(Effect.andThen(sampleGauges, prometheusText)))
  }))

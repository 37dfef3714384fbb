import { Clock, Effect, Option } from "effect"
import type Pg from "pg"
import * as Metrics from "../platform/Metrics.ts"
import type { WebhookStoreShape } from "../store/WebhookStore.ts"

/**
 * Samples the gauges that describe state rather than events (webhook backlog, database pool), at
 * scrape time: nothing on the request path pays for them, and a scrape sees them fresh. The
 * backlog is one query over the open deliveries' partial index; the pool's figures are fields.
 */
export const makeGaugeSampler = (webhookStore: Option.Option<WebhookStoreShape>, pool: Option.Option<Pg.Pool>) =>
  Effect.gen(function*() {
    if (Option.isSome(pool)) {
      const p = pool.value
      Metrics.record(Metrics.databasePoolConnections("in_use"), p.totalCount - p.idleCount)
      Metrics.record(Metrics.databasePoolConnections("idle"), p.idleCount)
      Metrics.record(Metrics.databasePoolWaiting, p.waitingCount)
      Metrics.record(Metrics.databasePoolMax, p.options.max ?? 10)
    }
    if (Option.isSome(webhookStore)) {
      const now = yield* Clock.currentTimeMillis
      const backlog = yield* webhookStore.value.backlog(now).pipe(Effect.option)
      if (Option.isSome(backlog)) {
        const { open, due, oldestDueAt } = backlog.value
        Metrics.record(Metrics.webhookQueueDepth, open)
        Metrics.record(Metrics.webhookDueDeliveries, due)
        Metrics.record(
          Metrics.webhookOldestDueSeconds,
          oldestDueAt === null ? 0 : Math.max(0, now - oldestDueAt) / 1000
        )
      }
    }
  })

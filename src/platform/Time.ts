import { Clock, Effect } from "effect"

/** The current time as an ISO 8601 UTC string with milliseconds, from Effect's Clock (virtual in tests and the simulator). */
export const nowIso: Effect.Effect<string> = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms).toISOString())
export const isoAt = (ms: number) => new Date(ms).toISOString()
export const addMs = (iso: string, ms: number) => new Date(Date.parse(iso) + ms).toISOString()

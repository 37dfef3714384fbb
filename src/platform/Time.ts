import { Clock, Effect } from "effect"
import { isoAt } from "./IsoTime.ts"

export { addMs, isoAt, isoMs } from "./IsoTime.ts"

/** The current time as an ISO 8601 UTC string with milliseconds, from Effect's Clock (virtual in tests and the simulator). */
export const nowIso: Effect.Effect<string> = Effect.map(Clock.currentTimeMillis, isoAt)

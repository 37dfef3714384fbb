/**
 * Time in the domain is epoch milliseconds (a number), always given from outside. The one text
 * the domain writes itself is the dispute's times in a payment's snapshot (the `data` of events
 * and webhook payloads, wire text stored as it is sent), plainly, as `toISOString` does; the
 * service's own formatting of the wire is src/platform/IsoTime.ts.
 */

/** `ms` as ISO 8601 UTC with milliseconds (`2026-11-22T04:21:42.700Z`). */
export const isoText = (ms: number): string => new Date(ms).toISOString()

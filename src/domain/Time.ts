/**
 * Arithmetic on ISO 8601 UTC timestamps, plainly: the current time always comes from outside.
 * (The service's formatting and parsing on its hot paths is src/platform/IsoTime.ts, which gives
 * exactly these strings and numbers faster, with memos the domain does not keep.)
 */

/** `iso` moved by `ms`, as ISO 8601 UTC with milliseconds. */
export const addMs = (iso: string, ms: number): string => new Date(Date.parse(iso) + ms).toISOString()

/**
 * Times are epoch milliseconds inside the service; this is where they become ISO 8601 text: at
 * the wire (responses, webhook payloads) and for PostgreSQL's parameters (src/store/rows/Timestamps.ts).
 *
 * Every response and stored row writes a few, so the common case has a fast path: `isoAt` builds
 * `YYYY-MM-DDTHH:mm:ss.sssZ` from the second's prefix (kept for recent seconds and days) and small
 * digit tables instead of a `Date` and `toISOString`, and gives exactly what
 * `new Date(ms).toISOString()` gives (other inputs take that path).
 */

const dayMs = 86_400_000
/** 10000-01-01T00:00:00.000Z: from here on `toISOString` writes a six-digit year. */
const lastFourDigitYearMs = 253_402_300_800_000
const twoDigits = Array.from({ length: 100 }, (_, i) => String(i).padStart(2, "0"))
const threeDigits = Array.from({ length: 1000 }, (_, i) => String(i).padStart(3, "0"))
/** `YYYY-MM-DDT` of recent days, by day number modulo 64 (a day's slot says which day it holds). */
const dayPrefixes: Array<string> = Array.from({ length: 64 }, () => "")
const prefixDays: Array<number> = Array.from({ length: 64 }, () => Number.NaN)

/** `YYYY-MM-DDTHH:mm:ss.` of recent seconds, by second modulo 256 (a slot says which second it holds). */
const secondPrefixes: Array<string> = Array.from({ length: 256 }, () => "")
const prefixSeconds: Array<number> = Array.from({ length: 256 }, () => Number.NaN)

const secondPrefix = (second: number) => {
  const day = Math.floor(second / 86_400)
  const slot = day & 63
  if (prefixDays[slot] !== day) {
    dayPrefixes[slot] = new Date(day * dayMs).toISOString().slice(0, 11)
    prefixDays[slot] = day
  }
  let rest = second - day * 86_400
  const hours = Math.floor(rest / 3600)
  rest -= hours * 3600
  const minutes = Math.floor(rest / 60)
  return `${dayPrefixes[slot]}${twoDigits[hours]}:${twoDigits[minutes]}:${twoDigits[rest - minutes * 60]}.`
}

/**
 * `new Date(ms).toISOString()`, the same string (and the same RangeError for an invalid time):
 * the second's prefix (kept for recent seconds: many calls share an instant) and the milliseconds.
 */
export const isoAt = (ms: number): string => {
  if (!(ms >= 0 && ms < lastFourDigitYearMs)) return new Date(ms).toISOString()
  const whole = Math.floor(ms)
  const second = Math.floor(whole / 1000)
  const slot = second & 255
  if (prefixSeconds[slot] !== second) {
    secondPrefixes[slot] = secondPrefix(second)
    prefixSeconds[slot] = second
  }
  // The shared prefix and a short, flat tail: one small string a call.
  return secondPrefixes[slot] + (threeDigits[whole - second * 1000] + "Z")
}

/** `isoAt` of a time that may be absent (null stays null). */
export const isoOrNull = (ms: number | null): string | null => (ms === null ? null : isoAt(ms))

/**
 * Pure arithmetic on ISO 8601 UTC timestamps; the current time always comes from outside.
 *
 * The service formats and parses these strings on every webhook attempt, store call and request,
 * so the common case has a fast path: `isoAt` builds `YYYY-MM-DDTHH:mm:ss.sssZ` from the
 * second's prefix (kept for recent seconds and days) and small digit tables instead of a `Date`
 * and `toISOString`, and `isoMs` reads that exact form digit by digit. Both give exactly what
 * `new Date(ms).toISOString()` and `Date.parse(iso)` give (other inputs take those paths).
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

const daysIn = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
const digit = (s: string, i: number) => {
  const d = s.charCodeAt(i) - 48
  return d >= 0 && d <= 9 ? d : Number.NaN
}

/**
 * The time of a canonical timestamp (`YYYY-MM-DDTHH:mm:ss.sssZ`, exactly as `isoAt` writes it,
 * year 0100 or later), or undefined for any other string: for such a string,
 * `isoAt(canonicalIsoMs(s)) === s`.
 */
export const canonicalIsoMs = (s: string): number | undefined => {
  if (
    s.length !== 24 || s.charCodeAt(4) !== 45 || s.charCodeAt(7) !== 45 || s.charCodeAt(10) !== 84 ||
    s.charCodeAt(13) !== 58 ||
    s.charCodeAt(16) !== 58 || s.charCodeAt(19) !== 46 || s.charCodeAt(23) !== 90
  ) return undefined
  const year = digit(s, 0) * 1000 + digit(s, 1) * 100 + digit(s, 2) * 10 + digit(s, 3)
  const month = digit(s, 5) * 10 + digit(s, 6)
  const day = digit(s, 8) * 10 + digit(s, 9)
  const hours = digit(s, 11) * 10 + digit(s, 12)
  const minutes = digit(s, 14) * 10 + digit(s, 15)
  const seconds = digit(s, 17) * 10 + digit(s, 18)
  const millis = digit(s, 20) * 100 + digit(s, 21) * 10 + digit(s, 22)
  // NaN (a non-digit) fails every comparison below.
  if (
    !(year >= 100 && month >= 1 && month <= 12 && day >= 1 && hours <= 23 && minutes <= 59 && seconds <= 59 &&
      millis >= 0)
  ) return undefined
  const dayKey = year * 10_000 + month * 100 + day
  if (dayKey !== parsedDayKey) {
    const leap = month === 2 && year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0)
    if (day > daysIn[month - 1]! + (leap ? 1 : 0)) return undefined
    parsedDayMs = Date.UTC(year, month - 1, day)
    parsedDayKey = dayKey
  }
  // As Date.UTC(year, month - 1, day, hours, minutes, seconds, millis): whole numbers, exact in a double.
  return parsedDayMs + hours * 3_600_000 + minutes * 60_000 + seconds * 1000 + millis
}

/** The day `canonicalIsoMs` last read (year * 10000 + month * 100 + day, a valid date) and its midnight (ms). */
let parsedDayKey = -1
let parsedDayMs = 0

/** The text `isoMs` last read, and its time. */
let lastIso = ""
let lastIsoMs = Number.NaN

/**
 * `Date.parse(iso)`, the same number (NaN included), fast for a canonical timestamp. The text
 * last read is kept with its time: callers read the same text in runs (the deliveries one poll
 * drains share their due time, the rows one claim leases share their lease's end).
 */
export const isoMs = (iso: string): number => {
  if (iso !== lastIso) {
    lastIsoMs = canonicalIsoMs(iso) ?? Date.parse(iso)
    lastIso = iso
  }
  return lastIsoMs
}

export const addMs = (iso: string, ms: number) => isoAt(isoMs(iso) + ms)

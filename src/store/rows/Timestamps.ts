import { isoAt, isoOrNull } from "../../platform/IsoTime.ts"

/**
 * Times are epoch milliseconds in the store's interface and `timestamptz` in PostgreSQL: a time
 * goes in as ISO 8601 text (a parameter, or a field of a JSON row that a statement reads as
 * `timestamptz`) and comes back as `pg` returns it (a Date), or as text (`to_jsonb`,
 * `row_to_json`, a jsonb field).
 */

/** A `timestamptz` value as read: a Date from `pg`, text from JSON. */
export type Timestamp = Date | string

export const timestamp = (at: number): string => isoAt(at)
export const timestampOrNull = isoOrNull

/** A `timestamptz` value as read, in epoch milliseconds. */
export const ms = (value: Timestamp): number => (value instanceof Date ? value.getTime() : Date.parse(value))
export const msOrNull = (value: Timestamp | null | undefined): number | null =>
  value === null || value === undefined ? null : ms(value)

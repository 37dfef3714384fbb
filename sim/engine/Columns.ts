/** Typed arrays the simulator keeps its per-slot numbers in (numbers in them are never scanned by the collector). */
export type Column = Float64Array | Int32Array | Uint8Array

/**
 * `column`, or a copy of it grown to hold at least `size` numbers (doubling, at least 4,096: a
 * slot added at a time costs amortised O(1)); the new numbers are 0.
 */
export const grownTo = <T extends Column>(column: T, size: number, make: (length: number) => T): T => {
  if (size <= column.length) return column
  const next = make(Math.max(size, 2 * column.length, 4_096))
  next.set(column)
  return next
}

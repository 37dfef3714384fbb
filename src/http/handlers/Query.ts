/**
 * A query's time bound (ISO text, validated by the schema) in epoch milliseconds. Dates without a
 * time mean the whole day: `from` its start, `to` its end.
 */
export const boundary = (text: string | undefined, end: boolean): number | undefined => {
  if (text === undefined) return undefined
  const dateOnly = /^\d{4}-\d{2}-\d{2}$/.test(text)
  return Date.parse(dateOnly ? `${text}T${end ? "23:59:59.999" : "00:00:00.000"}Z` : text)
}

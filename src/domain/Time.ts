/** Pure arithmetic on ISO 8601 UTC timestamps; the current time always comes from outside. */
export const isoAt = (ms: number) => new Date(ms).toISOString()
export const addMs = (iso: string, ms: number) => new Date(Date.parse(iso) + ms).toISOString()

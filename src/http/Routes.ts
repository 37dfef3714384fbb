import { HttpApi } from "@effect/platform"
import { PaymentsApi } from "./Api.ts"

interface Template {
  readonly route: string
  /** One entry per path segment: the literal, or null for a parameter. */
  readonly segments: ReadonlyArray<string | null>
}

/** GET paths served beside the HttpApi: its OpenAPI document, the docs page, and `/`, which points to both. */
export const documentationRoutes: ReadonlyArray<string> = ["/api/v1/openapi.json", "/docs", "/"]

/**
 * The route template of a request (`/api/v1/transactions/:id`), for metric labels and the request
 * log: a raw path would make a label value per payment. Built once from the HttpApi; a lookup
 * compares a handful of templates of the same method and length. Unknown paths are `unmatched`.
 */
export const makeRouteOf = () => {
  const byMethodAndLength = new Map<string, Array<Template>>()
  const add = (method: string, route: string) => {
    const segments = route.split("/").slice(1).map((s) => (s.startsWith(":") ? null : s))
    const id = `${method} ${segments.length}`
    const list = byMethodAndLength.get(id) ?? []
    list.push({ route, segments })
    // Literal segments win over parameters (`/merchants/me` before `/merchants/:id`).
    list.sort((a, b) => a.segments.filter((s) => s === null).length - b.segments.filter((s) => s === null).length)
    byMethodAndLength.set(id, list)
  }
  HttpApi.reflect(PaymentsApi, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => add(endpoint.method, endpoint.path)
  })
  for (const route of documentationRoutes) add("GET", route)
  return (method: string, url: string): string => {
    const query = url.indexOf("?")
    const path = query === -1 ? url : url.slice(0, query)
    const segments = path.split("/").slice(1)
    const candidates = byMethodAndLength.get(`${method} ${segments.length}`)
    if (candidates !== undefined) {
      for (const template of candidates) {
        if (template.segments.every((s, i) => s === null || s === segments[i])) return template.route
      }
    }
    return "unmatched"
  }
}

import { HttpApi, type HttpServerRequest } from "@effect/platform"
import type { HttpApiDecodeError } from "@effect/platform/HttpApiError"
import { PaymentsApi } from "./Api.ts"
import * as E from "./ApiError.ts"
import { documentationRoutes } from "./Routes.ts"
import * as S from "./Schemas.ts"

// How a request the API cannot serve is answered: decode failures (422 naming the field and its
// rule), and a path that exists with another method (405 with `Allow`).

type Issue = HttpApiDecodeError["issues"][number]

/**
 * A field that fails fails every member of the union around it: an optional field also "is not
 * undefined", a nullable one "is not null". Those members say nothing about the rule.
 */
const isUnionNoise = (issue: Issue) => /^Expected (undefined|null), actual /.test(issue.message)

/** The fields an object accepts, from the parser's `is unexpected, expected: "a" | "b"`; null when it does not list names. */
const allowedFields = (message: string): ReadonlyArray<string> | null => {
  const listed = /expected: (.*)$/s.exec(message)?.[1]
  if (listed === undefined) return null
  const names = listed.split(" | ")
  return names.every((name) => /^"[^"]*"$/.test(name)) ? names : null
}

const issueMessage = (issue: Issue, param: string) => {
  if (issue._tag === "Missing") return `${param} is required.`
  if (issue._tag === "Unexpected") {
    const allowed = allowedFields(issue.message)
    return allowed === null
      ? `${param} is not a recognised field.`
      : `${param} is not a recognised field; the fields here are ${allowed.join(", ")}.`
  }
  // Every input field carries its rule (Schemas.rule); the rewrite is a fallback for a field that would not.
  const text = issue.message.replace(/^Expected /, "must be ").replace(/, actual .*$/s, "")
  return `${param} ${text}${text.endsWith(".") ? "" : "."}`
}

/** What a path's record id names, for the 404 of an id that cannot exist. */
const resourceOfPath = (pathname: string) => {
  if (pathname.includes("/webhooks/deliveries/")) return "webhook delivery"
  if (pathname.includes("/fraud/cases/")) return "fraud case"
  if (pathname.includes("/api_keys/")) return "API key"
  return "transaction"
}

/**
 * Schema decode failures become 422 `validation_failed` naming the first offending field and its
 * rule; a malformed id in the path is a 404 (no such record can exist), never a query.
 */
export const fromDecodeError = (error: HttpApiDecodeError, request: HttpServerRequest.HttpServerRequest) => {
  const issue = error.issues.find((candidate) => !isUnionNoise(candidate)) ?? error.issues[0]
  if (issue === undefined) return E.validationFailed(undefined, "The request is invalid.")
  if (issue.path.length === 1 && issue.path[0] === "id" && issue.message === S.malformedIdMessage) {
    return E.notFound(resourceOfPath(new URL(request.url, "http://x").pathname))
  }
  if (issue.path.length === 0) {
    return E.validationFailed(undefined, "The request body is missing or is not a JSON object of the documented shape.")
  }
  const param = issue.path.map(String).join(".")
  return E.validationFailed(param, issueMessage(issue, param))
}

// ---------------------------------------------------------------------------------------------
// 405: the route table, from the HttpApi itself plus the documentation routes served beside it.

const routes: ReadonlyArray<{ readonly method: string; readonly pattern: RegExp }> = (() => {
  const list: Array<readonly [string, string]> = documentationRoutes.map((path) => ["GET", path] as const)
  HttpApi.reflect(PaymentsApi, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => list.push([endpoint.method, endpoint.path])
  })
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  return list.map(([method, path]) => ({
    method,
    pattern: new RegExp(`^${path.split("/").map((segment) => (segment.startsWith(":") ? "[^/]{1,100}" : escape(segment))).join("/")}$`)
  }))
})()

/** The methods a path is served with, in a stable order; empty when no route has this path. */
export const allowedMethods = (pathname: string): ReadonlyArray<string> => {
  const methods = new Set(routes.filter((route) => route.pattern.test(pathname)).map((route) => route.method))
  return ["GET", "POST", "PUT", "PATCH", "DELETE"].filter((method) => methods.has(method))
}

/**
 * No route for this method and path: 405 with `Allow` when the path exists with other methods,
 * else 404 (also when the router refused a path of an allowed method, e.g. a parameter over the
 * router's 100-character limit: no such record can exist).
 */
export const routeNotFound = (request: HttpServerRequest.HttpServerRequest) => {
  const pathname = new URL(request.url, "http://x").pathname
  const allowed = allowedMethods(pathname)
  return allowed.length === 0 || allowed.includes(request.method)
    ? E.routeNotFound(request.method, pathname)
    : E.methodNotAllowed(request.method, pathname, allowed)
}

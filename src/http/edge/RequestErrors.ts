import type { SchemaAST } from "effect"
import type { HttpServerRequest } from "effect/http"
import { HttpApi, type HttpApiEndpoint } from "effect/http-api"
import type { HttpApiSchemaError } from "effect/http-api/HttpApiError"
import type * as SchemaIssue from "effect/SchemaIssue"
import { PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import * as S from "../api/Schemas.ts"
import { documentationRoutes } from "./Routes.ts"

/** The first problem of a decode failure: where it is, and what it is (a leaf of Effect 4's issue tree). */
interface Problem {
  readonly path: ReadonlyArray<PropertyKey>
  readonly issue: SchemaIssue.Issue
}

/**
 * A union fails as a whole when every member fails: an optional or nullable field also "is not
 * undefined" / "is not null". Those members say nothing about the rule: the problem is the one
 * of the member that is not such a literal, or the first.
 */
const isUnionNoise = (issue: SchemaIssue.Issue) =>
  issue._tag === "InvalidType" && (issue.ast._tag === "Undefined" || issue.ast._tag === "Null")

/** The first leaf of the issue tree, with the path that leads to it. */
const firstProblem = (issue: SchemaIssue.Issue, path: ReadonlyArray<PropertyKey> = []): Problem => {
  switch (issue._tag) {
    case "Pointer":
      return firstProblem(issue.issue, [...path, ...issue.path])
    case "Composite":
    case "AnyOf": {
      const issues = issue._tag === "Composite" ? issue.issues : issue.issues
      const chosen = issues.find((candidate) => !isUnionNoise(candidate)) ?? issues[0]
      return chosen === undefined ? { path, issue } : firstProblem(chosen, path)
    }
    case "Filter":
    case "Encoding":
      return firstProblem(issue.issue, path)
    default:
      return { path, issue }
  }
}

/** The schema node at `path` under `ast` (through structs, and the non-literal member of unions); undefined past a leaf. */
const nodeAt = (ast: SchemaAST.AST, path: ReadonlyArray<PropertyKey>): SchemaAST.AST | undefined => {
  let node: SchemaAST.AST | undefined = ast
  for (const key of path) {
    node = node === undefined ? undefined : fieldOf(node, key)
  }
  return node
}

/** The field's own schema inside an optional or nullable union (a union of literals stays as it is). */
const withoutUnion = (ast: SchemaAST.AST): SchemaAST.AST => {
  if (ast._tag !== "Union") return ast
  const members = ast.types.filter((member) => member._tag !== "Undefined" && member._tag !== "Null")
  return members.length === 1 ? members[0]! : ast
}

const fieldOf = (ast: SchemaAST.AST, key: PropertyKey): SchemaAST.AST | undefined => {
  const node = withoutUnion(ast)
  if (node._tag !== "Objects") return undefined
  const field = node.propertySignatures.find((signature) => signature.name === key)
  return field === undefined ? undefined : withoutUnion(field.type)
}

/** The rule of the field at `path`: its own, or the nearest field's above it. */
const ruleAt = (root: SchemaAST.AST, path: ReadonlyArray<PropertyKey>): string | undefined => {
  for (let length = path.length; length > 0; length--) {
    const node = nodeAt(root, path.slice(0, length))
    if (node === undefined) continue
    const rule = S.ruleOf(node)
    if (rule !== undefined) return rule
    if (length === path.length) break
  }
  return undefined
}

/** The fields an object accepts, quoted, in their declared order; null when `ast` is not an object. */
const fieldsOf = (ast: SchemaAST.AST | undefined): ReadonlyArray<string> | null => {
  if (ast === undefined) return null
  const node = withoutUnion(ast)
  return node._tag === "Objects" ? node.propertySignatures.map((signature) => `"${String(signature.name)}"`) : null
}

/** The message a leaf carries: a filter's own sentence, or what the parser expected. */
const leafMessage = (issue: SchemaIssue.Issue): string => {
  if (issue._tag === "Filter") return leafMessage(issue.issue)
  if (issue._tag === "InvalidType" && issue.ast._tag === "Objects") return "must be a JSON object"
  if (issue._tag === "InvalidValue") {
    const message = (issue.annotations as { message?: unknown } | undefined)?.message
    if (typeof message === "string") return message
  }
  return "is not valid"
}

const issueMessage = (root: SchemaAST.AST | undefined, problem: Problem, param: string) => {
  const { issue, path } = problem
  if (issue._tag === "MissingKey") return `${param} is required.`
  if (issue._tag === "UnexpectedKey") {
    const allowed = root === undefined ? null : fieldsOf(path.length <= 1 ? root : nodeAt(root, path.slice(0, -1)))
    return allowed === null || allowed.length === 0
      ? `${param} is not a recognised field.`
      : `${param} is not a recognised field; the fields here are ${allowed.join(", ")}.`
  }
  const rule = root === undefined ? undefined : ruleAt(root, path)
  const text = rule ?? leafMessage(issue)
  return `${param} ${text}${text.endsWith(".") ? "" : "."}`
}

/** What a path's record id names, for the 404 of an id that cannot exist. */
const resourceOfPath = (pathname: string) => {
  if (pathname.includes("/webhooks/deliveries/")) return "webhook delivery"
  if (pathname.includes("/fraud/cases/")) return "fraud case"
  if (pathname.includes("/api_keys/")) return "API key"
  return "transaction"
}

/** The schema a decode failure of `kind` was checked against, for the rules and fields along its path. */
const schemaOf = (
  error: HttpApiSchemaError,
  request: HttpServerRequest.HttpServerRequest
): SchemaAST.AST | undefined => {
  const pathname = new URL(request.url, "http://x").pathname
  const endpoint = endpoints.find((candidate) =>
    candidate.method === request.method && candidate.pattern.test(pathname)
  )?.endpoint
  if (endpoint === undefined) return undefined
  switch (error.kind) {
    case "Params":
      return endpoint.params?.ast
    case "Query":
      return endpoint.query?.ast
    case "Headers":
      return endpoint.headers?.ast
    case "Payload":
    case "Body": {
      for (const entry of endpoint.payload.values()) {
        if ("schemas" in entry) return entry.schemas[0].ast
      }
      return undefined
    }
    default:
      return undefined
  }
}

/**
 * Schema decode failures become 422 `validation_failed` naming the first offending field and its
 * rule; a malformed id in the path is a 404 (no such record can exist), never a query.
 */
export const fromDecodeError = (error: HttpApiSchemaError, request: HttpServerRequest.HttpServerRequest) => {
  const problem = firstProblem(error.cause.issue)
  const root = schemaOf(error, request)
  if (error.kind === "Params" && problem.path.length === 1 && problem.path[0] === "id") {
    return E.notFound(resourceOfPath(new URL(request.url, "http://x").pathname))
  }
  if (problem.path.length === 0) {
    return E.validationFailed(undefined, "The request body is missing or is not a JSON object of the documented shape.")
  }
  const param = problem.path.map(String).join(".")
  return E.validationFailed(param, issueMessage(root, problem, param))
}

// ---------------------------------------------------------------------------------------------
// 405: the route table, from the HttpApi itself plus the documentation routes served beside it.

const pathPattern = (path: string) => {
  const escape = (text: string) => text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")
  return new RegExp(
    `^${path.split("/").map((segment) => (segment.startsWith(":") ? "[^/]{1,100}" : escape(segment))).join("/")}$`
  )
}

/** Every endpoint of the API with the pattern of its path (the same order as the router's). */
const endpoints: ReadonlyArray<
  { readonly method: string; readonly pattern: RegExp; readonly endpoint: HttpApiEndpoint.Top }
> = (() => {
  const list: Array<{ readonly method: string; readonly pattern: RegExp; readonly endpoint: HttpApiEndpoint.Top }> = []
  HttpApi.reflect(PaymentsApi, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => list.push({ method: endpoint.method, pattern: pathPattern(endpoint.path), endpoint })
  })
  return list
})()

const routes: ReadonlyArray<{ readonly method: string; readonly pattern: RegExp }> = [
  ...documentationRoutes.map((path) => ({ method: "GET", pattern: pathPattern(path) })),
  ...endpoints
]

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

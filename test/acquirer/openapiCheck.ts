import { readFileSync } from "node:fs"
import { join } from "node:path"
import { decodeForm } from "../../src/acquirer/sandbox-processor/Processor.ts"

/**
 * Checks requests and answers against the trimmed Stripe OpenAPI document
 * (fixtures/stripe-openapi.json): the subset of JSON Schema it uses ($ref, type, nullable, enum,
 * maxLength, properties, required, additionalProperties, items, anyOf/oneOf). An answer's object
 * is closed: a property its schema does not name is reported (Stripe's schemas name every field
 * they answer with). Form and query values are text, so an integer or a boolean is checked as
 * its text. `x-trimmed` stands for a schema left out: anything passes.
 */

type Schema = Record<string, unknown>
interface Operation {
  readonly parameters?: ReadonlyArray<
    { readonly name: string; readonly in: string; readonly schema: Schema; readonly required?: boolean }
  >
  readonly requestBody?: { readonly content: Record<string, { readonly schema: Schema }> }
  readonly responses: Record<string, { readonly content?: Record<string, { readonly schema: Schema }> }>
}

export const stripeDocument = JSON.parse(
  readFileSync(join(import.meta.dirname, "fixtures/stripe-openapi.json"), "utf8")
) as {
  readonly info: { readonly version: string }
  readonly paths: Record<string, Record<string, Operation>>
  readonly components: { readonly schemas: Record<string, Schema> }
}

const resolve = (schema: Schema): Schema => {
  const ref = schema.$ref
  if (typeof ref !== "string") return schema
  const target = stripeDocument.components.schemas[ref.replace("#/components/schemas/", "")]
  if (target === undefined) throw new Error(`the fixture has no schema ${ref}`)
  return target
}

export const checkValue = (given: Schema, value: unknown, path: string, text: boolean): Array<string> => {
  const schema = resolve(given)
  if ("x-trimmed" in schema) return []
  if (value === null) return schema.nullable === true ? [] : [`${path}: null where the schema does not allow it`]
  const alternatives = (schema.anyOf ?? schema.oneOf) as Array<Schema> | undefined
  if (alternatives !== undefined) {
    const problems = alternatives.map((alternative) => checkValue(alternative, value, path, text))
    return problems.some((p) => p.length === 0)
      ? []
      : [`${path}: matches none of its alternatives (${problems.map((p) => p[0]).join(" | ")})`]
  }
  if (Array.isArray(schema.enum) && !schema.enum.includes(value)) {
    return [`${path}: ${JSON.stringify(value)} is not one of ${schema.enum.join(", ")}`]
  }
  switch (schema.type) {
    case "string":
      if (typeof value !== "string") return [`${path}: expected a string, got ${JSON.stringify(value)}`]
      return typeof schema.maxLength === "number" && value.length > schema.maxLength
        ? [`${path}: longer than ${schema.maxLength}`]
        : []
    case "integer":
      return (text ? typeof value === "string" && /^-?\d+$/.test(value) : Number.isSafeInteger(value))
        ? []
        : [`${path}: expected an integer, got ${JSON.stringify(value)}`]
    case "number":
      return (text ? typeof value === "string" && Number.isFinite(Number(value)) : typeof value === "number")
        ? []
        : [`${path}: expected a number`]
    case "boolean":
      return (text ? value === "true" || value === "false" : typeof value === "boolean")
        ? []
        : [`${path}: expected a boolean, got ${JSON.stringify(value)}`]
    case "array":
      if (!Array.isArray(value)) return [`${path}: expected an array`]
      return value.flatMap((item, i) => checkValue((schema.items ?? {}) as Schema, item, `${path}[${i}]`, text))
    case "object":
      return checkObject(schema, value, path, text)
    default:
      return []
  }
}

const checkObject = (schema: Schema, value: unknown, path: string, text: boolean): Array<string> => {
  if (typeof value !== "object" || value === null || Array.isArray(value)) return [`${path}: expected an object`]
  const properties = (schema.properties ?? {}) as Record<string, Schema>
  const record = value as Record<string, unknown>
  const problems = ((schema.required ?? []) as Array<string>).filter((name) => !(name in record)).map((name) =>
    `${path}.${name}: required, missing`
  )
  const additional = schema.additionalProperties
  // Stripe's answers name every field they carry, so an object with named properties is closed.
  const closed = additional === false || (additional === undefined && schema.properties !== undefined)
  for (const [name, item] of Object.entries(record)) {
    const property = properties[name]
    if (property !== undefined) problems.push(...checkValue(property, item, `${path}.${name}`, text))
    else if (typeof additional === "object" && additional !== null) {
      problems.push(...checkValue(additional as Schema, item, `${path}.${name}`, text))
    } else if (closed) problems.push(`${path}.${name}: not in the schema`)
  }
  return problems
}

/** The document's operation for a method and a concrete path (`/v1/payment_intents/pi_1/capture`). */
export const operationFor = (
  method: string,
  pathname: string
): { readonly template: string; readonly operation: Operation } | null => {
  const templates = Object.keys(stripeDocument.paths).sort((a, b) => Number(a.includes("{")) - Number(b.includes("{")))
  for (const template of templates) {
    const pattern = new RegExp(`^${template.replace(/\{[^}]+\}/g, "[^/]+")}$`)
    const operation = stripeDocument.paths[template]![method.toLowerCase()]
    if (pattern.test(pathname) && operation !== undefined) return { template, operation }
  }
  return null
}

/** Problems with a request the connector built: its operation, query parameters and form body. */
export const checkRequest = (method: string, url: URL, body: string): Array<string> => {
  const found = operationFor(method, url.pathname)
  if (found === null) return [`${method} ${url.pathname}: no such operation in the document`]
  const where = `${method} ${found.template}`
  const parameters = found.operation.parameters ?? []
  const query = decodeForm(url.searchParams.toString())
  const problems: Array<string> = []
  for (const [name, value] of Object.entries(query)) {
    const parameter = parameters.find((p) => p.in === "query" && p.name === name)
    if (parameter === undefined) problems.push(`${where}: unknown query parameter ${name}`)
    else problems.push(...checkValue(parameter.schema, value, `${where} ?${name}`, true))
  }
  const form = found.operation.requestBody?.content["application/x-www-form-urlencoded"]
  if (body !== "") {
    if (form === undefined) problems.push(`${where}: a body where the operation takes none`)
    else problems.push(...checkValue(form.schema, decodeForm(body), `${where} body`, true))
  }
  return problems
}

/** Problems with an answer: a 2xx against the operation's 200 schema, anything else against its default (Stripe's error). */
export const checkResponse = (method: string, url: URL, status: number, body: unknown): Array<string> => {
  const found = operationFor(method, url.pathname)
  if (found === null) return [`${method} ${url.pathname}: no such operation in the document`]
  const response = found.operation.responses[status >= 200 && status < 300 ? "200" : "default"]
  const schema = response?.content?.["application/json"]?.schema
  if (schema === undefined) return [`${method} ${found.template} ${status}: the document describes no such answer`]
  return checkValue(schema, body, `${method} ${found.template} ${status}`, false)
}

/** An event as sent to a webhook endpoint, and the object it carries against its own schema. */
export const checkEvent = (event: unknown): Array<string> => {
  const problems = checkValue({ $ref: "#/components/schemas/event" }, event, "event", false)
  const type = (event as { type?: string }).type ?? ""
  const object = (event as { data?: { object?: unknown } }).data?.object
  const schema = type.startsWith("charge.dispute.")
    ? "dispute"
    : type.startsWith("refund.") || type === "charge.refund.updated"
    ? "refund"
    : null
  return schema === null
    ? problems
    : [...problems, ...checkValue({ $ref: `#/components/schemas/${schema}` }, object, `event.data.object`, false)]
}

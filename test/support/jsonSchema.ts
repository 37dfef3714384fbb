/**
 * A small JSON Schema validator for the keywords our schemas use (docs/harness-result.schema.json):
 * type, const, enum, properties, required, additionalProperties, items, minItems, maxItems,
 * minimum, minLength, pattern, anyOf, oneOf and `$ref` into `$defs`. A keyword it does not know
 * is an error, so a schema cannot say more than is checked. Answers every error, with its path.
 */
type Schema = { readonly [keyword: string]: unknown }

const annotations = new Set(["$schema", "$id", "title", "description", "$defs"])
const known = new Set([
  ...annotations,
  "type",
  "const",
  "enum",
  "properties",
  "required",
  "additionalProperties",
  "items",
  "minItems",
  "maxItems",
  "minimum",
  "minLength",
  "pattern",
  "anyOf",
  "oneOf",
  "$ref"
])

const typeOf = (value: unknown): string =>
  value === null
    ? "null"
    : Array.isArray(value)
    ? "array"
    : typeof value === "number"
    ? (Number.isInteger(value) ? "integer" : "number")
    : typeof value

const hasType = (value: unknown, type: string) => {
  const actual = typeOf(value)
  return actual === type || (type === "number" && actual === "integer")
}

export const validate = (root: Schema, value: unknown): Array<string> => {
  const errors: Array<string> = []
  const resolve = (schema: Schema): Schema => {
    const ref = schema["$ref"]
    if (typeof ref !== "string") return schema
    const name = /^#\/\$defs\/(.+)$/.exec(ref)?.[1]
    const target = name === undefined ? undefined : (root["$defs"] as Record<string, Schema> | undefined)?.[name]
    if (target === undefined) throw new Error(`unresolved $ref ${ref}`)
    return target
  }
  const check = (given: Schema, at: unknown, path: string): void => {
    const schema = resolve(given)
    for (const keyword of Object.keys(schema)) {
      if (!known.has(keyword)) throw new Error(`${path}: keyword ${keyword} not supported`)
    }
    const fail = (message: string) => void errors.push(`${path || "/"}: ${message}`)
    if (schema["type"] !== undefined) {
      const types = Array.isArray(schema["type"]) ? schema["type"] as Array<string> : [schema["type"] as string]
      if (!types.some((t) => hasType(at, t))) return fail(`is ${typeOf(at)}, not ${types.join(" or ")}`)
    }
    if ("const" in schema && at !== schema["const"]) {
      fail(`is ${JSON.stringify(at)}, not ${JSON.stringify(schema["const"])}`)
    }
    if (Array.isArray(schema["enum"]) && !schema["enum"].includes(at)) {
      fail(`${JSON.stringify(at)} is not one of ${JSON.stringify(schema["enum"])}`)
    }
    if (typeof at === "number" && typeof schema["minimum"] === "number" && at < schema["minimum"]) {
      fail(`${at} is under ${schema["minimum"]}`)
    }
    if (typeof at === "string") {
      if (typeof schema["minLength"] === "number" && at.length < schema["minLength"]) {
        fail(`is shorter than ${schema["minLength"]}`)
      }
      if (typeof schema["pattern"] === "string" && !new RegExp(schema["pattern"], "u").test(at)) {
        fail(`'${at}' does not match ${schema["pattern"]}`)
      }
    }
    if (Array.isArray(at)) checkArray(schema, at, path, fail)
    if (typeOf(at) === "object") checkObject(schema, at as Record<string, unknown>, path, fail)
    if (Array.isArray(schema["anyOf"]) && !(schema["anyOf"] as Array<Schema>).some((s) => quiet(s, at, path))) {
      fail("matches none of anyOf")
    }
    if (Array.isArray(schema["oneOf"])) {
      const matching = (schema["oneOf"] as Array<Schema>).filter((s) => quiet(s, at, path)).length
      if (matching !== 1) fail(`matches ${matching} of oneOf, not exactly 1`)
    }
  }
  const quiet = (schema: Schema, at: unknown, path: string) => {
    const before = errors.length
    check(schema, at, path)
    const ok = errors.length === before
    errors.length = before
    return ok
  }
  const checkArray = (schema: Schema, at: Array<unknown>, path: string, fail: (m: string) => void) => {
    if (typeof schema["minItems"] === "number" && at.length < schema["minItems"]) {
      fail(`has ${at.length} items, under ${schema["minItems"]}`)
    }
    if (typeof schema["maxItems"] === "number" && at.length > schema["maxItems"]) {
      fail(`has ${at.length} items, over ${schema["maxItems"]}`)
    }
    if (schema["items"] !== undefined) at.forEach((item, i) => check(schema["items"] as Schema, item, `${path}/${i}`))
  }
  const checkObject = (schema: Schema, at: Record<string, unknown>, path: string, fail: (m: string) => void) => {
    const properties = (schema["properties"] ?? {}) as Record<string, Schema>
    for (const key of (schema["required"] ?? []) as Array<string>) if (!(key in at)) fail(`lacks required ${key}`)
    for (const [key, item] of Object.entries(at)) {
      if (key in properties) check(properties[key]!, item, `${path}/${key}`)
      else if (schema["additionalProperties"] === false) fail(`has ${key}, which the schema does not list`)
      else if (typeof schema["additionalProperties"] === "object") {
        check(schema["additionalProperties"] as Schema, item, `${path}/${key}`)
      }
    }
  }
  check(root, value, "")
  return errors
}

import { Context, Data, Effect, Layer, Redacted } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { isIP } from "node:net"
import { join, resolve } from "node:path"
import type { Thresholds } from "../domain/Fraud.ts"
import { newKeyHex, parseKey } from "./Sealing.ts"

/** Parses `30s`, `5m`, `2h`, `24h`, `1500ms`, `1d` into milliseconds. */
export const parseDurationMs = (text: string): number | null => {
  const match = /^(\d+)(ms|s|m|h|d)$/.exec(text.trim())
  if (match === null) return null
  const unit = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 }[match[2] as "ms" | "s" | "m" | "h" | "d"]
  return Number(match[1]) * unit
}

/**
 * The environment read by `appConfig` (a record of variables, `process.env` by default). Effect
 * 4's `Config` decodes through Schema and reports its own messages; the rules here name the
 * variable, the rule and (unless secret) what was given, so the reader is this module's own.
 */
export type Environment = Readonly<Record<string, string | undefined>>

/** One variable read: its value, or the sentence that says what is wrong with it. */
type Read<A> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly problem: string }
type Rule<A> = { readonly ok: true; readonly value: A } | { readonly ok: false; readonly rule: string }

const valid = <A>(value: A): Rule<A> => ({ ok: true, value })
const invalid = (rule: string): Rule<never> => ({ ok: false, rule })

/**
 * One environment variable: `parse` turns its text into a value or says the rule it breaks, and
 * the error names the variable, the rule and (unless secret) what was given, so an operator reads
 * `FRAUD_REVIEW_THRESHOLD must be a number between 0 and 1, got 'abc'` and knows what to fix.
 * Unset, the variable takes `fallback`.
 */
const variable = <A, B = A>(
  name: string,
  parse: (text: string) => Rule<A>,
  fallback: B,
  options: { readonly secret?: boolean } = {}
) =>
(environment: Environment): Read<A | B> => {
  const text = environment[name]
  if (text === undefined) return { ok: true, value: fallback }
  const parsed = parse(text.trim())
  return parsed.ok
    ? parsed
    : { ok: false, problem: `${name} ${parsed.rule}${options.secret === true ? "" : `, got '${text}'`}` }
}

const check = <A>(value: A | null, rule: string): Rule<A> => (value === null ? invalid(rule) : valid(value))

const integerIn = (minimum: number, maximum: number) => (text: string) => {
  const n = /^\d+$/.test(text) ? Number(text) : Number.NaN
  return check(
    Number.isSafeInteger(n) && n >= minimum && n <= maximum ? n : null,
    `must be an integer between ${minimum} and ${maximum}`
  )
}

const booleanText = (text: string): Rule<boolean> => {
  const lower = text.toLowerCase()
  if (["true", "1", "yes", "on"].includes(lower)) return valid(true)
  if (["false", "0", "no", "off"].includes(lower)) return valid(false)
  return invalid("must be true or false")
}

/** An IP address (v4 or v6) or a host name of letters, digits and hyphens in dot-separated labels. */
const hostText = (text: string) => {
  const hostName = text.length <= 253 &&
    text.split(".").every((label) => /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(label))
  return check(
    isIP(text) !== 0 || hostName ? text : null,
    "must be an IP address or a host name to listen on, such as 127.0.0.1, 0.0.0.0 or ::1"
  )
}

const durationMs = (name: string, fallback: string) =>
  variable(
    name,
    (text) => check(parseDurationMs(text), "must be a duration such as 30s, 5m or 24h"),
    parseDurationMs(fallback)!
  )

/** A duration that must be at least `minimumMs` and at most `maximumMs` (a timeout of 0 would mean none). */
const boundedDurationMs = (name: string, fallback: string, minimumMs: number, maximumMs: number, rule: string) =>
  variable(name, (text) => {
    const ms = parseDurationMs(text)
    return check(ms !== null && ms >= minimumMs && ms <= maximumMs ? ms : null, rule)
  }, parseDurationMs(fallback)!)

const scheduleMs = (name: string, fallback: string) => {
  const parse = (text: string) => {
    const parts = text.split(",").map(parseDurationMs)
    const isValid = parts.length > 0 && parts.length <= 20 && parts.every((p) => p !== null && p > 0) &&
      parts.every((p, i) => i === 0 || p! > parts[i - 1]!)
    return check(
      isValid ? (parts as Array<number>) : null,
      "must be 1 to 20 increasing durations separated by commas, such as 1m,5m,30m"
    )
  }
  const parsed = parse(fallback)
  if (!parsed.ok) throw new Error(`${name}'s default breaks its own rule`)
  return variable(name, parse, parsed.value)
}

const probability = (name: string, fallback: number) =>
  variable(name, (text) => {
    const n = /^\d*\.?\d+$/.test(text) ? Number(text) : Number.NaN
    return check(n >= 0 && n <= 1 ? n : null, "must be a number between 0 and 1, such as 0.5")
  }, fallback)

const cutoff = variable("SETTLEMENT_CUTOFF", (text) => {
  const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(text)
  return check(
    match === null ? null : Number(match[1]) * 60 + Number(match[2]),
    "must be a time of day HH:MM (UTC), such as 00:00"
  )
}, 0)

export interface AppConfigShape {
  readonly port: number
  /** The interface the HTTP server listens on. */
  readonly host: string
  readonly databaseUrl: string | null
  readonly webhookAllowPrivateUrls: boolean
  readonly webhookRetryScheduleMs: ReadonlyArray<number>
  readonly webhookTimeoutMs: number
  readonly rateLimitPerSecond: number
  readonly fraudThresholds: Thresholds
  readonly idempotencyTtlMs: number
  /** Minutes after midnight UTC of the daily settlement cut-off. */
  readonly settlementCutoffMinutes: number
  /** How long a create request waits for the card network before answering `pending`. */
  readonly requestDeadlineMs: number
  /** How long the flow waits for the card network before failing with `network_timeout`. */
  readonly acquirerTimeoutMs: number
  /** How long an in-flight idempotency claim blocks retries before a crashed holder is presumed dead. */
  readonly idempotencyLeaseMs: number
  /**
   * How long a process trusts an API key it looked up (its status, its merchant) before reading
   * it again: the staleness bound of a revocation made by another process. 0: read every time.
   */
  readonly apiKeyCacheTtlMs: number
  /**
   * 64 hex characters (AES-256): seals stored idempotent responses that carry a secret. Null:
   * kept in `.data/` with the embedded database, else a key of this process only.
   */
  readonly responseEncryptionKey: Redacted.Redacted<string> | null
  /**
   * How long a stop (SIGTERM, SIGINT) waits for in-flight requests, and then for in-flight
   * webhook attempts, before it cuts them off.
   */
  readonly shutdownGraceMs: number
  /**
   * The longest a statement may run: PostgreSQL's `statement_timeout` on every connection of the
   * pool. The service itself waits that long plus `statementGraceMs` for an answer, then gives
   * the connection up (a frozen server answers nothing, not even the cancel).
   */
  readonly databaseStatementTimeoutMs: number
  /** The longest a statement waits for a connection of the pool, or for a new connection to be opened. */
  readonly databaseConnectTimeoutMs: number
  /** The sandbox network disputes a `tok_dispute_won`/`tok_dispute_lost` payment this long after its capture... */
  readonly sandboxDisputeOpenAfterMs: number
  /** ...and resolves the dispute this long after it opened. */
  readonly sandboxDisputeResolveAfterMs: number
  /** The card network: the in-process sandbox, or Stripe (`stripe` below). */
  readonly acquirer: "sandbox" | "stripe"
  /** Stripe's credentials and address; set when `acquirer` is `stripe`, else null. */
  readonly stripe: StripeSettings | null
}

export interface StripeSettings {
  /** `sk_…` or a restricted `rk_…` key; `_test_` keys map the sandbox tokens to Stripe's test cards. */
  readonly secretKey: Redacted.Redacted<string>
  /** The webhook endpoint's signing secret (`whsec_…`). */
  readonly webhookSecret: Redacted.Redacted<string>
  /** `https://api.stripe.com`, or an `http://` stand-in on a loopback address (the sandbox processor). */
  readonly apiBase: string
}

/** An https URL, or http on a loopback host (a local stand-in such as the sandbox processor); no path, query or credentials. */
const apiBaseText = (text: string): Rule<string> => {
  let url: URL
  try {
    url = new URL(text)
  } catch {
    return invalid("must be a URL such as https://api.stripe.com")
  }
  const host = url.hostname.replace(/^\[|\]$/g, "")
  const loopback = host === "localhost" || host === "::1" || /^127\.\d+\.\d+\.\d+$/.test(host)
  const secure = url.protocol === "https:" || (url.protocol === "http:" && loopback)
  const bare = url.username === "" && url.password === "" && (url.pathname === "/" || url.pathname === "") &&
    url.search === "" && url.hash === ""
  return secure && bare
    ? valid(url.origin)
    : invalid(
      "must be an https:// origin (http:// only on a loopback address), with no path, such as https://api.stripe.com"
    )
}

/** A secret with one of `prefixes` and nothing but letters, digits and underscores after it. */
const secretText = (prefixes: ReadonlyArray<string>, example: string) => (text: string) =>
  check(
    prefixes.some((prefix) => text.startsWith(prefix)) && /^[A-Za-z0-9_]{8,255}$/.test(text)
      ? Redacted.make(text)
      : null,
    `must be a key beginning ${prefixes.join(" or ")} (${example})`
  )

export class AppConfig extends Context.Service<AppConfig, AppConfigShape>()("payments/AppConfig") {}

/** Every variable of the configuration; `appConfig` reads them all and reports every problem at once. */
const readers = {
  port: variable("PORT", integerIn(1, 65535), 3000),
  host: variable("HOST", hostText, "127.0.0.1"),
  databaseUrl: variable("DATABASE_URL", (text) => valid(text === "" ? null : text), null),
  webhookAllowPrivateUrls: variable("WEBHOOK_ALLOW_PRIVATE_URLS", booleanText, false),
  webhookRetryScheduleMs: scheduleMs("WEBHOOK_RETRY_SCHEDULE", "1m,5m,30m,2h,24h"),
  webhookTimeoutMs: durationMs("WEBHOOK_TIMEOUT", "30s"),
  rateLimitPerSecond: variable("RATE_LIMIT_PER_SECOND", integerIn(1, 1_000_000_000), 100),
  fraudReview: probability("FRAUD_REVIEW_THRESHOLD", 0.5),
  fraudBlock: probability("FRAUD_BLOCK_THRESHOLD", 0.8),
  idempotencyTtlMs: durationMs("IDEMPOTENCY_TTL", "24h"),
  settlementCutoffMinutes: cutoff,
  requestDeadlineMs: durationMs("REQUEST_DEADLINE", "5s"),
  acquirerTimeoutMs: durationMs("ACQUIRER_TIMEOUT", "10s"),
  idempotencyLeaseMs: durationMs("IDEMPOTENCY_LEASE", "60s"),
  apiKeyCacheTtlMs: durationMs("API_KEY_CACHE_TTL", "5s"),
  shutdownGraceMs: durationMs("SHUTDOWN_GRACE", "10s"),
  responseEncryptionKey: variable(
    "RESPONSE_ENCRYPTION_KEY",
    (text) =>
      check(
        parseKey(text) === null ? null : Redacted.make(text),
        "must be 64 hexadecimal characters (32 bytes; e.g. openssl rand -hex 32)"
      ),
    null,
    { secret: true }
  ),
  databaseStatementTimeoutMs: boundedDurationMs(
    "DATABASE_STATEMENT_TIMEOUT",
    "3s",
    100,
    3_600_000,
    "must be a duration from 100ms to 1h, such as 3s"
  ),
  databaseConnectTimeoutMs: boundedDurationMs(
    "DATABASE_CONNECT_TIMEOUT",
    "2s",
    100,
    600_000,
    "must be a duration from 100ms to 10m, such as 2s"
  ),
  sandboxDisputeOpenAfterMs: durationMs("SANDBOX_DISPUTE_OPEN_AFTER", "1m"),
  sandboxDisputeResolveAfterMs: durationMs("SANDBOX_DISPUTE_RESOLVE_AFTER", "1m"),
  acquirer: variable(
    "ACQUIRER",
    (text) =>
      check<"sandbox" | "stripe">(text === "sandbox" || text === "stripe" ? text : null, "must be sandbox or stripe"),
    "sandbox" as "sandbox" | "stripe"
  ),
  stripeSecretKey: variable(
    "STRIPE_SECRET_KEY",
    secretText(["sk_", "rk_"], "the secret key of the Stripe dashboard, sk_test_… or sk_live_…"),
    null,
    {
      secret: true
    }
  ),
  stripeWebhookSecret: variable(
    "STRIPE_WEBHOOK_SECRET",
    secretText(["whsec_"], "the signing secret of the webhook endpoint"),
    null,
    { secret: true }
  ),
  stripeApiBase: variable("STRIPE_API_BASE", apiBaseText, "https://api.stripe.com")
}

/** Invalid configuration: every broken variable, named with its rule, on one line. */
export class ConfigurationError extends Data.TaggedError("ConfigurationError")<{ readonly message: string }> {}

type Values = {
  -readonly [K in keyof typeof readers]: ReturnType<(typeof readers)[K]> extends Read<infer A> ? A : never
}

/** The configuration of `environment`, or every problem with it. */
export const appConfig = (environment: Environment): Effect.Effect<AppConfigShape, ConfigurationError> =>
  Effect.suspend(() => {
    const problems: Array<string> = []
    const values: Partial<Values> = {}
    for (const key of Object.keys(readers) as Array<keyof typeof readers>) {
      const read = readers[key](environment)
      if (read.ok) (values as Record<string, unknown>)[key] = read.value
      else problems.push(read.problem)
    }
    const v = values as Values
    if (problems.length === 0 && v.fraudReview >= v.fraudBlock) {
      problems.push(`FRAUD_REVIEW_THRESHOLD (${v.fraudReview}) must be below FRAUD_BLOCK_THRESHOLD (${v.fraudBlock})`)
    }
    if (problems.length === 0 && v.acquirer === "stripe") {
      if (v.stripeSecretKey === null) problems.push("STRIPE_SECRET_KEY must be set when ACQUIRER is stripe")
      if (v.stripeWebhookSecret === null) problems.push("STRIPE_WEBHOOK_SECRET must be set when ACQUIRER is stripe")
    }
    if (problems.length > 0) {
      return Effect.fail(
        new ConfigurationError({ message: `invalid configuration: ${[...new Set(problems)].join("; ")}` })
      )
    }
    const { fraudBlock, fraudReview, stripeApiBase, stripeSecretKey, stripeWebhookSecret, ...rest } = v
    const stripe = rest.acquirer === "stripe" && stripeSecretKey !== null && stripeWebhookSecret !== null
      ? { secretKey: stripeSecretKey, webhookSecret: stripeWebhookSecret, apiBase: stripeApiBase }
      : null
    return Effect.succeed({ ...rest, stripe, fraudThresholds: { review: fraudReview, block: fraudBlock } })
  })

export const dataDirectory = resolve(process.env.PAYMENTS_DATA_DIR ?? ".data")

/** The data directory cannot hold what the embedded mode keeps there. */
export class DataDirectoryError extends Data.TaggedError("DataDirectoryError")<{ readonly message: string }> {}

/**
 * With the embedded database and no RESPONSE_ENCRYPTION_KEY, the key lives beside the data in
 * `.data/response-encryption-key` (mode 0600), so replays survive restarts.
 */
const withLocalResponseKey = (config: AppConfigShape) =>
  Effect.try({
    try: (): AppConfigShape => {
      if (config.responseEncryptionKey !== null || config.databaseUrl !== null) return config
      const file = join(dataDirectory, "response-encryption-key")
      if (!existsSync(file)) {
        mkdirSync(dataDirectory, { recursive: true })
        writeFileSync(file, `${newKeyHex()}\n`, { mode: 0o600, flag: "wx" })
      }
      const hex = readFileSync(file, "utf8").trim()
      if (parseKey(hex) === null) throw new Error(`${file} does not hold 64 hexadecimal characters`)
      return { ...config, responseEncryptionKey: Redacted.make(hex) }
    },
    catch: (cause) =>
      new DataDirectoryError({
        message:
          `cannot keep the response encryption key in ${dataDirectory} (${
            cause instanceof Error ? cause.message : String(cause)
          }): ` +
          "set PAYMENTS_DATA_DIR to a writable directory, or set RESPONSE_ENCRYPTION_KEY and DATABASE_URL"
      })
  })

/** The configuration read from `environment` (the variables of another process, say), as `layer` reads this one's. */
export const layerFrom = (environment: Environment) =>
  Layer.effect(AppConfig, Effect.flatMap(appConfig(environment), withLocalResponseKey))
export const layer = Layer.unwrap(Effect.sync(() => layerFrom(process.env)))
export const layerWith = (config: AppConfigShape) => Layer.succeed(AppConfig, config)

/** Defaults (no environment read), for tests and the simulator. */
export const defaults: AppConfigShape = Effect.runSync(appConfig({}))
export const defaultsWith = (overrides: Partial<AppConfigShape>): AppConfigShape => ({ ...defaults, ...overrides })

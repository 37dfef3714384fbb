import { Config, ConfigError, ConfigProvider, Context, Data, Either, Effect, Layer, Redacted } from "effect"
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
 * One environment variable: `parse` turns its text into a value or says the rule it breaks, and
 * the error names the variable, the rule and (unless secret) what was given, so an operator reads
 * `FRAUD_REVIEW_THRESHOLD must be a number between 0 and 1, got 'abc'` and knows what to fix.
 */
const variable = <A>(name: string, parse: (text: string) => Either.Either<A, string>, options: { readonly secret?: boolean } = {}) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) =>
      Either.mapLeft(parse(text.trim()), (rule) =>
        ConfigError.InvalidData([name], `${name} ${rule}${options.secret === true ? "" : `, got '${text}'`}`))
    )
  )

const check = <A>(value: A | null, rule: string): Either.Either<A, string> => (value === null ? Either.left(rule) : Either.right(value))

const integerIn = (minimum: number, maximum: number) => (text: string) => {
  const n = /^\d+$/.test(text) ? Number(text) : Number.NaN
  return check(Number.isSafeInteger(n) && n >= minimum && n <= maximum ? n : null, `must be an integer between ${minimum} and ${maximum}`)
}

const booleanText = (text: string) => {
  const lower = text.toLowerCase()
  if (["true", "1", "yes", "on"].includes(lower)) return Either.right(true)
  if (["false", "0", "no", "off"].includes(lower)) return Either.right(false)
  return Either.left("must be true or false")
}

/** An IP address (v4 or v6) or a host name of letters, digits and hyphens in dot-separated labels. */
const hostText = (text: string) => {
  const hostName = text.length <= 253 && text.split(".").every((label) => /^[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?$/.test(label))
  return check(isIP(text) !== 0 || hostName ? text : null, "must be an IP address or a host name to listen on, such as 127.0.0.1, 0.0.0.0 or ::1")
}

const durationMs = (name: string, fallback: string) =>
  variable(name, (text) => check(parseDurationMs(text), "must be a duration such as 30s, 5m or 24h")).pipe(
    Config.withDefault(parseDurationMs(fallback)!)
  )

/** A duration that must be at least `minimumMs` and at most `maximumMs` (a timeout of 0 would mean none). */
const boundedDurationMs = (name: string, fallback: string, minimumMs: number, maximumMs: number, rule: string) =>
  variable(name, (text) => {
    const ms = parseDurationMs(text)
    return check(ms !== null && ms >= minimumMs && ms <= maximumMs ? ms : null, rule)
  }).pipe(Config.withDefault(parseDurationMs(fallback)!))

const scheduleMs = (name: string, fallback: string) => {
  const parse = (text: string) => {
    const parts = text.split(",").map(parseDurationMs)
    const valid = parts.length > 0 && parts.length <= 20 && parts.every((p) => p !== null && p > 0) &&
      parts.every((p, i) => i === 0 || p! > parts[i - 1]!)
    return check(valid ? (parts as Array<number>) : null, "must be 1 to 20 increasing durations separated by commas, such as 1m,5m,30m")
  }
  return variable(name, parse).pipe(Config.withDefault(Either.getOrThrow(parse(fallback))))
}

const probability = (name: string, fallback: number) =>
  variable(name, (text) => {
    const n = /^\d*\.?\d+$/.test(text) ? Number(text) : Number.NaN
    return check(n >= 0 && n <= 1 ? n : null, "must be a number between 0 and 1, such as 0.5")
  }).pipe(Config.withDefault(fallback))

const cutoff = variable("SETTLEMENT_CUTOFF", (text) => {
  const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(text)
  return check(match === null ? null : Number(match[1]) * 60 + Number(match[2]), "must be a time of day HH:MM (UTC), such as 00:00")
}).pipe(Config.withDefault(0))

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
}

export class AppConfig extends Context.Tag("payments/AppConfig")<AppConfig, AppConfigShape>() {}

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  port: variable("PORT", integerIn(1, 65535)).pipe(Config.withDefault(3000)),
  host: variable("HOST", hostText).pipe(Config.withDefault("127.0.0.1")),
  databaseUrl: Config.string("DATABASE_URL").pipe(Config.option, Config.map((o) => (o._tag === "Some" && o.value !== "" ? o.value : null))),
  webhookAllowPrivateUrls: variable("WEBHOOK_ALLOW_PRIVATE_URLS", booleanText).pipe(Config.withDefault(false)),
  webhookRetryScheduleMs: scheduleMs("WEBHOOK_RETRY_SCHEDULE", "1m,5m,30m,2h,24h"),
  webhookTimeoutMs: durationMs("WEBHOOK_TIMEOUT", "30s"),
  rateLimitPerSecond: variable("RATE_LIMIT_PER_SECOND", integerIn(1, 1_000_000_000)).pipe(Config.withDefault(100)),
  fraudThresholds: Config.all({
    review: probability("FRAUD_REVIEW_THRESHOLD", 0.5),
    block: probability("FRAUD_BLOCK_THRESHOLD", 0.8)
  }).pipe(Config.mapOrFail((t) =>
    t.review < t.block
      ? Either.right(t)
      : Either.left(ConfigError.InvalidData(
        ["FRAUD_REVIEW_THRESHOLD"],
        `FRAUD_REVIEW_THRESHOLD (${t.review}) must be below FRAUD_BLOCK_THRESHOLD (${t.block})`
      ))
  )),
  idempotencyTtlMs: durationMs("IDEMPOTENCY_TTL", "24h"),
  settlementCutoffMinutes: cutoff,
  requestDeadlineMs: durationMs("REQUEST_DEADLINE", "5s"),
  acquirerTimeoutMs: durationMs("ACQUIRER_TIMEOUT", "10s"),
  idempotencyLeaseMs: durationMs("IDEMPOTENCY_LEASE", "60s"),
  apiKeyCacheTtlMs: durationMs("API_KEY_CACHE_TTL", "5s"),
  shutdownGraceMs: durationMs("SHUTDOWN_GRACE", "10s"),
  responseEncryptionKey: variable(
    "RESPONSE_ENCRYPTION_KEY",
    (text) => check(parseKey(text) === null ? null : Redacted.make(text), "must be 64 hexadecimal characters (32 bytes; e.g. openssl rand -hex 32)"),
    { secret: true }
  ).pipe(Config.option, Config.map((o) => (o._tag === "Some" ? o.value : null))),
  databaseStatementTimeoutMs: boundedDurationMs(
    "DATABASE_STATEMENT_TIMEOUT", "3s", 100, 3_600_000, "must be a duration from 100ms to 1h, such as 3s"
  ),
  databaseConnectTimeoutMs: boundedDurationMs(
    "DATABASE_CONNECT_TIMEOUT", "2s", 100, 600_000, "must be a duration from 100ms to 10m, such as 2s"
  ),
  sandboxDisputeOpenAfterMs: durationMs("SANDBOX_DISPUTE_OPEN_AFTER", "1m"),
  sandboxDisputeResolveAfterMs: durationMs("SANDBOX_DISPUTE_RESOLVE_AFTER", "1m")
})

/** Invalid configuration: every broken variable, named with its rule, on one line. */
export class ConfigurationError extends Data.TaggedError("ConfigurationError")<{ readonly message: string }> {}

const problemsOf = (error: ConfigError.ConfigError): Array<string> => {
  switch (error._op) {
    case "And":
    case "Or":
      return [...problemsOf(error.left), ...problemsOf(error.right)]
    default: {
      // Config nests the variable's name into the path as it is read: the last element is the variable.
      const name = error.path[error.path.length - 1] ?? ""
      return [name === "" || error.message.startsWith(name) ? error.message : `${name}: ${error.message}`]
    }
  }
}

export const fromConfigError = (error: ConfigError.ConfigError) =>
  new ConfigurationError({ message: `invalid configuration: ${[...new Set(problemsOf(error))].join("; ")}` })

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
        message: `cannot keep the response encryption key in ${dataDirectory} (${cause instanceof Error ? cause.message : String(cause)}): ` +
          "set PAYMENTS_DATA_DIR to a writable directory, or set RESPONSE_ENCRYPTION_KEY and DATABASE_URL"
      })
  })

export const layer = Layer.effect(AppConfig, Effect.flatMap(Effect.mapError(appConfig, fromConfigError), withLocalResponseKey))
export const layerWith = (config: AppConfigShape) => Layer.succeed(AppConfig, config)

/** Defaults (no environment read), for tests and the simulator. */
export const defaults: AppConfigShape = Effect.runSync(
  Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map()))
)
export const defaultsWith = (overrides: Partial<AppConfigShape>): AppConfigShape => ({ ...defaults, ...overrides })

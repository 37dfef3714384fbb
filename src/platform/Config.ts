import { Config, ConfigError, ConfigProvider, Context, Data, Either, Effect, Layer, Redacted } from "effect"
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
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

const durationMs = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((text) => {
      const ms = parseDurationMs(text)
      return ms === null
        ? Either.left(ConfigError.InvalidData([name], `${name} must be a duration such as 30s, 5m or 24h, got '${text}'`))
        : Either.right(ms)
    })
  )

const scheduleMs = (name: string, fallback: string) =>
  Config.string(name).pipe(
    Config.withDefault(fallback),
    Config.mapOrFail((text) => {
      const parts = text.split(",").map(parseDurationMs)
      const valid = parts.length > 0 && parts.length <= 20 && parts.every((p) => p !== null && p > 0) &&
        parts.every((p, i) => i === 0 || p! > parts[i - 1]!)
      return valid
        ? Either.right(parts as Array<number>)
        : Either.left(ConfigError.InvalidData([name], `${name} must be increasing durations separated by commas, got '${text}'`))
    })
  )

const probability = (name: string, fallback: number) =>
  Config.number(name).pipe(
    Config.withDefault(fallback),
    Config.validate({ message: `${name} must be between 0 and 1`, validation: (n) => n >= 0 && n <= 1 })
  )

const cutoff = Config.string("SETTLEMENT_CUTOFF").pipe(
  Config.withDefault("00:00"),
  Config.mapOrFail((text) => {
    const match = /^([01]\d|2[0-3]):([0-5]\d)$/.exec(text)
    return match === null
      ? Either.left(ConfigError.InvalidData(["SETTLEMENT_CUTOFF"], `SETTLEMENT_CUTOFF must be HH:MM (UTC), got '${text}'`))
      : Either.right(Number(match[1]) * 60 + Number(match[2]))
  })
)

export interface AppConfigShape {
  readonly port: number
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
}

export class AppConfig extends Context.Tag("payments/AppConfig")<AppConfig, AppConfigShape>() {}

export const appConfig: Config.Config<AppConfigShape> = Config.all({
  port: Config.port("PORT").pipe(Config.withDefault(3000)),
  databaseUrl: Config.string("DATABASE_URL").pipe(Config.option, Config.map((o) => (o._tag === "Some" && o.value !== "" ? o.value : null))),
  webhookAllowPrivateUrls: Config.boolean("WEBHOOK_ALLOW_PRIVATE_URLS").pipe(Config.withDefault(false)),
  webhookRetryScheduleMs: scheduleMs("WEBHOOK_RETRY_SCHEDULE", "1m,5m,30m,2h,24h"),
  webhookTimeoutMs: durationMs("WEBHOOK_TIMEOUT", "30s"),
  rateLimitPerSecond: Config.integer("RATE_LIMIT_PER_SECOND").pipe(
    Config.withDefault(100),
    Config.validate({ message: "RATE_LIMIT_PER_SECOND must be a positive integer", validation: (n) => n > 0 })
  ),
  fraudThresholds: Config.all({
    review: probability("FRAUD_REVIEW_THRESHOLD", 0.5),
    block: probability("FRAUD_BLOCK_THRESHOLD", 0.8)
  }).pipe(Config.validate({
    message: "FRAUD_REVIEW_THRESHOLD must be below FRAUD_BLOCK_THRESHOLD",
    validation: (t) => t.review < t.block
  })),
  idempotencyTtlMs: durationMs("IDEMPOTENCY_TTL", "24h"),
  settlementCutoffMinutes: cutoff,
  requestDeadlineMs: durationMs("REQUEST_DEADLINE", "5s"),
  acquirerTimeoutMs: durationMs("ACQUIRER_TIMEOUT", "10s"),
  idempotencyLeaseMs: durationMs("IDEMPOTENCY_LEASE", "60s"),
  apiKeyCacheTtlMs: durationMs("API_KEY_CACHE_TTL", "5s"),
  shutdownGraceMs: durationMs("SHUTDOWN_GRACE", "10s"),
  responseEncryptionKey: Config.redacted("RESPONSE_ENCRYPTION_KEY").pipe(
    Config.validate({
      message: "RESPONSE_ENCRYPTION_KEY must be 64 hexadecimal characters (32 bytes; e.g. openssl rand -hex 32)",
      validation: (key) => parseKey(Redacted.value(key)) !== null
    }),
    Config.option,
    Config.map((o) => (o._tag === "Some" ? o.value : null))
  )
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
        message: `cannot keep the response encryption key in ${dataDirectory} (${cause instanceof Error ? cause.message : String(cause)}): ` +
          "set PAYMENTS_DATA_DIR to a writable directory, or set RESPONSE_ENCRYPTION_KEY and DATABASE_URL"
      })
  })

export const layer = Layer.effect(AppConfig, Effect.flatMap(appConfig, withLocalResponseKey))
export const layerWith = (config: AppConfigShape) => Layer.succeed(AppConfig, config)

/** Defaults (no environment read), for tests and the simulator. */
export const defaults: AppConfigShape = Effect.runSync(
  Effect.withConfigProvider(appConfig, ConfigProvider.fromMap(new Map()))
)
export const defaultsWith = (overrides: Partial<AppConfigShape>): AppConfigShape => ({ ...defaults, ...overrides })

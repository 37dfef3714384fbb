import { Config, ConfigError, Effect, Either, HashMap, Layer, Logger, LogLevel } from "effect"
import { fromConfigError } from "./Config.ts"

export type LogFormat = "json" | "pretty"

/** `LOG_FORMAT`: `json` (default, one JSON object per line) or `pretty` (for a human at a terminal). */
export const logFormat: Config.Config<LogFormat> = Config.string("LOG_FORMAT").pipe(
  Config.withDefault("json"),
  Config.mapOrFail((text) =>
    text === "json" || text === "pretty"
      ? Either.right(text)
      : Either.left(ConfigError.InvalidData(["LOG_FORMAT"], `LOG_FORMAT must be json or pretty, got '${text}'`))
  )
)

/**
 * Secrets never reach a log line: API keys, webhook signing secrets and card tokens keep their
 * prefix only. The lookbehind leaves words that merely contain a prefix (`stok_`) alone.
 */
const secretPattern = /(?<![A-Za-z0-9])(sk_live_|whsec_|tok_)[A-Za-z0-9_-]+/g
const secretPrefix = /sk_live_|whsec_|tok_/

export const redact = (text: string) => (secretPrefix.test(text) ? text.replace(secretPattern, "$1[redacted]") : text)

const redactValue = (value: unknown): unknown => {
  if (typeof value === "string") return redact(value)
  if (Array.isArray(value)) return value.map(redactValue)
  return value
}

/** One JSON line per event on stderr, the whole line redacted. */
export const jsonLogger: Logger.Logger<unknown, void> = Logger.jsonLogger.pipe(Logger.map(redact), Logger.withConsoleError)

/** Effect's pretty logger on stderr; messages and annotations are redacted (the cause is printed as is). */
export const prettyLogger: Logger.Logger<unknown, void> = Logger.prettyLogger({ stderr: true }).pipe(
  Logger.mapInputOptions((options) => ({ ...options, message: redactValue(options.message), annotations: HashMap.map(options.annotations, redactValue) }))
)

/**
 * The process's only logger (stderr, so stdout carries command output alone): installed once,
 * in place of Effect's default one. `NodeRuntime.runMain` must not add its pretty logger beside it
 * (`disablePrettyLogger`), or every line is printed twice.
 */
export const layer = (format: LogFormat) => Logger.replace(Logger.defaultLogger, format === "pretty" ? prettyLogger : jsonLogger)

const levels = { debug: LogLevel.Debug, info: LogLevel.Info, warning: LogLevel.Warning, error: LogLevel.Error } as const
export type LogLevelName = keyof typeof levels

/**
 * `LOG_LEVEL`: `info` (default: a line per request), or `warning`/`error` to keep only problems
 * (the request lines then cost nothing: a line below the level is never formatted), or `debug`.
 */
export const logLevel: Config.Config<LogLevelName> = Config.string("LOG_LEVEL").pipe(
  Config.withDefault("info"),
  Config.mapOrFail((text) =>
    Object.hasOwn(levels, text)
      ? Either.right(text as LogLevelName)
      : Either.left(ConfigError.InvalidData(["LOG_LEVEL"], `LOG_LEVEL must be one of debug, info, warning, error, got '${text}'`))
  )
)

/** The logger chosen by `LOG_FORMAT` at the level of `LOG_LEVEL`; an invalid value stops the start naming the variable. */
export const layerFromEnvironment = Layer.unwrapEffect(Effect.mapError(
  Effect.map(Config.all([logFormat, logLevel]), ([format, level]) => Layer.merge(layer(format), Logger.minimumLogLevel(levels[level]))),
  fromConfigError
))

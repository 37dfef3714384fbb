import { Effect, Layer, Logger, References } from "effect"
import type * as LogLevel from "effect/LogLevel"
import { ConfigurationError, type Environment } from "./Config.ts"

export type LogFormat = "json" | "pretty"

/**
 * Secrets never reach a log line: API keys, webhook signing secrets and card tokens keep their
 * prefix only. The lookbehind leaves words that merely contain a prefix (`stok_`) alone.
 */
const secretPattern = /(?<![A-Za-z0-9])(sk_live_|whsec_|tok_)[A-Za-z0-9_-]+/g
const secretPrefix = /sk_live_|whsec_|tok_/

export const redact = (text: string) => (secretPrefix.test(text) ? text.replace(secretPattern, "$1[redacted]") : text)

/** One JSON line per event on stderr, the whole line redacted. */
export const jsonLogger: Logger.Logger<unknown, void> = Logger.formatJson.pipe(
  Logger.map(redact),
  Logger.withConsoleError
)

/**
 * Effect's pretty logger. Unlike the JSON lines it is not redacted on this port yet: Effect 4's
 * pretty logger has no hook on its input; use it only at a terminal of your own.
 */
export const prettyLogger: Logger.Logger<unknown, void> = Logger.consolePretty()

/**
 * The process's only logger (stderr, so stdout carries command output alone): installed once,
 * in place of Effect's default one.
 */
export const layer = (format: LogFormat) => Logger.layer([format === "pretty" ? prettyLogger : jsonLogger])

const levels = { debug: "Debug", info: "Info", warning: "Warn", error: "Error" } as const satisfies Record<
  string,
  LogLevel.LogLevel
>
export type LogLevelName = keyof typeof levels

/**
 * `LOG_FORMAT` (`json`, the default, or `pretty`) and `LOG_LEVEL` (`info`, the default: a line
 * per request; `warning`/`error` keep only problems; or `debug`).
 */
export const fromEnvironment = (
  environment: Environment
): Effect.Effect<{ format: LogFormat; level: LogLevelName }, ConfigurationError> => {
  const format = environment.LOG_FORMAT ?? "json"
  const level = environment.LOG_LEVEL ?? "info"
  const problems: Array<string> = []
  if (format !== "json" && format !== "pretty") problems.push(`LOG_FORMAT must be json or pretty, got '${format}'`)
  if (!Object.hasOwn(levels, level)) {
    problems.push(`LOG_LEVEL must be one of debug, info, warning, error, got '${level}'`)
  }
  return problems.length > 0
    ? Effect.fail(new ConfigurationError({ message: `invalid configuration: ${problems.join("; ")}` }))
    : Effect.succeed({ format: format as LogFormat, level: level as LogLevelName })
}

/** The logger chosen by `LOG_FORMAT` at the level of `LOG_LEVEL`; an invalid value stops the start naming the variable. */
export const layerFromEnvironment = Layer.unwrap(
  Effect.map(
    Effect.suspend(() => fromEnvironment(process.env)),
    ({ format, level }) => Layer.merge(layer(format), Layer.succeed(References.MinimumLogLevel, levels[level]))
  )
)

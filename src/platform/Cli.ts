/**
 * What every command of the project shares (`payments`, `sim`, `sim:sweep`, `sim:bench`,
 * `sim:count`, `bench`, `bench:report`, `bench:ab`, `bench:explain`, `harness`, `fraud:train`):
 * flags, `--help` and parsing from effect/cli; a bad invocation answered with one line on stderr
 * and exit code 2; tables a person reads; `--json` for scripts.
 *
 * A command runs with `run` and `runMain` (parse, then its handler, as an Effect), or reads its
 * flags with `parseOrExit` when its work is plain synchronous code (sim:bench, bench); tests and
 * commands that interpret flags themselves use `parseSync` and `parseOnly`.
 */
import * as NodeRuntime from "@effect/platform-node/NodeRuntime"
import { Cause, Console, Data, Effect, FileSystem, Layer, Option, Path, Runtime, Schema, Stdio, Terminal } from "effect"
import { CliConfig, CliError, CliOutput, Command, Flag, GlobalFlag } from "effect/cli"
import { ChildProcessSpawner } from "effect/process"

/** The exit code of a bad invocation: an unknown flag, a bad value, a missing argument. */
export const usageExitCode = 2

/**
 * A command that cannot go on: its one-line `message` goes to stderr (nothing when empty: the
 * command has said why itself) and the process exits with `exitCode`.
 */
export class CommandFailed
  extends Data.TaggedError("CommandFailed")<{ readonly message: string; readonly exitCode: number }>
{
  override get [Runtime.errorExitCode](): number {
    return this.exitCode
  }
}

/** A bad invocation the flags' own types cannot see (two flags that exclude each other, a malformed list): exit 2. */
export const usageError = (message: string) => new CommandFailed({ message, exitCode: usageExitCode })

/** Ends the run with `exitCode` after the command printed its own verdict (a simulation that broke a law: 1). */
export const exitWith = (exitCode: number) => new CommandFailed({ message: "", exitCode })

// ---------------------------------------------------------------------------------------------
// Flags: each states its default in --help.

const describe = <A>(
  flag: Flag.Flag<A>,
  description: string,
  fallback: { readonly value: A; readonly shown?: string } | undefined
): Flag.Flag<A> =>
  fallback === undefined
    ? flag.pipe(Flag.withDescription(description))
    : flag.pipe(
      Flag.withDescription(`${description} (default: ${fallback.shown ?? String(fallback.value)})`),
      Flag.withDefault(fallback.value)
    )

export interface Bounds {
  readonly min?: number
  readonly max?: number
}

export interface Default<A> {
  /** The value when the flag is not given; without it the flag is required (or wrap it in `Flag.optional`). */
  readonly default?: A
  /** How --help shows the default, when `String(default)` would not say it well. */
  readonly shown?: string
}

const fallback = <A>(
  options: Default<A>
) => (options.default === undefined ? undefined : { value: options.default, shown: options.shown })

const bounded = (schema: Schema.Number, bounds: Bounds) => {
  const checks = [
    ...(bounds.min === undefined ? [] : [Schema.isGreaterThanOrEqualTo(bounds.min)]),
    ...(bounds.max === undefined ? [] : [Schema.isLessThanOrEqualTo(bounds.max)])
  ]
  return checks.length === 0 ? schema : schema.check(...(checks as [typeof checks[0], ...typeof checks]))
}

/** An integer flag, at least 0 unless `min` says otherwise. */
export const integer = (name: string, description: string, options: Bounds & Default<number> = {}): Flag.Flag<number> =>
  describe(
    Flag.Int(name).pipe(Flag.withSchema(bounded(Schema.Int, { min: 0, ...options }))),
    description,
    fallback(options)
  )

/** A decimal number flag (finite). */
export const number = (name: string, description: string, options: Bounds & Default<number> = {}): Flag.Flag<number> =>
  describe(Flag.Finite(name).pipe(Flag.withSchema(bounded(Schema.Finite, options))), description, fallback(options))

export const text = (name: string, description: string, options: Default<string> = {}): Flag.Flag<string> =>
  describe(Flag.String(name), description, fallback(options))

export const choice = <const Choices extends ReadonlyArray<string>>(
  name: string,
  choices: Choices,
  description: string,
  options: Default<Choices[number]> = {}
): Flag.Flag<Choices[number]> => describe(Flag.Literals(name, choices), description, fallback(options))

/** A flag without a value: false unless given. */
export const toggle = (name: string, description: string): Flag.Flag<boolean> =>
  Flag.Boolean(name).pipe(Flag.withoutNegation, Flag.withDescription(description), Flag.withDefault(false))

/** `--json`: the machine-readable output instead of the tables. */
export const json = toggle("json", "print JSON for scripts instead of tables")

/** The value of an optional flag, or undefined. */
export const given = <A>(option: Option.Option<A>): A | undefined => Option.getOrUndefined(option)

// ---------------------------------------------------------------------------------------------
// Tables.

/** A number for a person: thousands separated, "n/a" when it is not finite (no data, a division by zero). */
export const formatNumber = (value: number | null | undefined, fractionDigits = 0): string =>
  value === null || value === undefined || !Number.isFinite(value)
    ? "n/a"
    : value.toLocaleString("en-US", { minimumFractionDigits: fractionDigits, maximumFractionDigits: fractionDigits })

export type Cell = string | number | null | undefined

const cellText = (
  cell: Cell
) => (typeof cell === "number" ? formatNumber(cell, Number.isInteger(cell) ? 0 : 2) : cell ?? "n/a")

/**
 * Columns padded to their widest cell, two spaces apart: numbers to the right, text to the left
 * (a column is numeric when every cell in it is a number or missing).
 */
export const table = (header: ReadonlyArray<string>, rows: ReadonlyArray<ReadonlyArray<Cell>>, indent = ""): string => {
  const texts = rows.map((row) => header.map((_, column) => cellText(row[column])))
  const numeric = header.map((_, column) =>
    rows.length > 0 && rows.every((row) => typeof row[column] === "number" || row[column] == null)
  )
  const widths = header.map((title, column) => Math.max(title.length, ...texts.map((row) => row[column]!.length)))
  const line = (cells: ReadonlyArray<string>) =>
    indent +
    cells.map((cell, column) => (numeric[column] ? cell.padStart(widths[column]!) : cell.padEnd(widths[column]!))).join(
      "  "
    ).trimEnd()
  return [line(header), ...texts.map(line)].join("\n")
}

/** Label and value pairs, one a line, the values aligned. */
export const fields = (rows: ReadonlyArray<readonly [string, Cell]>, indent = ""): string => {
  const width = Math.max(0, ...rows.map(([label]) => label.length))
  return rows.map(([label, value]) => `${indent}${label.padEnd(width)}  ${cellText(value)}`.trimEnd()).join("\n")
}

/** JSON on stdout as the commands have always printed it. */
export const printJson = (value: unknown, indent?: number) => Console.log(JSON.stringify(value, null, indent))

// ---------------------------------------------------------------------------------------------
// Running a command.

const formatter = CliOutput.defaultFormatter({ colors: false, globalFlags: "summary" })

/** The first complaint about an invocation, on one line. */
const complaintOf = (errors: ReadonlyArray<{ readonly message: string }>) =>
  (errors[0]?.message ?? "a subcommand is needed")
    .replace("Expected: Schema validation failed: Expected", "expected")
    .replace("Expected a string representing a finite number", "expected a number")
    .replace(/\s*\n\s*/g, "; ")

/** The first complaint about an invocation, as one line that points at the command's --help. */
const invocationLine = (commandPath: ReadonlyArray<string>, errors: ReadonlyArray<{ readonly message: string }>) =>
  `${commandPath.join(" ")}: ${complaintOf(errors)} (see ${commandPath.join(" ")} --help)`

/**
 * --help on stdout (exit 0); a bad invocation as one line on stderr; a command that needs a
 * subcommand and got none prints its help on stderr (exit 2).
 */
const presenter: CliOutput.Presenter = {
  present: (event) => {
    switch (event._tag) {
      case "Help":
        return event.reason === "Requested"
          ? Console.log(formatter.formatHelpDoc(event.helpDoc))
          : Console.error(formatter.formatHelpDoc(event.helpDoc))
      case "InvalidInvocation":
        return Console.error(invocationLine(event.commandPath, event.errors))
      case "Version":
        return Console.log(formatter.formatVersion(event.name, event.version))
    }
  }
}

/**
 * What effect/cli asks of its host, for commands that read no files, spawn nothing and prompt
 * for nothing: the arguments come from `run`'s caller, and nothing here touches the terminal.
 */
const hostLayer = Layer.mergeAll(
  FileSystem.layerNoop({}),
  Path.layer,
  Stdio.layerTest({}),
  Layer.succeed(Terminal.Terminal)(Terminal.make({
    columns: Effect.succeed(100),
    rows: Effect.succeed(40),
    size: Effect.die("the commands watch no terminal size"),
    readInput: Effect.die("the commands read no terminal input"),
    readLine: Effect.die("the commands read no terminal input"),
    display: (text) => Console.log(text)
  })),
  Layer.succeed(ChildProcessSpawner.ChildProcessSpawner)(
    ChildProcessSpawner.make(() => Effect.die("the commands spawn nothing through effect/cli"))
  ),
  CliOutput.layerPresenter(presenter),
  // --help only: no --version, --wizard, --completions or --log-level (LOG_LEVEL configures the service's logs).
  CliConfig.layer({ builtIns: [GlobalFlag.Help] })
)

/** effect/cli's parse failures (reported already by the presenter) as exit 2; --help as success. */
const asExitCodes = <A, E, R>(
  effect: Effect.Effect<A, E | CliError.CliError, R>
): Effect.Effect<A | undefined, E | CommandFailed, R> =>
  effect.pipe(
    Effect.catch((error): Effect.Effect<undefined, E | CommandFailed> => {
      if (CliError.isCliError(error)) {
        return Effect.fail(exitWith(usageExitCode))
      }
      return Effect.fail(error as E)
    })
  )

/**
 * Parses `argv` (without node and the script) against `command` and runs its handler. --help
 * prints and succeeds; a bad invocation prints one line and fails with exit code 2.
 */
export const run = <Name extends string, Input, E, R>(
  command: Command.Command<Name, Input, {}, E, R>,
  argv: ReadonlyArray<string>
) =>
  asExitCodes(Command.runWith(command, { version: "0.1.0" })(argv)).pipe(
    Effect.asVoid,
    Effect.provide(hostLayer)
  ) as Effect.Effect<void, Exclude<E, CliError.CliError> | CommandFailed, Exclude<R, Command.Environment>>

export type Parsed<Input> =
  | { readonly _tag: "Parsed"; readonly input: Input }
  | { readonly _tag: "Help"; readonly text: string }
  /** `line`: the complaint as `run` prints it; `message`: the complaint alone. */
  | { readonly _tag: "Invalid"; readonly line: string; readonly message: string }

/**
 * Parses without running anything (but the handlers of subcommands, which a caller may give to
 * learn which one was chosen): the flags, the help text asked for, or the invocation's first complaint.
 */
export const parseOnly = <Name extends string, Input, E, R>(
  command: Command.Command<Name, Input, {}, E, R>,
  argv: ReadonlyArray<string>
): Parsed<Input> => {
  let outcome: Parsed<Input> | undefined
  const capture = CliOutput.layerPresenter({
    present: (event) =>
      Effect.sync(() => {
        if (event._tag === "InvalidInvocation") {
          outcome = {
            _tag: "Invalid",
            line: invocationLine(event.commandPath, event.errors),
            message: complaintOf(event.errors)
          }
        } else if (event._tag === "Help") outcome = { _tag: "Help", text: formatter.formatHelpDoc(event.helpDoc) }
      })
  })
  const handled = command.pipe(Command.withHandler((input: Input) =>
    Effect.sync(() => {
      outcome = { _tag: "Parsed", input }
    })
  ))
  const exit = Effect.runSyncExit(
    Command.runWith(handled, { version: "0.1.0" })(argv).pipe(
      Effect.provide(Layer.merge(hostLayer, capture))
    ) as Effect.Effect<void, unknown>
  )
  if (outcome !== undefined) return outcome
  const failure = exit._tag === "Failure" ? Cause.squash(exit.cause) : undefined
  const message = failure instanceof Error ? failure.message : "nothing was parsed"
  return { _tag: "Invalid", line: message, message }
}

/**
 * The parsed flags for synchronous callers (tests, and commands that build on another's flags),
 * or a thrown Error whose message is the invocation's first complaint (or the help text).
 */
export const parseSync = <Name extends string, Input, E, R>(
  command: Command.Command<Name, Input, {}, E, R>,
  argv: ReadonlyArray<string>
): Input => {
  const outcome = parseOnly(command, argv)
  if (outcome._tag === "Parsed") return outcome.input
  throw new Error(outcome._tag === "Help" ? outcome.text : outcome.line)
}

/**
 * The parsed flags for a command whose work is plain synchronous code (sim:bench, sim:count):
 * --help prints and exits 0, a bad invocation prints one line and exits 2.
 */
export const parseOrExit = <Name extends string, Input, E, R>(
  command: Command.Command<Name, Input, {}, E, R>,
  argv: ReadonlyArray<string>
): Input => {
  const outcome = parseOnly(command, argv)
  switch (outcome._tag) {
    case "Parsed":
      return outcome.input
    case "Help":
      console.log(outcome.text)
      return process.exit(0)
    case "Invalid":
      console.error(outcome.line)
      return process.exit(usageExitCode)
  }
}

/** One line for a person: the error, and what it wraps when its own message says nothing (a ServeError's EADDRINUSE). */
export const describeFailure = (cause: Cause.Cause<unknown>): string => {
  const failure = Cause.squash(cause)
  if (failure instanceof CommandFailed) return failure.message
  if (!(failure instanceof Error)) return String(failure).split("\n")[0]!
  const inner: unknown = (failure as { readonly cause?: unknown }).cause
  const detail = inner instanceof Error && !failure.message.includes(inner.message) ? `: ${inner.message}` : ""
  return `${failure.name}: ${failure.message}${detail}`.split("\n")[0]!
}

/** Prints a failed run's one line on stderr (nothing for an interruption or a failure that has spoken already). */
export const reportFailure = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  effect.pipe(
    Effect.tapCause((cause) => {
      if (Cause.hasInterruptsOnly(cause)) return Effect.void
      const line = describeFailure(cause)
      return line === "" ? Effect.void : Console.error(line)
    })
  )

/**
 * Runs a command's effect as the process: a failure's one line on stderr and its exit code
 * (`CommandFailed`'s, else 1); SIGINT and SIGTERM interrupt it. `teardown` decides the exit code
 * otherwise (the service's exits 0 on a stop by signal).
 */
export const runMain = <E>(effect: Effect.Effect<void, E>, options: { readonly teardown?: Runtime.Teardown } = {}) =>
  NodeRuntime.runMain(reportFailure(effect), { disableErrorReporting: true, ...options })

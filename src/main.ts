import { NodeRuntime } from "@effect/platform-node"
import { Cause, Console, Effect, Layer } from "effect"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { AppLive, InfrastructureLive, ServicesLive } from "./App.ts"
import * as Wire from "./http/Wire.ts"
import { AppConfig } from "./platform/Config.ts"
import * as Config from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Logging from "./platform/Logging.ts"
import { nowIso } from "./platform/Time.ts"
import { Merchants } from "./services/Merchants.ts"
import { Payments } from "./services/Payments.ts"
import { Store } from "./store/Store.ts"
import { type DisputeAction, type DisputeReason, disputeReasons } from "./domain/Dispute.ts"
import { maximumAmountCents } from "./domain/Money.ts"
import { webhookUrlProblem } from "./domain/Network.ts"

const usage = `Usage: payments <command>

  serve                                         start the HTTP service (default)
  migrate                                       apply database migrations and exit
  merchant create --name NAME [--webhook-url U]  create a merchant and its first API key (JSON on stdout)
  settle                                        run the settlement now (cut-off = now) and exit
  dispute open PAYMENT_ID --reason R [--amount N] [--dispute-id ID]
                                                open a dispute as the card network would (R: ${disputeReasons.join("|")})
  dispute resolve PAYMENT_ID --outcome won|lost [--dispute-id ID]
                                                resolve the payment's dispute as the card network would

Configuration comes from the environment (docs/operations.md); without DATABASE_URL an
embedded PostgreSQL runs under .data/.`

const option = (args: ReadonlyArray<string>, name: string) => {
  const index = args.indexOf(name)
  if (index === -1) return undefined
  const value = args[index + 1]
  if (value === undefined || value.startsWith("--")) throw new Error(`${name} needs a value`)
  return value
}

/** On the embedded database's first run, a demo merchant and key make the service usable at once. */
const demoMerchant = Layer.effectDiscard(
  Effect.gen(function*() {
    const config = yield* AppConfig
    if (config.databaseUrl !== null) return
    const store = yield* Store
    const keyFile = join(Database.dataDirectory, "demo-api-key")
    if ((yield* store.firstMerchant()) !== null) {
      yield* Effect.logInfo(`demo merchant exists; its first API key is in ${keyFile}`)
      return
    }
    const created = yield* (yield* Merchants).create({ name: "Demo Merchant", webhookUrl: null })
    mkdirSync(Database.dataDirectory, { recursive: true })
    writeFileSync(keyFile, `${created.secret}\n`, { mode: 0o600 })
    yield* Console.error(
      `\nDemo merchant ${created.merchant.id} created.\nAPI key (also in ${keyFile}):\n\n  ${created.secret}\n\n` +
        `Try: curl -H "Authorization: Bearer ${created.secret}" http://127.0.0.1:${config.port}/api/v1/merchants/me\n`
    )
  })
)

const serve = Effect.gen(function*() {
  const config = yield* AppConfig
  // A stop (SIGTERM, SIGINT) interrupts the launch: the layers close in reverse (src/http/Drain.ts
  // first), each logging what it did; runMain then exits 0.
  return yield* Layer.launch(AppLive(config.port, config.host, demoMerchant)).pipe(
    Effect.onInterrupt(() => Effect.logInfo("shutting down: done"))
  )
})

const withServices = <A, E>(effect: Effect.Effect<A, E, Merchants | Payments | Store | AppConfig>) =>
  Effect.scoped(Effect.provide(effect, ServicesLive.pipe(Layer.provideMerge(InfrastructureLive))))

const program = (args: ReadonlyArray<string>): Effect.Effect<void, unknown> => {
  const [command = "serve", sub] = args
  switch (command) {
    case "serve":
      return Effect.provide(serve, Config.layer)
    case "migrate":
      return Effect.provide(Console.error("migrations applied"), Database.layer.pipe(Layer.provide(Config.layer)))
    case "merchant": {
      if (sub !== "create") return Effect.fail(new Error(usage))
      const name = option(args, "--name")
      if (name === undefined || name.length < 1 || name.length > 200) return Effect.fail(new Error("--name must be 1 to 200 characters"))
      const webhookUrl = option(args, "--webhook-url") ?? null
      return withServices(Effect.gen(function*() {
        // The shape is checked here (absolute http(s), no credentials); the address is checked at delivery time.
        const problem = webhookUrl === null ? null : webhookUrlProblem(webhookUrl, true)
        if (problem !== null) return yield* Effect.fail(new Error(`--webhook-url: ${problem}`))
        const created = yield* (yield* Merchants).create({ name, webhookUrl })
        yield* Console.log(JSON.stringify({
          merchant: Wire.merchant(created.merchant),
          api_key: Wire.apiKeyCreated(created.apiKey, created.secret)
        }))
      }))
    }
    case "settle":
      return withServices(Effect.gen(function*() {
        const settled = yield* (yield* Payments).settle(yield* nowIso)
        yield* Console.log(JSON.stringify({ settled }))
      }))
    case "dispute":
      return dispute(args)
    case "help":
    case "--help":
      return Console.log(usage)
    default:
      return Effect.fail(new Error(`unknown command '${command}'\n\n${usage}`))
  }
}

/**
 * `dispute open|resolve`: the operator speaks for the card network, through the same service
 * operation as an acquirer's notification (idempotent on the dispute id). Without --dispute-id,
 * `open` uses `dp_operator_<payment id>` (so repeating the command changes nothing) and
 * `resolve` the payment's current dispute. Prints `{"transaction": ..., "dispute_id", "applied"}`.
 */
const dispute = (args: ReadonlyArray<string>): Effect.Effect<void, unknown> => {
  const [, sub, paymentId] = args
  if ((sub !== "open" && sub !== "resolve") || paymentId === undefined || paymentId.startsWith("--")) {
    return Effect.fail(new Error(`dispute needs 'open PAYMENT_ID' or 'resolve PAYMENT_ID'\n\n${usage}`))
  }
  if (!/^pay_[A-Za-z0-9_-]{1,100}$/.test(paymentId)) return Effect.fail(new Error(`'${paymentId}' is not a payment id (pay_...)`))
  const givenId = option(args, "--dispute-id")
  if (givenId !== undefined && !/^[\x21-\x7e]{1,255}$/.test(givenId)) {
    return Effect.fail(new Error("--dispute-id must be 1 to 255 printable ASCII characters without spaces"))
  }
  let action: DisputeAction
  if (sub === "open") {
    const reason = option(args, "--reason")
    if (reason === undefined || !(disputeReasons as ReadonlyArray<string>).includes(reason)) {
      return Effect.fail(new Error(`--reason must be one of ${disputeReasons.join(", ")}`))
    }
    const amountText = option(args, "--amount")
    const amountCents = amountText === undefined ? undefined : Number(amountText)
    if (amountCents !== undefined && (!/^\d+$/.test(amountText!) || amountCents < 1 || amountCents > maximumAmountCents)) {
      return Effect.fail(new Error(`--amount must be an integer from 1 to ${maximumAmountCents} (minor units)`))
    }
    action = { _tag: "Open", reason: reason as DisputeReason, amountCents }
  } else {
    const outcome = option(args, "--outcome")
    if (outcome !== "won" && outcome !== "lost") return Effect.fail(new Error("--outcome must be won or lost"))
    action = { _tag: "Resolve", outcome }
  }
  return withServices(Effect.gen(function*() {
    let acquirerDisputeId = givenId ?? `dp_operator_${paymentId}`
    if (givenId === undefined && action._tag === "Resolve") {
      const payment = yield* (yield* Store).getPayment(null, paymentId)
      if (payment === null) return yield* Effect.fail(new Error(`no payment ${paymentId}`))
      if (payment.dispute === null) return yield* Effect.fail(new Error(`payment ${paymentId} has no dispute to resolve`))
      acquirerDisputeId = payment.dispute.acquirerDisputeId
    }
    const result = yield* (yield* Payments).applyDisputeNotification({ acquirerDisputeId, paymentId, action }).pipe(
      Effect.catchTags({
        NotFound: () => Effect.fail(new Error(`no payment ${paymentId}`)),
        InvalidState: (refusal) => Effect.fail(new Error(refusal.message)),
        InvalidInput: (refusal) => Effect.fail(new Error(`--amount: ${refusal.message}`))
      })
    )
    yield* Console.log(JSON.stringify({
      transaction: Wire.transaction(result.payment),
      dispute_id: acquirerDisputeId,
      applied: result.applied
    }))
  }))
}

/** One line for an operator: the error, and what it wraps when its own message says nothing (a ServeError's EADDRINUSE). */
const describeFailure = (cause: Cause.Cause<unknown>) => {
  const failure = Cause.squash(cause)
  if (!(failure instanceof Error)) return String(failure).split("\n")[0]
  const inner: unknown = (failure as { readonly cause?: unknown }).cause
  const detail = inner instanceof Error && !failure.message.includes(inner.message) ? `: ${inner.message}` : ""
  return `${failure.name}: ${failure.message}${detail}`.split("\n")[0]
}

// One logger (LOG_FORMAT, JSON by default) on stderr, so stdout carries only command output (JSON);
// runMain's own pretty logger stays off, or every line would be printed twice.
Effect.suspend(() => program(process.argv.slice(2))).pipe(
  Effect.provide(Logging.layerFromEnvironment),
  Effect.tapErrorCause((cause) => (Cause.isInterruptedOnly(cause) ? Effect.void : Console.error(describeFailure(cause)))),
  NodeRuntime.runMain({ disableErrorReporting: true, disablePrettyLogger: true })
)

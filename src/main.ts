import { Clock, Console, Effect, Layer } from "effect"
import { Argument, Command, Flag } from "effect/cli"
import { mkdirSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { InfrastructureLive, ServicesLive, teardown } from "./AppServices.ts"
import { type DisputeAction, disputeReasons } from "./domain/Dispute.ts"
import { maximumAmountCents } from "./domain/Money.ts"
import { webhookUrlProblem } from "./domain/Network.ts"
import * as Wire from "./http/api/Wire.ts"
import * as Cli from "./platform/Cli.ts"
import { AppConfig } from "./platform/Config.ts"
import * as Config from "./platform/Config.ts"
import * as Database from "./platform/Database.ts"
import * as Logging from "./platform/Logging.ts"
import { Merchants } from "./services/Merchants.ts"
import { Payments } from "./services/Payments.ts"
import { Reconciliation } from "./services/Reconciliation.ts"
import { Store } from "./store/Store.ts"

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
  // Loaded here, not imported above: the other commands start faster without the HTTP layers.
  const { AppLive } = yield* Effect.promise(() => import("./App.ts"))
  // A stop (SIGTERM, SIGINT) interrupts the launch: the layers close in reverse (src/http/Drain.ts
  // first), each logging what it did; runMain then exits 0.
  return yield* Layer.launch(AppLive(config.port, config.host, demoMerchant)).pipe(
    Effect.onInterrupt(() => Effect.logInfo("shutting down: done"))
  )
})

/** `serve` and `payments` without a command: the same service. */
const serveFromEnvironment = () => Effect.provide(serve, Config.layer)

const withServices = <A, E>(effect: Effect.Effect<A, E, Merchants | Payments | Reconciliation | Store | AppConfig>) =>
  Effect.scoped(Effect.provide(effect, ServicesLive.pipe(Layer.provideMerge(InfrastructureLive))))

const json = Cli.json

const serveCommand = Command.make("serve", {}, serveFromEnvironment).pipe(
  Command.withDescription(
    "Start the HTTP service (what `payments` with no command does). Configuration comes from the environment (docs/operations.md)."
  )
)

const migrate = Command.make(
  "migrate",
  {},
  () => Effect.provide(Console.error("migrations applied"), Database.layer.pipe(Layer.provide(Config.layer)))
).pipe(
  Command.withDescription("Apply the database migrations and exit.")
)

const merchantCreate = Command.make(
  "create",
  {
    name: Cli.text("name", "the merchant's name, 1 to 200 characters"),
    webhookUrl: Cli.text(
      "webhook-url",
      "where the merchant's webhooks go: an absolute http(s) URL without credentials (default: none)"
    ).pipe(Flag.optional),
    json
  },
  ({ name, webhookUrl }) =>
    Effect.gen(function*() {
      if (name.length < 1 || name.length > 200) return yield* Cli.usageError("--name must be 1 to 200 characters")
      const url = Cli.given(webhookUrl) ?? null
      // The shape is checked here (absolute http(s), no credentials); the address is checked at delivery time.
      const problem = url === null ? null : webhookUrlProblem(url, true)
      if (problem !== null) return yield* Cli.usageError(`--webhook-url: ${problem}`)
      yield* withServices(Effect.gen(function*() {
        const created = yield* (yield* Merchants).create({ name, webhookUrl: url })
        // JSON either way: the secret is shown once, and scripts take it from here.
        yield* Cli.printJson({
          merchant: Wire.merchant(created.merchant),
          api_key: Wire.apiKeyCreated(created.apiKey, created.secret)
        })
      }))
    })
).pipe(
  Command.withDescription(
    "Create a merchant and its first API key; prints one JSON object {\"merchant\", \"api_key\"} (the key's secret appears only here)."
  )
)

const merchant = Command.make("merchant").pipe(
  Command.withDescription("Merchants."),
  Command.withSubcommands([merchantCreate])
)

const settle = Command.make("settle", { json }, ({ json }) =>
  withServices(Effect.gen(function*() {
    const settled = yield* (yield* Payments).settle(yield* Clock.currentTimeMillis)
    yield* json ? Cli.printJson({ settled }) : Console.log(Cli.fields([["payments settled", settled]]))
  }))).pipe(
    Command.withDescription(
      "Run the settlement now (cut-off: now) and exit: captured payments become settled, pending money becomes available."
    )
  )

/** An instant given on the command line: ISO 8601 (a date alone is midnight UTC). */
const instantMs = (flag: string, text: string) => {
  const ms = Date.parse(text)
  return Number.isNaN(ms)
    ? Effect.fail(Cli.usageError(`--${flag} must be an ISO 8601 date or time, like 2026-11-28 or 2026-11-28T12:00:00Z`))
    : Effect.succeed(ms)
}

const reconcile = Command.make(
  "reconcile",
  {
    from: Cli.text("from", "the period's start, ISO 8601 (default: 24 hours before --to)").pipe(Flag.optional),
    to: Cli.text("to", "the period's end (excluded), ISO 8601 (default: now)").pipe(Flag.optional),
    json
  },
  ({ from, json, to }) =>
    withServices(Effect.gen(function*() {
      const toGiven = Cli.given(to)
      const toMs = toGiven === undefined ? yield* Clock.currentTimeMillis : yield* instantMs("to", toGiven)
      const fromGiven = Cli.given(from)
      const fromMs = fromGiven === undefined ? toMs - 86_400_000 : yield* instantMs("from", fromGiven)
      if (fromMs >= toMs) return yield* Cli.usageError("--from must be before --to")
      const report = yield* (yield* Reconciliation).run({ fromMs, toMs }).pipe(
        Effect.catchTag("NoProcessor", () =>
          Effect.fail(
            new Cli.CommandFailed({
              message:
                "reconcile: the configured acquirer keeps no records to reconcile with (ACQUIRER=sandbox books captures, voids and refunds locally); set ACQUIRER=stripe",
              exitCode: 1
            })
          ))
      )
      const period = { from: new Date(fromMs).toISOString(), to: new Date(toMs).toISOString() }
      if (json) {
        yield* Cli.printJson({
          ...period,
          payments: report.ours,
          processor_records: report.processor,
          differences: report.differences.map((d) => ({
            payment_id: d.paymentId,
            field: d.field,
            ours: d.ours,
            processor: d.processor
          }))
        })
      } else {
        yield* Console.log(
          Cli.fields([["period", `${period.from} to ${period.to}`], ["our payments", report.ours], [
            "processor records",
            report.processor
          ], ["differences", report.differences.length]])
        )
        if (report.differences.length > 0) {
          yield* Console.log(
            "\n" +
              Cli.table(
                ["payment", "field", "ours", "processor"],
                report.differences.map((d) => [d.paymentId, d.field, String(d.ours), String(d.processor)])
              )
          )
        }
      }
      // A difference is something to look at: scripts and cron see it in the exit code.
      if (report.differences.length > 0) return yield* Cli.exitWith(1)
    }))
).pipe(
  Command.withDescription(
    "Compare the processor's records of a period with the ledger, payment by payment (authorized, captured, refunded, cancelled); " +
      "print every difference and exit 1 when there is one."
  )
)

const paymentId = Argument.String("payment-id").pipe(Argument.withDescription("the payment (pay_...)"))
const disputeId = Cli.text(
  "dispute-id",
  "the card network's dispute id, 1 to 255 printable ASCII characters (default: dp_operator_<payment id> for open, the payment's dispute for resolve)"
).pipe(Flag.optional)

const disputeOpen = Command.make(
  "open",
  {
    paymentId,
    reason: Cli.choice("reason", disputeReasons, "why the cardholder disputes the payment"),
    amount: Cli.integer("amount", "the disputed amount in minor units (default: what is left of the capture)", {
      min: 1,
      max: maximumAmountCents
    }).pipe(Flag.optional),
    disputeId,
    json
  },
  ({ amount, disputeId, json, paymentId, reason }) =>
    applyDispute(paymentId, Cli.given(disputeId), { _tag: "Open", reason, amountCents: Cli.given(amount) }, json)
).pipe(Command.withDescription("Open a dispute as the card network would (idempotent on the dispute id)."))

const disputeResolve = Command.make(
  "resolve",
  { paymentId, outcome: Cli.choice("outcome", ["won", "lost"], "who the card network decided for"), disputeId, json },
  ({ disputeId, json, outcome, paymentId }) =>
    applyDispute(paymentId, Cli.given(disputeId), { _tag: "Resolve", outcome }, json)
).pipe(Command.withDescription("Resolve the payment's dispute as the card network would (idempotent)."))

const dispute = Command.make("dispute").pipe(
  Command.withDescription(
    "Disputes, spoken for the card network through the operation an acquirer's notification takes (docs/api.md)."
  ),
  Command.withSubcommands([disputeOpen, disputeResolve])
)

/**
 * `dispute open|resolve`: the operator speaks for the card network, through the same service
 * operation as an acquirer's notification (idempotent on the dispute id). Without --dispute-id,
 * `open` uses `dp_operator_<payment id>` (so repeating the command changes nothing) and
 * `resolve` the payment's current dispute. `--json` prints `{"transaction": ..., "dispute_id", "applied"}`.
 */
const applyDispute = (paymentId: string, givenId: string | undefined, action: DisputeAction, json: boolean) =>
  Effect.gen(function*() {
    if (!/^pay_[A-Za-z0-9_-]{1,100}$/.test(paymentId)) {
      return yield* Cli.usageError(`'${paymentId}' is not a payment id (pay_...)`)
    }
    if (givenId !== undefined && !/^[\x21-\x7e]{1,255}$/.test(givenId)) {
      return yield* Cli.usageError("--dispute-id must be 1 to 255 printable ASCII characters without spaces")
    }
    yield* withServices(Effect.gen(function*() {
      let acquirerDisputeId = givenId ?? `dp_operator_${paymentId}`
      if (givenId === undefined && action._tag === "Resolve") {
        const payment = yield* (yield* Store).getPayment(null, paymentId)
        if (payment === null) return yield* Effect.fail(new Error(`no payment ${paymentId}`))
        if (payment.dispute === null) {
          return yield* Effect.fail(new Error(`payment ${paymentId} has no dispute to resolve`))
        }
        acquirerDisputeId = payment.dispute.acquirerDisputeId
      }
      const result = yield* (yield* Payments).applyDisputeNotification({ acquirerDisputeId, paymentId, action }).pipe(
        Effect.catchTags({
          NotFound: () => Effect.fail(new Error(`no payment ${paymentId}`)),
          InvalidState: (refusal) => Effect.fail(new Error(refusal.message)),
          InvalidInput: (refusal) => Effect.fail(new Error(`--amount: ${refusal.message}`))
        })
      )
      const transaction = Wire.transaction(result.payment)
      if (json) return yield* Cli.printJson({ transaction, dispute_id: acquirerDisputeId, applied: result.applied })
      const disputed = result.payment.dispute
      yield* Console.log(Cli.fields([
        ["payment", transaction.id],
        ["payment status", transaction.status],
        ["dispute id", acquirerDisputeId],
        ["applied", result.applied ? "yes" : "no (the network had said this already)"],
        ["dispute status", disputed?.status ?? "none"],
        ["reason", disputed?.reason ?? null],
        [
          "disputed amount",
          disputed === null ? null : `${Cli.formatNumber(disputed.amountCents)} ${transaction.currency} (minor units)`
        ]
      ]))
    }))
  })

const payments = Command.make("payments", {}, serveFromEnvironment).pipe(
  Command.withDescription(
    "A payment processing service for merchants. Without a command, starts the service. Configuration comes from the environment " +
      "(docs/operations.md); without DATABASE_URL an embedded PostgreSQL runs under .data/. Bad arguments exit 2."
  ),
  Command.withSubcommands([serveCommand, migrate, merchant, settle, dispute, reconcile])
)

// One logger (LOG_FORMAT, JSON by default) on stderr, so stdout carries only command output;
// runMain's own pretty logger stays off, or every line would be printed twice.
Cli.runMain(
  Effect.suspend(() => Cli.run(payments, process.argv.slice(2))).pipe(Effect.provide(Logging.layerFromEnvironment)),
  { teardown }
)

/**
 * `--processor`: the embedded service runs with `ACQUIRER=stripe` against the sandbox processor
 * (src/acquirer/sandbox-processor/), served by the harness on 127.0.0.1 with answers lost after
 * the processor acted, so every payment goes through the Stripe connector over a socket. After
 * the load, two laws read the processor itself: one authorization per payment, and the service's
 * own `payments reconcile` finding no difference between the processor and the books.
 */
import { execFile } from "node:child_process"
import { resolve } from "node:path"
import { makeProcessor } from "../../src/acquirer/sandbox-processor/Processor.ts"
import { startProcessorServer } from "../../src/acquirer/sandbox-processor/Server.ts"
import type { LawResult, Violation } from "./Contract.ts"

const root = resolve(import.meta.dirname, "../..")
const secretKey = "sk_test_harness0000"
const webhookSecret = "whsec_harness0000"

export interface HarnessProcessor {
  readonly url: string
  /** What the service needs to use it (ACQUIRER, STRIPE_*). */
  readonly environment: Readonly<Record<string, string>>
  /** The laws over the processor's records; `serviceEnvironment` runs the service's `payments reconcile`. */
  readonly checkLaws: (
    serviceEnvironment: Readonly<Record<string, string>>,
    sinceMs: number
  ) => Promise<ReadonlyArray<LawResult>>
  readonly close: () => Promise<void>
}

const violation = (paymentId: string | null, message: string): Violation => ({ paymentId, message, requests: [] })

/** `payments reconcile --json` over `[fromMs, now + 1 min)`, as an operator runs it: its exit code and its JSON line. */
const reconcileNow = (environment: Readonly<Record<string, string>>, fromMs: number) =>
  new Promise<{ readonly code: number; readonly report: any }>((done, fail) => {
    const args = [
      "--import",
      "tsx",
      "src/main.ts",
      "reconcile",
      "--json",
      "--from",
      new Date(fromMs).toISOString(),
      "--to",
      new Date(Date.now() + 60_000).toISOString()
    ]
    execFile(
      process.execPath,
      args,
      { cwd: root, env: { ...process.env, ...environment }, timeout: 120_000 },
      (error, stdout, stderr) => {
        const line = stdout.split("\n").find((text) => text.startsWith("{\"from\""))
        if (line === undefined) {
          return fail(
            new Error(`payments reconcile printed no report (${error?.message ?? ""}): ${stderr.slice(0, 400)}`)
          )
        }
        done({ code: error === null ? 0 : (error as { code?: number }).code ?? 1, report: JSON.parse(line) })
      }
    )
  })

export const startHarnessProcessor = async (
  options: { readonly lostAnswerRate: number; readonly log: (line: string) => void }
): Promise<HarnessProcessor> => {
  const processor = makeProcessor({ secretKey })
  processor.setFaults({ lostAnswerRate: options.lostAnswerRate })
  const running = await startProcessorServer({ processor, port: 0, log: options.log })
  options.log(`sandbox processor on ${running.url} (answers lost after acting: ${options.lostAnswerRate * 100}%)`)
  return {
    url: running.url,
    environment: {
      ACQUIRER: "stripe",
      STRIPE_API_BASE: running.url,
      STRIPE_SECRET_KEY: secretKey,
      STRIPE_WEBHOOK_SECRET: webhookSecret
    },
    checkLaws: async (serviceEnvironment, sinceMs) => {
      const perPayment = new Map<string, Array<string>>()
      for (const intent of processor.intents() as Array<{ id: string; metadata: Record<string, string> }>) {
        const paymentId = intent.metadata.payment_id
        if (paymentId !== undefined) perPayment.set(paymentId, [...(perPayment.get(paymentId) ?? []), intent.id])
      }
      const doubled = [...perPayment].filter(([, ids]) => ids.length > 1)
      const one: LawResult = {
        law: "processor-one-authorization",
        description:
          "The processor holds at most one authorization (PaymentIntent) per payment: an unknown outcome is asked again under the same idempotency key, never a new one.",
        checked: perPayment.size,
        violations: doubled.map(([paymentId, ids]) =>
          violation(
            paymentId,
            `payment ${paymentId}: ${ids.length} PaymentIntents at the processor (${ids.join(", ")})`
          )
        )
      }
      const { code, report } = await reconcileNow({
        ...serviceEnvironment,
        ...{
          ACQUIRER: "stripe",
          STRIPE_API_BASE: running.url,
          STRIPE_SECRET_KEY: secretKey,
          STRIPE_WEBHOOK_SECRET: webhookSecret
        }
      }, sinceMs)
      const differences = (report.differences ?? []) as Array<
        { payment_id: string; field: string; ours: unknown; processor: unknown }
      >
      const reconciled: LawResult = {
        law: "processor-reconciled",
        description:
          "`payments reconcile` finds the processor's records and the books in agreement, payment by payment (authorized, captured, refunded, cancelled).",
        checked: Number(report.payments ?? 0),
        violations: [
          ...differences.map((d) =>
            violation(
              d.payment_id,
              `payment ${d.payment_id} ${d.field}: ours ${String(d.ours)}, processor ${String(d.processor)}`
            )
          ),
          ...(code !== 0 && differences.length === 0 ? [violation(null, `payments reconcile exited ${code}`)] : [])
        ]
      }
      return [one, reconciled]
    },
    close: running.close
  }
}

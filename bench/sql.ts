/**
 * The service's own create SQL for the baselines, taken from the code (src/store/PgStore.ts),
 * never copied by hand: a sample create decided by the domain, its two statements and their
 * parameters as the store builds them, and a pgbench script of exactly those statements.
 */
import type pg from "pg"
import { sandboxAnswer } from "../src/acquirer/Acquirer.ts"
import { type FraudHistory, noHistory } from "../src/domain/Fraud.ts"
import { type IdKind, idPrefixes } from "../src/domain/Ids.ts"
import * as Payment from "../src/domain/Payment.ts"
import * as Wire from "../src/http/api/Wire.ts"
import { defaults } from "../src/platform/Config.ts"
import { historyWindows, score } from "../src/services/Fraud.ts"
import { insertCreatedSql, insertCreatedValues, readForCreateSql, readForCreateValues } from "../src/store/PgHotPath.ts"
import type { ChangeCommit, CreatedCommit, CreateRead, OpenPayment } from "../src/store/Store.ts"

/** One create as the service runs it (sandbox approval, screening, automatic capture), with ids from `mintId`. */
export const createUnit = (
  merchantId: string,
  mintId: (kind: IdKind) => string,
  body: { readonly amountCents: number; readonly currency: Payment.Payment["currency"]; readonly cardToken: string },
  idempotencyKey: string | null
): {
  readonly open: OpenPayment
  readonly commit: (history: FraudHistory) => ChangeCommit
  /** The same create read first and written once (Store.readForCreate, Store.insertCreated). */
  readonly read: CreateRead
  readonly once: (history: FraudHistory) => CreatedCommit
  readonly payment: () => Payment.Payment
} => {
  const now = Date.now()
  const ctx: Payment.Context = { now, mintId }
  const created = Payment.create({
    merchantId,
    amountCents: body.amountCents,
    currency: body.currency,
    cardBrand: "visa",
    cardLastFour: "4242",
    cardToken: body.cardToken,
    captureMethod: "automatic",
    idempotencyKey,
    metadata: {}
  }, ctx)
  if (!created.ok) throw new Error("create refused")
  const pending = created.change.payment
  const claim = idempotencyKey === null ? null : {
    merchantId,
    key: idempotencyKey,
    fingerprint: "0".repeat(64),
    now,
    lockedUntil: now + defaults.idempotencyLeaseMs,
    expiresAt: now + defaults.idempotencyTtlMs
  }
  let committed: Payment.Payment = pending
  const commit = (history: FraudHistory): ChangeCommit => {
    const authorization = sandboxAnswer({ ...pending, paymentId: pending.id }) ??
      { _tag: "Approved", networkRiskSignal: 0.05 }
    const screening = authorization._tag === "Approved"
      ? score({ ...pending, networkRiskSignal: authorization.networkRiskSignal }, history)
      : null
    const flow = Payment.advanceFlow(pending, { authorization, screening, thresholds: defaults.fraudThresholds }, {
      now: Date.now(),
      mintId
    })
    if (!flow.ok) throw new Error("flow refused")
    committed = flow.change.payment
    const responseBody = JSON.stringify({ transaction: Wire.transaction(committed) })
    return {
      before: pending,
      change: flow.change,
      response: claim === null ? null : { merchantId, key: claim.key, status: 201, body: responseBody }
    }
  }
  return {
    open: { change: created.change, claim, history: historyWindows(now) },
    commit,
    read: { payment: pending, claim, history: historyWindows(now) },
    once: (history) => {
      const { change, response } = commit(history)
      return { change: Payment.followedBy(created.change, change), claim, response }
    },
    payment: () => committed
  }
}

const marker = "ZZID"
const colon = "ZZCOLON"

/**
 * A pgbench script of the create's two statements (read, then write once), each parameter a typed
 * literal (an array's elements each one); ids and the
 * idempotency key carry `:n`, unique per transaction. pgbench substitutes `:name` even inside
 * quotes, so colons in literals are spelled through chr(58).
 */
export const pgbenchScript = async (client: pg.Client, merchantId: string) => {
  let counter = 0
  const unit = createUnit(
    merchantId,
    (kind) => `${idPrefixes[kind]}_${marker}_${counter++}`,
    { amountCents: 1234, currency: "USD", cardToken: "tok_visa" },
    `bench-${marker}`
  )
  const statements: Array<[string, Array<unknown>]> = [
    [readForCreateSql, readForCreateValues([unit.read])],
    [insertCreatedSql, insertCreatedValues([unit.once(noHistory)])]
  ]
  const lines = ["\\set n :client_id * 1000000000000 + random(1, 999999999999)"]
  for (const [index, [text, values]] of statements.entries()) {
    const name = `pgbench_types_${index}`
    await client.query(`PREPARE ${name} AS ${text}`)
    const types =
      (await client.query(`SELECT parameter_types::text[] AS types FROM pg_prepared_statements WHERE name = $1`, [
        name
      ]))
        .rows[0].types as Array<string>
    await client.query(`DEALLOCATE ${name}`)
    const literal = (value: unknown, type: string): string => {
      if (value === null || value === undefined) return `NULL::${type}`
      if (Array.isArray(value)) {
        return `ARRAY[${value.map((element) => literal(element, type.slice(0, -2))).join(", ")}]::${type}`
      }
      const raw = String(value)
      let expression = `'${raw.replaceAll("'", "''").replaceAll(":", colon)}'`
      if (raw.includes(":")) expression = `replace(${expression}, '${colon}', chr(58))`
      if (raw.includes(marker)) expression = `replace(${expression}, '${marker}', :n::text)`
      return `(${expression})::${type}`
    }
    const sql = text.replace(/\$(\d+)/g, (_, k: string) => literal(values[Number(k) - 1], types[Number(k) - 1]!))
    lines.push(`${sql.replace(/\s+/g, " ").trim()};`)
  }
  return lines.join("\n") + "\n"
}

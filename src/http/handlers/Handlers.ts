import { Layer } from "effect"
import { ApiKeysLive } from "./ApiKeys.ts"
import { FraudLive } from "./Fraud.ts"
import { MerchantsLive } from "./Merchants.ts"
import { OperationsLive } from "./Operations.ts"
import { ProcessorLive } from "./Processor.ts"
import { TransactionsLive } from "./Transactions.ts"
import { WebhooksLive } from "./Webhooks.ts"

/** The handlers of every API group (one file per group); each decodes, calls a service and encodes. */
export const layer = Layer.mergeAll(
  TransactionsLive,
  MerchantsLive,
  ApiKeysLive,
  FraudLive,
  OperationsLive,
  WebhooksLive,
  ProcessorLive
)

import {
  commitChangesSql,
  getPaymentSql,
  insertCreatedSql,
  openPaymentsSql,
  readForCommandSql,
  readForCreateSql
} from "./PgHotPath.ts"
import { claimKeySql, completeKeySql, releaseKeySql, useApiKeySql } from "./PgStore.ts"
import { recordAttemptsSql, renewLeaseSql } from "./PgWebhookStore.ts"

/**
 * Every statement the `pg` pool prepares (`PgPool`: the hot path), by name: what
 * `hotPathPlannerSettings` plans, and what test/store/plans.test.ts holds to index plans.
 */
export const hotStatements: Readonly<Record<string, string>> = {
  open_payments: openPaymentsSql,
  commit_changes: commitChangesSql,
  read_for_create: readForCreateSql,
  insert_created: insertCreatedSql,
  get_payment: getPaymentSql,
  read_for_command: readForCommandSql,
  claim_idempotency_key: claimKeySql,
  complete_idempotency_key: completeKeySql,
  release_idempotency_key: releaseKeySql,
  use_api_key: useApiKeySql,
  record_webhook_attempts: recordAttemptsSql,
  renew_webhook_lease: renewLeaseSql
}

import { Clock, Effect } from "effect"
import { HttpServerRequest } from "effect/http"
import { HttpApiBuilder } from "effect/http-api"
import { Acquirer, type ProcessorNotification } from "../../acquirer/Acquirer.ts"
import * as Metrics from "../../platform/Metrics.ts"
import { Payments } from "../../services/Payments.ts"
import { PaymentsApi } from "../api/Api.ts"
import * as E from "../api/ApiError.ts"
import { mapErrors } from "../api/ApiError.ts"

type Outcome = "dispute_applied" | "refund_failure_applied" | "already_applied" | "refund_failure_unmatched" | "ignored"

/**
 * The processor group: the card processor's signed notifications. The signature covers the raw
 * body, which the edge has read as text already (strict UTF-8, so the same bytes).
 */
export const ProcessorLive = HttpApiBuilder.group(PaymentsApi, "processor", (handlers) =>
  Effect.gen(function*() {
    const acquirer = yield* Acquirer
    const payments = yield* Payments

    const apply = (notification: ProcessorNotification): Effect.Effect<Outcome, E.ApiError> => {
      switch (notification._tag) {
        case "Dispute":
          return mapErrors(payments.applyDisputeNotification(notification.dispute)).pipe(
            Effect.map((result): Outcome => (result.applied ? "dispute_applied" : "already_applied"))
          )
        case "RefundFailed":
          // The refund was booked on the processor's earlier answer: its failure takes it back
          // (once per refund). One the books cannot match (an unknown payment, more than was
          // refunded) is answered 200, so the processor does not send it again, and is an
          // operator's: logged, and reconciliation shows the refunded amounts apart.
          return payments.applyRefundFailure(notification).pipe(
            Effect.map((result): Outcome => (result.applied ? "refund_failure_applied" : "already_applied")),
            Effect.catchTags({
              NotFound: (error) => unmatched(notification, error.message),
              InvalidInput: (error) => unmatched(notification, error.message),
              InvalidState: (error) => unmatched(notification, error.message)
            }),
            mapErrors
          )
        case "Ignored":
          return Effect.succeed("ignored")
      }
    }

    const unmatched = (notification: Extract<ProcessorNotification, { _tag: "RefundFailed" }>, why: string) =>
      Effect.logError(
        `processor: refund ${notification.refundId} of ${notification.amountCents} on payment ${notification.paymentId} failed after it was accepted (${notification.reason}), and the books cannot take it back: ${why}`
      ).pipe(
        Effect.annotateLogs({ payment_id: notification.paymentId, processor_event_id: notification.eventId }),
        Effect.as("refund_failure_unmatched" as const)
      )

    return handlers.handle("notification", ({ headers }) =>
      E.asAnswered(Effect.gen(function*() {
        const operations = acquirer.operations
        if (operations === undefined) {
          return yield* Effect.fail(E.notFound("processor (ACQUIRER=sandbox takes no notifications)"))
        }
        const request = yield* HttpServerRequest.HttpServerRequest
        const body = yield* Effect.orElseSucceed(request.text, () => "")
        const nowMs = yield* Clock.currentTimeMillis
        const notification = yield* operations.notification({ body, signature: headers["stripe-signature"], nowMs })
          .pipe(
            Effect.catchTags({
              InvalidNotification: (error) =>
                Effect.fail(
                  new E.ApiError(
                    401,
                    "authentication_error",
                    "authentication_required",
                    `The notification does not verify: ${error.reason}.`
                  )
                ),
              AcquirerUnavailable: () => Effect.fail(E.processorUnavailable("look-up this notification needs")),
              AcquirerOutcomeUnknown: () => Effect.fail(E.processorUnavailable("look-up this notification needs"))
            })
          )
        const outcome = yield* apply(notification)
        Metrics.record(Metrics.processorNotifications(outcome), 1)
        return { received: true as const, event_id: notification.eventId, outcome }
      })))
  }))

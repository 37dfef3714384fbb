import { Data } from "effect"
import type { PaymentStatus } from "../domain/Payment.ts"
import { withoutStack } from "../platform/EffectInternals.ts"

/** Application-level outcomes the edges turn into CONTRACT errors (without a stack trace: src/platform/EffectInternals.ts). */
export class NotFound
  extends withoutStack(Data.TaggedError("NotFound")<{ readonly resource: string; readonly id: string }>)
{}
export class InvalidState extends withoutStack(
  Data.TaggedError("InvalidState")<{
    readonly status: PaymentStatus | string
    readonly message: string
  }>
) {}
export class InvalidInput
  extends withoutStack(Data.TaggedError("InvalidInput")<{ readonly param: string; readonly message: string }>)
{}

/**
 * The card processor did not answer in time (unreachable, or an answer lost): the operation's
 * outcome is not known, so nothing was booked. Asking again repeats it under the same processor
 * idempotency key, so it happens at most once.
 */
export class ProcessorUnavailable
  extends withoutStack(Data.TaggedError("ProcessorUnavailable")<{ readonly operation: string }>)
{}

import { Data } from "effect"
import type { PaymentStatus } from "../domain/Payment.ts"

/** Application-level outcomes the edges turn into CONTRACT errors. */
export class NotFound extends Data.TaggedError("NotFound")<{ readonly resource: string; readonly id: string }> {}
export class InvalidState extends Data.TaggedError("InvalidState")<{
  readonly status: PaymentStatus | string
  readonly message: string
}> {}
export class InvalidInput extends Data.TaggedError("InvalidInput")<{ readonly param: string; readonly message: string }> {}

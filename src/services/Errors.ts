import { Data } from "effect"
import type { PaymentStatus } from "../domain/Payment.ts"

/**
 * An error class whose instances capture no stack trace, for answers (404, 409, 422: these and
 * ApiError) built on everyday requests and never shown with a stack: capturing one costs more
 * than the rest of the error.
 */
export const withoutStack = <Args extends ReadonlyArray<unknown>, T>(Base: new(...args: Args) => T) =>
  class extends (Base as new(...args: Array<any>) => object) {
    constructor(...args: Array<any>) {
      const stackTraceLimit = Error.stackTraceLimit
      Error.stackTraceLimit = 0
      super(...args)
      Error.stackTraceLimit = stackTraceLimit
    }
  } as unknown as new(...args: Args) => T

/** Application-level outcomes the edges turn into CONTRACT errors. */
export class NotFound extends withoutStack(Data.TaggedError("NotFound")<{ readonly resource: string; readonly id: string }>) {}
export class InvalidState extends withoutStack(Data.TaggedError("InvalidState")<{
  readonly status: PaymentStatus | string
  readonly message: string
}>) {}
export class InvalidInput extends withoutStack(Data.TaggedError("InvalidInput")<{ readonly param: string; readonly message: string }>) {}

// Writes the OpenAPI document derived from the HttpApi (the one GET /api/v1/openapi.json serves) to the given file.
import { OpenApi } from "effect/http-api"
import { writeFileSync } from "node:fs"
import { PaymentsApi } from "../src/http/api/Api.ts"

const file = process.argv[2]
if (file === undefined) throw new Error("usage: tsx scripts/openapi.ts <file>")
writeFileSync(file, `${JSON.stringify(OpenApi.fromApi(PaymentsApi), null, 2)}\n`)

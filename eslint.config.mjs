// Lint and format in one pass, as Effect's own repositories do: ESLint's and typescript-eslint's
// recommended rules, and dprint (through @effect/eslint-plugin) with Effect's formatting settings.
// `npm run lint` checks; `npm run format` rewrites.
import * as effectEslint from "@effect/eslint-plugin"
import eslint from "@eslint/js"
import { defineConfig } from "eslint/config"
import tseslint from "typescript-eslint"

export default defineConfig(
  { ignores: ["**/node_modules", "**/.data", "**/dist", "**/*.mjs"] },
  eslint.configs.recommended,
  tseslint.configs.recommended,
  ...effectEslint.configs.dprint,
  {
    rules: {
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      // As in Effect's own configuration: `Data.TaggedError("X")<{}>` is Effect's idiom for an error
      // without fields, `Function` and `any` appear where code walks untyped JSON (the OpenAPI
      // document) or the driver's rows, and the compiler's strict mode already guards the rest.
      "@typescript-eslint/no-explicit-any": "off",
      "@typescript-eslint/no-empty-object-type": "off",
      "@typescript-eslint/no-unsafe-function-type": "off",
      "@effect/dprint": ["error", {
        config: {
          indentWidth: 2,
          lineWidth: 120,
          semiColons: "asi",
          quoteStyle: "alwaysDouble",
          trailingCommas: "never",
          operatorPosition: "maintain",
          "arrowFunction.useParentheses": "force"
        }
      }]
    }
  }
)

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
  },
  {
    // Tests read JSON answers whose shape is the assertion itself; typing every body adds nothing.
    files: ["test/**"],
    rules: { "@typescript-eslint/no-explicit-any": "off" }
  }
)

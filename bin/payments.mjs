#!/usr/bin/env node
// Runs the TypeScript entry point through tsx, so `npx payments ...` works from a checkout.
import { register } from "tsx/esm/api"
import { fileURLToPath } from "node:url"

register()
await import(fileURLToPath(new URL("../src/main.ts", import.meta.url)))

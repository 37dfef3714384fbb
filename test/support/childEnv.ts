/**
 * The environment of a fresh shell, for a child process run as a newcomer would run it: no vitest
 * worker variables, no NODE_OPTIONS, no database unless `extra` gives one, no colours.
 */
export const freshShellEnv = (extra: Record<string, string> = {}): Record<string, string> => {
  const env: Record<string, string> = {}
  for (const [name, value] of Object.entries(process.env)) {
    if (value !== undefined && !name.startsWith("VITEST") && name !== "NODE_OPTIONS" && name !== "DATABASE_URL") {
      env[name] = value
    }
  }
  return { ...env, NO_COLOR: "1", ...extra }
}

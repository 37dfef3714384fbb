/**
 * What PostgreSQL spent its time on, from pg_stat_statements: snapshots of a database's
 * statements and the ones that took longest between two of them. The database must preload the
 * extension (`shared_preload_libraries=pg_stat_statements`) and have it created.
 */
import type pg from "pg"

export type StatementStats = Map<string, { readonly calls: number; readonly ms: number; readonly query: string }>

/** pg_stat_statements of this database by statement: calls and execution time (empty without the extension). */
export const statementStats = async (client: pg.Client): Promise<StatementStats> => {
  try {
    const rows = await client.query(
      `SELECT queryid::text AS id, calls::bigint AS calls, total_exec_time AS ms, query FROM pg_stat_statements
      WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())`
    )
    return new Map(
      rows.rows.map((r) => [r.id as string, { calls: Number(r.calls), ms: Number(r.ms), query: r.query as string }])
    )
  } catch {
    return new Map()
  }
}

/** The statements that took longest between two `statementStats`, per request of the load. */
export const statementsTable = (
  before: StatementStats,
  after: StatementStats,
  requests: number,
  top: number
): Array<[string, string]> =>
  [...after].map(([id, s]) => ({
    s,
    calls: s.calls - (before.get(id)?.calls ?? 0),
    ms: s.ms - (before.get(id)?.ms ?? 0)
  }))
    .filter((d) => d.calls > 0)
    .sort((a, b) => b.ms - a.ms)
    .slice(0, top)
    .map((d): [string, string] => [
      `${(d.calls / Math.max(1, requests)).toFixed(2)} calls/request, ${(d.ms / d.calls).toFixed(3)} ms each`,
      d.s.query.replace(/\s+/g, " ").slice(0, 160)
    ])

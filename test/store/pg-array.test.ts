import * as fc from "fast-check"
import pg from "pg"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { arrayLiteral } from "../../src/store/rows/PgArray.ts"
import { freshDatabase } from "../support/database.ts"

// The hot path's batches send each column as an array literal written by `arrayLiteral`; PostgreSQL
// must read back exactly the values, whatever a string holds, and read what `pg` itself would send.
let db: pg.Client
beforeAll(async () => {
  db = new pg.Client({ connectionString: await freshDatabase("pgarray") })
  await db.connect()
})
afterAll(() => db?.end())

const roundTrip = async (type: string, values: ReadonlyArray<unknown>) =>
  (await db.query({ text: `SELECT $1::${type}[] AS a`, values: [arrayLiteral(values as never)] })).rows[0].a

describe("array literals", () => {
  it("carry any strings (quotes, backslashes, braces, commas, spaces, NULL, empty, non-ASCII) back unchanged", async () => {
    const awkward = [
      "",
      "NULL",
      "null",
      "a,b",
      "{x}",
      "say \"hi\"",
      "back\\slash",
      "\\\"",
      " lead",
      "trail ",
      "tab\t",
      "é€😀"
    ]
    expect(await roundTrip("text", [...awkward, null])).toEqual([...awkward, null])
    await fc.assert(
      fc.asyncProperty(
        fc.array(
          fc.option(fc.string({ unit: "grapheme" }).map((s) => s.replaceAll(String.fromCharCode(0), "")), { nil: null })
        ),
        async (values) => {
          expect(await roundTrip("text", values)).toEqual(values)
        }
      ),
      { numRuns: 200, seed: 40 }
    )
  })

  it("carry integers, floats, booleans and timestamps as pg's own conversion does", async () => {
    const ints = [0, -1, 2_147_483_647, null]
    expect(await roundTrip("int", ints)).toEqual(ints)
    const floats = [0.009994861723540253, -2.944439, 1e-7, 1.5e300, null]
    expect(await roundTrip("float8", floats)).toEqual(floats)
    expect(await roundTrip("bool", [true, false, null])).toEqual([true, false, null])
    const times = ["2026-11-29T10:55:28.972Z", null]
    const read = await roundTrip("timestamptz", times)
    expect(read.map((t: Date | null) => t?.toISOString() ?? null)).toEqual(times)
    expect(await roundTrip("text", [])).toEqual([])
    // The same values as `pg` converts a JS array: the same array in the database.
    const mixed = ["a\"b", "c\\d", null, "e"]
    const viaPg = (await db.query({ text: "SELECT $1::text[] AS a", values: [mixed] })).rows[0].a
    expect(await roundTrip("text", mixed)).toEqual(viaPg)
  })
})

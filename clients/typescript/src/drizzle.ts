// Drizzle ORM (its node-postgres and postgres.js drivers): the package's
// statements as Drizzle SQL, in Drizzle's own transactions.

import { SQL, sql } from "drizzle-orm";
import { Queryable, Row, Transact, hearLostConnections } from "./db.js";

type DrizzleLike = {
  execute(query: SQL): Promise<unknown>;
  transaction<T>(fn: (tx: DrizzleLike) => Promise<T>): Promise<T>;
  $client?: unknown;
};

/** `$1, $2…` placeholders as Drizzle parameters. */
function toSql(text: string, params: unknown[] = []): SQL {
  const parts = text.split(/\$(\d+)/);
  const chunks: SQL[] = [];
  parts.forEach((part, i) => chunks.push(i % 2 === 0 ? sql.raw(part) : sql`${params[Number(part) - 1]}`));
  return sql.join(chunks);
}

/** A Drizzle database or transaction `tx`, in whatever transaction is open. */
export function drizzleClient(db: DrizzleLike): Queryable {
  return {
    query: async (text, params) => {
      const result = (await db.execute(toSql(text, params))) as Row[] | { rows: Row[] };
      return Array.isArray(result) ? [...result] : result.rows;
    },
  };
}

/** Each call is one `db.transaction`. On node-postgres, the pool's clients are kept from ending the process when a restart cuts one (`hearLostConnections`). */
export function drizzle(db: DrizzleLike): Transact {
  const client = db.$client as { on?: unknown; totalCount?: unknown } | undefined;
  if (client && typeof client.on === "function" && typeof client.totalCount === "number") {
    hearLostConnections(client as Parameters<typeof hearLostConnections>[0]);
  }
  return (fn) => db.transaction((tx) => fn(drizzleClient(tx)));
}

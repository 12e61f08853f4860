// The drivers: each turned into the one thing the package needs, a way to
// run a statement (`Queryable`) and to run a function in a transaction
// (`Transact`). node-postgres and postgres.js here; Drizzle in ./drizzle.

import { isOutage } from "./outage.js";

export type Row = Record<string, unknown>;

/** A connection inside a transaction: runs one statement, returns its rows. */
export interface Queryable {
  query(text: string, params?: unknown[]): Promise<Row[]>;
}

/** Runs `fn` in a transaction of its own: commits what it returns, rolls back what it throws. */
export type Transact = <T>(fn: (db: Queryable) => Promise<T>) => Promise<T>;

// Structural types of the drivers, so that neither is a dependency.
interface PgClientLike {
  query(text: string, params?: unknown[]): Promise<{ rows: Row[] }>;
}
interface PgPoolLike {
  connect(): Promise<
    PgClientLike & {
      release(err?: Error | boolean): void;
      on(event: "error", listener: (err: Error) => void): unknown;
      off(event: "error", listener: (err: Error) => void): unknown;
    }
  >;
}
interface PostgresJsTxLike {
  unsafe(text: string, params?: never[], options?: { prepare?: boolean }): PromiseLike<unknown>;
}
interface PostgresJsLike extends PostgresJsTxLike {
  begin(fn: (tx: PostgresJsTxLike) => Promise<unknown>): PromiseLike<unknown>;
}

/** A node-postgres `Client` or `PoolClient`, in whatever transaction its owner opened. */
export function pgClient(client: PgClientLike): Queryable {
  return { query: async (text, params) => (await client.query(text, params)).rows };
}

/**
 * A node-postgres `Pool`: each call takes a client, BEGIN … COMMIT, and
 * gives it back; one that a lost connection broke is destroyed, not
 * pooled again.
 */
export function pgPool(pool: PgPoolLike): Transact {
  return async (fn) => {
    const client = await pool.connect();
    let failure: unknown;
    // A connection lost while checked out is also emitted as 'error',
    // which would end the process unheard; the failing query reports it.
    const heard = (error: Error) => (failure ??= error);
    client.on("error", heard);
    try {
      await client.query("BEGIN");
      const result = await fn(pgClient(client));
      await client.query("COMMIT");
      return result;
    } catch (error) {
      failure = error;
      await client.query("ROLLBACK").catch(() => undefined);
      throw error;
    } finally {
      client.off("error", heard);
      client.release(failure !== undefined && isOutage(failure) ? (failure as Error) : undefined);
    }
  };
}

/**
 * Every client of a node-postgres `Pool` heard when its connection is lost
 * while checked out by code other than this package's (Drizzle's
 * transactions): node-postgres emits that as 'error', which with no
 * listener ends the process. The failing query reports it all the same.
 */
export function hearLostConnections(pool: { on(event: "connect", f: (c: { on(e: "error", f: () => void): unknown }) => void): unknown }): void {
  pool.on("connect", (client) => client.on("error", () => undefined));
}

/**
 * A postgres.js `sql` or transaction `tx`. The package's statements are
 * never prepared, whatever the `sql`'s `prepare` option: behind a
 * transaction pooler (PgBouncer in transaction mode, Supavisor's or Neon's
 * pooled endpoint) a statement prepared on one server connection is not
 * there on the next. (node-postgres prepares only statements given a
 * name, which the package never gives.)
 */
export function postgresJsClient(sql: PostgresJsTxLike): Queryable {
  return {
    query: async (text, params) => [...((await sql.unsafe(text, (params ?? []) as never[], { prepare: false })) as Row[])],
  };
}

/** postgres.js: each call is one `sql.begin`. */
export function postgresJs(sql: PostgresJsLike): Transact {
  return <T>(fn: (db: Queryable) => Promise<T>) => Promise.resolve(sql.begin((tx) => fn(postgresJsClient(tx)))) as Promise<T>;
}

/**
 * A node-postgres client configuration from either form libpq takes: a
 * URL (`postgresql://…`) or keyword/value pairs (`host=… dbname=…`, values
 * in single quotes where they hold spaces), as every other package of this
 * extension takes them.
 */
export function pgConfig(conninfo: string): Record<string, unknown> {
  if (/^postgres(ql)?:\/\//.test(conninfo.trim())) return { connectionString: conninfo };
  const names: Record<string, string> = {
    host: "host",
    hostaddr: "host",
    port: "port",
    dbname: "database",
    user: "user",
    password: "password",
    application_name: "application_name",
    options: "options",
  };
  const config: Record<string, unknown> = {};
  const pair = /\s*([A-Za-z_]+)\s*=\s*(?:'((?:[^'\\]|\\.)*)'|([^\s']*))/y;
  let at = 0;
  while (at < conninfo.length && conninfo.slice(at).trim() !== "") {
    pair.lastIndex = at;
    const m = pair.exec(conninfo);
    if (!m) throw new Error(`not a connection string: ${JSON.stringify(conninfo.slice(at, at + 40))}`);
    const value = m[2] !== undefined ? m[2].replace(/\\(.)/g, "$1") : m[3];
    if (m[1] === "connect_timeout") config.connectionTimeoutMillis = Number(value) * 1000;
    else if (m[1] === "sslmode") config.ssl = value === "disable" ? false : value === "require" ? { rejectUnauthorized: false } : true;
    else if (names[m[1]]) config[names[m[1]]] = m[1] === "port" ? Number(value) : value;
    else throw new Error(`connection string: keyword "${m[1]}" is not supported here`);
    at = pair.lastIndex;
  }
  return config;
}

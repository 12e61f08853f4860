// The inbox's worker loop on node-postgres: lease a batch with
// webhook_next, work each event in a savepoint, finish the batch with one
// webhook_complete_batch in the same transaction as its work, so each
// event's work commits exactly once.
//
// - A failing event is recorded with webhook_fail (retried after the
//   backoff) and undoes only its own work.
// - A lease that ran out and was taken over refuses the batch (55006): its
//   work rolls back, and the events are finished one transaction each so
//   the others still commit.
// - stop() (SIGTERM, SIGINT with handleSignals): the event in hand is
//   finished, the rest of the batch handed back at once.
// - Anything else that goes wrong in an iteration (the database away, any
//   database error, a bug): logged (`log`, console.error by default),
//   counted (`errors`, `consecutiveErrors`, `lastError`), passed to
//   onError, and the loop goes on after a wait of 0.5 s doubling to 30 s,
//   each drawn from its upper half so that workers one restart dropped do
//   not all return at once. run() never ends on its own, only by stop().
//   What a lost connection held rolled back with it; its leases run out
//   and are taken again.
// - Idle: LISTEN webhook_inbox wakes it as soon as something is queued
//   (needs a direct or session-pooled connection; `listen: false` polls).
// - Connections: from a connection string, the application's `connect`
//   function, or its node-postgres `pool` (LISTEN off by default then).
//   No statement is named, so behind a transaction pooler (PgBouncer in
//   transaction mode, Supavisor's or Neon's pooled endpoint) it works
//   with `listen: false`.

import pg from "pg";
import { Queryable, pgClient, pgConfig } from "./db.js";
import { isOutage, sqlstate } from "./outage.js";
import * as sql from "./statements.js";

/** One leased inbox event (a row of webhook_next). `id` is the lease. */
export interface InboxEvent {
  id: string;
  provider: string;
  eventId: string;
  eventType: string | null;
  payload: unknown;
  attempts: number;
  consumer: string;
  traceparent: string | null;
  origin: string;
}

/** A connection the worker holds while it works: a client of its own, or one of a pool's. */
interface Held {
  client: pg.ClientBase;
  done(error?: Error): Promise<void>;
}

export interface WorkerOptions {
  /** A URL (`postgresql://…`) or libpq's keyword/value form (`host=… dbname=…`). */
  connectionString?: string;
  /** Or: a new connected client each time the worker needs one (and one for LISTEN). */
  connect?: () => Promise<pg.Client>;
  /** Or: the application's pool, a client of which the worker holds while it works. */
  pool?: pg.Pool;
  /** Runs in the batch's transaction: its writes on `db` commit with the event's completion. */
  work: (db: Queryable, event: InboxEvent) => Promise<void>;
  consumer?: string;
  provider?: string | null;
  batch?: number;
  lease?: string;
  pollMs?: number;
  /** LISTEN on a connection of its own: on for a connection string or `connect`, off for a pool. */
  listen?: boolean;
  onError?: (error: unknown) => void;
  /** Where failures are written: console.error by default. */
  log?: (message: string, error: unknown) => void;
}

/** Reconnect waits: doubling from 0.5 s to 30 s, each drawn from the upper half of its step. */
export class Backoff {
  private step: number;
  constructor(
    readonly first = 500,
    readonly last = 30_000,
  ) {
    this.step = first;
  }
  connected(): void {
    this.step = this.first;
  }
  next(): number {
    const wait = this.step / 2 + Math.random() * (this.step / 2);
    this.step = Math.min(this.step * 2, this.last);
    return wait;
  }
}

const eventFrom = (r: Record<string, unknown>): InboxEvent => ({
  id: r.id as string,
  provider: r.provider as string,
  eventId: r.event_id as string,
  eventType: (r.event_type as string | null) ?? null,
  payload: r.payload,
  attempts: Number(r.attempts),
  consumer: r.consumer as string,
  traceparent: (r.traceparent as string | null) ?? null,
  origin: r.origin as string,
});

export class Worker {
  private stopping = false;
  private wake: (() => void) | null = null;
  backoff = new Backoff();
  /** For the application's metrics: a worker that keeps failing shows here (and in the log), not as a process that is gone. */
  errors = 0;
  consecutiveErrors = 0;
  lastError: unknown = undefined;

  constructor(readonly options: WorkerOptions) {
    const sources = [options.connectionString, options.connect, options.pool].filter((s) => s !== undefined);
    if (sources.length !== 1) throw new TypeError("Worker: give one of connectionString, connect or pool");
    if (options.pool && options.listen) throw new TypeError("Worker: listen needs a connectionString or connect, not a pool");
  }

  get stopped(): boolean {
    return this.stopping;
  }

  stop(): void {
    this.stopping = true;
    this.wake?.();
  }

  /** Stop on SIGTERM and SIGINT. */
  handleSignals(): this {
    process.once("SIGTERM", () => this.stop());
    process.once("SIGINT", () => this.stop());
    return this;
  }

  /** Work until stop(); nothing else ends it. */
  async run(): Promise<void> {
    while (!this.stopping) {
      try {
        await this.runConnected();
      } catch (error) {
        this.failed(error);
        await this.pause(this.backoff.next());
      }
    }
  }

  private failed(error: unknown): void {
    this.errors += 1;
    this.consecutiveErrors += 1;
    this.lastError = error;
    const log = this.options.log ?? ((message: string, e: unknown) => console.error(message, e));
    try {
      log(
        isOutage(error)
          ? "inbox worker: the database is away; trying again"
          : `inbox worker: an iteration failed (error ${this.consecutiveErrors} in a row); trying again`,
        error,
      );
      this.options.onError?.(error);
    } catch (callbackError) {
      console.error("inbox worker: onError or log threw", callbackError);
    }
  }

  private pause(ms: number): Promise<void> {
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        this.wake = null;
        resolve();
      }, ms);
      this.wake = () => {
        clearTimeout(timer);
        this.wake = null;
        resolve();
      };
    });
  }

  private async client(): Promise<pg.Client> {
    const { connectionString, connect } = this.options;
    if (connect) return connect();
    const client = new pg.Client(pgConfig(connectionString!));
    // A lost connection also emits 'error'; the failing query reports it.
    client.on("error", () => undefined);
    try {
      await client.connect();
    } catch (error) {
      await client.end().catch(() => undefined);
      throw error;
    }
    return client;
  }

  private async hold(): Promise<Held> {
    const { pool } = this.options;
    if (pool) {
      const client = await pool.connect();
      const heard = () => undefined;
      client.on("error", heard);
      return {
        client,
        done: async (error) => {
          client.off("error", heard);
          client.release(error !== undefined && isOutage(error) ? error : undefined);
        },
      };
    }
    const client = await this.client();
    client.on("error", () => undefined);
    return { client, done: () => client.end().catch(() => undefined) };
  }

  private async runConnected(): Promise<void> {
    const { pool, pollMs = 1000 } = this.options;
    const listen = this.options.listen ?? !pool;
    const held = await this.hold();
    let listener: pg.Client | null = null;
    let failure: Error | undefined;
    try {
      if (listen) {
        listener = await this.client();
        listener.on("error", () => this.wake?.());
        listener.on("notification", () => this.wake?.());
        await listener.query(sql.LISTEN);
      }
      while (!this.stopping) {
        const leased = await this.runOnce(held.client);
        this.backoff.connected();
        this.consecutiveErrors = 0;
        if (leased === 0) await this.pause(pollMs);
      }
    } catch (error) {
      failure = error instanceof Error ? error : new Error(String(error));
      throw error;
    } finally {
      await held.done(failure);
      await listener?.end().catch(() => undefined);
    }
  }

  /** One batch on `conn`; returns how many events were leased. The lease commits on its own. */
  async runOnce(conn: pg.ClientBase): Promise<number> {
    const { batch = 10, consumer = "default", provider = null, lease = "1 minute" } = this.options;
    const events = (await conn.query(sql.NEXT, [batch, consumer, provider, lease])).rows.map(eventFrom);
    try {
      await this.finish(conn, events);
    } catch (error) {
      if (sqlstate(error) !== sql.TAKEN_OVER) throw error;
      for (const event of events) {
        try {
          await this.finish(conn, [event]);
        } catch (e) {
          if (sqlstate(e) !== sql.TAKEN_OVER) throw e; // taken over: the new holder finishes it
        }
      }
    }
    return events.length;
  }

  private async finish(conn: pg.ClientBase, events: InboxEvent[]): Promise<void> {
    if (events.length === 0) return;
    const db = pgClient(conn);
    await conn.query("BEGIN");
    try {
      const done: string[] = [];
      for (const event of events) {
        if (this.stopping) {
          await conn.query(sql.HAND_BACK, [event.id]);
          continue;
        }
        await conn.query(sql.SAVEPOINT);
        try {
          await this.options.work(db, event);
          await conn.query(sql.RELEASE);
          done.push(event.id);
        } catch (error) {
          if (isOutage(error)) throw error;
          this.options.onError?.(error);
          await conn.query(sql.ROLLBACK_TO);
          const message = error instanceof Error ? error.message || error.name : String(error);
          await conn.query(sql.FAIL, [event.id, message]);
        }
      }
      if (done.length > 0) await conn.query(sql.COMPLETE_BATCH, [done]);
      await conn.query("COMMIT");
    } catch (error) {
      await conn.query("ROLLBACK").catch(() => undefined);
      throw error;
    }
  }
}

/** The Idempotency-Key for a side effect of this event: the same on every attempt. */
export async function outboundKey(db: Queryable, lease: string, operation: string): Promise<string> {
  const [row] = await db.query(sql.OUTBOUND_KEY, [lease, operation]);
  return row.key as string;
}

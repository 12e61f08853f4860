// Through PgBouncer in transaction mode (four server connections shared by
// every client), as on Supabase's or Neon's pooled connection string:
// providers delivering to the handler on a node-postgres pool and on
// postgres.js (whose default is to prepare), claimed and queued, workers
// draining the inbox, the pooler restarted twice under them. Each delivery
// answered 2xx is done exactly once; nothing fails on a statement the
// pooler moved; the workers are still running. And a worker keeps running
// through any error, not only an outage.

import assert from "node:assert/strict";
import { it } from "node:test";
import pg from "pg";
import postgres from "postgres";
import { WebhookHandler, hearLostConnections, isOutage, pgPool, postgresJs, receive, pgClient } from "../src/index.js";
import type { Queryable } from "../src/db.js";
import { Backoff, InboxEvent, Worker } from "../src/worker.js";
import { ADMIN_URL, DATABASE_URL, POOLER_URL, newRun, restartPooler, stripeEvent, stripeHeaders } from "./support.js";

const INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, $4)";
const SENDERS = 6;
const EACH = 30;
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function doneOnce(run: string): Promise<Map<string, number>> {
  const c = new pg.Client({ connectionString: ADMIN_URL });
  await c.connect();
  try {
    const r = await c.query("SELECT event_id, count(*)::int AS n FROM orders WHERE event_id LIKE $1 GROUP BY 1", [`evt_${run}_%`]);
    return new Map(r.rows.map((row) => [row.event_id, row.n]));
  } finally {
    await c.end();
  }
}

it("handlers and workers through a transaction pooler: nothing refused for it, lost or doubled", async () => {
  const run = newRun();
  const pool = new pg.Pool({ connectionString: POOLER_URL, max: 4 });
  hearLostConnections(pool);
  // An idle client's lost connection is the pool's 'error': heard, as every application must.
  pool.on("error", () => undefined);
  const sql = postgres(POOLER_URL, { max: 3, onnotice: () => undefined });
  const handlers = [new WebhookHandler(pgPool(pool)), new WebhookHandler(postgresJs(sql))];
  const workers = Array.from(
    { length: 2 },
    () =>
      new Worker({
        connectionString: POOLER_URL,
        listen: false,
        pollMs: 100,
        batch: 5,
        // A batch a restart took the connection of is leased until its
        // lease runs out: a short one, so that the test does not wait.
        lease: "5 seconds",
        log: () => undefined,
        work: async (db: Queryable, e: InboxEvent) => {
          await db.query(INSERT, [e.provider, e.eventId, e.eventType, "pooled_worker"]);
        },
      }),
  );
  for (const w of workers) w.backoff = new Backoff(100, 500);
  let alive = workers.length;
  const running = workers.map((w) => w.run().finally(() => (alive -= 1)));
  const answers = new Map<number, number>();
  const acknowledged: string[] = [];
  const provider = async (s: number) => {
    for (let i = 0; i < EACH; i++) {
      const eventId = `evt_${run}_${s}_${i}`;
      const name = i % 2 ? "stripe" : "stripe_inbox";
      const deadline = Date.now() + 60_000;
      for (;;) {
        assert.ok(Date.now() < deadline, `${eventId} never acknowledged`);
        const body = stripeEvent(eventId, run);
        const answer = await handlers[s % 2].handle(name, stripeHeaders(body), body, async (db, d) => {
          await db.query(INSERT, [name, d.eventId, d.eventType, "pooled"]);
        });
        answers.set(answer.status, (answers.get(answer.status) ?? 0) + 1);
        if (answer.status >= 200 && answer.status < 300) break;
        await sleep(50);
      }
      acknowledged.push(eventId);
    }
  };
  try {
    const senders = Array.from({ length: SENDERS }, (_, s) => provider(s));
    const after = async (n: number) => {
      const deadline = Date.now() + 60_000;
      while (acknowledged.length < n) {
        assert.ok(Date.now() < deadline, `${acknowledged.length} deliveries acknowledged`);
        await sleep(20);
      }
    };
    await after(40);
    await restartPooler(0);
    await after(100);
    await restartPooler(0.3);
    await Promise.all(senders);
    const deadline = Date.now() + 60_000;
    while ((await doneOnce(run)).size < SENDERS * EACH && Date.now() < deadline) await sleep(100);
    assert.equal(alive, workers.length, "the workers still running");
  } finally {
    workers.forEach((w) => w.stop());
    await Promise.all(running);
    await pool.end();
    await sql.end();
  }
  const done = await doneOnce(run);
  console.log(`through the pooler: answers ${JSON.stringify([...answers])}`);
  assert.deepEqual([...done.keys()].sort(), [...acknowledged].sort(), "every acknowledged delivery done, nothing else");
  for (const [id, n] of done) assert.equal(n, 1, `${id} done ${n} times`);
  assert.equal(done.size, SENDERS * EACH);
  assert.ok([...answers.keys()].every((s) => s === 200 || s === 503), JSON.stringify([...answers]));
  for (const w of workers) assert.ok(w.lastError === undefined || isOutage(w.lastError), String(w.lastError));
});

it("a worker runs through any error until stopped", async () => {
  const run = newRun();
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const execute = async (grant: boolean) => {
    const r = await admin.query("SELECT oid::regprocedure::text AS f FROM pg_proc WHERE proname = 'webhook_next'");
    for (const { f } of r.rows) {
      await admin.query(grant ? `GRANT EXECUTE ON FUNCTION ${f} TO clients_app` : `REVOKE EXECUTE ON FUNCTION ${f} FROM clients_app`);
    }
  };
  const logged: string[] = [];
  const seen: unknown[] = [];
  const worker = new Worker({
    connectionString: DATABASE_URL,
    listen: false,
    pollMs: 50,
    log: (message) => logged.push(message),
    onError: (error) => {
      seen.push(error);
      throw new Error("the application's own callback failed too");
    },
    work: async (db: Queryable, e: InboxEvent) => {
      await db.query(INSERT, [e.provider, e.eventId, e.eventType, "worker"]);
    },
  });
  worker.backoff = new Backoff(50, 200);
  let ended = false;
  await execute(false);
  const running = worker.run().finally(() => (ended = true));
  try {
    const deadline = Date.now() + 20_000;
    while (worker.consecutiveErrors < 3 && Date.now() < deadline) await sleep(50);
    assert.ok(worker.consecutiveErrors >= 3, String(worker.lastError));
    assert.equal(ended, false);
    assert.equal((worker.lastError as { code?: string }).code, "42501");
  } finally {
    await execute(true);
    await admin.end();
  }
  try {
    const c = new pg.Client({ connectionString: DATABASE_URL });
    await c.connect();
    for (let i = 0; i < 3; i++) {
      const body = stripeEvent(`evt_${run}_${i}`, run);
      assert.equal((await receive(pgClient(c), "stripe_inbox", stripeHeaders(body), body)).status, "queued");
    }
    await c.end();
    const deadline = Date.now() + 30_000;
    while ((await doneOnce(run)).size < 3 && Date.now() < deadline) await sleep(100);
    assert.equal((await doneOnce(run)).size, 3);
    assert.equal(worker.consecutiveErrors, 0);
    assert.ok(worker.errors >= 3 && seen.length >= 3);
  } finally {
    worker.stop();
    await running;
  }
  assert.ok(logged.some((m) => m.includes("an iteration failed")), logged.join("\n"));
});

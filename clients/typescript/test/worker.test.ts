// The worker loop against the real inbox: a pool of workers, a failing
// event among others, a worker killed holding a batch, one stopped by
// SIGTERM, and the database restarted under them. Every test asserts that
// each event's work committed exactly once.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import path from "node:path";
import { it } from "node:test";
import pg from "pg";
import { pgClient, pgConfig, receive } from "../src/index.js";
import { Backoff, InboxEvent, Worker, WorkerOptions } from "../src/worker.js";
import { ADMIN_URL, DATABASE_URL, newRun, orders, perEvent, restartServer, stripeEvent, stripeHeaders } from "./support.js";
import type { Queryable } from "../src/db.js";

const here = path.dirname(fileURLToPath(import.meta.url));
const INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ($1, $2, $3, 'worker')";
const plain = async (db: Queryable, e: InboxEvent) => {
  await db.query(INSERT, [e.provider, e.eventId, e.eventType]);
};

async function queue(run: string, n: number) {
  const c = new pg.Client({ connectionString: DATABASE_URL });
  await c.connect();
  try {
    for (let i = 0; i < n; i++) {
      const body = stripeEvent(`evt_${run}_${i}`, run);
      const d = await receive(pgClient(c), "stripe_inbox", stripeHeaders(body), body);
      assert.equal(d.status, "queued");
    }
  } finally {
    await c.end();
  }
}

async function onceEach(run: string): Promise<number> {
  const counts = await perEvent(run, "worker");
  for (const [id, n] of counts) assert.equal(n, 1, `${id} done ${n} times`);
  return counts.size;
}

async function waitFor(run: string, n: number, seconds = 30) {
  const deadline = Date.now() + seconds * 1000;
  while (Date.now() < deadline) {
    if ((await orders(`evt_${run}_`, "worker")) >= n) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(`${await orders(`evt_${run}_`, "worker")} of ${n} events done after ${seconds} s`);
}

function pool(n: number, options: Partial<WorkerOptions>) {
  const workers = Array.from({ length: n }, () => new Worker({ connectionString: DATABASE_URL, work: plain, ...options }));
  const running = workers.map((w) => w.run());
  return {
    workers,
    stop: async () => {
      workers.forEach((w) => w.stop());
      await Promise.all(running);
    },
  };
}

function child(msPerEvent: number, lease: string) {
  const p = spawn(process.execPath, [path.join(here, "worker-process.js"), String(msPerEvent), lease], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines = createInterface({ input: p.stdout! });
  const first = new Promise<string>((resolve) => lines.once("line", resolve));
  return { p, first };
}

it("a pool of workers does every event once", async () => {
  const run = newRun();
  await queue(run, 60);
  const p = pool(3, { batch: 7 });
  try {
    await waitFor(run, 60);
  } finally {
    await p.stop();
  }
  assert.equal(await onceEach(run), 60);
});

it("takes libpq's keyword/value connection strings as the other packages do", async () => {
  const url = new URL(DATABASE_URL);
  const conninfo = `host=${url.hostname} port=${url.port || 5432} dbname='${url.pathname.slice(1)}' user=${decodeURIComponent(url.username)} application_name='a worker'`;
  assert.deepEqual(pgConfig("postgresql://u@h/d"), { connectionString: "postgresql://u@h/d" });
  assert.deepEqual(pgConfig("host=h port=5433 dbname='my db' user=u password='it\\'s' connect_timeout=2"), {
    host: "h",
    port: 5433,
    database: "my db",
    user: "u",
    password: "it's",
    connectionTimeoutMillis: 2000,
  });
  assert.throws(() => pgConfig("host=h nonsense"), /not a connection string/);
  assert.throws(() => pgConfig("host=h krbsrvname=x"), /keyword "krbsrvname" is not supported/);
  const run = newRun();
  await queue(run, 3);
  const w = pool(1, { connectionString: conninfo });
  try {
    await waitFor(run, 3);
  } finally {
    await w.stop();
  }
  assert.equal(await onceEach(run), 3);
});

it("a failing event undoes its own work only", async () => {
  const run = newRun();
  await queue(run, 10);
  const errors: unknown[] = [];
  const p = pool(1, {
    batch: 10,
    onError: (e) => errors.push(e),
    work: async (db, e) => {
      await plain(db, e);
      if (e.eventId === `evt_${run}_3`) throw new Error("the payment service said no");
    },
  });
  try {
    await waitFor(run, 9);
    await new Promise((r) => setTimeout(r, 300));
  } finally {
    await p.stop();
  }
  assert.equal(await onceEach(run), 9);
  assert.equal(await orders(`evt_${run}_3`, "worker"), 0);
  assert.deepEqual(errors.map((e) => (e as Error).message), ["the payment service said no"]);
  const admin = new pg.Client({ connectionString: ADMIN_URL });
  await admin.connect();
  const r = await admin.query(
    "SELECT i.attempts, i.last_error FROM webhook.inbox i JOIN webhook.deliveries a ON a.id = i.delivery_id WHERE a.event_id = $1",
    [`evt_${run}_3`],
  );
  await admin.end();
  assert.deepEqual(r.rows, [{ attempts: 1, last_error: "the payment service said no" }]);
});

it("a worker killed holding a batch loses nothing", async () => {
  const run = newRun();
  await queue(run, 12);
  const victim = child(30_000, "2 seconds");
  assert.match(await victim.first, /^working /);
  victim.p.kill("SIGKILL");
  await once(victim.p, "exit");
  const p = pool(2, { batch: 5, lease: "30 seconds" });
  try {
    await waitFor(run, 12);
  } finally {
    await p.stop();
  }
  assert.equal(await onceEach(run), 12);
});

it("SIGTERM finishes the event in hand and hands the rest back", async () => {
  const run = newRun();
  await queue(run, 5);
  const w = child(500, "10 minutes");
  const line = await w.first;
  assert.match(line, /^working /);
  w.p.kill("SIGTERM");
  const [code] = await once(w.p, "exit");
  assert.equal(code, 0);
  // The event it named (perhaps one another test left in the inbox: the
  // oldest ready events are leased first).
  const inHand = line.split(" ")[1];
  assert.equal(await orders(inHand, "worker"), 1, `the event in hand (${inHand}) committed`);
  // The rest were handed back at once, not after their ten-minute leases.
  const p = pool(1, { batch: 5 });
  try {
    await waitFor(run, 5, 10);
  } finally {
    await p.stop();
  }
  assert.equal(await onceEach(run), 5);
});

it("a restart under the workers loses nothing and repeats nothing", async () => {
  const run = newRun();
  await queue(run, 80);
  const p = pool(3, {
    batch: 5,
    lease: "3 seconds",
    work: async (db, e) => {
      await plain(db, e);
      await new Promise((r) => setTimeout(r, 20));
    },
  });
  p.workers.forEach((w) => (w.backoff = new Backoff(100, 500)));
  try {
    const deadline = Date.now() + 20_000;
    while ((await orders(`evt_${run}_`, "worker")) < 10 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    await restartServer(0.5);
    await waitFor(run, 80, 40);
  } finally {
    await p.stop();
  }
  assert.equal(await onceEach(run), 80);
});

it("backoff doubles with jitter and starts over once connected", () => {
  const b = new Backoff();
  const steps = [500, 1000, 2000, 4000, 8000, 16000, 30000, 30000];
  for (const s of steps) {
    const w = b.next();
    assert.ok(w >= s / 2 && w <= s, `${w} for ${s}`);
  }
  b.connected();
  const w = b.next();
  assert.ok(w >= 250 && w <= 500);
});

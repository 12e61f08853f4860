// An inbox worker in pg: leases a batch of events from webhook_next, does
// the work, and completes the batch in one call.
//
// Per event: one external side effect (an email through an HTTP API, with an
// idempotency key derived from the event by webhook_outbound_key, so a retry
// after a crash cannot send it twice) and one database write. The batch's
// writes commit together with webhook_complete_batch (so each happens
// exactly once). A failed event is recorded with webhook_fail in the same
// transaction and retried after the backoff. It polls, and LISTENs on a
// connection of its own to wake up as soon as something is queued (LISTEN
// needs a direct or session-pooled connection; behind PgBouncer in
// transaction mode, poll only).
//
// On SIGTERM it finishes the event in hand, hands the rest of its batch back
// at once (webhook_fail with retry_in => 0), and exits. When the database
// goes away (a restart, a failover) it reconnects, waiting longer each time
// up to half a minute, back to half a second once connected, each wait
// drawn at random from its upper half so that workers one restart dropped
// do not all come back at the same instant; what it held was rolled back
// with its connection, and its leases run out and are taken again.
//
//   DATABASE_URL=postgresql://app@localhost/shop node worker.js
import pg from 'pg';

const LANGUAGE = 'node-worker';
const CONSUMER = process.env.WORKER_CONSUMER ?? 'default';
const EMAIL_URL = process.env.EMAIL_URL ?? 'http://127.0.0.1:8025/send';
const BATCH = 10;
// How long a batch's leases last: after a crash, its events wait this long
// before another worker takes them.
const LEASE = process.env.WORKER_LEASE ?? '1 minute';
const POLL_MS = 500;

let stopping = false;
let wake = () => {};
process.on('SIGTERM', () => { stopping = true; wake(); });
process.on('SIGINT', () => { stopping = true; wake(); });

async function process1(client, { id, provider, event_id: eventId, event_type: eventType, payload, attempts }) {
  if (payload?.fail_first_attempt && attempts === 1) throw new Error('injected failure on the first attempt');
  // The same key on every attempt of this event, whichever lease runs it.
  const { rows: [{ key }] } = await client.query('SELECT webhook_outbound_key($1, $2) AS key', [id, `email/${CONSUMER}`]);
  const sent = await fetch(EMAIL_URL, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ to: 'customer@example.com', event: eventId }),
  });
  if (!sent.ok) throw new Error(`email API answered ${sent.status}`);
  await client.query(
    'INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)',
    [provider, eventId, eventType, LANGUAGE]);
}

// One batch. Returns how many events it leased. The lease commits on its
// own, so operators see the events as leased (webhook.inbox_stats,
// webhook.blocked_entities). The batch's work then commits in one
// transaction with one webhook_complete_batch, each event in a savepoint,
// so that a failing event undoes only its own work. A lease that ran out
// and was taken over refuses the batch (55006) and its work rolls back: the
// events are then done one transaction each, so the others still commit.
async function workOnce(client) {
  const { rows } = await client.query(
    'SELECT id, provider, event_id, event_type, payload, attempts FROM webhook_next($1, $2, lease => $3)',
    [BATCH, CONSUMER, LEASE]);
  try {
    await finish(client, rows);
  } catch (err) {
    if (err.code !== '55006') throw err;
    for (const row of rows) {
      try {
        await finish(client, [row]);
      } catch (err1) {
        // 55006: this one was taken over; its work rolled back.
        if (err1.code !== '55006') throw err1;
      }
    }
  }
  return rows.length;
}

// Work the events and finish their leases, in one transaction.
async function finish(client, rows) {
  await client.query('BEGIN');
  try {
    const done = [];
    for (const row of rows) {
      if (stopping) {
        await client.query("SELECT webhook_fail($1, 'worker shut down', retry_in => '0 s')", [row.id]);
        continue;
      }
      await client.query('SAVEPOINT event'); // a failure undoes this event's work only
      try {
        await process1(client, row);
        done.push(row.id);
      } catch (err) {
        if (err.code === '55006') throw err;
        await client.query('ROLLBACK TO SAVEPOINT event');
        await client.query('SELECT webhook_fail($1, $2)', [row.id, String(err.message ?? err)]);
      }
    }
    if (done.length > 0) await client.query('SELECT webhook_complete_batch($1::uuid[])', [done]);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

// Sleep until notified, or until the next poll.
const pause = (ms) => new Promise((resolve) => {
  const timer = setTimeout(resolve, ms);
  wake = () => { clearTimeout(timer); resolve(); };
});

// How long to wait before reconnecting: doubling from 0.5 s to 30 s, each
// wait drawn from the upper half of its step (jitter), and back to the
// first step once a connection works.
const backoff = {
  step: 500,
  connected() { this.step = 500; },
  next() {
    const wait = this.step / 2 + Math.random() * (this.step / 2);
    this.step = Math.min(this.step * 2, 30_000);
    return Math.round(wait);
  },
};

// Work on one pair of connections until stopped, or until one breaks.
async function run() {
  let lost = null;
  const connectionLost = (err) => { lost ??= err; wake(); };
  const listener = new pg.Client({ connectionString: process.env.DATABASE_URL });
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  // A connection the server closes while idle reports here, not to a query.
  listener.on('error', connectionLost);
  client.on('error', connectionLost);
  try {
    await listener.connect();
    listener.on('notification', () => wake());
    await listener.query('LISTEN webhook_inbox');
    await client.connect();
    backoff.connected();
    while (!stopping) {
      if (lost) throw lost;
      if ((await workOnce(client)) === 0) await pause(POLL_MS);
    }
  } finally {
    await client.end().catch(() => {});
    await listener.end().catch(() => {});
  }
}

while (!stopping) {
  try {
    await run();
  } catch (err) {
    const delay = backoff.next();
    console.error(`worker: database unavailable (${err.message}); reconnecting in ${delay} ms`);
    await pause(delay);
  }
}

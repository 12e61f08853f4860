// An inbox worker in pg: leases events from webhook_next, does the work,
// completes or fails each one.
//
// Per event: one external side effect (an email through an HTTP API, with an
// idempotency key derived from the event by webhook_outbound_key, so a retry
// after a crash cannot send it twice) and one database write, committed together with
// webhook_complete (so it happens exactly once). A failure is recorded with
// webhook_fail and retried after the backoff. It polls, and LISTENs on a
// connection of its own to wake up as soon as something is queued (LISTEN
// needs a direct or session-pooled connection; behind PgBouncer in
// transaction mode, poll only).
//
// On SIGTERM it finishes the event in hand, hands the rest of its batch back
// at once (webhook_fail with retry_in => 0), and exits.
//
//   DATABASE_URL=postgresql://app@localhost/shop node worker.js
import pg from 'pg';

const LANGUAGE = 'node-worker';
const CONSUMER = process.env.WORKER_CONSUMER ?? 'default';
const EMAIL_URL = process.env.EMAIL_URL ?? 'http://127.0.0.1:8025/send';
const BATCH = 10;
const POLL_MS = 500;

let stopping = false;
process.on('SIGTERM', () => { stopping = true; });
process.on('SIGINT', () => { stopping = true; });

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

// One batch, in one transaction. Returns how many events it leased.
async function workOnce(client) {
  await client.query('BEGIN');
  try {
    const { rows } = await client.query(
      'SELECT id, provider, event_id, event_type, payload, attempts FROM webhook_next($1, $2)', [BATCH, CONSUMER]);
    for (const row of rows) {
      if (stopping) {
        await client.query("SELECT webhook_fail($1, 'worker shut down', retry_in => '0 s')", [row.id]);
        continue;
      }
      await client.query('SAVEPOINT event'); // a failure undoes this event's work only
      try {
        await process1(client, row);
        await client.query('SELECT webhook_complete($1)', [row.id]);
      } catch (err) {
        await client.query('ROLLBACK TO SAVEPOINT event');
        await client.query('SELECT webhook_fail($1, $2)', [row.id, String(err.message ?? err)]);
      }
    }
    await client.query('COMMIT');
    return rows.length;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => {});
    throw err;
  }
}

// Sleep until notified, or until the next poll.
let wake = () => {};
const listener = new pg.Client({ connectionString: process.env.DATABASE_URL });
await listener.connect();
listener.on('notification', () => wake());
await listener.query('LISTEN webhook_inbox');

const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
while (!stopping) {
  if ((await workOnce(client)) === 0) {
    await new Promise((resolve) => {
      const timer = setTimeout(resolve, POLL_MS);
      wake = () => { clearTimeout(timer); resolve(); };
    });
  }
}
await client.end();
await listener.end();

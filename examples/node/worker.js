// An inbox worker on the pg-webhook-inbox package's worker loop
// (pg-webhook-inbox/worker, node-postgres).
//
// The loop leases a batch of events from webhook_next and completes the
// batch with one webhook_complete_batch in the transaction of its work, so
// each event's work commits exactly once; a failed event is recorded with
// webhook_fail in the same transaction and retried after the backoff. It
// polls, and LISTENs on a connection of its own to wake up as soon as
// something is queued (behind PgBouncer in transaction mode, pass
// `listen: false` and poll). On SIGTERM it finishes the event in hand,
// hands the rest of its batch back at once, and exits. When the database
// goes away it reconnects, waiting longer each time up to half a minute,
// each wait drawn at random from its upper half.
//
// Here, per event: one external side effect (an email through an HTTP API,
// with an idempotency key derived from the event by webhook_outbound_key,
// so a retry after a crash cannot send it twice) and one database write.
//
//   DATABASE_URL=postgresql://app@localhost/shop node worker.js
import { Worker, outboundKey } from 'pg-webhook-inbox/worker';

const LANGUAGE = 'node-worker';
const CONSUMER = process.env.WORKER_CONSUMER ?? 'default';
const EMAIL_URL = process.env.EMAIL_URL ?? 'http://127.0.0.1:8025/send';
// How long a batch's leases last: after a crash, its events wait this long
// before another worker takes them.
const LEASE = process.env.WORKER_LEASE ?? '1 minute';

// One event, in the batch's transaction: its write commits with its
// completion; throwing records a failure and undoes only this event.
async function processEvent(db, event) {
  if (event.payload?.fail_first_attempt && event.attempts === 1) throw new Error('injected failure on the first attempt');
  // The same key on every attempt of this event, whichever lease runs it.
  const key = await outboundKey(db, event.id, `email/${CONSUMER}`);
  const sent = await fetch(EMAIL_URL, {
    method: 'POST',
    headers: { 'content-type': 'application/json', 'idempotency-key': key },
    body: JSON.stringify({ to: 'customer@example.com', event: event.eventId }),
  });
  if (!sent.ok) throw new Error(`email API answered ${sent.status}`);
  await db.query(
    'INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)',
    [event.provider, event.eventId, event.eventType, LANGUAGE]);
}

await new Worker({
  connectionString: process.env.DATABASE_URL,
  work: processEvent,
  consumer: CONSUMER,
  batch: 10,
  lease: LEASE,
  pollMs: 500,
  onError: (err) => console.error(`worker: ${err.message ?? err}`),
}).handleSignals().run();

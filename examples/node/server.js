// A webhook receiver in Express + pg.
//
//   POST /webhooks/:provider      one transaction: claim, business write, complete
//   POST /webhooks-2p/:provider   two phases: claim, send an email, complete
//   POST /inbox/:provider         inbox: store and answer 200 at once; worker.js
//                                 processes it later
//
// The database verifies the signature, deduplicates and claims the delivery
// (webhook_receive); the pg-webhook-inbox package (clients/typescript) runs
// the transaction, the savepoint around the work, the record of a failure
// and the outage rule, and picks the answer the provider should hear; the
// handlers here only do their work. The answers: 200 done or duplicate, 409
// in progress elsewhere, 401 bad signature, 400 unreadable, 404 no such
// provider, 500 failed (recorded: the next delivery retries).
// An endpoint check (Slack's url_verification, Zoom's, Twitch's, Discord's
// PING) comes back with the exact body to answer it with.
//
// PUBLIC_URL is the base URL the providers are configured with (behind a
// proxy, not what this process sees): schemes that sign the URL (Twilio,
// Square, HubSpot) verify against PUBLIC_URL + the request's path and query.
// Without it their deliveries are refused (missing_url): the URL is never
// built from the request's Host header, which whoever sends it chooses.
//
// A database restart breaks the pooled connections: the pool drops them
// (its 'error' listener keeps the process up). While the database is away
// (a restart, a failover) a request keeps trying it on fresh connections
// for up to DB_RETRY_SECONDS (8: GitHub gives up on a delivery after 10 s
// and never sends it again), then answers 503 with Retry-After, an answer
// every provider retries; never 500 for a delivery that was not stored.
// Trying again is safe: a broken attempt's writes rolled back with it, and
// webhook_receive answers a delivery it did store as a duplicate.
//
//   DATABASE_URL=postgresql://app@localhost/shop PORT=8002 node server.js
import express from 'express';
import pg from 'pg';
import { WebhookHandler, answerFor, failed, pgClient, pgPool, publicUrl, receive, retrying } from 'pg-webhook-inbox';

const LANGUAGE = 'node';
const EMAIL_URL = process.env.EMAIL_URL ?? 'http://127.0.0.1:8025/send';
const DB_RETRY_SECONDS = Number(process.env.DB_RETRY_SECONDS ?? 8);
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
// An idle connection the server closed (a restart, a failover) is dropped
// by the pool; without a listener its error would end the process.
pool.on('error', (err) => console.error(`database connection lost: ${err.message}`));
const app = express();

// Each delivery in a transaction of its own from the pool, the work in a
// savepoint of it, completed by its commit. inbox: false: claimed here,
// even for a provider registered for the inbox (GitHub).
const handler = new WebhookHandler(pgPool(pool), {
  publicUrl: process.env.PUBLIC_URL,
  retrySeconds: DB_RETRY_SECONDS,
  inbox: false,
});
// Single statements, each its own transaction (the claim of a two-phase
// delivery, the inbox's store).
const autocommit = pgClient(pool);

const send = (res, answer) => res.status(answer.status).set(answer.headers).type(answer.contentType).send(answer.body);
const urlOf = (req) => publicUrl(process.env.PUBLIC_URL, req.originalUrl);

// The raw bytes: signatures cover exactly these, so never parse before verifying.
app.use(express.raw({ type: () => true, limit: '25mb' }));

app.get('/healthz', (_req, res) => res.json({ ok: true }));

app.post('/webhooks/:provider', async (req, res) => {
  const { provider } = req.params;
  // The business write, in the delivery's transaction: it commits with the
  // event's completion, or not at all. What it returns answers duplicates.
  const recordOrder = async (db, delivery) => {
    await db.query(
      'INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)',
      [provider, delivery.eventId, delivery.eventType, LANGUAGE]);
    if (req.get('x-test-fail') === '1') throw new Error('injected failure halfway');
    return { order: delivery.eventId };
  };
  send(res, await handler.handle(provider, req.headers, req.body, recordOrder, req.originalUrl));
});

// Renews a two-phase claim's lease while slow work runs.
function heartbeat(id, everyMs = 5000, lease = '30 seconds') {
  const timer = setInterval(() => {
    pool.query('SELECT webhook_extend($1, $2::interval)', [id, lease]).catch(() => {});
  }, everyMs);
  return () => clearInterval(timer);
}

app.post('/webhooks-2p/:provider', async (req, res) => {
  // The claim commits on its own, with its lease.
  let delivery = null;
  const claim = await retrying(async () => {
    delivery = await receive(autocommit, req.params.provider, req.headers, req.body,
      { url: urlOf(req), inbox: false, lease: '30 seconds' });
    return answerFor(delivery);
  }, DB_RETRY_SECONDS);
  if (!delivery?.claimed) return send(res, claim);
  const stop = heartbeat(delivery.id);
  try {
    // The side effect outside the database, keyed by the event so that a
    // retry after a crash cannot send it twice.
    const { rows: [{ key }] } = await pool.query("SELECT webhook_outbound_key($1, 'email') AS key", [delivery.id]);
    const sent = await fetch(EMAIL_URL, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ to: 'customer@example.com', event: delivery.eventId }),
    });
    if (!sent.ok) throw new Error(`email API answered ${sent.status}`);
    stop();
    await pool.query('SELECT webhook_complete($1)', [delivery.id]);
    return send(res, claim);
  } catch (err) {
    stop();
    // Recorded if the database is there; if not, the lease runs out and
    // the provider's next delivery takes the event over.
    await pool.query('SELECT webhook_fail($1, $2)', [delivery.id, String(err.message ?? err)]).catch(() => {});
    return send(res, failed());
  }
});

// Verified, archived and queued in one statement (its own transaction); the
// answer goes out after it commits, so a 200 always means it is stored.
app.post('/inbox/:provider', async (req, res) => {
  send(res, await retrying(async () => answerFor(
    await receive(autocommit, req.params.provider, req.headers, req.body, { url: urlOf(req), inbox: true }),
  ), DB_RETRY_SECONDS));
});

const port = Number(process.env.PORT ?? 8002);
app.listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`));

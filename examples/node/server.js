// A webhook receiver in Express + pg.
//
//   POST /webhooks/:provider      one transaction: claim, business write, complete
//   POST /webhooks-2p/:provider   two phases: claim, send an email, complete
//   POST /inbox/:provider         inbox: store and answer 200 at once; worker.js
//                                 processes it later
//
// The database verifies the signature, deduplicates and claims the delivery
// (webhook_receive); the handler does its work and answers what the provider
// should hear: 200 done or duplicate, 409 in progress elsewhere, 401 bad
// signature, 400 unreadable, 500 failed (recorded: the next delivery retries).
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

const LANGUAGE = 'node';
const EMAIL_URL = process.env.EMAIL_URL ?? 'http://127.0.0.1:8025/send';
const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 8 });
// An idle connection the server closed (a restart, a failover) is dropped
// by the pool; without a listener its error would end the process.
pool.on('error', (err) => console.error(`database connection lost: ${err.message}`));
const app = express();

// The connection broke under the request (not an answer of the database
// to it): worth one more try on a fresh connection.
const CONNECTION_LOST = new Set(['57P01', '57P02', '57P03', 'ECONNRESET', 'ECONNREFUSED', 'EPIPE']);
const connectionLost = (err) =>
  CONNECTION_LOST.has(err?.code) || /Connection terminated|not queryable/.test(String(err?.message));

const DB_RETRY_MS = Number(process.env.DB_RETRY_SECONDS ?? 8) * 1000;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// The database stayed away for the whole retry budget.
class DatabaseAway extends Error {}

// Run fn(client) on a pooled connection; again, on a fresh one, while the
// database is away, until DB_RETRY_MS have passed. A broken client is
// destroyed, not returned to the pool.
async function withClient(fn) {
  const deadline = Date.now() + DB_RETRY_MS;
  for (let wait = 100; ; wait = Math.min(wait * 2, 1000)) {
    let client = null;
    let broken = null;
    try {
      client = await pool.connect();
      return await fn(client);
    } catch (err) {
      if (!connectionLost(err)) throw err;
      broken = err;
      if (Date.now() + wait >= deadline) throw new DatabaseAway(err.message);
    } finally {
      client?.release(broken ?? undefined);
    }
    await sleep(wait);
  }
}

// What an error becomes: 503 with Retry-After while the database is away
// (the provider sends the delivery again), 500 otherwise.
function failed(res, err) {
  if (err instanceof DatabaseAway || connectionLost(err)) {
    console.error(`database unavailable (${err.message}); answering 503`);
    return res.status(503).set('Retry-After', '30').json({ status: 'unavailable' });
  }
  return res.status(500).json({ status: 'error', error: String(err.message ?? err) });
}

// The raw bytes: signatures cover exactly these, so never parse before verifying.
app.use(express.raw({ type: () => true, limit: '25mb' }));

// inbox => false: claimed here, whatever the provider is registered for;
// complete_on_commit: the commit of the handler's transaction completes it.
const RECEIVE = `SELECT id, claimed, status, http_status, reason, event_id, event_type, response, response_type
                   FROM webhook_receive($1, $2::jsonb, $3::bytea, inbox => false, url => $4,
                                        complete_on_commit => true)`;

// The URL the provider called: the configured public base, then the path and query.
const publicUrl = (req) =>
  process.env.PUBLIC_URL ? process.env.PUBLIC_URL.replace(/\/$/, '') + req.originalUrl : null;

// An endpoint check, answered with exactly what its provider expects.
const handshake = (res, r) => res.status(200).type(r.response_type).send(r.response);

app.get('/healthz', (_req, res) => res.json({ ok: true }));

app.post('/webhooks/:provider', async (req, res) => {
  const { provider } = req.params;
  try {
    const [status, body] = await withClient(async (client) => {
      try {
        await client.query('BEGIN');
        const { rows: [r] } = await client.query(RECEIVE, [provider, JSON.stringify(req.headers), req.body, publicUrl(req)]);
        if (r.response !== null) {
          await client.query('COMMIT');
          return [200, r];
        }
        if (!r.claimed) {
          await client.query('COMMIT');
          return [r.http_status, { status: r.status, reason: r.reason }];
        }
        await client.query('SAVEPOINT work'); // a failure undoes the work, not the claim
        try {
          await client.query(
            'INSERT INTO orders (provider, event_id, event_type, language) VALUES ($1, $2, $3, $4)',
            [provider, r.event_id, r.event_type, LANGUAGE]);
          if (req.get('x-test-fail') === '1') throw new Error('injected failure halfway');
          await client.query('SELECT webhook_complete($1, $2::jsonb)', [r.id, JSON.stringify({ order: r.event_id })]);
          await client.query('COMMIT');
          return [200, { status: r.status }];
        } catch (err) {
          if (connectionLost(err)) throw err;
          await client.query('ROLLBACK TO SAVEPOINT work');
          await client.query('SELECT webhook_fail($1, $2)', [r.id, String(err.message ?? err)]);
          await client.query('COMMIT');
          return [500, { status: 'failed' }];
        }
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw err;
      }
    });
    if (body.response !== undefined) return handshake(res, body);
    return res.status(status).json(body);
  } catch (err) {
    return failed(res, err);
  }
});

// Renews a two-phase claim's lease while slow work runs.
function heartbeat(id, everyMs = 5000, lease = '30 seconds') {
  const timer = setInterval(() => {
    pool.query('SELECT webhook_extend($1, $2::interval)', [id, lease]).catch(() => {});
  }, everyMs);
  return () => clearInterval(timer);
}

app.post('/webhooks-2p/:provider', async (req, res) => {
  const { provider } = req.params;
  // Autocommit: the claim commits on its own, with its lease.
  let r;
  try {
    ({ rows: [r] } = await withClient((client) => client.query(
      `SELECT id, claimed, status, http_status, reason, event_id, event_type, response, response_type
         FROM webhook_receive($1, $2::jsonb, $3::bytea, lease => '30 seconds', inbox => false, url => $4)`,
      [provider, JSON.stringify(req.headers), req.body, publicUrl(req)])));
  } catch (err) {
    return failed(res, err);
  }
  if (r.response !== null) return handshake(res, r);
  if (!r.claimed) return res.status(r.http_status).json({ status: r.status, reason: r.reason });
  const stop = heartbeat(r.id);
  try {
    // The side effect outside the database, keyed by the event so that a
    // retry after a crash cannot send it twice.
    const { rows: [{ key }] } = await pool.query("SELECT webhook_outbound_key($1, 'email') AS key", [r.id]);
    const sent = await fetch(EMAIL_URL, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'idempotency-key': key },
      body: JSON.stringify({ to: 'customer@example.com', event: r.event_id }),
    });
    if (!sent.ok) throw new Error(`email API answered ${sent.status}`);
    stop();
    await pool.query('SELECT webhook_complete($1)', [r.id]);
    return res.status(200).json({ status: r.status });
  } catch (err) {
    stop();
    // Recorded if the database is there; if not, the lease runs out and
    // the provider's next delivery takes the event over.
    await pool.query('SELECT webhook_fail($1, $2)', [r.id, String(err.message ?? err)]).catch(() => {});
    return res.status(500).json({ status: 'failed' });
  }
});

// Verified, archived and queued in one statement (its own transaction); the
// answer goes out after it commits, so a 200 always means it is stored.
app.post('/inbox/:provider', async (req, res) => {
  try {
    const { rows: [r] } = await withClient((client) => client.query(
      `SELECT status, http_status, reason, response, response_type
         FROM webhook_receive($1, $2::jsonb, $3::bytea, inbox => true, url => $4)`,
      [req.params.provider, JSON.stringify(req.headers), req.body, publicUrl(req)]));
    if (r.response !== null) return handshake(res, r);
    return res.status(r.http_status).json({ status: r.status, reason: r.reason });
  } catch (err) {
    return failed(res, err);
  }
});

const port = Number(process.env.PORT ?? 8002);
app.listen(port, '127.0.0.1', () => console.log(`listening on 127.0.0.1:${port}`));

// End-to-end test of the example receivers: deliveries signed by the
// providers' official SDKs, each delivered 5 to 10 times — some at once,
// some after an injected handler failure — plus tampered and stale copies,
// sent over HTTP to every receiver. Asserts one business row per event, the
// right HTTP answer per delivery, forgeries rejected and archived, and one
// email per event in two-phase mode. Then the inbox: GitHub and Stripe
// deliveries to the receiver's inbox endpoint, all answered 200 at once
// (bursts and redeliveries included) but forgeries, processed by the
// language's worker (some failing their first attempt, retried after the
// backoff), one business row and one email per event, a worker that stops
// cleanly on SIGTERM, and a batch whose leases ran out and were taken over
// by another worker (its work commits once). In the middle, the database
// restarts under the running receiver and worker: the receiver answers the
// very next GitHub delivery 200 (GitHub never redelivers), and the worker
// reconnects and processes it. Prints a table.
//
// The Python receiver's own API, POST /orders, is driven with
// Idempotency-Keys: bursts, replays, a reused key, and requests that die
// between their two steps, against a stand-in payment API.
//
// Beside the HMAC providers, PayPal (RSA, with a certificate the database
// holds), Twilio (HMAC over the public URL and the form fields, signed by
// Twilio's own library) and SendGrid (ECDSA P-256 over a batch) go to every
// receiver, which passes the URL the provider called (PUBLIC_URL + path).
//
// Needs a PostgreSQL with the extension installed (PGHOST, PGPORT, PGUSER),
// the receivers' commands in RECEIVERS and the workers' in WORKERS (JSON:
// {language: [cmd, ...args]}).
import http from 'node:http';
import crypto from 'node:crypto';
import pg from 'pg';
import Stripe from 'stripe';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import twilio from 'twilio';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import zlib from 'node:zlib';
import { spawnReceiver, waitHealthy } from './receivers.mjs';

const DB = 'pgwi_examples';
const EVENTS_PER_PROVIDER = 6;
const receivers = JSON.parse(process.env.RECEIVERS);
const workers = JSON.parse(process.env.WORKERS);
const INBOX_EVENTS = 6;
const base = { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432) };

// The base URL the providers are configured with; the receivers sit
// behind it as if behind a proxy.
const PUBLIC_URL = 'https://hooks.example.com';

const secrets = {
  stripe: 'whsec_' + crypto.randomBytes(24).toString('base64url'),
  github: crypto.randomBytes(20).toString('hex'),
  clerk: 'whsec_' + crypto.randomBytes(24).toString('base64'),
  twilio: crypto.randomBytes(16).toString('hex'),
};

// PayPal signs with a private key behind a certificate; SendGrid with an
// ECDSA key. Both are made here; the database holds only the public parts.
const paypal = (() => {
  const dir = mkdtempSync(join(tmpdir(), 'paypal-'));
  execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, 'key.pem'),
    '-out', join(dir, 'cert.pem'), '-subj', '/CN=paypal-example', '-days', '2'], { stdio: 'ignore' });
  return {
    key: readFileSync(join(dir, 'key.pem'), 'utf8'),
    cert: readFileSync(join(dir, 'cert.pem'), 'utf8'),
    certUrl: 'https://api.paypal.com/v1/notifications/certs/CERT-example-' + crypto.randomBytes(4).toString('hex'),
    webhookId: 'WH' + crypto.randomBytes(8).toString('hex').toUpperCase(),
  };
})();
const sendgridKeys = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });

async function connectDb() {
  const db = new pg.Client({ ...base, user: process.env.PGUSER ?? 'postgres', database: DB });
  // The restart below closes it; the next query goes to a new one.
  db.on('error', () => {});
  await db.connect();
  return db;
}

// Restart the database (fast: every connection is closed), as the server
// the test runs on was started (.ci/pg-temp).
function restartDatabase() {
  const pgCtl = [`${process.env.PG_BINDIR}/pg_ctl`, '-D', process.env.PG_DATA_DIR, '-m', 'fast', '-w',
    '-l', process.env.PG_SERVER_LOG, '-o', process.env.PG_SERVER_OPTS, 'restart'];
  const command = process.env.PG_SERVER_USER ? ['runuser', '-u', process.env.PG_SERVER_USER, '--', ...pgCtl] : pgCtl;
  execFileSync(command[0], command.slice(1), { stdio: 'ignore' });
}

// Counts a delivery's answer against those allowed, and says which was
// wrong (`when`: the circumstance, for the message).
function expecter(language, stats, when) {
  return (what, status, allowed) => {
    stats.deliveries++;
    if (!allowed.includes(status)) {
      stats.wrong++;
      console.error(`${language}: ${what} answered ${status} ${when}, expected ${allowed.join(' or ')}`);
    }
  };
}

// Stop the database (fast), or start it again, as restartDatabase does.
function pgCtl(action) {
  const args = [`${process.env.PG_BINDIR}/pg_ctl`, '-D', process.env.PG_DATA_DIR, '-m', 'fast', '-w',
    '-l', process.env.PG_SERVER_LOG, '-o', process.env.PG_SERVER_OPTS, action];
  const command = process.env.PG_SERVER_USER ? ['runuser', '-u', process.env.PG_SERVER_USER, '--', ...args] : args;
  execFileSync(command[0], command.slice(1), { stdio: 'ignore' });
}

// While the database is down: a GitHub delivery (sent once, as GitHub
// sends it) arriving during an outage shorter than the receiver's retry
// budget is answered 200 once the database is back; during a longer one,
// 503 with Retry-After. Never 500. Returns the events stored.
async function exerciseOutage(language, port, stats) {
  const expect = expecter(language, stats, 'during an outage');
  const sent = [];
  const short = `${language}_outage_github_${crypto.randomBytes(4).toString('hex')}`;
  const delivery = await signed('github', short);
  pgCtl('stop');
  const answered = post(port, '/inbox/github', delivery);
  await sleep(2000);
  pgCtl('start');
  stats.events++;
  expect(`${short} (sent 2 s into an outage of 2 s)`, await answered, [200]);
  sent.push({ provider: 'github', eventId: short });
  // Processed before the next outage, so that it does not stop the worker
  // between its email and its commit (the event would be emailed again,
  // under the same key: right, but not what this counts).
  const db = await connectDb();
  await processed(db, language, [short]);
  await db.end();

  const long = `${language}_outage_long_${crypto.randomBytes(4).toString('hex')}`;
  pgCtl('stop');
  const began = Date.now();
  const longDelivery = await signed('github', long);
  const res = await fetch(`http://127.0.0.1:${port}/inbox/github`, {
    method: 'POST',
    headers: { 'content-type': longDelivery.contentType ?? 'application/json', ...longDelivery.headers },
    body: longDelivery.body,
  });
  await res.arrayBuffer();
  const waited = (Date.now() - began) / 1000;
  pgCtl('start');
  expect(`${long} (an outage past the retry budget)`, res.status, [503]);
  if (res.status === 503 && (!res.headers.get('retry-after') || waited < 6 || waited > 10)) {
    stats.wrong++;
    console.error(`${language}: the 503 came after ${waited} s with Retry-After ${res.headers.get('retry-after')}`);
  }
  return sent;
}

// Wait until every event is processed by the worker.
async function processed(db, language, ids) {
  for (let i = 0; ; i++) {
    const { rows: [{ left }] } = await db.query(
      "SELECT count(*)::int AS left FROM webhook.inbox WHERE event_id = ANY($1) AND status <> 'processed'", [ids]);
    if (left === 0) return;
    if (i > 600) throw new Error(`${language}: ${left} inbox events never processed`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

// Right after a restart: each GitHub delivery sent once, as GitHub sends
// it, must be answered 200; a claimed Stripe delivery too, with its side
// effect. Returns the inbox events sent.
async function exerciseAfterRestart(language, port, stats, db) {
  const expect = expecter(language, stats, 'after the restart');
  const sent = [];
  for (let n = 0; n < 3; n++) {
    const eventId = `${language}_restart_github_${n}_${crypto.randomBytes(4).toString('hex')}`;
    sent.push({ provider: 'github', eventId });
    stats.events++;
    expect(`${eventId} (sent once)`, await post(port, '/inbox/github', await signed('github', eventId)), [200]);
  }
  const claimed = `${language}_restart_stripe_${crypto.randomBytes(4).toString('hex')}`;
  expect(`${claimed} (claimed)`, await post(port, '/webhooks/stripe', await signed('stripe', claimed)), [200]);
  const { rows: [{ n }] } = await db.query('SELECT count(*)::int AS n FROM orders WHERE event_id = $1', [claimed]);
  if (n !== 1) {
    stats.wrong++;
    console.error(`${language}: ${n} side effects of ${claimed} after the restart`);
  }
  return sent;
}

async function setup() {
  const admin = new pg.Client({ ...base, user: process.env.PGUSER ?? 'postgres', database: 'postgres' });
  await admin.connect();
  await admin.query(`DROP DATABASE IF EXISTS ${DB} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${DB}`);
  await admin.end();
  const db = await connectDb();
  await db.query(`
    CREATE EXTENSION pg_webhook_inbox;
    CREATE TABLE orders (provider text, event_id text, event_type text, language text,
                         created_at timestamptz DEFAULT clock_timestamp());
    DO $$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'webhook_example_app') THEN
        CREATE ROLE webhook_example_app LOGIN;
      END IF;
    END $$;
    SELECT webhook_grant_app('webhook_example_app');
    GRANT INSERT ON orders TO webhook_example_app;
    -- The Python example's own API (POST /orders).
    CREATE TABLE api_orders (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, idempotency_key text,
                             sku text, amount integer, language text);
    GRANT INSERT, SELECT ON api_orders TO webhook_example_app;
    -- Retries after a failed attempt within a second, not ten.
    ALTER ROLE webhook_example_app SET webhook.backoff_base = '300ms';`);
  for (const [provider, secret] of Object.entries(secrets)) {
    await db.query('SELECT webhook_register_provider($1, secret => $2)', [provider, secret]);
  }
  await db.query("SELECT webhook_register_provider('paypal', scheme => $1, secret => $2)",
    [`paypal;webhook_id=${paypal.webhookId}`, `${paypal.certUrl}\n${paypal.cert}`]);
  await db.query("SELECT webhook_register_provider('sendgrid', secret => $1)",
    [sendgridKeys.publicKey.export({ type: 'spki', format: 'der' }).toString('base64')]);
  return db;
}

// A stand-in for an email API; it counts the requests made per idempotency key.
function emailStub() {
  const sends = new Map();
  const server = http.createServer((req, res) => {
    const key = req.headers['idempotency-key'];
    sends.set(key, (sends.get(key) ?? 0) + 1);
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      // An email about a "slow" event hangs for six seconds.
      const slow = String(JSON.parse(body || '{}').event ?? '').includes('_slow_');
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"sent":true}'),
        slow ? 6000 : 0);
    });
  });
  return new Promise((resolve) => server.listen(8025, '127.0.0.1', () => resolve({ server, sends })));
}

// A stand-in for a payment API that honours Idempotency-Key as Stripe does:
// the first request with a key makes the charge, every later one gets the
// same charge back. It counts the charges made per order.
function paymentsStub() {
  const byKey = new Map();
  const chargesPerOrder = new Map();
  const server = http.createServer((req, res) => {
    let body = '';
    req.on('data', (d) => { body += d; });
    req.on('end', () => {
      const key = req.headers['idempotency-key'];
      let charge = key && byKey.get(key);
      if (!charge) {
        const { order, amount } = JSON.parse(body);
        charge = { id: 'ch_' + crypto.randomBytes(8).toString('hex'), order, amount };
        if (key) byKey.set(key, charge);
        chargesPerOrder.set(order, (chargesPerOrder.get(order) ?? 0) + 1);
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(charge));
    });
  });
  return new Promise((resolve) => server.listen(8026, '127.0.0.1', () => resolve({ server, chargesPerOrder })));
}

// POST /orders with an Idempotency-Key: { status, body }.
async function postOrder(port, key, order, extra = {}) {
  const res = await fetch(`http://127.0.0.1:${port}/orders`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', ...(key ? { 'idempotency-key': key } : {}), ...extra },
    body: JSON.stringify(order),
  });
  return { status: res.status, body: await res.text() };
}

// The Python example's POST /orders: ten identical requests at once make one
// order and one charge; a retry replays; another body under the key is 422;
// a request that dies after either step is resumed by its retry, which
// charges once. Returns the problems found.
async function exerciseOrders(port, db, payments, stats) {
  const problems = [];
  const order = { sku: 'sku-1', amount: 1200 };
  const burstKey = crypto.randomUUID();
  const burst = await Promise.all(Array.from({ length: 10 }, () => postOrder(port, burstKey, order)));
  const created = burst.filter((a) => a.status === 201);
  const busy = burst.filter((a) => a.status === 409);
  stats.deliveries += 10;
  if (created.length < 1 || created.length + busy.length !== 10 || created.some((a) => a.body !== created[0].body)) {
    problems.push(`burst answered ${burst.map((a) => a.status).join(',')}`);
  }
  const replay = await postOrder(port, burstKey, order);
  if (replay.status !== 201 || replay.body !== created[0]?.body) problems.push(`retry answered ${replay.status}`);
  const other = await postOrder(port, burstKey, { ...order, amount: 1 });
  if (other.status !== 422) problems.push(`another body answered ${other.status}, expected 422`);
  const keyless = await postOrder(port, null, order);
  if (keyless.status !== 400) problems.push(`no key answered ${keyless.status}, expected 400`);
  stats.deliveries += 3;
  const keys = [burstKey];
  for (const step of ['order', 'charge']) {
    const key = crypto.randomUUID();
    keys.push(key);
    const died = await postOrder(port, key, order, { 'x-test-crash-after': step });
    const early = await postOrder(port, key, order);
    await new Promise((r) => setTimeout(r, 1200)); // the dead request's lease runs out
    const resumed = await postOrder(port, key, order);
    stats.deliveries += 3;
    if (died.status !== 503 || early.status !== 409 || resumed.status !== 201) {
      problems.push(`crash after ${step}: answered ${died.status}, ${early.status}, ${resumed.status}`);
    }
  }
  const { rows } = await db.query(
    'SELECT idempotency_key, count(*)::int AS n, min(id)::int AS id FROM api_orders WHERE idempotency_key = ANY($1) GROUP BY 1',
    [keys]);
  if (rows.length !== keys.length || rows.some((r) => r.n !== 1)) {
    problems.push(`orders per key: ${rows.map((r) => r.n).join(',')} for ${keys.length} keys`);
  }
  const charges = rows.map((r) => payments.chargesPerOrder.get(r.id) ?? 0);
  if (!charges.every((n) => n === 1)) problems.push(`charges per order: ${charges.join(',')}`);
  stats.events += keys.length;
  stats.orders = rows.length;
  return problems;
}

// The key webhook_outbound_key gives an event's external call.
async function outboundKey(db, provider, eventId, operation) {
  const { rows: [{ key }] } = await db.query('SELECT webhook_outbound_key($1, $2, $3) AS key', [provider, eventId, operation]);
  return key;
}

const stripe = new Stripe('sk_test_not_used_offline');

// A delivery as the provider's own SDK signs it: { headers, body }.
function signed(provider, eventId, { timestamp, tamper, extra } = {}) {
  const now = timestamp ?? Math.floor(Date.now() / 1000);
  if (provider === 'stripe') {
    const body = JSON.stringify({ id: eventId, object: 'event', type: 'invoice.paid', data: { amount: 1000 }, ...extra });
    const header = stripe.webhooks.generateTestHeaderString({ payload: body, secret: secrets.stripe, timestamp: now });
    return { headers: { 'Stripe-Signature': header }, body: tamper ? body.replace('1000', '1') : body };
  }
  if (provider === 'github') {
    const body = JSON.stringify({ ref: 'refs/heads/main', after: eventId, ...extra });
    return githubSign(secrets.github, body).then((sig) => ({
      headers: { 'X-GitHub-Delivery': eventId, 'X-GitHub-Event': 'push', 'X-Hub-Signature-256': sig },
      body: tamper ? body.replace('main', 'evil') : body,
    }));
  }
  if (provider === 'paypal') {
    const body = JSON.stringify({ id: eventId, event_type: 'PAYMENT.CAPTURE.COMPLETED', resource: { id: 'CAP-1', amount: { value: '10.00' } } });
    const transmission = crypto.randomUUID();
    const time = new Date(now * 1000).toISOString().replace(/\.\d+Z$/, 'Z');
    const message = `${transmission}|${time}|${paypal.webhookId}|${zlib.crc32(body)}`;
    return {
      headers: {
        'PAYPAL-TRANSMISSION-ID': transmission, 'PAYPAL-TRANSMISSION-TIME': time, 'PAYPAL-AUTH-ALGO': 'SHA256withRSA',
        'PAYPAL-CERT-URL': paypal.certUrl,
        'PAYPAL-TRANSMISSION-SIG': crypto.sign('sha256', Buffer.from(message), paypal.key).toString('base64'),
      },
      body: tamper ? body.replace('10.00', '99.00') : body,
    };
  }
  if (provider === 'twilio') {
    const params = { MessageSid: 'SM' + eventId, MessageStatus: 'delivered', To: '+15551234567' };
    const signature = twilio.getExpectedTwilioSignature(secrets.twilio, `${PUBLIC_URL}/webhooks/twilio`, params);
    return {
      headers: { 'X-Twilio-Signature': signature, 'I-Twilio-Idempotency-Token': eventId },
      body: new URLSearchParams(tamper ? { ...params, To: '+15550000000' } : params).toString(),
      contentType: 'application/x-www-form-urlencoded',
    };
  }
  if (provider === 'sendgrid') {
    const body = JSON.stringify([{ email: 'a@example.com', event: 'delivered', sg_event_id: eventId },
                                 { email: 'b@example.com', event: 'open', sg_event_id: eventId + '-2' }]);
    const ts = String(now);
    return {
      headers: {
        'X-Twilio-Email-Event-Webhook-Signature': crypto.sign('sha256', Buffer.from(ts + body), sendgridKeys.privateKey).toString('base64'),
        'X-Twilio-Email-Event-Webhook-Timestamp': ts,
      },
      body: tamper ? body.replace('open', 'spamreport') : body,
    };
  }
  const body = JSON.stringify({ type: 'user.created', data: { id: eventId } });
  const hook = new StandardWebhook(secrets.clerk.slice('whsec_'.length));
  const signature = hook.sign(eventId, new Date(now * 1000), body);
  return {
    headers: { 'svix-id': eventId, 'svix-timestamp': String(now), 'svix-signature': signature },
    body: tamper ? body.replace('user.created', 'user.deleted') : body,
  };
}

async function post(port, path, delivery, extraHeaders = {}) {
  const res = await fetch(`http://127.0.0.1:${port}${path}`, {
    method: 'POST',
    headers: { 'content-type': delivery.contentType ?? 'application/json', ...delivery.headers, ...extraHeaders },
    body: delivery.body,
  });
  await res.arrayBuffer();
  return res.status;
}

function start(language, command, port = 0, env = {}) {
  return spawnReceiver(language, command, {
    ...env,
    PORT: String(port),
    DATABASE_URL: `postgresql://webhook_example_app@${base.host}:${base.port}/${DB}`,
    EMAIL_URL: 'http://127.0.0.1:8025/send',
    PAYMENTS_URL: 'http://127.0.0.1:8026/charges',
    // A crashed order request's key is taken over a second later.
    IDEMPOTENCY_LEASE: '1 second',
    PUBLIC_URL,
  });
}

async function exercise(language, port, stats) {
  const providers = ['stripe', 'github', 'clerk', 'paypal', 'twilio', 'sendgrid'];
  const answers = [];
  const expect = (what, status, allowed) => {
    stats.deliveries++;
    answers.push(status);
    if (!allowed.includes(status)) {
      stats.wrong++;
      console.error(`${language}: ${what} answered ${status}, expected ${allowed.join(' or ')}`);
    }
  };
  for (const provider of providers) {
    for (let n = 0; n < EVENTS_PER_PROVIDER; n++) {
      const eventId = `${language}_${provider}_${n}_${crypto.randomBytes(4).toString('hex')}`;
      const delivery = await signed(provider, eventId);
      stats.events++;
      const copies = 5 + (n % 6); // 5 to 10 deliveries of each event
      let sent = 0;
      if (n % 3 === 0) {
        // The first attempt fails halfway: 500, and the failure is recorded.
        expect(`${eventId} with an injected failure`, await post(port, '/webhooks/' + provider, delivery, { 'x-test-fail': '1' }), [500]);
        sent++;
      }
      if (n % 2 === 0) {
        // Three at once: exactly one does the work; the others are told 409
        // (or, if it already finished, 200 as a duplicate).
        const burst = await Promise.all([0, 1, 2].map(() => post(port, '/webhooks/' + provider, delivery)));
        burst.forEach((s) => expect(`${eventId} in a burst`, s, [200, 409]));
        sent += 3;
      }
      while (sent < copies) {
        const status = await post(port, '/webhooks/' + provider, delivery);
        // 409 only while a burst's winner is still committing.
        expect(`${eventId} retry`, status, [200, 409]);
        if (status === 409) await new Promise((r) => setTimeout(r, 50));
        sent++;
      }
      // Forged: one byte of meaning changed under the same signature.
      expect(`${eventId} tampered`, await post(port, '/webhooks/' + provider, await signed(provider, eventId, { tamper: true })), [401]);
      stats.forged++;
      if (provider !== 'github' && provider !== 'twilio') {
        // Stale: genuinely signed an hour ago (GitHub and Twilio sign no timestamp).
        const stale = await signed(provider, eventId, { timestamp: Math.floor(Date.now() / 1000) - 3600 });
        expect(`${eventId} stale`, await post(port, '/webhooks/' + provider, stale), [401]);
        stats.forged++;
      }
    }
  }
  // Two-phase: claim, email through the stub, complete; redelivered twice.
  for (let n = 0; n < 3; n++) {
    const eventId = `${language}_2p_${n}_${crypto.randomBytes(4).toString('hex')}`;
    const delivery = await signed('stripe', eventId);
    stats.twoPhase.push({ provider: 'stripe', eventId });
    expect(`${eventId} two-phase`, await post(port, '/webhooks-2p/stripe', delivery), [200]);
    expect(`${eventId} two-phase retry`, await post(port, '/webhooks-2p/stripe', delivery), [200]);
    expect(`${eventId} two-phase retry`, await post(port, '/webhooks-2p/stripe', delivery), [200]);
  }
  return answers;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// A batch's leases taken over: with no other worker running, a worker
// whose leases last 2 seconds leases four events, the first of which
// hangs in its email for 6 seconds; once the leases ran out a second
// worker takes the four over and processes them. The first worker's
// completion of the batch is refused, and so is each event's when it
// redoes them one by one: every event's work commits once, the second
// worker's. Returns the events sent and what went wrong.
async function exerciseTakeover(language, port, stats, db) {
  const sent = [];
  const problems = [];
  const tag = crypto.randomBytes(4).toString('hex');
  for (let n = 0; n < 4; n++) {
    const eventId = `${language}_takeover_${n === 0 ? 'slow_' : ''}${n}_${tag}`;
    sent.push({ provider: 'github', eventId });
    stats.events++;
    stats.deliveries++;
    const status = await post(port, '/inbox/github', await signed('github', eventId));
    if (status !== 200) problems.push(`${eventId} answered ${status}`);
  }
  const ids = sent.map((e) => e.eventId);
  const first = start(`${language} worker`, workers[language], 0, { WORKER_LEASE: '2 seconds' });
  let second = null;
  try {
    for (let i = 0; ; i++) {
      const { rows: [{ held }] } = await db.query(
        "SELECT count(*)::int AS held FROM webhook.inbox WHERE event_id = ANY($1) AND status = 'leased'", [ids]);
      if (held === ids.length) break;
      if (i > 300) throw new Error(`${language}: the first worker never leased the batch`);
      await sleep(50);
    }
    await sleep(2500); // its leases run out while its first email hangs
    second = start(`${language} worker`, workers[language]);
    await processed(db, language, ids);
    await sleep(5000); // the first worker redoes the batch event by event, each refused
    if (first.exitCode !== null) problems.push(`the first worker died (${first.exitCode})`);
  } finally {
    first.kill('SIGTERM');
    second?.kill('SIGTERM');
  }
  const { rows: [{ taken }] } = await db.query(
    'SELECT count(DISTINCT event_id)::int AS taken FROM webhook.inbox_failures WHERE event_id = ANY($1) AND lease_expired',
    [ids]);
  if (taken !== ids.length) problems.push(`${taken} of ${ids.length} leases taken over`);
  return { sent, problems };
}

// The inbox: every genuine delivery answered 200 as soon as it is stored,
// then processed by the worker. Returns the event ids sent.
async function exerciseInbox(language, port, stats) {
  const expect = (what, status, allowed) => {
    stats.deliveries++;
    if (!allowed.includes(status)) {
      stats.wrong++;
      console.error(`${language}: ${what} answered ${status}, expected ${allowed.join(' or ')}`);
    }
  };
  const sent = [];
  for (const provider of ['github', 'stripe']) {
    for (let n = 0; n < INBOX_EVENTS; n++) {
      const eventId = `${language}_inbox_${provider}_${n}_${crypto.randomBytes(4).toString('hex')}`;
      const delivery = await signed(provider, eventId, { extra: { fail_first_attempt: n % 2 === 0 } });
      sent.push({ provider, eventId });
      stats.events++;
      const burst = await Promise.all([0, 1, 2].map(() => post(port, '/inbox/' + provider, delivery)));
      burst.forEach((s) => expect(`${eventId} in a burst`, s, [200]));
      for (let i = 0; i < 2; i++) expect(`${eventId} redelivered`, await post(port, '/inbox/' + provider, delivery), [200]);
      expect(`${eventId} tampered`, await post(port, '/inbox/' + provider, await signed(provider, eventId, { tamper: true })), [401]);
    }
  }
  return sent;
}

async function main() {
  let db = await setup();
  const { server, sends } = await emailStub();
  const payments = await paymentsStub();
  const rows = [];
  let failed = 0;
  let port = 8101;
  for (const [language, command] of Object.entries(receivers)) {
    const child = start(language, command, port);
    const stats = { deliveries: 0, events: 0, forged: 0, wrong: 0, twoPhase: [] };
    const { rows: [{ now: started }] } = await db.query('SELECT clock_timestamp() AS now');
    const orderStats = { deliveries: 0, events: 0, orders: 0 };
    let orderProblems = null;
    try {
      await waitHealthy(port);
      await exercise(language, port, stats);
      if (language === 'python') orderProblems = await exerciseOrders(port, db, payments, orderStats);
    } finally {
      child.kill('SIGTERM');
    }
    const { rows: [counts] } = await db.query(
      `SELECT count(*)::int AS side_effects,
              (count(*) - count(DISTINCT (provider, event_id)))::int AS duplicated,
              (SELECT count(*)::int FROM webhook.rejected_deliveries r WHERE r.created_at >= $2) AS rejected
         FROM orders WHERE language = $1`, [language, started]);
    // Each email was sent with the event's outbound key, the same on every attempt.
    const emails = [];
    for (const e of stats.twoPhase) emails.push(sends.get(await outboundKey(db, e.provider, e.eventId, 'email')) ?? 0);
    const problems = [];
    if (counts.side_effects !== stats.events) problems.push(`${counts.side_effects} side effects for ${stats.events} events`);
    if (counts.duplicated !== 0) problems.push(`${counts.duplicated} duplicated`);
    if (counts.rejected !== stats.forged) problems.push(`${counts.rejected} rejected of ${stats.forged} forged or stale`);
    if (stats.wrong !== 0) problems.push(`${stats.wrong} wrong answers`);
    if (!emails.every((n) => n === 1)) problems.push(`emails per two-phase event: ${emails.join(',')}`);
    if (problems.length) {
      failed++;
      console.error(`${language}: ${problems.join('; ')}`);
    }
    rows.push([language, stats.deliveries, stats.events, counts.side_effects, counts.rejected, stats.wrong]);
    if (orderProblems !== null) {
      if (orderProblems.length) {
        failed++;
        console.error(`${language} POST /orders: ${orderProblems.join('; ')}`);
      }
      rows.push([`${language} POST /orders`, orderStats.deliveries, orderStats.events, orderStats.orders, '—',
        orderProblems.length]);
    }

    // The inbox, with the language's worker running.
    const worker = start(`${language} worker`, workers[language]);
    const exited = new Promise((resolve) => worker.on('exit', (code, signal) => resolve(code ?? signal)));
    // A fresh receiver on a port of its own: the first may still be exiting.
    const inboxPort = port + 100;
    const receiver = start(language, command, inboxPort);
    const inbox = { deliveries: 0, events: 0, wrong: 0 };
    let sent = [];
    let takenOver = [];
    let takeoverProblems = [];
    try {
      await waitHealthy(inboxPort);
      sent = await exerciseInbox(language, inboxPort, inbox);
      await processed(db, language, sent.map((e) => e.eventId));
      // The database restarts under the running receiver and worker.
      restartDatabase();
      db.end().catch(() => {}); // closed by the restart
      db = await connectDb();
      sent.push(...await exerciseAfterRestart(language, inboxPort, inbox, db));
      await processed(db, language, sent.map((e) => e.eventId));
      // And while it is down.
      db.end().catch(() => {});
      sent.push(...await exerciseOutage(language, inboxPort, inbox));
      db = await connectDb();
      await processed(db, language, sent.map((e) => e.eventId));
      if (receiver.exitCode !== null || worker.exitCode !== null) {
        inbox.wrong++;
        console.error(`${language}: the ${receiver.exitCode !== null ? 'receiver' : 'worker'} died in the restart`);
      }
      // The worker stops (its exit is checked below); then a batch taken over.
      worker.kill('SIGTERM');
      await Promise.race([exited, sleep(10000)]);
      const takeover = await exerciseTakeover(language, inboxPort, inbox, db);
      sent.push(...takeover.sent);
      takenOver = takeover.sent.map((e) => e.eventId);
      takeoverProblems = takeover.problems;
    } finally {
      receiver.kill('SIGTERM');
      worker.kill('SIGTERM');
    }
    const exitCode = await Promise.race([exited, new Promise((r) => setTimeout(() => r('still running'), 10000))]);
    const { rows: [work] } = await db.query(
      `SELECT count(*)::int AS side_effects, count(DISTINCT (provider, event_id))::int AS distinct_events,
              (SELECT max(attempts)::int FROM webhook.inbox WHERE event_id = ANY($2)) AS max_attempts
         FROM orders WHERE language = $1 AND event_id = ANY($2)`,
      [`${language}-worker`, sent.map((e) => e.eventId)]);
    // One email per event, under its key; an event taken over was emailed
    // by both workers under the same key, which the email API sends once.
    const inboxEmails = [];
    for (const e of sent) {
      const n = sends.get(await outboundKey(db, e.provider, e.eventId, 'email/default')) ?? 0;
      inboxEmails.push(takenOver.includes(e.eventId) ? Math.min(n, 1) : n);
    }
    const inboxProblems = [...takeoverProblems];
    if (work.side_effects !== inbox.events || work.distinct_events !== inbox.events) {
      inboxProblems.push(`${work.side_effects} side effects (${work.distinct_events} distinct) for ${inbox.events} events`);
    }
    if (work.max_attempts !== 2) inboxProblems.push(`most attempts ${work.max_attempts}, expected 2 (a failure retried)`);
    if (!inboxEmails.every((n) => n === 1)) inboxProblems.push(`emails per inbox event: ${inboxEmails.join(',')}`);
    if (inbox.wrong !== 0) inboxProblems.push(`${inbox.wrong} wrong answers`);
    if (exitCode !== 0) inboxProblems.push(`worker exit on SIGTERM: ${exitCode}`);
    if (inboxProblems.length) {
      failed++;
      console.error(`${language} inbox: ${inboxProblems.join('; ')}`);
    }
    rows.push([`${language} inbox + worker`, inbox.deliveries, inbox.events, work.side_effects, '—', inbox.wrong]);
    port++;
  }
  server.close();
  payments.server.close();
  await db.end();

  console.log('| language | deliveries | events | side effects | rejected | wrong answers |');
  console.log('|---|---:|---:|---:|---:|---:|');
  for (const r of rows) console.log(`| ${r.join(' | ')} |`);
  console.log(`${rows.length - failed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((err) => {
  console.error(err);
  console.log('0 passed, 1 failed');
  process.exit(1);
});

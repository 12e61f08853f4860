// Every scheme of the catalog, end to end through the example
// receivers, on a database where only the portable edition can be
// installed: a "managed host" (.ci/managed-host) whose installing role is
// no superuser. For each way in (the plain script, and pg_tle where the
// host has it) and each receiver (Python, Node, Rust), a database of its
// own: the portable edition installed by that role, an application role
// that may only execute, one provider per scheme. Each scheme's
// genuine delivery (src/schemes/genuine.rs, signed for the URL the
// receivers are reached at) is answered 200 and makes one business row;
// the same delivery again is answered 200 as a duplicate and makes none;
// a tampered signature is refused with 401 and makes none. Prints a
// table; exits non-zero on any wrong answer or row.
//
// Needs PGHOST, PGPORT, PGUSER (the host's operator), MANAGED_ROLE,
// MANAGED_PGTLE ("yes", or why not), PORTABLE_DIR (portable/build's
// output), SCHEME_MATRIX (its matrix, made with SCHEME_MATRIX_URL set to
// PUBLIC_URL/webhooks/{scheme}) and RECEIVERS (JSON: {language: [cmd, ...]}).
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import pg from 'pg';
import { spawnReceiver, waitHealthy } from './receivers.mjs';

const PUBLIC_URL = 'https://hooks.example.com';
const APP = 'webhook_schemes_app';
const base = { host: process.env.PGHOST ?? '127.0.0.1', port: Number(process.env.PGPORT ?? 5432) };
const operator = process.env.PGUSER ?? 'postgres';
const owner = process.env.MANAGED_ROLE;
const receivers = JSON.parse(process.env.RECEIVERS);
const version = JSON.parse(readFileSync(new URL('../../Cargo.toml', import.meta.url), 'utf8')
  .match(/^version = (".*")$/m)[1]);
const scripts = {
  plain: `${process.env.PORTABLE_DIR}/pg_webhook_inbox-plain--${version}.sql`,
  pg_tle: `${process.env.PORTABLE_DIR}/pg_webhook_inbox-pgtle--${version}.sql`,
};

// The matrix's lines per scheme: the HMAC schemes and the public-key ones.
const matrix = readFileSync(process.env.SCHEME_MATRIX, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
const schemes = new Map();
for (const line of matrix) {
  const provider = line.scheme.split(';')[0];
  if (!schemes.has(provider)) schemes.set(provider, { provider, lines: {} });
  schemes.get(provider).lines[line.change] = line;
}

async function client(user, database) {
  const c = new pg.Client({ ...base, user, database });
  await c.connect();
  return c;
}

function psql(user, database, file) {
  execFileSync('psql', ['-X', '-q', '-v', 'ON_ERROR_STOP=1', '-o', '/dev/null', '-f', file],
    { env: { ...process.env, PGUSER: user, PGDATABASE: database }, stdio: ['ignore', 'ignore', 'inherit'] });
}

// A database owned by the installing role, the portable edition installed
// by it the given way, and the receivers' table and role.
async function prepare(way, database) {
  const admin = await client(operator, 'postgres');
  await admin.query(`DROP DATABASE IF EXISTS ${database} WITH (FORCE)`);
  await admin.query(`CREATE DATABASE ${database} OWNER ${owner}`);
  await admin.end();
  if (way === 'pg_tle') {
    // What the host's operator does once per database (RDS: a parameter
    // group; Supabase: already there).
    const host = await client(operator, database);
    await host.query('CREATE EXTENSION pg_tle');
    await host.end();
  }
  const db = await client(owner, database);
  psql(owner, database, scripts[way]);
  if (way === 'pg_tle') {
    // pgcrypto is trusted: the database's owner creates it (the plain
    // script does so itself).
    await db.query('CREATE EXTENSION IF NOT EXISTS pgcrypto');
    await db.query('CREATE EXTENSION pg_webhook_inbox');
  }
  await db.query(`
    CREATE TABLE orders (provider text, event_id text, event_type text, language text);
    DO $$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '${APP}') THEN CREATE ROLE ${APP} LOGIN; END IF;
    END $$;
    SELECT webhook_grant_app('${APP}');
    GRANT INSERT ON orders TO ${APP};`);
  const now = Math.floor(Date.now() / 1000);
  for (const { provider, lines } of schemes.values()) {
    const genuine = lines['the genuine delivery'];
    // The scheme's window, widened by the time since the matrix was signed.
    const tolerance = genuine.tolerance == null ? null : `${genuine.tolerance + (now - genuine.at) + 60} seconds`;
    await db.query(
      `SELECT webhook_register_provider($1, scheme => $2, secret => $3, tolerance => $4::interval,
                                        event_id_from => $5, event_type_from => $6)`,
      [provider, genuine.scheme, genuine.secret, tolerance, genuine.event_id_from, genuine.event_type_from]);
  }
  return db;
}

function start(language, command, port, database) {
  return spawnReceiver(language, command, {
    PORT: String(port), PUBLIC_URL, DATABASE_URL: `postgresql://${APP}@${base.host}:${base.port}/${database}`,
  });
}

async function post(port, provider, line) {
  const res = await fetch(`http://127.0.0.1:${port}/webhooks/${provider}`, {
    method: 'POST', headers: line.headers, body: Buffer.from(line.body, 'hex'),
  });
  await res.arrayBuffer();
  return res.status;
}

const ways = ['plain', ...(process.env.MANAGED_PGTLE === 'yes' ? ['pg_tle'] : [])];
if (ways.length === 1) console.log(`schemes: NOT CHECKED through pg_tle: ${process.env.MANAGED_PGTLE}`);
const table = [];
let wrong = 0;
let port = 18300;
for (const way of ways) {
  for (const [language, command] of Object.entries(receivers)) {
    const database = `pgwi_schemes_${way}_${language}`;
    const db = await prepare(way, database);
    port++;
    const child = start(language, command, port, database);
    let good = 0;
    try {
      await waitHealthy(port);
      for (const { provider, lines } of schemes.values()) {
        const rows = async () => (await db.query(
          'SELECT count(*)::int AS n FROM orders WHERE provider = $1', [provider])).rows[0].n;
        const answers = [
          ['genuine', await post(port, provider, lines['the genuine delivery']), 200, await rows()],
          ['again', await post(port, provider, lines['the same delivery again']), 200, await rows()],
          ['tampered', await post(port, provider, lines['a tampered signature']), 401, await rows()],
        ];
        const bad = answers.filter(([, status, expected, n]) => status !== expected || n !== 1);
        for (const [what, status, expected, n] of bad) {
          console.error(`${way} ${language} ${provider}: ${what} answered ${status} (expected ${expected}), ${n} rows (expected 1)`);
        }
        if (bad.length === 0) good++;
        wrong += bad.length;
      }
    } finally {
      child.kill('SIGTERM');
      await db.end();
    }
    table.push({ 'way in': way, receiver: language, schemes: schemes.size, 'end to end': good });
  }
}
console.table(table);
process.exit(wrong === 0 && table.length > 0 ? 0 : 1);

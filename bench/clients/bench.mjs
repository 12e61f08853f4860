// A handler through the TypeScript package against the same handler
// calling SQL by hand: deliveries a second, one after another on a pool of
// one, the two taking turns, each going first in every other round. Prints
// one JSON line.
// `node bench.mjs DELIVERIES ROUNDS`, with clients/typescript built.
import { createHmac, randomUUID } from "node:crypto";
import { createRequire } from "node:module";

const pkg = new URL("../../clients/typescript/", import.meta.url);
const pg = createRequire(new URL("package.json", pkg))("pg");
const { WebhookHandler, pgPool } = await import(new URL("dist/src/index.js", pkg));

const [n, rounds] = process.argv.slice(2).map(Number);
const INSERT = "INSERT INTO orders (provider, event_id, event_type, handler) VALUES ('stripe', $1, $2, 'bench')";
const RECEIVE =
  "SELECT id, claimed, status, http_status, reason, response, response_type, event_id, event_type " +
  "FROM webhook_receive($1, $2::jsonb, $3::bytea, url => $4, complete_on_commit => true)";

function signed(count) {
  return Array.from({ length: count }, () => {
    const body = Buffer.from(JSON.stringify({ id: `evt_${randomUUID()}`, object: "event", type: "invoice.paid", data: { object: { id: "in_1" } } }));
    const t = String(Math.floor(Date.now() / 1000));
    const v1 = createHmac("sha256", "whsec_clients_suite").update(`${t}.`).update(body).digest("hex");
    return [{ "content-type": "application/json", "stripe-signature": `t=${t},v1=${v1}` }, body];
  });
}

// What a careful handler writes without the package.
async function byHand(pool, headers, body) {
  const c = await pool.connect();
  try {
    await c.query("BEGIN");
    const [d] = (await c.query(RECEIVE, ["stripe", JSON.stringify(headers), body, null])).rows;
    let answer = { status: d.http_status, body: JSON.stringify({ status: d.status, reason: d.reason }) };
    if (d.response !== null) answer = { status: 200, body: d.response };
    else if (d.claimed) {
      await c.query("SAVEPOINT work");
      try {
        await c.query(INSERT, [d.event_id, d.event_type]);
        await c.query("RELEASE SAVEPOINT work");
      } catch (e) {
        await c.query("ROLLBACK TO SAVEPOINT work");
        await c.query("SELECT webhook_fail($1, $2)", [d.id, String(e)]);
        answer = { status: 500, body: '{"status":"failed"}' };
      }
    }
    await c.query("COMMIT");
    return answer;
  } catch (e) {
    await c.query("ROLLBACK").catch(() => undefined);
    throw e;
  } finally {
    c.release();
  }
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 1 });
const handler = new WebhookHandler(pgPool(pool));
const work = async (db, d) => {
  await db.query(INSERT, [d.eventId, d.eventType]);
};
const rates = { package: [], by_hand: [] };
for (let r = 0; r < rounds; r++) {
  for (const name of r % 2 === 0 ? ["package", "by_hand"] : ["by_hand", "package"]) {
    const batch = signed(n);
    const started = performance.now();
    for (const [headers, body] of batch) {
      const a = name === "package" ? await handler.handle("stripe", headers, body, work) : await byHand(pool, headers, body);
      if (a.status !== 200) throw new Error(`answered ${a.status}: ${a.body}`);
    }
    rates[name].push(n / ((performance.now() - started) / 1000));
  }
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const [p, h] = [median(rates.package), median(rates.by_hand)];
console.log(JSON.stringify({ language: "typescript (node-postgres WebhookHandler)", package: Math.round(p), by_hand: Math.round(h), ratio: Number((p / h).toFixed(3)) }));
await pool.end();

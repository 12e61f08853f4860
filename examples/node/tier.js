// The slot a delivery belongs to in an intake tier (docs/scale-out.md):
// the first four bytes of SHA-256(provider, newline, route key) as a
// big-endian integer, masked to the number of slots (a power of two), as
// webhook_route_slot computes it in SQL and PL/Proxy's RUN ON masks it.
//
//   node tier.js 8 < keys.tsv     (lines: provider TAB route_key; prints slots)
import { createHash } from 'node:crypto';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export function routeHash(provider, routeKey) {
  return createHash('sha256').update(`${provider}\n${routeKey}`, 'utf8').digest().readInt32BE(0);
}

export function routeSlot(provider, routeKey, slots) {
  if (!(slots >= 1) || (slots & (slots - 1)) !== 0) throw new RangeError('slots must be a power of two');
  return routeHash(provider, routeKey) & (slots - 1);
}

// The slot a delivery or lease id made in a slot's database carries.
export function slotOfId(id) {
  return parseInt(id.replaceAll('-', '').slice(-4), 16);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const slots = Number(process.argv[2]);
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const tab = line.indexOf('\t');
    console.log(routeSlot(line.slice(0, tab), line.slice(tab + 1), slots));
  }
}

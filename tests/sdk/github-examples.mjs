// Every payload of @octokit/webhooks-examples (the examples GitHub's
// community keeps for every event, on github.com and on each GitHub
// Enterprise Server), signed as GitHub signs a delivery, one JSON object a
// line for tests/provider_sdks.rs: {event, delivery, headers, body, secret}.
// A payload listed under several servers is sent once.
import crypto from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { verify } from '@octokit/webhooks-methods';

const root = dirname(createRequire(import.meta.url).resolve('@octokit/webhooks-examples/package.json'));
const secret = crypto.randomBytes(24).toString('base64url');
const seen = new Set();
let servers = 0;
for (const server of readdirSync(root).filter((d) => d === 'api.github.com' || d.startsWith('ghes-')).sort()) {
  servers++;
  for (const event of JSON.parse(readFileSync(join(root, server, 'index.json'), 'utf8'))) {
    for (const example of event.examples) {
      const body = JSON.stringify(example);
      if (seen.has(body)) continue;
      seen.add(body);
      const signature = 'sha256=' + crypto.createHmac('sha256', secret).update(body).digest('hex');
      if (!(await verify(secret, body, signature))) throw new Error('octokit refused its own example');
      const delivery = crypto.randomUUID();
      console.log(JSON.stringify({ event: event.name, delivery, body, secret,
        headers: { 'X-GitHub-Event': event.name, 'X-GitHub-Delivery': delivery, 'X-Hub-Signature-256': signature,
                   'X-GitHub-Hook-ID': '292430182', 'User-Agent': 'GitHub-Hookshot/044aadd', 'Content-Type': 'application/json' } }));
    }
  }
}
if (servers < 2 || seen.size < 300) throw new Error(`only ${seen.size} examples from ${servers} servers`);

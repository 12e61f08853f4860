// Sign deliveries with the providers' official Node SDKs and print them as
// JSON lines for tests/provider_sdks.rs. Each SDK first checks its own
// output, so a fixture is something the provider's code itself accepts.
import crypto from 'node:crypto';
import Stripe from 'stripe';
import { sign as githubSign, verify as githubVerify } from '@octokit/webhooks-methods';
import { Paddle } from '@paddle/paddle-node-sdk';

const bodies = [
  '{"id":"evt_1","object":"event","type":"invoice.paid","data":{"object":{"amount_paid":1000}}}',
  '{\n  "id": "evt_2",\n  "type": "customer.created",  "name": "Zoë ✓ 東京"\n}',
];
const randomSecret = (prefix) => prefix + crypto.randomBytes(24).toString('base64url');
const emit = (fixture) => console.log(JSON.stringify(fixture));

const stripe = new Stripe('sk_test_not_used_offline');
for (const body of bodies) {
  const secret = randomSecret('whsec_');
  const header = stripe.webhooks.generateTestHeaderString({ payload: body, secret });
  stripe.webhooks.constructEvent(body, header, secret); // throws unless valid
  emit({ sdk: 'stripe (Node) 23.1.0', scheme: 'stripe', headers: { 'Stripe-Signature': header }, body, secret, timestamped: true });
}

for (const body of bodies) {
  const secret = randomSecret('');
  const signature = await githubSign(secret, body);
  if (!(await githubVerify(secret, body, signature))) throw new Error('octokit rejected its own signature');
  emit({ sdk: '@octokit/webhooks-methods 6.0.0', scheme: 'github', headers: { 'X-Hub-Signature-256': signature }, body, secret, timestamped: false });
}

// Paddle's SDK verifies but does not sign: sign as Paddle documents it,
// and require the SDK to accept the result before the extension sees it.
const paddle = new Paddle('pdl_sdbx_apikey_not_used_offline');
for (const body of bodies) {
  const secret = randomSecret('pdl_ntfset_');
  const ts = Math.floor(Date.now() / 1000);
  const h1 = crypto.createHmac('sha256', secret).update(`${ts}:${body}`).digest('hex');
  const header = `ts=${ts};h1=${h1}`;
  if (!(await paddle.webhooks.isSignatureValid(body, secret, header))) throw new Error('Paddle SDK rejected the delivery');
  emit({ sdk: '@paddle/paddle-node-sdk 3.10.0 (verifier)', scheme: 'paddle', headers: { 'Paddle-Signature': header }, body, secret, timestamped: true });
}

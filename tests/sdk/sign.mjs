// Sign deliveries with the providers' official Node SDKs and print them as
// JSON lines for tests/provider_sdks.rs. Each SDK first checks its own
// output, so a fixture is something the provider's code itself accepts.
import crypto from 'node:crypto';
import Stripe from 'stripe';
import { sign as githubSign, verify as githubVerify } from '@octokit/webhooks-methods';
import { Paddle } from '@paddle/paddle-node-sdk';
import twilio from 'twilio';
import sendgrid from '@sendgrid/eventwebhook';
import { verifyKey as discordVerifyKey } from 'discord-interactions';
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import zlib from 'node:zlib';

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

// Twilio's helper library signs (getExpectedTwilioSignature) and checks
// (validateRequest, validateRequestWithBody) what its servers send: form
// callbacks, and JSON bodies with their SHA-256 in the URL.
{
  const token = crypto.randomBytes(16).toString('hex');
  const url = 'https://hooks.example.com/twilio/status?tenant=7';
  const params = { MessageSid: 'SM' + crypto.randomBytes(16).toString('hex'), MessageStatus: 'delivered', To: '+15551234567', Body: 'Zoë ✓ 東京 & more' };
  const body = new URLSearchParams(params).toString();
  const signature = twilio.getExpectedTwilioSignature(token, url, params);
  if (!twilio.validateRequest(token, signature, url, params)) throw new Error('twilio rejected its own signature');
  emit({ sdk: 'twilio (Node) 6.3.1', scheme: 'twilio', headers: { 'X-Twilio-Signature': signature }, body, url, secret: token, timestamped: false });

  const json = '{"event":"delivered","data":{"sid":"SM1"}}';
  const digest = crypto.createHash('sha256').update(json).digest('hex');
  const jsonUrl = `https://hooks.example.com/twilio/events?bodySHA256=${digest}`;
  const jsonSignature = twilio.getExpectedTwilioSignature(token, jsonUrl, {});
  if (!twilio.validateRequestWithBody(token, jsonSignature, jsonUrl, json)) throw new Error('twilio rejected its own JSON signature');
  emit({ sdk: 'twilio (Node) 6.3.1, JSON body', scheme: 'twilio', headers: { 'X-Twilio-Signature': jsonSignature }, body: json, url: jsonUrl, secret: token, timestamped: false });
}

// SendGrid signs with a private key only it has: sign as SendGrid
// documents it with a key generated here, and require its helper to
// accept the result.
{
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const other = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).publicKey;
  const der = (key) => key.export({ type: 'spki', format: 'der' }).toString('base64');
  const body = '[{"email":"a@example.com","event":"delivered","sg_event_id":"sg-' + crypto.randomUUID() + '","timestamp":1700000000}]';
  const ts = String(Math.floor(Date.now() / 1000));
  const signature = crypto.sign('sha256', Buffer.from(ts + body), privateKey).toString('base64');
  const helper = new sendgrid.EventWebhook();
  if (!helper.verifySignature(helper.convertPublicKeyToECDSA(der(publicKey)), body, signature, ts)) throw new Error('@sendgrid/eventwebhook rejected the delivery');
  emit({ sdk: '@sendgrid/eventwebhook 8.0.0 (verifier)', scheme: 'sendgrid', headers: { 'X-Twilio-Email-Event-Webhook-Signature': signature, 'X-Twilio-Email-Event-Webhook-Timestamp': ts }, body, secret: der(publicKey), wrong_secret: der(other), timestamped: true });
}

// Discord: Ed25519 with the application's key, checked by
// discord-interactions' verifyKey.
{
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
  const raw = (key) => key.export({ type: 'spki', format: 'der' }).subarray(-32).toString('hex');
  const other = raw(crypto.generateKeyPairSync('ed25519').publicKey);
  const body = '{"id":"' + crypto.randomInt(1e9) + '","type":2,"data":{"name":"credits"}}';
  const ts = String(Math.floor(Date.now() / 1000));
  const signature = crypto.sign(null, Buffer.from(ts + body), privateKey).toString('hex');
  if (!(await discordVerifyKey(body, signature, ts, raw(publicKey)))) throw new Error('discord-interactions rejected the delivery');
  emit({ sdk: 'discord-interactions 4.4.0 (verifier)', scheme: 'discord', headers: { 'X-Signature-Ed25519': signature, 'X-Signature-Timestamp': ts }, body, secret: raw(publicKey), wrong_secret: other, timestamped: true });
}

// Standard Webhooks v1a: Ed25519 over id.timestamp.body, keys whpk_ +
// base64 of the raw key, with Node's crypto.
{
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
  const whpk = (key) => 'whpk_' + key.export({ type: 'spki', format: 'der' }).subarray(-32).toString('base64');
  const other = whpk(crypto.generateKeyPairSync('ed25519').publicKey);
  const body = bodies[0];
  const id = 'msg_' + crypto.randomBytes(8).toString('hex');
  const ts = String(Math.floor(Date.now() / 1000));
  const signature = crypto.sign(null, Buffer.from(`${id}.${ts}.${body}`), privateKey).toString('base64');
  if (!crypto.verify(null, Buffer.from(`${id}.${ts}.${body}`), publicKey, Buffer.from(signature, 'base64'))) throw new Error('Ed25519 round trip');
  emit({ sdk: 'Node crypto Ed25519 (v1a)', scheme: 'standard', headers: { 'webhook-id': id, 'webhook-timestamp': ts, 'webhook-signature': `v1a,${signature}` }, body, secret: whpk(publicKey), wrong_secret: other, timestamped: true });
}

// PayPal: RSA-SHA256 over id|time|webhook id|CRC32(body), with a
// certificate made by OpenSSL (PayPal's own is fetched from its cert URL
// by the DBA, never by the database).
{
  const dir = mkdtempSync(join(tmpdir(), 'paypal-'));
  const certificate = (name) => {
    execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', join(dir, `${name}.key`), '-out', join(dir, `${name}.pem`), '-subj', `/CN=${name}`, '-days', '2'], { stdio: 'ignore' });
    return { key: readFileSync(join(dir, `${name}.key`), 'utf8'), cert: readFileSync(join(dir, `${name}.pem`), 'utf8') };
  };
  const signer = certificate('paypal-sdk-fixture');
  const other = certificate('paypal-other');
  const certUrl = 'https://api.paypal.com/v1/notifications/certs/CERT-' + crypto.randomBytes(6).toString('hex');
  const webhookId = 'WH' + crypto.randomBytes(8).toString('hex').toUpperCase();
  const body = '{"id":"WH-' + crypto.randomUUID() + '","event_type":"PAYMENT.CAPTURE.COMPLETED","resource":{"id":"5O190127TN364715T","amount":{"value":"10.00"}}}';
  const id = crypto.randomUUID();
  const time = new Date().toISOString().replace(/\.\d+Z$/, 'Z');
  const message = `${id}|${time}|${webhookId}|${zlib.crc32(body)}`;
  const signature = crypto.sign('sha256', Buffer.from(message), signer.key).toString('base64');
  if (!crypto.verify('sha256', Buffer.from(message), new crypto.X509Certificate(signer.cert).publicKey, Buffer.from(signature, 'base64'))) throw new Error('PayPal round trip');
  const headers = { 'PAYPAL-TRANSMISSION-ID': id, 'PAYPAL-TRANSMISSION-TIME': time, 'PAYPAL-TRANSMISSION-SIG': signature, 'PAYPAL-CERT-URL': certUrl, 'PAYPAL-AUTH-ALGO': 'SHA256withRSA' };
  const later = new Date(Date.parse(time) + 1000).toISOString().replace(/\.\d+Z$/, 'Z');
  emit({ sdk: 'Node crypto RSA-SHA256 + OpenSSL certificate', scheme: `paypal;webhook_id=${webhookId}`, headers, body,
         secret: `${certUrl}\n${signer.cert}`, wrong_secret: `${certUrl}\n${other.cert}`,
         shifted_headers: { ...headers, 'PAYPAL-TRANSMISSION-TIME': later },
         unknown_key_headers: { ...headers, 'PAYPAL-CERT-URL': certUrl + '-other' }, timestamped: false });
}

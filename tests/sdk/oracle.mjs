// The providers' own verifiers as the judge. For every scheme whose
// provider publishes a verifier on npm, a genuine delivery and the changes
// a sender (or a proxy on the way) can make to it — body bytes, headers,
// timestamps, several signatures, other secrets and secret forms — each
// judged by the provider's library here. tests/provider_sdks.rs gives the
// same cases to webhook_verify and fails wherever the extension accepts
// what a library refuses, or refuses what it accepts without saying why in
// docs/providers.md. One JSON object a line:
//
//   {case, scheme, judge, verdict, headers, body, secret, url, at}
//
// `case` is `<scheme>/<change>`, the name docs/providers.md uses; `at` is
// when it was judged, so the extension's window can be shifted to then.
import crypto from 'node:crypto';
import Stripe from 'stripe';
import { verify as githubVerify } from '@octokit/webhooks-methods';
import { Paddle } from '@paddle/paddle-node-sdk';
import twilio from 'twilio';
import { Webhook as SvixWebhook } from 'svix';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { WebhooksHelper as Square } from 'square';
import { LinearWebhookClient } from '@linear/sdk/webhooks';
import sendgrid from '@sendgrid/eventwebhook';
import { verifyKey as discordVerifyKey } from 'discord-interactions';
import Razorpay from 'razorpay';
import { WorkOS } from '@workos-inc/node';
import adyen from '@adyen/api-library';
import { validateEvent as polarValidateEvent, WebhookVerificationError as PolarVerificationError } from '@polar-sh/sdk/webhooks';

const now = () => Math.floor(Date.now() / 1000);
const hmac = (algorithm, key, text) => crypto.createHmac(algorithm, key).update(text).digest();
const hex = (bytes) => bytes.toString('hex');
const b64 = (bytes) => bytes.toString('base64');
const secret = (prefix = '') => prefix + crypto.randomBytes(24).toString('base64url');
const flip = (text) => text.slice(0, -2) + (text.at(-2) === 'a' ? 'b' : 'a') + text.at(-1);
const upper = (text) => text.replace(/[a-f]/g, (c) => c.toUpperCase());
const lines = [];

// One scheme: its judge, how it signs, and its cases. `sign({...})` makes a
// delivery {headers, body, secret, url}; `judge(delivery)` is the
// library's verdict (true: accepted).
async function scheme(name, judgeName, judge, cases) {
  for (const [change, delivery] of Object.entries(cases)) {
    let verdict;
    try {
      verdict = (await judge(delivery)) === true;
    } catch {
      verdict = false;
    }
    lines.push({ case: `${name}/${change}`, scheme: name, judge: judgeName, verdict,
                 headers: delivery.headers, body: delivery.body, secret: delivery.secret,
                 url: delivery.url ?? null, at: now() });
  }
}

const EVENT = '{"id":"evt_1","object":"event","type":"invoice.paid","created":1700000000,"data":{"object":{"id":"in_1"}}}';

// Stripe: t=…,v1=… over `<t>.<body>`, the whsec_ string as the key.
{
  const key = secret('whsec_');
  const stripe = new Stripe('sk_test_not_used_offline');
  const sig = (t, body = EVENT, k = key) => hex(hmac('sha256', k, `${t}.${body}`));
  const d = (header, body = EVENT, k = key) => ({ headers: { 'Stripe-Signature': header }, body, secret: k });
  const t = now();
  const other = secret('whsec_');
  await scheme('stripe', 'stripe (Node) 23.1.0', (x) => !!stripe.webhooks.constructEvent(x.body, x.headers['Stripe-Signature'], x.secret, 300), {
    'genuine': d(`t=${t},v1=${sig(t)}`),
    'as the SDK signs it': d(stripe.webhooks.generateTestHeaderString({ payload: EVENT, secret: key })),
    'body changed': d(`t=${t},v1=${sig(t)}`, EVENT.replace('in_1', 'in_2')),
    'body with a trailing newline': d(`t=${t},v1=${sig(t)}`, EVENT + '\n'),
    'another secret': d(`t=${t},v1=${sig(t)}`, EVENT, other),
    'the secret without whsec_': d(`t=${t},v1=${sig(t, EVENT, key.slice(6))}`, EVENT, key.slice(6)),
    'two v1, the second genuine': d(`t=${t},v1=${sig(t, EVENT, other)},v1=${sig(t)}`),
    'v0 only': d(`t=${t},v0=${sig(t)}`),
    'upper-case hex': d(`t=${t},v1=${upper(sig(t))}`),
    'a space after each comma': d(`t=${t}, v1=${sig(t)}`),
    'the timestamp changed': d(`t=${t + 1},v1=${sig(t)}`),
    'two t, the first signed': d(`t=${t},t=${t + 7},v1=${sig(t)}`),
    'two t, the last signed': d(`t=${t - 7},t=${t},v1=${sig(t)}`),
    'no timestamp': d(`v1=${sig(t)}`),
    'signed ten minutes ago': d(`t=${t - 600},v1=${sig(t - 600)}`),
    'signed a minute ago': d(`t=${t - 60},v1=${sig(t - 60)}`),
    'signed an hour ahead': d(`t=${t + 3600},v1=${sig(t + 3600)}`),
    'a timestamp in milliseconds': d(`t=${t * 1000},v1=${sig(t * 1000)}`),
    'no signature header': { headers: {}, body: EVENT, secret: key },
  });
}

// GitHub: X-Hub-Signature-256 = sha256=<hex> over the body, judged by
// @octokit/webhooks-methods (which GitHub's own @octokit/webhooks uses).
{
  const key = secret();
  const body = '{"action":"opened","number":1,"repository":{"full_name":"octo/repo"}}';
  const s256 = (b = body, k = key) => 'sha256=' + hex(hmac('sha256', k, b));
  const s1 = (b = body) => 'sha1=' + hex(hmac('sha1', key, b));
  const d = (headers, b = body, k = key) => ({ headers: { 'X-GitHub-Delivery': crypto.randomUUID(), 'X-GitHub-Event': 'pull_request', ...headers }, body: b, secret: k });
  await scheme('github', '@octokit/webhooks-methods 6.0.0', (x) => githubVerify(x.secret, x.body, x.headers['X-Hub-Signature-256'] ?? ''), {
    'genuine': d({ 'X-Hub-Signature-256': s256() }),
    'genuine with the legacy SHA-1 beside it': d({ 'X-Hub-Signature-256': s256(), 'X-Hub-Signature': s1() }),
    'the legacy SHA-1 alone': d({ 'X-Hub-Signature': s1() }),
    'a forged SHA-1 beside the genuine SHA-256': d({ 'X-Hub-Signature-256': s256(), 'X-Hub-Signature': 'sha1=' + '0'.repeat(40) }),
    'body changed': d({ 'X-Hub-Signature-256': s256() }, body.replace('1', '2')),
    'another secret': d({ 'X-Hub-Signature-256': s256() }, body, secret()),
    'upper-case hex': d({ 'X-Hub-Signature-256': 'sha256=' + upper(s256().slice(7)) }),
    'upper-case prefix': d({ 'X-Hub-Signature-256': 'SHA256=' + s256().slice(7) }),
    'no prefix': d({ 'X-Hub-Signature-256': s256().slice(7) }),
    'truncated': d({ 'X-Hub-Signature-256': s256().slice(0, -2) }),
  });
}

// Standard Webhooks: `<id>.<ts>.<body>`, v1 = base64 HMAC-SHA256 keyed with
// base64 of whsec_…; the webhook-* headers, judged by the standardwebhooks
// library, and Svix's svix-* family, judged by Svix's.
{
  const raw = crypto.randomBytes(24);
  const key = 'whsec_' + b64(raw);
  const body = '{"type":"user.created","data":{"id":"user_29w83sxmDNGwOuEthce5gg56FcC"}}';
  const sig = (id, ts, b = body, k = raw) => 'v1,' + b64(hmac('sha256', k, `${id}.${ts}.${b}`));
  const id = 'msg_' + crypto.randomBytes(8).toString('hex');
  const t = now();
  const family = (prefix, i = id, ts = t, s = sig(id, t)) => ({ [`${prefix}-id`]: i, [`${prefix}-timestamp`]: String(ts), [`${prefix}-signature`]: s });
  const d = (headers, b = body, k = key) => ({ headers, body: b, secret: k });
  const standard = (x) => { new StandardWebhook(x.secret).verify(x.body, Object.fromEntries(Object.entries(x.headers).map(([k, v]) => [k.toLowerCase(), v]))); return true; };
  // verify throws unless the delivery is genuine (and answers undefined for
  // some bodies): not throwing is accepting.
  const svix = (x) => { new SvixWebhook(x.secret).verify(x.body, Object.fromEntries(Object.entries(x.headers).map(([k, v]) => [k.toLowerCase(), v]))); return true; };
  const common = {
    'genuine': d(family('webhook')),
    'body changed': d(family('webhook'), body.replace('created', 'deleted')),
    'another secret': d(family('webhook'), body, 'whsec_' + b64(crypto.randomBytes(24))),
    'the secret without whsec_': d(family('webhook'), body, b64(raw)),
    'two signatures, the second genuine': d(family('webhook', id, t, `${sig(id, t, body, crypto.randomBytes(24))} ${sig(id, t)}`)),
    'an unknown version beside the genuine one': d(family('webhook', id, t, `v2,abc ${sig(id, t)}`)),
    'the id changed': d(family('webhook', id + 'x', t, sig(id, t))),
    'signed ten minutes ago': d(family('webhook', id, t - 600, sig(id, t - 600))),
    'signed ten minutes ahead': d(family('webhook', id, t + 600, sig(id, t + 600))),
    'signed a minute ago': d(family('webhook', id, t - 60, sig(id, t - 60))),
    'both families, the same': d({ ...family('webhook'), ...family('svix') }),
    'webhook-* genuine, svix-* forged': d({ ...family('webhook'), ...family('svix', 'msg_forged', t, 'v1,' + b64(crypto.randomBytes(32))) }),
    'svix-* genuine, webhook-* forged': d({ ...family('svix'), ...family('webhook', 'msg_forged', t, 'v1,' + b64(crypto.randomBytes(32))) }),
  };
  await scheme('standard', 'standardwebhooks (Node) 1.1.1', standard, common);
  await scheme('standard', 'svix (Node) 2.5.0', svix, {
    ...common,
    'svix-* only': d(family('svix')),
    'svix-* only, body changed': d(family('svix'), body + ' '),
  });
}

// Slack: v0=<hex> over `v0:<ts>:<body>`; events are JSON, slash commands a
// form, interactivity a form with the interaction in `payload`. Judged by
// the signature check Slack's Bolt uses (slack_sdk's, in tests/sdk/oracle.py).

// Paddle: ts=…;h1=… over `<ts>:<body>`, judged by Paddle's Node SDK.
{
  const key = secret('pdl_ntfset_');
  const body = '{"event_id":"evt_01h","event_type":"subscription.created","occurred_at":"2023-11-14T22:13:20Z","data":{"id":"sub_1"}}';
  const sig = (ts, k = key, b = body) => hex(hmac('sha256', k, `${ts}:${b}`));
  const d = (header, b = body, k = key) => ({ headers: { 'Paddle-Signature': header }, body: b, secret: k });
  const paddle = new Paddle('pdl_sdbx_apikey_not_used_offline');
  const t = now();
  await scheme('paddle', '@paddle/paddle-node-sdk 3.10.0', (x) => paddle.webhooks.isSignatureValid(x.body, x.secret, x.headers['Paddle-Signature']), {
    'genuine': d(`ts=${t};h1=${sig(t)}`),
    'body changed': d(`ts=${t};h1=${sig(t)}`, body.replace('sub_1', 'sub_2')),
    'another secret': d(`ts=${t};h1=${sig(t)}`, body, secret('pdl_ntfset_')),
    'two h1, the last genuine': d(`ts=${t};h1=${sig(t, secret())};h1=${sig(t)}`),
    'two h1, the first genuine': d(`ts=${t};h1=${sig(t)};h1=${sig(t, secret())}`),
    'upper-case hex': d(`ts=${t};h1=${upper(sig(t))}`),
    'a space after the semicolon': d(`ts=${t}; h1=${sig(t)}`),
    'two ts, the last signed': d(`ts=${t - 9};ts=${t};h1=${sig(t)}`),
    'signed ten minutes ago': d(`ts=${t - 600};h1=${sig(t - 600)}`),
    'signed a minute ago': d(`ts=${t - 60};h1=${sig(t - 60)}`),
    'signed an hour ahead': d(`ts=${t + 3600};h1=${sig(t + 3600)}`),
  });
}

// Twilio: base64 HMAC-SHA1 over the URL and the sorted form fields, or the
// URL alone carrying the body's SHA-256; judged by Twilio's helper library.
{
  const token = crypto.randomBytes(16).toString('hex');
  const url = 'https://hooks.example.com/twilio/status?tenant=7';
  const params = { MessageSid: 'SM' + crypto.randomBytes(16).toString('hex'), MessageStatus: 'delivered', To: '+15551234567', Body: 'Zoë ✓ 東京 & more' };
  const form = new URLSearchParams(params).toString();
  const d = (body, u, sig, k = token) => ({ headers: { 'X-Twilio-Signature': sig }, body, url: u, secret: k });
  const json = '{"event":"delivered","data":{"sid":"SM1"}}';
  const jsonUrl = `https://hooks.example.com/twilio/events?bodySHA256=${crypto.createHash('sha256').update(json).digest('hex')}`;
  const judge = (x) => {
    if (x.url.includes('bodySHA256=')) return twilio.validateRequestWithBody(x.secret, x.headers['X-Twilio-Signature'], x.url, x.body);
    // Under a Webhook Setting, the algorithm its settings header names.
    const algorithm = twilio.getSignatureAlgorithm(x.headers[twilio.SIGNATURE_SETTINGS_HEADER]);
    return twilio.validateRequest(x.secret, x.headers['X-Twilio-Signature'], x.url, Object.fromEntries(new URLSearchParams(x.body)), algorithm);
  };
  const sign = (u, p = params) => twilio.getExpectedTwilioSignature(token, u, p);
  // A Webhook Setting's shared key signs instead of the auth token, with
  // the hash its settings header names.
  const shared = crypto.randomBytes(24).toString('base64url');
  const setting = (algorithm) => `key=KS${crypto.randomBytes(16).toString('hex')},algorithm=${algorithm}`;
  const s = (settings, algorithm, k = shared) => ({
    headers: { 'X-Twilio-Signature': twilio.getExpectedTwilioSignature(k, url, params, algorithm),
               [twilio.SIGNATURE_SETTINGS_HEADER]: settings },
    body: form, url, secret: shared });
  await scheme('twilio', 'twilio (Node) 6.3.1', judge, {
    'genuine': d(form, url, sign(url)),
    'a field changed': d(form.replace('delivered', 'failed'), url, sign(url)),
    'another URL': d(form, url.replace('tenant=7', 'tenant=8'), sign(url)),
    'signed with the default port': d(form, url, sign('https://hooks.example.com:443/twilio/status?tenant=7')),
    'another token': d(form, url, sign(url), crypto.randomBytes(16).toString('hex')),
    'the fields in another order': d(new URLSearchParams(Object.entries(params).reverse()).toString(), url, sign(url)),
    'a JSON body': d(json, jsonUrl, sign(jsonUrl, {})),
    'a JSON body changed': d(json.replace('SM1', 'SM2'), jsonUrl, sign(jsonUrl, {})),
    'a shared key, HMAC-SHA256': s(setting('HMAC_SHA256'), 'HMAC_SHA256'),
    'a shared key, HMAC-SHA1': s(setting('HMAC_SHA1'), 'HMAC_SHA1'),
    'a shared key, the algorithm in lower case': s(setting('hmac_sha256'), 'HMAC_SHA256'),
    'a shared key, spaces around the algorithm': s('key=KS1 , algorithm = HMAC_SHA256 ', 'HMAC_SHA256'),
    'a shared key, the settings without an algorithm': s('key=KS1', 'HMAC_SHA1'),
    'a shared key, the first algorithm of two': s('algorithm=HMAC_SHA256,algorithm=HMAC_SHA1', 'HMAC_SHA256'),
    'a shared key, SHA-256 named, SHA-1 signed': s(setting('HMAC_SHA256'), 'HMAC_SHA1'),
    'a shared key, SHA-1 named, SHA-256 signed': s(setting('HMAC_SHA1'), 'HMAC_SHA256'),
    'a shared key, an algorithm Twilio does not have': s(setting('HMAC_SHA512'), 'HMAC_SHA256'),
    'a shared key, signed with another key': s(setting('HMAC_SHA256'), 'HMAC_SHA256', crypto.randomBytes(24).toString('base64url')),
  });
}

// Square: base64 HMAC-SHA256 over the notification URL and the body.
{
  const key = secret();
  const url = 'https://hooks.example.com/square';
  const body = '{"merchant_id":"6SSW7HV8K2ST5","type":"payment.updated","event_id":"5f1c7e9b-1b2a","created_at":"2023-11-14T22:13:20Z","data":{"id":"sq_1"}}';
  const sig = (u = url, b = body, k = key) => b64(hmac('sha256', k, u + b));
  const d = (s, b = body, u = url, k = key) => ({ headers: { 'x-square-hmacsha256-signature': s }, body: b, url: u, secret: k });
  await scheme('square', 'square (Node) 46.0.0', (x) => Square.verifySignature({ requestBody: x.body, signatureHeader: x.headers['x-square-hmacsha256-signature'], signatureKey: x.secret, notificationUrl: x.url }), {
    'genuine': d(sig()),
    'body changed': d(sig(), body.replace('sq_1', 'sq_2')),
    'another URL': d(sig(), body, url + '/other'),
    'another secret': d(sig(), body, url, secret()),
  });
}

// Razorpay: hex HMAC-SHA256 of the body, keyed with the webhook's secret,
// in X-Razorpay-Signature; the event id in X-Razorpay-Event-Id. Judged by
// Razorpay's Node SDK (validateWebhookSignature).
{
  const key = secret();
  const body = '{"entity":"event","account_id":"acc_1","event":"payment.captured","contains":["payment"],"payload":{"payment":{"entity":{"id":"pay_1"}}},"created_at":1700000000}';
  const sig = (b = body, k = key) => hex(hmac('sha256', k, b));
  const d = (headers, b = body, k = key) => ({ headers: { 'X-Razorpay-Event-Id': 'evt_' + crypto.randomBytes(7).toString('hex'), ...headers }, body: b, secret: k });
  await scheme('razorpay', 'razorpay (Node) 2.9.8', (x) => Razorpay.validateWebhookSignature(x.body, x.headers['X-Razorpay-Signature'], x.secret), {
    'genuine': d({ 'X-Razorpay-Signature': sig() }),
    'body changed': d({ 'X-Razorpay-Signature': sig() }, body.replace('pay_1', 'pay_2')),
    'body with a trailing newline': d({ 'X-Razorpay-Signature': sig() }, body + '\n'),
    'another secret': d({ 'X-Razorpay-Signature': sig() }, body, secret()),
    'upper-case hex': d({ 'X-Razorpay-Signature': upper(sig()) }),
    'truncated': d({ 'X-Razorpay-Signature': sig().slice(0, -2) }),
    'behind a sha256= prefix': d({ 'X-Razorpay-Signature': 'sha256=' + sig() }),
    'no signature header': d({}),
  });
}

// WorkOS: `t=<milliseconds>, v1=<hex>` over `<t>.<body>`, the secret as
// the key; judged by @workos-inc/node's webhooks.verifyHeader (the raw body
// as a string: given an object, it signs JSON.stringify of it instead).
{
  const key = secret();
  const body = '{"id":"event_01HZ","event":"user.created","data":{"id":"user_01","object":"user"},"created_at":"2026-01-01T00:00:00.000Z"}';
  const sig = (t, b = body, k = key) => hex(hmac('sha256', k, `${t}.${b}`));
  const d = (header, b = body, k = key) => ({ headers: { 'WorkOS-Signature': header }, body: b, secret: k });
  const workos = new WorkOS('sk_test_not_used_offline');
  const t = Date.now();
  await scheme('workos', '@workos-inc/node 12.3.0', (x) => workos.webhooks.verifyHeader({ payload: x.body, sigHeader: x.headers['WorkOS-Signature'], secret: x.secret }), {
    'genuine': d(`t=${t}, v1=${sig(t)}`),
    'without the space': d(`t=${t},v1=${sig(t)}`),
    'body changed': d(`t=${t}, v1=${sig(t)}`, body.replace('user_01', 'user_02')),
    'body with a trailing newline': d(`t=${t}, v1=${sig(t)}`, body + '\n'),
    'another secret': d(`t=${t}, v1=${sig(t)}`, body, secret()),
    'upper-case hex': d(`t=${t}, v1=${upper(sig(t))}`),
    'the timestamp changed': d(`t=${t + 1}, v1=${sig(t)}`),
    'the timestamp in seconds': d(`t=${Math.floor(t / 1000)}, v1=${sig(Math.floor(t / 1000))}`),
    'signed ten minutes ago': d(`t=${t - 600_000}, v1=${sig(t - 600_000)}`),
    'signed a minute ago': d(`t=${t - 60_000}, v1=${sig(t - 60_000)}`),
    'signed ten minutes ahead': d(`t=${t + 600_000}, v1=${sig(t + 600_000)}`),
    'v1 before t': d(`v1=${sig(t)}, t=${t}`),
    'v0 instead of v1': d(`t=${t}, v0=${sig(t)}`),
    'two v1, the second genuine': d(`t=${t}, v1=${sig(t, body, secret())}, v1=${sig(t)}`),
    'no timestamp': d(`v1=${sig(t)}`),
    'no signature header': { headers: {}, body, secret: key },
  });
}

// Adyen: each notification item's additionalData.hmacSignature, base64
// HMAC-SHA256 of eight of its fields joined by ':', keyed with the hex key
// decoded; judged by @adyen/api-library's HmacValidator on the first item.
{
  const key = crypto.randomBytes(32).toString('hex').toUpperCase();
  const fields = (i) => [i.pspReference, i.originalReference, i.merchantAccountCode, i.merchantReference,
                         i.amount?.value, i.amount?.currency, i.eventCode, i.success].join(':');
  const sign = (i, k = key) => b64(hmac('sha256', Buffer.from(k, 'hex'), fields(i)));
  const item = (changes = {}) => ({ additionalData: {}, amount: { currency: 'EUR', value: 1000 }, eventCode: 'AUTHORISATION',
                                    eventDate: '2026-01-01T00:00:00+01:00', merchantAccountCode: 'TestMerchant',
                                    merchantReference: 'order:1', originalReference: '', pspReference: 'PSP' + crypto.randomInt(1e9),
                                    success: 'true', ...changes });
  const signed = (i, k = key) => ({ ...i, additionalData: { hmacSignature: sign(i, k) } });
  const body = (...items) => JSON.stringify({ live: 'false', notificationItems: items.map((i) => ({ NotificationRequestItem: i })) });
  const d = (b, k = key) => ({ headers: {}, body: b, secret: k });
  const genuine = signed(item());
  const validator = new adyen.hmacValidator();
  await scheme('adyen', '@adyen/api-library 32.1.0', (x) => validator.validateHMAC(JSON.parse(x.body).notificationItems[0].NotificationRequestItem, x.secret), {
    'genuine': d(body(genuine)),
    'the key in lower-case hex': d(body(genuine), key.toLowerCase()),
    'another key': d(body(genuine), crypto.randomBytes(32).toString('hex')),
    'the amount changed': d(body({ ...genuine, amount: { currency: 'EUR', value: 1 } })),
    'the event code changed': d(body({ ...genuine, eventCode: 'REFUND' })),
    'success changed': d(body({ ...genuine, success: 'false' })),
    'an unsigned field changed': d(body({ ...genuine, eventDate: '2027-01-01T00:00:00+01:00' })),
    "a ':' moved between two fields": d(body({ ...genuine, merchantAccountCode: 'TestMerchant:order', merchantReference: '1' })),
    'success as a boolean': d(body(signed(item({ success: true })))),
    'the amount as a string': d(body(signed(item({ amount: { currency: 'EUR', value: '1000' } })))),
    'the signature without padding': d(body({ ...genuine, additionalData: { hmacSignature: genuine.additionalData.hmacSignature.replace(/=+$/, '') } })),
    'no signature': d(body(item())),
    'two items, both genuine': d(body(genuine, signed(item()))),
  });
}

// Polar: Standard Webhooks keyed with the secret's own bytes; judged by
// @polar-sh/sdk's validateEvent, whose refusal of a signature is a
// WebhookVerificationError (an event it verified but cannot parse into its
// own types is still verified).
{
  const key = 'polar_whs_' + crypto.randomBytes(18).toString('base64url');
  const body = '{"type":"subscription.updated","timestamp":"2026-01-01T00:00:00Z","data":{"id":"sub_1"}}';
  const sig = (id, ts, b = body, k = key) => 'v1,' + b64(hmac('sha256', Buffer.from(k), `${id}.${ts}.${b}`));
  const id = 'msg_' + crypto.randomBytes(8).toString('hex');
  const t = now();
  const h = (i = id, ts = t, s = sig(id, t)) => ({ 'webhook-id': i, 'webhook-timestamp': String(ts), 'webhook-signature': s });
  const d = (headers, b = body, k = key) => ({ headers, body: b, secret: k });
  const other = 'polar_whs_' + crypto.randomBytes(18).toString('base64url');
  await scheme('polar', '@polar-sh/sdk 0.49.0', (x) => {
    try {
      polarValidateEvent(x.body, x.headers, x.secret);
      return true;
    } catch (e) {
      return !(e instanceof PolarVerificationError);
    }
  }, {
    'genuine': d(h()),
    'body changed': d(h(), body.replace('sub_1', 'sub_2')),
    'another secret': d(h(), body, other),
    'the id changed': d(h('msg_other')),
    'two signatures, the second genuine': d(h(id, t, sig(id, t, body, other) + ' ' + sig(id, t))),
    'signed ten minutes ago': d(h(id, t - 600, sig(id, t - 600))),
    'signed a minute ago': d(h(id, t - 60, sig(id, t - 60))),
  });
}

// Linear: hex HMAC-SHA256 of the body, its webhookTimestamp (milliseconds)
// in the body; judged by @linear/sdk's LinearWebhookClient.
{
  const key = secret('lin_wh_');
  const body = (ms) => `{"action":"create","type":"Issue","data":{"id":"lin_1"},"webhookTimestamp":${ms}}`;
  const d = (b, s = hex(hmac('sha256', key, b)), k = key) => ({ headers: { 'Linear-Delivery': crypto.randomUUID(), 'Linear-Signature': s }, body: b, secret: k });
  const ms = Date.now();
  await scheme('linear', '@linear/sdk 98.0.0', (x) => new LinearWebhookClient(x.secret).verify(Buffer.from(x.body), x.headers['Linear-Signature']), {
    'genuine': d(body(ms)),
    'body changed': d(body(ms).replace('lin_1', 'lin_2'), hex(hmac('sha256', key, body(ms)))),
    'another secret': d(body(ms), undefined, secret('lin_wh_')),
    'upper-case hex': d(body(ms), upper(hex(hmac('sha256', key, body(ms))))),
    'signed ten minutes ago': d(body(ms - 600_000)),
  });
}

// SendGrid: ECDSA P-256 over `<ts><body>`, base64 DER; the verification key
// as SendGrid shows it. Judged by @sendgrid/eventwebhook.
{
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const der = (k) => k.export({ type: 'spki', format: 'der' }).toString('base64');
  const body = '[{"email":"a@example.com","event":"delivered","sg_event_id":"sg-' + crypto.randomUUID() + '","timestamp":1700000000}]';
  const sig = (ts, b = body) => crypto.sign('sha256', Buffer.from(ts + b), privateKey).toString('base64');
  const d = (ts, s = sig(ts), b = body, k = der(publicKey)) => ({ headers: { 'X-Twilio-Email-Event-Webhook-Signature': s, 'X-Twilio-Email-Event-Webhook-Timestamp': String(ts) }, body: b, secret: k });
  const helper = new sendgrid.EventWebhook();
  const t = now();
  await scheme('sendgrid', '@sendgrid/eventwebhook 8.0.0', (x) => helper.verifySignature(helper.convertPublicKeyToECDSA(x.secret), x.body,
    x.headers['X-Twilio-Email-Event-Webhook-Signature'], x.headers['X-Twilio-Email-Event-Webhook-Timestamp']), {
    'genuine': d(t),
    'body changed': d(t, sig(t), body.replace('delivered', 'bounce')),
    'the timestamp changed': d(t + 1, sig(t)),
    'another key': d(t, sig(t), body, der(crypto.generateKeyPairSync('ec', { namedCurve: 'prime256v1' }).publicKey)),
  });
}

// Discord: Ed25519 over `<ts><body>`, hex, the application's public key.
{
  const { publicKey, privateKey } = crypto.generateKeyPairSync('ed25519');
  const raw = (k) => k.export({ type: 'spki', format: 'der' }).subarray(-32).toString('hex');
  const body = '{"id":"' + crypto.randomInt(1e9) + '","type":2,"data":{"name":"credits"}}';
  const sig = (ts, b = body) => crypto.sign(null, Buffer.from(ts + b), privateKey).toString('hex');
  const d = (ts, s = sig(ts), b = body, k = raw(publicKey)) => ({ headers: { 'X-Signature-Ed25519': s, 'X-Signature-Timestamp': String(ts) }, body: b, secret: k });
  const t = now();
  await scheme('discord', 'discord-interactions 4.4.0', (x) => discordVerifyKey(x.body, x.headers['X-Signature-Ed25519'], x.headers['X-Signature-Timestamp'], x.secret), {
    'genuine': d(t),
    'body changed': d(t, sig(t), body.replace('credits', 'debits')),
    'the timestamp changed': d(t + 1, sig(t)),
    'upper-case hex': d(t, upper(sig(t))),
    'another key': d(t, sig(t), body, raw(crypto.generateKeyPairSync('ed25519').publicKey)),
  });
}

for (const line of lines) console.log(JSON.stringify(line));

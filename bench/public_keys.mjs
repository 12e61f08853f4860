// Signs what bench/public_keys measures, as the providers sign it: one
// Discord (Ed25519), SendGrid (ECDSA P-256) and PayPal (RSA-2048, the
// suite's test signer and its certificate) delivery for the verification
// cells, and N Discord interactions, N SendGrid batches and N PayPal
// events, each a new event, for webhook_receive end to end. Writes JSON lines to stdout:
// {cell, scheme, key, headers, body (hex)}.
import crypto from "node:crypto";
import { readFileSync } from "node:fs";

const n = Number(process.argv[2] ?? 1000);
const ts = String(Math.floor(Date.now() / 1000));
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");

const ed = crypto.generateKeyPairSync("ed25519");
const edKey = ed.publicKey.export({ format: "der", type: "spki" }).subarray(12).toString("hex");
const discord = (id) => {
  const body = Buffer.from(JSON.stringify({ id, type: 2, data: { name: "bench" } }));
  const sig = crypto.sign(null, Buffer.concat([Buffer.from(ts), body]), ed.privateKey);
  return { headers: { "X-Signature-Ed25519": sig.toString("hex"), "X-Signature-Timestamp": ts }, body };
};

const ec = crypto.generateKeyPairSync("ec", { namedCurve: "P-256" });
const ecKey = ec.publicKey.export({ format: "der", type: "spki" }).toString("base64");
const sendgrid = (id) => {
  const body = Buffer.from(JSON.stringify([{ sg_event_id: id, event: "delivered", email: "a@example.com" }]));
  const sig = crypto.sign("sha256", Buffer.concat([Buffer.from(ts), body]), ec.privateKey);
  return {
    headers: {
      "X-Twilio-Email-Event-Webhook-Signature": sig.toString("base64"),
      "X-Twilio-Email-Event-Webhook-Timestamp": ts,
    },
    body,
  };
};

const testdata = new URL("../src/schemes/testdata/", import.meta.url);
const rsaKey = crypto.createPrivateKey({ key: readFileSync(new URL("paypal-test-signer.key.der", testdata)), format: "der", type: "pkcs8" });
const certUrl = "https://api.paypal.com/v1/notifications/certs/CERT-bench";
const paypalKey = `${certUrl}\n${readFileSync(new URL("paypal-test-signer.pem", testdata), "utf8")}`;
const crc32 = (buf) => {
  let c = ~0;
  for (const b of buf) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ 0xedb88320 : c >>> 1;
  }
  return (~c) >>> 0;
};
const paypal = (id) => {
  const body = Buffer.from(JSON.stringify({ id, event_type: "PAYMENT.CAPTURE.COMPLETED", resource: { id: "r1" } }));
  const time = new Date(Number(ts) * 1000).toISOString().replace(/\.\d+Z$/, "Z");
  const line = `tx-${id}|${time}|WH-BENCH|${crc32(body)}`;
  const sig = crypto.sign("sha256", Buffer.from(line), rsaKey);
  return {
    headers: {
      "PAYPAL-TRANSMISSION-ID": `tx-${id}`, "PAYPAL-TRANSMISSION-TIME": time, "PAYPAL-AUTH-ALGO": "SHA256withRSA",
      "PAYPAL-CERT-URL": certUrl, "PAYPAL-TRANSMISSION-SIG": sig.toString("base64"),
    },
    body,
  };
};

const line = (cell, scheme, key, d) => out({ cell, scheme, key, headers: d.headers, body: d.body.toString("hex") });
line("verify-ed25519", "discord", edKey, discord("1"));
line("verify-p256", "sendgrid", ecKey, sendgrid("sg-1"));
line("verify-rsa2048", "paypal;webhook_id=WH-BENCH", paypalKey, paypal("WH-1"));
for (let i = 0; i < n; i++) {
  line("receive-discord", "discord", edKey, discord(String(1_000_000 + i)));
  line("receive-sendgrid", "sendgrid", ecKey, sendgrid(`sg-${i}`));
  line("receive-paypal", "paypal;webhook_id=WH-BENCH", paypalKey, paypal(`WH-R${i}`));
}

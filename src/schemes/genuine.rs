//! Genuine deliveries for every scheme in the catalog, signed here as each
//! provider documents it and independently of the scheme modules; and the
//! changes a sender holding one can make to it. The coverage matrix
//! (`pgrx-tests/coverage_tests.rs`) runs every change against every scheme
//! through `webhook_receive`; the property tests use the signers too.
//!
//! A scheme added to the catalog without a sender here makes its body or
//! its signing panic (`unsent`), and with it the unit test below and the
//! matrix: no scheme ships untested.

use super::catalog::{self, Entry};
use hmac::{Hmac, Mac};
use serde_json::{json, Value};

/// The public URL, for the schemes that sign it.
pub const URL: &str = "https://hooks.example.com/in?x=1";

/// The URL a scheme's sender signs: URL, or, with `SCHEME_MATRIX_URL`
/// set, that template with `{scheme}` standing for the scheme's name (a
/// matrix for receivers reached at `<public URL>/webhooks/<provider>`).
fn public_url(scheme: &'static str) -> &'static str {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static URLS: OnceLock<Mutex<HashMap<&'static str, &'static str>>> = OnceLock::new();
    let Ok(template) = std::env::var("SCHEME_MATRIX_URL") else {
        return URL;
    };
    let mut urls = URLS
        .get_or_init(Default::default)
        .lock()
        .expect("not poisoned");
    urls.entry(scheme)
        .or_insert_with(|| Box::leak(template.replace("{scheme}", scheme).into_boxed_str()))
}
/// PayPal's certificate, under the URL its deliveries name.
const PAYPAL_CERT_URL: &str = "https://api.paypal.com/v1/notifications/certs/CERT-test-signer";
const PAYPAL_WEBHOOK_ID: &str = "WH-TEST-1";
const SNS_CERT_URL: &str =
    "https://sns.eu-west-1.amazonaws.com/SimpleNotificationService-test-signer.pem";
const SNS_TOPIC: &str = "arn:aws:sns:eu-west-1:123456789012:orders";
/// A Polar webhook secret as Polar shows it.
const POLAR_SECRET: &str = "polar_whs_nE5u9vS7wQ2kz8RfT1aLmY4c";
/// An Adyen HMAC key as the Customer Area shows it: hex.
const ADYEN_KEY: &str = "44782DEF547AAA06C910C43932B1EB0C71FC68D9D0C057550C48EC2ACF6BA056";

/// How a provider of the scheme is registered for the matrix.
pub struct Registration {
    pub scheme: String,
    pub secret: String,
    /// Where the event id is, for schemes without a default.
    pub event_id_from: Option<&'static str>,
    pub event_type_from: Option<&'static str>,
}

/// A request as a handler passes it to `webhook_receive`.
#[derive(Clone, Debug)]
pub struct Delivery {
    pub headers: Value,
    pub body: Vec<u8>,
    pub url: Option<&'static str>,
}

/// Signs deliveries for one scheme of the catalog.
pub struct Sender {
    pub entry: &'static Entry,
}

pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

fn hmac_sha1(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(key).expect("HMAC takes any key");
    for part in parts {
        mac.update(part);
    }
    mac.finalize().into_bytes().to_vec()
}

pub fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The Standard Webhooks secret, and the key it stands for.
const STANDARD_SECRET: &str = "whsec_c3RhbmRhcmQtdGVzdC1rZXk=";
const STANDARD_KEY: &[u8] = b"standard-test-key";
/// The HMAC secret of every scheme keyed with a plain string.
const SECRET: &str = "matrix-secret";

fn ed25519() -> ed25519_dalek::SigningKey {
    ed25519_dalek::SigningKey::from_bytes(&[5u8; 32])
}

fn p256() -> p256::ecdsa::SigningKey {
    p256::ecdsa::SigningKey::from_bytes(&[11u8; 32].into()).expect("a valid scalar")
}

/// An Adyen notification of one item, event `psp` of type `kind`, signed
/// as Adyen signs it: HMAC-SHA256 under the hex key, over eight fields
/// joined by ':'.
fn adyen_notification(psp: &str, kind: &str, at: i64, account: &str, reference: &str) -> Vec<u8> {
    let signed = format!("{psp}::{account}:{reference}:1000:EUR:{kind}:true");
    let key = hex::decode(ADYEN_KEY).unwrap();
    let signature = b64(&hmac_sha256(&key, &[signed.as_bytes()]));
    json!({"live": "false", "notificationItems": [{"NotificationRequestItem": {
        "additionalData": {"hmacSignature": signature},
        "amount": {"currency": "EUR", "value": 1000},
        "eventCode": kind, "eventDate": rfc3339(at),
        "merchantAccountCode": account, "merchantReference": reference,
        "originalReference": "", "pspReference": psp, "success": "true",
    }}]})
    .to_string()
    .into_bytes()
}

/// The psp reference and event code of a genuine Adyen delivery.
fn adyen_item(genuine: &Delivery) -> (String, String) {
    let body: Value = serde_json::from_slice(&genuine.body).unwrap();
    let item = &body["notificationItems"][0]["NotificationRequestItem"];
    let text = |name: &str| item[name].as_str().unwrap().to_string();
    (text("pspReference"), text("eventCode"))
}

/// An SNS message of `kind`, signed (version 2) as SNS signs it: RSA-SHA256
/// over its canonical fields, by the test signer under `SNS_CERT_URL`.
/// `extra`: the fields a confirmation adds (Token, SubscribeURL).
fn sns_message(kind: &str, id: &str, topic: &str, at: i64, extra: &[(&str, &str)]) -> Vec<u8> {
    use rsa::signature::{SignatureEncoding, Signer};
    let mut fields = serde_json::Map::new();
    for (name, value) in [
        ("Type", kind),
        ("MessageId", id),
        ("TopicArn", topic),
        ("Message", "{\"order\":\"ord_1\",\"state\":\"paid\"}"),
        ("Timestamp", &rfc3339(at)),
    ]
    .into_iter()
    .chain(extra.iter().copied())
    {
        fields.insert(name.to_string(), Value::from(value));
    }
    let order: &[&str] = if kind == "Notification" {
        &[
            "Message",
            "MessageId",
            "Subject",
            "Timestamp",
            "TopicArn",
            "Type",
        ]
    } else {
        &[
            "Message",
            "MessageId",
            "SubscribeURL",
            "Timestamp",
            "Token",
            "TopicArn",
            "Type",
        ]
    };
    let canonical: String = order
        .iter()
        .filter_map(|name| Some(format!("{name}\n{}\n", fields.get(*name)?.as_str()?)))
        .collect();
    let signature = rsa_signer().sign(canonical.as_bytes()).to_bytes();
    fields.insert("SignatureVersion".into(), json!("2"));
    fields.insert("Signature".into(), json!(b64(&signature)));
    fields.insert("SigningCertURL".into(), json!(SNS_CERT_URL));
    Value::Object(fields).to_string().into_bytes()
}

fn rsa_signer() -> rsa::pkcs1v15::SigningKey<sha2::Sha256> {
    use rsa::pkcs8::DecodePrivateKey;
    let key =
        rsa::RsaPrivateKey::from_pkcs8_der(include_bytes!("testdata/paypal-test-signer.key.der"))
            .expect("the test signer's key");
    rsa::pkcs1v15::SigningKey::new(key)
}

/// Unix seconds as RFC 3339 with nanoseconds, as Twitch sends them.
pub fn rfc3339(ts: i64) -> String {
    let days = ts.div_euclid(86_400);
    let secs = ts.rem_euclid(86_400);
    // Civil date from days since the epoch (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.123456789Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

fn crc32(bytes: &[u8]) -> u32 {
    crc32fast::hash(bytes)
}

fn sorted_fields(body: &[u8]) -> Vec<u8> {
    let mut fields = super::form_fields(body);
    fields.sort();
    fields
        .into_iter()
        .flat_map(|(k, v)| [k, v])
        .flatten()
        .collect()
}

/// A scheme of the catalog nobody wrote a sender for.
fn unsent(scheme: &str) -> ! {
    panic!(
        "scheme {scheme} has no genuine sender in schemes/genuine.rs: every scheme \
         in the catalog must pass the coverage matrix"
    )
}

impl Sender {
    /// The sender of a scheme of the catalog.
    pub fn of(name: &str) -> Sender {
        let entry = catalog::lookup(name).unwrap_or_else(|| panic!("no scheme {name}"));
        Sender { entry }
    }

    /// Every scheme of the catalog.
    pub fn all() -> Vec<Sender> {
        catalog::catalog()
            .iter()
            .map(|e| Sender::of(e.name))
            .collect()
    }

    pub fn name(&self) -> &'static str {
        self.entry.name
    }

    /// Whether its scheme signs nothing (a shared token's).
    pub fn signs_nothing(&self) -> bool {
        super::Scheme::parse("t", "scheme", &self.registration().scheme)
            .is_ok_and(|scheme| scheme.signs_nothing())
    }

    pub fn registration(&self) -> Registration {
        let (scheme, secret) = match self.name() {
            "standard" | "replicate" => (self.name().to_string(), STANDARD_SECRET.to_string()),
            // As Supabase's dashboard shows it.
            "supabase" => (self.name().to_string(), format!("v1,{STANDARD_SECRET}")),
            "discord" => (
                "discord".into(),
                hex::encode(ed25519().verifying_key().to_bytes()),
            ),
            "adyen" => ("adyen".into(), ADYEN_KEY.into()),
            "polar" => ("polar".into(), POLAR_SECRET.into()),
            // The same test signer as PayPal's, under SNS's URL.
            "aws_sns" => (
                "aws_sns".into(),
                format!(
                    "{SNS_CERT_URL}\n{}",
                    include_str!("testdata/paypal-test-signer.pem")
                ),
            ),
            // As Mission Control shows it.
            "telnyx" => ("telnyx".into(), b64(&ed25519().verifying_key().to_bytes())),
            "sendgrid" => {
                // SubjectPublicKeyInfo of a P-256 key: the algorithm and
                // curve identifiers, then the uncompressed point.
                let mut der =
                    hex::decode("3059301306072a8648ce3d020106082a8648ce3d030107034200").unwrap();
                der.extend_from_slice(p256().verifying_key().to_encoded_point(false).as_bytes());
                ("sendgrid".into(), b64(&der))
            }
            "paypal" => (
                format!("paypal;webhook_id={PAYPAL_WEBHOOK_ID}"),
                format!(
                    "{PAYPAL_CERT_URL}\n{}",
                    include_str!("testdata/paypal-test-signer.pem")
                ),
            ),
            "hmac" => (
                "hmac;header=X-Signature;prefix=sha256=".into(),
                SECRET.into(),
            ),
            "token" => ("token;header=X-Token".into(), SECRET.into()),
            // The value the admin set for the hook's Authorization header.
            "okta" => ("okta".into(), format!("Bearer {SECRET}")),
            other => (other.to_string(), SECRET.to_string()),
        };
        let (event_id_from, event_type_from) = match self.name() {
            "zoom" => (Some("body:payload.object.uuid"), None),
            "calendly" => (Some("body:payload.uri"), None),
            "hmac" | "token" => (Some("header:X-Event-Id"), Some("body:type")),
            _ => (None, None),
        };
        Registration {
            scheme,
            secret,
            event_id_from,
            event_type_from,
        }
    }

    /// The scheme's signature window, if it signs a timestamp.
    pub fn tolerance(&self) -> Option<i64> {
        self.entry.tolerance
    }

    /// A genuine delivery of event `id` of type `kind`, signed at `at`
    /// (Unix seconds). Per-request values (PayPal's transmission,
    /// Mailgun's token) are made of both, so unique per delivery.
    pub fn deliver(&self, id: &str, kind: &str, at: i64) -> Delivery {
        let body = self.body(id, kind, at);
        self.sign(id, kind, body, at)
    }

    fn body(&self, id: &str, kind: &str, at: i64) -> Vec<u8> {
        let value = match self.name() {
            "stripe" => {
                json!({"id": id, "type": kind, "created": at, "data": {"object": {"id": "obj_1"}}})
            }
            "github" | "shopify" | "woocommerce" => json!({"action": "opened", "ref": id}),
            "standard" | "supabase" => json!({"type": kind, "timestamp": rfc3339(at), "data": {}}),
            "polar" => json!({"type": kind, "timestamp": rfc3339(at), "data": {"id": "sub_1"}}),
            "replicate" => json!({"id": "pred_1", "status": kind, "output": null,
                                  "created_at": rfc3339(at)}),
            "paddle" => json!({"event_id": id, "event_type": kind,
                               "occurred_at": rfc3339(at), "data": {"id": "sub_1"}}),
            "slack" => json!({"event_id": id, "event": {"type": kind}, "event_time": at}),
            "typeform" => json!({"event_id": id, "event_type": kind}),
            "discord" => json!({"id": id, "type": 2, "data": {"name": kind}}),
            "telnyx" => json!({"data": {"event_type": kind, "id": id, "occurred_at": rfc3339(at),
                                        "payload": {"id": "msg_1"}, "record_type": "event"},
                               "meta": {"attempt": 1}}),
            "sendgrid" => json!([{"sg_event_id": id, "event": kind, "email": "a@example.com"}]),
            "paypal" => json!({"id": id, "event_type": kind, "create_time": rfc3339(at),
                               "resource": {"id": "5O190127TN364715T"}, "filler": ""}),
            "twilio" => return format!("MessageSid=SM{id}&MessageStatus={kind}").into_bytes(),
            // Signed inside the body, its id a psp reference; a ':' in the
            // merchant reference, as merchants' references may have.
            "adyen" => {
                return adyen_notification(id, kind, at, "TestMerchant", &format!("order:{id}"))
            }
            // Signed inside the body: the event's kind is its topic's.
            "aws_sns" => {
                return sns_message("Notification", id, &format!("{SNS_TOPIC}-{kind}"), at, &[])
            }
            "square" => json!({"event_id": id, "type": kind, "created_at": rfc3339(at),
                               "data": {"id": "sq_1"}}),
            "zoom" => json!({"event": kind, "event_ts": at * 1000,
                             "payload": {"object": {"uuid": id}}}),
            "twitch" => json!({"subscription": {"type": kind}, "event": {"user_id": "1"}}),
            "mailgun" => {
                let token = format!("token-{id}-{at}");
                let sent = at.to_string();
                let sig = hex::encode(hmac_sha256(
                    SECRET.as_bytes(),
                    &[sent.as_bytes(), token.as_bytes()],
                ));
                json!({"signature": {"timestamp": sent, "token": token, "signature": sig},
                       "event-data": {"id": id, "event": kind}})
            }
            "linear" => {
                json!({"type": kind, "webhookTimestamp": at * 1000, "data": {"id": "lin_1"}})
            }
            "hubspot" => json!([{"eventId": id, "subscriptionType": kind}]),
            "calendly" => json!({"event": kind, "payload": {"uri": id}}),
            "vercel" => json!({"id": id, "type": kind, "createdAt": at * 1000, "payload": {}}),
            "razorpay" => json!({"entity": "event", "event": kind, "contains": ["payment"],
                                 "payload": {}, "created_at": at}),
            "coinbase" => json!({"id": format!("delivery-{id}"), "scheduled_for": rfc3339(at),
                                 "event": {"id": id, "type": kind, "data": {}}}),
            "bitbucket" => json!({"repository": {"full_name": "team/repo"}, "push": {"ref": id}}),
            "intercom" => json!({"type": "notification_event", "id": id, "topic": kind,
                                 "data": {"item": {}}, "delivery_attempts": 1, "created_at": at}),
            "lemonsqueezy" => json!({"meta": {"event_name": kind, "test_mode": true},
                                     "data": {"id": id, "type": "orders"}}),
            "workos" => {
                json!({"id": id, "event": kind, "data": {"id": "user_01", "object": "user"},
                               "created_at": rfc3339(at)})
            }
            "zendesk" => json!({"type": kind, "id": id, "account_id": 123456,
                                "subject": "zen:user:1", "time": rfc3339(at), "detail": {"id": "1"}}),
            "gitlab" => json!({"object_kind": "push", "ref": id, "project": {"id": 15}}),
            "okta" => json!({"eventType": "com.okta.event_hook", "eventTypeVersion": "1.0",
                             "eventId": id, "eventTime": rfc3339(at),
                             "data": {"events": [{"uuid": format!("uuid-{id}"), "eventType": kind}]}}),
            "hmac" | "token" => json!({"type": kind}),
            other => unsent(other),
        };
        value.to_string().into_bytes()
    }

    /// Sign `body` as the provider does, at `at`; `id` and `kind` go where
    /// the provider puts them outside the body.
    fn sign(&self, id: &str, kind: &str, body: Vec<u8>, at: i64) -> Delivery {
        let key = SECRET.as_bytes();
        let ts = at.to_string();
        let mut url = None;
        let headers = match self.name() {
            "stripe" | "calendly" => {
                let sig = hex::encode(hmac_sha256(key, &[format!("{ts}.").as_bytes(), &body]));
                let name = if self.name() == "stripe" {
                    "Stripe-Signature"
                } else {
                    "Calendly-Webhook-Signature"
                };
                json!({ name: format!("t={ts},v1={sig}") })
            }
            "github" => json!({
                "X-GitHub-Delivery": id, "X-GitHub-Event": kind,
                "X-Hub-Signature-256": format!("sha256={}", hex::encode(hmac_sha256(key, &[&body]))),
            }),
            "shopify" => json!({
                "X-Shopify-Event-Id": id, "X-Shopify-Topic": kind,
                "X-Shopify-Webhook-Id": format!("whk-{id}"),
                "X-Shopify-Hmac-Sha256": b64(&hmac_sha256(key, &[&body])),
            }),
            "woocommerce" => json!({
                "X-WC-Webhook-Delivery-ID": id, "X-WC-Webhook-Topic": kind,
                "X-WC-Webhook-Signature": b64(&hmac_sha256(key, &[&body])),
            }),
            "standard" | "supabase" | "replicate" | "polar" => {
                let key = if self.name() == "polar" {
                    POLAR_SECRET.as_bytes()
                } else {
                    STANDARD_KEY
                };
                let sig = b64(&hmac_sha256(
                    key,
                    &[format!("{id}.{ts}.").as_bytes(), &body],
                ));
                json!({ "webhook-id": id, "webhook-timestamp": ts,
                        "webhook-signature": format!("v1,{sig}") })
            }
            "paddle" => {
                let sig = hex::encode(hmac_sha256(key, &[format!("{ts}:").as_bytes(), &body]));
                json!({ "Paddle-Signature": format!("ts={ts};h1={sig}") })
            }
            "slack" | "zoom" => {
                let sig = hex::encode(hmac_sha256(key, &[format!("v0:{ts}:").as_bytes(), &body]));
                if self.name() == "slack" {
                    json!({ "X-Slack-Signature": format!("v0={sig}"), "X-Slack-Request-Timestamp": ts })
                } else {
                    json!({ "x-zm-signature": format!("v0={sig}"), "x-zm-request-timestamp": ts })
                }
            }
            "typeform" => json!({
                "Typeform-Signature": format!("sha256={}", b64(&hmac_sha256(key, &[&body]))),
            }),
            "discord" => {
                use ed25519_dalek::Signer;
                let sig = ed25519().sign(&[ts.as_bytes(), &body].concat());
                json!({ "X-Signature-Ed25519": hex::encode(sig.to_bytes()), "X-Signature-Timestamp": ts })
            }
            "telnyx" => {
                use ed25519_dalek::Signer;
                let sig = ed25519().sign(&[ts.as_bytes(), b"|", &body].concat());
                json!({ "telnyx-signature-ed25519": b64(&sig.to_bytes()), "telnyx-timestamp": ts })
            }
            "sendgrid" => {
                use p256::ecdsa::signature::Signer;
                let sig: p256::ecdsa::Signature = p256().sign(&[ts.as_bytes(), &body].concat());
                json!({ "X-Twilio-Email-Event-Webhook-Signature": b64(sig.to_der().as_bytes()),
                        "X-Twilio-Email-Event-Webhook-Timestamp": ts })
            }
            "paypal" => {
                use rsa::signature::{SignatureEncoding, Signer};
                let transmission = format!("tx-{id}-{at}");
                let sent = rfc3339(at);
                let signed = format!("{transmission}|{sent}|{PAYPAL_WEBHOOK_ID}|{}", crc32(&body));
                let sig = rsa_signer().sign(signed.as_bytes()).to_bytes();
                json!({ "PAYPAL-TRANSMISSION-ID": transmission, "PAYPAL-TRANSMISSION-TIME": sent,
                        "PAYPAL-AUTH-ALGO": "SHA256withRSA", "PAYPAL-CERT-URL": PAYPAL_CERT_URL,
                        "PAYPAL-TRANSMISSION-SIG": b64(&sig) })
            }
            "twilio" => {
                let signed = public_url("twilio");
                url = Some(signed);
                let sig = hmac_sha1(key, &[signed.as_bytes(), &sorted_fields(&body)]);
                json!({ "I-Twilio-Idempotency-Token": id, "X-Twilio-Signature": b64(&sig) })
            }
            "square" => {
                let signed = public_url("square");
                url = Some(signed);
                json!({ "x-square-hmacsha256-signature": b64(&hmac_sha256(key, &[signed.as_bytes(), &body])) })
            }
            "twitch" => {
                let sent = rfc3339(at);
                let sig = hex::encode(hmac_sha256(key, &[id.as_bytes(), sent.as_bytes(), &body]));
                json!({ "Twitch-Eventsub-Message-Id": id, "Twitch-Eventsub-Message-Timestamp": sent,
                        "Twitch-Eventsub-Message-Signature": format!("sha256={sig}"),
                        "Twitch-Eventsub-Message-Type": "notification" })
            }
            // Signed inside the body.
            "mailgun" | "aws_sns" | "adyen" => json!({}),
            "linear" => json!({
                "Linear-Delivery": id,
                "Linear-Signature": hex::encode(hmac_sha256(key, &[&body])),
            }),
            "hubspot" => {
                let signed = public_url("hubspot");
                url = Some(signed);
                let millis = (at * 1000).to_string();
                let sig = b64(&hmac_sha256(
                    key,
                    &[b"POST", signed.as_bytes(), &body, millis.as_bytes()],
                ));
                json!({ "X-HubSpot-Signature-v3": sig, "X-HubSpot-Request-Timestamp": millis })
            }
            "vercel" => json!({ "x-vercel-signature": hex::encode(hmac_sha1(key, &[&body])) }),
            "razorpay" => json!({
                "X-Razorpay-Event-Id": id,
                "X-Razorpay-Signature": hex::encode(hmac_sha256(key, &[&body])),
            }),
            "coinbase" => {
                json!({ "X-CC-Webhook-Signature": hex::encode(hmac_sha256(key, &[&body])) })
            }
            "bitbucket" => json!({
                "X-Request-UUID": id, "X-Event-Key": kind, "X-Attempt-Number": "1",
                "X-Hub-Signature": format!("sha256={}", hex::encode(hmac_sha256(key, &[&body]))),
            }),
            "intercom" => json!({
                "X-Hub-Signature": format!("sha1={}", hex::encode(hmac_sha1(key, &[&body]))),
            }),
            "lemonsqueezy" => json!({
                "X-Event-Name": kind,
                "X-Signature": hex::encode(hmac_sha256(key, &[&body])),
            }),
            "workos" => {
                // Milliseconds, with a space after the comma, as WorkOS sends it.
                let millis = (at * 1000 + 250).to_string();
                let sig = hex::encode(hmac_sha256(key, &[format!("{millis}.").as_bytes(), &body]));
                json!({ "WorkOS-Signature": format!("t={millis}, v1={sig}") })
            }
            "zendesk" => {
                let sent = rfc3339(at);
                json!({ "X-Zendesk-Webhook-Signature": b64(&hmac_sha256(key, &[sent.as_bytes(), &body])),
                        "X-Zendesk-Webhook-Signature-Timestamp": sent,
                        "X-Zendesk-Webhook-Invocation-Id": format!("inv-{id}") })
            }
            "gitlab" => json!({
                "X-Gitlab-Token": SECRET, "X-Gitlab-Event": kind, "Idempotency-Key": id,
                "X-Gitlab-Event-UUID": format!("uuid-{id}"),
                "X-Gitlab-Instance": "https://gitlab.example.com",
            }),
            "token" => json!({ "X-Event-Id": id, "X-Token": SECRET }),
            "okta" => json!({ "Authorization": format!("Bearer {SECRET}") }),
            "hmac" => json!({
                "X-Event-Id": id,
                "X-Signature": format!("sha256={}", hex::encode(hmac_sha256(key, &[&body]))),
            }),
            other => unsent(other),
        };
        Delivery { headers, body, url }
    }

    /// The strongest other body a sender holding `genuine` can put under
    /// its signature, carrying event `id` of type `kind`: for a scheme
    /// whose signature covers the body by a digest, simply another body
    /// (it cannot verify); for the others, one the signature still
    /// verifies.
    pub fn other_body(&self, genuine: &Delivery, id: &str, kind: &str, at: i64) -> Delivery {
        let body = match self.name() {
            // Same CRC32, another event.
            "paypal" => {
                let target = crc32(&genuine.body);
                let mut value: Value = serde_json::from_slice(&self.body(id, kind, at)).unwrap();
                value["filler"] = json!("a".repeat(FILLER));
                let template = value.to_string().into_bytes();
                forge_crc32(&template, b"\"filler\":\"", target)
            }
            // The fields are joined by ':' unescaped: move the one in the
            // merchant reference into the merchant account.
            "adyen" => {
                let (psp, code) = adyen_item(genuine);
                adyen_notification(&psp, &code, at, "TestMerchant:order", &psp)
            }
            // Nothing is signed and the id is in the body: the other body
            // keeps it (under another id it is another event, by design).
            "okta" => {
                let mut value: Value = serde_json::from_slice(&genuine.body).unwrap();
                value["data"]["events"][0]["eventType"] = json!(kind);
                value["eventTime"] = json!(rfc3339(at));
                value.to_string().into_bytes()
            }
            // Only the canonical fields are signed: the others are anyone's.
            "aws_sns" => {
                let mut value: Value = serde_json::from_slice(&genuine.body).unwrap();
                value["UnsubscribeURL"] = json!("https://attacker.example/unsubscribe");
                value["MessageAttributes"] = json!({"kind": {"Type": "String", "Value": kind}});
                value.to_string().into_bytes()
            }
            // The signature object is not bound to the event it rides with.
            "mailgun" => {
                let mut value: Value = serde_json::from_slice(&genuine.body).unwrap();
                value["event-data"] = json!({"id": id, "event": kind});
                value.to_string().into_bytes()
            }
            // Twilio concatenates the sorted fields without separators:
            // move a boundary and the same bytes are signed.
            "twilio" => {
                let text = String::from_utf8(genuine.body.clone()).unwrap();
                let (status_field, status) = text.split_once("&MessageStatus=").unwrap();
                let (head, tail) = status.split_at(status.len() / 2);
                format!("{status_field}&MessageStatus={head}&{tail}=").into_bytes()
            }
            _ => self.body(id, kind, at),
        };
        Delivery {
            body,
            ..genuine.clone()
        }
    }
}

/// What `webhook_receive` makes of a genuine request of another kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Expect {
    /// An endpoint check, answered and archived as this handshake.
    Handshake(&'static str),
    /// An event under this id and type.
    Event { id: String, kind: String },
}

/// A genuine request of another kind than the matrix's event: what else
/// the provider sends to the same endpoint, signed as it signs events.
pub struct OtherKind {
    pub what: &'static str,
    pub delivery: Delivery,
    pub expect: Expect,
}

/// Form encoding of one value, as a provider's form body writes it.
fn form_value(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'*' => {
                (b as char).to_string()
            }
            b' ' => "+".to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

impl Sender {
    /// Every other kind of request the scheme's provider sends, signed at
    /// `at`: endpoint checks (Slack's URL verification and SSL check,
    /// Zoom, Twitch, Discord, SNS), Slack's slash commands and interactions,
    /// Twilio's callbacks without an idempotency token or signed with a
    /// shared key, Shopify's Events
    /// deliveries and deliveries without an event id, Supabase Auth's
    /// hooks other than Send Email. Empty for the schemes that send only
    /// events.
    pub fn other_kinds(&self, at: i64) -> Vec<OtherKind> {
        let event = |what, delivery: Delivery, id: String, kind: &str| OtherKind {
            what,
            delivery,
            expect: Expect::Event {
                id,
                kind: kind.to_string(),
            },
        };
        let handshake = |what, delivery, kind| OtherKind {
            what,
            delivery,
            expect: Expect::Handshake(kind),
        };
        let signed = |body: Value| self.sign("", "", body.to_string().into_bytes(), at);
        match self.name() {
            "slack" => {
                let trigger = format!("13345224609.{at}.8088930838d88f008e0");
                let command = format!(
                    "token=gIkuvaNzQIHg97ATvDxqgjtO&team_id=T0001&team_domain=example\
                     &channel_id=C2147483705&channel_name=test&user_id=U2147483697&user_name=Steve\
                     &command=%2Fweather&text=94070+Zo%C3%AB&api_app_id=A123456\
                     &response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2F1234%2F5678\
                     &trigger_id={trigger}"
                );
                let action = json!({
                    "type": "block_actions", "trigger_id": format!("{trigger}.1"),
                    "user": {"id": "U2147483697"}, "team": {"id": "T0001"},
                    "actions": [{"action_id": "approve", "value": "yes", "action_ts": format!("{at}.000100")}],
                });
                let closed = json!({
                    "type": "view_closed", "team": {"id": "T0001"}, "user": {"id": "U2147483697"},
                    "view": {"id": "V0001", "callback_id": "settings"}, "is_cleared": false,
                });
                let form = |body: String| self.sign("", "", body.into_bytes(), at);
                let closed = form(format!("payload={}", form_value(&closed.to_string())));
                let closed_id = closed.headers["X-Slack-Signature"]
                    .as_str()
                    .unwrap()
                    .to_string();
                vec![
                    event(
                        "a slash command",
                        form(command),
                        trigger.clone(),
                        "/weather",
                    ),
                    event(
                        "an interaction",
                        form(format!("payload={}", form_value(&action.to_string()))),
                        format!("{trigger}.1"),
                        "block_actions",
                    ),
                    event(
                        "an interaction without a trigger id",
                        closed,
                        closed_id,
                        "view_closed",
                    ),
                    handshake(
                        "an SSL check",
                        form("ssl_check=1&token=gIkuvaNzQIHg97ATvDxqgjtO".to_string()),
                        "ssl_check",
                    ),
                    handshake(
                        "a URL verification",
                        signed(
                            json!({"token": "Jhj5dZrVaK7ZwHHjRyZWjbDl", "type": "url_verification",
                                      "challenge": "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"}),
                        ),
                        "url_verification",
                    ),
                ]
            }
            "shopify" => {
                let key = SECRET.as_bytes();
                let events = json!({"topic": "Product", "action": "update",
                                    "handle": "product-updates",
                                    "product": {"id": "gid://shopify/Product/9554194432293"}})
                .to_string()
                .into_bytes();
                let older = json!({"id": 9554194432293_u64, "title": "T-Shirt"})
                    .to_string()
                    .into_bytes();
                vec![
                    event(
                        "an Events delivery (its headers without X-)",
                        Delivery {
                            headers: json!({
                                "Shopify-Event-Id": "c2e1a0d4-3b5f-4e8a-9a61-0d6f2b7c1e90",
                                "Shopify-Webhook-Id": "7f0b9c1e-2d4a-4b6e-8c3f-5a1d9e2b4c70",
                                "Shopify-Topic": "Product",
                                "Shopify-Hmac-Sha256": b64(&hmac_sha256(key, &[&events])),
                            }),
                            body: events,
                            url: None,
                        },
                        "c2e1a0d4-3b5f-4e8a-9a61-0d6f2b7c1e90".into(),
                        "Product",
                    ),
                    event(
                        "a delivery without an event id",
                        Delivery {
                            headers: json!({
                                "X-Shopify-Webhook-Id": "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043",
                                "X-Shopify-Topic": "products/update",
                                "X-Shopify-Hmac-Sha256": b64(&hmac_sha256(key, &[&older])),
                            }),
                            body: older,
                            url: None,
                        },
                        "b54557e4-bdd9-4b37-8a5f-bf7d70bcd043".into(),
                        "products/update",
                    ),
                ]
            }
            "supabase" => {
                // Supabase Auth's other hooks: no type field, no email
                // data; each names itself in its metadata.
                let user = "8ccaa7af-909f-44e7-84cb-67cdccb56be6";
                let hook = |n: usize, name: &str, fields: Value| {
                    let id = format!("msg_2mVb8KVo3yJ7cQZ1oWLq0Rn{n}");
                    let mut body = json!({"metadata": {
                        "uuid": format!("8b34dcdd-5bf2-4f0b-a2c4-0a2ab0f6a31{n}"),
                        "time": rfc3339(at), "name": name, "ip_address": "203.0.113.7"}});
                    body.as_object_mut()
                        .unwrap()
                        .extend(fields.as_object().unwrap().clone());
                    let delivery = self.sign(&id, "", body.to_string().into_bytes(), at);
                    (delivery, id)
                };
                [
                    ("a Send SMS hook", "send-sms",
                     json!({"user": {"id": user, "phone": "15551234567"}, "sms": {"otp": "561166"}})),
                    ("a Custom Access Token hook", "customize-access-token",
                     json!({"user_id": user, "claims": {"sub": user, "role": "authenticated", "aal": "aal1"},
                            "authentication_method": "password"})),
                    ("an MFA Verification Attempt hook", "mfa-verification",
                     json!({"user_id": user, "factor_id": "6f1a4dbe-3b1c-4ad3-9bd4-1d3a7c4a3f10",
                            "factor_type": "totp", "valid": false})),
                    ("a Password Verification Attempt hook", "password-verification",
                     json!({"user_id": user, "valid": true})),
                    ("a Before User Created hook", "before-user-created",
                     json!({"user": {"id": user, "email": "new@example.com"}})),
                ]
                .into_iter()
                .enumerate()
                .map(|(n, (what, name, fields))| {
                    let (delivery, id) = hook(n, name, fields);
                    event(what, delivery, id, name)
                })
                .collect()
            }
            "zoom" => vec![handshake(
                "a URL validation",
                signed(
                    json!({"event": "endpoint.url_validation", "event_ts": at * 1000,
                              "payload": {"plainToken": "qgg8vlvZRS6UYooatFL8Aw"}}),
                ),
                "endpoint.url_validation",
            )],
            "twitch" => {
                let subscription = json!({"id": "f1c2a387-161a-49f9-a165-0f21d7a4e1c4",
                                          "type": "channel.follow", "version": "2",
                                          "status": "webhook_callback_verification_pending"});
                let mut challenge = self.sign(
                    "e76c6bd4-55c9-4987-8304-da1588d8988b",
                    "",
                    json!({"challenge": "pogchamp-kappa-360noscope-vohiyo", "subscription": subscription})
                        .to_string()
                        .into_bytes(),
                    at,
                );
                challenge.headers["Twitch-Eventsub-Message-Type"] =
                    json!("webhook_callback_verification");
                let mut revoked = subscription.clone();
                revoked["status"] = json!("authorization_revoked");
                let mut revocation = self.sign(
                    "84c1e79a-2a4b-4c13-ba0b-4312293e9308",
                    "",
                    json!({"subscription": revoked}).to_string().into_bytes(),
                    at,
                );
                revocation.headers["Twitch-Eventsub-Message-Type"] = json!("revocation");
                vec![
                    handshake(
                        "a callback verification",
                        challenge,
                        "webhook_callback_verification",
                    ),
                    handshake("a revocation", revocation, "revocation"),
                ]
            }
            // The hook's one-time verification: a GET with no body.
            "okta" => vec![handshake(
                "a verification",
                Delivery {
                    headers: json!({ "Authorization": format!("Bearer {SECRET}"),
                                     "X-Okta-Verification-Challenge": "X1rG9vlUQ7lsWb6Rn6H4" }),
                    body: Vec::new(),
                    url: None,
                },
                "verification",
            )],
            "aws_sns" => vec![handshake(
                "a subscription's confirmation",
                Delivery {
                    headers: json!({}),
                    body: sns_message(
                        "SubscriptionConfirmation",
                        "sub-confirm-1",
                        SNS_TOPIC,
                        at,
                        &[
                            ("Token", "2336412f37fb687f5d51e6e2425c464de12884"),
                            (
                                "SubscribeURL",
                                "https://sns.eu-west-1.amazonaws.com/?Action=ConfirmSubscription&Token=2336412f",
                            ),
                        ],
                    ),
                    url: None,
                },
                "subscription_confirmation",
            )],
            "discord" => vec![handshake(
                "a PING",
                signed(json!({"id": "1110000000000000001", "type": 1,
                              "application_id": "1110000000000000000"})),
                "ping",
            )],
            "twilio" => {
                // A voice status callback: Twilio sends no idempotency
                // token with it.
                let body = format!(
                    "AccountSid=AC0001&CallSid=CA{at}&CallStatus=completed&CallDuration=12\
                     &From=%2B15551230000&To=%2B15551234567&Timestamp=Tue%2C+14+Nov+2023+22%3A13%3A20+%2B0000"
                );
                let mut delivery = self.sign("", "", body.into_bytes(), at);
                delivery
                    .headers
                    .as_object_mut()
                    .unwrap()
                    .remove("I-Twilio-Idempotency-Token");
                let id = delivery.headers["X-Twilio-Signature"]
                    .as_str()
                    .unwrap()
                    .to_string();
                // Under a Webhook Setting: signed with a shared key (here
                // the registered secret), the hash the settings header names.
                let shared = |n: u32, algorithm: &str| {
                    let body = format!("MessageSid=SM{at}{n}&MessageStatus=delivered").into_bytes();
                    let url = public_url("twilio");
                    let signed = [url.as_bytes(), &sorted_fields(&body)].concat();
                    let sig = match algorithm {
                        "HMAC_SHA256" => hmac_sha256(SECRET.as_bytes(), &[&signed]),
                        _ => hmac_sha1(SECRET.as_bytes(), &[&signed]),
                    };
                    Delivery {
                        headers: json!({
                            "I-Twilio-Idempotency-Token": format!("shared-key-{n}"),
                            "X-Twilio-Signature": b64(&sig),
                            "X-Twilio-Webhooks-Signature-Settings":
                                format!("key=KS0000000000000000000000000000000{n},algorithm={algorithm}"),
                        }),
                        body,
                        url: Some(url),
                    }
                };
                vec![
                    event(
                        "a callback without an idempotency token",
                        delivery,
                        id,
                        "completed",
                    ),
                    event(
                        "a callback signed with a shared key, HMAC-SHA256",
                        shared(1, "HMAC_SHA256"),
                        "shared-key-1".into(),
                        "delivered",
                    ),
                    event(
                        "a callback signed with a shared key, HMAC-SHA1",
                        shared(2, "HMAC_SHA1"),
                        "shared-key-2".into(),
                        "delivered",
                    ),
                ]
            }
            _ => Vec::new(),
        }
    }
}

impl Sender {
    /// The headers a provider of the scheme reads its event id and type
    /// from, and those the scheme's signature can cover.
    pub fn identity_headers(&self) -> Vec<String> {
        let registration = self.registration();
        let sources = [
            registration.event_id_from.or(self.entry.event_id_from),
            registration.event_type_from.or(self.entry.event_type_from),
        ];
        // The signature header itself (Slack's and Twilio's id where none
        // other is sent) is the signed bytes' MAC, not a value a sender
        // sets: changing it is tampering, a change of its own.
        let signature = self.signature_headers();
        let mut names: Vec<String> = sources
            .into_iter()
            .flatten()
            .flat_map(|source| source.split('|'))
            .filter_map(|alternative| alternative.strip_prefix("header:").map(str::to_string))
            .filter(|name| !signature.iter().any(|s| s.eq_ignore_ascii_case(name)))
            .collect();
        names.extend(self.entry.covers.headers.iter().map(|h| h.to_string()));
        names
    }

    /// The headers that carry the scheme's signature.
    pub fn signature_headers(&self) -> Vec<String> {
        super::Scheme::parse("t", "scheme", &self.registration().scheme)
            .map(|scheme| {
                scheme
                    .signature_headers()
                    .into_iter()
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every change a sender holding `genuine` (signed at `now`) can make
    /// to it, named: another body under the same signature, other id and
    /// type headers, the signature moved into another header family, a
    /// tampered signature, a stale timestamp, the same delivery again.
    pub fn changes(&self, genuine: &Delivery, now: i64) -> Vec<(&'static str, Delivery)> {
        let names = self.identity_headers();
        let mut changes = vec![(
            "another body under the same signature",
            self.other_body(genuine, "evt-forged", "thing.refunded", now),
        )];
        // Where nothing is signed (a shared token), whoever holds the token
        // sends what ids it likes: another id is another event, by design.
        if !self.signs_nothing() {
            changes.push(("other id and type headers", other_headers(genuine, &names)));
        }
        changes.extend([
            (
                "a tampered signature",
                self.tampered(self.deliver("evt-tampered", "thing.created", now)),
            ),
            ("the same delivery again", genuine.clone()),
        ]);
        if let Some(moved) = self.other_family(genuine, &names) {
            changes.push(("the signature in another header family", moved));
        }
        if let Some(tolerance) = self.tolerance() {
            changes.push((
                "a stale timestamp",
                self.deliver("evt-stale", "thing.created", now - tolerance - 120),
            ));
        }
        changes
    }

    /// The same signature in another of the scheme's header families, with
    /// the family it came in refilled with unsigned ids by a relay.
    fn other_family(&self, genuine: &Delivery, names: &[String]) -> Option<Delivery> {
        let scheme = super::Scheme::parse("t", "scheme", &self.registration().scheme).ok()?;
        let families = scheme.signature_headers();
        let object = genuine.headers.as_object()?;
        let present = families
            .iter()
            .find(|f| object.keys().any(|k| k.eq_ignore_ascii_case(f)))?;
        let other = families.iter().find(|f| *f != present)?;
        // What the two names differ by in front (webhook-/svix-, X-/none).
        let common = present
            .to_ascii_lowercase()
            .bytes()
            .rev()
            .zip(other.to_ascii_lowercase().bytes().rev())
            .take_while(|(a, b)| a == b)
            .count();
        let (from, to) = (
            present[..present.len() - common].to_string(),
            other[..other.len() - common].to_string(),
        );
        let mut moved = serde_json::Map::new();
        for (key, value) in object {
            let renamed = if key.eq_ignore_ascii_case(present) {
                other.to_string()
            } else if from != to
                && key
                    .to_ascii_lowercase()
                    .starts_with(&from.to_ascii_lowercase())
            {
                format!("{to}{}", &key[from.len()..])
            } else {
                key.clone()
            };
            moved.insert(renamed, value.clone());
        }
        let mut forged = Delivery {
            headers: Value::Object(moved),
            ..genuine.clone()
        };
        for name in names {
            if name
                .to_ascii_lowercase()
                .starts_with(&from.to_ascii_lowercase())
                && !name.contains("timestamp")
            {
                set_header(&mut forged.headers, name, &format!("forged-{name}"));
            }
        }
        Some(forged)
    }

    /// One character of the signature changed, its format kept.
    fn tampered(&self, mut delivery: Delivery) -> Delivery {
        fn flip(text: &str) -> String {
            let mut chars: Vec<char> = text.chars().collect();
            let at = chars
                .iter()
                .rposition(|c| c.is_ascii_alphanumeric())
                .unwrap()
                - 4;
            chars[at] = if chars[at] == '0' { '1' } else { '0' };
            chars.into_iter().collect()
        }
        if self.name() == "mailgun" {
            let mut body: Value = serde_json::from_slice(&delivery.body).unwrap();
            let sig = body["signature"]["signature"].as_str().unwrap().to_string();
            body["signature"]["signature"] = Value::from(flip(&sig));
            delivery.body = body.to_string().into_bytes();
            return delivery;
        }
        // Signed inside the body: the signature's place in it.
        let inside: Option<&[&str]> = match self.name() {
            "aws_sns" => Some(&["Signature"]),
            "adyen" => Some(&[
                "notificationItems",
                "0",
                "NotificationRequestItem",
                "additionalData",
                "hmacSignature",
            ]),
            _ => None,
        };
        if let Some(path) = inside {
            let mut body: Value = serde_json::from_slice(&delivery.body).unwrap();
            let pointer = format!("/{}", path.join("/"));
            let at = body.pointer_mut(&pointer).unwrap();
            *at = Value::from(flip(at.as_str().unwrap()));
            delivery.body = body.to_string().into_bytes();
            return delivery;
        }
        let scheme = super::Scheme::parse("t", "scheme", &self.registration().scheme).unwrap();
        let object = delivery.headers.as_object_mut().unwrap();
        for header in scheme
            .signature_headers()
            .into_iter()
            .chain(scheme.secret_header())
        {
            for (key, value) in object.iter_mut() {
                if key.eq_ignore_ascii_case(header) {
                    *value = Value::from(flip(value.as_str().unwrap()));
                }
            }
        }
        delivery
    }
}

fn set_header(headers: &mut Value, name: &str, value: &str) {
    let object = headers.as_object_mut().unwrap();
    object.retain(|k, _| !k.eq_ignore_ascii_case(name));
    object.insert(name.to_string(), Value::from(value));
}

/// Another value for every id, type and covered header present.
fn other_headers(genuine: &Delivery, names: &[String]) -> Delivery {
    let mut forged = genuine.clone();
    for name in names {
        let present = genuine
            .headers
            .as_object()
            .unwrap()
            .keys()
            .any(|k| k.eq_ignore_ascii_case(name));
        if present || !name.contains("timestamp") {
            set_header(&mut forged.headers, name, &format!("forged-{name}"));
        }
    }
    forged
}

/// How many characters of PayPal's filler field are free for the forgery.
const FILLER: usize = 96;

/// `template` with the `FILLER` characters after `marker` (all `a`) set to
/// `a` or `c` so that the whole has CRC32 `target`. CRC32 is affine over
/// GF(2): each flipped bit changes the CRC by a fixed vector, so a linear
/// system picks which to flip.
fn forge_crc32(template: &[u8], marker: &[u8], target: u32) -> Vec<u8> {
    let start = template
        .windows(marker.len())
        .position(|w| w == marker)
        .expect("the filler field")
        + marker.len();
    let base = crc32(template);
    let mut pivots: [Option<(u32, u128)>; 32] = [None; 32];
    for i in 0..FILLER {
        let mut flipped = template.to_vec();
        flipped[start + i] ^= 0x02; // 'a' <-> 'c'
        let mut vector = crc32(&flipped) ^ base;
        let mut combination = 1u128 << i;
        for bit in (0..32).rev() {
            if vector >> bit & 1 == 0 {
                continue;
            }
            match pivots[bit] {
                Some((v, c)) => {
                    vector ^= v;
                    combination ^= c;
                }
                None => {
                    pivots[bit] = Some((vector, combination));
                    break;
                }
            }
        }
    }
    let mut need = target ^ base;
    let mut flips = 0u128;
    for bit in (0..32).rev() {
        if need >> bit & 1 == 1 {
            let (v, c) = pivots[bit].expect("the filler spans every CRC bit");
            need ^= v;
            flips ^= c;
        }
    }
    let mut forged = template.to_vec();
    for i in 0..FILLER {
        if flips >> i & 1 == 1 {
            forged[start + i] ^= 0x02;
        }
    }
    assert_eq!(crc32(&forged), target);
    forged
}

#[cfg(test)]
mod tests {
    use super::super::{authenticate, Headers, Request, Scheme};
    use super::*;

    fn check(sender: &Sender, delivery: &Delivery, at: i64) -> Result<(), super::super::Reason> {
        let registration = sender.registration();
        let scheme = Scheme::parse("t", "scheme", &registration.scheme).unwrap();
        let headers = Headers::from_json(&delivery.headers).unwrap();
        let request = Request {
            headers: &headers,
            body: &delivery.body,
            url: delivery.url,
        };
        authenticate(
            &scheme,
            &request,
            &[Some(registration.secret.as_str())],
            scheme.default_tolerance().max(60),
            at,
        )
        .map(|authentic| {
            // A delivery is only ever covered by headers its scheme declares.
            for header in authentic.covered_headers {
                assert!(
                    sender.entry.covers.headers.contains(header),
                    "{}: covers {header} without declaring it",
                    sender.name()
                );
            }
        })
        .map_err(|verdict| verdict.reason)
    }

    /// The matrix as data: every scheme's genuine delivery and every
    /// change a sender can make to it, signed now (`at`). With
    /// `SCHEME_MATRIX` set, written there as JSON lines, for the tests
    /// that hold another implementation of the schemes to this one (the
    /// portable edition's, tests/editions.rs).
    #[test]
    fn matrix_of_every_scheme() {
        let at = super::super::now_unix();
        let mut lines = Vec::new();
        for sender in Sender::all() {
            let registration = sender.registration();
            let genuine = sender.deliver("evt-genuine", "thing.created", at);
            let mut deliveries = vec![("the genuine delivery", genuine.clone())];
            deliveries.extend(sender.changes(&genuine, at));
            for other in sender.other_kinds(at) {
                let mut forged = other.delivery.clone();
                forged.body.push(b' ');
                deliveries.push((other.what, other.delivery));
                deliveries.push(("another kind with another body", forged));
            }
            for (change, delivery) in deliveries {
                lines.push(serde_json::json!({
                    "scheme": registration.scheme,
                    "secret": registration.secret,
                    "event_id_from": registration.event_id_from,
                    "event_type_from": registration.event_type_from,
                    "tolerance": sender.tolerance(),
                    // Signed with a private key, not a shared secret.
                    "public_key": matches!(sender.name(), "discord" | "telnyx" | "sendgrid" | "paypal" | "aws_sns"),
                    "at": at,
                    "change": change,
                    "headers": delivery.headers,
                    "body": hex::encode(&delivery.body),
                    "url": delivery.url,
                }));
            }
        }
        assert!(lines.len() >= 5 * catalog::catalog().len());
        if let Ok(path) = std::env::var("SCHEME_MATRIX") {
            let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
            std::fs::write(&path, text).expect("write the scheme matrix");
        }
    }

    /// A form is read before its signature is checked: one of at most
    /// MAX_FORM_FIELDS fields verifies, one of more is refused before any
    /// is decoded, even signed.
    #[test]
    fn a_form_of_too_many_fields_is_refused_unread() {
        use super::super::twilio::MAX_FORM_FIELDS;
        let at = 1_800_000_000;
        let sender = Sender::of("twilio");
        let form = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|i| format!("F{i}=%41{i}"))
                .collect::<Vec<_>>()
                .join("&")
                .into_bytes()
        };
        let most = sender.sign("evt_1", "thing.created", form(MAX_FORM_FIELDS), at);
        assert_eq!(check(&sender, &most, at), Ok(()));
        let more = sender.sign("evt_1", "thing.created", form(MAX_FORM_FIELDS + 1), at);
        assert_eq!(
            check(&sender, &more, at),
            Err(super::super::Reason::BadSignature)
        );
        // Empty pairs are no fields: '&&' between the most fields.
        let mut padded = form(MAX_FORM_FIELDS);
        padded.extend_from_slice(&[b'&'; 5000]);
        let padded = sender.sign("evt_1", "thing.created", padded, at);
        assert_eq!(check(&sender, &padded, at), Ok(()));
    }

    /// Every sender's delivery verifies, and so does the other body for
    /// exactly the schemes whose catalog entry says the body is not
    /// vouched for by a digest.
    #[test]
    fn genuine_deliveries_verify_and_other_bodies_only_where_the_catalog_says() {
        let at = 1_800_000_000;
        for sender in Sender::all() {
            let genuine = sender.deliver("evt_1", "thing.created", at);
            assert_eq!(check(&sender, &genuine, at), Ok(()), "{}", sender.name());
            let other = sender.other_body(&genuine, "evt_forged", "thing.refunded", at);
            assert_ne!(other.body, genuine.body, "{}", sender.name());
            assert_eq!(
                check(&sender, &other, at).is_ok(),
                !sender.entry.covers.body.vouches(),
                "{}: another body verifies exactly where the body is not vouched for",
                sender.name()
            );
        }
    }
}

#![cfg(feature = "client-tests")]
//! A forged request is read before its signature is checked, so what that
//! reading costs is what an unauthenticated sender can make a database
//! connection spend. Both editions, over real connections:
//!
//! - every routine of the portable edition that decodes, splits or
//!   escapes a request (percent-decoding, HubSpot's URL, form fields,
//!   headers) takes time linear in its input: per byte, 1 MB costs no
//!   more than 100 kB does, nor 100 kB more than 1 kB;
//! - under a scheme of each family, the largest hostile request with a
//!   wrong signature costs no more than the same request genuinely
//!   signed: nothing before the signature check grows faster than the
//!   HMAC of the body itself;
//! - a form of more fields than any provider sends is refused before one
//!   is decoded.
//!
//! Times are the best of a few runs, compared with each other on the same
//! server, never against a fixed figure.

mod common;

use common::*;
use hmac::{Hmac, Mac};
use postgres::types::ToSql;
use postgres::Client;
use std::time::{Duration, Instant};

const URL: &str = "https://hooks.example.com/in?x=1";
const SECRET: &str = "s3cret";

/// The best of `runs` runs of `sql` with `params`.
fn best(client: &mut Client, sql: &str, params: &[&(dyn ToSql + Sync)], runs: usize) -> Duration {
    let statement = client.prepare(sql).unwrap();
    (0..runs)
        .map(|_| {
            let started = Instant::now();
            client
                .query(&statement, params)
                .unwrap_or_else(|e| panic!("{sql}: {}", message(&e)));
            started.elapsed()
        })
        .min()
        .unwrap()
}

/// Time per byte does not grow with the input: `input(n)` for n of 1 kB,
/// 100 kB and 1 MB, given to `sql` as its one parameter.
fn linear<T: ToSql + Sync>(client: &mut Client, what: &str, sql: &str, input: impl Fn(usize) -> T) {
    let sizes = [1_000usize, 100_000, 1_000_000];
    let per_byte: Vec<f64> = sizes
        .iter()
        .map(|&n| {
            let value = input(n);
            best(client, sql, &[&value], 2).as_secs_f64() / n as f64
        })
        .collect();
    eprintln!(
        "{what}: {:.1} / {:.1} / {:.1} ns a byte at 1 kB / 100 kB / 1 MB",
        per_byte[0] * 1e9,
        per_byte[1] * 1e9,
        per_byte[2] * 1e9
    );
    // Quadratic work is ten times the cost a byte at ten times the size.
    assert!(
        per_byte[2] <= 3.0 * per_byte[1],
        "{what}: 1 MB costs {:.1} ns a byte, 100 kB {:.1}",
        per_byte[2] * 1e9,
        per_byte[1] * 1e9
    );
    assert!(
        per_byte[1] <= 3.0 * per_byte[0],
        "{what}: 100 kB costs {:.1} ns a byte, 1 kB {:.1}",
        per_byte[1] * 1e9,
        per_byte[0] * 1e9
    );
}

fn text_of(unit: &'static str) -> impl Fn(usize) -> String {
    move |n| unit.repeat(n / unit.len())
}

fn bytes_of(unit: &'static str) -> impl Fn(usize) -> Vec<u8> {
    move |n| unit.repeat(n / unit.len()).into_bytes()
}

#[test]
fn the_portable_edition_s_request_routines_are_linear() {
    if !portable() {
        eprintln!("NOT CHECKED here: the compiled edition's routines are Rust (its timings below)");
        return;
    }
    let mut db = installed_database("hostile_routines");
    let decode = "SELECT length(webhook._percent_decode($1))";
    linear(&mut db, "percent-decoding '%'", decode, text_of("%"));
    linear(&mut db, "percent-decoding '%41'", decode, text_of("%41"));
    linear(&mut db, "percent-decoding '%zz+'", decode, text_of("%zz+"));
    linear(
        &mut db,
        "percent-decoding bytes outside UTF-8",
        decode,
        text_of("\\377%"),
    );
    linear(
        &mut db,
        "HubSpot's URL",
        "SELECT length(webhook._hubspot_uri($1))",
        text_of("%3A%"),
    );
    linear(
        &mut db,
        "form fields '&'",
        "SELECT count(*) FROM webhook._form_pairs($1)",
        bytes_of("&"),
    );
    linear(
        &mut db,
        "form fields 'a=%'",
        "SELECT count(*) FROM webhook._form_pairs($1)",
        bytes_of("a=%&"),
    );
    // At most 1000 fields: large fields, then too many.
    linear(
        &mut db,
        "Twilio's fields, 1000 of them",
        "SELECT length(webhook._twilio_fields($1))",
        |n| {
            let field = format!("f=%{}", "%".repeat((n / 1000).saturating_sub(3)));
            vec![field; 1000].join("&").into_bytes()
        },
    );
    linear(
        &mut db,
        "Twilio's fields, too many",
        "SELECT webhook._twilio_fields($1) IS NULL",
        bytes_of("a&"),
    );
    linear(
        &mut db,
        "headers",
        "SELECT webhook._headers($1::text::jsonb) IS NULL",
        |n| {
            // Up to 1000 names of up to 8 kB each.
            let value = "v".repeat((n / 1000).clamp(1, 8000));
            let headers: serde_json::Map<String, serde_json::Value> =
                (0..1000.min(n / value.len()).max(1))
                    .map(|i| (format!("x-h{i}"), serde_json::Value::String(value.clone())))
                    .collect();
            serde_json::Value::Object(headers).to_string()
        },
    );
    // The decoded forms are the compiled edition's.
    let decoded: Vec<u8> = db
        .query_one(
            "SELECT webhook._percent_decode('%41%zz%4+%2b%%41' || E'\\\\377')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(decoded, b"A%zz%4 +%A\xff");
    let uri: String = db
        .query_one(
            "SELECT webhook._hubspot_uri('https://h/a%3a%2F%%3Fb%41?c=%2C')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(uri, "https://h/a:/%?b%41?c=,");
    let empty: bool = db
        .query_one(
            "SELECT webhook._percent_decode('') = '\\x'::bytea AND webhook._hubspot_uri('') = ''",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(empty);
}

fn hmac_sha1(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut mac = Hmac::<sha1::Sha1>::new_from_slice(key).unwrap();
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// A request: its headers and body.
type Request = (serde_json::Value, Vec<u8>);
/// A request signed with a key.
type Signer = Box<dyn Fn(&[u8]) -> Request>;

/// A hostile request of a family: its headers and body as signed with a
/// key (the secret, or a wrong one for the forgery).
struct Case {
    family: &'static str,
    scheme: &'static str,
    secret: String,
    url: Option<String>,
    signed_with: Signer,
}

/// Twilio's signature of a form whose fields' names sort as written and
/// whose escapes decode to themselves.
fn twilio_signed(key: &[u8], body: &[u8]) -> serde_json::Value {
    let signed: Vec<u8> = URL
        .bytes()
        .chain(body.iter().copied().filter(|&b| b != b'&' && b != b'='))
        .collect();
    serde_json::json!({ "X-Twilio-Signature": b64(&hmac_sha1(key, &signed)) })
}

/// A form of `n` fields, `f0000=…` on, each of `value`.
fn form(n: usize, value: &str) -> Vec<u8> {
    (0..n)
        .map(|i| format!("f{i:04}={value}"))
        .collect::<Vec<_>>()
        .join("&")
        .into_bytes()
}

/// Each family's hostile requests of about `size` bytes.
fn cases(size: usize) -> Vec<Case> {
    let now = sign::now();
    let mut cases = Vec::new();

    // HMAC over URL and sorted, decoded form fields: the most fields,
    // each all escapes that decode to themselves.
    cases.push(Case {
        family: "HMAC over the URL and form fields (Twilio)",
        scheme: "twilio",
        secret: SECRET.into(),
        url: Some(URL.into()),
        signed_with: Box::new(move |key| {
            let body = form(1000, &"%".repeat(size / 1000 - 7));
            (twilio_signed(key, &body), body)
        }),
    });

    // HMAC over fields inside a JSON body (Mailgun): the body parsed first.
    cases.push(Case {
        family: "HMAC over fields of a JSON body (Mailgun)",
        scheme: "mailgun",
        secret: SECRET.into(),
        url: None,
        signed_with: Box::new(move |key| {
            let token = "t".repeat(50);
            let signature = hex::encode(sign::hmac_sha256(
                key,
                &[now.to_string().as_bytes(), token.as_bytes()],
            ));
            let filler: Vec<serde_json::Value> =
                (0..size / 12).map(|i| serde_json::json!([i])).collect();
            let body = serde_json::json!({
                "signature": {"timestamp": now.to_string(), "token": token, "signature": signature},
                "event-data": {"id": "e", "event": "delivered", "filler": filler},
            });
            (serde_json::json!({}), body.to_string().into_bytes())
        }),
    });

    // Timestamped HMAC with a header grammar (Stripe): as many candidate
    // signatures as a delivery may carry, behind items that are none.
    cases.push(Case {
        family: "timestamped HMAC with a header grammar (Stripe)",
        scheme: "stripe",
        secret: SECRET.into(),
        url: None,
        signed_with: Box::new(move |key| {
            let body = vec![b'x'; size];
            let sig = hex::encode(sign::hmac_sha256(
                key,
                &[format!("{now}.").as_bytes(), &body],
            ));
            let padding: String = (0..7)
                .map(|_| format!(",v1={}", "0".repeat(64)))
                .chain((0..100).map(|i| format!(",x{i}={}", "0".repeat(64))))
                .collect();
            (
                serde_json::json!({ "Stripe-Signature": format!("t={now}{padding},v1={sig}") }),
                body,
            )
        }),
    });

    // HMAC over a decoded URL (HubSpot v3): the URL all escapes.
    let url = format!("https://hooks.example.com/in?q={}", "%3A%".repeat(1600));
    let decoded = url.replace("%3A", ":");
    cases.push(Case {
        family: "HMAC over a decoded URL (HubSpot)",
        scheme: "hubspot",
        secret: SECRET.into(),
        url: Some(url),
        signed_with: Box::new(move |key| {
            let body = vec![b'y'; size];
            let ts_ms = (now * 1000).to_string();
            let sig = b64(&sign::hmac_sha256(
                key,
                &[b"POST", decoded.as_bytes(), &body, ts_ms.as_bytes()],
            ));
            let headers = serde_json::json!({
                "X-HubSpot-Signature-v3": sig,
                "X-HubSpot-Request-Timestamp": ts_ms,
            });
            (headers, body)
        }),
    });

    // HMAC over the body (GitHub), and over id, timestamp and body
    // (Standard Webhooks).
    cases.push(Case {
        family: "HMAC over the body (GitHub)",
        scheme: "github",
        secret: SECRET.into(),
        url: None,
        signed_with: Box::new(move |key| {
            let body = "{".repeat(size);
            let headers = sign::github("d-1", "push", &body, std::str::from_utf8(key).unwrap());
            (headers, body.into_bytes())
        }),
    });
    let standard_key = b"a standard webhooks key!";
    cases.push(Case {
        family: "HMAC over id, timestamp and body (Standard Webhooks)",
        scheme: "standard",
        secret: format!("whsec_{}", b64(standard_key)),
        url: None,
        signed_with: Box::new(move |key| {
            let body = "[".repeat(size);
            let headers = sign::standard("msg_1", &body, now, &format!("whsec_{}", b64(key)));
            (headers, body.into_bytes())
        }),
    });

    // Public-key signatures: Ed25519 over the timestamp and body
    // (Discord), RSA over a line with the body's CRC32 (PayPal).
    cases.push(Case {
        family: "Ed25519 over the timestamp and body (Discord)",
        scheme: "discord",
        secret: hex::encode(ed25519_of(DISCORD_SEED).verifying_key().to_bytes()),
        url: None,
        signed_with: Box::new(move |key| {
            use ed25519_dalek::Signer;
            let ts = now.to_string();
            let body = format!(r#"{{"type":2,"pad":"{}"}}"#, "x".repeat(size - 20)).into_bytes();
            let sig = ed25519_of(key).sign(&[ts.as_bytes(), &body].concat());
            let headers = serde_json::json!({
                "X-Signature-Ed25519": hex::encode(sig.to_bytes()),
                "X-Signature-Timestamp": ts,
            });
            (headers, body)
        }),
    });
    cases.push(Case {
        family: "RSA over the transmission and the body's CRC32 (PayPal)",
        scheme: "paypal;webhook_id=WH-1",
        secret: sign::paypal_secret(PAYPAL_URL),
        url: None,
        signed_with: Box::new(move |key| {
            let body = format!(r#"{{"id":"WH-x","pad":"{}"}}"#, "x".repeat(size - 20)).into_bytes();
            let time = sign::rfc3339(now);
            // The suite's signer for its key; for any other key, a
            // signature of the same length that the certificate's key
            // did not make.
            let sig = if key.starts_with(PAYPAL_URL.as_bytes()) {
                sign::paypal_signature("tx-1", &time, "WH-1", &body)
            } else {
                let mut sig = vec![0x5a; 256];
                sig[..key.len().min(256)].copy_from_slice(&key[..key.len().min(256)]);
                sig
            };
            (sign::paypal("tx-1", &time, PAYPAL_URL, &sig), body)
        }),
    });
    cases
}

const DISCORD_SEED: &[u8] = b"a discord key";

const PAYPAL_URL: &str = "https://api.paypal.com/v1/notifications/certs/CERT-hostile";

/// An Ed25519 signing key made from any bytes.
fn ed25519_of(seed: &[u8]) -> ed25519_dalek::SigningKey {
    use sha2::Digest;
    ed25519_dalek::SigningKey::from_bytes(&sha2::Sha256::digest(seed).into())
}

impl Case {
    /// The genuine request.
    fn genuine(&self) -> Request {
        let key = match self.scheme {
            "standard" => b"a standard webhooks key!".to_vec(),
            "discord" => DISCORD_SEED.to_vec(),
            _ => self.secret.as_bytes().to_vec(),
        };
        (self.signed_with)(&key)
    }

    /// The same request signed with another key.
    fn forged(&self) -> Request {
        (self.signed_with)(b"another key of the same length!!")
    }
}

/// How long `webhook_verify_detail` takes on a request, and its reason.
fn verify_time(
    client: &mut Client,
    case: &Case,
    request: &(serde_json::Value, Vec<u8>),
) -> (Duration, String) {
    let sql = "SELECT (webhook_verify_detail($1, $2::text::jsonb, $3::bytea, ARRAY[$4], url => $5)).reason";
    let headers = request.0.to_string();
    let params: [&(dyn ToSql + Sync); 5] =
        [&case.scheme, &headers, &request.1, &case.secret, &case.url];
    let reason: String = client.query_one(sql, &params).unwrap().get(0);
    (best(client, sql, &params, 2), reason)
}

/// Per byte: a forgery of 1 MB costs no more than the genuine request of
/// 1 MB, nor than the genuine request of 100 kB does a byte.
#[test]
fn a_forgery_costs_no_more_than_the_genuine_request_in_every_family() {
    let mut db = installed_database("hostile_families");
    for (small, large) in cases(100_000).into_iter().zip(cases(1_000_000)) {
        let family = large.family;
        let (genuine, reason) = verify_time(&mut db, &large, &large.genuine());
        assert_eq!(reason, "ok", "{family}: the genuine request");
        let (forgery, reason) = verify_time(&mut db, &large, &large.forged());
        assert_eq!(reason, "bad_signature", "{family}: the forgery");
        let (genuine_small, reason) = verify_time(&mut db, &small, &small.genuine());
        assert_eq!(reason, "ok", "{family}: the genuine request of 100 kB");
        eprintln!("{family}: 1 MB genuine {genuine:?}, forged {forgery:?}; 100 kB genuine {genuine_small:?}");
        assert!(
            forgery <= genuine * 2 + Duration::from_millis(20),
            "{family}: the forgery took {forgery:?}, the genuine request {genuine:?}"
        );
        assert!(
            forgery <= genuine_small * 30 + Duration::from_millis(20),
            "{family}: the forgery of 1 MB took {forgery:?}, the genuine request of 100 kB {genuine_small:?}"
        );
    }
}

/// More fields than a provider sends: refused (bad_signature) however it is
/// signed, in no more time than a genuine form of as many bytes.
#[test]
fn a_form_of_too_many_fields_is_refused_unread() {
    let mut db = installed_database("hostile_fields");
    let twilio = cases(1_000_000)
        .into_iter()
        .find(|c| c.scheme == "twilio")
        .unwrap();
    let (genuine, _) = verify_time(&mut db, &twilio, &twilio.genuine());
    for body in [
        "a&".repeat(500_000).into_bytes(),
        "%=%&".repeat(250_000).into_bytes(),
        form(1001, "v"),
    ] {
        let request = (twilio_signed(SECRET.as_bytes(), &body), body);
        let (took, reason) = verify_time(&mut db, &twilio, &request);
        assert_eq!(reason, "bad_signature", "{} bytes", request.1.len());
        assert!(
            took <= genuine * 2 + Duration::from_millis(20),
            "{} bytes of too many fields took {took:?}; a genuine form of as many bytes {genuine:?}",
            request.1.len()
        );
    }
    // The most fields a form may have, genuinely signed, verifies.
    let body = form(1000, "v");
    let request = (twilio_signed(SECRET.as_bytes(), &body), body);
    assert_eq!(verify_time(&mut db, &twilio, &request).1, "ok");
}

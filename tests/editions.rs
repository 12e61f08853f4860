//! The two editions held to each other. The compiled extension and the
//! portable one (SQL and PL/pgSQL on pgcrypto, portable/) are installed
//! side by side in two databases of one server, and given the same calls
//! in lockstep: every answer, every error (SQLSTATE and message) and, at
//! the end, every table must be the same, ids aside.
//!
//! * the scheme catalog, and every delivery of the scheme matrix (the
//!   genuine senders of src/schemes/genuine.rs and every change a sender
//!   can make, exported by `make test` into `SCHEME_MATRIX`), verified
//!   under perturbations of secrets, URL, headers and body;
//! * verify_hmac over hex, base64, labels and wrong shapes;
//! * random sequences of claims, duplicates, completions, failures,
//!   extensions, lease expiries, claims that complete on commit, rolled
//!   back claims, and ordered events with ties and stale ones.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use serde_json::Value;
use std::collections::HashMap;

/// Whether this server can run the portable edition: it needs pgcrypto,
/// which every managed host has and a PostgreSQL built without its
/// contrib modules lacks. Where it is absent the tests say so, and what
/// they did not check.
fn portable_installable(test: &str) -> bool {
    pgcrypto_available(&format!(
        "editions: {test}: the portable edition compared with the compiled one"
    ))
}

/// One database of each edition, fresh, named after the test.
fn pair(test: &str) -> (Client, Client) {
    let compiled = format!("pgwi_ed_{test}_c");
    let portable = format!("pgwi_ed_{test}_p");
    let mut c = empty_database(&compiled);
    c.batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    portable_database(&portable);
    (connect(&compiled), connect(&portable))
}

/// The rows of a simple query (every value as text), or its error.
fn simple_answer(client: &mut Client, sql: &str) -> String {
    match client.simple_query(sql) {
        Ok(messages) => messages
            .iter()
            .filter_map(|m| match m {
                postgres::SimpleQueryMessage::Row(row) => Some(
                    (0..row.len())
                        .map(|i| row.get(i).unwrap_or("NULL").to_string())
                        .collect::<Vec<_>>()
                        .join("|"),
                ),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => answer(Err(e)),
    }
}

/// An answer, as text both editions can be compared by: the row, or the
/// error's SQLSTATE and message.
fn answer(result: Result<Vec<postgres::Row>, postgres::Error>) -> String {
    match result {
        Ok(rows) => rows
            .iter()
            .map(|row| {
                (0..row.len())
                    .map(|i| {
                        row.get::<_, Option<String>>(i)
                            .unwrap_or_else(|| "NULL".into())
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => match e.as_db_error() {
            Some(db) => format!("ERROR {}: {}", db.code().code(), db.message()),
            None => format!("ERROR {e}"),
        },
    }
}

#[test]
fn the_scheme_catalog_is_the_same() {
    if !portable_installable("the_scheme_catalog_is_the_same") {
        return;
    }
    let (mut c, mut p) = pair("catalog");
    let sql = "SELECT s::text FROM webhook_schemes() s ORDER BY s.scheme";
    let compiled = answer(c.query(sql, &[]));
    assert_eq!(compiled, answer(p.query(sql, &[])));
    assert!(compiled.lines().count() >= 20);
    // What each scheme signs, source by source.
    let sql = "SELECT s.scheme, src, webhook_source_signed(s.scheme, src)::text
                 FROM webhook_schemes() s,
                      unnest(ARRAY['body:id', 'header:webhook-id', 'header:X-Slack-Request-Timestamp',
                                   'header:svix-id|body:type', 'query:x', 'body:a|header:b']) src
                WHERE s.scheme NOT IN ('discord', 'sendgrid', 'paypal')
                ORDER BY 1, 2";
    assert_eq!(answer(c.query(sql, &[])), answer(p.query(sql, &[])));
}

/// One way of giving a delivery to webhook_verify_detail.
struct Perturbed {
    what: String,
    secrets: Vec<Option<String>>,
    url: Option<String>,
    headers: Value,
    body: Vec<u8>,
    /// The scheme's window, shifted by the time since the matrix was
    /// signed; false: the scheme's own window (NULL tolerance).
    shifted: bool,
}

/// The ways one delivery is given to webhook_verify_detail besides as it
/// came.
fn perturbations(line: &Value) -> Vec<Perturbed> {
    let secret = line["secret"].as_str().unwrap().to_string();
    let url = line["url"].as_str().map(str::to_string);
    let headers = line["headers"].clone();
    let body = hex::decode(line["body"].as_str().unwrap()).unwrap();
    let lower: Value = Value::Object(
        headers
            .as_object()
            .unwrap()
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
            .collect(),
    );
    let mut doubled = headers.as_object().unwrap().clone();
    if let Some((k, v)) = headers.as_object().unwrap().iter().next() {
        doubled.insert(k.to_ascii_uppercase(), v.clone());
    }
    let mut numbered = headers.as_object().unwrap().clone();
    if let Some(k) = headers.as_object().unwrap().keys().next().cloned() {
        numbered.insert(k, Value::from(42));
    }
    let mut flipped = body.clone();
    if !flipped.is_empty() {
        let middle = flipped.len() / 2;
        flipped[middle] ^= 0x01;
    }
    let s = |v: &str| Some(v.to_string());
    let p = |what: &str, secrets, url, headers, body, shifted| Perturbed {
        what: what.to_string(),
        secrets,
        url,
        headers,
        body,
        shifted,
    };
    vec![
        p(
            "as it came",
            vec![s(&secret)],
            url.clone(),
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "its window",
            vec![s(&secret)],
            url.clone(),
            headers.clone(),
            body.clone(),
            false,
        ),
        p(
            "rotated",
            vec![s("whsec_b3RoZXI="), None, s(""), s(&secret)],
            url.clone(),
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "a wrong secret",
            vec![s("not-the-secret")],
            url.clone(),
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "no secret",
            vec![None, s("")],
            url.clone(),
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "no url",
            vec![s(&secret)],
            None,
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "another url",
            vec![s(&secret)],
            s("https://hooks.example.com:443/in?x=1"),
            headers.clone(),
            body.clone(),
            true,
        ),
        p(
            "lower-case names",
            vec![s(&secret)],
            url.clone(),
            lower,
            body.clone(),
            true,
        ),
        p(
            "a name twice",
            vec![s(&secret)],
            url.clone(),
            Value::Object(doubled),
            body.clone(),
            true,
        ),
        p(
            "a number for a header",
            vec![s(&secret)],
            url.clone(),
            Value::Object(numbered),
            body.clone(),
            true,
        ),
        p(
            "no headers",
            vec![s(&secret)],
            url.clone(),
            Value::Object(Default::default()),
            body.clone(),
            true,
        ),
        p(
            "headers not an object",
            vec![s(&secret)],
            url.clone(),
            Value::from(vec![1, 2]),
            body.clone(),
            true,
        ),
        p(
            "one bit of the body",
            vec![s(&secret)],
            url.clone(),
            headers,
            flipped,
            true,
        ),
    ]
}

#[test]
fn every_delivery_of_the_scheme_matrix_is_judged_alike() {
    if !portable_installable("every_delivery_of_the_scheme_matrix_is_judged_alike") {
        return;
    }
    let (mut c, mut p) = pair("matrix");
    let sql = "SELECT v.valid::text, v.reason, extract(epoch FROM v.signed_at)::bigint::text
                 FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea, $4::text[],
                                            make_interval(secs => $5::bigint), $6) v";
    let now = sign::now();
    let (mut compared, mut public_keys) = (0, 0);
    let mut reasons: HashMap<String, usize> = HashMap::new();
    for line in scheme_matrix() {
        let scheme = line["scheme"].as_str().unwrap();
        let change = line["change"].as_str().unwrap();
        // The window as it was when the matrix was signed.
        let elapsed = now - line["at"].as_i64().unwrap();
        for Perturbed {
            what,
            secrets,
            url,
            headers,
            body,
            shifted,
        } in perturbations(&line)
        {
            let tolerance: Option<i64> = match (line["tolerance"].as_i64(), shifted) {
                (Some(t), true) => Some(t + elapsed),
                (Some(_), false) | (None, _) => None,
            };
            let args: [&(dyn postgres::types::ToSql + Sync); 6] = [
                &scheme,
                &headers.to_string(),
                &body,
                &secrets,
                &tolerance,
                &url,
            ];
            let compiled = answer(c.query(sql, &args));
            let portable = answer(p.query(sql, &args));
            let case = format!("{scheme}, {change}, {what}");
            assert_eq!(compiled, portable, "{case}");
            if line["public_key"].as_bool().unwrap() {
                public_keys += 1;
            }
            *reasons
                .entry(compiled.split('|').nth(1).unwrap_or(&compiled).to_string())
                .or_default() += 1;
            compared += 1;
        }
    }
    eprintln!(
        "editions: {compared} verdicts compared, {public_keys} of public-key schemes: {reasons:?}"
    );
    // The matrix reaches every verdict that matters.
    for reason in [
        "ok",
        "bad_signature",
        "malformed_header",
        "missing_header",
        "no_secret",
        "timestamp_too_old",
        "missing_url",
    ] {
        assert!(
            reasons.get(reason).copied().unwrap_or(0) > 0,
            "no case answered {reason}: {reasons:?}"
        );
    }
    assert!(public_keys > 0, "the public-key schemes were compared");
}

#[test]
fn verify_hmac_answers_alike() {
    if !portable_installable("verify_hmac_answers_alike") {
        return;
    }
    let (mut c, mut p) = pair("hmac");
    let key = b"k3y";
    let body = br#"{"id":"evt_1"}"#;
    let mac = |algorithm: &str| -> Vec<u8> {
        use hmac::Mac;
        match algorithm {
            "sha1" => hmac::Hmac::<sha1::Sha1>::new_from_slice(key)
                .unwrap()
                .chain_update(body)
                .finalize()
                .into_bytes()
                .to_vec(),
            "sha512" => hmac::Hmac::<sha2::Sha512>::new_from_slice(key)
                .unwrap()
                .chain_update(body)
                .finalize()
                .into_bytes()
                .to_vec(),
            _ => sign::hmac_sha256(key, &[body]),
        }
    };
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let url = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let mut cases: Vec<(String, String)> = Vec::new();
    for algorithm in ["sha256", "sha1", "sha512", "SHA-256", "md5", ""] {
        let m = mac(&algorithm.to_ascii_lowercase().replace('-', ""));
        for signature in [
            hex::encode(&m),
            hex::encode(&m).to_uppercase(),
            b64.encode(&m),
            url.encode(&m),
            format!("sha256={}", hex::encode(&m)),
            format!("sha1={}", hex::encode(&m)),
            format!(" {} ", hex::encode(&m)),
            hex::encode(&m[1..]),
            format!("{}00", hex::encode(&m)),
            format!("{}x", &b64.encode(&m)[1..]),
            // The last character's unused bits set: not canonical base64.
            {
                const ALPHABET: &str =
                    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
                let mut unpadded = b64.encode(&m).trim_end_matches('=').to_string();
                let last = unpadded.pop().unwrap();
                let index = ALPHABET.find(last).unwrap() | 1;
                unpadded.push(ALPHABET.as_bytes()[index] as char);
                unpadded
            },
            "not a signature".into(),
            String::new(),
        ] {
            cases.push((algorithm.to_string(), signature));
        }
    }
    let sql = "SELECT verify_hmac($1, $2::bytea, $3, $4)::text";
    for (algorithm, signature) in &cases {
        for secret in ["k3y", "other", ""] {
            let args: [&(dyn postgres::types::ToSql + Sync); 4] =
                [&secret, &body.as_slice(), signature, algorithm];
            assert_eq!(
                answer(c.query(sql, &args)),
                answer(p.query(sql, &args)),
                "verify_hmac({secret:?}, body, {signature:?}, {algorithm:?})"
            );
        }
    }
    let nulls = "SELECT verify_hmac(NULL, 'x'::bytea, 'aa'), verify_hmac('k', NULL::bytea, 'aa'),
                        verify_hmac('k', 'x'::bytea, NULL), verify_hmac('k', 'x'::bytea, 'aa', NULL)";
    for one in nulls.trim_start_matches("SELECT ").split("), ") {
        let sql = format!("SELECT {})", one.trim_end_matches(')'));
        assert_eq!(
            answer(c.query(&sql, &[])),
            answer(p.query(&sql, &[])),
            "{sql}"
        );
    }
}

// ---------------------------------------------------------------------------
// Claims in lockstep.

/// The two sides of a lockstep test, each in a fresh database of its
/// edition.
fn sides(test: &str) -> [Side; 2] {
    let (c, p) = pair(test);
    [c, p].map(|client| Side {
        client,
        deliveries: Vec::new(),
    })
}

/// A small deterministic generator (xorshift), so that a failing sequence
/// is found again from its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// One side of the lockstep: its connection and the ids its deliveries got.
struct Side {
    client: Client,
    deliveries: Vec<String>,
}

impl Side {
    /// `sql` with `$D<n>` replaced by this side's n-th delivery id; the
    /// answer with this side's ids replaced by `D<n>`, so that the two
    /// sides compare. A claim's id is remembered.
    fn run(&mut self, sql: &str, remember: bool) -> String {
        let mut sql = sql.to_string();
        for (n, id) in self.deliveries.iter().enumerate().rev() {
            sql = sql.replace(&format!("$D{n}"), &format!("'{id}'::uuid"));
        }
        let text = simple_answer(&mut self.client, &sql);
        // A transaction an error left open is closed.
        let _ = self.client.batch_execute("ROLLBACK");
        if remember {
            self.normalize(text)
        } else {
            self.replace_known(text)
        }
    }

    /// Known ids replaced by their names, any other by `UUID`.
    fn replace_known(&self, mut text: String) -> String {
        for (n, id) in self.deliveries.iter().enumerate() {
            text = text.replace(id, &format!("D{n}"));
        }
        for word in text
            .clone()
            .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        {
            if word.len() == 36 && word.matches('-').count() == 4 {
                text = text.replace(word, "UUID");
            }
        }
        text
    }

    fn normalize(&mut self, mut text: String) -> String {
        // A new id (a claim's) is remembered in order of appearance.
        for word in text
            .clone()
            .split(|c: char| !(c.is_ascii_hexdigit() || c == '-'))
        {
            if word.len() == 36
                && word.matches('-').count() == 4
                && !self.deliveries.iter().any(|d| d == word)
            {
                self.deliveries.push(word.to_string());
            }
        }
        for (n, id) in self.deliveries.iter().enumerate() {
            text = text.replace(id, &format!("D{n}"));
        }
        text
    }
}

/// A random operation: SQL with `$D<n>` for the n-th delivery's id.
fn operation(rng: &mut Rng, deliveries: usize, owners: &[usize]) -> String {
    let provider = ["plain", "ordered", "ties"][rng.below(3)];
    let event = format!("evt_{}", rng.below(8));
    let entity = format!("ent_{}", rng.below(2));
    let order = rng.below(5);
    let payload = format!(
        r#"{{"id": "{event}", "entity": "{entity}", "seq": {order}, "v": {}}}"#,
        rng.below(2)
    );
    // Mostly one of the latest deliveries, now and then any.
    let delivery = match deliveries {
        0 => return format!(
            "SELECT id, claimed, status, attempts, result FROM webhook_claim('{provider}', '{event}', 'thing.updated', '{payload}'::jsonb, 'sig')"
        ),
        n if rng.below(4) == 0 || owners.is_empty() => n - 1 - rng.below(n.min(4)),
        _ => owners[owners.len() - 1 - rng.below(owners.len().min(6))],
    };
    let lease = ["NULL", "'1 hour'", "'1 millisecond'"][rng.below(3)];
    let claim = |complete_on_commit: bool| {
        format!(
            "SELECT id, claimed, status, attempts, result FROM webhook_claim('{provider}', '{event}', 'thing.updated', '{payload}'::jsonb, 'sig', lease => {}, complete_on_commit => {complete_on_commit})",
            if complete_on_commit { "NULL" } else { lease }
        )
    };
    match rng.below(14) {
        11 => format!("SELECT webhook_requeue('{provider}', '{event}')"),
        12 => format!("SELECT webhook_requeue_dead('{provider}', error_like => 'boom%')"),
        13 => format!("SELECT webhook_outbound_key($D{delivery}, 'charge')"),
        0..=2 => claim(false),
        3 => claim(true),
        4 => format!("SELECT webhook_complete($D{delivery}, '{{\"done\": {}}}')", rng.below(3)),
        5 | 10 => format!("SELECT webhook_fail($D{delivery}, 'boom {}', permanent => {})", rng.below(3), rng.below(6) == 0),
        6 => format!("SELECT webhook_extend($D{delivery}, '{}') > now()", ["1 hour", "1 millisecond", "0 seconds"][rng.below(3)]),
        7 => format!(
            "SELECT id, claimed, status, attempts FROM webhook_claim('{provider}', '{event}', 'thing.updated', '{payload}'::text, NULL, lease => {lease})"
        ),
        8 => format!("SELECT webhook_complete($D{delivery})"),
        _ => "SELECT pg_sleep(0.002)".into(),
    }
}

/// Everything both editions wrote, ids replaced by their position among
/// the side's deliveries.
fn tables(side: &mut Side) -> String {
    let sql = "
        SELECT 'event', provider, event_id, event_type, status::text, attempts::text, claim_id::text,
               (lease_expires_at IS NULL)::text, (processed_at IS NULL)::text, last_error,
               result::text, requeues::text, entity_key, order_value::text
          FROM webhook.events
        UNION ALL
        SELECT 'delivery', provider, event_id, event_type, claim_status::text, payload_mismatch::text,
               id::text, reject_reason, (raw_body IS NULL)::text, payload::text, signature,
               claim_completes::text, secret_fingerprint, NULL
          FROM webhook.delivery_log
        UNION ALL
        SELECT 'failure', delivery_id::text, error_message, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL
          FROM webhook.delivery_failures
        UNION ALL
        SELECT 'watermark', provider, consumer, entity_key, order_value::text, event_id, NULL, NULL,
               NULL, NULL, NULL, NULL, NULL, NULL
          FROM webhook.watermarks
        UNION ALL
        SELECT 'view', provider, event_id, processing_status, error_message, NULL, id::text, NULL, NULL,
               NULL, NULL, NULL, NULL, NULL
          FROM webhook.deliveries";
    let text = simple_answer(&mut side.client, sql);
    let mut lines: Vec<String> = side.normalize(text).lines().map(str::to_string).collect();
    lines.sort();
    lines.join("\n")
}

#[test]
fn random_claim_sequences_answer_and_write_alike() {
    if !portable_installable("random_claim_sequences_answer_and_write_alike") {
        return;
    }
    let mut sides = sides("claims");
    for side in sides.iter_mut() {
        side.client
            .batch_execute(
                "SET webhook.max_attempts = 2;
                 SELECT count(*) FROM webhook_register_provider('plain', secret => 'a-secret',
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:id');
                 SELECT count(*) FROM webhook_register_provider('ordered', secret => 'a-secret',
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:id',
                     entity_key_from => 'body:entity', order_from => 'body:seq');
                 SELECT count(*) FROM webhook_register_provider('ties', secret => 'a-secret',
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:id',
                     entity_key_from => 'body:entity', order_from => 'body:seq', ties => 'stale');",
            )
            .unwrap();
    }
    let seed: u64 = std::env::var("EDITIONS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let mut rng = Rng(seed.max(1));
    let mut statuses: HashMap<String, usize> = HashMap::new();
    // The deliveries that were answered claimed or retry: mostly these are
    // completed, failed and extended.
    let mut owners: Vec<usize> = Vec::new();
    for step in 0..1000 {
        let op = operation(&mut rng, sides[0].deliveries.len(), &owners);
        // Now and then inside a transaction rolled back to a savepoint.
        let rolled_back = rng.below(12) == 0;
        let sql = if rolled_back {
            format!("BEGIN; SAVEPOINT s; {op}; ROLLBACK TO SAVEPOINT s; COMMIT")
        } else {
            op.clone()
        };
        let answers: Vec<String> = sides
            .iter_mut()
            // A claim rolled back is not referred to later: the compiled
            // edition's session remembers its own claims, rolled back or
            // not, and names an unknown one "no delivery" where a session
            // that never made it (and the portable edition) says "no
            // delivery or lease", with the same SQLSTATE.
            .map(|side| side.run(&sql, !rolled_back))
            .collect();
        assert_eq!(answers[0], answers[1], "seed {seed:#x}, step {step}: {sql}");
        if let Some(owner) = answers[0]
            .strip_prefix('D')
            .and_then(|rest| rest.split_once("|t|"))
            .and_then(|(n, _)| n.parse().ok())
        {
            owners.push(owner);
        }
        let status = answers[0]
            .split('|')
            .nth(2)
            .unwrap_or(&answers[0])
            .to_string();
        *statuses
            .entry(status.chars().take(40).collect())
            .or_default() += 1;
        assert_eq!(
            sides[0].deliveries.len(),
            sides[1].deliveries.len(),
            "step {step}: {sql}"
        );
    }
    let [c, p] = &mut sides;
    assert_same_tables(&tables(c), &tables(p), &format!("seed {seed:#x}"));
    eprintln!("editions: {statuses:?}");
    for status in [
        "claimed",
        "duplicate",
        "retry",
        "in_progress",
        "dead",
        "stale",
    ] {
        assert!(
            statuses.keys().any(|s| s == status),
            "no step was answered {status}: {statuses:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// webhook_receive in lockstep.

/// What both editions wrote for the providers of webhook_receive: the
/// events, the archive (rejections included, with what a rejection keeps),
/// the bindings and the keys' uses.
fn received_tables(side: &mut Side) -> String {
    let sql = "
        SELECT 'event', provider, event_id, event_type, status::text, attempts::text, claim_id::text,
               last_error, entity_key, order_value::text, NULL, NULL, NULL
          FROM webhook.events
        UNION ALL
        SELECT 'delivery', provider, event_id, event_type, claim_status::text, payload_mismatch::text,
               id::text, reject_reason, encode(sha256(raw_body), 'hex'), payload::text, signature,
               headers::text, concat_ws(',', body_size, encode(body_sha256, 'hex'), secret_fingerprint)
          FROM webhook.delivery_log
        UNION ALL
        SELECT 'binding', provider, encode(digest, 'hex'), event_id, encode(body_digest, 'hex'), NULL, NULL,
               NULL, NULL, NULL, NULL, NULL, NULL
          FROM webhook.signature_bindings
        UNION ALL
        SELECT 'use', provider, fingerprint, (last_used_at IS NOT NULL)::text, NULL, NULL, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL
          FROM webhook.secret_uses";
    let text = simple_answer(&mut side.client, sql);
    let mut lines: Vec<String> = side.normalize(text).lines().map(str::to_string).collect();
    lines.sort();
    lines.join("\n")
}

/// SQL literal of a text value.
fn literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

#[test]
fn every_delivery_of_the_scheme_matrix_is_received_alike() {
    if !portable_installable("received") {
        return;
    }
    let mut sides = sides("received");
    let now = sign::now();
    let mut statuses: HashMap<String, usize> = HashMap::new();
    let mut registered = std::collections::HashSet::new();
    // Claimed, then queued (inbox mode) under providers of their own.
    let lines: Vec<(bool, serde_json::Value)> = [false, true]
        .into_iter()
        .flat_map(|inbox| scheme_matrix().into_iter().map(move |line| (inbox, line)))
        .collect();
    for (inbox, line) in lines {
        let scheme = line["scheme"].as_str().unwrap();
        let provider = format!(
            "{}-{}",
            if inbox { "q" } else { "m" },
            scheme
                .split(';')
                .next()
                .unwrap()
                .replace(|c: char| !c.is_ascii_alphanumeric(), "")
        );
        let public_key = line["public_key"].as_bool().unwrap();
        if registered.insert(provider.clone()) {
            // The scheme's window, shifted by the time since the matrix
            // was signed.
            let elapsed = now - line["at"].as_i64().unwrap();
            let tolerance = match line["tolerance"].as_i64() {
                Some(t) => format!("make_interval(secs => {})", t + elapsed),
                None => "NULL".into(),
            };
            let source = |key: &str| match line[key].as_str() {
                Some(s) => literal(s),
                None => "NULL".into(),
            };
            let sql = format!(
                "SELECT name, scheme FROM webhook_register_provider({}, secret => {}, scheme => {}, \
                 tolerance => {tolerance}, event_id_from => {}, event_type_from => {})",
                literal(&provider),
                literal(line["secret"].as_str().unwrap()),
                literal(scheme),
                source("event_id_from"),
                source("event_type_from"),
            );
            let [c, p] = &mut sides;
            let compiled = c.run(&sql, true);
            let portable = p.run(&sql, true);
            if public_key {
                assert!(!compiled.starts_with("ERROR"), "{provider}: {compiled}");
            }
            assert_eq!(compiled, portable, "{provider}: registration");
        }
        let headers = line["headers"].to_string();
        let sql = format!(
            "SELECT id, claimed, status, attempts, result, http_status, reason, event_id, event_type, \
                    event_type_signed, response, response_type \
               FROM webhook_receive({}, {}::jsonb, '\\x{}'::bytea, inbox => {inbox}, url => {})",
            literal(&provider),
            literal(&headers),
            line["body"].as_str().unwrap(),
            line["url"].as_str().map_or("NULL".into(), literal),
        );
        let change = line["change"].as_str().unwrap();
        let answers: Vec<String> = sides.iter_mut().map(|side| side.run(&sql, true)).collect();
        assert_eq!(answers[0], answers[1], "{provider}, {change}");
        let status = answers[0]
            .split('|')
            .nth(2)
            .unwrap_or(&answers[0])
            .to_string();
        *statuses
            .entry(format!(
                "{status}/{}",
                answers[0].split('|').nth(6).unwrap_or("")
            ))
            .or_default() += 1;

        // The genuine delivery, failed and then completed: its
        // redeliveries are a retry, then duplicates.
        // In inbox mode, a worker leases it: failed, then completed.
        if change == "the genuine delivery" && answers[0].contains("|queued|") {
            for step in [
                "SELECT id, provider, event_id, attempts, origin FROM webhook_next(provider => '{p}', lease => '1 hour')",
                "SELECT webhook_fail($D{last}, 'downstream timeout', retry_in => '0 seconds')",
                "SELECT id, provider, event_id, attempts, origin FROM webhook_next(provider => '{p}', lease => '1 hour')",
                "SELECT webhook_complete($D{last})",
            ] {
                let step = step
                    .replace("{p}", &provider)
                    .replace("{last}", &(sides[0].deliveries.len() - 1).to_string());
                let answers: Vec<String> = sides.iter_mut().map(|side| side.run(&step, true)).collect();
                assert_eq!(answers[0], answers[1], "{provider}: {step}");
            }
        }
        if change == "the genuine delivery" && answers[0].contains("|claimed|") {
            let id = answers[0].split('|').next().unwrap().to_string();
            for step in 0..4 {
                // The retry's id is known once it is answered.
                let finish = match step {
                    0 => format!("SELECT webhook_fail(${id}, 'downstream timeout')"),
                    2 => format!(
                        "SELECT webhook_complete($D{}, '{{\"ok\": true}}')",
                        sides[0].deliveries.len() - 1
                    ),
                    _ => sql.clone(),
                };
                let answers: Vec<String> = sides
                    .iter_mut()
                    .map(|side| side.run(&finish, true))
                    .collect();
                assert_eq!(answers[0], answers[1], "{provider}: {finish}");
                if let Some(status) = answers[0].split('|').nth(2) {
                    *statuses
                        .entry(format!(
                            "{status}/{}",
                            answers[0].split('|').nth(6).unwrap_or("")
                        ))
                        .or_default() += 1;
                }
            }
        }
    }
    let [c, p] = &mut sides;
    assert_same_tables(&received_tables(c), &received_tables(p), "webhook_receive");
    eprintln!("editions: webhook_receive answered {statuses:?}");
    // Every endpoint check of every scheme the portable edition verifies
    // (Slack's, Zoom's, Twitch's two) is part of the matrix.
    for status in [
        "claimed/ok",
        "rejected/bad_signature",
        "rejected/replayed",
        "duplicate/ok",
        "retry/ok",
        "handshake/handshake",
    ] {
        assert!(
            statuses.keys().any(|s| s == status),
            "no delivery was answered {status}: {statuses:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The inbox in lockstep.

/// A random inbox operation: SQL with `$D<n>` for the n-th id (a
/// delivery's or a lease's).
fn inbox_operation(rng: &mut Rng, ids: usize, leases: &[usize]) -> String {
    let provider = ["queue", "split", "line"][rng.below(3)];
    let event = format!("evt_{}", rng.below(10));
    let entity = format!("ent_{}", rng.below(3));
    let payload = format!(
        r#"{{"id": "{event}", "entity": "{entity}", "seq": {}, "kind": "{}"}}"#,
        rng.below(6),
        ["a", "b"][rng.below(2)]
    );
    let lease = ["'1 hour'", "'1 millisecond'"][rng.below(2)];
    let consumer = ["default", "billing", "audit"][rng.below(3)];
    let pick = |rng: &mut Rng| -> usize {
        match leases.len() {
            0 => ids.saturating_sub(1),
            n => leases[n - 1 - rng.below(n.min(5))],
        }
    };
    if ids == 0 {
        return format!("SELECT id, queued, status FROM webhook_enqueue('{provider}', '{event}', 'thing', '{payload}'::jsonb)");
    }
    let one = pick(rng);
    let other = pick(rng);
    match rng.below(14) {
        0..=2 => format!("SELECT id, queued, status FROM webhook_enqueue('{provider}', '{event}', 'thing', '{payload}'::jsonb)"),
        3..=5 => format!(
            "SELECT id, provider, event_id, event_type, payload, attempts, consumer, delivery_id, replay_id, traceparent, origin
               FROM webhook_next({}, consumer => '{consumer}', provider => {}, lease => {lease})",
            1 + rng.below(3),
            ["NULL", "'queue'", "'split'", "'line'"][rng.below(4)]
        ),
        6 | 7 => format!("SELECT webhook_complete($D{one}, '{{\"n\": {}}}')", rng.below(3)),
        8 => format!(
            "SELECT webhook_fail($D{one}, 'boom', retry_in => '{}', permanent => {})",
            ["0 seconds", "1 hour"][rng.below(2)],
            rng.below(6) == 0
        ),
        9 => format!("SELECT webhook_extend($D{one}, '1 hour') > now()"),
        10 => format!("SELECT webhook_complete_batch(ARRAY[$D{one}, $D{other}])"),
        11 => format!("SELECT webhook_fail_batch(ARRAY[$D{one}, $D{other}], 'batch boom', retry_in => '0 seconds')"),
        12 => ["SELECT webhook_pause('queue')", "SELECT webhook_resume('queue')",
               "SELECT webhook_set_limit('default', 'split', max_leases => 1)",
               "SELECT webhook_quarantine('line', 'ent_1')", "SELECT webhook_release('line', 'ent_1')"][rng.below(5)]
            .to_string(),
        _ => "SELECT pg_sleep(0.002)".into(),
    }
}

/// Everything the inbox wrote, ids by position.
fn inbox_tables(side: &mut Side) -> String {
    let sql = "
        SELECT 'row', provider, event_id, consumer, event_type, status::text, attempts::text, claim_id::text,
               delivery_id::text, last_error, result::text, entity_key, order_value::text
          FROM webhook.inbox
        UNION ALL
        SELECT 'failure', claim_id::text, provider, event_id, consumer, attempt::text, error_message,
               lease_expired::text, NULL, NULL, NULL, NULL, NULL
          FROM webhook.inbox_failures
        UNION ALL
        SELECT 'event', provider, event_id, event_type, status::text, attempts::text, claim_id::text,
               entity_key, order_value::text, NULL, NULL, NULL, NULL
          FROM webhook.events
        UNION ALL
        SELECT 'watermark', provider, consumer, entity_key, order_value::text, event_id, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL
          FROM webhook.watermarks
        UNION ALL
        SELECT 'view', provider, event_id, processing_status, claim_status::text, id::text, NULL, NULL, NULL,
               NULL, NULL, NULL, NULL
          FROM webhook.deliveries";
    let text = simple_answer(&mut side.client, sql);
    let mut lines: Vec<String> = side.normalize(text).lines().map(str::to_string).collect();
    lines.sort();
    lines.join("\n")
}

#[test]
fn random_inbox_sequences_answer_and_write_alike() {
    if !portable_installable("random_inbox_sequences_answer_and_write_alike") {
        return;
    }
    let mut sides = sides("inbox");
    for side in sides.iter_mut() {
        side.client
            .batch_execute(
                "SET webhook.max_attempts = 3;
                 SELECT count(*) FROM webhook_register_provider('queue', secret => 'a-secret', inbox => true,
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:kind');
                 SELECT count(*) FROM webhook_register_provider('split', secret => 'a-secret', inbox => true,
                     consumers => '{billing,audit}',
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:kind');
                 SELECT count(*) FROM webhook_register_provider('line', secret => 'a-secret', inbox => true,
                     scheme => 'hmac;header=X-Sig', event_id_from => 'body:id', event_type_from => 'body:kind',
                     entity_key_from => 'body:entity', order_from => 'body:seq', fifo => true);",
            )
            .unwrap();
    }
    let seed: u64 = std::env::var("EDITIONS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1);
    let mut rng = Rng(seed.max(1));
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut leases: Vec<usize> = Vec::new();
    for step in 0..800 {
        let op = inbox_operation(&mut rng, sides[0].deliveries.len(), &leases);
        let before = sides[0].deliveries.len();
        let answers: Vec<String> = sides.iter_mut().map(|side| side.run(&op, true)).collect();
        assert_eq!(answers[0], answers[1], "seed {seed:#x}, step {step}: {op}");
        assert_eq!(
            sides[0].deliveries.len(),
            sides[1].deliveries.len(),
            "step {step}: {op}"
        );
        if op.contains("webhook_next") {
            // The leases are the first column of each row.
            for line in answers[0].lines() {
                if let Some(n) = line
                    .split('|')
                    .next()
                    .and_then(|d| d.strip_prefix('D'))
                    .and_then(|n| n.parse().ok())
                {
                    leases.push(n);
                }
            }
            let n = answers[0]
                .lines()
                .filter(|l| !l.is_empty() && !l.starts_with("ERROR"))
                .count();
            *seen.entry(format!("leased {}", n.min(1))).or_default() += 1;
        }
        let _ = before;
        let kind = answers[0]
            .split(['|', ':'])
            .find(|w| w.starts_with("ERROR") || ["queued", "duplicate"].contains(w))
            .unwrap_or("")
            .to_string();
        *seen.entry(kind).or_default() += 1;
    }
    let [c, p] = &mut sides;
    assert_same_tables(
        &inbox_tables(c),
        &inbox_tables(p),
        &format!("inbox, seed {seed:#x}"),
    );
    eprintln!("editions: inbox {seen:?}");
    for kind in ["queued", "duplicate", "leased 1", "ERROR 55000"] {
        assert!(
            seen.keys().any(|s| s == kind),
            "no step was {kind}: {seen:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// One API.

#[test]
fn both_editions_have_the_same_api() {
    if !portable_installable("api") {
        return;
    }
    let (mut c, mut p) = pair("api");
    // Every function and procedure of the API, with its arguments, their
    // names and defaults, and its result; every table, view and type of
    // schema webhook with its columns; the internal functions (webhook._*)
    // are each edition's own.
    let sql = "
        SELECT 'routine', p.prokind::text, p.proname::text, pg_get_function_arguments(p.oid),
               coalesce(pg_get_function_result(p.oid), ''),
               -- The scheme functions anyone may call run as the owner in
               -- the portable edition, to reach its internal functions.
               (p.prosecdef OR p.proname IN ('webhook_schemes', 'verify_hmac', 'webhook_verify',
                                             'webhook_verify_detail', 'webhook_source_signed',
                                             'webhook_check_key'))::text
          FROM pg_proc p
         WHERE (p.pronamespace = 'public'::regnamespace
                OR (p.pronamespace = 'webhook'::regnamespace AND p.proname NOT LIKE '\\_%'))
           -- pgcrypto's, where the portable edition's install put it.
           AND NOT EXISTS (SELECT FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
                            WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                              AND x.extname <> 'pg_webhook_inbox')
        UNION ALL
        SELECT 'relation', c.relkind::text, c.relname::text, a.attname::text, format_type(a.atttypid, a.atttypmod),
               a.attnotnull::text
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
         WHERE c.relnamespace = 'webhook'::regnamespace AND c.relkind IN ('r', 'v', 'p', 'c')
           AND c.relname NOT LIKE '\\_%' AND c.relname NOT LIKE 'delivery\\_log\\_%'
        UNION ALL
        SELECT 'enum', t.typname::text, e.enumlabel::text, e.enumsortorder::text, NULL, NULL
          FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid
         WHERE t.typnamespace = 'webhook'::regnamespace
         ORDER BY 1, 2, 3, 4, 5";
    let compiled = simple_answer(&mut c, sql);
    let portable = simple_answer(&mut p, sql);
    assert!(
        compiled.lines().count() > 300,
        "{}",
        compiled.lines().count()
    );
    assert_same_tables(&compiled, &portable, "the API");
}

// ---------------------------------------------------------------------------
// Idempotency keys of the application's own API, in lockstep.

fn keyed_operation(rng: &mut Rng, ids: usize) -> String {
    let key = format!("key_{}", rng.below(5));
    let fingerprint = ["sha256:a", "sha256:b"][rng.below(2)];
    let request = if ids == 0 {
        0
    } else {
        ids - 1 - rng.below(ids.min(4))
    };
    if ids == 0 || rng.below(3) == 0 {
        return format!(
            "SELECT outcome, request_id, http_status, recovery_point, recovery, response_headers, response_body
               FROM idempotency_begin('orders', '{key}', '{fingerprint}', lease => '{}')",
            ["1 hour", "1 millisecond"][rng.below(2)]
        );
    }
    match rng.below(6) {
        0 | 1 => format!("SELECT idempotency_checkpoint($D{request}, 'step_{}', '{{\"n\": {}}}')", rng.below(3), rng.below(9)),
        2 => format!("SELECT idempotency_finish($D{request}, {}, 'done', '{{\"x-id\": \"1\"}}')", [200, 201, 700][rng.below(3)]),
        3 => format!("SELECT idempotency_fail($D{request}, 'boom', retryable => true)"),
        4 => format!("SELECT idempotency_fail($D{request}, 'final', retryable => false, response_status => 502)"),
        _ => format!(
            "SELECT idempotency_fingerprint('{}', '/orders/{}', 'body'), webhook_outbound_key('stripe', '{key}', 'refund')",
            ["post", "PUT"][rng.below(2)],
            rng.below(3)
        ),
    }
}

#[test]
fn random_keyed_requests_answer_and_write_alike() {
    if !portable_installable("random_keyed_requests_answer_and_write_alike") {
        return;
    }
    let mut sides = sides("keys");
    let mut rng = Rng(7);
    let mut seen: HashMap<String, usize> = HashMap::new();
    for step in 0..500 {
        let op = keyed_operation(&mut rng, sides[0].deliveries.len());
        let answers: Vec<String> = sides.iter_mut().map(|side| side.run(&op, true)).collect();
        assert_eq!(answers[0], answers[1], "step {step}: {op}");
        let kind = answers[0]
            .split(['|', ':'])
            .next()
            .unwrap_or("")
            .to_string();
        *seen.entry(kind).or_default() += 1;
    }
    let sql = "SELECT scope, key, fingerprint, status::text, request_id::text, attempts::text, recovery_point,
                      recovery::text, response_status::text, response_headers::text, response_body, last_error,
                      (locked_until IS NULL)::text, (finished_at IS NULL)::text
                 FROM webhook.idempotency_keys ORDER BY scope, key";
    let [c, p] = &mut sides;
    let (compiled, portable) = (
        simple_answer(&mut c.client, sql),
        simple_answer(&mut p.client, sql),
    );
    assert_same_tables(
        &c.normalize(compiled),
        &p.normalize(portable),
        "idempotency keys",
    );
    eprintln!("editions: keyed requests {seen:?}");
    for kind in ["new", "replay", "mismatch", "in_progress", "ERROR 55000"] {
        assert!(
            seen.keys().any(|s| s == kind),
            "no step was {kind}: {seen:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Moving from the portable edition to the compiled one.

#[test]
fn the_portable_edition_moves_to_the_compiled_one_keeping_every_row() {
    if !portable_installable("move") {
        return;
    }
    let (source, target) = ("pgwi_ed_move_p", "pgwi_ed_move_c");
    let mut p = portable_database(source);
    let secret = "whsec_move";
    p.batch_execute(&format!(
        "SELECT webhook_create_partitions();
         SELECT count(*) FROM webhook_register_provider('stripe', secret => '{secret}');
         SELECT count(*) FROM webhook_register_provider('queue', secret => 'q', scheme => 'hmac;header=X-Sig',
             event_id_from => 'body:id', event_type_from => 'body:type', inbox => true,
             entity_key_from => 'body:entity', order_from => 'body:seq');
         SELECT webhook_complete(c.id, '{{\"charged\": 1}}')
           FROM webhook_claim('stripe', 'evt_done', 'invoice.paid', '{{\"id\": \"evt_done\"}}'::jsonb, NULL) c;
         SELECT webhook_fail(c.id, 'downstream timeout')
           FROM webhook_claim('stripe', 'evt_failed', 'invoice.paid', '{{\"id\": \"evt_failed\"}}'::jsonb, NULL) c;
         SELECT webhook_enqueue('queue', 'q_' || g, 'thing', jsonb_build_object('id', 'q_' || g, 'entity', 'e', 'seq', g))
           FROM generate_series(1, 4) g;
         SELECT webhook_complete(n.id) FROM webhook_next(1, provider => 'queue') n;
         SELECT outcome FROM idempotency_begin('orders', 'k1', 'sha256:a');
         "
    ))
    .unwrap_or_else(|e| panic!("{}", message(&e)));
    p.batch_execute(
        "SELECT idempotency_finish(b.request_id, 201, 'created')
           FROM idempotency_begin('orders', 'k2', 'sha256:b') b;
         SELECT webhook_metrics_rollup();",
    )
    .unwrap();
    let before = webhook_rows(&mut p);

    let mut c = empty_database(target);
    c.batch_execute("CREATE EXTENSION pg_webhook_inbox; SELECT webhook_create_partitions();")
        .unwrap();
    drop(c);
    move_rows(source, target, false);
    let mut c = connect(target);
    assert_eq!(
        c.query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[]
        )
        .unwrap()
        .get::<_, String>(0),
        env!("CARGO_PKG_VERSION")
    );
    assert_same_tables(&before, &webhook_rows(&mut c), "the rows moved");

    // And the compiled edition goes on where the portable one left off.
    let answer = |c: &mut Client, sql: &str| simple_answer(c, sql);
    assert_eq!(
        answer(&mut c, "SELECT status, result FROM webhook_claim('stripe', 'evt_done', 'invoice.paid', '{\"id\": \"evt_done\"}'::jsonb, NULL)"),
        "duplicate|{\"charged\": 1}"
    );
    assert_eq!(
        answer(&mut c, "SELECT status, attempts FROM webhook_claim('stripe', 'evt_failed', 'invoice.paid', '{\"id\": \"evt_failed\"}'::jsonb, NULL)"),
        "retry|2"
    );
    assert_eq!(
        answer(
            &mut c,
            "SELECT event_id FROM webhook_next(5, provider => 'queue') ORDER BY event_id"
        ),
        "q_2\nq_3\nq_4"
    );
    assert_eq!(
        answer(&mut c, "SELECT outcome, http_status, response_body FROM idempotency_begin('orders', 'k2', 'sha256:b')"),
        "replay|201|created"
    );
    let body = r#"{"id":"evt_new","type":"invoice.paid"}"#;
    let headers = sign::stripe(body, sign::now(), secret);
    assert_eq!(
        c.query_one(
            "SELECT status FROM webhook_receive('stripe', $1::text::jsonb, $2::bytea)",
            &[&headers.to_string(), &body.as_bytes()],
        )
        .unwrap()
        .get::<_, String>(0),
        "claimed",
        "the moved secret verifies a new delivery"
    );
    // The watermark moved with its rows: an event older than it is parked
    // as stale when a worker would lease it.
    assert_eq!(
        answer(&mut c, "SELECT status FROM webhook_enqueue('queue', 'q_0', 'thing', '{\"id\": \"q_0\", \"entity\": \"e\", \"seq\": 0}'::jsonb)"),
        "queued"
    );
    assert_eq!(
        answer(
            &mut c,
            "SELECT count(*) FROM webhook_next(5, provider => 'queue')"
        ),
        "0"
    );
    assert_eq!(
        answer(
            &mut c,
            "SELECT status FROM webhook.inbox WHERE event_id = 'q_0'"
        ),
        "stale"
    );
}

/// The portable edition's argument checks are expressions the planner
/// takes into their callers. Each refusal in them depends on the value
/// checked: a caller that names the function and the argument with
/// constants is refused for a bad value only (a refusal of constants alone
/// would be folded at planning, branch taken or not, and raise always).
#[test]
fn the_portable_checks_refuse_bad_values_only_whatever_their_callers_pass_as_constants() {
    if !portable_installable("the argument checks") {
        return;
    }
    let mut p = portable_database("pgwi_ed_checks_p");
    p.batch_execute(
        "CREATE TABLE vals (t text, i interval);
         INSERT INTO vals VALUES ('ok', NULL);",
    )
    .unwrap();
    for fine in [
        "SELECT webhook._required_text('f', 'a', t, 5) FROM vals",
        "SELECT webhook._bounded_text('f', 'a', t, 5) FROM vals",
        "SELECT webhook._required('f', 'a', t) FROM vals",
        "SELECT webhook._lease('f', 'a', i) FROM vals",
        "SELECT webhook._claim_lease('f', i, true) FROM vals",
        "SELECT webhook._claim_lease('f', i, false) FROM vals",
    ] {
        if let Err(e) = p.batch_execute(fine) {
            panic!("{fine}: {}", message(&e));
        }
    }
    for (bad, state) in [
        (
            "SELECT webhook._required_text('f', 'a', NULL::text, 5)",
            "22004",
        ),
        ("SELECT webhook._required_text('f', 'a', '', 5)", "2200F"),
        (
            "SELECT webhook._required_text('f', 'a', 'abcdefg', 5)",
            "22001",
        ),
        ("SELECT webhook._required('f', 'a', NULL::integer)", "22004"),
        ("SELECT webhook._lease('f', 'a', '-1 second')", "22023"),
        (
            "SELECT webhook._claim_lease('f', '1 minute', true)",
            "22023",
        ),
        ("SELECT webhook._claim_lease('f', NULL, NULL)", "22004"),
    ] {
        let err = p.batch_execute(bad).expect_err(bad);
        assert_eq!(sql_state(&err), Some(state), "{bad}: {}", message(&err));
    }
}

/// The public-key checks' acceptance rules, decided by the compiled
/// edition's RustCrypto implementations and held to in the portable
/// edition's PL/pgSQL: each case is verified by both through
/// webhook_verify_detail and answered alike, and the decisive ones are
/// asserted. Ed25519 (Discord): strict verification: S at or past the
/// group order, small-order keys and R, malleated or tampered signatures
/// refused. ECDSA P-256 (SendGrid): strict DER only (no padding, no
/// trailing bytes, no raw r‖s), r and s in [1, n), both halves of s;
/// keys uncompressed or compressed, in base64 or PEM. RSA (PayPal):
/// the signature exactly as long as the modulus and below it.
#[test]
fn public_key_acceptance_rules_are_the_same() {
    use ed25519_dalek::Signer as _;
    if !portable_installable("public_key_acceptance_rules_are_the_same") {
        return;
    }
    let (mut c, mut p) = pair("public_keys");
    let sql = "SELECT v.valid::text, v.reason FROM webhook_verify_detail($1, $2::text::jsonb, $3::bytea,
                                                                      ARRAY[$4::text], interval '100 years') v";
    let mut judged =
        |case: &str, scheme: &str, headers: serde_json::Value, body: &[u8], key: &str| {
            let args: [&(dyn postgres::types::ToSql + Sync); 4] =
                [&scheme, &headers.to_string(), &body, &key];
            let compiled = answer(c.query(sql, &args));
            let portable = answer(p.query(sql, &args));
            assert_eq!(compiled, portable, "{case}");
            compiled
        };
    let ts = "1796032805";
    let body = br#"{"id":"1110000000000000001","type":2}"#;
    let message = [ts.as_bytes(), body].concat();

    // Ed25519, as Discord signs.
    let l: [u8; 32] =
        hex::decode("edd3f55c1a631258d69cf7a2def9de1400000000000000000000000000000010")
            .unwrap()
            .try_into()
            .unwrap();
    let signer = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let key = hex::encode(signer.verifying_key().to_bytes());
    let sig = signer.sign(&message).to_bytes();
    let discord = |sig: &[u8]| serde_json::json!({ "X-Signature-Ed25519": hex::encode(sig), "X-Signature-Timestamp": ts });
    assert_eq!(
        judged("ed25519 genuine", "discord", discord(&sig), body, &key),
        "true|ok"
    );
    // S + L: the same point, a malleated signature.
    let mut malleated = sig;
    let mut carry = 0u16;
    for i in 0..32 {
        let sum = malleated[32 + i] as u16 + l[i] as u16 + carry;
        malleated[32 + i] = sum as u8;
        carry = sum >> 8;
    }
    assert_eq!(
        judged("ed25519 S + L", "discord", discord(&malleated), body, &key),
        "false|bad_signature"
    );
    let mut high = sig;
    high[63] |= 0xe0;
    assert_eq!(
        judged(
            "ed25519 S's top bits",
            "discord",
            discord(&high),
            body,
            &key
        ),
        "false|bad_signature"
    );
    let mut flipped = sig;
    flipped[5] ^= 1;
    assert_eq!(
        judged(
            "ed25519 R changed",
            "discord",
            discord(&flipped),
            body,
            &key
        ),
        "false|bad_signature"
    );
    // Small-order keys (the identity, and the point of order 2): keys of a
    // point, refused by every signature.
    let identity = format!("01{}", "00".repeat(31));
    let order_two = format!("ec{}7f", "ff".repeat(30));
    for small in [&identity, &order_two] {
        assert_eq!(
            judged(
                "ed25519 small-order key",
                "discord",
                discord(&sig),
                body,
                small
            ),
            "false|bad_signature"
        );
    }
    // A signature whose R is the identity, whatever S.
    let mut small_r = [0u8; 64];
    small_r[0] = 1;
    small_r[32..].copy_from_slice(&sig[32..]);
    assert_eq!(
        judged(
            "ed25519 small-order R",
            "discord",
            discord(&small_r),
            body,
            &key
        ),
        "false|bad_signature"
    );
    // Not a point: y = 2 has no x.
    let off_curve = format!("02{}", "00".repeat(31));
    assert_eq!(
        judged(
            "ed25519 no point",
            "discord",
            discord(&sig),
            body,
            &off_curve
        ),
        "false|invalid_secret"
    );
    // The key's encoding with its sign bit flipped: the negated point.
    let mut negated = signer.verifying_key().to_bytes();
    negated[31] ^= 0x80;
    judged(
        "ed25519 negated key",
        "discord",
        discord(&sig),
        body,
        &hex::encode(negated),
    );

    // ECDSA P-256, as SendGrid signs.
    let secret = p256::ecdsa::SigningKey::from_slice(&[9; 32]).unwrap();
    let public = p256::ecdsa::VerifyingKey::from(&secret);
    let spki = {
        use p256::pkcs8::EncodePublicKey;
        public.to_public_key_der().unwrap().as_bytes().to_vec()
    };
    let b64 =
        |bytes: &[u8]| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, bytes);
    let key = b64(&spki);
    let signature: p256::ecdsa::Signature = secret.sign(&message);
    let der = signature.to_der().as_bytes().to_vec();
    let sendgrid = |sig: &[u8]| {
        serde_json::json!({
            "X-Twilio-Email-Event-Webhook-Signature": b64(sig),
            "X-Twilio-Email-Event-Webhook-Timestamp": ts,
        })
    };
    assert_eq!(
        judged("p256 genuine", "sendgrid", sendgrid(&der), body, &key),
        "true|ok"
    );
    let pem = format!(
        "-----BEGIN PUBLIC KEY-----\n{}\n{}\n-----END PUBLIC KEY-----\n",
        &key[..64],
        &key[64..]
    );
    assert_eq!(
        judged("p256 PEM key", "sendgrid", sendgrid(&der), body, &pem),
        "true|ok"
    );
    let compressed = {
        let point = public.to_encoded_point(true);
        let mut spki = hex::decode("3039301306072a8648ce3d020106082a8648ce3d030107032200").unwrap();
        spki.extend_from_slice(point.as_bytes());
        b64(&spki)
    };
    assert_eq!(
        judged(
            "p256 compressed key",
            "sendgrid",
            sendgrid(&der),
            body,
            &compressed
        ),
        "true|ok"
    );
    let (r, s) = (signature.r().to_bytes(), signature.s().to_bytes());
    let der_of = |r: &[u8], s: &[u8]| {
        let int = |v: &[u8]| {
            let mut out = vec![2, v.len() as u8];
            out.extend_from_slice(v);
            out
        };
        let (r, s) = (int(r), int(s));
        let mut out = vec![0x30, (r.len() + s.len()) as u8];
        out.extend(r);
        out.extend(s);
        out
    };
    let minimal = |v: &[u8]| {
        let v = &v[v.iter().position(|&b| b != 0).unwrap_or(v.len() - 1)..];
        if v[0] >= 0x80 {
            [&[0u8][..], v].concat()
        } else {
            v.to_vec()
        }
    };
    // n - s: the other half, which p256 accepts.
    let n_minus_s = {
        let s = p256::NonZeroScalar::try_from(&s[..]).unwrap();
        (-*s).to_bytes()
    };
    judged(
        "p256 high s",
        "sendgrid",
        sendgrid(&der_of(&minimal(&r), &minimal(&n_minus_s))),
        body,
        &key,
    );
    // A zero byte DER does not need (refused; past 96 base64 characters,
    // before it is even read).
    let padded = [&[0u8, 0][..], &minimal(&r)].concat();
    let answer = judged(
        "p256 padded r",
        "sendgrid",
        sendgrid(&der_of(&padded, &minimal(&s))),
        body,
        &key,
    );
    assert!(answer.starts_with("false|"), "{answer}");
    let mut trailing = der.clone();
    trailing.push(0);
    assert_eq!(
        judged(
            "p256 trailing byte",
            "sendgrid",
            sendgrid(&trailing),
            body,
            &key
        ),
        "false|bad_signature"
    );
    let raw = [&r[..], &s[..]].concat();
    assert_eq!(
        judged("p256 raw r||s", "sendgrid", sendgrid(&raw), body, &key),
        "false|bad_signature"
    );
    let n =
        hex::decode("ffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551").unwrap();
    for (what, bad_r) in [("r = 0", vec![0u8]), ("r = n", [&[0u8][..], &n].concat())] {
        assert_eq!(
            judged(
                &format!("p256 {what}"),
                "sendgrid",
                sendgrid(&der_of(&bad_r, &minimal(&s))),
                body,
                &key
            ),
            "false|bad_signature"
        );
    }
    let mut off_curve = spki.clone();
    let last = off_curve.len() - 1;
    off_curve[last] ^= 1;
    assert_eq!(
        judged(
            "p256 key off the curve",
            "sendgrid",
            sendgrid(&der),
            body,
            &b64(&off_curve)
        ),
        "false|invalid_secret"
    );

    // RSA, as PayPal signs (the suite's test signer and its certificate).
    let url = "https://api.paypal.com/v1/notifications/certs/CERT-rules";
    let certificate = sign::paypal_secret(url);
    let time = "2026-11-30T10:00:05Z";
    let sig = sign::paypal_signature("tx-1", time, "WH-1", body);
    let paypal = |sig: &[u8]| sign::paypal("tx-1", time, url, sig);
    let scheme = "paypal;webhook_id=WH-1";
    assert_eq!(
        judged("rsa genuine", scheme, paypal(&sig), body, &certificate),
        "true|ok"
    );
    assert_eq!(
        judged("rsa short", scheme, paypal(&sig[1..]), body, &certificate),
        "false|bad_signature"
    );
    assert_eq!(
        judged(
            "rsa long",
            scheme,
            paypal(&[&[0u8][..], &sig].concat()),
            body,
            &certificate
        ),
        "false|bad_signature"
    );
    assert_eq!(
        judged(
            "rsa at or past n",
            scheme,
            paypal(&vec![0xff; sig.len()]),
            body,
            &certificate
        ),
        "false|bad_signature"
    );
    assert_eq!(
        judged(
            "rsa tampered body",
            scheme,
            paypal(&sig),
            &body[1..],
            &certificate
        ),
        "false|bad_signature"
    );
}

/// A secret refused at registration is refused in the name of the
/// function called (webhook_register_provider or webhook_add_secret), with
/// the same SQLSTATE, message and hint in both editions; Supabase's
/// dashboard form of a Standard Webhooks secret (v1,whsec_…) is a key
/// under both of its schemes, and the same key as without its v1,.
#[test]
fn secrets_are_refused_in_the_name_of_the_function_called() {
    if !portable_installable("secrets_are_refused_in_the_name_of_the_function_called") {
        return;
    }
    let (mut c, mut p) = pair("secret_names");
    let mut both = |sql: &str| {
        let with_hint = |client: &mut Client| match client.query(sql, &[]) {
            Err(e) if e.as_db_error().is_some() => {
                let db = e.as_db_error().unwrap();
                format!(
                    "ERROR {}: {} HINT {}",
                    db.code().code(),
                    db.message(),
                    db.hint().unwrap_or("")
                )
            }
            other => answer(other),
        };
        let (compiled, portable) = (with_hint(&mut c), with_hint(&mut p));
        assert_eq!(compiled, portable, "{sql}");
        compiled
    };
    let refused = both(
        "SELECT name FROM webhook_register_provider('sb-bad', scheme => 'supabase', secret => 'not-a-key')",
    );
    assert!(
        refused.starts_with(
            "ERROR 22023: webhook_register_provider: argument \"secret\" is not a key for scheme \"supabase\""
        ) && refused.contains("v1,whsec_"),
        "{refused}"
    );
    assert_eq!(
        both("SELECT count(*)::text FROM webhook.providers WHERE name = 'sb-bad'"),
        "0",
        "nothing half-written"
    );
    both("SELECT name FROM webhook_register_provider('sb', scheme => 'supabase')");
    let refused = both("SELECT webhook_add_secret('sb', 'whsec_')");
    assert!(
        refused.starts_with("ERROR 22023: webhook_add_secret: argument \"secret\""),
        "{refused}"
    );
    let refused = both("SELECT webhook_add_secret('nobody', 'whsec_a2V5')");
    assert!(
        refused.starts_with("ERROR 42704: webhook_add_secret: argument \"provider\""),
        "{refused}"
    );
    let refused = both("SELECT name FROM webhook_register_provider('sb', secret => '')");
    assert!(
        refused.starts_with("ERROR 22023: webhook_register_provider")
            || refused.starts_with("ERROR 2200F: webhook_register_provider"),
        "{refused}"
    );
    // The dashboard's form and the bare form: one key, both schemes.
    for scheme in ["supabase", "standard"] {
        assert_eq!(
            both(&format!(
                "SELECT webhook_check_key('{scheme}', 'v1,whsec_c3VwYWJhc2Uta2V5')"
            )),
            "NULL",
            "{scheme}"
        );
    }
    let sig = {
        use hmac::Mac as _;
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"supabase-key").unwrap();
        mac.update(b"msg_1.1796032805.{}");
        hex::encode(mac.finalize().into_bytes())
    };
    let signed = both(&format!(
        "SELECT v.valid::text || '|' || v.reason
           FROM webhook_verify_detail('supabase',
                  jsonb_build_object('webhook-id', 'msg_1', 'webhook-timestamp', '1796032805',
                                     'webhook-signature', 'v1,' || encode(decode('{sig}', 'hex'), 'base64')),
                  '{{}}'::bytea, ARRAY['v1,whsec_c3VwYWJhc2Uta2V5'], interval '100 years') v"
    ));
    assert_eq!(signed, "true|ok");
}

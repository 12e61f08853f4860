//! In-database tests, one module per topic. Each test runs inside a single
//! transaction that is rolled back; commits, concurrency and killed
//! backends are tested from `tests/` over real connections.

mod attack_tests;
mod claim_tests;
mod complete_on_commit_tests;
mod coverage_tests;
mod idempotency_tests;
mod inbox_tests;
mod lifecycle_tests;
mod operations_tests;
mod ordering_tests;
mod out_of_date_tests;
mod receive_tests;
mod release_tests;
mod roles_tests;
mod route_tests;
mod schema_tests;
mod scheme_tests;
mod secret_tests;
mod signature_tests;
mod verify_tests;

use pgrx::prelude::*;

// Runs a statement in a subtransaction and reports its error, if any, as
// "SQLSTATE: message", so tests can assert on the code and on the wording.
extension_sql!(
    r#"
CREATE FUNCTION error_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    RETURN SQLSTATE || ': ' || SQLERRM;
END
$$;
"#,
    name = "test_error_of"
);

// The DETAIL of the error a statement raises, for tests of what an error
// may and may not reveal.
extension_sql!(
    r#"
CREATE FUNCTION error_detail_of(sql text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    detail text;
BEGIN
    EXECUTE sql;
    RETURN NULL;
EXCEPTION WHEN OTHERS THEN
    GET STACKED DIAGNOSTICS detail = PG_EXCEPTION_DETAIL;
    RETURN detail;
END
$$;
"#,
    name = "test_error_detail_of"
);

// HMAC-SHA256 written out in SQL from PostgreSQL's own sha256() (RFC 2104),
// with pgcrypto's signatures: deliveries are signed in the tests by code
// that shares nothing with the extension's, on every supported server
// (some builds, such as the relocatable PostgreSQL 18, ship no pgcrypto).
extension_sql!(
    r#"
CREATE FUNCTION hmac(data bytea, key bytea, type text) RETURNS bytea
LANGUAGE plpgsql IMMUTABLE STRICT AS $$
DECLARE
    k    bytea := key;
    ipad bytea;
    opad bytea;
BEGIN
    IF type <> 'sha256' THEN
        RAISE EXCEPTION 'test hmac: only sha256';
    END IF;
    IF length(k) > 64 THEN
        k := sha256(k);
    END IF;
    k := k || decode(repeat('00', 64 - length(k)), 'hex');
    ipad := k;
    opad := k;
    FOR i IN 0..63 LOOP
        ipad := set_byte(ipad, i, get_byte(k, i) # 54);  -- 0x36
        opad := set_byte(opad, i, get_byte(k, i) # 92);  -- 0x5c
    END LOOP;
    RETURN sha256(opad || sha256(ipad || data));
END
$$;
CREATE FUNCTION hmac(data text, key text, type text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT
AS $$ SELECT hmac(convert_to(data, 'UTF8'), convert_to(key, 'UTF8'), type) $$;
"#,
    name = "test_hmac"
);

/// `SQLSTATE: message` of the error `sql` raises; panics if it succeeds.
pub fn error_of(sql: &str) -> String {
    Spi::get_one_with_args::<String>("SELECT error_of($1)", &[sql.into()])
        .expect("error_of runs")
        .unwrap_or_else(|| panic!("expected an error from: {sql}"))
}

/// Register `provider` as the scheme coverage's sender of one scheme
/// signs for (its scheme, secret and, where the scheme has none, sources).
pub fn register_sender(provider: &str, sender: &crate::schemes::genuine::Sender) {
    let registration = sender.registration();
    Spi::run_with_args(
        "SELECT webhook_register_provider($1, secret => $2, scheme => $3,
                 event_id_from => $4, event_type_from => $5)",
        &[
            provider.into(),
            registration.secret.as_str().into(),
            registration.scheme.as_str().into(),
            registration.event_id_from.into(),
            registration.event_type_from.into(),
        ],
    )
    .expect("the scheme registers");
}

/// Assert that `sql` fails with `sqlstate` and a message containing `needle`.
pub fn assert_error(sql: &str, sqlstate: &str, needle: &str) {
    let err = error_of(sql);
    assert!(
        err.starts_with(&format!("{sqlstate}: ")) && err.contains(needle),
        "{sql}\n  expected {sqlstate} mentioning {needle:?}\n  got {err}"
    );
}

/// One claim: (id, claimed, status, attempts).
pub fn claim(
    provider: &str,
    event_id: &str,
    lease: Option<&str>,
) -> (pgrx::Uuid, bool, String, i32) {
    let row = Spi::connect_mut(|client| {
        let rows = client.update(
            "SELECT id, claimed, status, attempts
               FROM webhook_claim($1, $2, 'test.event', '{\"k\": 1}'::jsonb, 'sig', $3::interval)",
            None,
            &[provider.into(), event_id.into(), lease.into()],
        )?;
        let row = rows.first();
        Ok::<_, pgrx::spi::Error>((
            row.get::<pgrx::Uuid>(1)?.unwrap(),
            row.get::<bool>(2)?.unwrap(),
            row.get::<String>(3)?.unwrap(),
            row.get::<i32>(4)?.unwrap(),
        ))
    });
    row.expect("webhook_claim returns one row")
}

pub fn run(sql: &str, id: pgrx::Uuid) {
    Spi::run_with_args(sql, &[id.into()]).expect(sql);
}

pub fn text_of(sql: &str, id: pgrx::Uuid) -> Option<String> {
    Spi::get_one_with_args::<String>(sql, &[id.into()]).expect(sql)
}

/// Register the providers the receive tests use (deliveries are signed
/// with the SQL `hmac` above, independently of the extension).
/// Both claim deliveries (GitHub's preset would queue them: the inbox's
/// tests register it themselves).
pub fn register_test_providers() {
    Spi::run(
        "SELECT webhook_register_provider('github', secret => 'gh-secret', inbox => false);
         SELECT webhook_register_provider('stripe', secret => 'whsec_stripe_test');",
    )
    .unwrap();
}

/// A Stripe delivery of `body` signed with `secret` at now + `offset`
/// seconds: the SQL of its headers (a subquery, so that it reads the
/// clock once).
pub fn stripe_headers(body: &str, secret: &str, offset: i64) -> String {
    format!(
        "(SELECT jsonb_build_object('Stripe-Signature',
             't=' || ts || ',v1=' || encode(hmac(ts || '.' || '{body}', '{secret}', 'sha256'), 'hex'))
            FROM (SELECT (extract(epoch FROM clock_timestamp())::bigint + {offset})::text AS ts) t)"
    )
}

/// The one bigint a query returns.
pub fn count(sql: &str) -> i64 {
    Spi::get_one::<i64>(sql).expect(sql).unwrap_or(0)
}

/// A GitHub delivery signed with `secret`: the SQL of its headers.
pub fn github_headers(delivery: &str, event: &str, body: &str, secret: &str) -> String {
    format!(
        "jsonb_build_object('X-GitHub-Delivery', '{delivery}', 'X-GitHub-Event', '{event}',
             'X-Hub-Signature-256', 'sha256=' || encode(hmac('{body}', '{secret}', 'sha256'), 'hex'))"
    )
}

/// webhook_receive's answer: (status, http_status, reason).
pub fn receive(provider: &str, headers_sql: &str, body: &str) -> (String, i32, String) {
    let (status, http_status, reason, _) = receive_with_id(provider, headers_sql, body);
    (status, http_status, reason)
}

/// webhook_receive's answer with the event id it read:
/// (status, http_status, reason, event_id).
pub fn receive_with_id(
    provider: &str,
    headers_sql: &str,
    body: &str,
) -> (String, i32, String, Option<String>) {
    let row = Spi::connect_mut(|c| {
        let rows = c.update(
            &format!(
                "SELECT status, http_status, reason, event_id
                   FROM webhook_receive('{provider}', {headers_sql}, convert_to('{body}', 'UTF8'))"
            ),
            None,
            &[],
        )?;
        let row = rows.first();
        Ok::<_, pgrx::spi::Error>((
            row.get::<String>(1)?.unwrap(),
            row.get::<i32>(2)?.unwrap(),
            row.get::<String>(3)?.unwrap(),
            row.get::<String>(4)?,
        ))
    });
    row.expect("webhook_receive answers")
}

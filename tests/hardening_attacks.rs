//! Attacks on the central path, each staged as an attacker would against a
//! real server, each a row of the hardening report: how often it was
//! tried, how often it got through (always 0), the slowest answer.
//!
//! Run by `make hardening` (part of `make test`) on its own server.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{github, hmac_sha256, now, standard};
use common::*;
use postgres::Client;
use std::time::{Duration, Instant};

const DB: &str = "pgwi_attacks";
const GITHUB_SECRET: &str = "attack-test-github";
const SHOPIFY_SECRET: &str = "shpss_attack_test";
const GENERIC_SECRET: &str = "attack-test-generic";
const GITLAB_TOKEN: &str = "attack-test-gitlab-token";
const STANDARD_SECRET: &str = "whsec_YXR0YWNrLXRlc3Qtc3RhbmRhcmQta2V5";
const MAILGUN_KEY: &str = "attack-test-mailgun";

fn setup() -> Client {
    let db = database(DB);
    let mut admin = connect(db);
    for (name, secret, extra) in [
        // Claimed, so that a replay's answer shows what the claim did.
        ("github", GITHUB_SECRET, ", inbox => false"),
        ("shopify", SHOPIFY_SECRET, ""),
        ("svix", STANDARD_SECRET, ""),
        ("supabase", STANDARD_SECRET, ""),
        ("mailgun", MAILGUN_KEY, ""),
        (
            "generic",
            GENERIC_SECRET,
            ", scheme => 'hmac;header=X-Signature', event_id_from => 'header:X-Request-Id', \
               event_type_from => 'body:kind'",
        ),
    ] {
        admin
            .execute(
                &format!("SELECT webhook_register_provider($1, secret => $2{extra})"),
                &[&name, &secret],
            )
            .unwrap();
    }
    admin
}

/// (status, http_status, reason, event_id), in a committed transaction.
/// (status, http_status, reason, event_id) of one delivery.
fn answered(
    client: &mut Client,
    provider: &str,
    headers: &serde_json::Value,
    body: &[u8],
) -> Result<(String, i32, String, Option<String>), postgres::Error> {
    let row = receive(client, provider, headers, body)?;
    Ok((
        row.get("status"),
        row.get("http_status"),
        row.get("reason"),
        row.get("event_id"),
    ))
}

fn shopify(event_id: &str, topic: &str, body: &str) -> serde_json::Value {
    use base64::Engine;
    let sig = base64::engine::general_purpose::STANDARD
        .encode(hmac_sha256(SHOPIFY_SECRET.as_bytes(), &[body.as_bytes()]));
    serde_json::json!({ "X-Shopify-Event-Id": event_id, "X-Shopify-Topic": topic,
                        "X-Shopify-Hmac-Sha256": sig })
}

fn merged(mut headers: serde_json::Value, extra: serde_json::Value) -> serde_json::Value {
    let object = headers.as_object_mut().unwrap();
    for (k, v) in extra.as_object().unwrap() {
        object.insert(k.clone(), v.clone());
    }
    headers
}

/// Standard Webhooks: a captured svix-* delivery resent within the
/// tolerance with an added `webhook-id` header is the same event.
#[test]
fn replay_standard_webhooks_with_another_id_header() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let body = r#"{"type":"user.created","data":{"id":"user_replay"}}"#;
    let genuine = standard("msg_attack_1", body, now(), STANDARD_SECRET);
    let first = answered(&mut admin, "svix", &genuine, body.as_bytes()).unwrap();
    assert_eq!(
        (first.0.as_str(), first.3.as_deref()),
        ("claimed", Some("msg_attack_1"))
    );
    let mut attack = Attack::start("replay: Standard Webhooks with an added webhook-id");
    for i in 0..10 {
        let forged = merged(
            genuine.clone(),
            serde_json::json!({ "webhook-id": format!("replay-{i}") }),
        );
        attack.attempt(
            || answered(&mut admin, "svix", &forged, body.as_bytes()).unwrap(),
            |(status, _, _, event_id)| {
                status == "claimed" || event_id.as_deref() != Some("msg_attack_1")
            },
        );
    }
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE provider = 'svix'"
        ),
        1
    );
    attack.finish();
}

/// Mailgun signs a timestamp and a token, nothing of the event riding with
/// them: a captured signature object carried with other events (a
/// "complained" for every address) is the one delivery it vouched for,
/// and nothing else.
#[test]
fn replay_a_mailgun_signature_with_other_events() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let ts = now().to_string();
    let token = "attack-token-1";
    let signature = serde_json::json!({
        "timestamp": ts, "token": token,
        "signature": hex::encode(hmac_sha256(MAILGUN_KEY.as_bytes(), &[ts.as_bytes(), token.as_bytes()])),
    });
    let body = |id: &str, event: &str| {
        serde_json::json!({ "signature": signature, "event-data": { "id": id, "event": event } })
            .to_string()
    };
    let genuine = body("mg-genuine", "delivered");
    assert_eq!(
        answered(
            &mut admin,
            "mailgun",
            &serde_json::json!({}),
            genuine.as_bytes()
        )
        .unwrap()
        .0,
        "claimed"
    );
    let mut attack = Attack::start("replay: a Mailgun signature carrying other events");
    for i in 0..20 {
        let forged = body(&format!("mg-forged-{i}"), "complained");
        attack.attempt(
            || {
                answered(
                    &mut admin,
                    "mailgun",
                    &serde_json::json!({}),
                    forged.as_bytes(),
                )
                .unwrap()
            },
            |(status, ..)| status == "claimed",
        );
    }
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE provider = 'mailgun'"
        ),
        1
    );
    attack.finish();
}

/// Supabase reads its id from `webhook-id` only: a captured delivery
/// re-sent in the `svix-*` family, with a fresh unsigned `webhook-id`
/// beside it, has no event id it may trust.
#[test]
fn replay_supabase_in_the_other_header_family() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let body = r#"{"type":"signup","email_data":{"token":"t"}}"#;
    let svix = standard("msg_supabase_1", body, now(), STANDARD_SECRET);
    let webhook_family = serde_json::json!({
        "webhook-id": svix["svix-id"], "webhook-timestamp": svix["svix-timestamp"],
        "webhook-signature": svix["svix-signature"],
    });
    assert_eq!(
        answered(&mut admin, "supabase", &webhook_family, body.as_bytes())
            .unwrap()
            .0,
        "claimed"
    );
    let mut attack = Attack::start("replay: Supabase in the svix-* family with a fresh webhook-id");
    for i in 0..10 {
        let forged = merged(
            svix.clone(),
            serde_json::json!({ "webhook-id": format!("fresh-{i}") }),
        );
        attack.attempt(
            || answered(&mut admin, "supabase", &forged, body.as_bytes()).unwrap(),
            |(status, ..)| status == "claimed",
        );
    }
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE provider = 'supabase'"
        ),
        1
    );
    attack.finish();
}

/// GitHub signs the body only: the same body and signature under a fresh
/// X-GitHub-Delivery and another X-GitHub-Event.
#[test]
fn replay_github_under_a_fresh_delivery_id() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let body = r#"{"action":"published","release":{"id":1}}"#;
    let genuine = github("gh-attack-1", "release", body, GITHUB_SECRET);
    assert_eq!(
        answered(&mut admin, "github", &genuine, body.as_bytes())
            .unwrap()
            .0,
        "claimed"
    );
    let mut attack = Attack::start("replay: GitHub under a fresh X-GitHub-Delivery");
    for i in 0..20 {
        let forged = merged(
            genuine.clone(),
            serde_json::json!({ "X-GitHub-Delivery": format!("d-evil-{i}"), "X-GitHub-Event": "push" }),
        );
        let answer = attack.attempt(
            || answered(&mut admin, "github", &forged, body.as_bytes()).unwrap(),
            |(status, ..)| status != "rejected",
        );
        assert_eq!((answer.1, answer.2.as_str()), (401, "replayed"));
    }
    // The provider's own redelivery is still answered as before.
    assert_eq!(
        answered(&mut admin, "github", &genuine, body.as_bytes())
            .unwrap()
            .0,
        "in_progress"
    );

    // A replay racing the genuine delivery's open transaction: answered at
    // once without a claim (nobody waits on the binding), refused once the
    // genuine delivery commits.
    let body = r#"{"action":"published","release":{"id":2}}"#;
    let genuine = github("gh-attack-2", "release", body, GITHUB_SECRET);
    let mut handler = connect(DB);
    let mut tx = handler.transaction().unwrap();
    let claimed: String = tx
        .query_one(
            "SELECT status FROM webhook_receive('github', $1::text::jsonb, $2::bytea)",
            &[&genuine.to_string(), &body.as_bytes()],
        )
        .unwrap()
        .get(0);
    assert_eq!(claimed, "claimed");
    let mut racer = connect(DB);
    racer.batch_execute("SET lock_timeout = '50ms'").unwrap();
    let forged = merged(
        genuine.clone(),
        serde_json::json!({ "X-GitHub-Delivery": "d-racer" }),
    );
    let answer = attack.attempt(
        || answered(&mut racer, "github", &forged, body.as_bytes()).unwrap(),
        |(status, ..)| status == "claimed",
    );
    assert_eq!((answer.0.as_str(), answer.1), ("in_progress", 409));
    tx.commit().unwrap();
    let answer = attack.attempt(
        || answered(&mut racer, "github", &forged, body.as_bytes()).unwrap(),
        |(status, ..)| status != "rejected",
    );
    assert_eq!(answer.2, "replayed");
    attack.finish();
}

/// The binding of a body to its id belongs to the transaction that made it:
/// after a handler failed halfway, the provider's redelivery is claimed
/// again (its first transaction rolled back, binding and all) or retried
/// (its failure was recorded), never refused as a replay.
#[test]
fn a_redelivery_after_a_failed_handler_is_claimed_not_refused() {
    let _turn = one_at_a_time();
    setup();
    let mut handler = connect(DB);
    let receive_in = |tx: &mut postgres::Transaction<'_>, delivery: &str, body: &str| {
        let headers = github(delivery, "push", body, GITHUB_SECRET).to_string();
        let row = tx
            .query_one(
                "SELECT id::text, status, reason FROM webhook_receive('github', $1::text::jsonb, $2::bytea)",
                &[&headers, &body.as_bytes()],
            )
            .unwrap();
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, String>(2),
        )
    };

    // The handler's transaction aborts (an error, a lost connection).
    let body = r#"{"ref":"refs/heads/main","after":"rolled-back"}"#;
    let mut tx = handler.transaction().unwrap();
    assert_eq!(receive_in(&mut tx, "gh-rolled-back", body).1, "claimed");
    tx.rollback().unwrap();
    let mut tx = handler.transaction().unwrap();
    assert_eq!(receive_in(&mut tx, "gh-rolled-back", body).1, "claimed");
    tx.rollback().unwrap();

    // The handler records the failure behind a savepoint, then commits.
    let body = r#"{"ref":"refs/heads/main","after":"failed"}"#;
    let mut tx = handler.transaction().unwrap();
    let (id, status, _) = receive_in(&mut tx, "gh-failed", body);
    assert_eq!(status, "claimed");
    tx.execute(
        "SELECT webhook_fail($1::text::uuid, 'downstream timeout')",
        &[&id],
    )
    .unwrap();
    tx.commit().unwrap();
    let mut tx = handler.transaction().unwrap();
    let (_, status, reason) = receive_in(&mut tx, "gh-failed", body);
    assert_eq!((status.as_str(), reason.as_str()), ("retry", "ok"));
    tx.rollback().unwrap();
}

#[test]
fn replay_shopify_and_generic_under_a_fresh_id() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let body = r#"{"id":820982911946154508,"total_price":"10.00"}"#;
    assert_eq!(
        answered(
            &mut admin,
            "shopify",
            &shopify("sh-1", "orders/paid", body),
            body.as_bytes()
        )
        .unwrap()
        .0,
        "claimed"
    );
    let generic_body = r#"{"kind":"payout.sent","amount":100}"#;
    let generic_sig = hex::encode(hmac_sha256(
        GENERIC_SECRET.as_bytes(),
        &[generic_body.as_bytes()],
    ));
    let generic = |id: &str| serde_json::json!({ "X-Request-Id": id, "X-Signature": generic_sig });
    assert_eq!(
        answered(
            &mut admin,
            "generic",
            &generic("req-1"),
            generic_body.as_bytes()
        )
        .unwrap()
        .0,
        "claimed"
    );
    let mut attack = Attack::start("replay: Shopify and generic HMAC under a fresh id header");
    for i in 0..10 {
        let forged = shopify(&format!("sh-evil-{i}"), "refunds/create", body);
        attack.attempt(
            || answered(&mut admin, "shopify", &forged, body.as_bytes()).unwrap(),
            |(status, ..)| status != "rejected",
        );
        let forged = generic(&format!("req-evil-{i}"));
        attack.attempt(
            || answered(&mut admin, "generic", &forged, generic_body.as_bytes()).unwrap(),
            |(status, ..)| status != "rejected",
        );
    }
    attack.finish();
}

/// Code planted in the install schema before `CREATE EXTENSION`, by a role
/// that may create objects there: look-alike operators and aggregates that
/// raise. Nothing the extension binds at install time may pick them up.
#[test]
fn planted_operators_and_aggregates_never_run() {
    let _turn = one_at_a_time();
    let db = "pgwi_attacks_planted";
    let mut admin = empty_database(db);
    ensure_role(&mut admin, "planter", true);
    admin
        .batch_execute("GRANT CREATE ON SCHEMA public TO planter;")
        .unwrap();
    let mut planter = connect_as(db, "planter");
    planter
        .batch_execute(
            r#"
            CREATE FUNCTION public.planted(anyenum, text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted operator runs as %', current_user; END $$;
            CREATE OPERATOR public.= (LEFTARG = anyenum, RIGHTARG = text, FUNCTION = public.planted);
            CREATE OPERATOR public.<> (LEFTARG = anyenum, RIGHTARG = text, FUNCTION = public.planted);
            CREATE FUNCTION public.planted_text(text, text) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted operator runs as %', current_user; END $$;
            CREATE OPERATOR public.= (LEFTARG = text, RIGHTARG = text, FUNCTION = public.planted_text);
            CREATE OPERATOR public.~ (LEFTARG = text, RIGHTARG = text, FUNCTION = public.planted_text);
            CREATE FUNCTION public.planted_interval(interval, interval) RETURNS boolean LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted operator runs as %', current_user; END $$;
            CREATE OPERATOR public.> (LEFTARG = interval, RIGHTARG = interval, FUNCTION = public.planted_interval);
            CREATE FUNCTION public.planted_count(bigint, text) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted aggregate runs as %', current_user; END $$;
            CREATE AGGREGATE public.count(text) (SFUNC = public.planted_count, STYPE = bigint);
            CREATE FUNCTION public.planted_agg(text[], text) RETURNS text[] LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted aggregate runs as %', current_user; END $$;
            CREATE AGGREGATE public.array_agg(text) (SFUNC = public.planted_agg, STYPE = text[]);
            CREATE FUNCTION public.planted_sum(bigint, integer) RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS
                $$ BEGIN RAISE EXCEPTION 'planted aggregate runs as %', current_user; END $$;
            CREATE AGGREGATE public.sum(integer) (SFUNC = public.planted_sum, STYPE = bigint);
            CREATE FUNCTION public.octet_length(bytea) RETURNS integer LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'planted function runs as %', current_user; END $$;
            CREATE FUNCTION public.now() RETURNS timestamptz LANGUAGE plpgsql AS
                $$ BEGIN RAISE EXCEPTION 'planted function runs as %', current_user; END $$;
            "#,
        )
        .unwrap();
    // The plants are live: a naive query in this database runs them.
    let naive = admin
        .query_one("SELECT count(x) FROM (VALUES ('a'::text)) v(x)", &[])
        .expect_err("the planted count runs in naive SQL");
    assert!(message(&naive).contains("planted"), "{naive}");

    admin
        .batch_execute(&format!(
            "CREATE EXTENSION pg_webhook_inbox;
             SELECT webhook_register_provider('github', secret => '{GITHUB_SECRET}');
"
        ))
        .unwrap();
    ensure_role(&mut admin, "planted_app", false);
    ensure_role(&mut admin, "planted_ops", false);

    let body = r#"{"action":"opened"}"#;
    let headers = github("planted-1", "issues", body, GITHUB_SECRET).to_string();
    let forged = github("planted-2", "issues", body, "wrong").to_string();
    let body2 = r#"{"action":"closed"}"#;
    let inbox_headers = github("planted-3", "issues", body2, GITHUB_SECRET).to_string();
    let claim =
        "SELECT id FROM webhook_claim('stripe', 'evt_planted', 'charge', '{\"a\":1}'::jsonb, NULL)";
    // Every public function and view, as an application and an operator
    // would call them (each statement on its own, so one error does not
    // hide another).
    let calls: Vec<String> = vec![
        format!("SELECT * FROM webhook_receive('github', '{headers}'::jsonb, convert_to('{body}', 'UTF8'))"),
        format!("SELECT * FROM webhook_receive('github', '{headers}'::jsonb, '{body}'::text)"),
        format!("SELECT * FROM webhook_receive('github', '{forged}'::jsonb, convert_to('{body}', 'UTF8'))"),
        "SELECT * FROM webhook_claim('stripe', 'evt_1', 'charge', '{\"a\":1}'::jsonb, NULL)".into(),
        "SELECT * FROM webhook_claim('stripe', 'evt_1', 'charge', '{\"a\":2}'::jsonb, NULL)".into(),
        "SELECT * FROM webhook_claim('stripe', 'evt_2', 'charge', convert_to('{\"a\":1}', 'UTF8'), NULL)".into(),
        "SELECT * FROM webhook_claim('stripe', 'evt_3', 'charge', '{\"a\":1}'::text, NULL)".into(),
        format!("SELECT webhook_complete(({claim}), '{{\"ok\":true}}')"),
        format!("SELECT webhook_fail(({}), 'boom')", claim.replace("evt_planted", "evt_fail")),
        "SELECT webhook_requeue('stripe', 'evt_fail')".into(),
        format!("SELECT webhook_extend(({}), '1 minute')", claim.replace("evt_planted", "evt_ext")),
        // Refused (already processed): the refusal reads the archive's view.
        "SELECT webhook_complete((SELECT id FROM webhook.delivery_log WHERE event_id = 'evt_planted'))".into(),
        "SELECT webhook_purge('1 second')".into(),
        "SELECT * FROM webhook_providers()".into(),
        "SELECT * FROM webhook_register_provider('stripe', secret => 'whsec_planted')".into(),
        "SELECT webhook_add_secret('stripe', 'whsec_planted_2')".into(),
        "SELECT webhook_retire_secret('stripe', 'whsec_planted_2')".into(),
        "SELECT webhook_grant_app('planted_app')".into(),
        "SELECT webhook_grant_operator('planted_ops')".into(),
        "SELECT * FROM webhook_schemes()".into(),
        "SELECT verify_hmac('k', 'body'::bytea, repeat('0', 64))".into(),
        format!("SELECT webhook_verify('github', '{headers}'::jsonb, '{body}'::text, ARRAY['{GITHUB_SECRET}'])"),
        format!("SELECT * FROM webhook_verify_detail('github', '{headers}'::jsonb, '{body}'::text, ARRAY['x'])"),
        "SELECT * FROM webhook.deliveries".into(),
        "SELECT * FROM webhook.recent_failures".into(),
        "SELECT * FROM webhook.stuck_claims".into(),
        "SELECT * FROM webhook.rejected_deliveries".into(),
        "SELECT * FROM webhook.dead_letters".into(),
        "SELECT * FROM webhook.payload_mismatches".into(),
        "SELECT * FROM webhook.provider_stats".into(),
        "SELECT * FROM webhook.provider_summary".into(),
        // The inbox: queue, lease, fail, requeue, finish, and its views.
        "SELECT * FROM webhook_enqueue('stripe', 'evt_q', 'charge', '{\"a\":1}'::jsonb)".into(),
        "SELECT * FROM webhook_enqueue('stripe', 'evt_q2', 'charge', convert_to('{\"a\":1}', 'UTF8'))".into(),
        "SELECT * FROM webhook_enqueue('stripe', 'evt_q3', 'charge', '{\"a\":1}'::text)".into(),
        format!("SELECT * FROM webhook_receive('github', '{inbox_headers}'::jsonb, convert_to('{body2}', 'UTF8'), inbox => true)"),
        "SELECT webhook_fail(id, 'boom', permanent => true) FROM webhook_next(1, provider => 'stripe')".into(),
        "SELECT webhook_requeue('stripe', 'evt_q')".into(),
        "SELECT webhook_requeue_dead(error_like => '%boom%')".into(),
        "SELECT webhook_complete(id) FROM webhook_next(1, provider => 'stripe') WHERE webhook_extend(id, '1 minute') IS NOT NULL".into(),
        "SELECT webhook_complete(id) FROM webhook_next(10)".into(),
        "SELECT * FROM webhook.inbox_stats".into(),
    ];
    let mut attack = Attack::start("planted operators and aggregates before CREATE EXTENSION");
    for sql in &calls {
        let outcome = attack.attempt(
            || admin.batch_execute(sql),
            |r| matches!(r, Err(e) if message(e).contains("planted")),
        );
        match outcome {
            Ok(()) => {}
            Err(e) if sql.contains("delivery_log WHERE event_id = 'evt_planted'") => {
                assert_eq!(sql_state(&e), Some("55000"), "{sql}: {e}");
            }
            Err(e) => panic!("{sql}: {}", message(&e)),
        }
    }
    // Answers came from the real operators: the claim was claimed, the
    // duplicate a duplicate, the forgery rejected, the inbox queued.
    assert_eq!(count(&mut admin, "SELECT count(*) FROM webhook.events"), 11);
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE status OPERATOR(pg_catalog.=) 'processed'"
        ),
        count(&mut admin, "SELECT count(*) FROM webhook.inbox"),
        "every queued event leased and completed"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.rejected_deliveries"
        ),
        1
    );
    attack.finish();
}

/// A role that held default privileges on everything the extension's owner
/// creates, granted before `CREATE EXTENSION`.
#[test]
fn default_privileges_granted_before_install_give_nothing() {
    let _turn = one_at_a_time();
    let db = "pgwi_attacks_defaults";
    let mut admin = empty_database(db);
    ensure_role(&mut admin, "snoop", true);
    admin
        .batch_execute(
            "ALTER DEFAULT PRIVILEGES GRANT ALL ON TABLES TO snoop;
             ALTER DEFAULT PRIVILEGES GRANT ALL ON SEQUENCES TO snoop;
             ALTER DEFAULT PRIVILEGES GRANT ALL ON FUNCTIONS TO snoop;
             ALTER DEFAULT PRIVILEGES GRANT ALL ON SCHEMAS TO snoop;
             ALTER DEFAULT PRIVILEGES GRANT ALL ON TYPES TO snoop;
             ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON FUNCTIONS TO snoop;
             ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT ALL ON TABLES TO snoop;
             CREATE EXTENSION pg_webhook_inbox;
             SELECT webhook_register_provider('stripe', secret => 'whsec_never_readable');",
        )
        .unwrap();
    let mut snoop = connect_as(db, "snoop");
    let mut attack = Attack::start("default privileges granted before CREATE EXTENSION");
    for sql in [
        "SELECT secret FROM webhook.provider_secrets",
        "SELECT * FROM webhook.providers",
        "SELECT * FROM webhook.events",
        "SELECT * FROM webhook.deliveries",
        "SELECT * FROM webhook.signature_bindings",
        "UPDATE webhook.events SET status = 'processed'",
        "CREATE TABLE webhook.planted (x int)",
        "SELECT * FROM webhook_register_provider('evil', scheme => 'github')",
        "SELECT webhook_add_secret('stripe', 'attacker-secret')",
        "SELECT webhook_retire_secret('stripe', 'whsec_never_readable')",
        "SELECT * FROM webhook_providers()",
        "SELECT * FROM webhook_claim('stripe', 'evt_snoop', 't', '{}'::jsonb, NULL)",
        "SELECT webhook_purge('1 second')",
        "SELECT webhook_grant_app('snoop')",
    ] {
        let outcome = attack.attempt(|| snoop.batch_execute(sql), |r| r.is_ok());
        if let Err(e) = outcome {
            assert_eq!(sql_state(&e), Some("42501"), "{sql}: {e}");
        }
    }
    attack.finish();
}

/// Inputs sized to pin a core: each refused or answered at once.
#[test]
fn hostile_inputs_are_refused_or_answered_at_once() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let bound = Duration::from_secs(2);
    let slow_or = |elapsed: Duration, bad: bool| bad || elapsed > bound;

    // 100,000 header names.
    let mut many = serde_json::Map::new();
    for i in 0..100_000 {
        many.insert(
            format!("x-header-{i}"),
            serde_json::Value::String("v".into()),
        );
    }
    many.insert(
        "Stripe-Signature".into(),
        format!("t={},v1={}", now(), "0".repeat(64)).into(),
    );
    let many = serde_json::Value::Object(many).to_string();
    let mut attack = Attack::start("hostile input: 100,000 headers");
    for function in ["webhook_verify", "webhook_verify_detail"] {
        let sql = format!(
            "SELECT ({function}('stripe', $1::text::jsonb, '{{}}'::text, ARRAY['s']))::text"
        );
        let started = Instant::now();
        let answer = attack.attempt(|| admin.query_one(&sql, &[&many]), |r| r.is_err());
        let answer: String = answer.unwrap().get(0);
        assert!(
            !slow_or(started.elapsed(), answer.contains("t,") || answer == "true"),
            "{answer}"
        );
    }
    let started = Instant::now();
    let answer = attack.attempt(
        || answered(&mut admin, "github", &serde_json::from_str(&many).unwrap(), b"{}"),
        |r| !matches!(r, Ok((status, 401, reason, _)) if status == "rejected" && reason == "malformed_header"),
    );
    assert!(answer.is_ok() && started.elapsed() < bound, "{answer:?}");
    // A flood of those fills nothing: their headers are not archived.
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM webhook.delivery_log WHERE provider = 'github' AND headers IS NOT NULL AND reject_reason = 'malformed_header'"),
        0
    );
    attack.finish();

    // A 100 MB body, to every function that takes one.
    let huge = vec![b'x'; 100 * 1024 * 1024];
    let mut attack = Attack::start("hostile input: 100 MB body");
    for sql in [
        "SELECT webhook_verify('github', '{}'::jsonb, $1::bytea, ARRAY['s'])::text",
        "SELECT reason FROM webhook_verify_detail('github', '{}'::jsonb, $1::bytea, ARRAY['s'])",
        "SELECT reason FROM webhook_receive('github', '{}'::jsonb, $1::bytea)",
        "SELECT status FROM webhook_claim('p', 'e', 't', $1::bytea, NULL)",
    ] {
        let outcome = attack.attempt(|| admin.query_one(sql, &[&huge]), |r| r.is_ok());
        let err = outcome.expect_err(sql);
        assert_eq!(sql_state(&err), Some("54000"), "{sql}: {err}");
    }
    attack.finish();
    drop(huge);

    // 10,000 signatures in one header.
    let mut attack = Attack::start("hostile input: 10,000 signatures in one header");
    let stripe_sigs = format!(
        "t={}{}",
        now(),
        format!(",v1={}", "0".repeat(64)).repeat(10_000)
    );
    let standard_sigs = format!("v1,{}= ", "A".repeat(43)).repeat(10_000);
    for (scheme, headers) in [
        (
            "stripe",
            serde_json::json!({ "Stripe-Signature": stripe_sigs }),
        ),
        (
            "standard",
            serde_json::json!({ "webhook-id": "m", "webhook-timestamp": now().to_string(),
                                "webhook-signature": standard_sigs }),
        ),
    ] {
        let sql = "SELECT reason FROM webhook_verify_detail($1, $2::text::jsonb, '{}'::text, ARRAY['whsec_c2VjcmV0'])";
        let reason = attack.attempt(
            || {
                admin
                    .query_one(sql, &[&scheme, &headers.to_string()])
                    .map(|r| r.get::<_, String>(0))
            },
            |r| !matches!(r.as_deref(), Ok("malformed_header")),
        );
        assert!(reason.is_ok(), "{reason:?}");
    }
    attack.finish();

    // Public-key checks cost a hundred HMACs each: 88 Ed25519 signatures in
    // one Standard header are malformed, not tried one by one; 3,000
    // certificates given to webhook_verify are refused at once.
    let mut attack = Attack::start("hostile input: 88 Ed25519 signatures, 3,000 keys");
    let v1a = format!("v1a,{}== ", "A".repeat(86)).repeat(88);
    let headers = serde_json::json!({ "webhook-id": "m", "webhook-timestamp": now().to_string(),
                                      "webhook-signature": v1a });
    let key = format!("whpk_{}", "A".repeat(43) + "=");
    let reason = attack.attempt(
        || {
            admin
                .query_one(
                    "SELECT reason FROM webhook_verify_detail('standard', $1::text::jsonb, '{}'::text, ARRAY[$2])",
                    &[&headers.to_string(), &key],
                )
                .map(|r| r.get::<_, String>(0))
        },
        |r| !matches!(r.as_deref(), Ok("malformed_header")),
    );
    assert!(reason.is_ok(), "{reason:?}");
    let outcome = attack.attempt(
        || {
            admin.query_one(
                "SELECT webhook_verify('paypal;webhook_id=WH-1', '{}'::jsonb, '{}'::text,
                                       array_fill('https://c\n-----BEGIN CERTIFICATE-----'::text, ARRAY[3000]))",
                &[],
            )
        },
        |r| r.is_ok(),
    );
    let err = outcome.expect_err("3,000 keys are refused");
    assert_eq!(sql_state(&err), Some("22023"), "{err}");
    attack.finish();

    // Deep JSON, in the headers and in a genuinely signed body.
    let mut attack = Attack::start("hostile input: deep JSON in headers and body");
    let deep = format!("{{\"a\": {}1{}}}", "[".repeat(5_000), "]".repeat(5_000));
    let outcome = attack.attempt(
        || {
            admin
                .query_one(
                    "SELECT reason FROM webhook_verify_detail('github', $1::text::jsonb, '{}'::text, ARRAY['s'])",
                    &[&deep],
                )
                .map(|r| r.get::<_, String>(0))
        },
        |r| match r {
            Ok(reason) => reason != "malformed_header",
            // PostgreSQL's own parser may refuse it first: that is refused too.
            Err(e) => sql_state(e) == Some("XX000"),
        },
    );
    eprintln!("deep headers: {outcome:?}");
    let headers = github("deep-1", "push", &deep, GITHUB_SECRET);
    let outcome = attack.attempt(
        || answered(&mut admin, "github", &headers, deep.as_bytes()),
        |r| !matches!(r, Ok((_, 400, reason, _)) if reason == "malformed_body"),
    );
    assert!(outcome.is_ok(), "{outcome:?}");
    attack.finish();
}

/// A long verification (a 24 MB body against 64 secrets) stops at its
/// deadline: `statement_timeout`, and `pg_cancel_backend` from elsewhere.
#[test]
fn long_verifications_stop_at_their_deadline() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    admin
        .batch_execute(
            // Stored uncompressed: decompressing the body is PostgreSQL's
            // own uninterruptible work, not the extension's.
            "DROP TABLE IF EXISTS hostile_body;
             CREATE TABLE hostile_body (body bytea, secrets text[]);
             ALTER TABLE hostile_body ALTER COLUMN body SET STORAGE EXTERNAL;
             INSERT INTO hostile_body
                 SELECT convert_to(repeat('x', 24 * 1024 * 1024), 'UTF8'),
                        (SELECT array_agg('secret-' || i) FROM generate_series(1, 16) i);",
        )
        .unwrap();
    let long_call = format!(
        "SELECT webhook_verify('github', '{{\"X-Hub-Signature-256\": \"sha256={}\"}}'::jsonb, body, secrets)
           FROM hostile_body",
        "0".repeat(64)
    );
    let allowed = Duration::from_millis(100);

    let mut attack = Attack::start("hostile input: long verify, statement_timeout 300 ms");
    for _ in 0..3 {
        admin
            .batch_execute("SET statement_timeout = '300ms'")
            .unwrap();
        let started = Instant::now();
        let outcome = attack.attempt(
            || admin.query_one(&long_call, &[]),
            |r| !matches!(r, Err(e) if sql_state(e) == Some("57014")),
        );
        let late = started.elapsed().saturating_sub(Duration::from_millis(300));
        admin.batch_execute("RESET statement_timeout").unwrap();
        assert!(outcome.is_err());
        assert!(late < allowed, "stopped {late:?} after its deadline");
    }
    attack.finish();

    let mut attack = Attack::start("hostile input: long verify, pg_cancel_backend after 300 ms");
    let pid: i32 = admin
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    for _ in 0..3 {
        let mut canceller = connect(DB);
        let handle = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let at = Instant::now();
            canceller
                .execute("SELECT pg_cancel_backend($1)", &[&pid])
                .unwrap();
            at
        });
        let outcome = attack.attempt(
            || admin.query_one(&long_call, &[]),
            |r| !matches!(r, Err(e) if sql_state(e) == Some("57014")),
        );
        let stopped = Instant::now();
        let cancelled_at = handle.join().unwrap();
        assert!(outcome.is_err());
        let late = stopped.saturating_duration_since(cancelled_at);
        assert!(late < allowed, "stopped {late:?} after the cancel");
    }
    attack.finish();
}

/// A flood of forgeries with large bodies and hundreds of kilobytes of
/// headers: each kept as a bounded prefix, its credentials redacted.
#[test]
fn forgeries_cannot_fill_the_archive_nor_keep_credentials() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    let body = format!(r#"{{"pad":"{}"}}"#, "x".repeat(1024 * 1024));
    let mut attack = Attack::start("forgery flood: 1 MB bodies kept as a bounded prefix");
    for i in 0..20 {
        let headers = merged(
            github(&format!("flood-{i}"), "push", &body, "not-the-secret"),
            serde_json::json!({ "Authorization": "Bearer sk_live_flood", "Cookie": "session=flood" }),
        );
        attack.attempt(
            || answered(&mut admin, "github", &headers, body.as_bytes()).unwrap(),
            |(status, ..)| status != "rejected",
        );
    }
    let row = admin
        .query_one(
            "SELECT max(octet_length(raw_body)), min(body_size), bool_and(body_sha256 IS NOT NULL),
                    bool_or(headers::text LIKE '%sk_live_flood%' OR headers::text LIKE '%session=flood%')
               FROM webhook.delivery_log WHERE event_id IS NULL AND reject_reason = 'bad_signature'
                AND headers->>'X-GitHub-Delivery' LIKE 'flood-%'",
            &[],
        )
        .unwrap();
    let (kept, size, digested, leaked): (i32, i32, bool, bool) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    assert_eq!(
        (kept, size as usize, digested, leaked),
        (4096, body.len(), true, false)
    );
    attack.finish();
}

/// A shared token is the secret itself: no token a sender sends, genuine
/// or forged, is archived or stored as a signature. It signs nothing, so
/// the id is all there is: another body under it is the same event, the
/// same body under another id another event.
#[test]
fn a_shared_token_is_never_archived_and_its_id_is_all_there_is() {
    let _turn = one_at_a_time();
    let mut admin = setup();
    admin
        .execute(
            // Queued: a redelivery is then a duplicate at once, where a
            // claim would be in progress until completed.
            "SELECT webhook_register_provider('gitlab', secret => $1, inbox => true)",
            &[&GITLAB_TOKEN],
        )
        .unwrap();
    let body = br#"{"object_kind":"push","ref":"refs/heads/main"}"#;
    let headers = |token: &str, key: &str| {
        serde_json::json!({ "X-Gitlab-Token": token, "X-Gitlab-Event": "Push Hook",
                            "Idempotency-Key": key })
    };
    let mut attack = Attack::start("shared token: kept out of the archive, its id all there is");
    let genuine = answered(&mut admin, "gitlab", &headers(GITLAB_TOKEN, "gl-1"), body).unwrap();
    assert!((200..300).contains(&genuine.1), "{genuine:?}");
    assert_eq!(genuine.3.as_deref(), Some("gl-1"));
    let again = answered(&mut admin, "gitlab", &headers(GITLAB_TOKEN, "gl-1"), body).unwrap();
    assert_eq!(again.0, "duplicate");
    let other = br#"{"object_kind":"push","ref":"refs/heads/other"}"#;
    let same_id = answered(&mut admin, "gitlab", &headers(GITLAB_TOKEN, "gl-1"), other).unwrap();
    assert_eq!(same_id.0, "duplicate");
    let new_id = answered(&mut admin, "gitlab", &headers(GITLAB_TOKEN, "gl-5"), body).unwrap();
    assert!(
        (200..300).contains(&new_id.1) && new_id.0 != "duplicate",
        "{new_id:?}"
    );
    for (token, key, reason) in [
        ("attack-test-gitlab-tokeN", "gl-2", "bad_signature"),
        ("", "gl-3", "malformed_header"),
        (&"t".repeat(1025) as &str, "gl-4", "malformed_header"),
    ] {
        let answer = attack.attempt(
            || answered(&mut admin, "gitlab", &headers(token, key), body).unwrap(),
            |(status, ..)| status != "rejected",
        );
        assert_eq!((answer.1, answer.2.as_str()), (401, reason), "{key}");
    }
    let leaked: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.delivery_log
              WHERE provider = 'gitlab'
                AND (headers::text LIKE '%attack-test-gitlab-tok%' OR signature IS NOT NULL
                     OR headers->>'X-Gitlab-Token' IS DISTINCT FROM '[redacted]')",
            &[],
        )
        .unwrap()
        .get(0);
    let logged: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.delivery_log WHERE provider = 'gitlab'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!((leaked, logged >= 5), (0, true), "{logged} logged");
    attack.finish();
}

/// What an application role could do to hold events or learn another
/// claim's id, and what ids could collide.
#[test]
fn leases_error_details_and_ids_are_bounded() {
    let _turn = one_at_a_time();
    let mut admin = setup();

    let mut attack = Attack::start("lease held past webhook.max_lease");
    for sql in [
        "SELECT * FROM webhook_claim('stripe', 'evt_hold', 't', '{}'::jsonb, NULL, '1 day')",
        "SELECT * FROM webhook_claim('stripe', 'evt_hold', 't', '{}'::jsonb, NULL, '100 years')",
    ] {
        let outcome = attack.attempt(|| admin.query_one(sql, &[]), |r| r.is_ok());
        assert_eq!(sql_state(&outcome.unwrap_err()), Some("22023"));
    }
    let id: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_hold', 't', '{}'::jsonb, NULL, '1 minute')",
            &[],
        )
        .unwrap()
        .get(0);
    let outcome = attack.attempt(
        || admin.query_one("SELECT webhook_extend($1::text::uuid, '1 year')", &[&id]),
        |r| r.is_ok(),
    );
    assert_eq!(sql_state(&outcome.unwrap_err()), Some("22023"));
    admin
        .batch_execute("SET webhook.lease_timeout = '30d'")
        .unwrap();
    let seconds: f64 = attack.attempt(
        || {
            admin
                .execute(
                    "SELECT webhook_claim('stripe', 'evt_hold_default', 't', '{}'::jsonb, NULL)",
                    &[],
                )
                .unwrap();
            admin
                .query_one(
                    "SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::float8
                       FROM webhook.events WHERE event_id = 'evt_hold_default'",
                    &[],
                )
                .unwrap()
                .get(0)
        },
        |s: &f64| *s > 3600.0,
    );
    assert!(seconds <= 3600.0);
    admin.batch_execute("RESET webhook.lease_timeout").unwrap();
    attack.finish();

    // The stale owner's error names no other claim id.
    let mut attack = Attack::start("claim id of the new owner in a 55006 error");
    let stale: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_leak', 't', '{}'::jsonb, NULL, '1 millisecond')",
            &[],
        )
        .unwrap()
        .get(0);
    std::thread::sleep(Duration::from_millis(20));
    let current: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_leak', 't', '{}'::jsonb, NULL)",
            &[],
        )
        .unwrap()
        .get(0);
    let err = attack.attempt(
        || admin.execute("SELECT webhook_complete($1::text::uuid)", &[&stale]),
        |r| match r {
            Ok(_) => true,
            Err(e) => {
                let db = e.as_db_error().unwrap();
                let all = format!("{} {:?} {:?}", db.message(), db.detail(), db.hint());
                all.contains(&current)
            }
        },
    );
    assert_eq!(sql_state(&err.unwrap_err()), Some("55006"));
    attack.finish();

    let mut attack = Attack::start("unbounded webhook_fail message kept forever");
    let id: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_long_err', 't', '{}'::jsonb, NULL)",
            &[],
        )
        .unwrap()
        .get(0);
    let message = "e".repeat(10 * 1024 * 1024);
    attack.attempt(
        || {
            admin
                .execute("SELECT webhook_fail($1::text::uuid, $2)", &[&id, &message])
                .unwrap()
        },
        |_| false,
    );
    let kept: i32 = attack.attempt(
        || {
            admin
                .query_one("SELECT octet_length(last_error) FROM webhook.events WHERE event_id = 'evt_long_err'", &[])
                .unwrap()
                .get(0)
        },
        |kept: &i32| *kept > 2048,
    );
    assert!(kept <= 2048);
    attack.finish();

    // Distinct ids above 2^53 that f64 would merge.
    let mut attack = Attack::start("numeric event ids above 2^53 collide");
    admin
        .execute(
            "SELECT webhook_register_provider('numeric', secret => 'num-secret', scheme => 'hmac;header=X-Sig',
                 event_id_from => 'body:id', event_type_from => 'body:type')",
            &[],
        )
        .unwrap();
    for id in ["9007199254740992", "9007199254740993", "9007199254740994"] {
        let body = format!(r#"{{"id":{id},"type":"t"}}"#);
        let sig = hex::encode(hmac_sha256(b"num-secret", &[body.as_bytes()]));
        let headers = serde_json::json!({ "X-Sig": sig });
        attack.attempt(
            || answered(&mut admin, "numeric", &headers, body.as_bytes()).unwrap(),
            |(status, .., event_id)| status != "claimed" || event_id.as_deref() != Some(id),
        );
    }
    attack.finish();

    // A header serde cannot hold as a float: an answer, not XX000.
    let mut attack = Attack::start("unreadable number in a header");
    for headers in [
        r#"{"X-Hub-Signature-256": 1e400}"#,
        r#"{"X-Other": -1e400, "X-Hub-Signature-256": "sha256=00"}"#,
    ] {
        let outcome = attack.attempt(
            || {
                admin
                    .query_one(
                        "SELECT reason FROM webhook_verify_detail('github', $1::text::jsonb, '{}'::text, ARRAY['s'])",
                        &[&headers],
                    )
                    .map(|r| r.get::<_, String>(0))
            },
            |r| r.is_err(),
        );
        assert_eq!(outcome.unwrap(), "malformed_header");
    }
    attack.finish();
}

/// One database serving two teams: each team's application role is scoped
/// to its own providers and consumers. From its own live connection, each
/// tries to squat, lease and finish the other's events; the scopes are set,
/// changed and set again (once under `session_replication_role = replica`,
/// as a restore applies them) while those connections stay open.
#[test]
fn a_teams_role_cannot_reach_another_teams_events() {
    let _turn = one_at_a_time();
    let db = database(DB);
    let mut admin = setup();
    admin
        .batch_execute(
            "SELECT webhook_register_provider('orders', scheme => 'github', secret => 'orders-secret',
                                              inbox => true, consumers => '{fulfil,audit}');
             DELETE FROM webhook.app_scopes;",
        )
        .unwrap();
    for team in ["team_a_app", "team_b_app"] {
        ensure_role(&mut admin, team, true);
        admin
            .execute("SELECT webhook_grant_app($1::text::regrole)", &[&team])
            .unwrap();
    }
    let mut team_a = connect_as(db, "team_a_app");
    let mut team_b = connect_as(db, "team_b_app");
    let enqueue =
        "SELECT queued FROM webhook_enqueue('orders', $1, 'order.paid', '{}'::jsonb, NULL)";
    // Unscoped, one trust domain: team A's session reads (and keeps) that
    // nobody is scoped.
    let unscoped: bool = team_a
        .query_one(enqueue, &[&"ord_before_scopes"])
        .unwrap()
        .get(0);
    assert!(unscoped);
    admin
        .batch_execute(
            "SELECT webhook_scope_app('team_a_app', '{github}');
             SELECT webhook_scope_app('team_b_app', '{orders}', '{fulfil}');",
        )
        .unwrap();

    // Team B's work in flight: a lease for fulfil, and one for audit that
    // the owner's tooling holds.
    team_b.query_one(enqueue, &[&"ord_1"]).unwrap();
    let lease = |client: &mut Client, consumer: &str| -> String {
        client
            .query_one(
                "SELECT id::text FROM webhook_next(10, provider => 'orders', consumer => $1)
                  WHERE event_id = 'ord_1'",
                &[&consumer],
            )
            .unwrap()
            .get(0)
    };
    let fulfil = lease(&mut team_b, "fulfil");
    let audit = lease(&mut admin, "audit");
    // Team A's claim.
    let body = r#"{"action":"opened"}"#;
    let headers = github("gh-team-a-1", "issues", body, GITHUB_SECRET);
    let claim_a: String = receive(&mut team_a, "github", &headers, body.as_bytes())
        .unwrap()
        .get("id_text");

    let mut attack = Attack::start("a team's role on another team's events");
    let (fulfil, audit, claim_a) = (fulfil.as_str(), audit.as_str(), claim_a.as_str());
    for (sql, param) in [
        (enqueue, "ord_squat"),
        (
            "SELECT * FROM webhook_claim('orders', $1, 't', '{}'::jsonb, NULL)",
            "ord_squat",
        ),
        ("SELECT * FROM webhook_next(provider => $1)", "orders"),
        ("SELECT * FROM webhook_next(event_type => $1)", "order.paid"),
        ("SELECT webhook_complete($1::text::uuid)", fulfil),
        (
            "SELECT webhook_fail($1::text::uuid, 'sabotage', '1 hour')",
            fulfil,
        ),
        ("SELECT webhook_extend($1::text::uuid, '1 hour')", fulfil),
        ("SELECT webhook_complete($1::text::uuid)", audit),
    ] {
        refused(&mut attack, &mut team_a, sql, param);
    }
    for (sql, param) in [
        (
            "SELECT * FROM webhook_claim('github', $1, 't', '{}'::jsonb, NULL)",
            "gh-team-a-2",
        ),
        (
            "SELECT * FROM webhook_next(provider => 'orders', consumer => $1)",
            "audit",
        ),
        ("SELECT webhook_complete($1::text::uuid)", audit),
        ("SELECT webhook_complete($1::text::uuid)", claim_a),
        ("SELECT webhook_fail($1::text::uuid, 'sabotage')", claim_a),
    ] {
        refused(&mut attack, &mut team_b, sql, param);
    }
    // Team A's genuine delivery, captured and sent by team B.
    let forged = attack.attempt(
        || receive(&mut team_b, "github", &headers, body.as_bytes()),
        |r| r.is_ok(),
    );
    assert_eq!(sql_state(&forged.unwrap_err()), Some("42501"));

    // Each team's own work is untouched and finishes.
    team_b
        .execute("SELECT webhook_complete($1::text::uuid)", &[&fulfil])
        .unwrap();
    team_a
        .execute("SELECT webhook_complete($1::text::uuid)", &[&claim_a])
        .unwrap();
    admin
        .execute("SELECT webhook_complete($1::text::uuid)", &[&audit])
        .unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE event_id IN ('ord_squat', 'gh-team-a-2')"
        ),
        0,
        "nothing squatted"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE event_id = 'ord_1' AND status = 'processed'"
        ),
        2
    );

    // Unscoped, then scoped again under session_replication_role =
    // replica: both reach the open sessions at their next call.
    admin
        .batch_execute("SELECT webhook_unscope_app('team_a_app')")
        .unwrap();
    team_a.query_one(enqueue, &[&"ord_unscoped"]).unwrap();
    admin
        .batch_execute(
            "SET session_replication_role = replica;
             INSERT INTO webhook.app_scopes (role, providers) VALUES ('team_a_app', '{github}');
             RESET session_replication_role;",
        )
        .unwrap();
    refused(&mut attack, &mut team_a, enqueue, "ord_restored_scope");
    attack.finish();
    admin
        .batch_execute("DELETE FROM webhook.app_scopes")
        .unwrap();
}

/// One attempt that must be refused as out of the role's scope (42501).
fn refused(attack: &mut Attack, client: &mut Client, sql: &str, param: &str) {
    let outcome = attack.attempt(|| client.query(sql, &[&param]), |r| r.is_ok());
    let err = outcome.unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{sql}: {}", message(&err));
}

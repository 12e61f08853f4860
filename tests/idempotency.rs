//! Idempotency keys over real connections: an order API whose requests
//! carry an `Idempotency-Key`, creating an order and charging a card at a
//! stand-in payment API that honours idempotency keys as Stripe does; and
//! a webhook handler whose external charge is keyed by the event.
//!
//! Crashes are real: the connection of a request that "crashes" is closed
//! (or its backend terminated) between two steps, and the retry runs on
//! another connection after the lease runs out.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::sync::{Arc, Barrier, OnceLock};
use std::time::Duration;

/// The suite's database, with the order API's table and the payment API.
fn db() -> &'static str {
    static READY: OnceLock<&'static str> = OnceLock::new();
    READY.get_or_init(|| {
        let name = database("pgwi_idempotency");
        connect(name)
            .batch_execute(
                "CREATE TABLE orders (
                     id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
                     key     text NOT NULL,
                     sku     text NOT NULL
                 );
                 -- The payment API, reached over its own connection as an
                 -- external service would be: a charge is made once per
                 -- idempotency key; a repeat gets the first charge back.
                 CREATE TABLE charges (
                     idempotency_key text PRIMARY KEY,
                     amount          integer NOT NULL,
                     charge_id       text NOT NULL DEFAULT 'ch_' || gen_random_uuid(),
                     requests        integer NOT NULL DEFAULT 1
                 );
                 CREATE FUNCTION pay(key text, amount integer) RETURNS text
                 LANGUAGE sql AS $$
                     INSERT INTO charges (idempotency_key, amount) VALUES (key, amount)
                     ON CONFLICT (idempotency_key) DO UPDATE SET requests = charges.requests + 1
                     RETURNING charge_id
                 $$;",
            )
            .unwrap();
        name
    })
}

/// Where a request stops, to stand for a crash of its process.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Crash {
    Never,
    /// After the order's step committed, before the card is charged.
    AfterOrder,
    /// After the charge, before the step that records it commits.
    AfterCharge,
}

#[derive(Debug, PartialEq, Eq)]
enum Answer {
    /// (HTTP status, body)
    Http(i32, String),
    Crashed,
}

/// `POST /orders` with an `Idempotency-Key`: begin, create the order
/// (recovery point `created_order`), charge the card with an outbound key
/// (recovery point `charged_card`), finish with 201. `hold` keeps the
/// request busy between its steps, as a slow one would.
fn post_order(app: &mut Client, key: &str, sku: &str, crash: Crash, hold: Duration) -> Answer {
    let row = app
        .query_one(
            "SELECT outcome, request_id::text, http_status, recovery_point, recovery->'created_order'->>'order_id',
                    response_body
               FROM idempotency_begin('customer-1', $1, idempotency_fingerprint('POST', '/orders', $2::text),
                                      lease => '2 seconds')",
            &[&key, &sku],
        )
        .unwrap();
    let outcome: String = row.get(0);
    if outcome != "new" {
        return Answer::Http(
            row.get(2),
            row.get::<_, Option<String>>(5).unwrap_or_default(),
        );
    }
    let request: String = row.get(1);
    let point: Option<String> = row.get(3);
    let mut order_id: Option<String> = row.get(4);

    if point.is_none() {
        let mut tx = app.transaction().unwrap();
        let id: i64 = tx
            .query_one(
                "INSERT INTO orders (key, sku) VALUES ($1, $2) RETURNING id",
                &[&key, &sku],
            )
            .unwrap()
            .get(0);
        tx.execute(
            "SELECT idempotency_checkpoint($1::text::uuid, 'created_order', jsonb_build_object('order_id', $2::bigint::text))",
            &[&request, &id],
        )
        .unwrap();
        tx.commit().unwrap();
        order_id = Some(id.to_string());
        std::thread::sleep(hold);
        if crash == Crash::AfterOrder {
            return Answer::Crashed;
        }
    }
    let order_id = order_id.expect("the order step recorded its order");

    // The external call: keyed by the order, which the recovery point makes
    // the same on every attempt.
    let charge_key: String = app
        .query_one(
            "SELECT webhook_outbound_key('orders-api', $1, 'charge')",
            &[&order_id],
        )
        .unwrap()
        .get(0);
    let charge: String = connect(db())
        .query_one("SELECT pay($1, 1000)", &[&charge_key])
        .unwrap()
        .get(0);
    if crash == Crash::AfterCharge {
        return Answer::Crashed;
    }
    let body = format!("{{\"order\": {order_id}, \"charge\": \"{charge}\"}}");
    let mut tx = app.transaction().unwrap();
    tx.execute(
        "SELECT idempotency_checkpoint($1::text::uuid, 'charged_card', jsonb_build_object('charge', $2::text))",
        &[&request, &charge],
    )
    .unwrap();
    tx.execute(
        "SELECT idempotency_finish($1::text::uuid, 201, $2)",
        &[&request, &body],
    )
    .unwrap();
    tx.commit().unwrap();
    Answer::Http(201, body)
}

fn count(client: &mut Client, sql: &str, key: &str) -> i64 {
    client.query_one(sql, &[&key]).unwrap().get(0)
}

fn orders(client: &mut Client, key: &str) -> i64 {
    count(client, "SELECT count(*) FROM orders WHERE key = $1", key)
}

/// Charges made for the orders of `key` (each at most once per outbound key).
fn charges(client: &mut Client, key: &str) -> i64 {
    count(
        client,
        "SELECT count(*) FROM charges c JOIN orders o
             ON c.idempotency_key = webhook_outbound_key('orders-api', o.id::text, 'charge')
          WHERE o.key = $1",
        key,
    )
}

#[test]
fn ten_identical_requests_at_once_make_one_order_and_one_charge() {
    let db = db();
    let barrier = Arc::new(Barrier::new(10));
    let answers: Vec<Answer> = (0..10)
        .map(|_| {
            let barrier = Arc::clone(&barrier);
            std::thread::spawn(move || {
                let mut app = connect(db);
                // Nothing may wait on another request's transaction.
                app.batch_execute("SET lock_timeout = '50ms'").unwrap();
                barrier.wait();
                post_order(
                    &mut app,
                    "burst",
                    "sku-1",
                    Crash::Never,
                    Duration::from_millis(300),
                )
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    let created: Vec<&Answer> = answers
        .iter()
        .filter(|a| matches!(a, Answer::Http(201, _)))
        .collect();
    let busy = answers
        .iter()
        .filter(|a| matches!(a, Answer::Http(409, _)))
        .count();
    assert!(!created.is_empty(), "{answers:?}");
    // The owner's 201, and replays of exactly that answer; the rest 409.
    assert!(created.windows(2).all(|w| w[0] == w[1]), "{answers:?}");
    assert_eq!(created.len() + busy, 10, "{answers:?}");

    let mut check = connect(db);
    assert_eq!(orders(&mut check, "burst"), 1);
    assert_eq!(charges(&mut check, "burst"), 1);
    // Later retries get the stored answer.
    assert_eq!(
        post_order(&mut check, "burst", "sku-1", Crash::Never, Duration::ZERO),
        *created[0]
    );
    assert_eq!(orders(&mut check, "burst"), 1);
}

#[test]
fn the_same_key_with_another_body_is_a_mismatch() {
    let mut app = connect(db());
    let first = post_order(&mut app, "reuse", "sku-1", Crash::Never, Duration::ZERO);
    assert!(matches!(first, Answer::Http(201, _)));
    assert_eq!(
        post_order(&mut app, "reuse", "sku-2", Crash::Never, Duration::ZERO),
        Answer::Http(422, String::new())
    );
    assert_eq!(orders(&mut app, "reuse"), 1);
}

#[test]
fn a_crash_between_steps_resumes_and_charges_once() {
    for (key, crash) in [
        ("crash-1", Crash::AfterOrder),
        ("crash-2", Crash::AfterCharge),
    ] {
        let mut doomed = connect(db());
        assert_eq!(
            post_order(&mut doomed, key, "sku-1", crash, Duration::ZERO),
            Answer::Crashed
        );
        drop(doomed);
        let mut app = connect(db());
        // While the crashed request's lease runs, the key is busy.
        assert_eq!(
            post_order(&mut app, key, "sku-1", Crash::Never, Duration::ZERO),
            Answer::Http(409, String::new())
        );
        std::thread::sleep(Duration::from_millis(2100));
        let resumed = post_order(&mut app, key, "sku-1", Crash::Never, Duration::ZERO);
        assert!(
            matches!(resumed, Answer::Http(201, _)),
            "{key}: {resumed:?}"
        );
        assert_eq!(
            orders(&mut app, key),
            1,
            "{key}: the order was not made again"
        );
        assert_eq!(charges(&mut app, key), 1, "{key}: one charge");
        let attempts = count(
            &mut app,
            "SELECT attempts::bigint FROM webhook.idempotency_keys WHERE key = $1",
            key,
        );
        assert_eq!(attempts, 2, "{key}");
    }
}

#[test]
fn a_backend_killed_inside_a_step_loses_the_step_not_the_key() {
    let db = db();
    let mut doomed = connect(db);
    let request: String = doomed
        .query_one(
            "SELECT request_id::text FROM idempotency_begin('customer-1', 'killed', 'fp', lease => '1 second')",
            &[],
        )
        .unwrap()
        .get(0);
    let pid: i32 = doomed
        .query_one("SELECT pg_backend_pid()", &[])
        .unwrap()
        .get(0);
    let mut tx = doomed.transaction().unwrap();
    tx.execute(
        "SELECT idempotency_checkpoint($1::text::uuid, 'created_order', '{\"order_id\": \"1\"}')",
        &[&request],
    )
    .unwrap();
    let mut admin = connect(db);
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap();
    assert!(tx.commit().is_err());
    std::thread::sleep(Duration::from_millis(1100));
    let row = admin
        .query_one(
            "SELECT outcome, recovery_point FROM idempotency_begin('customer-1', 'killed', 'fp')",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "new");
    assert_eq!(
        row.get::<_, Option<String>>(1),
        None,
        "the killed step never happened"
    );
}

/// A webhook handler that charges a card while processing an event, retried
/// by the provider three times (it fails twice after the charge), makes
/// one charge: the outbound key is the event's on every attempt.
#[test]
fn a_handler_retried_three_times_charges_once() {
    let db = db();
    let mut app = connect(db);
    let mut requests = Vec::new();
    for attempt in 1..=3 {
        let claim = claim_in(&mut app, "stripe", "evt_charge", Some("30 seconds")).unwrap();
        assert!(claim.claimed, "attempt {attempt}: {}", claim.status);
        let key: String = app
            .query_one(
                "SELECT webhook_outbound_key($1::text::uuid, 'charge')",
                &[&claim.id],
            )
            .unwrap()
            .get(0);
        requests.push(key.clone());
        connect(db)
            .query_one("SELECT pay($1, 500)", &[&key])
            .unwrap();
        if attempt < 3 {
            app.execute(
                "SELECT webhook_fail($1::text::uuid, 'the confirmation email bounced')",
                &[&claim.id],
            )
            .unwrap();
        } else {
            app.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])
                .unwrap();
        }
    }
    assert!(requests.windows(2).all(|w| w[0] == w[1]), "{requests:?}");
    let (charges, calls): (i64, i64) = {
        let row = app
            .query_one(
                "SELECT count(*), sum(requests)::bigint FROM charges WHERE idempotency_key = $1",
                &[&requests[0]],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!((charges, calls), (1, 3));
    assert_eq!(event_state(&mut app, "stripe", "evt_charge").0, "processed");
}

/// In one-transaction use a failure rolls the key back with the work: the
/// client's retry starts from nothing and makes the order once.
#[test]
fn a_rolled_back_request_leaves_its_key_free() {
    let mut app = connect(db());
    let sql = "SELECT outcome, request_id::text, recovery_point
                 FROM idempotency_begin('customer-1', 'rolled-back', 'fp')";
    {
        let mut tx = app.transaction().unwrap();
        let row = tx.query_one(sql, &[]).unwrap();
        assert_eq!(row.get::<_, String>(0), "new");
        tx.execute(
            "INSERT INTO orders (key, sku) VALUES ('rolled-back', 'sku-1')",
            &[],
        )
        .unwrap();
        // The handler fails before finishing: its transaction rolls back.
        tx.rollback().unwrap();
    }
    let mut tx = app.transaction().unwrap();
    let row = tx.query_one(sql, &[]).unwrap();
    assert_eq!(row.get::<_, String>(0), "new");
    assert_eq!(row.get::<_, Option<String>>(2), None);
    let request: String = row.get(1);
    tx.execute(
        "INSERT INTO orders (key, sku) VALUES ('rolled-back', 'sku-1')",
        &[],
    )
    .unwrap();
    tx.execute(
        "SELECT idempotency_finish($1::text::uuid, 201, 'made')",
        &[&request],
    )
    .unwrap();
    tx.commit().unwrap();
    assert_eq!(orders(&mut app, "rolled-back"), 1);
    let replay = app.query_one(sql, &[]).unwrap();
    assert_eq!(replay.get::<_, String>(0), "replay");
}

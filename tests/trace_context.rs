//! Trace context from the request to the worker: a traceparent given to
//! webhook_receive (inbox mode) or any form of webhook_enqueue comes back
//! with the event from webhook_next; a redelivery does not replace it; a
//! claimed (not queued) delivery keeps none; a malformed one is refused
//! before anything is written; the purge forgets it with the event's
//! inbox rows; application roles cannot read it.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{now, stripe};
use common::*;
use postgres::Client;

const DB: &str = "pgwi_trace_context";
const SECRET: &str = "whsec_trace";
const REQUEST: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const OTHER: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// The suite's database, with a Stripe provider of the test's own.
fn setup(provider: &str) -> Client {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .execute(
            "SELECT webhook_register_provider($1, scheme => 'stripe', secret => $2)",
            &[&provider, &SECRET],
        )
        .unwrap();
    admin
}

fn receive_traced(
    client: &mut Client,
    provider: &str,
    event_id: &str,
    inbox: bool,
    traceparent: &str,
) -> String {
    let body = format!(r#"{{"id": "{event_id}", "type": "invoice.paid"}}"#);
    client
        .query_one(
            "SELECT status FROM webhook_receive($1, $2::text::jsonb, $3::text, inbox => $4,
                                                traceparent => $5)",
            &[
                &provider,
                &stripe(&body, now(), SECRET).to_string(),
                &body,
                &inbox,
                &traceparent,
            ],
        )
        .unwrap()
        .get(0)
}

/// What webhook_next hands out for each of the provider's ready events:
/// event id → (traceparent, lease id).
fn lease_all(
    client: &mut Client,
    provider: &str,
) -> std::collections::HashMap<String, (Option<String>, String)> {
    client
        .query(
            "SELECT event_id, traceparent, id::text FROM webhook_next(1000, provider => $1)",
            &[&provider],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[test]
fn the_request_trace_reaches_the_worker_and_a_redelivery_does_not_replace_it() {
    let p = "tc_reach";
    let mut admin = setup(p);
    assert_eq!(
        receive_traced(&mut admin, p, "evt_tc_1", true, REQUEST),
        "queued"
    );
    // The provider's retry, under another request's trace: a duplicate.
    assert_eq!(
        receive_traced(&mut admin, p, "evt_tc_1", true, OTHER),
        "duplicate"
    );
    // Each form of webhook_enqueue.
    for (event_id, call) in [
        (
            "evt_tc_jsonb",
            "webhook_enqueue('tc_reach', 'evt_tc_jsonb', 'x', '{}'::jsonb, traceparent => $1)",
        ),
        (
            "evt_tc_bytea",
            "webhook_enqueue('tc_reach', 'evt_tc_bytea', 'x', '{}'::bytea, traceparent => $1)",
        ),
        (
            "evt_tc_text",
            "webhook_enqueue('tc_reach', 'evt_tc_text', 'x', '{}'::text, NULL, $1)",
        ),
    ] {
        let status: String = admin
            .query_one(&format!("SELECT status FROM {call}"), &[&OTHER])
            .unwrap()
            .get(0);
        assert_eq!(status, "queued", "{event_id}");
    }
    admin
        .batch_execute("SELECT webhook_enqueue('tc_reach', 'evt_tc_none', 'x', '{}'::jsonb)")
        .unwrap();

    let leases = lease_all(&mut admin, p);
    assert_eq!(leases.len(), 5);
    let (first, lease) = &leases["evt_tc_1"];
    assert_eq!(
        first.as_deref(),
        Some(REQUEST),
        "the first delivery's request"
    );
    for event_id in ["evt_tc_jsonb", "evt_tc_bytea", "evt_tc_text"] {
        assert_eq!(leases[event_id].0.as_deref(), Some(OTHER), "{event_id}");
    }
    assert_eq!(leases["evt_tc_none"].0, None);
    // A retry gets the same context: the worker decides how to link it.
    admin
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'downstream down', retry_in => interval '0')",
            &[lease],
        )
        .unwrap();
    assert_eq!(
        lease_all(&mut admin, p)["evt_tc_1"].0.as_deref(),
        Some(REQUEST)
    );
}

#[test]
fn a_claimed_delivery_keeps_no_trace_and_a_malformed_one_is_refused_before_anything_is_written() {
    let p = "tc_refuse";
    let mut admin = setup(p);
    assert_eq!(
        receive_traced(&mut admin, p, "evt_tc_claimed", false, REQUEST),
        "claimed"
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.trace_contexts t JOIN webhook.delivery_log l ON l.id = t.delivery_id
              WHERE l.event_id = 'evt_tc_claimed'"
        ),
        0,
        "processed in this transaction: nobody to hand it to"
    );
    for bad in [
        "",
        "not a traceparent",
        "00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01",
        "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
        "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    ] {
        let err = admin
            .query_one(
                "SELECT status FROM webhook_enqueue($1, 'evt_tc_bad', 'x', '{}'::jsonb, traceparent => $2)",
                &[&p, &bad],
            )
            .unwrap_err();
        assert_eq!(sql_state(&err), Some("22023"), "{bad:?}: {}", message(&err));
        assert!(
            message(&err).starts_with("webhook_enqueue: argument \"traceparent\""),
            "{}",
            message(&err)
        );
        let body = r#"{"id": "evt_tc_bad", "type": "invoice.paid"}"#;
        let err = admin
            .query_one(
                "SELECT status FROM webhook_receive($1, $2::text::jsonb, $3::text, traceparent => $4)",
                &[&p, &stripe(body, now(), SECRET).to_string(), &body, &bad],
            )
            .unwrap_err();
        assert_eq!(sql_state(&err), Some("22023"), "{bad:?}: {}", message(&err));
    }
    let huge = format!(
        "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-{}",
        "a".repeat(600)
    );
    let err = admin
        .query_one(
            "SELECT status FROM webhook_enqueue($1, 'evt_tc_bad', 'x', '{}'::jsonb, traceparent => $2)",
            &[&p, &huge],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22023"), "{}", message(&err));
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE event_id = 'evt_tc_bad'"
        ),
        0,
        "nothing half-written"
    );
}

#[test]
fn the_purge_forgets_a_trace_with_its_events_inbox_rows_and_app_roles_cannot_read_it() {
    let p = "tc_purge";
    let mut admin = setup(p);
    admin
        .batch_execute(&format!(
            "SELECT webhook_enqueue('{p}', 'evt_tc_purged', 'x', '{{}}'::jsonb, traceparent => '{REQUEST}')"
        ))
        .unwrap();
    let (_, lease) = lease_all(&mut admin, p).remove("evt_tc_purged").unwrap();
    admin
        .execute("SELECT webhook_complete($1::text::uuid)", &[&lease])
        .unwrap();
    let traces = |admin: &mut Client| {
        count(
            admin,
            "SELECT count(*) FROM webhook.trace_contexts t
              WHERE t.delivery_id = (SELECT claim_id FROM webhook.events WHERE event_id = 'evt_tc_purged')",
        )
    };
    assert_eq!(traces(&mut admin), 1);
    admin
        .batch_execute(
            "UPDATE webhook.inbox SET processed_at = now() - interval '100 days' WHERE event_id = 'evt_tc_purged';
             SELECT webhook_purge(interval '90 days')",
        )
        .unwrap();
    assert_eq!(traces(&mut admin), 0, "gone with its inbox rows");

    ensure_role(&mut admin, "tc_app", true);
    admin
        .batch_execute("SELECT webhook_grant_app('tc_app')")
        .unwrap();
    let err = connect_as(DB, "tc_app")
        .batch_execute("SELECT * FROM webhook.trace_contexts")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{}", message(&err));
}

#[test]
fn a_delivery_rolled_back_after_intake_leaves_no_trace_and_its_redelivery_brings_its_own() {
    let p = "tc_rollback";
    let mut admin = setup(p);
    // The receiver's transaction fails after intake: nothing of it stays.
    let mut tx = admin.transaction().unwrap();
    assert_eq!(
        receive_traced_in(&mut tx, p, "evt_tc_again", REQUEST),
        "queued"
    );
    tx.rollback().unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.trace_contexts t
                             JOIN webhook.delivery_log l ON l.id = t.delivery_id
                            WHERE l.event_id = 'evt_tc_again'"
        ),
        0
    );
    // The provider's retry, under the trace of the request that carried it.
    assert_eq!(
        receive_traced(&mut admin, p, "evt_tc_again", true, OTHER),
        "queued"
    );
    assert_eq!(
        lease_all(&mut admin, p)["evt_tc_again"].0.as_deref(),
        Some(OTHER)
    );
}

fn receive_traced_in(
    tx: &mut postgres::Transaction<'_>,
    provider: &str,
    event_id: &str,
    traceparent: &str,
) -> String {
    let body = format!(r#"{{"id": "{event_id}", "type": "invoice.paid"}}"#);
    tx.query_one(
        "SELECT status FROM webhook_receive($1, $2::text::jsonb, $3::text, inbox => true,
                                            traceparent => $4)",
        &[
            &provider,
            &stripe(&body, now(), SECRET).to_string(),
            &body,
            &traceparent,
        ],
    )
    .unwrap()
    .get(0)
}

//! The headline promise: an event delivered again and again, by a provider
//! that retries on every doubt, has exactly one side effect.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use std::time::Duration;

#[test]
fn one_event_delivered_ten_times_has_one_side_effect() {
    let db = database("pgwi_redelivery");
    let mut client = connect(db);
    let answers: Vec<Answer> = (0..10)
        .map(|_| deliver(&mut client, "stripe", "evt_ten", Duration::ZERO))
        .collect();

    assert_eq!(answers[0], Answer::Done);
    assert!(
        answers[1..].iter().all(|a| *a == Answer::Duplicate),
        "{answers:?}"
    );
    assert_eq!(side_effects(&mut client, "stripe", "evt_ten"), 1);
    assert_eq!(
        event_state(&mut client, "stripe", "evt_ten"),
        ("processed".into(), 1)
    );
    let archive = archive(&mut client, "stripe", "evt_ten");
    assert_eq!(archive.len(), 10, "every delivery is archived");
    assert_eq!(archive[0], "claimed:PROCESSED");
    assert!(
        archive[1..].iter().all(|s| s == "duplicate:SKIPPED"),
        "{archive:?}"
    );
}

/// A TCP reset after COMMIT: the handler's work committed but the answer
/// never reached the provider, which retries. Dropping the connection right
/// after the commit is that, seen from the server.
#[test]
fn retry_after_a_lost_answer_is_a_duplicate() {
    let db = database("pgwi_redelivery");
    {
        let mut lost = connect(db);
        assert_eq!(
            deliver(&mut lost, "paddle", "evt_lost_ack", Duration::ZERO),
            Answer::Done
        );
        // Connection dropped here without the provider hearing back.
    }
    let mut client = connect(db);
    assert_eq!(
        deliver(&mut client, "paddle", "evt_lost_ack", Duration::ZERO),
        Answer::Duplicate
    );
    assert_eq!(side_effects(&mut client, "paddle", "evt_lost_ack"), 1);
}

/// With `webhook.archive_duplicates = off`, answering a duplicate writes
/// nothing: the transaction takes no transaction id, so its commit writes
/// no WAL and waits for no flush, and it runs even in a READ ONLY
/// transaction.
#[test]
fn duplicates_without_archiving_are_read_only_transactions() {
    let db = database("pgwi_redelivery");
    let mut client = connect(db);
    assert_eq!(
        deliver(&mut client, "shopify", "evt_read_only", Duration::ZERO),
        Answer::Done
    );
    client
        .batch_execute("SET webhook.archive_duplicates = off")
        .unwrap();
    let mut tx = client.build_transaction().read_only(true).start().unwrap();
    let claim = claim_in(&mut tx, "shopify", "evt_read_only", None).unwrap();
    assert_eq!((claim.claimed, claim.status.as_str()), (false, "duplicate"));
    let xid: Option<String> = tx
        .query_one("SELECT pg_current_xact_id_if_assigned()::text", &[])
        .unwrap()
        .get(0);
    assert_eq!(xid, None, "the duplicate took a transaction id");
    tx.commit().unwrap();
    assert_eq!(archive(&mut client, "shopify", "evt_read_only").len(), 1);
    assert_eq!(side_effects(&mut client, "shopify", "evt_read_only"), 1);
}

#[test]
fn raw_body_survives_for_re_verification() {
    let db = database("pgwi_redelivery");
    let mut client = connect(db);
    let body = "{\"id\":\"evt_raw\",   \"type\":\"x\"}";
    let signature = "6f1b7a0c2b0e1f4d9a8c7b6e5d4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2";
    client
        .query_one(
            "SELECT status FROM webhook_claim('github', 'evt_raw', 'push', $1::text, $2)",
            &[&body, &signature],
        )
        .unwrap();
    let row = client
        .query_one(
            "SELECT convert_from(raw_body, 'UTF8'), signature, payload->>'id'
               FROM webhook.deliveries WHERE provider = 'github' AND event_id = 'evt_raw'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), body);
    assert_eq!(row.get::<_, String>(1), signature);
    assert_eq!(row.get::<_, String>(2), "evt_raw");
}

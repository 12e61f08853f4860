//! Reconciliation with a provider's events API: events fed in by a
//! poller (`webhook_enqueue_polled`) and delivered as webhooks, in either
//! order and at once, are processed once; the events seen only by polling
//! are listed (`webhook.missed_deliveries`); a forged delivery does not
//! count as one that arrived; a scoped application role polls only its
//! providers.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{now, stripe};
use common::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

const DB: &str = "pgwi_reconciliation";
const SECRET: &str = "whsec_reconcile";

fn body(event_id: &str) -> String {
    format!(r#"{{"id":"{event_id}","type":"invoice.paid","data":{{"object":{{"id":"in_1"}}}}}}"#)
}

/// A signed delivery through webhook_receive (the provider is in inbox
/// mode): its status.
fn deliver(client: &mut Client, event_id: &str, secret: &str) -> String {
    let body = body(event_id);
    let headers = stripe(&body, now(), secret);
    client
        .query_one(
            "SELECT status FROM webhook_receive('fl_stripe', $1::text::jsonb, $2::text)",
            &[&headers.to_string(), &body],
        )
        .unwrap()
        .get(0)
}

/// What the poller feeds in: the event as the events API lists it.
fn poll(client: &mut Client, event_id: &str) -> String {
    client
        .query_one(
            "SELECT status FROM webhook_enqueue_polled('fl_stripe', $1, 'invoice.paid', $2::text::jsonb)",
            &[&event_id, &body(event_id)],
        )
        .unwrap()
        .get(0)
}

fn missed(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT event_id FROM webhook.missed_deliveries WHERE provider = 'fl_stripe' ORDER BY event_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn setup() -> Client {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .execute(
            "SELECT webhook_register_provider('fl_stripe', scheme => 'stripe', secret => $1, inbox => true)
              WHERE NOT EXISTS (SELECT FROM webhook.providers WHERE name = 'fl_stripe')",
            &[&SECRET],
        )
        .unwrap();
    admin
}

#[test]
fn polled_and_delivered_events_are_processed_once_and_the_missed_ones_are_listed() {
    let _one = one_at_a_time();
    let mut admin = setup();
    // Delivered, then polled; polled, then delivered; polled only (twice);
    // delivered only; polled, and delivered forged only.
    assert_eq!(deliver(&mut admin, "evt_r1", SECRET), "queued");
    assert_eq!(poll(&mut admin, "evt_r1"), "duplicate");
    assert_eq!(poll(&mut admin, "evt_r2"), "queued");
    assert_eq!(deliver(&mut admin, "evt_r2", SECRET), "duplicate");
    assert_eq!(poll(&mut admin, "evt_r3"), "queued");
    assert_eq!(poll(&mut admin, "evt_r3"), "duplicate");
    assert_eq!(deliver(&mut admin, "evt_r4", SECRET), "queued");
    assert_eq!(poll(&mut admin, "evt_r5"), "queued");
    assert_eq!(deliver(&mut admin, "evt_r5", "whsec_forged"), "rejected");

    assert_eq!(missed(&mut admin), ["evt_r3", "evt_r5"]);
    let polls: i64 = admin
        .query_one(
            "SELECT polls FROM webhook.missed_deliveries WHERE event_id = 'evt_r3'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(polls, 2);

    // Each once, whichever way it came.
    while !work_once(&mut admin, "fl_stripe", "default", 10)
        .unwrap()
        .is_empty()
    {}
    for event_id in ["evt_r1", "evt_r2", "evt_r3", "evt_r4", "evt_r5"] {
        assert_eq!(
            side_effects(&mut admin, "fl_stripe", event_id),
            1,
            "{event_id}"
        );
    }
    // Processed, still listed as never delivered.
    assert_eq!(missed(&mut admin), ["evt_r3", "evt_r5"]);
    // A late delivery takes it off the list.
    assert_eq!(deliver(&mut admin, "evt_r3", SECRET), "duplicate");
    assert_eq!(missed(&mut admin), ["evt_r5"]);
}

#[test]
fn a_poller_racing_the_deliveries_gets_each_event_processed_once() {
    let _one = one_at_a_time();
    let mut admin = setup();
    let db = database(DB);
    let ids: Vec<String> = (0..300).map(|i| format!("evt_race_{i}")).collect();
    let working = Arc::new(AtomicBool::new(true));
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let working = Arc::clone(&working);
            std::thread::spawn(move || {
                let mut client = connect(db);
                while working.load(SeqCst) {
                    if work_once(&mut client, "fl_stripe", "default", 10)
                        .unwrap()
                        .is_empty()
                    {
                        std::thread::sleep(std::time::Duration::from_millis(5));
                    }
                }
            })
        })
        .collect();
    // Two senders deliver every other event, two pollers poll them all.
    let feeders: Vec<_> = (0..4)
        .map(|f| {
            let ids = ids.clone();
            std::thread::spawn(move || {
                let mut client = connect(db);
                for (i, event_id) in ids.iter().enumerate() {
                    if f < 2 {
                        if i % 2 == f {
                            let status = deliver(&mut client, event_id, SECRET);
                            assert!(
                                ["queued", "duplicate"].contains(&status.as_str()),
                                "{status}"
                            );
                        }
                    } else {
                        let status = poll(&mut client, event_id);
                        assert!(
                            ["queued", "duplicate"].contains(&status.as_str()),
                            "{status}"
                        );
                    }
                }
            })
        })
        .collect();
    for f in feeders {
        f.join().unwrap();
    }
    wait_for("the workers to drain", || {
        unfinished(&mut admin, "fl_stripe") == 0
    });
    working.store(false, SeqCst);
    for w in workers {
        w.join().unwrap();
    }
    for event_id in &ids {
        assert_eq!(
            side_effects(&mut admin, "fl_stripe", event_id),
            1,
            "{event_id}"
        );
    }
    let missed_here = missed(&mut admin)
        .into_iter()
        .filter(|e| e.starts_with("evt_race_"))
        .count();
    assert_eq!(missed_here, 0, "every event was delivered as well");
}

#[test]
fn a_scoped_role_polls_only_its_providers() {
    let mut admin = setup();
    let db = database(DB);
    admin
        .batch_execute(
            "SELECT webhook_register_provider(p, scheme => 'stripe', secret => 'whsec_' || p, inbox => true)
               FROM unnest('{fl_mine,fl_other}'::text[]) p",
        )
        .unwrap();
    ensure_role(&mut admin, "fl_poller", true);
    admin
        .batch_execute(
            "SELECT webhook_grant_app('fl_poller');
             SELECT webhook_scope_app('fl_poller', '{fl_mine}');",
        )
        .unwrap();
    let mut poller = connect_as(db, "fl_poller");
    let status: String = poller
        .query_one(
            "SELECT status FROM webhook_enqueue_polled('fl_mine', 'evt_scoped', 't', '{}'::jsonb)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "queued");
    let err = poller
        .query_one(
            "SELECT status FROM webhook_enqueue_polled('fl_other', 'evt_scoped', 't', '{}'::jsonb)",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{}", message(&err));
    // The application role reads nothing of it.
    let err = poller
        .query_one("SELECT count(*) FROM webhook.missed_deliveries", &[])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{}", message(&err));
    let err = poller
        .query_one(
            "SELECT status FROM webhook_enqueue_polled('fl_mine', NULL, 't', '{}'::jsonb)",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22004"), "{}", message(&err));
    assert!(
        message(&err).contains("webhook_enqueue_polled: argument \"event_id\""),
        "{}",
        message(&err)
    );
    // Past the NULL checks, webhook_enqueue's own: an event id too long.
    let err = poller
        .query_one(
            "SELECT status FROM webhook_enqueue_polled('fl_mine', repeat('x', 300), 't', '{}'::jsonb)",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22001"), "{}", message(&err));
}

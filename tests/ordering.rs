//! Ordering over real connections: Stripe-shaped events of a few
//! subscriptions delivered shuffled, twice or three times, with failed
//! attempts, by eight connections at once to a handler that blindly
//! overwrites the subscription row; the same through the inbox with
//! per-entity FIFO; and headers that try to pass for order values.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{now, stripe};
use common::*;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const DB: &str = "pgwi_ordering";
const SECRET: &str = "whsec_ordering";

#[derive(Clone)]
struct Event {
    id: String,
    entity: String,
    created: i64,
    status: String,
}

impl Event {
    fn body(&self) -> String {
        serde_json::json!({
            "id": self.id,
            "type": "customer.subscription.updated",
            "created": self.created,
            "data": {"object": {"id": self.entity, "status": self.status}},
        })
        .to_string()
    }
}

/// `per_entity` events for each of `entities` subscriptions, one second
/// apart, and, when `tie`, two more in the newest second.
fn subscription_events(prefix: &str, entities: usize, per_entity: usize, tie: bool) -> Vec<Event> {
    let mut events = Vec::new();
    for e in 0..entities {
        let entity = format!("sub_{prefix}{e}");
        for k in 0..per_entity {
            events.push(Event {
                id: format!("evt_{prefix}{e}_{k}"),
                entity: entity.clone(),
                created: 1_700_000_000 + k as i64,
                status: format!("state_{k}"),
            });
        }
        if tie {
            for t in ["a", "b"] {
                events.push(Event {
                    id: format!("evt_{prefix}{e}_tie_{t}"),
                    entity: entity.clone(),
                    created: 1_700_000_000 + per_entity as i64,
                    status: format!("tie_{t}"),
                });
            }
        }
    }
    events
}

/// What the provider is told.
#[derive(Debug, PartialEq)]
enum Acknowledged {
    Processed,
    Duplicate,
    Stale,
}

/// One delivery to the one-transaction handler: receive, overwrite the
/// subscription row with the event's state (no check of its own: ordering
/// is the extension's job), log the application, complete, commit. `fail`
/// makes the work fail after the claim (recorded with webhook_fail). None:
/// not acknowledged (409, a failure, a refused completion): the provider
/// delivers it again later.
fn handle(
    client: &mut postgres::Client,
    provider: &str,
    event: &Event,
    fail: bool,
) -> Option<Acknowledged> {
    let body = event.body();
    let headers = stripe(&body, now(), SECRET).to_string();
    let mut tx = client.transaction().unwrap();
    let row = tx
        .query_one(
            "SELECT id::text, claimed, status, http_status
               FROM webhook_receive($1, $2::text::jsonb, $3::text)",
            &[&provider, &headers, &body],
        )
        .unwrap();
    let (id, claimed, status): (String, bool, String) = (row.get(0), row.get(1), row.get(2));
    if !claimed {
        tx.commit().unwrap();
        return match status.as_str() {
            "duplicate" => Some(Acknowledged::Duplicate),
            "stale" => Some(Acknowledged::Stale),
            "in_progress" => None,
            other => panic!("unexpected answer {other} for {}", event.id),
        };
    }
    if fail {
        tx.execute(
            "SELECT webhook_fail($1::text::uuid, 'injected failure')",
            &[&id],
        )
        .unwrap();
        tx.commit().unwrap();
        return None;
    }
    tx.execute(
        "INSERT INTO subscriptions (id, status, created, event_id) VALUES ($1, $2, $3, $4)
         ON CONFLICT (id) DO UPDATE SET status = excluded.status, created = excluded.created,
                                        event_id = excluded.event_id",
        &[&event.entity, &event.status, &event.created, &event.id],
    )
    .unwrap();
    tx.execute(
        "INSERT INTO applied (provider, event_id) VALUES ($1, $2)",
        &[&provider, &event.id],
    )
    .unwrap();
    match tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id]) {
        Ok(_) => {
            tx.commit().unwrap();
            Some(Acknowledged::Processed)
        }
        Err(e) => {
            assert_eq!(
                sql_state(&e),
                Some("40001"),
                "only staleness refuses a completion: {e}"
            );
            drop(tx); // rolled back: the overwrite never happened
            None
        }
    }
}

/// The tables and providers the tests share, created once.
fn setup(db: &str) -> postgres::Client {
    static ONCE: std::sync::Once = std::sync::Once::new();
    let admin = connect(db);
    ONCE.call_once(|| create(&mut connect(db)));
    admin
}

fn create(admin: &mut postgres::Client) {
    admin
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS subscriptions (
                 id text PRIMARY KEY, status text NOT NULL, created bigint NOT NULL, event_id text NOT NULL);
             CREATE TABLE IF NOT EXISTS applied (
                 provider text NOT NULL, event_id text NOT NULL, seq bigserial,
                 PRIMARY KEY (provider, event_id));
             SELECT webhook_register_provider('stripe', secret => '{SECRET}', ordering => true);
             SELECT webhook_register_provider('stripe_strict', scheme => 'stripe', secret => '{SECRET}',
                                              ordering => true, ties => 'stale');"
        ))
        .unwrap();
}

/// Deliver every event of `events` to `provider` two or three times,
/// shuffled, from eight connections, failing the first attempt of every
/// fifth event, until each delivery is acknowledged. Returns how the
/// deliveries were answered, per event.
fn deliver_shuffled(
    db: &'static str,
    provider: &'static str,
    events: &[Event],
    seed: u64,
) -> HashMap<String, Vec<Acknowledged>> {
    let mut deliveries: Vec<(Event, bool)> = Vec::new();
    for (n, event) in events.iter().enumerate() {
        let copies = 2 + n % 2;
        for copy in 0..copies {
            deliveries.push((event.clone(), copy == 0 && n % 5 == 0));
        }
    }
    shuffle(&mut deliveries, seed);
    let outstanding = Arc::new(AtomicUsize::new(deliveries.len()));
    let queue: Arc<Mutex<VecDeque<(Event, bool, usize)>>> = Arc::new(Mutex::new(
        deliveries
            .into_iter()
            .map(|(e, fail)| (e, fail, 1))
            .collect(),
    ));
    let answers: Arc<Mutex<HashMap<String, Vec<Acknowledged>>>> = Arc::default();
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (queue, answers, outstanding) = (
                Arc::clone(&queue),
                Arc::clone(&answers),
                Arc::clone(&outstanding),
            );
            std::thread::spawn(move || {
                let mut client = connect(db);
                while outstanding.load(SeqCst) > 0 {
                    let Some((event, fail, attempt)) = queue.lock().unwrap().pop_front() else {
                        // Others hold the last deliveries; one may come back.
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    };
                    assert!(attempt < 200, "{} was never acknowledged", event.id);
                    match handle(&mut client, provider, &event, fail) {
                        Some(answer) => {
                            answers
                                .lock()
                                .unwrap()
                                .entry(event.id.clone())
                                .or_default()
                                .push(answer);
                            outstanding.fetch_sub(1, SeqCst);
                        }
                        // The provider retries later: back of the line.
                        None => {
                            queue.lock().unwrap().push_back((event, false, attempt + 1));
                            std::thread::sleep(Duration::from_millis(2));
                        }
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a delivery thread panicked");
    }
    Arc::try_unwrap(answers).ok().unwrap().into_inner().unwrap()
}

/// The subscription rows: entity → (status, created).
fn subscriptions(client: &mut postgres::Client, prefix: &str) -> HashMap<String, (String, i64)> {
    client
        .query(
            "SELECT id, status, created FROM subscriptions WHERE id LIKE $1",
            &[&format!("sub_{prefix}%")],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), (r.get(1), r.get(2))))
        .collect()
}

#[test]
fn shuffled_concurrent_deliveries_leave_every_subscription_in_its_newest_state() {
    let db = database(DB);
    let mut admin = setup(db);
    let events = subscription_events("p", 5, 12, true);
    let answers = deliver_shuffled(db, "stripe", &events, 7);

    let newest = 1_700_000_012;
    for (entity, (status, created)) in subscriptions(&mut admin, "p") {
        assert_eq!(created, newest, "{entity} holds the newest second");
        // Ties are processed: either of the newest second's events.
        assert!(
            status == "tie_a" || status == "tie_b",
            "{entity} ended as {status}"
        );
    }
    assert_eq!(subscriptions(&mut admin, "p").len(), 5);
    // Every event was answered, none processed twice (applied's key), and
    // both events of each tie were processed.
    assert_eq!(answers.len(), events.len());
    for e in 0..5 {
        for t in ["a", "b"] {
            let id = format!("evt_p{e}_tie_{t}");
            assert!(
                answers[&id].contains(&Acknowledged::Processed),
                "{id} (a tie) was processed: {:?}",
                answers[&id]
            );
        }
    }
    // Shuffled, some events came after a newer one: skipped, with reasons,
    // as SKIPPED in the archive; the watermarks are the newest second.
    let stale: Vec<String> = admin
        .query(
            "SELECT error_message FROM webhook.deliveries
              WHERE provider = 'stripe' AND claim_status::text = 'stale'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(
        !stale.is_empty(),
        "a shuffled order makes some events stale"
    );
    assert!(
        stale.iter().all(|r| r.starts_with("stale: order ")),
        "{stale:?}"
    );
    let finished: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.events
              WHERE provider = 'stripe' AND event_id LIKE 'evt_p%' AND status::text IN ('processed', 'stale')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(finished, events.len() as i64, "every event finished");
    let watermarks: Vec<String> = admin
        .query(
            "SELECT order_value::text FROM webhook.watermarks
              WHERE provider = 'stripe' AND entity_key LIKE 'sub_p%'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(watermarks, vec![newest.to_string(); 5]);
}

#[test]
fn with_ties_stale_exactly_one_event_of_the_newest_second_is_applied() {
    let db = database(DB);
    let mut admin = setup(db);
    let events = subscription_events("s", 4, 8, true);
    let answers = deliver_shuffled(db, "stripe_strict", &events, 11);

    for e in 0..4 {
        let processed: Vec<&str> = ["a", "b"]
            .into_iter()
            .filter(|t| answers[&format!("evt_s{e}_tie_{t}")].contains(&Acknowledged::Processed))
            .collect();
        assert_eq!(processed.len(), 1, "sub_s{e}: one tie wins: {processed:?}");
        let (status, created) = &subscriptions(&mut admin, "s")[&format!("sub_s{e}")];
        assert_eq!(*created, 1_700_000_008);
        assert_eq!(*status, format!("tie_{}", processed[0]));
    }
    let applied_twice: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT event_id FROM applied GROUP BY 1 HAVING count(*) > 1) x",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(applied_twice, 0);
}

#[test]
fn the_fifo_inbox_processes_each_entity_in_order_and_one_at_a_time() {
    let db = database(DB);
    let mut admin = setup(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('stripe_fifo', scheme => 'stripe', secret => '{SECRET}',
                                              ordering => true, inbox => true, fifo => true);
             CREATE TABLE fifo_log (seq bigserial PRIMARY KEY, entity text, created bigint, overlapped boolean);"
        ))
        .unwrap();
    let mut events = subscription_events("f", 4, 25, false);
    shuffle(&mut events, 3);
    for event in &events {
        let body = event.body();
        let headers = stripe(&body, now(), SECRET).to_string();
        let status: String = admin
            .query_one(
                "SELECT status FROM webhook_receive('stripe_fifo', $1::text::jsonb, $2::text)",
                &[&headers, &body],
            )
            .unwrap()
            .get(0);
        assert_eq!(status, "queued");
    }

    // Six workers, each leasing up to three events at a time. Holding an
    // advisory lock per entity while processing shows any overlap: a
    // second worker on the same entity could not take it.
    let workers: Vec<_> = (0..6)
        .map(|_| {
            std::thread::spawn(move || {
                let mut client = connect(db);
                loop {
                    let mut tx = client.transaction().unwrap();
                    let leased = tx
                        .query(
                            "SELECT id::text, payload #>> '{data,object,id}', (payload ->> 'created')::bigint
                               FROM webhook_next(3, provider => 'stripe_fifo')",
                            &[],
                        )
                        .unwrap();
                    for row in &leased {
                        let (lease, entity, created): (String, String, i64) =
                            (row.get(0), row.get(1), row.get(2));
                        tx.execute(
                            "INSERT INTO fifo_log (entity, created, overlapped)
                             VALUES ($1, $2, NOT pg_try_advisory_xact_lock(hashtext($1)))",
                            &[&entity, &created],
                        )
                        .unwrap();
                        std::thread::sleep(Duration::from_millis(3));
                        tx.execute("SELECT webhook_complete($1::text::uuid)", &[&lease])
                            .unwrap();
                    }
                    tx.commit().unwrap();
                    if leased.is_empty() {
                        let left: i64 = client
                            .query_one(
                                "SELECT count(*) FROM webhook.inbox
                                  WHERE provider = 'stripe_fifo' AND status IN ('ready', 'leased')",
                                &[],
                            )
                            .unwrap()
                            .get(0);
                        if left == 0 {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                }
            })
        })
        .collect();
    for worker in workers {
        worker.join().expect("a worker panicked");
    }

    let log = admin
        .query(
            "SELECT entity, created, overlapped FROM fifo_log ORDER BY seq",
            &[],
        )
        .unwrap();
    assert_eq!(log.len(), events.len(), "every event processed once");
    let mut last: HashMap<String, i64> = HashMap::new();
    for row in &log {
        let (entity, created, overlapped): (String, i64, bool) =
            (row.get(0), row.get(1), row.get(2));
        assert!(!overlapped, "two events of {entity} were processed at once");
        if let Some(previous) = last.insert(entity.clone(), created) {
            assert!(
                created > previous,
                "{entity}: {created} processed after {previous}"
            );
        }
    }
}

/// Arrivals while others are leased, as in production: a sender delivers
/// shuffled events while six workers lease, process and complete in
/// separate transactions (lease, commit, work, complete). Each worker marks
/// the entity it works on in a table whose key is the entity, from a
/// connection of its own in autocommit: a second worker on the same
/// entity fails to insert the mark. An older event arriving while a newer
/// one is leased must wait, and is then parked as stale.
#[test]
fn the_fifo_inbox_never_runs_two_events_of_an_entity_while_others_arrive() {
    let db = database(DB);
    let mut admin = setup(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('stripe_fifo_live', scheme => 'stripe', secret => '{SECRET}',
                                              ordering => true, inbox => true, fifo => true);
             CREATE TABLE fifo_running (entity text PRIMARY KEY);
             CREATE TABLE fifo_overlaps (entity text, created bigint);
             CREATE TABLE fifo_done (seq bigserial PRIMARY KEY, entity text, created bigint);"
        ))
        .unwrap();
    let mut events = subscription_events("live", 4, 60, false);
    shuffle(&mut events, 11);
    let total = events.len();
    let sending = Arc::new(AtomicUsize::new(1));

    let sender = {
        let sending = Arc::clone(&sending);
        std::thread::spawn(move || {
            let mut client = connect(db);
            for event in &events {
                let body = event.body();
                let headers = stripe(&body, now(), SECRET).to_string();
                let status: String = client
                    .query_one(
                        "SELECT status::text FROM webhook_receive('stripe_fifo_live', $1::text::jsonb, $2::text)",
                        &[&headers, &body],
                    )
                    .unwrap()
                    .get(0);
                assert_eq!(status, "queued");
                std::thread::sleep(Duration::from_micros(700));
            }
            sending.store(0, SeqCst);
        })
    };
    let workers: Vec<_> = (0..6)
        .map(|_| {
            let sending = Arc::clone(&sending);
            std::thread::spawn(move || {
                let mut queue = connect(db);
                let mut marks = connect(db);
                loop {
                    let leased = queue
                        .query(
                            "SELECT id::text, payload #>> '{data,object,id}', (payload ->> 'created')::bigint
                               FROM webhook_next(2, provider => 'stripe_fifo_live')",
                            &[],
                        )
                        .unwrap();
                    for row in &leased {
                        let (lease, entity, created): (String, String, i64) =
                            (row.get(0), row.get(1), row.get(2));
                        let marked = marks
                            .execute(
                                "INSERT INTO fifo_running VALUES ($1) ON CONFLICT DO NOTHING",
                                &[&entity],
                            )
                            .unwrap();
                        if marked == 0 {
                            marks
                                .execute("INSERT INTO fifo_overlaps VALUES ($1, $2)", &[&entity, &created])
                                .unwrap();
                        }
                        std::thread::sleep(Duration::from_millis(2));
                        marks
                            .execute(
                                "INSERT INTO fifo_done (entity, created) VALUES ($1, $2)",
                                &[&entity, &created],
                            )
                            .unwrap();
                        if marked == 1 {
                            marks
                                .execute("DELETE FROM fifo_running WHERE entity = $1", &[&entity])
                                .unwrap();
                        }
                        queue
                            .execute("SELECT webhook_complete($1::text::uuid)", &[&lease])
                            .unwrap();
                    }
                    if leased.is_empty() {
                        let left: i64 = queue
                            .query_one(
                                "SELECT count(*) FROM webhook.inbox
                                  WHERE provider = 'stripe_fifo_live' AND status IN ('ready', 'leased')",
                                &[],
                            )
                            .unwrap()
                            .get(0);
                        if left == 0 && sending.load(SeqCst) == 0 {
                            return;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                }
            })
        })
        .collect();
    sender.join().expect("the sender panicked");
    for worker in workers {
        worker.join().expect("a worker panicked");
    }

    let overlaps: Vec<(String, i64)> = admin
        .query("SELECT entity, created FROM fifo_overlaps", &[])
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect();
    assert!(
        overlaps.is_empty(),
        "processed while another event of the entity was: {overlaps:?}"
    );
    let mut last: HashMap<String, i64> = HashMap::new();
    for row in admin
        .query("SELECT entity, created FROM fifo_done ORDER BY seq", &[])
        .unwrap()
    {
        let (entity, created): (String, i64) = (row.get(0), row.get(1));
        if let Some(previous) = last.insert(entity.clone(), created) {
            assert!(
                created > previous,
                "{entity}: {created} processed after {previous}"
            );
        }
    }
    let (processed, stale): (i64, i64) = {
        let row = admin
            .query_one(
                "SELECT count(*) FILTER (WHERE status = 'processed'), count(*) FILTER (WHERE status = 'stale')
                   FROM webhook.inbox WHERE provider = 'stripe_fifo_live'",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(
        processed + stale,
        total as i64,
        "every event processed or parked"
    );
    let done: i64 = admin
        .query_one("SELECT count(*) FROM fifo_done", &[])
        .unwrap()
        .get(0);
    assert_eq!(done, processed, "each processed event worked on once");
}

#[test]
fn an_order_value_in_a_header_cannot_move_a_watermark() {
    let db = database(DB);
    let mut admin = setup(db);
    // A body without `created`, and headers that carry look-alikes of
    // both paths: the event is unordered, and no watermark appears.
    let body = r#"{"id": "evt_hdr", "type": "customer.subscription.updated", "data": {"object": {"id": "sub_hdr"}}}"#;
    let mut headers = stripe(body, now(), SECRET);
    headers["created"] = "9999999999".into();
    headers["body:created"] = "9999999999".into();
    headers["X-Order"] = "9999999999".into();
    let row = admin
        .query_one(
            "SELECT status, reason, id::text FROM webhook_receive('stripe', $1::text::jsonb, $2::text)",
            &[&headers.to_string(), &body],
        )
        .unwrap();
    let (status, reason, id): (String, String, String) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((status.as_str(), reason.as_str()), ("claimed", "unordered"));
    admin
        .execute("SELECT webhook_complete($1::text::uuid)", &[&id])
        .unwrap();
    let watermarks: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.watermarks WHERE entity_key = 'sub_hdr'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(watermarks, 0);
    // And the registry refuses a header as a source outright.
    let err = admin
        .batch_execute("SELECT webhook_register_provider('stripe', order_from => 'header:X-Order')")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("23514"), "{}", message(&err));
}

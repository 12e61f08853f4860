//! The archive's partitions over real connections, each statement its own
//! transaction as in production: making the days ahead, dropping whole
//! days in the purge, what the purge must keep, and both running while
//! handlers claim. Each test has a database of its own: the partitions'
//! DDL locks the archive, which tests sharing one would feel.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

fn installed(db: &str) -> Client {
    let mut client = empty_database(db);
    client
        .batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    client
}

fn partitions(client: &mut Client) -> Vec<String> {
    client
        .query(
            "SELECT partition::text FROM webhook.archive_partitions",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// The events whose deliveries are in the default partition, in order.
fn kept_in_default(client: &mut Client) -> String {
    client
        .query_one(
            "SELECT coalesce(string_agg(event_id, ',' ORDER BY event_id), '') FROM webhook.delivery_log_default",
            &[],
        )
        .unwrap()
        .get(0)
}

/// Claim an event (two-phase); (id, status).
fn claim(client: &mut Client, event_id: &str) -> (String, String) {
    let row = client
        .query_one(
            "SELECT id::text, status FROM webhook_claim('stripe', $1, 'invoice.paid', '{\"k\": 1}'::jsonb, NULL)",
            &[&event_id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// Claim an event (new, or a retry) and complete it: processed.
fn claim_processed(client: &mut Client, event_id: &str) {
    let (id, status) = claim(client, event_id);
    assert!(
        status == "claimed" || status == "retry",
        "{event_id}: {status}"
    );
    finish(client, "SELECT webhook_complete($1::text::uuid)", &id);
}

fn finish(client: &mut Client, sql: &str, id: &str) {
    client.execute(sql, &[&id]).unwrap();
}

/// Attach a partition for a day `days_ago` back, made as
/// webhook_create_partitions makes each day's, and move the deliveries
/// archived today into it, as if they had arrived that day (ids, arrival,
/// and what refers to them). Returns the partition's name.
fn age_into(client: &mut Client, days_ago: i32) -> String {
    client
        .batch_execute(&format!(
            "BEGIN;
             CREATE TEMP TABLE past ON COMMIT DROP AS SELECT (now() AT TIME ZONE 'UTC')::date - {days_ago} AS day;
             SELECT webhook._create_archive_partition(day) FROM past;
             CREATE TEMP TABLE moved ON COMMIT DROP AS
             SELECT id AS old,
                    -- a version 7 id of that day, as the claim makes them
                    overlay(overlay(webhook._archive_bound((SELECT day FROM past)::timestamp AT TIME ZONE 'UTC'
                                                           + interval '1 hour' + row_number() OVER (ORDER BY id) * interval '1 ms')::text
                                    PLACING '7' FROM 15) PLACING '8' FROM 20)::uuid AS new
               FROM webhook.delivery_log WHERE created_at > now() - interval '1 day';
             UPDATE webhook.delivery_log l
                SET id = m.new, created_at = l.created_at - interval '{days_ago} days'
               FROM moved m WHERE l.id = m.old;
             UPDATE webhook.events e SET claim_id = m.new FROM moved m WHERE e.claim_id = m.old;
             UPDATE webhook.inbox i SET delivery_id = m.new FROM moved m WHERE i.delivery_id = m.old;
             UPDATE webhook.delivery_failures f SET delivery_id = m.new FROM moved m WHERE f.delivery_id = m.old;
             COMMIT;"
        ))
        .unwrap();
    client
        .query_one(
            "SELECT 'webhook.delivery_log_' || to_char((now() AT TIME ZONE 'UTC')::date - $1::int, 'YYYYMMDD')",
            &[&days_ago],
        )
        .unwrap()
        .get(0)
}

#[test]
fn days_are_made_ahead_once_each_and_deliveries_land_in_their_day() {
    let mut client = installed("pgwi_partitions_ahead");
    assert_eq!(partitions(&mut client), ["webhook.delivery_log_default"]);
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions(2)::bigint"),
        3,
        "today and two more"
    );
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions(2)::bigint"),
        0,
        "once"
    );
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions()::bigint"),
        5
    );
    let today: String = client
        .query_one(
            "SELECT 'webhook.delivery_log_' || to_char(now() AT TIME ZONE 'UTC', 'YYYYMMDD')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(partitions(&mut client)[0], today);
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.archive_partitions
              WHERE NOT is_default AND to_time - from_time = interval '1 day'
                AND from_time = date_trunc('day', from_time AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'"
        ),
        8,
        "whole UTC days"
    );

    let (id, _) = claim(&mut client, "evt_today");
    let home: String = client
        .query_one(
            "SELECT tableoid::regclass::text FROM webhook.delivery_log WHERE id = $1::text::uuid",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(home, today);
    // Found by id, in another transaction, through the parent.
    finish(&mut client, "SELECT webhook_complete($1::text::uuid)", &id);
    assert_eq!(claim(&mut client, "evt_today").1, "duplicate");

    for bad in [
        "SELECT webhook_create_partitions(-1)",
        "SELECT webhook_create_partitions(NULL)",
    ] {
        let err = client.batch_execute(bad).unwrap_err();
        assert_eq!(sql_state(&err), Some("22023"), "{bad}");
        assert!(message(&err).contains("\"days_ahead\""), "{bad}");
    }
}

#[test]
fn a_day_already_in_the_default_partition_stays_there() {
    let mut client = installed("pgwi_partitions_late");
    let (id, _) = claim(&mut client, "evt_early");
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions(1)::bigint"),
        1,
        "tomorrow only: today has a delivery in the default partition"
    );
    claim(&mut client, "evt_later");
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_log_default"
        ),
        2,
        "the rest of the day follows it there"
    );
    finish(&mut client, "SELECT webhook_complete($1::text::uuid)", &id);
}

/// Making a month of days ahead reads the default partition once, not once
/// a day: each attach would read all of it while holding it locked until
/// the call ends, and claims reading the archive would wait behind every
/// one of them.
#[test]
fn a_month_of_days_reads_the_default_partition_once() {
    let mut client = installed("pgwi_partitions_once");
    // Today's deliveries in the default partition, as after days without
    // maintenance.
    client
        .batch_execute(
            "SELECT webhook_claim('stripe', 'evt_backlog_' || i, 'invoice.paid', '{}'::jsonb, NULL)
               FROM generate_series(1, 2000) i",
        )
        .unwrap();
    let scans = |client: &mut Client| -> i64 {
        // What this session counted is flushed when its transaction ends.
        client
            .batch_execute("SELECT pg_stat_force_next_flush()")
            .unwrap();
        std::thread::sleep(Duration::from_millis(50));
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .unwrap();
        count(
            client,
            "SELECT seq_scan FROM pg_stat_user_tables WHERE relid = 'webhook.delivery_log_default'::regclass",
        )
    };
    let before = scans(&mut client);
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions(30)::bigint"),
        30,
        "the thirty days after today (today is in the default partition)"
    );
    let after = scans(&mut client);
    assert_eq!(
        after - before,
        1,
        "the default partition was read {} times",
        after - before
    );
    // No constraint is left behind, and the days take their deliveries.
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'webhook.delivery_log_default'::regclass AND contype = 'c'"
        ),
        0
    );
    assert_eq!(partitions(&mut client).len(), 31);
    // One day more: a single day is attached as before.
    assert_eq!(
        count(&mut client, "SELECT webhook_create_partitions(31)::bigint"),
        1
    );
}

#[test]
fn a_new_partition_grants_nothing_whatever_default_privileges_say() {
    let mut client = installed("pgwi_partitions_privileges");
    client
        .batch_execute(
            "DROP ROLE IF EXISTS partition_reader;
             CREATE ROLE partition_reader;
             ALTER DEFAULT PRIVILEGES GRANT SELECT ON TABLES TO partition_reader;
             ALTER DEFAULT PRIVILEGES IN SCHEMA webhook GRANT ALL ON TABLES TO PUBLIC;
             SELECT webhook_create_partitions(0);",
        )
        .unwrap();
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.archive_partitions p
               JOIN pg_class c ON c.oid = p.partition
              CROSS JOIN LATERAL aclexplode(c.relacl) a
              WHERE NOT p.is_default AND a.grantee <> c.relowner"
        ),
        0
    );
    client
        .batch_execute(
            "ALTER DEFAULT PRIVILEGES REVOKE SELECT ON TABLES FROM partition_reader;
             ALTER DEFAULT PRIVILEGES IN SCHEMA webhook REVOKE ALL ON TABLES FROM PUBLIC;",
        )
        .unwrap();
}

#[test]
fn a_day_older_than_the_cutoff_is_dropped_whole_keeping_what_is_unfinished() {
    let mut client = installed("pgwi_partitions_purge");
    // Finished: processed (with a duplicate), processed after a failed
    // attempt, rejected. Unfinished: failed, queued for a worker.
    claim_processed(&mut client, "evt_done");
    claim(&mut client, "evt_done");
    let (first, _) = claim(&mut client, "evt_retried");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'first attempt')",
        &first,
    );
    claim_processed(&mut client, "evt_retried");
    let (failed, _) = claim(&mut client, "evt_failed");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'still failing')",
        &failed,
    );
    client
        .batch_execute(
            "SELECT webhook_enqueue('stripe', 'evt_queued', 'invoice.paid', '{\"queued\": true}'::jsonb);
             SELECT webhook_register_provider('stripe', secret => 'whsec_partitions');
             SELECT webhook_receive('stripe', '{\"Stripe-Signature\": \"t=1,v1=00\"}'::jsonb, '{}'::bytea);",
        )
        .unwrap();
    let day = age_into(&mut client, 100);
    assert_eq!(
        count(&mut client, &format!("SELECT count(*) FROM {day}")),
        7
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_failures"
        ),
        2
    );
    assert_eq!(
        count(&mut client, "SELECT webhook_purge('90 days')"),
        5,
        "all but the failed and the queued event's deliveries"
    );

    assert!(
        !partitions(&mut client).contains(&day),
        "the day is dropped"
    );
    assert_eq!(
        count(
            &mut client,
            &format!("SELECT count(*) FROM pg_class WHERE oid = to_regclass('{day}')")
        ),
        0
    );
    // What was kept is in the default partition, under the same ids.
    let kept = kept_in_default(&mut client);
    assert_eq!(kept, "evt_failed,evt_queued");
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_failures f
               JOIN webhook.delivery_log l ON l.id = f.delivery_id AND l.event_id = 'evt_failed'"
        ),
        1,
        "the unfinished event's failure stays"
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_failures"
        ),
        1,
        "the retried event's went with its day"
    );
    // The worker still gets the queued event's payload.
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook_next() WHERE payload = '{\"queued\": true}'"
        ),
        1
    );
    // The failed event is retried by its next delivery; dedup of the
    // dropped ones is untouched.
    assert_eq!(claim(&mut client, "evt_failed").1, "retry");
    assert_eq!(claim(&mut client, "evt_done").1, "duplicate");
    assert_eq!(claim(&mut client, "evt_retried").1, "duplicate");
    // Nothing more to do, and nothing twice.
    assert_eq!(count(&mut client, "SELECT webhook_purge('90 days')"), 0);
    let err = client
        .batch_execute("SELECT webhook_purge('1 day', max_batches => 0)")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22023"));
    assert!(message(&err).contains("\"max_batches\""));
}

/// Every unfinished state keeps its deliveries when their day is dropped:
/// an event parked dead, an inbox event leased to a worker, one dead in
/// the inbox; a queued event every consumer finished goes with its day.
#[test]
fn every_unfinished_state_keeps_its_deliveries_in_a_dropped_day() {
    let mut client = installed("pgwi_partitions_states");
    let (dead, _) = claim(&mut client, "evt_dead");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'gave up', permanent => true)",
        &dead,
    );
    claim_processed(&mut client, "evt_done");
    let lease = |client: &mut Client, event_id: &str| -> String {
        client
            .execute(
                "SELECT webhook_enqueue('stripe', $1, 'invoice.paid', '{\"q\": 1}'::jsonb)",
                &[&event_id],
            )
            .unwrap();
        client
            .query_one("SELECT id::text FROM webhook_next(1)", &[])
            .unwrap()
            .get(0)
    };
    lease(&mut client, "evt_inbox_leased");
    let inbox_dead = lease(&mut client, "evt_inbox_dead");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'gave up', permanent => true)",
        &inbox_dead,
    );
    let inbox_done = lease(&mut client, "evt_inbox_done");
    finish(
        &mut client,
        "SELECT webhook_complete($1::text::uuid)",
        &inbox_done,
    );
    let day = age_into(&mut client, 100);
    assert_eq!(
        count(&mut client, "SELECT webhook_purge('90 days')"),
        2,
        "the processed event's and the finished inbox event's deliveries"
    );
    assert!(!partitions(&mut client).contains(&day));
    let kept = kept_in_default(&mut client);
    assert_eq!(kept, "evt_dead,evt_inbox_dead,evt_inbox_leased");
    // The dead inbox event, requeued, still has its payload.
    client
        .batch_execute("SELECT webhook_requeue('stripe', 'evt_inbox_dead')")
        .unwrap();
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook_next(5) WHERE payload = '{\"q\": 1}' AND event_id = 'evt_inbox_dead'"
        ),
        1
    );
}

#[test]
fn a_day_not_wholly_past_the_cutoff_is_kept_whole() {
    let mut client = installed("pgwi_partitions_cutoff");
    claim_processed(&mut client, "evt_done");
    let day = age_into(&mut client, 100);
    assert_eq!(count(&mut client, "SELECT webhook_purge('100 days')"), 0);
    assert!(partitions(&mut client).contains(&day));
    assert_eq!(count(&mut client, "SELECT webhook_purge('99 days')"), 1);
    assert!(!partitions(&mut client).contains(&day));
}

#[test]
fn several_days_go_in_one_purge_each_keeping_its_unfinished_deliveries() {
    let mut client = installed("pgwi_partitions_days");
    let (older, _) = claim(&mut client, "evt_older_failed");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'boom')",
        &older,
    );
    claim(&mut client, "evt_older_done");
    let older_day = age_into(&mut client, 120);
    claim_processed(&mut client, "evt_old_done");
    claim(&mut client, "evt_old_processing");
    let old_day = age_into(&mut client, 110);
    // The worker's claim, as aged.
    let leased: String = client
        .query_one(
            "SELECT claim_id::text FROM webhook.events WHERE event_id = 'evt_old_processing'",
            &[],
        )
        .unwrap()
        .get(0);
    // evt_older_done was claimed and never finished: it stays too.
    assert_eq!(count(&mut client, "SELECT webhook_purge('100 days')"), 1);
    let left = partitions(&mut client);
    assert!(!left.contains(&older_day) && !left.contains(&old_day));
    let kept = kept_in_default(&mut client);
    assert_eq!(kept, "evt_old_processing,evt_older_done,evt_older_failed");
    // A claim whose day was dropped still finishes, found by its id.
    finish(
        &mut client,
        "SELECT webhook_complete($1::text::uuid)",
        &leased,
    );
    assert_eq!(claim(&mut client, "evt_old_processing").1, "duplicate");
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_failures"
        ),
        1
    );
}

/// A reader holding one day while the purge runs: the purge drops the
/// older day (moving what it keeps to the default partition), leaves the
/// held day whole, and drops it on a later run.
#[test]
fn a_purge_that_meets_a_held_day_drops_the_others_and_keeps_that_one_whole() {
    let db = "pgwi_partitions_halfway";
    let mut client = installed(db);
    let (failed, _) = claim(&mut client, "evt_older_failed");
    finish(
        &mut client,
        "SELECT webhook_fail($1::text::uuid, 'boom')",
        &failed,
    );
    claim_processed(&mut client, "evt_older_done");
    let older_day = age_into(&mut client, 120);
    claim_processed(&mut client, "evt_old_done");
    let old_day = age_into(&mut client, 110);
    let held_day = |client: &mut Client| -> Vec<String> {
        client
            .query(
                &format!("SELECT id || ' ' || event_id FROM {old_day} ORDER BY 1"),
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let before = held_day(&mut client);
    assert_eq!(before.len(), 1);

    // A reader of the newer day holds it while the purge runs.
    let mut reader = connect(db);
    reader
        .batch_execute(&format!("BEGIN; SELECT count(*) FROM {old_day}"))
        .unwrap();
    assert_eq!(count(&mut client, "SELECT webhook_purge('100 days')"), 1);
    let left = partitions(&mut client);
    assert!(
        !left.contains(&older_day) && left.contains(&old_day),
        "{left:?}"
    );
    assert_eq!(held_day(&mut client), before, "the held day is whole");
    assert_eq!(
        kept_in_default(&mut client),
        "evt_older_failed",
        "the older day's unfinished delivery is kept"
    );

    reader.batch_execute("COMMIT").unwrap();
    assert_eq!(count(&mut client, "SELECT webhook_purge('100 days')"), 1);
    assert!(!partitions(&mut client).contains(&old_day));
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_failures"
        ),
        1
    );
    assert_eq!(claim(&mut client, "evt_older_failed").1, "retry");
    assert_eq!(claim(&mut client, "evt_old_done").1, "duplicate");
}

/// Handlers claim and complete on 4 connections while the maintenance
/// makes days and drops one: no claim fails or waits past its
/// lock_timeout, and every delivery is archived once.
#[test]
fn maintenance_runs_beside_handlers() {
    let db = "pgwi_partitions_busy";
    let mut client = installed(db);
    claim_processed(&mut client, "evt_old");
    let day = age_into(&mut client, 100);
    client
        .batch_execute("SELECT webhook_create_partitions(0)")
        .unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let handlers: Vec<_> = (0..4)
        .map(|n| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut c = connect(db);
                let mut handled = 0;
                while !stop.load(Ordering::Relaxed) || handled == 0 {
                    let mut tx = c.transaction().unwrap();
                    let row = tx
                        .query_one(
                            "SELECT status FROM webhook_claim('stripe', $1, 't', '{}'::jsonb, NULL, complete_on_commit => true)",
                            &[&format!("evt_busy_{n}_{handled}")],
                        )
                        .unwrap();
                    assert_eq!(row.get::<_, String>(0), "claimed");
                    tx.commit().unwrap();
                    handled += 1;
                }
                handled
            })
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(2);
    let mut rounds = 0;
    while Instant::now() < until {
        client
            .batch_execute("SELECT webhook_create_partitions(3); SELECT webhook_purge('90 days');")
            .unwrap();
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let handled: i64 = handlers.into_iter().map(|h| h.join().unwrap()).sum();
    assert!(rounds > 1);
    assert!(!partitions(&mut client).contains(&day));
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.delivery_log WHERE event_id LIKE 'evt_busy_%'"
        ),
        handled
    );
    assert_eq!(
        count(
            &mut client,
            "SELECT count(*) FROM webhook.events WHERE event_id LIKE 'evt_busy_%' AND status = 'processed'"
        ),
        handled
    );
}

/// Claims for `for_how_long` from a connection of their own, each with a
/// statement timeout: the slowest one's time.
fn claims_meanwhile(db: &'static str, for_how_long: Duration) -> std::thread::JoinHandle<Duration> {
    std::thread::spawn(move || {
        let mut c = connect(db);
        c.batch_execute("SET statement_timeout = '5s'").unwrap();
        let until = Instant::now() + for_how_long;
        let mut slowest = Duration::ZERO;
        let mut n = 0;
        while Instant::now() < until {
            let started = Instant::now();
            let status: String = c
                .query_one(
                    "SELECT status::text FROM webhook_claim('stripe', $1, 't', '{}'::jsonb, NULL, complete_on_commit => true)",
                    &[&format!("evt_meanwhile_{n}")],
                )
                .expect("a claim beside maintenance")
                .get(0);
            assert_eq!(status, "claimed");
            slowest = slowest.max(started.elapsed());
            n += 1;
        }
        slowest
    })
}

/// A report (or a dump) holding the archive open: the purge must not queue
/// for the day's lock while every claim queues behind it. It waits
/// webhook.maintenance_lock_timeout at most, skips the day, and drops it
/// on a later run.
#[test]
fn a_purge_beside_a_long_report_skips_the_day_and_claims_never_stall() {
    let db = "pgwi_partitions_report";
    let mut client = installed(db);
    claim_processed(&mut client, "evt_old");
    let day = age_into(&mut client, 100);

    let mut report = connect(db);
    let mut reading = report.transaction().unwrap();
    reading
        .query_one("SELECT count(*) FROM webhook.delivery_log", &[])
        .unwrap();

    let claims = claims_meanwhile(db, Duration::from_millis(1500));
    std::thread::sleep(Duration::from_millis(200));
    let mut purger = connect(db);
    purger
        .batch_execute("SET statement_timeout = '10s'")
        .unwrap();
    let timeout_before: String = purger.query_one("SHOW lock_timeout", &[]).unwrap().get(0);
    let started = Instant::now();
    let removed: i64 = purger
        .query_one("SELECT webhook_purge('90 days')", &[])
        .expect("the purge gives up on the day instead of waiting")
        .get(0);
    let purge_took = started.elapsed();
    let slowest = claims.join().expect("claims beside the purge");
    assert_eq!(removed, 0, "the day was not dropped");
    assert!(partitions(&mut client).contains(&day));
    assert!(
        purge_took < Duration::from_secs(2),
        "the purge took {purge_took:?}"
    );
    assert!(
        slowest < Duration::from_secs(1),
        "a claim waited {slowest:?}"
    );

    reading.commit().unwrap();
    let removed: i64 = purger
        .query_one("SELECT webhook_purge('90 days')", &[])
        .unwrap()
        .get(0);
    assert_eq!(removed, 1);
    assert!(!partitions(&mut client).contains(&day));
    // The purge left the session's lock_timeout as it found it.
    let timeout: String = purger.query_one("SHOW lock_timeout", &[]).unwrap().get(0);
    assert_eq!(timeout, timeout_before);
}

/// Making days ahead beside a report: attaching a day locks the default
/// partition, which the report holds. The days are skipped, not waited
/// for, and made by the next run.
#[test]
fn making_days_beside_a_long_report_skips_them_and_claims_never_stall() {
    let db = "pgwi_partitions_report_ahead";
    let mut client = installed(db);
    let before = partitions(&mut client).len();

    let mut report = connect(db);
    let mut reading = report.transaction().unwrap();
    reading
        .query_one("SELECT count(*) FROM webhook.delivery_log", &[])
        .unwrap();

    let claims = claims_meanwhile(db, Duration::from_millis(1000));
    let mut maker = connect(db);
    maker
        .batch_execute("SET statement_timeout = '10s'")
        .unwrap();
    let started = Instant::now();
    let made: i32 = maker
        .query_one("SELECT webhook_create_partitions(20)", &[])
        .expect("making days gives up instead of waiting")
        .get(0);
    let took = started.elapsed();
    let slowest = claims.join().expect("claims beside the maintenance");
    assert_eq!(made, 0);
    assert_eq!(partitions(&mut client).len(), before);
    // Each day waited at most the lock timeout (200 ms).
    assert!(took < Duration::from_secs(6), "making days took {took:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "a claim waited {slowest:?}"
    );

    reading.commit().unwrap();
    let made: i32 = maker
        .query_one("SELECT webhook_create_partitions(20)", &[])
        .unwrap()
        .get(0);
    assert!(made > 0);
}

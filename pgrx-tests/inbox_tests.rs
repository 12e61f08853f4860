//! The inbox: queueing, leasing, finishing, backoff, dead letters,
//! consumers and requeues, each transition in one transaction. Concurrency,
//! killed workers and crashes are tested over real connections in
//! `tests/inbox.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, count, github_headers, receive, run, text_of};
    use pgrx::prelude::*;

    fn one_text(sql: &str) -> String {
        Spi::get_one::<String>(sql).unwrap().unwrap_or_default()
    }

    fn enqueue(provider: &str, event_id: &str) -> (bool, String) {
        let (queued, status) = Spi::get_two_with_args::<bool, String>(
            "SELECT queued, status FROM webhook_enqueue($1, $2, 'invoice.paid', '{\"n\": 1}'::jsonb)",
            &[provider.into(), event_id.into()],
        )
        .unwrap();
        (queued.unwrap(), status.unwrap())
    }

    /// Lease one event of `consumer`: (lease id, event id, attempts).
    fn next(consumer: &str) -> Option<(pgrx::Uuid, String, i32)> {
        Spi::connect_mut(|c| {
            let rows = c.update(
                "SELECT id, event_id, attempts FROM webhook_next(1, $1)",
                None,
                &[consumer.into()],
            )?;
            if rows.is_empty() {
                return Ok::<_, pgrx::spi::Error>(None);
            }
            let row = rows.first();
            Ok(Some((
                row.get::<pgrx::Uuid>(1)?.unwrap(),
                row.get::<String>(2)?.unwrap(),
                row.get::<i32>(3)?.unwrap(),
            )))
        })
        .unwrap()
    }

    fn status_of(event_id: &str, consumer: &str) -> String {
        Spi::get_one_with_args::<String>(
            "SELECT status::text FROM webhook.inbox WHERE event_id = $1 AND consumer = $2",
            &[event_id.into(), consumer.into()],
        )
        .unwrap()
        .unwrap_or_default()
    }

    #[pg_test]
    fn a_worker_is_told_where_each_event_came_from() {
        Spi::run("SELECT webhook_register_provider('origins', secret => 'whsec_origins', scheme => 'stripe', inbox => true)").unwrap();
        let body = r#"{"id":"evt_signed","type":"invoice.paid"}"#;
        let headers = crate::in_db_tests::stripe_headers(body, "whsec_origins", 0);
        assert_eq!(receive("origins", &headers, body).0, "queued");
        Spi::run("SELECT webhook_enqueue('origins', 'evt_handed', 'invoice.paid', '{}'::jsonb)")
            .unwrap();
        Spi::run(
            "SELECT webhook_enqueue_polled('origins', 'evt_polled', 'invoice.paid', '{}'::jsonb)",
        )
        .unwrap();
        // Polled after it was delivered and verified: verified, as queued.
        Spi::run(
            "SELECT webhook_enqueue_polled('origins', 'evt_signed', 'invoice.paid', '{}'::jsonb)",
        )
        .unwrap();
        assert_eq!(
            one_text(
                "SELECT string_agg(event_id || '=' || origin, ',' ORDER BY event_id)
                   FROM webhook_next(10, provider => 'origins')"
            ),
            "evt_handed=enqueued,evt_polled=polled,evt_signed=verified"
        );
    }

    #[pg_test]
    fn a_new_event_is_queued_once_and_every_duplicate_acknowledged() {
        assert_eq!(enqueue("stripe", "evt_1"), (true, "queued".into()));
        assert_eq!(enqueue("stripe", "evt_1"), (false, "duplicate".into()));
        assert_eq!(
            one_text("SELECT status::text FROM webhook.events WHERE event_id = 'evt_1'"),
            "queued"
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox WHERE event_id = 'evt_1'"),
            1
        );
        assert_eq!(status_of("evt_1", "default"), "ready");
        // The payload is stored once, in the archive.
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox i JOIN webhook.delivery_log d ON d.id = i.delivery_id AND d.payload = '{\"n\": 1}'"),
            1
        );
        assert_eq!(
            // (Both arrived in one transaction, at the same now().)
            one_text("SELECT string_agg(claim_status || '=' || processing_status, ',' ORDER BY claim_status::text DESC) FROM webhook.deliveries WHERE event_id = 'evt_1'"),
            "queued=QUEUED,duplicate=SKIPPED"
        );
        // A claim of a queued event is a duplicate: the inbox owns it.
        let status = one_text(
            "SELECT status FROM webhook_claim('stripe', 'evt_1', 'invoice.paid', '{\"n\": 1}'::jsonb, NULL)",
        );
        assert_eq!(status, "duplicate");
    }

    #[pg_test]
    fn a_lease_is_worked_once_and_completed() {
        enqueue("stripe", "evt_2");
        let (lease, event_id, attempts) = next("default").expect("a ready event");
        assert_eq!((event_id.as_str(), attempts), ("evt_2", 1));
        assert_eq!(next("default"), None, "a live lease is handed out once");
        let payload = one_text("SELECT payload::text FROM webhook.delivery_log d JOIN webhook.inbox i ON i.delivery_id = d.id");
        assert_eq!(payload, "{\"n\": 1}");
        run("SELECT webhook_complete($1, '{\"ok\": true}')", lease);
        assert_eq!(status_of("evt_2", "default"), "processed");
        assert_eq!(
            one_text("SELECT processing_status FROM webhook.deliveries WHERE event_id = 'evt_2'"),
            "PROCESSED"
        );
        assert_error(
            &format!("SELECT webhook_complete('{lease}')"),
            "55000",
            "already processed",
        );
        assert_error(
            &format!("SELECT webhook_fail('{lease}', 'late')"),
            "55000",
            "already processed",
        );
        assert_error(
            "SELECT webhook_complete('00000000-0000-4000-8000-000000000000')",
            "P0002",
            "no delivery",
        );
        // The intake delivery's id is not a lease.
        assert_error(
            "SELECT webhook_complete(id) FROM webhook.delivery_log WHERE event_id = 'evt_2'",
            "42501",
            "does not own its event",
        );
    }

    #[pg_test]
    fn next_filters_by_provider_type_and_consumer_and_checks_its_arguments() {
        enqueue("stripe", "evt_a");
        Spi::run("SELECT webhook_enqueue('paddle', 'p_1', 'sub.created', '{}'::jsonb)").unwrap();
        assert_eq!(
            count("SELECT count(*) FROM webhook_next(10, provider => 'paddle')"),
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook_next(10, event_type => 'nope')"),
            0
        );
        assert_eq!(count("SELECT count(*) FROM webhook_next(10, 'billing')"), 0);
        assert_eq!(count("SELECT count(*) FROM webhook_next()"), 1);
        assert_error("SELECT * FROM webhook_next(0)", "22023", "\"batch\"");
        assert_error("SELECT * FROM webhook_next(1001)", "22023", "\"batch\"");
        assert_error(
            "SELECT * FROM webhook_next(1, NULL)",
            "22004",
            "\"consumer\"",
        );
        assert_error(
            "SELECT * FROM webhook_next(lease => '-1 s')",
            "22023",
            "\"lease\"",
        );
        assert_error(
            "SELECT * FROM webhook_enqueue('stripe', 'x', 't', '[1]'::jsonb)",
            "2203C",
            "\"payload\"",
        );
        assert_error(
            "SELECT * FROM webhook_enqueue('stripe', NULL, 't', '{}'::jsonb)",
            "22004",
            "\"event_id\"",
        );
    }

    #[pg_test]
    fn a_failure_backs_off_by_the_formula_then_the_event_is_dead() {
        Spi::run("SET LOCAL webhook.max_attempts = 3; SET LOCAL webhook.backoff_base = '10s'; SET LOCAL webhook.backoff_max = '15s'").unwrap();
        enqueue("stripe", "evt_f");
        for attempt in 1..=3 {
            let (lease, _, attempts) = next("default").expect("ready");
            assert_eq!(attempts, attempt);
            run("SELECT webhook_fail($1, 'downstream 503')", lease);
            if attempt == 3 {
                break;
            }
            // 10 s, then 20 s capped at 15 s; the jitter takes off at most a quarter.
            let full = if attempt == 1 { 10.0 } else { 15.0 };
            let wait: f64 = Spi::get_one(
                "SELECT extract(epoch FROM run_at - clock_timestamp())::float8 FROM webhook.inbox WHERE event_id = 'evt_f'",
            )
            .unwrap()
            .unwrap();
            assert!(
                wait <= full && wait > full * 0.75 - 1.0,
                "attempt {attempt}: retry in {wait} s, formula {full} s less up to 25%"
            );
            assert_eq!(status_of("evt_f", "default"), "ready");
            assert_eq!(next("default"), None, "not before its time");
            Spi::run(
                "UPDATE webhook.inbox SET run_at = clock_timestamp() WHERE event_id = 'evt_f'",
            )
            .unwrap();
        }
        assert_eq!(status_of("evt_f", "default"), "dead");
        assert_eq!(
            count("SELECT count(*) FROM webhook.dead_letters WHERE event_id = 'evt_f' AND consumer = 'default' AND attempts = 3"),
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox_failures WHERE event_id = 'evt_f'"),
            3
        );
        assert_eq!(
            one_text("SELECT processing_status FROM webhook.deliveries WHERE event_id = 'evt_f'"),
            "FAILED"
        );
    }

    #[pg_test]
    fn retry_in_and_permanent_failures() {
        enqueue("stripe", "evt_r");
        let (lease, _, _) = next("default").unwrap();
        run(
            "SELECT webhook_fail($1, 'rate limited', retry_in => '0 s')",
            lease,
        );
        let (lease, _, attempts) = next("default").expect("ready at once");
        assert_eq!(attempts, 2);
        run(
            "SELECT webhook_fail($1, 'bad payload', permanent => true)",
            lease,
        );
        assert_eq!(status_of("evt_r", "default"), "dead");
        assert_eq!(
            one_text("SELECT last_error FROM webhook.dead_letters WHERE event_id = 'evt_r'"),
            "bad payload"
        );
        assert_error(
            &format!("SELECT webhook_fail('{lease}', 'x', retry_in => '-1 s')"),
            "22023",
            "\"retry_in\"",
        );
        // Nor hidden for a century: the DBA's backoff_max is the longest wait.
        assert_error(
            &format!("SELECT webhook_fail('{lease}', 'x', retry_in => '100 years')"),
            "22023",
            "must not exceed webhook.backoff_max",
        );
        // A misspelt setting is refused, not kept as a placeholder.
        assert_error(
            "SET webhook.max_attempt = 3",
            "42602",
            "webhook.max_attempt",
        );
        // A claimed delivery is retried by its provider, not on a timer.
        let claimed = Spi::get_one::<pgrx::Uuid>(
            "SELECT id FROM webhook_claim('stripe', 'evt_c', 't', '{}'::jsonb, NULL)",
        )
        .unwrap()
        .unwrap();
        assert_error(
            &format!("SELECT webhook_fail('{claimed}', 'x', retry_in => '1 min')"),
            "22023",
            "\"retry_in\"",
        );
        run(
            "SELECT webhook_fail($1, 'gone for good', permanent => true)",
            claimed,
        );
        assert_eq!(
            one_text("SELECT status::text FROM webhook.events WHERE event_id = 'evt_c'"),
            "dead"
        );
    }

    #[pg_test]
    fn a_lease_that_ran_out_is_taken_over_and_its_worker_refused() {
        Spi::run("SET LOCAL webhook.max_attempts = 2").unwrap();
        enqueue("stripe", "evt_l");
        let (first, _, _) = next("default").unwrap();
        let expiry = text_of("SELECT webhook_extend($1, '10 min')::text", first);
        assert!(expiry.is_some());
        // A lease that ran out but was not taken over may still finish; run
        // its clock out and let another worker lease it.
        Spi::run("UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '1 s' WHERE event_id = 'evt_l'").unwrap();
        let (second, _, attempts) = next("default").expect("ready again");
        assert_eq!(attempts, 2, "the lost attempt counts");
        assert_error(
            &format!("SELECT webhook_complete('{first}')"),
            "55006",
            "lost its lease",
        );
        assert_error(
            &format!("SELECT webhook_extend('{first}', '1 min')"),
            "55006",
            "lost its lease",
        );
        assert_eq!(
            one_text("SELECT error_message FROM webhook.inbox_failures WHERE event_id = 'evt_l'"),
            "lease expired"
        );
        // Out of attempts when this lease runs out too: parked, not leased.
        Spi::run("UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '1 s' WHERE event_id = 'evt_l'").unwrap();
        assert_eq!(next("default"), None);
        assert_eq!(status_of("evt_l", "default"), "dead");
        assert_error(
            &format!("SELECT webhook_complete('{second}')"),
            "55006",
            "lost its lease",
        );
    }

    #[pg_test]
    fn each_consumer_processes_each_event_once_on_its_own() {
        Spi::run(
            "SELECT webhook_register_provider('stripe', secret => 'whsec_x', consumers => '{billing,analytics}')",
        )
        .unwrap();
        enqueue("stripe", "evt_m");
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox WHERE event_id = 'evt_m'"),
            2
        );
        assert_eq!(
            next("default"),
            None,
            "no default consumer once consumers are named"
        );
        let (billing, _, _) = next("billing").unwrap();
        run("SELECT webhook_fail($1, 'billing down')", billing);
        // Analytics is not held back by billing's failure.
        let (analytics, _, _) = next("analytics").unwrap();
        run("SELECT webhook_complete($1)", analytics);
        assert_eq!(status_of("evt_m", "analytics"), "processed");
        assert_eq!(status_of("evt_m", "billing"), "ready");
        assert_eq!(
            one_text("SELECT processing_status FROM webhook.deliveries WHERE event_id = 'evt_m'"),
            "QUEUED"
        );
        let stats = one_text(
            "SELECT string_agg(consumer || ':' || ready || '/' || scheduled || '/' || leased || '/' || dead, ' ' ORDER BY consumer) FROM webhook.inbox_stats",
        );
        assert_eq!(stats, "billing:0/1/0/0");
        assert_error(
            "SELECT webhook_register_provider('stripe', consumers => '{Bad Name}')",
            "23514",
            "\"consumers\"",
        );
    }

    #[pg_test]
    fn requeue_brings_dead_events_back_once_and_records_who() {
        enqueue("stripe", "evt_q1");
        enqueue("stripe", "evt_q2");
        for _ in 0..2 {
            let (lease, _, _) = next("default").unwrap();
            run(
                "SELECT webhook_fail($1, 'schema changed', permanent => true)",
                lease,
            );
        }
        assert_error(
            "SELECT webhook_requeue('stripe', 'evt_q1', 'billing')",
            "55000",
            "no dead consumer",
        );
        Spi::run("SELECT webhook_requeue('stripe', 'evt_q1')").unwrap();
        assert_eq!(status_of("evt_q1", "default"), "ready");
        assert_eq!(
            one_text("SELECT requeued_by || '/' || attempts || '/' || last_error FROM webhook.requeues WHERE event_id = 'evt_q1'"),
            format!("{}/1/schema changed", one_text("SELECT session_user::text"))
        );
        assert_error(
            "SELECT webhook_requeue('stripe', 'evt_q1')",
            "55000",
            "no dead consumer",
        );
        // Processed by its consumer, it is called so (its own row only says
        // it was queued), and never requeued.
        let (lease, event_id, _) = next("default").unwrap();
        assert_eq!(event_id, "evt_q1");
        run("SELECT webhook_complete($1)", lease);
        assert_error(
            "SELECT webhook_requeue('stripe', 'evt_q1')",
            "55000",
            "the event is processed by every consumer",
        );
        // In bulk, by error text: only what matches.
        assert_eq!(
            count("SELECT webhook_requeue_dead(error_like => '%nothing like this%')"),
            0
        );
        assert_eq!(
            count("SELECT webhook_requeue_dead(provider => 'stripe', error_like => '%SCHEMA%')"),
            1
        );
        assert_eq!(count("SELECT count(*) FROM webhook.requeues"), 2);
        let (lease, _, attempts) = next("default").unwrap();
        assert_eq!(attempts, 1, "a fresh budget");
        run("SELECT webhook_complete($1)", lease);
    }

    #[pg_test]
    fn a_queued_events_inbox_rows_are_found_from_its_event_row_whatever_comes_later() {
        // The inbox is keyed by the delivery that queued each event, and
        // found by event id through the event row's claim_id: that must
        // stay the queueing delivery through duplicates, a claim of the
        // same event, failures, parking and requeueing.
        let found = || {
            count(
                "SELECT count(*) FROM webhook.events e
                   JOIN webhook.inbox i ON i.delivery_id = e.claim_id
                  WHERE e.provider = 'stripe' AND e.event_id = 'evt_key'",
            )
        };
        enqueue("stripe", "evt_key");
        assert_eq!(found(), 1);
        assert_eq!(enqueue("stripe", "evt_key"), (false, "duplicate".into()));
        let answer = one_text(
            "SELECT status::text FROM webhook_claim('stripe', 'evt_key', 'invoice.paid', '{}'::jsonb, NULL)",
        );
        assert_ne!(
            answer, "claimed",
            "a queued event is not taken over by a claim"
        );
        assert_eq!(found(), 1);
        let (lease, _, _) = next("default").unwrap();
        run("SELECT webhook_fail($1, 'down', permanent => true)", lease);
        assert_eq!(found(), 1);
        Spi::run("SELECT webhook_requeue('stripe', 'evt_key')").unwrap();
        assert_eq!(status_of("evt_key", "default"), "ready");
        let (lease, _, _) = next("default").unwrap();
        run("SELECT webhook_complete($1)", lease);
        assert_eq!(found(), 1);
        assert_error(
            "SELECT webhook_requeue('stripe', 'evt_key')",
            "55000",
            "the event is processed by every consumer",
        );
    }

    #[pg_test]
    fn the_purge_keeps_the_payload_of_every_unfinished_event() {
        enqueue("stripe", "evt_p1");
        enqueue("stripe", "evt_p2");
        Spi::run("UPDATE webhook.delivery_log SET created_at = now() - interval '100 days'")
            .unwrap();
        let (lease, done, _) = next("default").unwrap();
        run("SELECT webhook_complete($1)", lease);
        Spi::run("UPDATE webhook.inbox SET processed_at = now() - interval '100 days' WHERE status = 'processed'").unwrap();
        assert_eq!(count("SELECT webhook_purge()"), 1);
        let left = one_text("SELECT string_agg(event_id, ',') FROM webhook.delivery_log");
        assert_ne!(left, done, "the processed one went");
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox"),
            1,
            "the unfinished one stays"
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook_next() WHERE payload = '{\"n\": 1}'"),
            1,
            "its payload is still there for the worker"
        );
        // Dedup outlives the purge.
        assert_eq!(enqueue("stripe", &done), (false, "duplicate".into()));
    }

    #[pg_test]
    fn github_defaults_to_the_inbox_and_is_always_answered_2xx_unless_rejected() {
        Spi::run("SELECT webhook_register_provider('github', secret => 'gh-secret')").unwrap();
        let body = r#"{"action": "opened"}"#;
        let headers = github_headers("d-1", "pull_request", body, "gh-secret");
        assert_eq!(
            receive("github", &headers, body),
            ("queued".into(), 200, "ok".into())
        );
        assert_eq!(
            receive("github", &headers, body),
            ("duplicate".into(), 200, "ok".into())
        );
        let (lease, _, _) = next("default").unwrap();
        run("SELECT webhook_fail($1, 'handler crashed')", lease);
        assert_eq!(
            receive("github", &headers, body),
            ("duplicate".into(), 200, "ok".into())
        );
        let forged = github_headers("d-2", "push", body, "wrong");
        assert_eq!(receive("github", &forged, body).1, 401);
        // Per call, the one-transaction mode is still there.
        let other = github_headers("d-3", "push", r#"{"n": 3}"#, "gh-secret");
        let claimed = one_text(&format!(
            "SELECT status FROM webhook_receive('github', {other}, convert_to('{{\"n\": 3}}', 'UTF8'), inbox => false)"
        ));
        assert_eq!(claimed, "claimed");
        let stripe = one_text(
            "SELECT inbox::text FROM webhook_register_provider('stripe', secret => 'whsec_x')",
        );
        assert_eq!(stripe, "false", "other providers claim unless told");
    }

    #[pg_test]
    fn delays_double_from_the_base_up_to_the_cap() {
        use crate::inbox::backoff::delay_micros;
        let no_jitter: Vec<i64> = (1..=6)
            .map(|n| delay_micros(n, 10_000, 60_000, 0.0))
            .collect();
        assert_eq!(
            no_jitter,
            [10_000_000, 20_000_000, 40_000_000, 60_000_000, 60_000_000, 60_000_000]
        );
        // The jitter shortens by at most a quarter, never lengthens.
        assert_eq!(delay_micros(3, 1000, 3_600_000, 0.999_999), 3_000_001);
        assert_eq!(delay_micros(40, 1000, 3_600_000, 0.5), 3_150_000_000);
        // Attempt counts past any sane value neither overflow nor pass the cap.
        assert_eq!(delay_micros(i32::MAX, 1000, 5000, 0.0), 5_000_000);
        assert_eq!(delay_micros(0, 1000, 5000, 0.0), 1_000_000);
    }

    /// Index entries and heap rows the inbox's scans returned so far in
    /// this transaction: what a call read, not how long it took. (A TID
    /// scan returns none; a sequential scan returns every row.)
    fn inbox_reads() -> i64 {
        count(
            "SELECT sum(pg_stat_get_xact_tuples_returned(c))::bigint
               FROM unnest(ARRAY(SELECT indexrelid FROM pg_index WHERE indrelid = 'webhook.inbox'::regclass)
                           || 'webhook.inbox'::regclass::oid) c",
        )
    }

    /// What one webhook_next call read, and the providers it leased, in
    /// lease order.
    fn next_reading(call: &str) -> (i64, Vec<String>) {
        let before = inbox_reads();
        let leased: Vec<String> = Spi::connect_mut(|c| {
            c.update(&format!("SELECT provider FROM {call}"), None, &[])?
                .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
        (inbox_reads() - before, leased)
    }

    #[pg_test]
    fn each_call_reads_its_own_queue_whatever_else_is_queued() {
        // Another provider's backlog, queued first (written directly: one
        // transaction could not queue it through webhook_enqueue), with a
        // rare type in it.
        Spi::run(
            "INSERT INTO webhook.inbox (provider, event_id, consumer, event_type, delivery_id, run_at)
             SELECT 'big', 'b' || n, 'default', CASE WHEN n % 12500 = 0 THEN 'rare' ELSE 'common' END,
                    gen_random_uuid(), clock_timestamp() - interval '1 hour'
               FROM generate_series(1, 50000) n;
             SELECT webhook_enqueue('small', 's' || n, 'common', '{}'::jsonb) FROM generate_series(1, 6) n;
             -- As autovacuum would have: a table the planner knows nothing
             -- of is read whole, whatever its indexes.
             ANALYZE webhook.inbox;",
        )
        .unwrap();
        // A few probes per provider and the rows leased, on any major: the
        // backlogs here are 50,000 and 20,000 rows.
        let bound = 200;
        let (read, leased) = next_reading("webhook_next(2, provider => 'small')");
        assert_eq!(leased, ["small", "small"]);
        assert!(
            read < bound,
            "behind another provider's backlog: {read} read"
        );
        let (read, leased) =
            next_reading("webhook_next(10, provider => 'big', event_type => 'rare')");
        assert_eq!(leased.len(), 4);
        assert!(read < bound, "past other event types: {read} read");
        // A provider whose own queue is mostly leased (for minutes) or
        // failed and backing off: those rows are never read.
        Spi::run(
            "INSERT INTO webhook.inbox (provider, event_id, consumer, event_type, delivery_id, status,
                                       run_at, claim_id, attempts)
             SELECT 'busy', 'b' || n, 'default', 'common', gen_random_uuid(),
                    CASE WHEN n % 2 = 0 THEN 'ready' ELSE 'leased' END::webhook.inbox_status,
                    clock_timestamp() + interval '10 minutes', gen_random_uuid(), 1
               FROM generate_series(1, 20000) n;
             ANALYZE webhook.inbox;
             SELECT webhook_enqueue('busy', 'late' || n, 'common', '{}'::jsonb) FROM generate_series(1, 4) n;",
        )
        .unwrap();
        let (read, leased) = next_reading("webhook_next(10, provider => 'busy')");
        assert_eq!(leased.len(), 4);
        assert!(
            read < bound,
            "past leased and backing-off rows: {read} read"
        );
        // Without a provider, the providers take turns ('busy', with
        // nothing ready, passes its turn to the next): 'small', with 4
        // ready, is served as often as 'big', with 50,000.
        let mut served = Vec::new();
        for _ in 0..6 {
            let (read, leased) = next_reading("webhook_next(1)");
            assert!(read < bound, "without a filter: {read} read");
            served.extend(leased);
        }
        let small = served.iter().filter(|p| *p == "small").count();
        assert_eq!(served.len(), 6);
        assert!((2..=4).contains(&small), "turns: {served:?}");
        // Finishing finds each lease by its id, alone or in a batch, among
        // the 70,000 rows (queued ones are not in the lease index at all).
        for finish in [
            "SELECT webhook_complete(id) FROM webhook_next(1, provider => 'big')",
            "SELECT webhook_complete_batch(array_agg(id)) FROM webhook_next(5, provider => 'big')",
        ] {
            let before = inbox_reads();
            Spi::run(finish).unwrap();
            let read = inbox_reads() - before;
            assert!(read < bound, "{finish}: {read} read");
        }
    }

    /// Ready rows `first`..=`last` of provider `deep` for consumer `deep`,
    /// queued an hour ago a millisecond apart in that order (written
    /// directly: one transaction could not queue thousands through
    /// webhook_enqueue). A consumer of their own: tests run side by side,
    /// and another test's uncommitted rows are entries its index scans
    /// step over.
    fn deep_queue(first: i64, last: i64) {
        Spi::run(&format!(
            "INSERT INTO webhook.inbox (provider, event_id, consumer, event_type, delivery_id, run_at)
             SELECT 'deep', 'd' || lpad(n::text, 6, '0'), 'deep', 'common', gen_random_uuid(),
                    clock_timestamp() - interval '1 hour' + n * interval '1 millisecond'
               FROM generate_series({first}, {last}) n;
             ANALYZE webhook.inbox;"
        ))
        .unwrap();
    }

    /// Lease a batch, complete it, and say what was read and leased.
    fn drain_reading(call: &str) -> (i64, Vec<String>) {
        let before = inbox_reads();
        let leased: Vec<String> = Spi::connect_mut(|c| {
            let rows = c.update(&format!("SELECT id, event_id FROM {call}"), None, &[])?;
            let mut ids = Vec::new();
            let mut events = Vec::new();
            for row in rows {
                ids.push(row.get::<pgrx::Uuid>(1)?.unwrap());
                events.push(row.get::<String>(2)?.unwrap());
            }
            c.update("SELECT webhook_complete_batch($1)", None, &[ids.into()])?;
            Ok::<_, pgrx::spi::Error>(events)
        })
        .unwrap();
        (inbox_reads() - before, leased)
    }

    #[pg_test]
    fn a_pick_does_not_walk_the_entries_earlier_leases_left_behind() {
        // Each lease leaves its row's old entry at the head of the queue's
        // index range until a VACUUM (here: never, as in a big inbox whose
        // vacuums skip its indexes). 2,000 events drained, then every
        // call still reads about its own batch, with one provider or all.
        deep_queue(1, 3000);
        for _ in 0..200 {
            drain_reading("webhook_next(10, 'deep', 'deep')");
        }
        for call in [
            "webhook_next(10, 'deep', 'deep')",
            "webhook_next(10, 'deep')",
        ] {
            // A filter's first call reads from the start, on purpose.
            drain_reading(call);
            let mut read = 0;
            for _ in 0..20 {
                let (r, leased) = drain_reading(call);
                assert_eq!(leased.len(), 10);
                read += r;
            }
            assert!(read < 20 * 100, "{call}: {read} read in 20 calls");
        }
    }

    #[pg_test]
    fn a_row_that_appears_before_where_picks_start_is_leased_all_the_same() {
        // A row can appear ahead of the rows already picked: another
        // worker's lease rolled back, or a queueing transaction committed
        // late. Here one is moved there by hand.
        let straggle = |event_id: &str| {
            Spi::run(&format!(
                "UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '2 hours'
                  WHERE provider = 'deep' AND event_id = '{event_id}'"
            ))
            .unwrap();
        };
        for call in [
            "webhook_next(10, 'deep', 'deep')",
            "webhook_next(10, 'deep')",
        ] {
            // Nothing ready after where the picks start: the same call
            // looks again from the start rather than answer "none".
            Spi::run("DELETE FROM webhook.inbox WHERE provider = 'deep'").unwrap();
            deep_queue(1, 11);
            assert_eq!(drain_reading(call).1.len(), 10);
            straggle("d000011");
            assert_eq!(drain_reading(call).1, ["d000011"], "{call}");
            // A short batch after them (the queue ran dry): the next call
            // starts from the start, though new rows keep coming.
            Spi::run("DELETE FROM webhook.inbox WHERE provider = 'deep'").unwrap();
            deep_queue(1, 20);
            assert_eq!(drain_reading(call).1.len(), 10);
            straggle("d000020");
            assert_eq!(drain_reading(call).1.len(), 9, "{call}");
            deep_queue(21, 23);
            let (_, mut leased) = drain_reading(call);
            leased.sort();
            assert_eq!(
                leased,
                ["d000020", "d000021", "d000022", "d000023"],
                "{call}"
            );
        }
    }

    #[pg_test]
    fn lease_ids_are_made_in_time_order_and_never_taken_for_a_delivery() {
        let (ids, _) = three_leases("evt_order");
        for id in &ids {
            // Version 8, with the time it was made in its first 48 bits
            // (so the leases' index grows at its right edge).
            let (version, age_ms) = Spi::get_two_with_args::<i32, i64>(
                "SELECT pg_catalog.get_byte(uuid_send($1), 6) >> 4,
                        (extract(epoch FROM clock_timestamp()) * 1000)::int8
                        - ('x' || substr(replace($1::text, '-', ''), 1, 12))::bit(48)::int8",
                &[(*id).into()],
            )
            .unwrap();
            assert_eq!(version, Some(8), "{id}");
            let age_ms = age_ms.unwrap();
            assert!((0..60_000).contains(&age_ms), "{id}: made {age_ms} ms ago");
            assert!(!crate::uuid::may_be_delivery(id));
        }
        // And a lease finishes as a lease.
        let done = ids
            .iter()
            .map(|id| id.to_string())
            .collect::<Vec<_>>()
            .join("','");
        Spi::run(&format!(
            "SELECT webhook_complete_batch(ARRAY['{done}']::uuid[])"
        ))
        .unwrap();
        let processed = Spi::get_one::<i64>(
            "SELECT count(*) FROM webhook.inbox WHERE event_id LIKE 'evt_order%' AND status = 'processed'",
        )
        .unwrap();
        assert_eq!(processed, Some(3));
    }

    /// Three leases of the default consumer, as an SQL array literal.
    fn three_leases(prefix: &str) -> (Vec<pgrx::Uuid>, String) {
        for n in 1..=3 {
            enqueue("stripe", &format!("{prefix}{n}"));
        }
        let ids: Vec<pgrx::Uuid> = (0..3).map(|_| next("default").unwrap().0).collect();
        let array = uuid_array(&ids);
        (ids, array)
    }

    fn uuid_array(ids: &[pgrx::Uuid]) -> String {
        let ids: Vec<String> = ids.iter().map(|id| id.to_string()).collect();
        format!("ARRAY['{}']::uuid[]", ids.join("','"))
    }

    #[pg_test]
    fn a_batch_of_leases_completes_in_one_call_fenced_as_each_alone() {
        let (ids, all) = three_leases("evt_b");
        // One of them ran out and was taken over: the batch is refused
        // whole, naming it, and nothing of it is written.
        Spi::run("UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '1 s' WHERE event_id = 'evt_b2'")
            .unwrap();
        let (second, ..) = next("default").unwrap();
        assert_error(
            &format!("SELECT webhook_complete_batch({all})"),
            "55006",
            &format!("{} lost its lease", ids[1]),
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox WHERE status = 'processed'"),
            0
        );
        // The live ones (one given twice) and the new lease: processed.
        Spi::run(&format!(
            "SELECT webhook_complete_batch({})",
            uuid_array(&[ids[0], ids[2], second, ids[0]])
        ))
        .unwrap();
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox WHERE status = 'processed' AND processed_at IS NOT NULL"),
            3
        );
        assert_error(
            &format!("SELECT webhook_complete_batch(ARRAY['{}']::uuid[])", ids[0]),
            "55000",
            "already processed",
        );
        for (sql, sqlstate, needle) in [
            ("SELECT webhook_complete_batch(NULL)", "22004", "argument \"ids\""),
            ("SELECT webhook_complete_batch('{}')", "22023", "argument \"ids\""),
            ("SELECT webhook_complete_batch(ARRAY[NULL]::uuid[])", "22004", "argument \"ids\""),
            (
                "SELECT webhook_complete_batch(ARRAY(SELECT gen_random_uuid() FROM generate_series(1, 1001)))",
                "22023",
                "1 to 1000",
            ),
            ("SELECT webhook_complete_batch(ARRAY[gen_random_uuid()])", "P0002", "no delivery or lease"),
        ] {
            assert_error(sql, sqlstate, needle);
        }
    }

    #[pg_test]
    fn a_batch_of_leases_fails_in_one_call_each_with_its_backoff() {
        let (ids, all) = three_leases("evt_f");
        Spi::run(&format!(
            "SELECT webhook_fail_batch({all}, 'downstream 503')"
        ))
        .unwrap();
        assert_eq!(
            count(
                "SELECT count(*) FROM webhook.inbox
                  WHERE status = 'ready' AND run_at > clock_timestamp() AND last_error = 'downstream 503'"
            ),
            3
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox_failures WHERE error_message = 'downstream 503'"),
            3
        );
        // Failed already: refused, as webhook_fail would.
        assert_error(
            &format!("SELECT webhook_fail_batch({all}, 'again')"),
            "55000",
            &ids[0].to_string(),
        );
        // Permanent: dead at once; retry_in bounded as for webhook_fail.
        Spi::run("UPDATE webhook.inbox SET run_at = clock_timestamp() - interval '1 s'").unwrap();
        let again: Vec<pgrx::Uuid> = (0..3).map(|_| next("default").unwrap().0).collect();
        let again = uuid_array(&again);
        assert_error(
            &format!("SELECT webhook_fail_batch({again}, 'x', '100 years')"),
            "22023",
            "webhook.backoff_max",
        );
        Spi::run(&format!(
            "SELECT webhook_fail_batch({again}, 'gone', permanent => true)"
        ))
        .unwrap();
        assert_eq!(
            count("SELECT count(*) FROM webhook.inbox WHERE status = 'dead'"),
            3
        );
    }
}

//! Dead letters, requeue, stored results, payload mismatches, the
//! operations views and the archive purge.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, claim, count, run, text_of};
    use pgrx::prelude::*;

    #[pg_test]
    fn an_event_out_of_attempts_is_dead_until_requeued() {
        Spi::run("SET LOCAL webhook.max_attempts = 3").unwrap();
        let mut id = claim("stripe", "evt_dead", None).0;
        for attempt in 1..=3 {
            run("SELECT webhook_fail($1, 'boom')", id);
            let (next, claimed, status, attempts) = claim("stripe", "evt_dead", None);
            if attempt < 3 {
                assert_eq!(
                    (claimed, status.as_str(), attempts),
                    (true, "retry", attempt + 1)
                );
                id = next;
            } else {
                assert_eq!((claimed, status.as_str(), attempts), (false, "dead", 3));
            }
        }
        assert_eq!(
            count("SELECT count(*) FROM webhook.dead_letters WHERE event_id = 'evt_dead'"),
            1
        );
        assert_eq!(count("SELECT count(*) FROM webhook.deliveries WHERE event_id = 'evt_dead' AND claim_status = 'dead'"), 1);
        assert_eq!(
            text_of(
                "SELECT processing_status FROM webhook.deliveries WHERE id = $1",
                id
            ),
            Some("FAILED".into()),
            "the last attempt's own record"
        );

        Spi::run("SELECT webhook_requeue('stripe', 'evt_dead')").unwrap();
        let (retry, claimed, status, attempts) = claim("stripe", "evt_dead", None);
        assert_eq!((claimed, status.as_str(), attempts), (true, "retry", 1));
        run("SELECT webhook_complete($1)", retry);
        assert_eq!(
            count("SELECT requeues FROM webhook.events WHERE event_id = 'evt_dead'"),
            1
        );
        // Never twice: a processed event is not requeued.
        assert_error(
            "SELECT webhook_requeue('stripe', 'evt_dead')",
            "55000",
            "only dead or failed",
        );
        assert_error(
            "SELECT webhook_requeue('stripe', 'nope')",
            "P0002",
            "no event",
        );
    }

    #[pg_test]
    fn an_expired_lease_counts_as_an_attempt() {
        Spi::run("SET LOCAL webhook.max_attempts = 1").unwrap();
        claim("slack", "ev_expire", Some("1 millisecond"));
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        let (_, claimed, status, _) = claim("slack", "ev_expire", None);
        assert_eq!((claimed, status.as_str()), (false, "dead"));
        assert_eq!(
            count("SELECT count(*) FROM webhook.dead_letters WHERE event_id = 'ev_expire'"),
            1
        );
    }

    #[pg_test]
    fn zero_max_attempts_retries_forever() {
        Spi::run("SET LOCAL webhook.max_attempts = 0").unwrap();
        let mut id = claim("stripe", "evt_forever", None).0;
        for _ in 0..15 {
            run("SELECT webhook_fail($1, 'again')", id);
            let (next, claimed, ..) = claim("stripe", "evt_forever", None);
            assert!(claimed);
            id = next;
        }
    }

    #[pg_test]
    fn duplicates_get_the_stored_result() {
        let (id, ..) = claim("stripe", "evt_result", None);
        run("SELECT webhook_complete($1, '{\"order\": 42}'::jsonb)", id);
        let result = Spi::get_one::<String>(
            "SELECT result->>'order' FROM webhook_claim('stripe', 'evt_result', 't', '{}'::jsonb, NULL)",
        );
        assert_eq!(result, Ok(Some("42".into())));
        let (big, ..) = claim("stripe", "evt_big_result", None);
        assert_error(
            &format!(
                "SELECT webhook_complete('{big}', jsonb_build_object('x', repeat('y', 70000)))"
            ),
            "22001",
            "\"result\"",
        );
    }

    #[pg_test]
    fn a_redelivery_with_another_payload_is_flagged() {
        let (id, ..) = claim("paddle", "evt_mismatch", None);
        run("SELECT webhook_complete($1)", id);
        // Same payload (claim's helper sends {"k": 1}): not flagged.
        claim("paddle", "evt_mismatch", None);
        // Same content, other key order and spacing: not flagged either.
        Spi::run("SELECT webhook_claim('paddle', 'evt_mismatch', 't', '{ \"k\" : 1 }', NULL)")
            .unwrap();
        Spi::run("SELECT webhook_claim('paddle', 'evt_mismatch', 't', '{\"k\": 2}'::jsonb, NULL)")
            .unwrap();
        assert_eq!(
            count(
                "SELECT count(*) FROM webhook.payload_mismatches WHERE event_id = 'evt_mismatch'"
            ),
            1
        );
        assert_eq!(
            count("SELECT (payload->>'k')::int8 FROM webhook.payload_mismatches WHERE event_id = 'evt_mismatch'"),
            2
        );
    }

    #[pg_test]
    fn views_show_failures_stuck_claims_and_counts() {
        let (failed, ..) = claim("github", "d-fail", None);
        run("SELECT webhook_fail($1, 'bad gateway')", failed);
        claim("github", "d-stuck", Some("1 millisecond"));
        let (done, ..) = claim("github", "d-done", None);
        run("SELECT webhook_complete($1)", done);
        Spi::run("SELECT pg_sleep(0.02)").unwrap();

        assert_eq!(
            count(
                "SELECT count(*) FROM webhook.recent_failures WHERE error_message = 'bad gateway'"
            ),
            1
        );
        assert_eq!(
            count("SELECT count(*) FROM webhook.stuck_claims WHERE event_id = 'd-stuck'"),
            1
        );
        let stats = Spi::get_three::<i64, i64, i64>(
            "SELECT processed, processing, failed FROM webhook.provider_stats WHERE provider = 'github'",
        )
        .unwrap();
        assert_eq!(stats, (Some(1), Some(1), Some(1)));
    }

    #[pg_test]
    fn purge_deletes_old_archive_rows_of_finished_events_only() {
        let (done, ..) = claim("stripe", "evt_old_done", None);
        run("SELECT webhook_complete($1)", done);
        claim("stripe", "evt_old_done", None); // a duplicate
        let (failed, ..) = claim("stripe", "evt_old_failed", None);
        run("SELECT webhook_fail($1, 'x')", failed);
        let (dead, ..) = claim("stripe", "evt_old_dead", None);
        run("SELECT webhook_fail($1, 'x', permanent => true)", dead);
        claim("stripe", "evt_old_processing", None);
        let (recent, ..) = claim("stripe", "evt_recent", None);
        run("SELECT webhook_complete($1)", recent);
        Spi::run(
            "UPDATE webhook.delivery_log SET created_at = now() - interval '100 days'
              WHERE event_id <> 'evt_recent'",
        )
        .unwrap();

        let purged =
            Spi::get_one::<i64>("SELECT webhook_purge('90 days', batch_size => 1)").unwrap();
        assert_eq!(
            purged,
            Some(2),
            "both deliveries of the old processed event, one per batch"
        );
        let left = Spi::get_one::<String>(
            "SELECT string_agg(DISTINCT event_id, ',' ORDER BY event_id) FROM webhook.deliveries",
        );
        assert_eq!(
            left,
            Ok(Some(
                "evt_old_dead,evt_old_failed,evt_old_processing,evt_recent".into()
            ))
        );
        // Dedup untouched: the old event is still a duplicate.
        let (_, _, status, _) = claim("stripe", "evt_old_done", None);
        assert_eq!(status, "duplicate");
        assert_eq!(count("SELECT count(*) FROM webhook.events"), 5);
        assert_error("SELECT webhook_purge('0 days')", "22023", "\"older_than\"");
        assert_error(
            "SELECT webhook_purge('1 day', 0)",
            "22023",
            "\"batch_size\"",
        );
    }
}

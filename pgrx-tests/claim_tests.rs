//! webhook_claim: every answer it gives, what it archives, and every way it
//! refuses its arguments.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, claim, run, text_of};
    use pgrx::prelude::*;

    #[pg_test]
    fn first_delivery_is_claimed() {
        let (id, claimed, status, attempts) = claim("stripe", "evt_new", None);
        assert!(claimed);
        assert_eq!((status.as_str(), attempts), ("claimed", 1));
        assert_eq!(
            text_of(
                "SELECT status || '/' || claim_id FROM webhook.events WHERE event_id = 'evt_new'",
                id
            ),
            Some(format!("processing/{id}"))
        );
        assert_eq!(
            text_of("SELECT claim_status || '/' || processing_status FROM webhook.deliveries WHERE id = $1", id),
            Some("claimed/PENDING".into())
        );
    }

    #[pg_test]
    fn delivery_after_completion_is_a_duplicate_and_archived_skipped() {
        let (first, ..) = claim("stripe", "evt_dup", None);
        run("SELECT webhook_complete($1)", first);
        let (id, claimed, status, attempts) = claim("stripe", "evt_dup", None);
        assert!(!claimed);
        assert_eq!((status.as_str(), attempts), ("duplicate", 1));
        assert_eq!(
            text_of("SELECT claim_status || '/' || processing_status FROM webhook.deliveries WHERE id = $1", id),
            Some("duplicate/SKIPPED".into())
        );
        let deliveries = Spi::get_one::<i64>(
            "SELECT count(*) FROM webhook.deliveries WHERE event_id = 'evt_dup'",
        );
        assert_eq!(deliveries, Ok(Some(2)));
    }

    #[pg_test]
    fn duplicates_skip_the_archive_when_archiving_them_is_off() {
        let (first, ..) = claim("stripe", "evt_quiet", None);
        run("SELECT webhook_complete($1, '{\"invoice\": 7}')", first);
        Spi::run("SET LOCAL webhook.archive_duplicates = off").unwrap();

        let (id, claimed, status, attempts) = claim("stripe", "evt_quiet", None);
        assert!(!claimed);
        assert_eq!((status.as_str(), attempts), ("duplicate", 1));
        assert_eq!(
            text_of(
                "SELECT count(*)::text FROM webhook.delivery_log WHERE id = $1",
                id
            ),
            Some("0".into()),
            "the duplicate is not archived"
        );
        // Its stored result still comes back.
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT result::text FROM webhook_claim('stripe', 'evt_quiet', 't', '{}'::jsonb, NULL)"
            ),
            Ok(Some(r#"{"invoice": 7}"#.into()))
        );
        assert_eq!(
            Spi::get_one::<i64>(
                "SELECT count(*) FROM webhook.delivery_log WHERE event_id = 'evt_quiet'"
            ),
            Ok(Some(1))
        );

        // Only processed events take the shortcut: a delivery of a live or
        // failed event is still claimed and archived as usual.
        let (owner, ..) = claim("stripe", "evt_quiet_live", Some("1 hour"));
        let (id, claimed, status, _) = claim("stripe", "evt_quiet_live", None);
        assert_eq!((claimed, status.as_str()), (false, "in_progress"));
        assert_eq!(
            text_of(
                "SELECT claim_status::text FROM webhook.delivery_log WHERE id = $1",
                id
            ),
            Some("in_progress".into())
        );
        run("SELECT webhook_fail($1, 'boom')", owner);
        let (id, claimed, status, attempts) = claim("stripe", "evt_quiet_live", None);
        assert_eq!((claimed, status.as_str(), attempts), (true, "retry", 2));
        assert_eq!(
            text_of(
                "SELECT claim_status::text FROM webhook.delivery_log WHERE id = $1",
                id
            ),
            Some("retry".into())
        );
    }

    #[pg_test]
    fn delivery_during_a_live_lease_is_in_progress() {
        let (owner, ..) = claim("stripe", "evt_live", Some("1 hour"));
        let (id, claimed, status, attempts) = claim("stripe", "evt_live", None);
        assert!(!claimed);
        assert_eq!((status.as_str(), attempts), ("in_progress", 1));
        assert_ne!(id, owner);
        assert_eq!(
            text_of("SELECT claim_status || '/' || processing_status FROM webhook.deliveries WHERE id = $1", id),
            Some("in_progress/SKIPPED".into())
        );
        // The live claim still owns the event.
        assert_eq!(
            text_of("SELECT claim_id::text FROM webhook.events WHERE event_id = 'evt_live' AND claim_id = $1", owner),
            Some(owner.to_string())
        );
    }

    #[pg_test]
    fn delivery_after_a_failure_is_a_retry_that_counts() {
        let (first, ..) = claim("stripe", "evt_failed", None);
        run("SELECT webhook_fail($1, 'db timeout')", first);
        let (id, claimed, status, attempts) = claim("stripe", "evt_failed", None);
        assert!(claimed);
        assert_eq!((status.as_str(), attempts), ("retry", 2));
        assert_eq!(
            text_of("SELECT claim_status || '/' || processing_status FROM webhook.deliveries WHERE id = $1", id),
            Some("retry/PENDING".into())
        );
        // The failed attempt keeps its record; the event remembers the error.
        assert_eq!(
            text_of("SELECT processing_status || '/' || error_message FROM webhook.deliveries WHERE id = $1", first),
            Some("FAILED/db timeout".into())
        );
        assert_eq!(
            text_of(
                "SELECT last_error FROM webhook.events WHERE claim_id = $1",
                id
            ),
            Some("db timeout".into())
        );
        // And the retry can finish the event: the failure did not poison it.
        run("SELECT webhook_complete($1)", id);
        let (_, claimed, status, _) = claim("stripe", "evt_failed", None);
        assert_eq!((claimed, status.as_str()), (false, "duplicate"));
    }

    #[pg_test]
    fn delivery_after_an_expired_lease_is_a_retry() {
        let (first, ..) = claim("stripe", "evt_expired", Some("1 millisecond"));
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        let (id, claimed, status, attempts) = claim("stripe", "evt_expired", None);
        assert!(claimed);
        assert_eq!((status.as_str(), attempts), ("retry", 2));
        assert_ne!(id, first);
        // The abandoned attempt is closed in the archive, not left PENDING.
        assert_eq!(
            text_of(
                "SELECT processing_status FROM webhook.deliveries WHERE id = $1",
                first
            ),
            Some("FAILED".into())
        );
    }

    #[pg_test]
    fn retries_keep_counting() {
        let mut id = claim("github", "delivery-1", None).0;
        for expected in 2..=5 {
            run("SELECT webhook_fail($1, 'again')", id);
            let (next, _, status, attempts) = claim("github", "delivery-1", None);
            assert_eq!((status.as_str(), attempts), ("retry", expected));
            id = next;
        }
    }

    #[pg_test]
    fn same_event_id_under_two_providers_is_two_events() {
        let (_, a, ..) = claim("stripe", "shared-id", None);
        let (_, b, ..) = claim("paddle", "shared-id", None);
        assert!(a && b);
    }

    #[pg_test]
    fn lease_defaults_to_the_setting() {
        Spi::run("SET LOCAL webhook.lease_timeout = '42s'").unwrap();
        let (id, ..) = claim("stripe", "evt_guc", None);
        let secs = Spi::get_one_with_args::<f64>(
            "SELECT extract(epoch FROM lease_expires_at - clock_timestamp())::float8
               FROM webhook.events WHERE claim_id = $1",
            &[id.into()],
        )
        .unwrap()
        .unwrap();
        assert!((40.0..=42.0).contains(&secs), "lease of {secs} s");
    }

    #[pg_test]
    fn raw_body_is_archived_byte_for_byte() {
        let body = "{ \"id\" : \"evt_raw\",\n  \"b\": 2, \"a\": 1 }";
        let (id, status) = Spi::get_two_with_args::<pgrx::Uuid, String>(
            "SELECT id, status FROM webhook_claim('stripe', 'evt_raw', 't', convert_to($1, 'UTF8'), 's')",
            &[body.into()],
        )
        .unwrap();
        assert_eq!(status.as_deref(), Some("claimed"));
        let id = id.unwrap();
        assert_eq!(
            text_of(
                "SELECT convert_from(raw_body, 'UTF8') FROM webhook.deliveries WHERE id = $1",
                id
            ),
            Some(body.to_string())
        );
        assert_eq!(
            text_of(
                "SELECT payload->>'id' FROM webhook.deliveries WHERE id = $1",
                id
            ),
            Some("evt_raw".into())
        );
    }

    #[pg_test]
    fn text_body_overload_is_what_an_untyped_literal_reaches() {
        let status = Spi::get_one::<String>(
            "SELECT status FROM webhook_claim('stripe', 'evt_text', 't', '{\"x\":  1}', NULL)",
        );
        assert_eq!(status, Ok(Some("claimed".into())));
        let raw = Spi::get_one::<String>(
            "SELECT convert_from(raw_body, 'UTF8') FROM webhook.deliveries WHERE event_id = 'evt_text'",
        );
        assert_eq!(raw, Ok(Some("{\"x\":  1}".into())));
    }

    #[pg_test]
    fn the_five_documented_arguments_work_alone() {
        let status = Spi::get_one::<String>(
            "SELECT status FROM webhook_claim(provider => 'stripe', event_id => 'evt_named',
                 event_type => 't', payload => '{}'::jsonb, signature => NULL)",
        );
        assert_eq!(status, Ok(Some("claimed".into())));
    }

    #[pg_test]
    fn claim_refuses_bad_arguments_with_their_own_sqlstate() {
        let cases: &[(&str, &str, &str)] = &[
            (
                "SELECT webhook_claim(NULL, 'e', 't', '{}'::jsonb, NULL)",
                "22004",
                "\"provider\"",
            ),
            (
                "SELECT webhook_claim('p', NULL, 't', '{}'::jsonb, NULL)",
                "22004",
                "\"event_id\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', NULL, '{}'::jsonb, NULL)",
                "22004",
                "\"event_type\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', NULL::jsonb, NULL)",
                "22004",
                "\"payload\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', NULL::bytea, NULL)",
                "22004",
                "\"body\"",
            ),
            (
                "SELECT webhook_claim('', 'e', 't', '{}'::jsonb, NULL)",
                "2200F",
                "\"provider\"",
            ),
            (
                "SELECT webhook_claim('p', '', 't', '{}'::jsonb, NULL)",
                "2200F",
                "\"event_id\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', '', '{}'::jsonb, NULL)",
                "2200F",
                "\"event_type\"",
            ),
            (
                "SELECT webhook_claim('p', repeat('x', 256), 't', '{}'::jsonb, NULL)",
                "22001",
                "\"event_id\"",
            ),
            (
                "SELECT webhook_claim(repeat('p', 65), 'e', 't', '{}'::jsonb, NULL)",
                "22001",
                "\"provider\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', repeat('t', 256), '{}'::jsonb, NULL)",
                "22001",
                "\"event_type\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '{}'::jsonb, repeat('s', 8193))",
                "22001",
                "\"signature\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '[1, 2]'::jsonb, NULL)",
                "2203C",
                "\"payload\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '\"str\"'::jsonb, NULL)",
                "2203C",
                "\"payload\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '42', NULL)",
                "2203C",
                "\"body\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '{\"a\":', NULL)",
                "22032",
                "\"body\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '{\"a\": \"x\\u0000y\"}', NULL)",
                // Not jsonb_in's own 22P05: refused before it, by name.
                "22032",
                "\"body\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '\\xc328'::bytea, NULL)",
                "22021",
                "\"body\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '{}'::jsonb, NULL, '0 seconds')",
                "22023",
                "\"lease\"",
            ),
            (
                "SELECT webhook_claim('p', 'e', 't', '{}'::jsonb, NULL, '-5 minutes')",
                "22023",
                "\"lease\"",
            ),
        ];
        for (sql, sqlstate, arg) in cases {
            assert_error(sql, sqlstate, arg);
        }
        // Nothing was written by any of them.
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.events"),
            Ok(Some(0))
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.deliveries"),
            Ok(Some(0))
        );
    }

    #[pg_test]
    fn payloads_over_the_size_limit_are_refused_before_anything_is_written() {
        Spi::run("SET LOCAL webhook.max_payload_size = '1kB'").unwrap();
        let big = "jsonb_build_object('pad', repeat('x', 2000))";
        assert_error(
            &format!("SELECT webhook_claim('p', 'big', 't', {big}, NULL)"),
            "54000",
            "\"payload\"",
        );
        assert_error(
            &format!("SELECT webhook_claim('p', 'big', 't', ({big})::text, NULL)"),
            "54000",
            "\"body\"",
        );
        assert_error(
            &format!(
                "SELECT webhook_claim('p', 'big', 't', convert_to(({big})::text, 'UTF8'), NULL)"
            ),
            "54000",
            "\"body\"",
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.deliveries"),
            Ok(Some(0))
        );
        // Just under the limit is fine.
        let status = Spi::get_one::<String>(
            "SELECT status FROM webhook_claim('p', 'small', 't', jsonb_build_object('pad', repeat('x', 900)), NULL)",
        );
        assert_eq!(status, Ok(Some("claimed".into())));
    }

    #[pg_test]
    fn limits_are_inclusive() {
        let id = "x".repeat(255);
        let status = Spi::get_one_with_args::<String>(
            "SELECT status FROM webhook_claim('p', $1, 't', '{}'::jsonb, NULL)",
            &[id.as_str().into()],
        );
        assert_eq!(status, Ok(Some("claimed".into())));
    }

    #[pg_test]
    fn delivery_ids_are_distinct_time_ordered_version_7() {
        // More ids than one draw from the random source serves.
        assert_eq!(
            Spi::get_one::<String>(
                "WITH ids AS (
                     SELECT i, c.id
                       FROM generate_series(1, 1500) i,
                            LATERAL webhook_claim('stripe', 'evt_id_' || i, 't', '{}'::jsonb, NULL,
                                                  complete_on_commit => true) c)
                 SELECT count(DISTINCT id) || ' ' || bool_and(substr(id::text, 15, 1) = '7')
                        || ' ' || bool_and(substr(id::text, 20, 1) IN ('8', '9', 'a', 'b'))
                        || ' ' || (SELECT count(*) FROM (SELECT id, lag(id) OVER (ORDER BY i) AS prev FROM ids) o
                                    WHERE substr(o.id::text, 1, 13) < substr(o.prev::text, 1, 13))
                   FROM ids"
            ),
            Ok(Some("1500 true true 0".into()))
        );
        // What tells a delivery's id from an inbox lease's.
        let (delivery, ..) = crate::in_db_tests::claim("stripe", "evt_id_kind", None);
        assert!(crate::uuid::may_be_delivery(&delivery));
        let lease = Spi::get_one::<pgrx::Uuid>("SELECT gen_random_uuid()")
            .unwrap()
            .unwrap();
        assert!(!crate::uuid::may_be_delivery(&lease));
    }

    /// The registry is read once per backend for a provider, registered or
    /// not, until it changes: a claim looks up its provider's ordering
    /// without querying the registry on every call.
    #[pg_test]
    fn the_registry_is_not_read_on_every_call() {
        // Heap and index scans of the registry's table, in this transaction.
        let scans = || {
            Spi::get_one::<i64>(
                "SELECT sum(pg_stat_get_xact_numscans(c.oid))::bigint
                   FROM pg_class c
                  WHERE c.oid = 'webhook.providers'::regclass
                     OR c.oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'webhook.providers'::regclass)",
            )
            .unwrap()
            .unwrap_or(0)
        };
        let call = |sql: &str| Spi::run(sql).unwrap();
        call("SELECT webhook_claim('nobody', 'warm', 't', '{}'::jsonb, NULL)");
        let before = scans();
        for i in 0..10 {
            call(&format!(
                "SELECT webhook_claim('nobody', 'e{i}', 't', '{{}}'::jsonb, NULL)"
            ));
        }
        assert_eq!(scans() - before, 0, "scans of webhook.providers by claims");
    }
}

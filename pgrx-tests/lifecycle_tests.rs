//! webhook_complete, webhook_fail and webhook_extend: each transition they
//! allow and each one they refuse.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, claim, run, text_of};
    use pgrx::prelude::*;

    fn state(id: pgrx::Uuid) -> String {
        text_of(
            "SELECT e.status || '/' || d.processing_status
               FROM webhook.deliveries d
               JOIN webhook.events e USING (provider, event_id)
              WHERE d.id = $1",
            id,
        )
        .unwrap()
    }

    #[pg_test]
    fn complete_marks_event_and_delivery() {
        let (id, ..) = claim("stripe", "evt_c", None);
        run("SELECT webhook_complete($1)", id);
        assert_eq!(state(id), "processed/PROCESSED");
        assert_eq!(
            text_of(
                "SELECT (processed_at IS NOT NULL AND lease_expires_at IS NULL)::text
                   FROM webhook.events WHERE claim_id = $1",
                id
            ),
            Some("true".into())
        );
    }

    #[pg_test]
    fn fail_releases_the_event_with_its_error() {
        let (id, ..) = claim("stripe", "evt_f", None);
        run("SELECT webhook_fail($1, 'card declined')", id);
        assert_eq!(state(id), "failed/FAILED");
        assert_eq!(
            text_of(
                "SELECT error_message FROM webhook.deliveries WHERE id = $1",
                id
            ),
            Some("card declined".into())
        );
    }

    #[pg_test]
    fn a_retry_completes_after_a_failure() {
        let (first, ..) = claim("stripe", "evt_rf", None);
        run("SELECT webhook_fail($1, 'transient')", first);
        let (second, claimed, status, _) = claim("stripe", "evt_rf", None);
        assert!(claimed && status == "retry");
        run("SELECT webhook_complete($1)", second);
        assert_eq!(state(second), "processed/PROCESSED");
        assert_eq!(
            text_of(
                "SELECT processing_status FROM webhook.deliveries WHERE id = $1",
                first
            ),
            Some("FAILED".into())
        );
    }

    #[pg_test]
    fn an_expired_lease_not_taken_over_may_still_complete() {
        let (id, ..) = claim("stripe", "evt_slow", Some("1 millisecond"));
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        run("SELECT webhook_complete($1)", id);
        assert_eq!(state(id), "processed/PROCESSED");
    }

    #[pg_test]
    fn extend_renews_a_live_lease() {
        let (id, ..) = claim("stripe", "evt_ext", Some("1 second"));
        let secs = Spi::get_one_with_args::<f64>(
            "SELECT extract(epoch FROM webhook_extend($1, '10 minutes') - clock_timestamp())::float8",
            &[id.into()],
        )
        .unwrap()
        .unwrap();
        assert!((590.0..=600.0).contains(&secs), "extended by {secs} s");
        // The other deliveries keep seeing it in progress.
        let (_, _, status, _) = claim("stripe", "evt_ext", None);
        assert_eq!(status, "in_progress");
    }

    #[pg_test]
    fn the_stale_owner_is_refused_everything() {
        let (stale, ..) = claim("stripe", "evt_stale", Some("1 millisecond"));
        Spi::run("SELECT pg_sleep(0.02)").unwrap();
        let (current, _, status, _) = claim("stripe", "evt_stale", None);
        assert_eq!(status, "retry");
        let id = stale.to_string();
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "55006",
            "lost its lease",
        );
        assert_error(
            &format!("SELECT webhook_fail('{id}', 'late')"),
            "55006",
            "lost its lease",
        );
        assert_error(
            &format!("SELECT webhook_extend('{id}', '1 minute')"),
            "55006",
            "lost its lease",
        );
        // The current owner is untouched and can finish.
        run("SELECT webhook_complete($1)", current);
        assert_eq!(state(current), "processed/PROCESSED");
    }

    #[pg_test]
    fn finished_deliveries_cannot_be_finished_again() {
        let (done, ..) = claim("stripe", "evt_done", None);
        run("SELECT webhook_complete($1)", done);
        let id = done.to_string();
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "55000",
            "already PROCESSED",
        );
        assert_error(
            &format!("SELECT webhook_fail('{id}', 'x')"),
            "55000",
            "already PROCESSED",
        );
        assert_error(
            &format!("SELECT webhook_extend('{id}', '1 minute')"),
            "55000",
            "already PROCESSED",
        );

        let (failed, ..) = claim("stripe", "evt_failed_once", None);
        run("SELECT webhook_fail($1, 'x')", failed);
        let id = failed.to_string();
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "55000",
            "already FAILED",
        );
        assert_error(
            &format!("SELECT webhook_fail('{id}', 'y')"),
            "55000",
            "already FAILED",
        );
    }

    #[pg_test]
    fn deliveries_that_did_not_claim_cannot_finish() {
        let (owner, ..) = claim("stripe", "evt_owned", Some("1 hour"));
        let (in_progress, ..) = claim("stripe", "evt_owned", None);
        let id = in_progress.to_string();
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "42501",
            "\"in_progress\"",
        );
        assert_error(
            &format!("SELECT webhook_fail('{id}', 'x')"),
            "42501",
            "\"in_progress\"",
        );
        assert_error(
            &format!("SELECT webhook_extend('{id}', '1 minute')"),
            "42501",
            "\"in_progress\"",
        );

        run("SELECT webhook_complete($1)", owner);
        let (duplicate, ..) = claim("stripe", "evt_owned", None);
        let id = duplicate.to_string();
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "42501",
            "\"duplicate\"",
        );
    }

    #[pg_test]
    fn finishing_refuses_bad_arguments_with_their_own_sqlstate() {
        let (id, ..) = claim("stripe", "evt_args", None);
        let id = id.to_string();
        let unknown = "00000000-0000-4000-8000-000000000000";
        let cases = [
            (
                "SELECT webhook_complete(NULL)".to_string(),
                "22004",
                "\"id\"",
            ),
            (
                "SELECT webhook_fail(NULL, 'x')".to_string(),
                "22004",
                "\"id\"",
            ),
            (
                format!("SELECT webhook_fail('{id}', NULL)"),
                "22004",
                "\"err\"",
            ),
            (
                "SELECT webhook_extend(NULL, '1 minute')".to_string(),
                "22004",
                "\"id\"",
            ),
            (
                format!("SELECT webhook_extend('{id}', NULL)"),
                "22004",
                "\"lease\"",
            ),
            (
                format!("SELECT webhook_extend('{id}', '0 seconds')"),
                "22023",
                "\"lease\"",
            ),
            (
                format!("SELECT webhook_extend('{id}', '-1 minute')"),
                "22023",
                "\"lease\"",
            ),
            (
                format!("SELECT webhook_complete('{unknown}')"),
                "P0002",
                "no delivery",
            ),
            (
                format!("SELECT webhook_fail('{unknown}', 'x')"),
                "P0002",
                "no delivery",
            ),
            (
                format!("SELECT webhook_extend('{unknown}', '1 minute')"),
                "P0002",
                "no delivery",
            ),
        ];
        for (sql, sqlstate, needle) in &cases {
            assert_error(sql, sqlstate, needle);
        }
        // The claim is untouched by all of that.
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status::text FROM webhook.events WHERE event_id = 'evt_args'"
            ),
            Ok(Some("processing".into()))
        );
    }
}

//! Claims that complete on commit, inside the transaction that made them:
//! what they write, what finishing them does there, and the arguments
//! they refuse. Their commits and rollbacks are tested over real
//! connections in `tests/complete_on_commit.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, run, text_of};
    use pgrx::prelude::*;

    /// A claim that completes on commit: (id, claimed, status, attempts).
    fn claim_on_commit(event_id: &str) -> (pgrx::Uuid, bool, String, i32) {
        Spi::connect_mut(|client| {
            let rows = client.update(
                "SELECT id, claimed, status, attempts
                   FROM webhook_claim('stripe', $1, 'test.event', '{\"k\": 1}'::jsonb, 'sig',
                                      complete_on_commit => true)",
                None,
                &[event_id.into()],
            )?;
            let row = rows.first();
            Ok::<_, pgrx::spi::Error>((
                row.get::<pgrx::Uuid>(1)?.unwrap(),
                row.get::<bool>(2)?.unwrap(),
                row.get::<String>(3)?.unwrap(),
                row.get::<i32>(4)?.unwrap(),
            ))
        })
        .expect("webhook_claim returns one row")
    }

    #[pg_test]
    fn the_claim_writes_its_event_processed_and_owns_it() {
        let (id, claimed, status, attempts) = claim_on_commit("evt_cc_new");
        assert_eq!((claimed, status.as_str(), attempts), (true, "claimed", 1));
        assert_eq!(
            text_of(
                "SELECT status || '/' || (claim_id = $1) || '/' || (lease_expires_at IS NULL)
                        || '/' || (processed_at IS NOT NULL)
                   FROM webhook.events WHERE event_id = 'evt_cc_new'",
                id
            ),
            Some("processed/true/true/true".into())
        );
        assert_eq!(
            text_of(
                "SELECT claim_status || '/' || processing_status FROM webhook.deliveries WHERE id = $1",
                id
            ),
            Some("claimed/PROCESSED".into())
        );
        // The default is unchanged: a claim without it leaves the event
        // processing until webhook_complete.
        let (_, _, status, _) = crate::in_db_tests::claim("stripe", "evt_cc_default", None);
        assert_eq!(status, "claimed");
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status::text FROM webhook.events WHERE event_id = 'evt_cc_default'"
            ),
            Ok(Some("processing".into()))
        );
    }

    #[pg_test]
    fn webhook_complete_in_its_transaction_stores_the_result_once() {
        let (id, ..) = claim_on_commit("evt_cc_result");
        run("SELECT webhook_complete($1, '{\"order\": 42}')", id);
        assert_eq!(
            text_of(
                "SELECT status || ' ' || result::text FROM webhook.events WHERE claim_id = $1",
                id
            ),
            Some(r#"processed {"order": 42}"#.into())
        );
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "55000",
            "is already PROCESSED",
        );
        // A later delivery is a duplicate answered with the result.
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status || ' ' || result::text
                   FROM webhook_claim('stripe', 'evt_cc_result', 't', '{}'::jsonb, NULL)"
            ),
            Ok(Some(r#"duplicate {"order": 42}"#.into()))
        );
    }

    #[pg_test]
    fn webhook_fail_after_the_work_rolled_back_releases_the_event() {
        // The work runs in a subtransaction that fails (a savepoint taken
        // after the claim); the failure is then recorded.
        Spi::run(
            "DO $$
             DECLARE c record;
             BEGIN
                 SELECT * INTO c FROM webhook_claim('stripe', 'evt_cc_fail', 't', '{}'::jsonb, NULL,
                                                    complete_on_commit => true);
                 BEGIN
                     RAISE EXCEPTION 'card declined';
                 EXCEPTION WHEN raise_exception THEN
                     PERFORM webhook_fail(c.id, SQLERRM);
                 END;
             END
             $$",
        )
        .unwrap();
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status || ' ' || last_error || ' ' || (processed_at IS NULL)
                   FROM webhook.events WHERE event_id = 'evt_cc_fail'"
            ),
            Ok(Some("failed card declined true".into()))
        );
        let (_, claimed, status, attempts) = claim_on_commit("evt_cc_fail");
        assert_eq!((claimed, status.as_str(), attempts), (true, "retry", 2));
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status::text FROM webhook.events WHERE event_id = 'evt_cc_fail'"
            ),
            Ok(Some("processed".into()))
        );
    }

    #[pg_test]
    fn a_claim_rolled_back_to_a_savepoint_cannot_be_finished() {
        Spi::run(
            "CREATE FUNCTION pg_temp.undone_claim() RETURNS uuid LANGUAGE plpgsql AS $$
             DECLARE claimed uuid;
             BEGIN
                 BEGIN
                     SELECT id INTO claimed
                       FROM webhook_claim('stripe', 'evt_cc_undone', 't', '{}'::jsonb, NULL,
                                          complete_on_commit => true);
                     RAISE EXCEPTION 'undo';
                 EXCEPTION WHEN raise_exception THEN
                     RETURN claimed;
                 END;
             END
             $$",
        )
        .unwrap();
        let id = Spi::get_one::<pgrx::Uuid>("SELECT pg_temp.undone_claim()")
            .unwrap()
            .unwrap();
        assert_eq!(
            Spi::get_one::<i64>(
                "SELECT count(*) FROM webhook.events WHERE event_id = 'evt_cc_undone'"
            ),
            Ok(Some(0))
        );
        assert_error(
            &format!("SELECT webhook_complete('{id}')"),
            "P0002",
            "no delivery",
        );
        assert_error(
            &format!("SELECT webhook_fail('{id}', 'x')"),
            "P0002",
            "no delivery",
        );
        // The event is free for its next delivery.
        let (_, claimed, status, _) = claim_on_commit("evt_cc_undone");
        assert_eq!((claimed, status.as_str()), (true, "claimed"));
    }

    #[pg_test]
    fn there_is_no_lease_to_give_or_extend() {
        let (id, ..) = claim_on_commit("evt_cc_lease");
        assert_error(
            &format!("SELECT webhook_extend('{id}', '1 minute')"),
            "55000",
            "completes on commit and holds no lease",
        );
        assert_error(
            "SELECT * FROM webhook_claim('stripe', 'evt_cc_both', 't', '{}'::jsonb, NULL,
                                         lease => '1 minute', complete_on_commit => true)",
            "22023",
            "argument \"lease\" must be NULL when complete_on_commit is true",
        );
        assert_error(
            "SELECT * FROM webhook_claim('stripe', 'evt_cc_null', 't', '{}'::jsonb, NULL,
                                         complete_on_commit => NULL)",
            "22004",
            "\"complete_on_commit\"",
        );
        // Nothing was written for the refused calls.
        assert_eq!(
            Spi::get_one::<i64>(
                "SELECT count(*) FROM webhook.delivery_log WHERE event_id IN ('evt_cc_both', 'evt_cc_null')"
            ),
            Ok(Some(0))
        );
    }

    #[pg_test]
    fn webhook_receive_takes_the_same_choice() {
        crate::in_db_tests::register_test_providers();
        let body = r#"{"action":"opened"}"#;
        let headers = crate::in_db_tests::github_headers("gh-cc-1", "push", body, "gh-secret");
        let answer = Spi::get_one::<String>(&format!(
            "SELECT r.status || '/' || r.http_status || '/' || r.reason
               FROM webhook_receive('github', {headers}, convert_to('{body}', 'UTF8'),
                                    complete_on_commit => true) r"
        ));
        assert_eq!(answer, Ok(Some("claimed/200/ok".into())));
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT status::text FROM webhook.events WHERE event_id = 'gh-cc-1'"
            ),
            Ok(Some("processed".into()))
        );
    }

    #[pg_test]
    fn results_are_one_composite_row() {
        for (function, ty) in [
            ("webhook_claim", "webhook.claim_result"),
            ("webhook_receive", "webhook.receive_result"),
            ("webhook_enqueue", "webhook.enqueue_result"),
            ("idempotency_begin", "webhook.idempotency_begin_result"),
        ] {
            let shapes = Spi::get_one_with_args::<String>(
                "SELECT string_agg(DISTINCT prorettype::regtype::text || '/' || proretset, ',')
                   FROM pg_proc WHERE proname = $1",
                &[function.into()],
            );
            assert_eq!(shapes, Ok(Some(format!("{ty}/false"))), "{function}");
        }
        let queued = Spi::get_two::<bool, String>(
            "SELECT queued, status FROM webhook_enqueue('stripe', 'evt_composite', 't', '{}'::jsonb)",
        );
        assert_eq!(queued, Ok((Some(true), Some("queued".into()))));
        let again = Spi::get_two::<bool, String>(
            "SELECT (r).queued, (r).status
               FROM (SELECT webhook_enqueue('stripe', 'evt_composite', 't', '{}'::bytea) AS r) AS x",
        );
        assert_eq!(again, Ok((Some(false), Some("duplicate".into()))));
    }
}

//! Idempotency keys: outbound keys derived from events, and the keys of
//! the application's own API through every answer and transition. Takeovers
//! across sessions and concurrent requests are tested in `tests/`.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, claim};
    use pgrx::prelude::*;

    fn text(sql: &str) -> String {
        Spi::get_one::<String>(sql).unwrap().unwrap_or_default()
    }

    /// (outcome, request_id, http_status, recovery_point, recovery, response_body)
    fn begin(
        key: &str,
        fingerprint: &str,
    ) -> (
        String,
        Option<pgrx::Uuid>,
        Option<i32>,
        Option<String>,
        Option<String>,
        Option<String>,
    ) {
        Spi::connect_mut(|client| {
            let row = client
                .update(
                    "SELECT outcome, request_id, http_status, recovery_point, recovery::text, response_body
                       FROM idempotency_begin('tenant-1', $1, $2)",
                    None,
                    &[key.into(), fingerprint.into()],
                )?
                .first();
            Ok::<_, pgrx::spi::Error>((
                row.get::<String>(1)?.unwrap(),
                row.get::<pgrx::Uuid>(2)?,
                row.get::<i32>(3)?,
                row.get::<String>(4)?,
                row.get::<String>(5)?,
                row.get::<String>(6)?,
            ))
        })
        .unwrap()
    }

    fn run(sql: &str, request_id: pgrx::Uuid) {
        Spi::run_with_args(sql, &[request_id.into()]).unwrap();
    }

    /// Let the key's lease run out, as if its request crashed.
    fn expire_lease(key: &str) {
        Spi::run_with_args(
            "UPDATE webhook.idempotency_keys SET locked_until = clock_timestamp() - interval '1 second'
              WHERE key = $1",
            &[key.into()],
        )
        .unwrap();
    }

    #[pg_test]
    fn a_finished_key_replays_its_response_and_refuses_another_request() {
        let (outcome, id, status, point, recovery, _) = begin("k1", "fp-a");
        assert_eq!(
            (outcome.as_str(), status, point, recovery),
            ("new", None, None, None)
        );
        let id = id.unwrap();
        // While it runs, the same key is in progress; with another request, a mismatch.
        assert_eq!(begin("k1", "fp-a").0, "in_progress");
        assert_eq!(begin("k1", "fp-a").2, Some(409));
        assert_eq!(begin("k1", "fp-b").0, "mismatch");
        assert_eq!(begin("k1", "fp-b").2, Some(422));

        run(
            "SELECT idempotency_finish($1, 201, '{\"order\": 7}', '{\"Location\": \"/orders/7\"}')",
            id,
        );
        let (outcome, none, status, _, _, body) = begin("k1", "fp-a");
        assert_eq!(
            (outcome.as_str(), none, status, body.as_deref()),
            ("replay", None, Some(201), Some("{\"order\": 7}"))
        );
        assert_eq!(
            text("SELECT response_headers::text FROM idempotency_begin('tenant-1', 'k1', 'fp-a')"),
            "{\"Location\": \"/orders/7\"}"
        );
        assert_eq!(begin("k1", "fp-b").0, "mismatch");
        // Scopes keep clients apart: the same key elsewhere is new.
        assert_eq!(
            text("SELECT outcome FROM idempotency_begin('tenant-2', 'k1', 'fp-b')"),
            "new"
        );
        // A finished request cannot be finished, failed or advanced again.
        let sql = format!("SELECT idempotency_finish('{id}', 200)");
        assert_error(&sql, "55000", "already finished");
        let sql = format!("SELECT idempotency_checkpoint('{id}', 'late')");
        assert_error(&sql, "55000", "already finished");
        let sql = format!("SELECT idempotency_fail('{id}', 'late')");
        assert_error(&sql, "55000", "already finished");
    }

    #[pg_test]
    fn a_crashed_request_is_taken_over_and_resumes_from_its_last_step() {
        let first = begin("k2", "fp").1.unwrap();
        run(
            "SELECT idempotency_checkpoint($1, 'created_order', '{\"order_id\": 42}')",
            first,
        );
        // A retry while the lease runs: in progress.
        assert_eq!(begin("k2", "fp").0, "in_progress");
        expire_lease("k2");
        let (outcome, second, _, point, recovery, _) = begin("k2", "fp");
        assert_eq!(outcome, "new");
        assert_eq!(point.as_deref(), Some("created_order"));
        assert_eq!(
            recovery.as_deref(),
            Some("{\"created_order\": {\"order_id\": 42}}")
        );
        let second = second.unwrap();
        assert_ne!(second, first);
        assert_eq!(
            text("SELECT attempts::text FROM webhook.idempotency_keys WHERE key = 'k2'"),
            "2"
        );
        // The crashed attempt, should it wake up, is fenced off.
        let sql = format!("SELECT idempotency_checkpoint('{first}', 'charged_card')");
        assert_error(&sql, "55006", "lost its lease to another request");
        let sql = format!("SELECT idempotency_finish('{first}', 201)");
        assert_error(&sql, "55006", "lost its lease to another request");

        run(
            "SELECT idempotency_checkpoint($1, 'charged_card', '{\"charge\": \"ch_1\"}')",
            second,
        );
        assert_eq!(
            text("SELECT recovery_point || ' ' || recovery::text FROM webhook.idempotency_keys WHERE key = 'k2'"),
            "charged_card {\"charged_card\": {\"charge\": \"ch_1\"}, \"created_order\": {\"order_id\": 42}}"
        );
        // A recovery point renews the lease.
        assert_eq!(
            text(
                "SELECT (locked_until > clock_timestamp() + interval '50 seconds')::text
                   FROM webhook.idempotency_keys WHERE key = 'k2'"
            ),
            "true"
        );
        run("SELECT idempotency_finish($1, 201, 'done')", second);
        assert_eq!(begin("k2", "fp").0, "replay");
    }

    #[pg_test]
    fn a_retryable_failure_frees_the_key_and_a_final_one_is_replayed() {
        let id = begin("k3", "fp").1.unwrap();
        run("SELECT idempotency_checkpoint($1, 'reserved_stock')", id);
        run("SELECT idempotency_fail($1, 'payment API timed out')", id);
        assert_eq!(
            text("SELECT status || ': ' || last_error FROM webhook.idempotency_keys WHERE key = 'k3'"),
            "retryable: payment API timed out"
        );
        let (outcome, again, _, point, _, _) = begin("k3", "fp");
        assert_eq!(
            (outcome.as_str(), point.as_deref()),
            ("new", Some("reserved_stock"))
        );
        let again = again.unwrap();
        let sql = format!("SELECT idempotency_fail('{id}', 'stale attempt')");
        assert_error(&sql, "55006", "lost its lease to another request");

        run(
            "SELECT idempotency_fail($1, 'card declined', retryable => false,
                    response_status => 402, response_body => '{\"error\": \"card_declined\"}')",
            again,
        );
        let (outcome, _, status, _, _, body) = begin("k3", "fp");
        assert_eq!(
            (outcome.as_str(), status, body.as_deref()),
            ("replay", Some(402), Some("{\"error\": \"card_declined\"}"))
        );
        assert_error(
            "SELECT idempotency_fail(request_id, 'x', retryable => false)
               FROM idempotency_begin('tenant-1', 'k3b', 'fp')",
            "22004",
            "\"response_status\" must not be NULL",
        );
    }

    #[pg_test]
    fn keys_expire_after_the_retention_but_never_while_in_progress() {
        let done = begin("old-done", "fp").1.unwrap();
        run("SELECT idempotency_finish($1, 200, 'first')", done);
        begin("old-running", "fp");
        begin("old-crashed", "fp");
        expire_lease("old-crashed");
        let recent = begin("recent", "fp").1.unwrap();
        run("SELECT idempotency_finish($1, 200)", recent);
        Spi::run(
            "UPDATE webhook.idempotency_keys SET created_at = now() - interval '2 days'
              WHERE key LIKE 'old-%'",
        )
        .unwrap();

        // Past the retention a finished key means nothing: the same key
        // with another request starts anew, from nothing.
        assert_eq!(
            text("SELECT outcome FROM idempotency_begin('tenant-1', 'old-done', 'another')"),
            "new"
        );
        Spi::run(
            "UPDATE webhook.idempotency_keys SET created_at = now() - interval '2 days', status = 'finished'
              WHERE key = 'old-done'",
        )
        .unwrap();
        assert_eq!(
            Spi::get_one::<i64>("SELECT idempotency_purge()").unwrap(),
            Some(2)
        );
        assert_eq!(
            text("SELECT string_agg(key, ',' ORDER BY key) FROM webhook.idempotency_keys"),
            "old-running,recent"
        );
        Spi::run("UPDATE webhook.idempotency_keys SET created_at = now() - interval '1 hour' WHERE key = 'recent'")
            .unwrap();
        assert_eq!(
            Spi::get_one::<i64>("SELECT idempotency_purge(interval '30 minutes')").unwrap(),
            Some(1)
        );
        assert_eq!(
            text("SELECT string_agg(key, ',') FROM webhook.idempotency_keys"),
            "old-running"
        );
        assert_error(
            "SELECT idempotency_purge(interval '0')",
            "22023",
            "\"older_than\"",
        );
    }

    #[pg_test]
    fn bad_arguments_are_refused_with_their_own_sqlstate() {
        assert_error(
            "SELECT * FROM idempotency_begin(NULL, 'k', 'f')",
            "22004",
            "argument \"scope\"",
        );
        assert_error(
            "SELECT * FROM idempotency_begin('s', '', 'f')",
            "2200F",
            "argument \"key\"",
        );
        assert_error(
            "SELECT * FROM idempotency_begin('s', repeat('k', 256), 'f')",
            "22001",
            "argument \"key\"",
        );
        assert_error(
            "SELECT * FROM idempotency_begin('s', 'k', NULL)",
            "22004",
            "argument \"fingerprint\"",
        );
        assert_error(
            "SELECT * FROM idempotency_begin('s', 'k', 'f', interval '-1 second')",
            "22023",
            "argument \"lease\"",
        );
        assert_error(
            "SELECT * FROM idempotency_begin('s', 'k', 'f', interval '2 days')",
            "22023",
            "webhook.max_lease",
        );
        assert_error(
            "SELECT idempotency_finish(request_id, 99) FROM idempotency_begin('s', 'k', 'f')",
            "22023",
            "argument \"response_status\"",
        );
        assert_error(
            "SELECT idempotency_finish(request_id, 200, 'x', '[1]') FROM idempotency_begin('s', 'k', 'f')",
            "2203C",
            "argument \"response_headers\"",
        );
        Spi::run("SET webhook.idempotency_max_response = '1kB'").unwrap();
        assert_error(
            "SELECT idempotency_finish(request_id, 200, repeat('x', 2000)) FROM idempotency_begin('s', 'k', 'f')",
            "22001",
            "argument \"response_body\"",
        );
        assert_error(
            "SELECT idempotency_checkpoint(NULL, 'step')",
            "22004",
            "argument \"request_id\"",
        );
        assert_error(
            "SELECT idempotency_checkpoint(gen_random_uuid(), 'step')",
            "55006",
            "lost its lease to another request",
        );
        assert_error(
            "SELECT idempotency_fail(request_id, 'x', response_status => 500)
               FROM idempotency_begin('s', 'k2', 'f')",
            "22023",
            "retryable",
        );
        // Nothing half-written: the refusals left no key behind but the
        // ones whose begin succeeded inside a failed statement.
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.idempotency_keys").unwrap(),
            Some(0)
        );
    }

    #[pg_test]
    fn fingerprints_depend_on_method_path_and_body() {
        assert_eq!(
            text("SELECT idempotency_fingerprint('POST', '/orders', '{\"sku\": 1}'::text)"),
            text("SELECT idempotency_fingerprint('post', '/orders', convert_to('{\"sku\": 1}', 'UTF8'))")
        );
        assert_ne!(
            text("SELECT idempotency_fingerprint('POST', '/orders', '{\"sku\": 1}'::text)"),
            text("SELECT idempotency_fingerprint('POST', '/orders', '{\"sku\": 2}'::text)")
        );
        assert!(text("SELECT idempotency_fingerprint('GET', '/orders')").starts_with("sha256:"));
        assert_error(
            "SELECT idempotency_fingerprint(NULL, '/orders')",
            "22004",
            "argument \"method\"",
        );
    }

    #[pg_test]
    fn an_outbound_key_is_the_same_for_every_attempt_of_an_event() {
        let by_event = text("SELECT webhook_outbound_key('stripe', 'evt_out', 'charge')");
        assert!(by_event.starts_with("whk_") && by_event.len() == 68);
        // The claim, a retry's claim and a duplicate's delivery all give the
        // event's key.
        let (first, ..) = claim("stripe", "evt_out", Some("1 second"));
        Spi::run_with_args("SELECT webhook_fail($1, 'boom')", &[first.into()]).unwrap();
        let (retry, _, status, _) = claim("stripe", "evt_out", None);
        assert_eq!(status, "retry");
        for id in [first, retry] {
            let key = Spi::get_one_with_args::<String>(
                "SELECT webhook_outbound_key($1, 'charge')",
                &[id.into()],
            )
            .unwrap()
            .unwrap();
            assert_eq!(key, by_event);
        }
        // Another operation, another event: another key.
        assert_ne!(
            by_event,
            text("SELECT webhook_outbound_key('stripe', 'evt_out', 'refund')")
        );
        assert_ne!(
            by_event,
            text("SELECT webhook_outbound_key('stripe', 'evt_other', 'charge')")
        );
        // An inbox lease names its event too.
        Spi::run("SELECT webhook_enqueue('paddle', 'evt_q', 'sub.created', '{}'::jsonb)").unwrap();
        assert_eq!(
            text("SELECT webhook_outbound_key(id, 'email') FROM webhook_next(1, provider => 'paddle')"),
            text("SELECT webhook_outbound_key('paddle', 'evt_q', 'email')")
        );
        assert_error(
            "SELECT webhook_outbound_key(gen_random_uuid(), 'charge')",
            "P0002",
            "no delivery",
        );
        assert_error(
            "SELECT webhook_outbound_key('stripe', 'evt_out', '')",
            "2200F",
            "argument \"operation\"",
        );
    }

    /// Every checkpoint rewrites all of the request's recovery points, so
    /// together they are bounded (256 kB as stored): past it a checkpoint
    /// is refused, naming its output, and nothing of it is written.
    #[pg_test]
    fn recovery_points_together_are_bounded() {
        let (_, id, ..) = begin("k-many-steps", "fp");
        let id = id.unwrap();
        let mut refused_at = None;
        for step in 1..=20 {
            let sql = format!(
                "SELECT idempotency_checkpoint('{id}', 'step-{step}',
                     jsonb_build_object('blob', (SELECT string_agg(md5(random()::text || g), '')
                                                   FROM generate_series(1, 1875) g)))"
            );
            let error =
                Spi::get_one_with_args::<String>("SELECT error_of($1)", &[sql.as_str().into()])
                    .expect("error_of runs");
            if let Some(error) = error {
                refused_at = Some((step, error));
                break;
            }
        }
        let (step, error) = refused_at.expect("a checkpoint past the bound is refused");
        assert!(step > 2, "refused at step {step}");
        assert!(error.starts_with("22001: "), "{error}");
        assert!(error.contains("\"output\""), "{error}");
        let kept = Spi::get_one::<i64>(
            "SELECT count(*) FROM webhook.idempotency_keys k, jsonb_object_keys(k.recovery)
              WHERE key = 'k-many-steps'",
        )
        .unwrap()
        .unwrap();
        assert_eq!(
            kept,
            i64::from(step - 1),
            "the refused checkpoint wrote nothing"
        );
    }
}

//! Ordering: the registry's entity key and order value, stale and tied
//! answers, watermarks that move forward only (rollbacks included), the
//! inbox's stale parking and per-entity FIFO, and the operator's reset.
//! Shuffled concurrent deliveries and crashes are tested over real
//! connections in `tests/ordering.rs` and `tests/hardening_inbox_crashes.rs`.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, receive, run};
    use pgrx::prelude::*;

    const SECRET: &str = "whsec_ordering_test";

    /// The SQL of Stripe headers signing `body` now.
    fn stripe_headers(body: &str) -> String {
        crate::in_db_tests::stripe_headers(body, SECRET, 0)
    }

    /// A Stripe event about `entity`, created at `created`.
    fn event(id: &str, entity: &str, created: i64) -> String {
        format!(
            r#"{{"id": "{id}", "type": "customer.subscription.updated", "created": {created}, "data": {{"object": {{"id": "{entity}"}}}}}}"#
        )
    }

    /// Deliver a Stripe event: (status, http_status, reason).
    fn deliver(id: &str, entity: &str, created: i64) -> (String, i32, String) {
        let body = event(id, entity, created);
        receive("stripe", &stripe_headers(&body), &body)
    }

    /// Complete the claim that owns `event_id`.
    fn complete(event_id: &str) {
        Spi::run_with_args(
            "SELECT webhook_complete(claim_id) FROM webhook.events WHERE event_id = $1",
            &[event_id.into()],
        )
        .unwrap();
    }

    fn watermark(entity: &str) -> Option<String> {
        Spi::get_one_with_args::<String>(
            "SELECT (SELECT order_value::text || '/' || event_id FROM webhook.watermarks WHERE entity_key = $1)",
            &[entity.into()],
        )
        .unwrap()
    }

    fn ordered_stripe(extra: &str) {
        Spi::run(&format!(
            "SELECT webhook_register_provider('stripe', secret => '{SECRET}', ordering => true{extra})"
        ))
        .unwrap();
    }

    fn one_text(sql: &str) -> String {
        Spi::get_one::<String>(sql).unwrap().unwrap_or_default()
    }

    #[pg_test]
    fn presets_come_from_the_scheme_catalog_and_ordering_is_off_by_default() {
        Spi::run("SELECT webhook_register_provider('stripe', secret => 's')").unwrap();
        assert_eq!(
            one_text("SELECT coalesce(entity_key_from, 'none') FROM webhook.providers"),
            "none"
        );
        ordered_stripe("");
        assert_eq!(
            one_text("SELECT entity_key_from || ' ' || order_from || ' ' || ties || ' ' || fifo FROM webhook.providers WHERE name = 'stripe'"),
            "body:data.object.id body:created process false"
        );
        Spi::run("SELECT webhook_register_provider('paddle', secret => 's', ordering => true)")
            .unwrap();
        assert_eq!(
            one_text("SELECT entity_key_from || ' ' || order_from FROM webhook.providers WHERE name = 'paddle'"),
            "body:data.id body:occurred_at"
        );
        // Turning it off clears both paths and FIFO.
        Spi::run("SELECT webhook_register_provider('stripe', fifo => true)").unwrap();
        Spi::run("SELECT webhook_register_provider('stripe', ordering => false)").unwrap();
        assert_eq!(
            one_text("SELECT coalesce(entity_key_from, 'none') || ' ' || fifo FROM webhook.providers WHERE name = 'stripe'"),
            "none false"
        );
    }

    #[pg_test]
    fn a_bad_ordering_registration_names_its_argument() {
        // GitHub's entity depends on the event: the DBA names it.
        assert_error(
            "SELECT webhook_register_provider('github', secret => 's', ordering => true)",
            "22004",
            "argument \"entity_key_from\"",
        );
        Spi::run(
            "SELECT webhook_register_provider('github', secret => 's', ordering => true,
                                              entity_key_from => 'body:issue.node_id')",
        )
        .unwrap();
        assert_eq!(
            one_text("SELECT order_from FROM webhook.providers WHERE name = 'github'"),
            "body:pull_request.updated_at|body:issue.updated_at"
        );
        // Unsigned headers can never be ordering sources.
        for (args, arg) in [
            (
                "entity_key_from => 'header:X-Entity', order_from => 'body:created'",
                "entity_key_from",
            ),
            (
                "entity_key_from => 'body:id', order_from => 'body:created|header:X-Order'",
                "order_from",
            ),
            ("ordering => true, ties => 'sometimes'", "ties"),
            ("fifo => true", "fifo"),
        ] {
            assert_error(
                &format!("SELECT webhook_register_provider('stripe', secret => 's', {args})"),
                "23514",
                &format!("argument \"{arg}\""),
            );
        }
        assert_error(
            "SELECT webhook_register_provider('stripe', secret => 's', entity_key_from => 'body:id')",
            "22004",
            "argument \"order_from\"",
        );
        assert_error(
            "SELECT webhook_register_provider('stripe', secret => 's', ordering => false, order_from => 'body:created')",
            "22023",
            "argument \"ordering\"",
        );
    }

    #[pg_test]
    fn an_older_event_is_answered_stale_and_archived_as_skipped_with_its_reason() {
        ordered_stripe("");
        assert_eq!(
            deliver("evt_new", "sub_1", 200),
            ("claimed".into(), 200, "ok".into())
        );
        complete("evt_new");
        assert_eq!(watermark("sub_1").as_deref(), Some("200/evt_new"));

        assert_eq!(
            deliver("evt_old", "sub_1", 100),
            ("stale".into(), 200, "older".into())
        );
        assert_eq!(
            one_text(
                "SELECT processing_status || ': ' || error_message FROM webhook.deliveries WHERE event_id = 'evt_old'"
            ),
            "SKIPPED: stale: order 100 of entity sub_1 is older than its watermark 200 (event evt_new)"
        );
        assert_eq!(
            one_text("SELECT status::text FROM webhook.events WHERE event_id = 'evt_old'"),
            "stale"
        );
        // Its redelivery is a duplicate of a finished event; the watermark
        // did not move; another entity is not affected.
        assert_eq!(deliver("evt_old", "sub_1", 100).0, "duplicate");
        assert_eq!(watermark("sub_1").as_deref(), Some("200/evt_new"));
        assert_eq!(
            deliver("evt_other", "sub_2", 50),
            ("claimed".into(), 200, "ok".into())
        );
        assert_eq!(
            one_text("SELECT stale::text FROM webhook.provider_stats"),
            "1"
        );
    }

    #[pg_test]
    fn a_failed_event_overtaken_by_a_newer_one_is_skipped_on_its_retry() {
        ordered_stripe("");
        deliver("evt_old", "sub_1", 100);
        Spi::run(
            "SELECT webhook_fail(claim_id, 'downstream down') FROM webhook.events WHERE event_id = 'evt_old'",
        )
        .unwrap();
        deliver("evt_new", "sub_1", 200);
        complete("evt_new");
        assert_eq!(
            deliver("evt_old", "sub_1", 100),
            ("stale".into(), 200, "older".into())
        );
        assert_eq!(
            one_text("SELECT status::text || ' ' || attempts FROM webhook.events WHERE event_id = 'evt_old'"),
            "stale 1"
        );
    }

    #[pg_test]
    fn ties_are_processed_or_stale_as_the_provider_says() {
        ordered_stripe("");
        deliver("evt_a", "sub_1", 100);
        complete("evt_a");
        assert_eq!(
            deliver("evt_b", "sub_1", 100),
            ("claimed".into(), 200, "tie".into())
        );
        complete("evt_b");
        // The watermark stays with the event that set it.
        assert_eq!(watermark("sub_1").as_deref(), Some("100/evt_a"));

        ordered_stripe(", ties => 'stale'");
        assert_eq!(
            deliver("evt_c", "sub_1", 100),
            ("stale".into(), 200, "tie".into())
        );
        assert!(
            one_text("SELECT error_message FROM webhook.deliveries WHERE event_id = 'evt_c'")
                .contains("is tied with its watermark 100")
        );
        assert_eq!(
            deliver("evt_d", "sub_1", 101),
            ("claimed".into(), 200, "ok".into())
        );
    }

    #[pg_test]
    fn an_event_without_its_key_or_with_an_unreadable_order_is_processed_unordered() {
        ordered_stripe("");
        let body = r#"{"id": "evt_inv", "type": "invoice.paid", "created": 5}"#;
        assert_eq!(
            receive("stripe", &stripe_headers(body), body),
            ("claimed".into(), 200, "unordered".into())
        );
        let body = r#"{"id": "evt_odd", "type": "x", "created": "soon", "data": {"object": {"id": "sub_1"}}}"#;
        assert_eq!(
            receive("stripe", &stripe_headers(body), body),
            ("claimed".into(), 200, "unordered".into())
        );
        complete("evt_inv");
        complete("evt_odd");
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.watermarks")
                .unwrap()
                .unwrap(),
            0
        );
    }

    #[pg_test]
    fn a_completion_overtaken_by_a_newer_event_is_refused_and_moves_nothing() {
        ordered_stripe("");
        deliver("evt_300", "sub_1", 300);
        deliver("evt_250", "sub_1", 250);
        complete("evt_300");
        assert_error(
            "SELECT webhook_complete(claim_id) FROM webhook.events WHERE event_id = 'evt_250'",
            "40001",
            "is stale",
        );
        assert_eq!(watermark("sub_1").as_deref(), Some("300/evt_300"));
    }

    #[pg_test]
    fn a_two_phase_claim_refused_at_completion_is_skipped_once_its_lease_runs_out() {
        ordered_stripe("");
        // Claimed with a short lease, as a two-phase handler would, and
        // overtaken before it completes: its completion is refused.
        let body = event("evt_slow", "sub_1", 100);
        Spi::run(&format!(
            "SELECT * FROM webhook_receive('stripe', {}, convert_to('{body}', 'UTF8'), lease => '10 milliseconds')",
            stripe_headers(&body)
        ))
        .unwrap();
        deliver("evt_fast", "sub_1", 200);
        complete("evt_fast");
        assert_error(
            "SELECT webhook_complete(claim_id) FROM webhook.events WHERE event_id = 'evt_slow'",
            "40001",
            "is stale",
        );
        Spi::run("SELECT pg_sleep(0.05)").unwrap();
        // The provider's next delivery finds the lease run out: skipped,
        // and the lost attempt recorded.
        assert_eq!(
            deliver("evt_slow", "sub_1", 100),
            ("stale".into(), 200, "older".into())
        );
        assert_eq!(
            one_text(
                "SELECT string_agg(processing_status, ',' ORDER BY created_at) FROM webhook.deliveries WHERE event_id = 'evt_slow'"
            ),
            "FAILED,SKIPPED"
        );
    }

    #[pg_test]
    fn a_rolled_back_completion_leaves_the_watermark_where_it_was() {
        ordered_stripe("");
        deliver("evt_1", "sub_1", 100);
        complete("evt_1");
        deliver("evt_2", "sub_1", 200);
        // The completion of evt_2 runs, then its transaction (here a
        // subtransaction) fails afterwards.
        Spi::run(
            "DO $$ BEGIN
                 PERFORM webhook_complete(claim_id) FROM webhook.events WHERE event_id = 'evt_2';
                 RAISE EXCEPTION 'the handler failed after completing';
             EXCEPTION WHEN raise_exception THEN
             END $$",
        )
        .unwrap();
        assert_eq!(watermark("sub_1").as_deref(), Some("100/evt_1"));
        assert_eq!(
            one_text("SELECT status::text FROM webhook.events WHERE event_id = 'evt_2'"),
            "processing"
        );
        // An older event after that is still fresh against 100.
        assert_eq!(deliver("evt_150", "sub_1", 150).0, "claimed");
    }

    #[pg_test]
    fn timestamps_and_numbers_compare_as_the_times_they_mean() {
        Spi::run(&format!(
            "SELECT webhook_register_provider('stripe', secret => '{SECRET}',
                 entity_key_from => 'body:data.object.id', order_from => 'body:at')"
        ))
        .unwrap();
        let deliver_at = |id: &str, at: &str| {
            let body = format!(
                r#"{{"id": "{id}", "type": "t", "at": {at}, "data": {{"object": {{"id": "sub_t"}}}}}}"#
            );
            receive("stripe", &stripe_headers(&body), &body)
        };
        assert_eq!(
            deliver_at("e1", r#""2023-11-14T23:13:20.5+01:00""#).0,
            "claimed"
        );
        complete("e1");
        assert_eq!(watermark("sub_t").as_deref(), Some("1700000000.5/e1"));
        assert_eq!(deliver_at("e2", "1700000000").2, "older");
        assert_eq!(deliver_at("e3", r#""1700000000.5""#).2, "tie");
        assert_eq!(deliver_at("e4", r#""2023-11-14T22:13:21Z""#).2, "ok");
    }

    /// Lease one event: (lease, event id).
    fn next() -> Option<(pgrx::Uuid, String)> {
        Spi::connect_mut(|c| {
            let rows = c.update("SELECT id, event_id FROM webhook_next(10)", None, &[])?;
            if rows.is_empty() {
                return Ok::<_, pgrx::spi::Error>(None);
            }
            let row = rows.first();
            Ok(Some((
                row.get::<pgrx::Uuid>(1)?.unwrap(),
                row.get::<String>(2)?.unwrap(),
            )))
        })
        .unwrap()
    }

    #[pg_test]
    fn the_inbox_leases_each_entity_in_order_one_at_a_time_with_fifo() {
        ordered_stripe(", inbox => true, fifo => true");
        for (id, created) in [("q3", 3), ("q1", 1), ("q2", 2)] {
            assert_eq!(deliver(id, "sub_q", created).0, "queued");
        }
        deliver("r1", "sub_r", 7);
        // One per entity: the earliest of each line.
        let leased = lease_ten();
        let names: Vec<&str> = leased.iter().map(|(_, e)| e.as_str()).collect();
        assert_eq!(names, ["q1", "r1"]);
        assert_eq!(next(), None, "q2 waits for q1");
        assert_eq!(
            one_text("SELECT entity_key || ' ' || head_event_id || ' ' || reason || ' ' || waiting FROM webhook.blocked_entities"),
            "sub_q q1 leased 2"
        );
        // A failure backs off, and the line waits for it.
        run(
            "SELECT webhook_fail($1, 'downstream down', retry_in => '1 hour')",
            leased[0].0,
        );
        assert_eq!(next(), None, "q2 waits while q1 backs off");
        assert_eq!(
            one_text("SELECT reason FROM webhook.blocked_entities"),
            "backing_off"
        );
        run(
            "UPDATE webhook.inbox SET run_at = now() - interval '1 second' WHERE claim_id = $1",
            leased[0].0,
        );
        let (again, id) = next().unwrap();
        assert_eq!(id, "q1");
        run("SELECT webhook_complete($1)", again);
        let (lease, id) = next().unwrap();
        assert_eq!(id, "q2");
        run("SELECT webhook_complete($1)", lease);
        assert_eq!(next().unwrap().1, "q3");
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.blocked_entities")
                .unwrap()
                .unwrap(),
            0
        );
    }

    /// One `webhook_next(10)`: (lease, event id) in event id order.
    fn lease_ten() -> Vec<(pgrx::Uuid, String)> {
        Spi::connect_mut(|c| {
            let rows = c.update(
                "SELECT id, event_id FROM webhook_next(10) ORDER BY event_id",
                None,
                &[],
            )?;
            rows.map(|row| {
                Ok((
                    row.get::<pgrx::Uuid>(1)?.unwrap(),
                    row.get::<String>(2)?.unwrap(),
                ))
            })
            .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        })
        .unwrap()
    }

    #[pg_test]
    fn a_fifo_line_passed_over_is_leased_when_its_turn_comes_however_far_others_went() {
        // Picks start where the backend's last one did (past the entries
        // its leases left behind), except in a FIFO queue: an event passed
        // over there, not its line's head yet, is older than what later
        // picks take, and is found when its line lets it through.
        ordered_stripe(", inbox => true, fifo => true");
        deliver("q1", "sub_q", 1);
        deliver("q2", "sub_q", 2);
        for n in 1..=25 {
            deliver(&format!("r{n:02}"), &format!("sub_r{n}"), 10 + n);
        }
        let first = lease_ten();
        let names: Vec<&str> = first.iter().map(|(_, e)| e.as_str()).collect();
        assert_eq!(names[0], "q1");
        assert!(!names.contains(&"q2"), "{names:?}");
        for (lease, _) in &first[1..] {
            run("SELECT webhook_complete($1)", *lease);
        }
        let second = lease_ten();
        assert_eq!(second.len(), 10);
        assert!(second.iter().all(|(_, e)| e.starts_with('r')), "{second:?}");
        for (lease, _) in second.iter().chain(&first[..1]) {
            run("SELECT webhook_complete($1)", *lease);
        }
        let third = lease_ten();
        assert!(third.iter().any(|(_, e)| e == "q2"), "{third:?}");
    }

    /// webhook_claim and webhook_enqueue order a registered provider's
    /// events too, reading the entity key and order value from the payload
    /// they are given (their caller verified it), as webhook_receive reads
    /// them from the body.
    #[pg_test]
    fn a_payload_dated_centuries_ahead_cannot_pin_a_watermark() {
        ordered_stripe("");
        let now = Spi::get_one::<i64>("SELECT extract(epoch FROM now())::bigint")
            .unwrap()
            .unwrap();
        let claim = |id: &str, created: i64| {
            one_text(&format!(
                "SELECT status::text || ' ' || id FROM webhook_claim('stripe', '{id}', 'customer.subscription.updated',
                     '{}'::jsonb, NULL)",
                event(id, "sub_far", created)
            ))
        };
        // 2286 in seconds, then in milliseconds: each taken unordered.
        for (n, far) in [9_999_999_999_i64, 9_999_999_999_999]
            .into_iter()
            .enumerate()
        {
            let forged = claim(&format!("far{n}"), far);
            assert!(forged.starts_with("claimed "), "{forged}");
            let id = forged.split(' ').nth(1).unwrap();
            Spi::run(&format!("SELECT webhook_complete('{id}')")).unwrap();
        }
        assert_eq!(
            Spi::get_one::<i64>(
                "SELECT count(*) FROM webhook.watermarks WHERE entity_key = 'sub_far'"
            )
            .unwrap(),
            Some(0),
            "no watermark moved"
        );
        // The genuine events that follow are ordered as ever.
        let genuine = claim("near2", now);
        assert!(genuine.starts_with("claimed "), "{genuine}");
        let id = genuine.split(' ').nth(1).unwrap();
        Spi::run(&format!("SELECT webhook_complete('{id}')")).unwrap();
        assert!(claim("near1", now - 60).starts_with("stale"));
        // Within the allowance (a provider's clock a little ahead): ordered.
        let ahead = claim("near3", now + 3600);
        assert!(ahead.starts_with("claimed "), "{ahead}");
        // The allowance is the DBA's.
        Spi::run("SET LOCAL webhook.order_max_future = 0").unwrap();
        let id = ahead.split(' ').nth(1).unwrap();
        Spi::run(&format!("SELECT webhook_complete('{id}')")).unwrap();
        assert!(claim("near4", now + 3600).starts_with("claimed "));
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT order_value::text FROM webhook.watermarks WHERE entity_key = 'sub_far'"
            )
            .unwrap(),
            Some((now + 3600).to_string()),
            "near3 moved it; near4, past the clock with no allowance, did not"
        );
    }

    #[pg_test]
    fn claims_and_enqueues_of_an_ordered_provider_are_ordered_too() {
        ordered_stripe("");
        let claim = |id: &str, created: i64| {
            one_text(&format!(
                "SELECT status::text || ' ' || id FROM webhook_claim('stripe', '{id}', 'customer.subscription.updated',
                     '{}'::jsonb, NULL)",
                event(id, "sub_c", created)
            ))
        };
        let newer = claim("c2", 2);
        assert!(newer.starts_with("claimed "), "{newer}");
        let id = newer.split(' ').nth(1).unwrap();
        Spi::run(&format!("SELECT webhook_complete('{id}')")).unwrap();
        assert!(
            claim("c1", 1).starts_with("stale"),
            "the older claim is stale"
        );
        // An event without the entity key is claimed unordered.
        assert!(one_text(
            "SELECT status::text FROM webhook_claim('stripe', 'c-none', 't', '{\"id\": \"c-none\"}'::jsonb, NULL)"
        )
        .starts_with("claimed"));

        // Queued through webhook_enqueue with FIFO: the older one waits
        // behind the newer one's lease, then is parked as stale.
        ordered_stripe(", inbox => true, fifo => true");
        let enqueue = |id: &str, created: i64| {
            one_text(&format!(
                "SELECT status::text FROM webhook_enqueue('stripe', '{id}', 'customer.subscription.updated',
                     '{}'::jsonb)",
                event(id, "sub_e", created)
            ))
        };
        assert_eq!(enqueue("e2", 2), "queued");
        let (lease, id) = next().unwrap();
        assert_eq!(id, "e2");
        assert_eq!(enqueue("e1", 1), "queued");
        assert_eq!(next(), None, "e1 waits while e2 is leased");
        run("SELECT webhook_complete($1)", lease);
        assert_eq!(next(), None);
        assert_eq!(
            one_text("SELECT status::text FROM webhook.inbox WHERE event_id = 'e1'"),
            "stale"
        );
    }

    /// "Never two at a time" whatever the arrival order: an older event
    /// that arrives while a newer one of its entity is leased waits for
    /// it, and is then parked as stale (the newer one moved the
    /// watermark); an event of another entity is leased meanwhile.
    #[pg_test]
    fn an_older_event_arriving_while_a_newer_one_is_leased_waits_for_it() {
        ordered_stripe(", inbox => true, fifo => true");
        assert_eq!(deliver("late2", "sub_late", 2).0, "queued");
        let (lease, id) = next().unwrap();
        assert_eq!(id, "late2");
        assert_eq!(deliver("late1", "sub_late", 1).0, "queued");
        assert_eq!(deliver("other1", "sub_other", 1).0, "queued");
        let (other, id) = next().unwrap();
        assert_eq!(id, "other1", "another entity's line is not held up");
        assert_eq!(next(), None, "late1 waits while late2 is leased");
        run("SELECT webhook_complete($1)", lease);
        run("SELECT webhook_complete($1)", other);
        assert_eq!(next(), None, "late1 is older than the watermark");
        assert_eq!(
            one_text("SELECT status::text FROM webhook.inbox WHERE event_id = 'late1'"),
            "stale"
        );
        // The provider's figures are where its consumers stand.
        assert_eq!(deliver("late3", "sub_late", 3).0, "queued");
        assert_eq!(
            one_text(
                "SELECT concat_ws(' ', events, processed, stale, queued, dead) FROM webhook.provider_stats"
            ),
            "4 2 1 1 0"
        );
    }

    #[pg_test]
    fn the_inbox_parks_an_event_its_consumer_has_seen_newer_than() {
        ordered_stripe(", inbox => true");
        deliver("n2", "sub_n", 2);
        let (lease, id) = next().unwrap();
        assert_eq!(id, "n2");
        run("SELECT webhook_complete($1)", lease);
        deliver("n1", "sub_n", 1);
        assert_eq!(next(), None, "the older event is not handed out");
        assert_eq!(
            one_text("SELECT status::text || ': ' || last_error FROM webhook.inbox WHERE event_id = 'n1'"),
            "stale: stale: order 1 of entity sub_n is older than its watermark 2 (event n2)"
        );
        assert_eq!(
            one_text("SELECT processing_status FROM webhook.deliveries WHERE event_id = 'n1'"),
            "SKIPPED"
        );
        // Without FIFO two events of an entity may be leased at once; the
        // older one's completion is then refused.
        deliver("n5", "sub_n", 5);
        deliver("n4", "sub_n", 4);
        let leases: Vec<pgrx::Uuid> = Spi::connect_mut(|c| {
            let rows = c.update(
                "SELECT id FROM webhook_next(10) ORDER BY event_id DESC",
                None,
                &[],
            )?;
            rows.map(|row| Ok(row.get::<pgrx::Uuid>(1)?.unwrap()))
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        })
        .unwrap();
        assert_eq!(leases.len(), 2);
        run("SELECT webhook_complete($1)", leases[0]);
        assert_error(
            &format!("SELECT webhook_complete('{}')", leases[1]),
            "40001",
            "is stale",
        );
        // The refused lease stays leased until it runs out; then it is
        // parked, not handed out again, and the lost lease is recorded.
        run(
            "UPDATE webhook.inbox SET run_at = now() - interval '1 second' WHERE claim_id = $1",
            leases[1],
        );
        assert_eq!(next(), None);
        assert_eq!(
            one_text("SELECT status::text FROM webhook.inbox WHERE event_id = 'n4'"),
            "stale"
        );
        assert_eq!(
            Spi::get_one_with_args::<String>(
                "SELECT error_message FROM webhook.inbox_failures WHERE claim_id = $1",
                &[leases[1].into()],
            )
            .unwrap()
            .as_deref(),
            Some("lease expired")
        );
    }

    #[pg_test]
    fn a_worker_is_handed_the_event_behind_a_line_of_stale_ones_in_one_call() {
        ordered_stripe(", inbox => true, fifo => true");
        deliver("l10", "sub_l", 10);
        let (lease, _) = next().unwrap();
        run("SELECT webhook_complete($1)", lease);
        for (id, created) in [("l1", 1), ("l2", 2), ("l3", 3), ("l11", 11)] {
            deliver(id, "sub_l", created);
        }
        // One call parks the three stale heads of the line, one per
        // round, and leases the fresh event behind them.
        let leased = Spi::get_one::<String>("SELECT event_id FROM webhook_next(1)")
            .unwrap()
            .unwrap();
        assert_eq!(leased, "l11");
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook.inbox WHERE status = 'stale'")
                .unwrap()
                .unwrap(),
            3
        );
    }

    #[pg_test]
    fn consumers_keep_watermarks_of_their_own() {
        ordered_stripe(", inbox => true, consumers => '{billing,analytics}'");
        deliver("c2", "sub_c", 2);
        let billing = Spi::get_one::<pgrx::Uuid>("SELECT id FROM webhook_next(1, 'billing')")
            .unwrap()
            .unwrap();
        run("SELECT webhook_complete($1)", billing);
        deliver("c1", "sub_c", 1);
        // analytics has processed nothing of sub_c: both are fresh to it.
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook_next(10, 'analytics')")
                .unwrap()
                .unwrap(),
            2
        );
        assert_eq!(
            Spi::get_one::<i64>("SELECT count(*) FROM webhook_next(10, 'billing')")
                .unwrap()
                .unwrap(),
            0
        );
        assert_eq!(
            one_text("SELECT status::text FROM webhook.inbox WHERE event_id = 'c1' AND consumer = 'billing'"),
            "stale"
        );
    }

    #[pg_test]
    fn an_operator_resets_a_watermark() {
        ordered_stripe("");
        deliver("w2", "sub_w", 2);
        complete("w2");
        assert_eq!(
            Spi::get_one::<i64>("SELECT webhook_reset_watermark('stripe', 'sub_w')")
                .unwrap()
                .unwrap(),
            1
        );
        assert_eq!(watermark("sub_w"), None);
        assert_eq!(deliver("w1", "sub_w", 1).0, "claimed");
        assert_error(
            "SELECT webhook_reset_watermark('stripe', NULL)",
            "22004",
            "argument \"entity_key\"",
        );
    }

    #[pg_test]
    fn a_claim_that_completes_on_commit_moves_the_watermark_itself() {
        ordered_stripe("");
        let deliver_on_commit = |id: &str, created: i64| {
            let body = event(id, "sub_cc", created);
            Spi::get_one::<String>(&format!(
                "SELECT r.status || '/' || r.reason
                   FROM webhook_receive('stripe', {}, convert_to('{body}', 'UTF8'),
                                        complete_on_commit => true) r",
                stripe_headers(&body)
            ))
            .unwrap()
            .unwrap()
        };
        assert_eq!(deliver_on_commit("evt_cc_2", 200), "claimed/ok");
        assert_eq!(watermark("sub_cc"), Some("200/evt_cc_2".into()));
        // An older event is stale at once: nothing completed it by hand.
        assert_eq!(deliver_on_commit("evt_cc_1", 100), "stale/older");
        assert_eq!(watermark("sub_cc"), Some("200/evt_cc_2".into()));
        // Its result, stored in the same transaction, moves nothing again.
        complete("evt_cc_2");
        assert_eq!(deliver_on_commit("evt_cc_3", 300), "claimed/ok");
        assert_eq!(watermark("sub_cc"), Some("300/evt_cc_3".into()));
    }
}

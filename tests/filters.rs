//! Filters on signed fields, over real connections: several providers at
//! once (an inbox with two consumers, a claimed one, one unfiltered); a
//! delivery a filter does not take is verified, answered 2xx, archived as
//! filtered with the reason, kept in dedup, never handed to a worker, and
//! replayable; its redeliveries stay filtered; a filter set or removed
//! reaches connections already open; a filter never reads what the
//! signature does not cover, for every scheme in the catalog, and a
//! provider registered again onto an unsigned source is not filtered on
//! it; bad arguments and the application role are refused.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{github, now, standard, stripe};
use common::*;
use postgres::Client;

const DB: &str = "pgwi_filters";
const STRIPE_SECRET: &str = "whsec_filters_stripe";
const GITHUB_SECRET: &str = "filters-github";
const STANDARD_SECRET: &str = "whsec_ZmlsdGVycy1zdGFuZGFyZC1rZXktMDEyMzQ1Njc=";

struct Answer {
    status: String,
    claimed: bool,
    http: i32,
    reason: String,
}

/// A handler: receive; do the work (complete) if it is ours; commit.
fn handle(app: &mut Client, provider: &str, headers: &serde_json::Value, body: &str) -> Answer {
    let mut tx = app.transaction().unwrap();
    let row = receive(&mut tx, provider, headers, body.as_bytes()).unwrap();
    let answer = Answer {
        status: row.get("status"),
        claimed: row.get("claimed"),
        http: row.get("http_status"),
        reason: row.get("reason"),
    };
    if answer.claimed {
        let id: String = row.get("id_text");
        tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
    }
    tx.commit().unwrap();
    answer
}

fn stripe_event(id: &str, kind: &str, amount: i32) -> String {
    format!(r#"{{"id":"{id}","type":"{kind}","data":{{"object":{{"amount_paid":{amount}}}}}}}"#)
}

fn deliver_stripe(app: &mut Client, provider: &str, body: &str) -> Answer {
    handle(app, provider, &stripe(body, now(), STRIPE_SECRET), body)
}

/// The events a consumer's worker is handed, completed, in order.
fn work(client: &mut Client, provider: &str, consumer: &str) -> Vec<(String, Option<String>)> {
    let mut tx = client.transaction().unwrap();
    let rows = tx
        .query(
            "SELECT id::text, event_id, replay_id::text FROM webhook_next(100, $1, $2)",
            &[&consumer, &provider],
        )
        .unwrap();
    let mut handed = Vec::new();
    for row in rows {
        let id: String = row.get(0);
        tx.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
        handed.push((row.get(1), row.get(2)));
    }
    tx.commit().unwrap();
    handed.sort();
    handed
}

fn inbox_rows(
    client: &mut Client,
    provider: &str,
    event_id: &str,
) -> Vec<(String, String, Option<String>)> {
    client
        .query(
            "SELECT consumer, status::text, last_error FROM webhook.inbox
              WHERE provider = $1 AND event_id = $2 ORDER BY consumer",
            &[&provider, &event_id],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

fn app_role(admin: &mut Client, db: &str) -> Client {
    let _setup = one_at_a_time();
    ensure_role(admin, "filters_app", true);
    admin
        .batch_execute("SELECT webhook_grant_app('filters_app')")
        .unwrap();
    connect_as(db, "filters_app")
}

#[test]
fn a_delivery_no_filter_takes_is_answered_archived_kept_and_replayable_but_never_processed() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('fl_stripe', scheme => 'stripe', secret => '{STRIPE_SECRET}',
                                              inbox => true, consumers => '{{billing,analytics}}');
             SELECT webhook_register_provider('fl_github', scheme => 'github', secret => '{GITHUB_SECRET}',
                                              inbox => false);
             SELECT webhook_register_provider('fl_clerk', scheme => 'standard', secret => '{STANDARD_SECRET}',
                                              inbox => true);"
        ))
        .unwrap();
    let mut app = app_role(&mut admin, db);

    // Before any filter: every event is taken. The connection now holds
    // the registry in its cache; the filters set next must reach it.
    let first = deliver_stripe(
        &mut app,
        "fl_stripe",
        &stripe_event("evt_before", "charge.refunded", 10),
    );
    assert_eq!((first.status.as_str(), first.http), ("queued", 200));

    admin
        .batch_execute(
            "SELECT webhook_set_filter('fl_stripe', event_types => '{invoice.paid,invoice.voided}');
             SELECT webhook_set_filter('fl_stripe', consumer => 'analytics',
                                       payload_path => '$.data.object.amount_paid > 100');
             SELECT webhook_set_filter('fl_github', payload_path => '$.action == \"opened\"');",
        )
        .unwrap();

    // Stripe, inbox mode: a type the provider does not take.
    let refund = stripe_event("evt_refund", "charge.refunded", 900);
    let answer = deliver_stripe(&mut app, "fl_stripe", &refund);
    assert_eq!(
        (
            answer.status.as_str(),
            answer.claimed,
            answer.http,
            answer.reason.as_str()
        ),
        ("filtered", false, 200, "filtered")
    );
    let reason = "event type charge.refunded is not among the filter's event_types";
    assert_eq!(
        inbox_rows(&mut admin, "fl_stripe", "evt_refund"),
        vec![
            ("analytics".into(), "filtered".into(), Some(reason.into())),
            ("billing".into(), "filtered".into(), Some(reason.into())),
        ]
    );
    let archived = admin
        .query_one(
            "SELECT claim_status::text, processing_status, error_message FROM webhook.deliveries
              WHERE provider = 'fl_stripe' AND event_id = 'evt_refund'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            archived.get::<_, String>(0),
            archived.get::<_, String>(1),
            archived.get::<_, String>(2)
        ),
        ("filtered".into(), "FILTERED".into(), reason.into())
    );
    // Its redelivery is a duplicate of it: still answered 2xx, still filtered.
    let again = deliver_stripe(&mut app, "fl_stripe", &refund);
    assert_eq!((again.status.as_str(), again.http), ("duplicate", 200));
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.inbox WHERE provider = 'fl_stripe' AND event_id = 'evt_refund'
                AND status = 'filtered'"
        ),
        2
    );

    // A type it takes: queued for billing; analytics takes only amounts
    // over 100, so its row is filtered with its own reason.
    let small = deliver_stripe(
        &mut app,
        "fl_stripe",
        &stripe_event("evt_small", "invoice.paid", 50),
    );
    assert_eq!(
        (small.status.as_str(), small.http, small.reason.as_str()),
        ("queued", 200, "ok")
    );
    assert_eq!(
        inbox_rows(&mut admin, "fl_stripe", "evt_small"),
        vec![
            (
                "analytics".into(),
                "filtered".into(),
                Some("the body does not match the filter's payload_path ($.\"data\".\"object\".\"amount_paid\" > 100)".into())
            ),
            ("billing".into(), "ready".into(), None),
        ]
    );
    let big = deliver_stripe(
        &mut app,
        "fl_stripe",
        &stripe_event("evt_big", "invoice.paid", 500),
    );
    assert_eq!(big.status, "queued");

    // GitHub, claimed in the handler's transaction: the body decides.
    let closed = r#"{"action":"closed","number":7}"#;
    let headers = github("gh-closed", "pull_request", closed, GITHUB_SECRET);
    let answer = handle(&mut app, "fl_github", &headers, closed);
    assert_eq!(
        (answer.status.as_str(), answer.claimed, answer.http),
        ("filtered", false, 200)
    );
    assert_eq!(
        event_state(&mut admin, "fl_github", "gh-closed").0,
        "filtered"
    );
    let again = handle(&mut app, "fl_github", &headers, closed);
    assert_eq!(
        (again.status.as_str(), again.claimed, again.http),
        ("duplicate", false, 200)
    );
    assert_eq!(
        event_state(&mut admin, "fl_github", "gh-closed").0,
        "filtered"
    );
    let opened = r#"{"action":"opened","number":8}"#;
    let answer = handle(
        &mut app,
        "fl_github",
        &github("gh-opened", "pull_request", opened, GITHUB_SECRET),
        opened,
    );
    assert_eq!((answer.status.as_str(), answer.claimed), ("claimed", true));

    // A provider without a filter is untouched.
    let clerk = r#"{"type":"user.deleted","data":{"id":"user_9"}}"#;
    let answer = handle(
        &mut app,
        "fl_clerk",
        &standard("msg_fl_1", clerk, now(), STANDARD_SECRET),
        clerk,
    );
    assert_eq!(answer.status, "queued");

    // Workers are handed what the filters take, nothing else.
    assert_eq!(
        work(&mut admin, "fl_stripe", "billing"),
        vec![
            ("evt_before".into(), None),
            ("evt_big".into(), None),
            ("evt_small".into(), None)
        ]
    );
    assert_eq!(
        work(&mut admin, "fl_stripe", "analytics"),
        vec![("evt_before".into(), None), ("evt_big".into(), None)]
    );
    assert_eq!(work(&mut admin, "fl_clerk", "default").len(), 1);
    let stats = admin
        .query_one(
            "SELECT processed, filtered, queued FROM webhook.provider_stats WHERE provider = 'fl_stripe'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            stats.get::<_, i64>(0),
            stats.get::<_, i64>(1),
            stats.get::<_, i64>(2)
        ),
        (3, 1, 0),
        "evt_small counts as processed: every consumer finished it"
    );

    // Replayed later: the filtered rows, once each, under a replay.
    let planned: i64 = admin
        .query_one(
            "SELECT events FROM webhook_replay('fl_stripe', statuses => '{filtered}')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(planned, 3);
    let replay: String = admin
        .query_one(
            "SELECT replay_id::text FROM webhook_replay('fl_stripe', statuses => '{filtered}',
                                                        reason => 'refunds matter after all', dry_run => false)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        work(&mut admin, "fl_stripe", "billing"),
        vec![("evt_refund".into(), Some(replay.clone()))]
    );
    assert_eq!(
        work(&mut admin, "fl_stripe", "analytics"),
        vec![
            ("evt_refund".into(), Some(replay.clone())),
            ("evt_small".into(), Some(replay.clone()))
        ]
    );

    // The filter removed: the next events are taken, reaching the open
    // connection at once; the filtered event's redelivery stays a duplicate.
    assert!(!admin
        .query_one("SELECT webhook_set_filter('fl_stripe')", &[])
        .unwrap()
        .get::<_, bool>(0));
    let after = deliver_stripe(
        &mut app,
        "fl_stripe",
        &stripe_event("evt_after", "charge.refunded", 10),
    );
    assert_eq!(after.status, "queued");
    assert_eq!(
        inbox_rows(&mut admin, "fl_stripe", "evt_after")
            .into_iter()
            .map(|(c, s, _)| (c, s))
            .collect::<Vec<_>>(),
        vec![
            ("analytics".into(), "filtered".into()),
            ("billing".into(), "ready".into())
        ],
        "the consumer's own filter stays"
    );
    let again = deliver_stripe(
        &mut app,
        "fl_stripe",
        &stripe_event("evt_refund", "charge.refunded", 900),
    );
    assert_eq!(again.status, "duplicate");
}

/// Which schemes sign the event type where their providers put it, and
/// which vouch for the body by a digest: written out here, not read from
/// the catalog, so that a catalog change that would let a filter read
/// unsigned material fails this test.
const TYPE_UNSIGNED: &[&str] = &[
    "github",
    "shopify",
    "paypal",
    "twilio",
    "mailgun",
    "woocommerce",
    "bitbucket",
    "lemonsqueezy",
    "gitlab",
    "token",
    "aws_sns",
    "adyen",
    "okta",
];
const BODY_UNVOUCHED: &[&str] = &[
    "paypal", "twilio", "mailgun", "gitlab", "token", "aws_sns", "adyen", "okta",
];

#[test]
fn a_filter_never_reads_what_the_signature_does_not_cover_for_any_scheme() {
    let db = database(DB);
    let mut admin = connect(db);
    let schemes: Vec<String> = admin
        .query("SELECT scheme FROM webhook_schemes() ORDER BY scheme", &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(schemes.len() >= 21, "{schemes:?}");
    for scheme in schemes.iter() {
        let provider = format!("fs_{}", scheme.replace('-', "_"));
        let registered = match scheme.as_str() {
            "paypal" => "paypal;webhook_id=WH-FILTERS".to_string(),
            "hmac" => "hmac;header=X-Signature".to_string(),
            "token" => "token;header=X-Token".to_string(),
            other => other.to_string(),
        };
        admin
            .execute(
                "SELECT webhook_register_provider($1, scheme => $2, inbox => true,
                     event_id_from => coalesce((SELECT s.event_id_from FROM webhook_schemes() s WHERE s.scheme = $3), 'body:id'),
                     event_type_from => coalesce((SELECT s.event_type_from FROM webhook_schemes() s WHERE s.scheme = $3), 'body:type'))",
                &[&provider, &registered, scheme],
            )
            .unwrap();
        let by_type = admin.execute(
            "SELECT webhook_set_filter($1, event_types => '{a.b}')",
            &[&provider],
        );
        match by_type {
            Ok(_) => assert!(
                !TYPE_UNSIGNED.contains(&scheme.as_str()),
                "{scheme}: filtered on an unsigned event type"
            ),
            Err(err) => {
                assert!(
                    TYPE_UNSIGNED.contains(&scheme.as_str()),
                    "{scheme}: {}",
                    message(&err)
                );
                assert_eq!(sql_state(&err), Some("22023"), "{scheme}");
                assert!(
                    message(&err).contains("argument \"event_types\""),
                    "{}",
                    message(&err)
                );
                assert!(message(&err).contains("does not sign"), "{}", message(&err));
            }
        }
        let by_body = admin.execute(
            "SELECT webhook_set_filter($1, payload_path => '$.a == 1')",
            &[&provider],
        );
        match by_body {
            Ok(_) => assert!(
                !BODY_UNVOUCHED.contains(&scheme.as_str()),
                "{scheme}: filtered on an unvouched body"
            ),
            Err(err) => {
                assert!(
                    BODY_UNVOUCHED.contains(&scheme.as_str()),
                    "{scheme}: {}",
                    message(&err)
                );
                assert_eq!(sql_state(&err), Some("22023"), "{scheme}");
                assert!(
                    message(&err).contains("argument \"payload_path\""),
                    "{}",
                    message(&err)
                );
            }
        }
    }
    // A filter naming a header the DBA chose: refused too.
    admin
        .batch_execute(
            "SELECT webhook_register_provider('fs_custom', scheme => 'stripe', secret => 'whsec_fs',
                                              event_type_from => 'header:X-Event-Type')",
        )
        .unwrap();
    let err = admin
        .execute(
            "SELECT webhook_set_filter('fs_custom', event_types => '{invoice.paid}')",
            &[],
        )
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("22023"));
    assert!(
        message(&err).contains("header:X-Event-Type"),
        "{}",
        message(&err)
    );
}

#[test]
fn a_provider_registered_again_onto_an_unsigned_source_is_not_filtered_on_it() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('fu_stripe', scheme => 'stripe', secret => '{STRIPE_SECRET}',
                                              inbox => true);
             SELECT webhook_set_filter('fu_stripe', event_types => '{{invoice.paid}}');"
        ))
        .unwrap();
    let mut app = app_role(&mut admin, db);
    let body = stripe_event("evt_fu_1", "invoice.paid", 1);
    assert_eq!(
        deliver_stripe(&mut app, "fu_stripe", &body).status,
        "queued"
    );

    // Registered again, the event type now read from a header the
    // signature does not cover: a sender could name any type there. The
    // filter is not applied on it; the event is taken.
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('fu_stripe', scheme => 'stripe', secret => '{STRIPE_SECRET}',
                                              inbox => true, event_type_from => 'header:X-Event-Type')"
        ))
        .unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.filters WHERE provider = 'fu_stripe'"
        ),
        1,
        "the filter outlives the registration"
    );
    let body = stripe_event("evt_fu_2", "invoice.paid", 1);
    let mut headers = stripe(&body, now(), STRIPE_SECRET);
    headers["X-Event-Type"] = "ignore.me".into();
    let answer = handle(&mut app, "fu_stripe", &headers, &body);
    assert_eq!(
        answer.status, "queued",
        "dropped on an unsigned header's word"
    );
    assert_eq!(
        inbox_rows(&mut admin, "fu_stripe", "evt_fu_2")[0].1,
        "ready".to_string()
    );
}

#[test]
fn filters_refuse_bad_arguments_with_their_own_sqlstates_and_only_operators_set_them() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(
            "SELECT webhook_register_provider('fe_stripe', scheme => 'stripe', secret => 'whsec_fe',
                                              inbox => true, consumers => '{billing}')",
        )
        .unwrap();
    for (call, state) in [
        ("webhook_set_filter(NULL, event_types => '{a}')", "22004"),
        ("webhook_set_filter('', event_types => '{a}')", "22023"),
        (
            "webhook_set_filter('fe_nobody', event_types => '{a}')",
            "42704",
        ),
        (
            "webhook_set_filter('fe_stripe', consumer => 'ledger', event_types => '{a}')",
            "22023",
        ),
        (
            "webhook_set_filter('fe_stripe', event_types => '{}')",
            "22023",
        ),
        (
            "webhook_set_filter('fe_stripe', event_types => '{NULL}')",
            "22023",
        ),
        (
            "webhook_set_filter('fe_stripe', event_types => '{\"\"}')",
            "22023",
        ),
    ] {
        let err = admin.batch_execute(&format!("SELECT {call}")).unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{call}: {}", message(&err));
        assert!(
            message(&err).contains("argument"),
            "{call}: {}",
            message(&err)
        );
    }
    let err = admin
        .batch_execute("SELECT webhook_set_filter('fe_stripe', payload_path => 'not a path')")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42601"), "{}", message(&err));
    // Set, replaced, removed; a consumer's apart from the provider's.
    for (call, in_place) in [
        (
            "webhook_set_filter('fe_stripe', event_types => '{a}')",
            true,
        ),
        (
            "webhook_set_filter('fe_stripe', consumer => 'billing', payload_path => '$.x == 1')",
            true,
        ),
        (
            "webhook_set_filter('fe_stripe', event_types => '{a,b}')",
            true,
        ),
        ("webhook_set_filter('fe_stripe')", false),
    ] {
        let got: bool = admin
            .query_one(&format!("SELECT {call}"), &[])
            .unwrap()
            .get(0);
        assert_eq!(got, in_place, "{call}");
    }
    assert_eq!(
        count(&mut admin, "SELECT count(*) FROM webhook.filters WHERE provider = 'fe_stripe' AND consumer = 'billing'"),
        1
    );
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.filters WHERE provider = 'fe_stripe' AND consumer = ''"
        ),
        0
    );

    let mut app = app_role(&mut admin, db);
    for call in [
        "SELECT webhook_set_filter('fe_stripe', event_types => '{a}')",
        "SELECT * FROM webhook.filters",
    ] {
        let err = app.batch_execute(call).unwrap_err();
        assert_eq!(sql_state(&err), Some("42501"), "{call}: {}", message(&err));
    }
    {
        let _setup = one_at_a_time();
        ensure_role(&mut admin, "filters_ops", true);
        admin
            .batch_execute("SELECT webhook_grant_operator('filters_ops')")
            .unwrap();
    }
    let mut ops = connect_as(db, "filters_ops");
    ops.batch_execute(
        "SELECT webhook_set_filter('fe_stripe', event_types => '{a}');
         SELECT count(*) FROM webhook.filters;
         SELECT webhook_source_signed('github', 'header:X-GitHub-Event')",
    )
    .unwrap();
}

#[test]
fn a_redelivery_racing_a_filtered_delivery_waits_for_it_and_a_rolled_back_one_leaves_nothing() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('fr_github', scheme => 'github', secret => '{GITHUB_SECRET}',
                                              inbox => false);
             SELECT webhook_set_filter('fr_github', payload_path => '$.action == \"opened\"');"
        ))
        .unwrap();
    let mut first = app_role(&mut admin, db);
    let mut second = connect_as(db, "filters_app");
    let body = r#"{"action":"labeled","number":1}"#;
    let headers = github("gh-race", "pull_request", body, GITHUB_SECRET);

    // Filtered in an open transaction: a redelivery meanwhile is told to
    // come back (409), never answered as done before the first commits.
    let mut tx = first.transaction().unwrap();
    let row = receive(&mut tx, "fr_github", &headers, body.as_bytes()).unwrap();
    assert_eq!(row.get::<_, String>("status"), "filtered");
    let racing = handle(&mut second, "fr_github", &headers, body);
    assert_eq!((racing.status.as_str(), racing.http), ("in_progress", 409));
    // Rolled back: nothing of it stays, and the next delivery is judged anew.
    tx.rollback().unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT count(*) FROM webhook.events WHERE provider = 'fr_github'"
        ),
        0
    );
    let answer = handle(&mut second, "fr_github", &headers, body);
    assert_eq!((answer.status.as_str(), answer.http), ("filtered", 200));
    let answer = handle(&mut first, "fr_github", &headers, body);
    assert_eq!((answer.status.as_str(), answer.http), ("duplicate", 200));
    assert_eq!(
        archive(&mut admin, "fr_github", "gh-race"),
        vec![
            "in_progress:SKIPPED".to_string(),
            "filtered:FILTERED".to_string(),
            "duplicate:SKIPPED".to_string()
        ]
    );
}

#[test]
fn a_filtered_inbox_delivery_rolled_back_leaves_nothing_and_its_redelivery_is_filtered_anew() {
    let db = database(DB);
    let mut admin = connect(db);
    admin
        .batch_execute(&format!(
            "SELECT webhook_register_provider('fb_stripe', scheme => 'stripe', secret => '{STRIPE_SECRET}',
                                              inbox => true, consumers => '{{billing,analytics}}');
             SELECT webhook_set_filter('fb_stripe', event_types => '{{invoice.paid}}');"
        ))
        .unwrap();
    let mut app = app_role(&mut admin, db);
    let body = stripe_event("evt_fb_1", "charge.refunded", 5);
    let headers = stripe(&body, now(), STRIPE_SECRET);

    // The handler fails after webhook_receive: its transaction rolls back.
    let mut tx = app.transaction().unwrap();
    let row = receive(&mut tx, "fb_stripe", &headers, body.as_bytes()).unwrap();
    assert_eq!(row.get::<_, String>("status"), "filtered");
    tx.rollback().unwrap();
    assert_eq!(
        count(
            &mut admin,
            "SELECT (SELECT count(*) FROM webhook.events WHERE provider = 'fb_stripe')
                  + (SELECT count(*) FROM webhook.inbox WHERE provider = 'fb_stripe')
                  + (SELECT count(*) FROM webhook.deliveries WHERE provider = 'fb_stripe')"
        ),
        0,
        "nothing of it stays"
    );

    // The provider's retry is judged anew: filtered, kept, never queued.
    let answer = handle(&mut app, "fb_stripe", &headers, &body);
    assert_eq!((answer.status.as_str(), answer.http), ("filtered", 200));
    assert_eq!(
        inbox_rows(&mut admin, "fb_stripe", "evt_fb_1")
            .into_iter()
            .map(|(c, s, _)| (c, s))
            .collect::<Vec<_>>(),
        vec![
            ("analytics".into(), "filtered".into()),
            ("billing".into(), "filtered".into())
        ]
    );
    assert!(work(&mut admin, "fb_stripe", "billing").is_empty());
}

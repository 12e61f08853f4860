//! Upgrades: every published release whose install script is kept in
//! `sql/`, installed from that script and filled the way its users filled
//! it, then `ALTER EXTENSION … UPDATE`. The upgraded catalog must equal a
//! fresh install's, and every row must still answer as before. And the
//! window between installing this library and running the update: a
//! database still on the last published release's SQL keeps answering
//! webhooks through this library.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{github, now, stripe};
use common::*;
use postgres::Client;
use std::collections::BTreeSet;

/// Published versions whose install script is kept in `sql/`.
fn earlier_releases() -> Vec<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/sql");
    let mut versions: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            let version = name
                .strip_prefix("pg_webhook_inbox--")?
                .strip_suffix(".sql")?;
            (!version.contains("--")).then(|| version.to_string())
        })
        .collect();
    versions.sort_by_key(|v| release(v));
    assert!(
        !versions.is_empty(),
        "no published install script kept in sql/"
    );
    versions
}

const STRIPE_SECRET: &str = "whsec_upgrade_test";
const GITHUB_SECRET: &str = "upgrade-test-github";

/// Everything about the extension's objects that an upgrade must get
/// right, one line each: functions with their signatures, attributes,
/// settings, bodies and privileges; tables, columns, defaults, storage,
/// constraints and indexes; views; enums; comments; what pg_dump keeps; the
/// initial privileges pg_dump compares against.
const CATALOG: &str = r#"
WITH members AS (
    SELECT d.classid, d.objid
      FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
     WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
       AND x.extname = 'pg_webhook_inbox'
), rels AS (
    SELECT c.* FROM pg_class c JOIN members m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid
), idx AS (
    SELECT i.* FROM pg_index i JOIN rels r ON r.oid = i.indrelid
)
SELECT 'function ' || p.oid::regprocedure || ' returns ' || coalesce(pg_get_function_result(p.oid), '(a procedure)')
       || ' secdef=' || p.prosecdef || ' volatile=' || p.provolatile::text || ' parallel=' || p.proparallel::text
       || ' strict=' || p.proisstrict || ' kind=' || p.prokind::text || ' lang=' || l.lanname
       || ' config=' || coalesce(array_to_string(p.proconfig, ';'), '')
       || ' args=' || pg_get_function_arguments(p.oid)
       || ' src=' || md5(p.prosrc) || ' bin=' || coalesce(p.probin, '')
       || ' acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), 'default')
       || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
  FROM pg_proc p JOIN members m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid
  JOIN pg_language l ON l.oid = p.prolang
UNION ALL
SELECT 'relation ' || r.oid::regclass || ' kind=' || r.relkind::text || ' options=' || coalesce(array_to_string(r.reloptions, ','), '')
       || ' acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(r.relacl) a), 'default')
       || ' comment=' || coalesce(obj_description(r.oid, 'pg_class'), '')
  FROM rels r
UNION ALL
SELECT 'column ' || r.oid::regclass || '.' || a.attnum || ' ' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
       || ' notnull=' || a.attnotnull || ' default=' || coalesce(pg_get_expr(d.adbin, d.adrelid), '')
       || ' storage=' || a.attstorage::text || ' compression=' || a.attcompression::text
       || ' comment=' || coalesce(col_description(r.oid, a.attnum), '')
  FROM rels r JOIN pg_attribute a ON a.attrelid = r.oid AND a.attnum > 0 AND NOT a.attisdropped
  LEFT JOIN pg_attrdef d ON d.adrelid = r.oid AND d.adnum = a.attnum
 WHERE r.relkind IN ('r', 'v', 'p')
UNION ALL
SELECT 'constraint ' || c.conrelid::regclass || ' ' || c.conname || ' ' || pg_get_constraintdef(c.oid)
  FROM pg_constraint c JOIN rels r ON r.oid = c.conrelid
UNION ALL
SELECT 'index ' || pg_get_indexdef(i.indexrelid) FROM idx i
UNION ALL
SELECT 'view ' || r.oid::regclass || ' ' || pg_get_viewdef(r.oid) FROM rels r WHERE r.relkind = 'v'
UNION ALL
SELECT 'type ' || t.oid::regtype || ' ' || coalesce((SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
                                                       FROM pg_enum e WHERE e.enumtypid = t.oid), '')
       || ' comment=' || coalesce(obj_description(t.oid, 'pg_type'), '')
  FROM pg_type t JOIN members m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid
UNION ALL
SELECT 'schema ' || n.nspname
       || ' acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(n.nspacl) a), 'default')
       || ' comment=' || coalesce(obj_description(n.oid, 'pg_namespace'), '')
  FROM pg_namespace n JOIN members m ON m.classid = 'pg_namespace'::regclass AND m.objid = n.oid
UNION ALL
SELECT 'dumped ' || coalesce((SELECT string_agg(c::regclass::text, ',' ORDER BY c::regclass::text)
                                FROM unnest(x.extconfig) c), '')
  FROM pg_extension x WHERE x.extname = 'pg_webhook_inbox'
UNION ALL
SELECT 'initprivs ' || pg_describe_object(i.classoid, i.objoid, i.objsubid) || ' '
       || (SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(i.initprivs) a)
  FROM pg_init_privs i JOIN members m ON m.classid = i.classoid AND m.objid = i.objoid
UNION ALL
SELECT 'members ' || count(*) FROM members
"#;

fn catalog(client: &mut Client) -> BTreeSet<String> {
    client
        .query(CATALOG, &[])
        .unwrap()
        .iter()
        .map(|row| row.get::<_, String>(0))
        .collect()
}

fn roles(admin: &mut Client) {
    // The tests here create and grant the same roles, also at once.
    let _turn = one_at_a_time();
    ensure_role(admin, "upgrade_app", true);
    ensure_role(admin, "upgrade_ops", true);
    admin
        .batch_execute(
            "SELECT webhook_grant_app('upgrade_app');
             SELECT webhook_grant_operator('upgrade_ops');",
        )
        .unwrap();
}

fn register(admin: &mut Client) {
    admin
        .execute(
            "SELECT webhook_register_provider('stripe', secret => $1)",
            &[&STRIPE_SECRET],
        )
        .unwrap();
    admin
        .execute(
            "SELECT webhook_register_provider('github', secret => $1)",
            &[&GITHUB_SECRET],
        )
        .unwrap();
}

/// Queue a Stripe event with `payload`: its status.
fn enqueue(app: &mut Client, event_id: &str, payload: &str) -> String {
    app.query_one(
        "SELECT status FROM webhook_enqueue('stripe', $1, 'invoice.paid', $2::text::jsonb)",
        &[&event_id, &payload],
    )
    .unwrap()
    .get(0)
}

/// Lease the next ready event of `provider`: the lease's id.
fn next_lease(app: &mut Client, provider: &str) -> String {
    app.query_one(
        "SELECT id::text FROM webhook_next(1, provider => $1)",
        &[&provider],
    )
    .unwrap()
    .get(0)
}

/// Complete a claim or a lease.
fn complete(app: &mut Client, id: &str) {
    app.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
        .unwrap();
}

const STRIPE_BODY: &str = r#"{"id":"evt_before_upgrade","type":"invoice.paid"}"#;
const GITHUB_BODY: &str = r#"{"ref":"refs/heads/main","after":"before-upgrade"}"#;

/// What a database of `version` held when its users upgraded: processed,
/// failed and rejected deliveries, written through that version's API.
fn fill(admin: &mut Client) {
    register(admin);
    roles(admin);
    // A Stripe event through webhook_receive, completed with a result.
    let id: String = admin
        .query_one(
            "SELECT id::text FROM webhook_receive('stripe', $1::text::jsonb, $2::bytea)",
            &[
                &stripe(STRIPE_BODY, now(), STRIPE_SECRET).to_string(),
                &STRIPE_BODY.as_bytes(),
            ],
        )
        .unwrap()
        .get(0);
    admin
        .execute(
            "SELECT webhook_complete($1::text::uuid, '{\"credits\": 5}')",
            &[&id],
        )
        .unwrap();
    // A GitHub delivery claimed by a handler that verified it itself.
    let headers = github("gh-before-upgrade", "push", GITHUB_BODY, GITHUB_SECRET);
    let id: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('github', 'gh-before-upgrade', 'push', $1::bytea, $2)",
            &[&GITHUB_BODY.as_bytes(), &headers["X-Hub-Signature-256"].as_str().unwrap()],
        )
        .unwrap()
        .get(0);
    complete(admin, &id);
    // A failed attempt.
    let id: String = admin
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_failed_before', 'charge', '{\"a\": 1}'::jsonb, NULL)",
            &[],
        )
        .unwrap()
        .get(0);
    admin
        .execute(
            "SELECT webhook_fail($1::text::uuid, 'downstream was down')",
            &[&id],
        )
        .unwrap();
    // A forgery, archived whole as that version archived rejections.
    admin
        .batch_execute(
            "INSERT INTO webhook.delivery_log (id, provider, raw_body, claim_status, reject_reason)
             VALUES ('018f0000-0000-7000-8000-000000000001', 'stripe', '\\x7b7d', 'rejected', 'bad_signature')",
        )
        .unwrap();
}

#[test]
fn every_kept_published_release_upgrades_to_what_a_fresh_install_is() {
    let mut fresh = empty_database("pgwi_upgrade_fresh");
    fresh
        .batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    roles(&mut fresh);
    let current: String = fresh
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    let expected = catalog(&mut fresh);

    for version in &earlier_releases() {
        let db = format!("pgwi_upgrade_from_{}", version.replace('.', "_"));
        let mut old = empty_database(&db);
        old.execute(
            &format!("CREATE EXTENSION pg_webhook_inbox VERSION '{version}'"),
            &[],
        )
        .unwrap();
        fill(&mut old);
        // An event leased through the release's own SQL before the
        // upgrade, and finished after it.
        assert_eq!(enqueue(&mut old, "evt_in_flight", "{}"), "queued");
        let in_flight = next_lease(&mut old, "stripe");
        // A request under an idempotency key, begun before the upgrade and
        // finished after it.
        let keyed: String = old
            .query_one(
                "SELECT request_id::text FROM idempotency_begin('upgrade', 'key-before', 'fp')",
                &[],
            )
            .unwrap()
            .get(0);
        let before: Vec<String> = old
            .query(
                "SELECT provider || '/' || event_id || '/' || status || '/' || attempts FROM webhook.events ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();

        // Providers registered with the release's defaults, and one whose
        // DBA named its own source: the defaults move to this version's,
        // the DBA's choice stays.
        old.batch_execute(
            "SELECT webhook_register_provider('upgrade-slack', secret => 's', scheme => 'slack');
             SELECT webhook_register_provider('upgrade-shopify', secret => 's', scheme => 'shopify');
             SELECT webhook_register_provider('upgrade-supabase', secret => 'whsec_c2VjcmV0', scheme => 'supabase');
             SELECT webhook_register_provider('upgrade-twilio', secret => 't', scheme => 'twilio');
             SELECT webhook_register_provider('upgrade-twilio-own', secret => 't', scheme => 'twilio',
                                              event_id_from => 'body:MessageSid');",
        )
        .unwrap();
        old.batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
            .unwrap();
        let sources: Vec<String> = old
            .query(
                "SELECT p.name || ' ' || p.event_id_from || ' ' || p.event_type_from
                       || ' ' || (p.event_id_from = s.event_id_from OR p.name LIKE '%-own')
                       || ' ' || (p.event_type_from = s.event_type_from)
                   FROM webhook.providers p JOIN webhook_schemes() s ON s.scheme = p.scheme
                  WHERE p.name LIKE 'upgrade-%' ORDER BY p.name",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert!(
            sources.len() == 5 && sources.iter().all(|s| s.ends_with("true true")),
            "{version}: {sources:?}"
        );
        assert!(sources[4].contains(" body:MessageSid "), "{sources:?}");
        // Functions the update makes anew (an argument or a result column
        // added) keep who may call them, before any grant is run again.
        for remade in [
            "webhook_next(integer, text, text, text, interval)",
            "webhook_receive(text, jsonb, bytea, interval, boolean, text, boolean, text)",
            "webhook_receive(text, jsonb, text, interval, boolean, text, boolean, text)",
            "webhook_enqueue(text, text, text, jsonb, text, text)",
            "webhook_enqueue(text, text, text, bytea, text, text)",
            "webhook_enqueue(text, text, text, text, text, text)",
        ] {
            let kept: bool = old
                .query_one(
                    "SELECT has_function_privilege('upgrade_app', $1, 'EXECUTE')",
                    &[&remade],
                )
                .unwrap()
                .get(0);
            assert!(kept, "{version}: the worker role may still call {remade}");
        }
        // As the changelog asks after every update: grant again, which
        // gives existing roles what the release added for them.
        roles(&mut old);
        let upgraded_to: String = old
            .query_one(
                "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            upgraded_to, current,
            "{version} upgrades to the current version"
        );

        // (a) The catalog is a fresh install's.
        let got = catalog(&mut old);
        let missing: Vec<_> = expected.difference(&got).collect();
        let extra: Vec<_> = got.difference(&expected).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "{version} → {current} differs from a fresh install\n  only in fresh:    {missing:#?}\n  only in upgraded: {extra:#?}"
        );

        // (b) Every row survived and answers as before, to the application
        // role over its own connection.
        let after: Vec<String> = old
            .query(
                "SELECT provider || '/' || event_id || '/' || status || '/' || attempts FROM webhook.events ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(before, after, "events survive the upgrade");
        let mut app = connect_as(&db, "upgrade_app");
        answers_as_before(
            &mut app,
            &History {
                stripe_secret: STRIPE_SECRET,
                stripe_body: STRIPE_BODY,
                stripe_result: r#"{"credits": 5}"#,
                github_secret: GITHUB_SECRET,
                github_delivery: "gh-before-upgrade",
                github_body: GITHUB_BODY,
                failed_event: "evt_failed_before",
            },
        );
        // The operator still sees the archive, old rejections included.
        let mut ops = connect_as(&db, "upgrade_ops");
        let rejected: i32 = ops
            .query_one(
                "SELECT body_bytes FROM webhook.rejected_deliveries WHERE reason = 'bad_signature'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(rejected, 2);

        // (c) The inbox works in the upgraded database, for the roles
        // granted before it existed: the application queues and leases
        // (it could claim), the operator reads the inbox (it could read
        // the archive).
        assert_eq!(
            enqueue(&mut app, "evt_after_upgrade", r#"{"a": 1}"#),
            "queued"
        );
        let lease = next_lease(&mut app, "stripe");
        complete(&mut app, &lease);
        let processed: i64 = ops
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE event_id = 'evt_after_upgrade' AND status = 'processed'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(processed, 1);
        ops.query("SELECT * FROM webhook.inbox_stats", &[]).unwrap();
        complete(&mut app, &in_flight);
        let status: String = ops
            .query_one(
                "SELECT status::text FROM webhook.inbox WHERE event_id = 'evt_in_flight'",
                &[],
            )
            .unwrap()
            .get(0);
        assert_eq!(
            status, "processed",
            "a lease taken before {version} was upgraded"
        );

        app.execute(
            "SELECT idempotency_finish($1::text::uuid, 201, 'made')",
            &[&keyed],
        )
        .unwrap();
        let replay: (String, i32) = {
            let row = app
                .query_one(
                    "SELECT outcome, http_status FROM idempotency_begin('upgrade', 'key-before', 'fp')",
                    &[],
                )
                .unwrap();
            (row.get(0), row.get(1))
        };
        assert_eq!(replay, ("replay".to_string(), 201));

        // (d) Ordering works in the upgraded database: the DBA turns it on,
        // the application's older event is answered stale.
        old.batch_execute("SELECT webhook_register_provider('stripe', ordering => true)")
            .unwrap();
        let answer = |app: &mut Client, id: &str, created: i64| -> (String, String) {
            let body = format!(
                r#"{{"id": "{id}", "type": "customer.subscription.updated", "created": {created}, "data": {{"object": {{"id": "sub_upgraded"}}}}}}"#
            );
            let row = app
                .query_one(
                    "SELECT id::text, status FROM webhook_receive('stripe', $1::text::jsonb, $2::text)",
                    &[&stripe(&body, now(), STRIPE_SECRET).to_string(), &body],
                )
                .unwrap();
            (row.get(0), row.get(1))
        };
        let (newer, status) = answer(&mut app, "evt_upgraded_new", 200);
        assert_eq!(status, "claimed");
        complete(&mut app, &newer);
        assert_eq!(answer(&mut app, "evt_upgraded_old", 100).1, "stale");
        let watermarks: i64 = ops
            .query_one("SELECT count(*) FROM webhook.watermarks", &[])
            .unwrap()
            .get(0);
        assert_eq!(watermarks, 1);
    }
}

/// Between installing this library and `ALTER EXTENSION … UPDATE`, a
/// database still runs a published release's SQL, whose functions name
/// this library's C symbols. GitHub never redelivers a delivery that
/// failed then, so every call a webhook takes must keep working: receive
/// (claimed and queued), claim, complete, fail, enqueue, next. For every
/// kept release, not only the last: a database may skip releases.
#[test]
fn before_the_update_every_kept_release_keeps_answering_webhooks() {
    let releases = earlier_releases();
    assert!(releases.contains(&last_published()));
    for published in releases {
        window(&published);
    }
}

fn window(published: &str) {
    let db = &format!("pgwi_upgrade_window_{}", published.replace('.', "_"));
    let mut admin = empty_database(db);
    admin
        .execute(
            &format!("CREATE EXTENSION pg_webhook_inbox VERSION '{published}'"),
            &[],
        )
        .unwrap();
    register(&mut admin);
    roles(&mut admin);
    let version: String = admin
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, published, "still on the published release's SQL");
    let mut app = connect_as(db, "upgrade_app");

    // webhook_receive, claimed, completed with a result its duplicate gets.
    let stripe_body = r#"{"id":"evt_window_1","type":"invoice.paid"}"#;
    let receive = |app: &mut Client, body: &str| -> (String, String, String) {
        let row = app
            .query_one(
                "SELECT id::text, status, reason FROM webhook_receive('stripe', $1::text::jsonb, $2::bytea)",
                &[&stripe(body, now(), STRIPE_SECRET).to_string(), &body.as_bytes()],
            )
            .unwrap();
        (row.get(0), row.get(1), row.get(2))
    };
    let (id, status, reason) = receive(&mut app, stripe_body);
    assert_eq!((status.as_str(), reason.as_str()), ("claimed", "ok"));
    app.execute(
        "SELECT webhook_complete($1::text::uuid, '{\"credits\": 1}')",
        &[&id],
    )
    .unwrap();
    assert_eq!(receive(&mut app, stripe_body).1, "duplicate");
    let forged = receive_forged(&mut app);
    assert_eq!(forged, "bad_signature");

    // GitHub, which never redelivers: queued in the inbox by
    // webhook_receive, leased and completed by a worker.
    let github_body = r#"{"ref":"refs/heads/main","after":"window"}"#;
    let headers = github("gh-window-1", "push", github_body, GITHUB_SECRET);
    let status: String = app
        .query_one(
            "SELECT status FROM webhook_receive('github', $1::text::jsonb, $2::bytea, inbox => true)",
            &[&headers.to_string(), &github_body.as_bytes()],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "queued");
    let lease = next_lease(&mut app, "github");
    complete(&mut app, &lease);

    // webhook_claim, failed, then claimed again as a retry.
    let claim = |app: &mut Client| -> (String, String) {
        let row = app
            .query_one(
                "SELECT id::text, status FROM webhook_claim('stripe', 'evt_window_2', 'charge', '{\"a\": 1}'::jsonb, NULL)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let (id, status) = claim(&mut app);
    assert_eq!(status, "claimed");
    app.execute(
        "SELECT webhook_fail($1::text::uuid, 'downstream was down')",
        &[&id],
    )
    .unwrap();
    let (id, status) = claim(&mut app);
    assert_eq!(status, "retry");
    complete(&mut app, &id);

    // webhook_enqueue, leased, failed once, leased again and completed.
    assert_eq!(enqueue(&mut app, "evt_window_3", r#"{"b": 2}"#), "queued");
    let lease = next_lease(&mut app, "stripe");
    app.execute(
        "SELECT webhook_fail($1::text::uuid, 'try again', retry_in => '0 seconds')",
        &[&lease],
    )
    .unwrap();
    let lease = next_lease(&mut app, "stripe");
    complete(&mut app, &lease);

    let events: Vec<String> = admin
        .query(
            "SELECT provider || '/' || event_id || '/' || status FROM webhook.events ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        events,
        [
            "github/gh-window-1/queued",
            "stripe/evt_window_1/processed",
            "stripe/evt_window_2/processed",
            "stripe/evt_window_3/queued",
        ]
    );
    let processed: i64 = admin
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE status = 'processed'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        processed, 2,
        "both queued events processed by their workers"
    );

    // A scheme whose signature does not vouch for the body needs the
    // bindings 0.11.0 brought: before them, refused with the hint to update
    // (the provider retries), never accepted unchecked.
    admin
        .execute(
            "SELECT webhook_register_provider('mailgun', secret => 'mailgun-window-key')",
            &[],
        )
        .unwrap();
    let mailgun = mailgun_body("mg-window-1", "mailgun-window-key");
    let binds_bodies: bool = admin
        .query_one(
            "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = 'webhook.signature_bindings'::regclass
                               AND attname = 'body_digest' AND NOT attisdropped)",
            &[],
        )
        .unwrap()
        .get(0);
    if binds_bodies {
        let status: String = app
            .query_one(
                "SELECT status::text FROM webhook_receive('mailgun', '{}'::jsonb, $1::text)",
                &[&mailgun],
            )
            .unwrap()
            .get(0);
        assert_eq!(status, "claimed", "{published} binds bodies already");
        admin
            .batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
            .unwrap();
        let after: i64 = admin
            .query_one("SELECT count(*) FROM webhook.events", &[])
            .unwrap()
            .get(0);
        assert_eq!(after, 5, "nothing lost in the update from {published}");
        return;
    }
    let refused = app
        .query_one(
            "SELECT status FROM webhook_receive('mailgun', '{}'::jsonb, $1::text)",
            &[&mailgun],
        )
        .unwrap_err();
    assert_eq!(sql_state(&refused), Some("55000"), "{}", message(&refused));
    assert!(
        refused
            .as_db_error()
            .and_then(|e| e.hint())
            .is_some_and(|hint| hint.contains("ALTER EXTENSION pg_webhook_inbox UPDATE")),
        "{refused:?}"
    );

    // And the update itself then goes through with nothing lost.
    admin
        .batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
        .unwrap();
    let after: i64 = admin
        .query_one("SELECT count(*) FROM webhook.events", &[])
        .unwrap()
        .get(0);
    assert_eq!(after, 4);
    let status: String = app
        .query_one(
            "SELECT status::text FROM webhook_receive('mailgun', '{}'::jsonb, $1::text)",
            &[&mailgun],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "claimed", "the provider's retry, after the update");
}

/// A Mailgun delivery signed now: the signature object in the body.
fn mailgun_body(event_id: &str, key: &str) -> String {
    let ts = now().to_string();
    let token = format!("token-{event_id}");
    let signature = hex::encode(common::sign::hmac_sha256(
        key.as_bytes(),
        &[ts.as_bytes(), token.as_bytes()],
    ));
    serde_json::json!({
        "signature": {"timestamp": ts, "token": token, "signature": signature},
        "event-data": {"id": event_id, "event": "delivered"},
    })
    .to_string()
}

/// A Stripe delivery signed with the wrong secret, through the window's
/// SQL: refused, not claimed.
fn receive_forged(app: &mut Client) -> String {
    let body = r#"{"id":"evt_window_forged","type":"refund.created"}"#;
    app.query_one(
        "SELECT reason FROM webhook_receive('stripe', $1::text::jsonb, $2::bytea)",
        &[
            &stripe(body, now(), "whsec_not_ours").to_string(),
            &body.as_bytes(),
        ],
    )
    .unwrap()
    .get(0)
}

// ---------------------------------------------------------------------------
// The portable edition (portable/build): from each published release kept
// in sql/portable/, and from an earlier state of its twins (see
// common::EARLIER_PORTABLE), an upgrade of a database in use must reach
// what a fresh install of this version is, and go on working.

/// Install `earlier` (plain) in a fresh database, use it, upgrade it with
/// `upgrade` (plain): the database.
fn portable_in_use_then_upgraded(
    db: &str,
    earlier: &std::path::Path,
    upgrade: &std::path::Path,
) -> Client {
    let user = std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into());
    let mut c = empty_database(db);
    psql_file(db, &user, earlier);
    c.batch_execute(PORTABLE_IN_USE).unwrap();
    psql_file(db, &user, upgrade);
    c
}

#[test]
fn the_portable_edition_upgraded_is_a_fresh_install_and_goes_on() {
    if !pgcrypto_available("upgrade: the portable edition's upgrades") {
        return;
    }
    let v = env!("CARGO_PKG_VERSION");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    // Where each upgrade starts: the published releases' kept scripts, and
    // the earlier twins: (version, the directory of its extension script).
    let kept = root.join("sql").join("portable");
    let mut starts: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(&kept)
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| {
                    let name = e.file_name().to_string_lossy().to_string();
                    let u = name
                        .strip_prefix("pg_webhook_inbox--")?
                        .strip_suffix(".sql")?
                        .to_string();
                    (!u.contains("--") && u != v).then(|| (u, kept.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let label = format!("{v}-earlier");
    match earlier_portable(&label) {
        Some(dir) => starts.push((label, dir)),
        None => eprintln!(
            "upgrade: NOT CHECKED: the upgrade from the portable edition of commit {EARLIER_PORTABLE}: \
             this checkout does not have it"
        ),
    }
    let mut fresh = portable_database("pgwi_upgrade_portable_fresh");
    let expected = portable_catalog(&mut fresh);
    for (i, (u, dir)) in starts.iter().enumerate() {
        let built = portable_upgrade(dir, u);
        let earlier = built.join(format!("pg_webhook_inbox-plain--{u}.sql"));
        let upgrade = built.join(format!("pg_webhook_inbox-plain--{u}--{v}.sql"));
        let db = format!("pgwi_upgrade_portable_{i}");
        let mut c = portable_in_use_then_upgraded(&db, &earlier, &upgrade);
        assert_eq!(
            portable_catalog(&mut c),
            expected,
            "the portable edition upgraded from {u}"
        );
        portable_goes_on(&mut c, u);
    }
}

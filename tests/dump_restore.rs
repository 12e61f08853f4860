//! pg_dump and pg_restore, the real tools: a database that uses the
//! extension, dumped and restored into a new one, must answer as the
//! original did — processed events stay duplicates, secrets still verify,
//! signed bodies stay bound to their ids, roles keep their grants.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{github, now, stripe};
use common::*;
use postgres::Client;

const STRIPE_SECRET: &str = "whsec_dump_test";
const GITHUB_SECRET: &str = "dump-test-github";
const STRIPE_BODY: &str = r#"{"id":"evt_dumped","type":"invoice.paid"}"#;
const GITHUB_BODY: &str = r#"{"ref":"refs/heads/main","after":"dumped"}"#;

fn tool(name: &str) -> std::process::Command {
    let dir =
        std::env::var("PG_BINDIR").expect("PG_BINDIR is set by .ci/pg-temp (make test-client)");
    std::process::Command::new(format!("{dir}/{name}"))
}

fn run(mut command: std::process::Command) {
    let out = command.output().expect("run the PostgreSQL tool");
    assert!(
        out.status.success(),
        "{command:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (status, reason, result) of one delivery through webhook_receive.
fn answer(
    client: &mut Client,
    provider: &str,
    headers: &serde_json::Value,
    body: &str,
) -> (String, String, Option<String>) {
    let row = receive(client, provider, headers, body.as_bytes()).unwrap();
    (row.get("status"), row.get("reason"), row.get("result_text"))
}

#[test]
fn a_dumped_and_restored_database_answers_as_the_original() {
    let source_db = "pgwi_dump_source";
    let mut source = empty_database(source_db);
    ensure_role(&mut source, "dump_app", true);
    ensure_role(&mut source, "dump_scoped", true);
    source
        .batch_execute(
            "CREATE EXTENSION pg_webhook_inbox;
             SELECT webhook_grant_app('dump_app');
             SELECT webhook_grant_app('dump_scoped');
             SELECT webhook_scope_app('dump_scoped', '{github}');
             -- The archive's days: the database's tables, dumped as such.
             SELECT webhook_create_partitions(1);",
        )
        .unwrap();
    source
        .execute(
            "SELECT webhook_register_provider('stripe', secret => $1, tolerance => '10 minutes')",
            &[&STRIPE_SECRET],
        )
        .unwrap();
    // Claimed here, so that the GitHub delivery has a stored result.
    source
        .execute(
            "SELECT webhook_register_provider('github', secret => $1, inbox => false)",
            &[&GITHUB_SECRET],
        )
        .unwrap();
    handled(
        &mut source,
        "stripe",
        &stripe(STRIPE_BODY, now(), STRIPE_SECRET),
        STRIPE_BODY,
    );
    handled(
        &mut source,
        "github",
        &github("gh-dumped", "push", GITHUB_BODY, GITHUB_SECRET),
        GITHUB_BODY,
    );
    let forged = answer(
        &mut source,
        "stripe",
        &stripe(STRIPE_BODY, now(), "whsec_wrong"),
        STRIPE_BODY,
    );
    assert_eq!(forged.1, "bad_signature");
    let failed: String = source
        .query_one(
            "SELECT id::text FROM webhook_claim('stripe', 'evt_failed', 't', '{}'::jsonb, NULL)",
            &[],
        )
        .unwrap()
        .get(0);
    source
        .execute("SELECT webhook_fail($1::text::uuid, 'boom')", &[&failed])
        .unwrap();
    // An event waiting in the inbox, and one whose worker failed.
    source
        .batch_execute(
            "SELECT webhook_enqueue('stripe', 'evt_dead_letter', 'invoice.paid', '{}'::jsonb);
             SELECT webhook_enqueue('stripe', 'evt_waiting', 'invoice.paid', '{\"waiting\": true}'::jsonb);
             SELECT webhook_fail(id, 'gave up', permanent => true) FROM webhook_next(1);",
        )
        .unwrap();
    // What steers the inbox: a pause, a quarantine, limits with their
    // slots and a breaker; and a filter.
    source
        .batch_execute(
            "SELECT webhook_register_provider('ordered', scheme => 'stripe', secret => 'whsec_o', ordering => true,
                                              entity_key_from => 'body:customer', order_from => 'body:seq');
             SELECT webhook_pause(provider => 'github', reason => 'restored with the rest');
             SELECT webhook_quarantine('ordered', 'cus_1');
             SELECT webhook_set_limit('default', max_leases => 2, rate => 5, breaker_failures => 3);
             SELECT webhook_set_filter('ordered', event_types => '{invoice.paid}');",
        )
        .unwrap();
    let counts = |client: &mut Client| -> Vec<i64> {
        let row = client
            .query_one(
                "SELECT (SELECT count(*) FROM webhook.events), (SELECT count(*) FROM webhook.delivery_log),
                        (SELECT count(*) FROM webhook.delivery_failures), (SELECT count(*) FROM webhook.providers),
                        (SELECT count(*) FROM webhook.provider_secrets), (SELECT count(*) FROM webhook.signature_bindings),
                        (SELECT count(*) FROM webhook.inbox), (SELECT count(*) FROM webhook.inbox_failures),
                        (SELECT count(*) FROM webhook.pauses), (SELECT count(*) FROM webhook.limits),
                        (SELECT count(*) FROM webhook.limit_slots), (SELECT count(*) FROM webhook.breakers),
                        (SELECT count(*) FROM webhook.filters)",
                &[],
            )
            .unwrap();
        (0..13).map(|i| row.get(i)).collect()
    };
    let before = counts(&mut source);
    let partitions = |client: &mut Client| -> Vec<String> {
        client
            .query(
                "SELECT p.partition::text || ' ' || coalesce(p.lower_id::text, '') || ' ' || coalesce(p.upper_id::text, '')
                        || ' ' || (SELECT count(*) FROM webhook.delivery_log l WHERE l.tableoid = p.partition)
                   FROM webhook.archive_partitions p",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect()
    };
    let layout = partitions(&mut source);
    assert_eq!(layout.len(), 3, "today, tomorrow and the default partition");

    let dump = std::env::temp_dir().join(format!("pgwi-dump-{}.dump", std::process::id()));
    let mut pg_dump = tool("pg_dump");
    pg_dump
        .args(["--format=custom", "--file"])
        .arg(&dump)
        .arg(source_db);
    run(pg_dump);
    let restored_db = "pgwi_dump_restored";
    drop(empty_database(restored_db));
    let mut pg_restore = tool("pg_restore");
    pg_restore
        .args(["--exit-on-error", "--dbname", restored_db])
        .arg(&dump);
    run(pg_restore);
    let _ = std::fs::remove_file(&dump);

    let mut restored = connect(restored_db);
    assert_eq!(counts(&mut restored), before, "every row is back");
    assert_eq!(
        partitions(&mut restored),
        layout,
        "every partition is back, attached, with its rows"
    );
    let tolerance: String = restored
        .query_one(
            "SELECT tolerance::text FROM webhook.providers WHERE name = 'stripe'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(tolerance, "00:10:00", "registry settings are back");

    // As the application role, whose grants came back with the dump.
    let mut app = connect_as(restored_db, "dump_app");
    answers_as_before(
        &mut app,
        &History {
            stripe_secret: STRIPE_SECRET,
            stripe_body: STRIPE_BODY,
            stripe_result: r#"{"handled": true}"#,
            github_secret: GITHUB_SECRET,
            github_delivery: "gh-dumped",
            github_body: GITHUB_BODY,
            failed_event: "evt_failed",
        },
    );
    // The restored days take the new deliveries, with their indexes.
    let (in_default, indexes): (i64, i64) = {
        let row = restored
            .query_one(
                "SELECT (SELECT count(*) FROM webhook.delivery_log_default),
                        (SELECT count(*) FROM pg_index i JOIN webhook.archive_partitions p ON p.partition = i.indrelid)",
                &[],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    assert_eq!(in_default, 0);
    assert_eq!(indexes, 3 * 4, "each partition's four indexes");
    // The inbox is back: the dead letter can be requeued, and workers get
    // both events with their payloads.
    restored
        .batch_execute("SELECT webhook_requeue_dead()")
        .unwrap();
    let leased: Vec<String> = app
        .query(
            "SELECT event_id || ' ' || payload::text FROM webhook_next(10) ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(
        leased,
        ["evt_dead_letter {}", "evt_waiting {\"waiting\": true}"]
    );
    // The secrets are still readable by nobody but the owner.
    let err = app
        .batch_execute("SELECT secret FROM webhook.provider_secrets")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"));
    // A scoped role is still scoped.
    let err = connect_as(restored_db, "dump_scoped")
        .batch_execute("SELECT webhook_claim('stripe', 'evt_scoped', 't', '{}'::jsonb, NULL)")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{}", message(&err));
}

//! The portable edition where managed hosts let a customer install it, on
//! a server set up as they set theirs up (.ci/managed-host): no compiled
//! extension to load, pg_tle the one preloaded library, and an installing
//! role that is no superuser.
//!
//! * through pg_tle: `pgtle.install_extension` by a role holding
//!   pgtle_admin, then `CREATE EXTENSION pg_webhook_inbox CASCADE`;
//! * from plain SQL: `psql -f` by the database's owner.
//!
//! Either way the same checks follow: who owns what, the privilege rule
//! (an application role executes functions and reads no table), signed
//! deliveries verified, claims made and finished, the public-key schemes
//! refused, the extension dropped and installed again.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;

fn role() -> String {
    std::env::var("MANAGED_ROLE")
        .expect("MANAGED_ROLE is set by .ci/managed-host (make managed-test)")
}

/// Whether the host offers what the test needs; if not, it says what it
/// did not check.
fn offered(what: &str, variable: &str, unchecked: &str) -> bool {
    let value = std::env::var(variable).unwrap_or_else(|_| format!("{variable} is not set"));
    if value == "yes" {
        return true;
    }
    eprintln!("managed: NOT CHECKED: {unchecked}: {what} is missing here ({value})");
    false
}

fn as_owner(db: &str) -> Client {
    connect_as(db, &role())
}

/// What every way in must give: the product working, for the roles a
/// managed host has.
fn works_for_its_roles(db: &str, how: &str) {
    let mut owner = as_owner(db);
    let superuser: bool = owner
        .query_one(
            "SELECT rolsuper FROM pg_roles WHERE rolname = current_user",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(
        !superuser,
        "{how}: installed by a role that is no superuser"
    );

    // A provider with its secret, and an application role granted what a
    // handler and a worker need: it claims and finishes, and reads no
    // table.
    let secret = "whsec_managed";
    // Roles are the server's: one per database, so that both ways in run
    // at once.
    let app = format!("{db}_app");
    owner
        .batch_execute(&format!(
            "SELECT count(*) FROM webhook_register_provider('stripe', secret => '{secret}');
             CREATE ROLE {app} LOGIN;
             SELECT webhook_grant_app('{app}');"
        ))
        .unwrap();
    let body = r#"{"id":"evt_managed","type":"invoice.paid"}"#;
    let headers = sign::stripe(body, sign::now(), secret);
    let valid: bool = owner
        .query_one(
            "SELECT webhook_verify('stripe', $1::text::jsonb, $2::bytea, ARRAY[$3])",
            &[&headers.to_string(), &body.as_bytes(), &secret],
        )
        .unwrap()
        .get(0);
    assert!(
        valid,
        "{how}: a Stripe delivery signed with the registered secret verifies"
    );

    let mut app = connect_as(db, &app);
    let claim = |app: &mut Client| -> (String, String) {
        let row = app
            .query_one(
                "SELECT id::text, status FROM webhook_claim('stripe', 'evt_managed', 'invoice.paid', $1::text::jsonb, NULL)",
                &[&body],
            )
            .unwrap();
        (row.get(0), row.get(1))
    };
    let (id, status) = claim(&mut app);
    assert_eq!(status, "claimed", "{how}");
    app.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
        .unwrap();
    assert_eq!(
        claim(&mut app).1,
        "duplicate",
        "{how}: the redelivery is a duplicate"
    );
    for table in [
        "webhook.events",
        "webhook.provider_secrets",
        "webhook.delivery_log",
    ] {
        let err = app
            .query(&format!("SELECT * FROM {table}"), &[])
            .expect_err("an application role reads no table");
        assert_eq!(
            sql_state(&err),
            Some("42501"),
            "{how}: {table}: {}",
            message(&err)
        );
    }
    let err = app
        .query("SELECT webhook._hmac('x', 'k', 'sha256')", &[])
        .expect_err("the internal functions are the owner's");
    assert_eq!(sql_state(&err), Some("42501"), "{how}: {}", message(&err));

    // A genuine delivery of every scheme in the catalog (the public-key
    // ones too), received by the application role: claimed, completed, and its redelivery a
    // duplicate.
    let mut schemes = 0;
    for line in scheme_matrix()
        .iter()
        .filter(|l| l["change"] == "the genuine delivery")
    {
        let scheme = line["scheme"].as_str().unwrap();
        let provider = format!("e-{}", scheme.split(';').next().unwrap());
        let tolerance = line["tolerance"]
            .as_i64()
            .map(|t| format!("{} seconds", t + sign::now() - line["at"].as_i64().unwrap()));
        owner
            .query(
                "SELECT * FROM webhook_register_provider($1, secret => $2, scheme => $3,
                     tolerance => $4::text::interval, event_id_from => $5, event_type_from => $6)",
                &[
                    &provider,
                    &line["secret"].as_str(),
                    &scheme,
                    &tolerance,
                    &line["event_id_from"].as_str(),
                    &line["event_type_from"].as_str(),
                ],
            )
            .unwrap_or_else(|e| panic!("{how}: register {scheme}: {}", message(&e)));
        let body = hex::decode(line["body"].as_str().unwrap()).unwrap();
        let receive = |app: &mut Client| -> (String, String, String) {
            let row = app
                .query_one(
                    "SELECT id::text, status, reason FROM webhook_receive($1, $2::text::jsonb, $3::bytea, url => $4)",
                    &[&provider, &line["headers"].to_string(), &body, &line["url"].as_str()],
                )
                .unwrap_or_else(|e| panic!("{how}: {scheme}: {}", message(&e)));
            (row.get(0), row.get(1), row.get(2))
        };
        let (id, status, reason) = receive(&mut app);
        // Claimed, or queued where the provider is registered in inbox
        // mode (GitHub is by default): then a worker leases it.
        let id: String = match status.as_str() {
            "claimed" => id,
            "queued" => app
                .query_one(
                    "SELECT id::text FROM webhook_next(provider => $1)",
                    &[&provider],
                )
                .unwrap_or_else(|e| panic!("{how}: {scheme}: {}", message(&e)))
                .get(0),
            other => panic!("{how}: {scheme}: answered {other} ({reason})"),
        };
        assert_eq!(reason, "ok", "{how}: {scheme}");
        app.execute("SELECT webhook_complete($1::text::uuid)", &[&id])
            .unwrap();
        assert_eq!(receive(&mut app).1, "duplicate", "{how}: {scheme}");
        schemes += 1;
    }
    assert!(schemes >= 18, "{how}: {schemes} schemes");
}

#[test]
fn installs_through_pg_tle_as_a_role_that_is_not_a_superuser() {
    if !offered(
        "pgcrypto",
        "MANAGED_PGCRYPTO",
        "the portable edition through pg_tle",
    ) || !offered(
        "pg_tle",
        "MANAGED_PGTLE",
        "the portable edition through pg_tle",
    ) {
        return;
    }
    let script = portable_script().with_file_name(format!(
        "pg_webhook_inbox-pgtle--{}.sql",
        env!("CARGO_PKG_VERSION")
    ));
    psql_file("tle_db", &role(), &script);
    let mut owner = as_owner("tle_db");
    owner
        .batch_execute("CREATE EXTENSION pg_webhook_inbox CASCADE")
        .unwrap();
    let row = owner
        .query_one(
            "SELECT extversion, extowner::regrole::text,
                    EXISTS (SELECT FROM pg_extension WHERE extname = 'pgcrypto')
               FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap();
    assert_eq!(row.get::<_, String>(0), env!("CARGO_PKG_VERSION"));
    assert_eq!(row.get::<_, String>(1), role());
    assert!(row.get::<_, bool>(2), "pgcrypto came with it");
    works_for_its_roles("tle_db", "through pg_tle");

    // Moving away (docs/managed.md): the tables are the extension's, and
    // its dump keeps every row of them. Here, where no compiled edition
    // installs, the rows go into the same tables made by the plain script
    // (tests/editions.rs moves a database into the compiled edition).
    let moved = "tle_moved_db";
    let mut host = empty_database(moved);
    host.batch_execute(&format!(
        "ALTER DATABASE {moved} OWNER TO {}; CREATE EXTENSION pgcrypto;",
        role()
    ))
    .unwrap();
    drop(host);
    psql_file(moved, &role(), portable_script());
    as_owner(moved)
        .batch_execute("SELECT webhook_create_partitions()")
        .unwrap();
    let mut source = as_owner("tle_db");
    source
        .batch_execute("SELECT webhook_create_partitions()")
        .unwrap();
    let before = webhook_rows(&mut source);
    assert!(
        count(&mut source, "SELECT count(*) FROM webhook.events") >= 18,
        "traffic to move"
    );
    move_rows("tle_db", moved, true);
    assert_same_tables(
        &before,
        &webhook_rows(&mut as_owner(moved)),
        "the rows of a pg_tle install, moved",
    );

    // Dropped and created again: every object was the extension's.
    owner
        .batch_execute(
            "DROP EXTENSION pg_webhook_inbox;
             CREATE EXTENSION pg_webhook_inbox;",
        )
        .unwrap();
    assert_eq!(count(&mut owner, "SELECT count(*) FROM webhook.events"), 0);
}

#[test]
fn installs_from_plain_sql_as_the_database_owner() {
    if !offered(
        "pgcrypto",
        "MANAGED_PGCRYPTO",
        "the portable edition from plain SQL",
    ) {
        return;
    }
    let mut owner = as_owner("plain_db");
    // pgcrypto is trusted: the database owner installs it.
    owner
        .batch_execute("CREATE EXTENSION IF NOT EXISTS pgcrypto")
        .unwrap();
    drop(owner);
    psql_file("plain_db", &role(), portable_script());
    works_for_its_roles("plain_db", "from plain SQL");
}

#[test]
fn upgrades_through_pg_tle_to_what_a_fresh_install_is() {
    if !offered(
        "pgcrypto",
        "MANAGED_PGCRYPTO",
        "the portable edition's upgrade through pg_tle",
    ) || !offered(
        "pg_tle",
        "MANAGED_PGTLE",
        "the portable edition's upgrade through pg_tle",
    ) {
        return;
    }
    let v = env!("CARGO_PKG_VERSION");
    let label = format!("{v}-earlier");
    let Some(earlier) = earlier_portable(&label) else {
        eprintln!(
            "managed: NOT CHECKED: the upgrade through pg_tle from the portable edition of commit \
             {EARLIER_PORTABLE}: this checkout does not have it"
        );
        return;
    };
    let built = portable_upgrade(&earlier, &label);
    for db in ["tle_upgraded_db", "tle_fresh_db"] {
        empty_database(db)
            .batch_execute(&format!(
                "ALTER DATABASE {db} OWNER TO {}; CREATE EXTENSION pg_tle;",
                role()
            ))
            .unwrap();
    }
    // The earlier version registered, created and used; then this one and
    // the way to it registered, and the extension updated.
    psql_file(
        "tle_upgraded_db",
        &role(),
        &built.join(format!("pg_webhook_inbox-pgtle--{label}.sql")),
    );
    let mut upgraded = as_owner("tle_upgraded_db");
    upgraded
        .batch_execute("CREATE EXTENSION pg_webhook_inbox CASCADE")
        .unwrap();
    upgraded.batch_execute(PORTABLE_IN_USE).unwrap();
    psql_file(
        "tle_upgraded_db",
        &role(),
        &built.join(format!("pg_webhook_inbox-pgtle--{label}--{v}.sql")),
    );
    upgraded
        .batch_execute("ALTER EXTENSION pg_webhook_inbox UPDATE")
        .unwrap();
    let version: String = upgraded
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, v);

    let script = portable_script().with_file_name(format!("pg_webhook_inbox-pgtle--{v}.sql"));
    psql_file("tle_fresh_db", &role(), &script);
    let mut fresh = as_owner("tle_fresh_db");
    fresh
        .batch_execute("CREATE EXTENSION pg_webhook_inbox CASCADE")
        .unwrap();
    assert_eq!(
        portable_catalog(&mut upgraded),
        portable_catalog(&mut fresh),
        "through pg_tle, upgraded from {label}"
    );
    portable_goes_on(&mut upgraded, &label);
}

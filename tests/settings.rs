#![cfg(feature = "client-tests")]
//! The settings that protect a guarantee (lease ceilings, the retry
//! ceiling and backoff, payload and response bounds, header redaction,
//! the bound on order values, the slot of an intake tier, …) are not an
//! application role's to change, in either edition.
//!
//! The compiled edition defines them superuser-only: PostgreSQL refuses
//! the role's SET. The portable edition has placeholders, which any role
//! may SET for its session or ALTER ROLE … SET for itself: it takes a
//! protected one only as the database has it (ALTER DATABASE … SET), and
//! refuses a session holding another value (42501), unless the session's
//! role is a superuser or the extension's owner. Every setting of the
//! list, each way a role can give itself a value.

mod common;

use common::*;
use postgres::Client;

const APP: &str = "settings_app";

/// Every protected setting, and a value that would weaken what it
/// protects (each within the compiled edition's range).
const PROTECTED: &[(&str, &str)] = &[
    ("webhook.slot", "3"),
    ("webhook.slots", "4"),
    ("webhook.max_payload_size", "100MB"),
    ("webhook.archive_duplicates", "off"),
    ("webhook.max_attempts", "1000"),
    ("webhook.max_lease", "30d"),
    ("webhook.backoff_base", "1ms"),
    ("webhook.backoff_max", "1ms"),
    ("webhook.rejected_body_limit", "65536"),
    ("webhook.idempotency_retention", "1s"),
    ("webhook.idempotency_max_response", "10MB"),
    ("webhook.maintenance_lock_timeout", "50s"),
    ("webhook.metrics_retention", "2h"),
    ("webhook.metrics_unregistered_providers", "100000"),
    ("webhook.order_max_future", "1s"),
    ("webhook.redact_headers", "x-nothing"),
];

fn prepare(name: &str) -> Client {
    // Roles are the cluster's: the suite's tests make theirs one at a time.
    static ROLES: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let mut db = installed_database(name);
    {
        let _one = ROLES.lock().unwrap_or_else(|e| e.into_inner());
        ensure_role(&mut db, APP, true);
    }
    db.batch_execute(&format!(
        "SELECT webhook_grant_app('{APP}');
         SELECT webhook_register_provider('gh', secret => 's', scheme => 'github');"
    ))
    .unwrap();
    if portable() {
        // Only to ask the reading itself for each setting: the API calls
        // that read them are below.
        db.batch_execute(&format!(
            "GRANT USAGE ON SCHEMA webhook TO {APP};
             GRANT EXECUTE ON FUNCTION webhook._setting(text) TO {APP};"
        ))
        .unwrap();
    }
    db
}

/// What this session, of the application role, takes `name` as: Ok(its
/// value as taken) or Err(SQLSTATE).
fn taken(app: &mut Client, name: &str) -> Result<Option<String>, String> {
    if portable() {
        app.query_one("SELECT webhook._setting($1)", &[&name])
            .map(|r| r.get(0))
            .map_err(|e| sqlstate(&e))
    } else {
        app.query_one("SELECT nullif(current_setting($1, true), '')", &[&name])
            .map(|r| r.get(0))
            .map_err(|e| sqlstate(&e))
    }
}

fn sqlstate(err: &postgres::Error) -> String {
    err.code().map_or("none".into(), |c| c.code().to_string())
}

/// Load the compiled library in this session (it defines the settings
/// when loaded): any call of one of its functions.
fn loaded(app: &mut Client) {
    app.query("SELECT count(*) FROM webhook_schemes()", &[])
        .unwrap();
}

#[test]
fn the_list_is_the_compiled_edition_s_superuser_only_settings() {
    let mut db = prepare("settings_list");
    let mut listed: Vec<String> = PROTECTED.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    let mut defined: Vec<String> = if portable() {
        db.query_one("SELECT webhook._protected_settings()", &[])
            .unwrap()
            .get(0)
    } else {
        loaded(&mut db);
        db.query(
            "SELECT name FROM pg_settings WHERE name LIKE 'webhook.%' AND context = 'superuser'",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
    };
    defined.sort();
    assert_eq!(defined, listed);
    if portable() {
        // Every reading of one in the portable edition's own functions
        // goes through webhook._setting, and in the shared SQL through
        // webhook._protected_setting; but in the two functions only the
        // extension's owner runs, who may set them anyway.
        let bypassing: Vec<String> = db
            .query(
                "SELECT DISTINCT p.proname::text
                   FROM pg_proc p, unnest(webhook._protected_settings()) s
                  WHERE p.prokind = 'f'
                    AND p.pronamespace IN ('webhook'::regnamespace, 'public'::regnamespace)
                    AND pg_get_functiondef(p.oid) LIKE '%current_setting(''' || s || '''%'
                    AND p.proname <> '_setting'
                  ORDER BY 1",
                &[],
            )
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(
            bypassing,
            ["webhook_register_provider", "webhook_retire_secret"],
            "a protected setting read around webhook._setting"
        );
        for f in ["webhook_register_provider", "webhook_retire_secret"] {
            let may: bool = db
                .query_one(
                    "SELECT bool_or(has_function_privilege($1, p.oid, 'EXECUTE'))
                       FROM pg_proc p WHERE p.proname = $2",
                    &[&APP, &f],
                )
                .unwrap()
                .get(0);
            assert!(!may, "{APP} may run {f}");
        }
    }
}

/// SET, SET LOCAL and set_config by the application role: refused by
/// PostgreSQL in the compiled edition, and in the portable one taken by
/// nothing (refused at the first reading), for every setting; once
/// RESET, the session is served again.
#[test]
fn a_session_of_the_application_role_cannot_give_itself_a_protected_value() {
    let db_name = "settings_session";
    drop(prepare(db_name));
    for (name, value) in PROTECTED {
        for how in ["SET", "SET LOCAL", "set_config"] {
            let mut app = connect_as(db_name, APP);
            if !portable() {
                loaded(&mut app);
            }
            let mut tx = app.transaction().unwrap();
            let set = match how {
                "SET" => tx.batch_execute(&format!("SET {name} = '{value}'")),
                "SET LOCAL" => tx.batch_execute(&format!("SET LOCAL {name} = '{value}'")),
                _ => tx
                    .query("SELECT set_config($1, $2, false)", &[name, value])
                    .map(|_| ()),
            };
            if portable() {
                set.unwrap_or_else(|e| panic!("{how} {name}: {}", message(&e)));
                let answer = tx
                    .query_one("SELECT webhook._setting($1)", &[name])
                    .map(|r| r.get::<_, Option<String>>(0));
                assert_eq!(
                    answer.as_ref().map_err(sqlstate),
                    Err("42501".to_string()),
                    "{how} {name} = {value}: taken as {answer:?}"
                );
                tx.rollback().unwrap();
                let mut tx = app.transaction().unwrap();
                tx.batch_execute(&format!("RESET {name}")).unwrap();
                let after: Option<String> = tx
                    .query_one("SELECT webhook._setting($1)", &[name])
                    .unwrap()
                    .get(0);
                assert_eq!(after, None, "{name} after RESET");
                tx.commit().unwrap();
            } else {
                let err = set.expect_err(&format!("{how} {name} by an application role"));
                assert_eq!(sqlstate(&err), "42501", "{how} {name}: {}", message(&err));
                tx.rollback().unwrap();
            }
        }
    }
}

/// Set before the compiled library is loaded in the session (a
/// placeholder then), a protected value is dropped when the library
/// defines its setting; in the portable edition there is no library, and
/// the first reading refuses it.
#[test]
fn a_value_set_before_the_library_is_loaded_is_not_taken() {
    let db_name = "settings_early";
    drop(prepare(db_name));
    for (name, value) in PROTECTED {
        let mut app = connect_as(db_name, APP);
        app.batch_execute(&format!("SET {name} = '{value}'"))
            .unwrap_or_else(|e| panic!("{name}: {}", message(&e)));
        if portable() {
            assert_eq!(taken(&mut app, name), Err("42501".into()), "{name}");
        } else {
            loaded(&mut app);
            let now: String = app
                .query_one("SELECT current_setting($1)", &[name])
                .unwrap()
                .get(0);
            assert_ne!(now, *value, "{name} kept the value set before the load");
        }
    }
}

/// ALTER ROLE … SET, which a role may do for itself: refused in the
/// compiled edition (the role may not), not taken in the portable one.
/// ALTER DATABASE … SET by the database's owner is the way, in both.
/// The extension owner's own sessions may set them, as a superuser's may
/// in the compiled edition.
#[test]
fn the_database_s_value_is_taken_and_the_role_s_own_is_not() {
    let db_name = "settings_levels";
    let mut db = prepare(db_name);
    for (name, value) in PROTECTED {
        let mut app = connect_as(db_name, APP);
        if !portable() {
            loaded(&mut app);
        }
        let own = app.batch_execute(&format!(
            "ALTER ROLE CURRENT_USER IN DATABASE {db_name} SET {name} = '{value}'"
        ));
        if portable() {
            // PostgreSQL may refuse a role a placeholder of its own
            // (42501); where it lets it, the value is not taken.
            match own {
                Err(e) => assert_eq!(sqlstate(&e), "42501", "{name}: {}", message(&e)),
                Ok(()) => {
                    let mut again = connect_as(db_name, APP);
                    assert_eq!(
                        taken(&mut again, name),
                        Err("42501".into()),
                        "{name} from ALTER ROLE"
                    );
                    db.batch_execute(&format!(
                        "ALTER ROLE {APP} IN DATABASE {db_name} RESET {name}"
                    ))
                    .unwrap();
                }
            }
        } else {
            let err = own.expect_err(name);
            assert_eq!(sqlstate(&err), "42501", "{name}: {}", message(&err));
        }

        db.batch_execute(&format!("ALTER DATABASE {db_name} SET {name} = '{value}'"))
            .unwrap();
        let mut app = connect_as(db_name, APP);
        if !portable() {
            loaded(&mut app);
        }
        let as_set: Option<String> = taken(&mut app, name).unwrap();
        assert!(as_set.is_some(), "{name} as the database has it");
        db.batch_execute(&format!("ALTER DATABASE {db_name} RESET {name}"))
            .unwrap();

        // The owner's session (here a superuser's).
        let mut owner = connect(db_name);
        owner
            .batch_execute(&format!("SET {name} = '{value}'"))
            .unwrap();
        if portable() {
            let got: Option<String> = owner
                .query_one("SELECT webhook._setting($1)", &[name])
                .unwrap()
                .get(0);
            assert_eq!(
                got.as_deref(),
                Some(*value),
                "{name} in the owner's session"
            );
        }
    }
}

/// Through the API itself: the application role's own value of the
/// payload bound, the lease ceiling, the retry ceiling or header
/// redaction never reaches a claim, a failure or a receipt.
#[test]
fn the_api_never_runs_with_the_role_s_own_value() {
    let db_name = "settings_api";
    drop(prepare(db_name));
    for (name, value, call) in [
        (
            "webhook.max_payload_size",
            "100MB",
            "SELECT webhook_claim('gh', 'e-1', 't', '{}'::jsonb, NULL)",
        ),
        (
            "webhook.max_lease",
            "30d",
            "SELECT webhook_claim('gh', 'e-2', 't', '{}'::jsonb, NULL)",
        ),
        (
            "webhook.max_attempts",
            "1000",
            "SELECT webhook_fail((webhook_claim('gh', 'e-3', 't', '{}'::jsonb, NULL)).id, 'failed')",
        ),
        (
            "webhook.redact_headers",
            "x-nothing",
            "SELECT webhook_receive('gh', '{\"x-github-delivery\": \"d-1\", \"x-github-event\": \"ping\"}'::jsonb, '{}'::bytea)",
        ),
    ] {
        let mut app = connect_as(db_name, APP);
        if !portable() {
            loaded(&mut app);
        }
        match app.batch_execute(&format!("SET {name} = '{value}'")) {
            Err(e) => {
                assert!(!portable(), "{name}: {}", message(&e));
                assert_eq!(sqlstate(&e), "42501");
            }
            Ok(()) => {
                assert!(portable(), "{name} set by an application role");
                let err = app.batch_execute(call).expect_err(call);
                assert_eq!(sqlstate(&err), "42501", "{call}: {}", message(&err));
                assert!(message(&err).contains(name), "{}", message(&err));
                app.batch_execute(&format!("RESET {name}")).unwrap();
                app.batch_execute(call)
                    .unwrap_or_else(|e| panic!("{call} after RESET: {}", message(&e)));
            }
        }
    }
}

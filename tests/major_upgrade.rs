//! A new PostgreSQL major under a database in use: `pg_upgrade` from the
//! old major to the new one, in copy mode and in link mode, and a dump
//! with the new major's pg_dump restored into it. Whichever way, every
//! row of the extension's tables is as it was (dedup, the archive's
//! partitions, the inbox with a live lease, secrets, watermarks,
//! idempotency keys, metrics and alerts), and the database answers as it
//! did: processed events are duplicates, the secrets verify, the lease is
//! completed by its worker, the finished request's response is replayed.
//!
//! Run by `make major-upgrade-test`, which installs the extension into
//! both majors and gives the suite OLD_PG_CONFIG, NEW_PG_CONFIG, a
//! directory (MAJOR_UPGRADE_DIR) and three ports from MAJOR_UPGRADE_PORT.

#![cfg(feature = "client-tests")]

mod common;

use common::cluster::{bindir_of, fresh_dir, program_in, Cluster, StopOnDrop};
use common::sign::{github, now, stripe};
use common::*;
use postgres::Client;
use std::path::{Path, PathBuf};

const DB: &str = "app";
const STRIPE_SECRET: &str = "whsec_major_upgrade";
const GITHUB_SECRET: &str = "major-upgrade-github";
const STRIPE_BODY: &str = r#"{"id":"evt_before_upgrade","type":"invoice.paid"}"#;
const GITHUB_BODY: &str = r#"{"ref":"refs/heads/main","after":"upgraded"}"#;

fn env(name: &str) -> String {
    std::env::var(name)
        .unwrap_or_else(|_| panic!("{name} is not set: run `make major-upgrade-test`"))
}

fn history() -> History<'static> {
    History {
        stripe_secret: STRIPE_SECRET,
        stripe_body: STRIPE_BODY,
        stripe_result: HANDLED,
        github_secret: GITHUB_SECRET,
        github_delivery: "gh-before-upgrade",
        github_body: GITHUB_BODY,
        failed_event: "evt_failed",
    }
}

/// What the old database held, and the ids a worker and a client kept.
struct Before {
    rows: String,
    lease: String,
    version: String,
}

/// The database in use on the old major: every kind of state the
/// extension keeps.
fn fill(c: &mut Client, pglz: bool) -> Before {
    c.batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    if pglz {
        // The new major was built without lz4, and cannot read a value
        // compressed with it: the archive compresses with pglz instead,
        // from the first row (see docs/high-availability.md).
        // Each partition keeps the method it was made with: the default
        // one too, and the days made later take the parent's.
        c.batch_execute(
            "DO $$
             DECLARE t regclass;
             BEGIN
                 FOR t IN SELECT 'webhook.delivery_log'::regclass
                          UNION ALL SELECT inhrelid::regclass FROM pg_inherits
                                     WHERE inhparent = 'webhook.delivery_log'::regclass LOOP
                     EXECUTE format('ALTER TABLE ONLY %s ALTER COLUMN payload SET COMPRESSION pglz,
                                         ALTER COLUMN raw_body SET COMPRESSION pglz,
                                         ALTER COLUMN headers SET COMPRESSION pglz', t);
                 END LOOP;
             END
             $$",
        )
        .unwrap();
    }
    ensure_role(c, "app_role", true);
    c.batch_execute(
        "SELECT webhook_grant_app('app_role');
         SELECT webhook_create_partitions(2);",
    )
    .unwrap();
    c.execute(
        "SELECT webhook_register_provider('stripe', secret => $1, tolerance => '10 minutes')",
        &[&STRIPE_SECRET],
    )
    .unwrap();
    c.execute(
        "SELECT webhook_register_provider('github', secret => $1, inbox => false)",
        &[&GITHUB_SECRET],
    )
    .unwrap();
    c.batch_execute(
        "SELECT webhook_register_provider('orders', scheme => 'stripe', secret => 'whsec_orders', inbox => true,
                                          ordering => true, entity_key_from => 'body:customer',
                                          order_from => 'body:seq');
         SELECT webhook_add_secret('stripe', 'whsec_next_rotation');",
    )
    .unwrap();
    // A large payload, compressed in the archive.
    let big = format!(
        r#"{{"id":"evt_large","type":"invoice.paid","lines":"{}"}}"#,
        "line item ".repeat(300)
    );
    for body in [STRIPE_BODY, big.as_str()] {
        handled(c, "stripe", &stripe(body, now(), STRIPE_SECRET), body);
    }
    handled(
        c,
        "github",
        &github("gh-before-upgrade", "push", GITHUB_BODY, GITHUB_SECRET),
        GITHUB_BODY,
    );
    c.batch_execute(
        "SELECT webhook_fail(id, 'boom') FROM webhook_claim('stripe', 'evt_failed', 't', '{}'::jsonb, NULL);",
    )
    .unwrap();
    // The inbox: an entity's first event done (its watermark), its second
    // leased for an hour by a worker that carries on after the upgrade,
    // another entity's event waiting.
    c.batch_execute(
        "SELECT webhook_enqueue('orders', 'o1', 'order.paid', '{\"customer\": \"cus_1\", \"seq\": 1}'::jsonb);
         SELECT webhook_enqueue('orders', 'o2', 'order.paid', '{\"customer\": \"cus_1\", \"seq\": 2}'::jsonb);
         SELECT webhook_enqueue('orders', 'o3', 'order.paid', '{\"customer\": \"cus_2\", \"seq\": 1}'::jsonb);
         SELECT webhook_complete(id) FROM webhook_next(1, 'default', 'orders');",
    )
    .unwrap();
    let leased = c
        .query_one(
            "SELECT id::text, event_id FROM webhook_next(1, 'default', 'orders', lease => '1 hour')",
            &[],
        )
        .unwrap();
    assert_eq!(leased.get::<_, String>(1), "o2");
    // A finished request under an idempotency key; metrics and alerts.
    c.batch_execute(
        "SELECT idempotency_finish(request_id, 201, '{\"order\": 42}')
           FROM idempotency_begin('api', 'key-before-upgrade', 'fp-1');
         SELECT webhook_metrics_rollup();
         SELECT webhook_alerts_evaluate();",
    )
    .unwrap();
    let version = c
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    Before {
        rows: webhook_rows(c),
        lease: leased.get(0),
        version,
    }
}

/// The database on the new major: as it was, and answering as it did.
fn answers_on_the_new_major(cluster: &Cluster, db: &str, before: &Before, how: &str) {
    let mut c = cluster.connect(db);
    let server: i32 = c
        .query_one(
            "SELECT current_setting('server_version_num')::int / 10000",
            &[],
        )
        .unwrap()
        .get(0);
    let new_major = bindir_of(&env("NEW_PG_CONFIG"));
    assert!(cluster.bindir == new_major, "{how}: runs on the new major");
    let version: String = c
        .query_one(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_webhook_inbox'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(version, before.version, "{how}: the extension's version");
    assert_same_tables(&before.rows, &webhook_rows(&mut c), how);
    eprintln!("{how}: every row of the extension's tables as it was, on PostgreSQL {server}");

    // The worker that held a lease completes it; the entity goes on in
    // order, its watermark kept.
    c.execute("SELECT webhook_complete($1::text::uuid)", &[&before.lease])
        .unwrap_or_else(|e| panic!("{how}: the lease taken before: {}", message(&e)));
    let next: Vec<String> = c
        .query(
            "SELECT event_id FROM webhook_next(10, 'default', 'orders')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(next, ["o3"], "{how}: what is left of the inbox");
    let mark = c
        .query_one(
            "SELECT order_value::text, event_id FROM webhook.watermarks
              WHERE provider = 'orders' AND entity_key = 'cus_1'",
            &[],
        )
        .unwrap();
    assert_eq!(
        (mark.get::<_, String>(0), mark.get::<_, String>(1)),
        ("2".to_string(), "o2".to_string()),
        "{how}: the entity's watermark moved on from the one kept"
    );
    // The finished request's response comes back.
    let replayed = c
        .query_one(
            "SELECT outcome, http_status, response_body FROM idempotency_begin('api', 'key-before-upgrade', 'fp-1')",
            &[],
        )
        .unwrap();
    assert_eq!(
        (
            replayed.get::<_, Option<i32>>(1),
            replayed.get::<_, Option<String>>(2)
        ),
        (Some(201), Some(r#"{"order": 42}"#.to_string())),
        "{how}: the finished request, replayed ({})",
        replayed.get::<_, String>(0)
    );
    // Metrics and alerts read and roll up; a new day's partition is made.
    c.batch_execute(
        "SELECT webhook_metrics_rollup();
         SELECT webhook_alerts_evaluate();
         SELECT webhook_create_partitions(3);
         ALTER EXTENSION pg_webhook_inbox UPDATE;",
    )
    .unwrap_or_else(|e| panic!("{how}: {}", message(&e)));
    let series: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook_metrics() WHERE metric = 'webhook_deliveries_total'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!(series > 0, "{how}: the counters carried over");
    // The application role, over its own connection: processed events are
    // duplicates with their results, the secrets verify, failed ones retry.
    let mut app = cluster
        .config(db)
        .user("app_role")
        .connect(postgres::NoTls)
        .unwrap();
    answers_as_before(&mut app, &history());
}

/// Whether the old server stamps every column with the attribute option
/// `pg_attver`, which no other build of PostgreSQL knows (some
/// distribution builds of 15 do): a restore into the new major refuses
/// every table so stamped, the extension's or not.
fn stamps_pg_attver(c: &mut Client) -> bool {
    c.batch_execute("CREATE TEMP TABLE attver_probe (a int)")
        .unwrap();
    c.query_one(
        "SELECT coalesce(bool_or(o LIKE 'pg_attver=%'), false)
           FROM pg_attribute, unnest(attoptions) AS o
          WHERE attrelid = 'attver_probe'::regclass",
        &[],
    )
    .unwrap()
    .get(0)
}

/// A schema dump without the option `pg_attver` (see stamps_pg_attver).
fn without_pg_attver(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    for line in sql.split_inclusive('\n') {
        let stripped = strip_pg_attver(line);
        if !stripped.trim_end().ends_with("SET ();") {
            out.push_str(&stripped);
        }
    }
    out
}

fn strip_pg_attver(line: &str) -> String {
    let Some(at) = line.find("pg_attver=") else {
        return line.to_string();
    };
    let digits = line[at + "pg_attver=".len()..]
        .find(|ch: char| !ch.is_ascii_digit())
        .map_or(line.len(), |n| at + "pg_attver=".len() + n);
    let (mut start, mut end) = (at, digits);
    if line[end..].starts_with(", ") {
        end += 2;
    } else if line[..start].ends_with(", ") {
        start -= 2;
    }
    strip_pg_attver(&format!("{}{}", &line[..start], &line[end..]))
}

/// The new major's programs for pg_upgrade: its own, except pg_restore
/// where the old server stamps `pg_attver`: there a pg_restore that turns
/// the archive into SQL, drops the option, and runs it with psql.
fn upgrade_programs(dir: &Path, stamped: bool) -> PathBuf {
    let new_bin = bindir_of(&env("NEW_PG_CONFIG"));
    if !stamped {
        return new_bin;
    }
    let shim = fresh_dir(&dir.join("new-bin"));
    for entry in std::fs::read_dir(&new_bin).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() != "pg_restore" {
            std::os::unix::fs::symlink(entry.path(), shim.join(entry.file_name())).unwrap();
        }
    }
    let script = format!(
        r#"#!/bin/bash
# pg_restore for pg_upgrade, without the attribute option pg_attver.
set -o pipefail
real={bin}
for a in "$@"; do case $a in -V|--version) exec "$real/pg_restore" "$@";; esac; done
conn=(); opts=(); file=
while [ $# -gt 0 ]; do
  case $1 in
    --host|--port|--username|--dbname) conn+=("$1" "$2"); shift 2;;
    --create|--clean) opts+=("$1"); shift;;
    --exit-on-error|--verbose|--transaction-size=*) shift;;
    *) file=$1; shift;;
  esac
done
"$real/pg_restore" "${{opts[@]}}" -f - "$file" \
  | sed -E 's/pg_attver=[0-9]+, //; s/, pg_attver=[0-9]+//; /SET \(pg_attver=[0-9]+\);$/d' \
  | "$real/psql" -X -q -v ON_ERROR_STOP=1 "${{conn[@]}}"
"#,
        bin = new_bin.display()
    );
    let path = shim.join("pg_restore");
    std::fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    shim
}

/// A copy of a stopped cluster's directory, the server's user's.
fn copy_cluster(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    let status = server_command("cp")
        .arg("-a")
        .arg(from)
        .arg(to)
        .status()
        .unwrap();
    assert!(status.success(), "copy {from:?}");
}

#[test]
fn pg_upgrade_and_dump_restore_to_the_new_major_keep_everything() {
    let dir = fresh_dir(&PathBuf::from(env("MAJOR_UPGRADE_DIR")));
    let port: u16 = env("MAJOR_UPGRADE_PORT").parse().unwrap();
    let old_bin = bindir_of(&env("OLD_PG_CONFIG"));
    let new_bin = bindir_of(&env("NEW_PG_CONFIG"));
    let cluster = |name: &str, bindir: &Path, port: u16| {
        let place = fresh_dir(&dir.join(name));
        Cluster {
            bindir: bindir.to_path_buf(),
            data: place.join("data"),
            port,
            options: "-c fsync=off".into(),
        }
    };
    let configure = |pg_config: &str| {
        let out = std::process::Command::new(pg_config)
            .arg("--configure")
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).contains("--with-lz4")
    };
    let pglz = configure(&env("OLD_PG_CONFIG")) && !configure(&env("NEW_PG_CONFIG"));

    // Data checksums on both: PostgreSQL 18's initdb turns them on by
    // default, and pg_upgrade needs the two clusters alike.
    let old = cluster("old", &old_bin, port);
    old.init(&["-k"]);
    let _old_up = StopOnDrop(vec![old.clone()]);
    old.start();
    old.connect("postgres")
        .batch_execute(&format!("CREATE DATABASE {DB}"))
        .unwrap();
    let mut c = old.connect(DB);
    let stamped = stamps_pg_attver(&mut c);
    let before = fill(&mut c, pglz);
    drop(c);
    old.stop("fast");
    if stamped {
        eprintln!(
            "the old server stamps every column with the attribute option pg_attver, which the new \
             major does not know: its restores drop it"
        );
    }
    if pglz {
        eprintln!("the new major has no lz4: the archive compressed with pglz from its first row");
    }
    let programs = upgrade_programs(&dir, stamped);

    // Link mode moves the old cluster's files: it upgrades a copy.
    let old_for_link = dir.join("old-for-link");
    copy_cluster(old.data.parent().unwrap(), &old_for_link);
    for (mode, from, new_port) in [
        ("--copy", old.data.clone(), port + 1),
        ("--link", old_for_link.join("data"), port + 2),
    ] {
        let new = cluster(&format!("new{mode}"), &new_bin, new_port);
        new.init(&["-k"]);
        let _new_up = StopOnDrop(vec![new.clone()]);
        let started = std::time::Instant::now();
        program_in(
            &programs,
            new.data.parent().unwrap(),
            "pg_upgrade",
            &[
                "-b",
                old_bin.to_str().unwrap(),
                "-B",
                programs.to_str().unwrap(),
                "-d",
                from.to_str().unwrap(),
                "-D",
                new.data.to_str().unwrap(),
                "-p",
                &port.to_string(),
                "-P",
                &new_port.to_string(),
                "-s",
                new.data.parent().unwrap().to_str().unwrap(),
                mode,
            ],
        );
        eprintln!("pg_upgrade {mode}: {:?}", started.elapsed());
        new.start();
        answers_on_the_new_major(&new, DB, &before, &format!("pg_upgrade {mode}"));
        if mode == "--copy" {
            // The old cluster is intact after a copy: dump it with the
            // new major's pg_dump (as PostgreSQL advises) into the new one.
            old.start();
            let dump = program_in(
                &new_bin,
                &dir,
                "pg_dump",
                &[
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &port.to_string(),
                    "-U",
                    "postgres",
                    DB,
                ],
            );
            old.stop("fast");
            let sql = String::from_utf8(dump.stdout).unwrap();
            let sql = if stamped {
                without_pg_attver(&sql)
            } else {
                sql
            };
            let file = new.data.parent().unwrap().join("dump.sql");
            std::fs::write(&file, sql).unwrap();
            let mut admin = new.connect("postgres");
            admin.batch_execute("CREATE DATABASE restored").unwrap();
            program_in(
                &new_bin,
                &dir,
                "psql",
                &[
                    "-X",
                    "-q",
                    "-v",
                    "ON_ERROR_STOP=1",
                    "-h",
                    "127.0.0.1",
                    "-p",
                    &new_port.to_string(),
                    "-U",
                    "postgres",
                    "-d",
                    "restored",
                    "-f",
                    file.to_str().unwrap(),
                ],
            );
            answers_on_the_new_major(&new, "restored", &before, "pg_dump and restore");
        }
        new.stop("fast");
    }
    // Passed: the clusters go (see .ci/pg-temp).
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_pg_attver_filter_drops_the_option_and_nothing_else() {
    let dump =
        "ALTER TABLE ONLY \"webhook\".\"alerts\" ALTER COLUMN \"id\" SET (pg_attver=29916888);\n\
                ALTER TABLE ONLY \"t\" ALTER COLUMN \"a\" SET (pg_attver=12, n_distinct=5);\n\
                ALTER TABLE ONLY \"t\" ALTER COLUMN \"b\" SET (n_distinct=5, pg_attver=12);\n\
                INSERT INTO t VALUES ('pg_attver is a word');\n";
    assert_eq!(
        without_pg_attver(dump),
        "ALTER TABLE ONLY \"t\" ALTER COLUMN \"a\" SET (n_distinct=5);\n\
         ALTER TABLE ONLY \"t\" ALTER COLUMN \"b\" SET (n_distinct=5);\n\
         INSERT INTO t VALUES ('pg_attver is a word');\n"
    );
}

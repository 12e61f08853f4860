//! Shared by the client-side suites: a real server (from PGHOST, PGPORT,
//! PGUSER, as `make test` sets them), a database of each suite's own with
//! the extension installed, and a webhook handler written the way the
//! README tells users to write one.
#![allow(dead_code)]

use postgres::{Client, Config, NoTls};
use std::sync::OnceLock;
use std::time::Duration;

/// The test server's connection settings (PGHOST, PGPORT, PGUSER), no
/// database yet.
pub fn base_config() -> Config {
    let env = |k: &str, d: &str| std::env::var(k).unwrap_or_else(|_| d.to_string());
    let mut config = Config::new();
    config
        .host(&env("PGHOST", "127.0.0.1"))
        .port(
            env("PGPORT", "5432")
                .parse()
                .expect("PGPORT is a port number"),
        )
        .user(&env("PGUSER", "postgres"))
        .connect_timeout(Duration::from_secs(10));
    if let Ok(password) = std::env::var("PGPASSWORD") {
        config.password(password);
    }
    config
}

static DATABASE: OnceLock<String> = OnceLock::new();

/// A role of the server's (roles are shared by every database), created
/// once; `login`: it connects as itself.
pub fn ensure_role(client: &mut Client, name: &str, login: bool) {
    let login = if login { "LOGIN" } else { "NOLOGIN" };
    client
        .batch_execute(&format!(
            "DO $$ BEGIN
                 IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = '{name}') THEN
                     CREATE ROLE {name} {login};
                 END IF;
             END $$"
        ))
        .unwrap();
}

/// One delivery through `webhook_receive`, headers as JSON and the body as
/// it came: the whole `webhook.receive_result` row, read by column name,
/// with `result` also as text (`result_text`) and `id` as text (`id_text`).
pub fn receive(
    client: &mut impl postgres::GenericClient,
    provider: &str,
    headers: &serde_json::Value,
    body: &[u8],
) -> Result<postgres::Row, postgres::Error> {
    client.query_one(
        "SELECT r.*, r.id::text AS id_text, r.result::text AS result_text
           FROM webhook_receive($1, $2::text::jsonb, $3::bytea) r",
        &[&provider, &headers.to_string(), &body],
    )
}

/// The one bigint a query returns (a count).
pub fn count(client: &mut Client, sql: &str) -> i64 {
    client.query_one(sql, &[]).unwrap().get(0)
}

/// A fresh database `name` with the edition under test installed, for a
/// test that must not share the suite's database (one that changes the
/// extension's tables, whose locks the suite's other tests would meet).
pub fn installed_database(name: &str) -> Client {
    match portable() {
        false => {
            let mut db = empty_database(name);
            db.batch_execute("CREATE EXTENSION pg_webhook_inbox")
                .unwrap();
            db
        }
        true => portable_database(name),
    }
}

/// Create (fresh) the suite's database with the extension and a table the
/// handlers write their side effects to. Call once per test binary; later
/// calls return the same name.
pub fn database(name: &str) -> &'static str {
    DATABASE.get_or_init(|| {
        let mut db = installed_database(name);
        db.batch_execute(
            "CREATE TABLE side_effects (
                 provider text NOT NULL,
                 event_id text NOT NULL,
                 done_at  timestamptz NOT NULL DEFAULT clock_timestamp()
             );",
        )
        .unwrap();
        db.batch_execute(SQL_HANDLER).unwrap();
        name.to_string()
    })
}

/// A connection to the suite's database. A claim never waits for another
/// transaction, so a lock wait past a few seconds is a bug: `lock_timeout`
/// turns it into a failed test instead of a hung one.
pub fn connect(db: &str) -> Client {
    try_connect(db).expect("connect to the suite's database")
}

pub fn try_connect(db: &str) -> Result<Client, postgres::Error> {
    base_config()
        .dbname(db)
        .options("-c lock_timeout=5s")
        .connect(NoTls)
}

/// A connection as another role (trust authentication, as on the test
/// servers), to a database given by name.
pub fn connect_as(db: &str, user: &str) -> Client {
    base_config()
        .dbname(db)
        .user(user)
        .options("-c lock_timeout=5s")
        .connect(NoTls)
        .unwrap_or_else(|e| panic!("connect to {db} as {user}: {e}"))
}

/// A fresh, empty database for a suite that installs the extension
/// itself (to stage what exists before `CREATE EXTENSION`).
pub fn empty_database(name: &str) -> Client {
    let mut admin = base_config()
        .dbname(&std::env::var("PGDATABASE").unwrap_or_else(|_| "postgres".into()))
        .connect(NoTls)
        .expect("connect to the test server (is it running? see `make test`)");
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .unwrap();
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    base_config().dbname(name).connect(NoTls).unwrap()
}

/// The versions recorded in `sql/RELEASES`, oldest first.
pub fn published_releases() -> Vec<String> {
    let mut versions: Vec<String> = include_str!("../../sql/RELEASES")
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_string)
        .collect();
    versions.sort_by_key(|v| release(v));
    versions.dedup();
    versions
}

/// The last version recorded in `sql/RELEASES`.
pub fn last_published() -> String {
    published_releases()
        .pop()
        .expect("sql/RELEASES records a release")
}

/// A version as numbers, to order and compare releases: as text, 0.10.0
/// would come before 0.8.0.
pub fn release(version: &str) -> (u32, u32, u32) {
    let mut parts = version
        .split('.')
        .map(|p| p.parse::<u32>().expect("a version of three numbers"));
    let mut next = || parts.next().expect("a version of three numbers");
    (next(), next(), next())
}
/// Whether the suites run against the portable edition (`make
/// test-portable` sets `WEBHOOK_EDITION=portable`) rather than the
/// compiled one.
pub fn portable() -> bool {
    std::env::var("WEBHOOK_EDITION").is_ok_and(|e| e == "portable")
}

/// The portable edition's plain script (portable/build), built once per
/// test binary into the target directory.
pub fn portable_script() -> &'static std::path::Path {
    static SCRIPT: OnceLock<std::path::PathBuf> = OnceLock::new();
    SCRIPT.get_or_init(|| {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let out = root.join("target").join("portable");
        let status = std::process::Command::new("python3")
            .arg(root.join("portable").join("build"))
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .status()
            .expect("run portable/build");
        assert!(status.success(), "portable/build failed");
        let version = env!("CARGO_PKG_VERSION");
        out.join(format!("pg_webhook_inbox-plain--{version}.sql"))
    })
}

/// Run a script with psql on the test server, as `user`, in `db`.
pub fn psql_file(db: &str, user: &str, script: &std::path::Path) {
    let script = script.to_str().expect("a script path in UTF-8");
    client_program(
        "psql",
        &[
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-o",
            "/dev/null",
            "-d",
            db,
            "-U",
            user,
            "-f",
            script,
        ],
    );
}

/// Whether the test server has pgcrypto, which the portable edition
/// needs; if not, what the test did not check is said.
pub fn pgcrypto_available(unchecked: &str) -> bool {
    let mut admin = connect("postgres");
    let available = count(
        &mut admin,
        "SELECT count(*) FROM pg_available_extensions WHERE name = 'pgcrypto'",
    ) > 0;
    if !available {
        eprintln!("NOT CHECKED: {unchecked}: this server has no pgcrypto, so the portable edition cannot be installed");
    }
    available
}

/// A fresh database with the portable edition installed from its plain
/// script, by the database's owner.
pub fn portable_database(name: &str) -> Client {
    let mut db = empty_database(name);
    psql_file(
        name,
        &std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into()),
        portable_script(),
    );
    db.batch_execute("SELECT 1").unwrap();
    db
}

/// The scheme matrix: every scheme's genuine delivery and every change a
/// sender can make to it (src/schemes/genuine.rs), as `make` exported it
/// into `SCHEME_MATRIX`; each line has its signing time (`at`).
pub fn scheme_matrix() -> Vec<serde_json::Value> {
    let path = std::env::var("SCHEME_MATRIX").expect(
        "SCHEME_MATRIX names the file the scheme matrix was exported to (make test sets it)",
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

pub mod cluster;
pub mod examples;
pub mod ingress;
pub mod pooler;
pub mod traffic;

/// Deliveries signed the way each provider signs them.
pub mod sign {
    use hmac::{Hmac, Mac};

    pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> Vec<u8> {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).unwrap();
        for p in parts {
            mac.update(p);
        }
        mac.finalize().into_bytes().to_vec()
    }

    pub fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    pub fn stripe(body: &str, ts: i64, secret: &str) -> serde_json::Value {
        let sig = hex::encode(hmac_sha256(
            secret.as_bytes(),
            &[format!("{ts}.").as_bytes(), body.as_bytes()],
        ));
        serde_json::json!({ "Stripe-Signature": format!("t={ts},v1={sig}") })
    }

    pub fn github(delivery: &str, event: &str, body: &str, secret: &str) -> serde_json::Value {
        let sig = hex::encode(hmac_sha256(secret.as_bytes(), &[body.as_bytes()]));
        serde_json::json!({ "X-GitHub-Delivery": delivery, "X-GitHub-Event": event,
                            "X-Hub-Signature-256": format!("sha256={sig}") })
    }

    /// Standard Webhooks in the `svix-*` header family; `secret` is
    /// `whsec_` followed by the base64 of the key.
    pub fn standard(msg_id: &str, body: &str, ts: i64, secret: &str) -> serde_json::Value {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = b64.decode(secret.strip_prefix("whsec_").unwrap()).unwrap();
        let sig = b64.encode(hmac_sha256(
            &key,
            &[format!("{msg_id}.{ts}.").as_bytes(), body.as_bytes()],
        ));
        serde_json::json!({ "svix-id": msg_id, "svix-timestamp": ts.to_string(), "svix-signature": format!("v1,{sig}") })
    }

    /// The suite's PayPal test signer's certificate (src/schemes/testdata),
    /// registered as PayPal keys are: under the URL deliveries name it by.
    pub fn paypal_secret(url: &str) -> String {
        format!(
            "{url}\n{}",
            include_str!("../../src/schemes/testdata/paypal-test-signer.pem")
        )
    }

    /// The test signer's RSA-SHA256 signature of what PayPal signs: the
    /// transmission id and time, the webhook id and the body's CRC32.
    pub fn paypal_signature(
        transmission: &str,
        time: &str,
        webhook_id: &str,
        body: &[u8],
    ) -> Vec<u8> {
        use rsa::pkcs8::DecodePrivateKey;
        use rsa::signature::{SignatureEncoding, Signer};
        let key = rsa::RsaPrivateKey::from_pkcs8_der(include_bytes!(
            "../../src/schemes/testdata/paypal-test-signer.key.der"
        ))
        .unwrap();
        let line = format!(
            "{transmission}|{time}|{webhook_id}|{}",
            crc32fast::hash(body)
        );
        rsa::pkcs1v15::SigningKey::<sha2::Sha256>::new(key)
            .sign(line.as_bytes())
            .to_vec()
    }

    /// PayPal's headers for a delivery carrying `signature`, naming the
    /// certificate at `url`.
    pub fn paypal(
        transmission: &str,
        time: &str,
        url: &str,
        signature: &[u8],
    ) -> serde_json::Value {
        use base64::Engine;
        serde_json::json!({
            "PAYPAL-TRANSMISSION-ID": transmission, "PAYPAL-TRANSMISSION-TIME": time,
            "PAYPAL-AUTH-ALGO": "SHA256withRSA", "PAYPAL-CERT-URL": url,
            "PAYPAL-TRANSMISSION-SIG": base64::engine::general_purpose::STANDARD.encode(signature),
        })
    }

    /// Unix seconds as an RFC 3339 UTC timestamp (days to a civil date by
    /// Howard Hinnant's algorithm).
    pub fn rfc3339(secs: i64) -> String {
        let (days, rest) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z - era * 146_097;
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
            rest / 3600,
            rest % 3600 / 60,
            rest % 60
        )
    }
}

/// What a database that lived through something (an upgrade, a dump and
/// restore) was given before: a processed Stripe event with a stored
/// result, a processed GitHub delivery, and a failed event.
pub struct History<'a> {
    pub stripe_secret: &'a str,
    pub stripe_body: &'a str,
    pub stripe_result: &'a str,
    pub github_secret: &'a str,
    pub github_delivery: &'a str,
    pub github_body: &'a str,
    pub failed_event: &'a str,
}

/// That database still answers as it did, to an application role over its
/// own connection: the processed events are duplicates (with the stored
/// result), the GitHub body is still bound to its id, the secrets still
/// verify a new delivery, and the failed event is retried.
pub fn answers_as_before(app: &mut Client, h: &History<'_>) {
    let receive = |app: &mut Client, provider: &str, headers: serde_json::Value, body: &str| {
        let row = app
            .query_one(
                "SELECT status, reason, result::text FROM webhook_receive($1, $2::text::jsonb, $3::bytea)",
                &[&provider, &headers.to_string(), &body.as_bytes()],
            )
            .unwrap();
        (
            row.get::<_, String>(0),
            row.get::<_, String>(1),
            row.get::<_, Option<String>>(2),
        )
    };
    let stripe = sign::stripe(h.stripe_body, sign::now(), h.stripe_secret);
    assert_eq!(
        receive(app, "stripe", stripe, h.stripe_body),
        (
            "duplicate".into(),
            "ok".into(),
            Some(h.stripe_result.into())
        ),
        "a processed event stays a duplicate, with its stored result"
    );
    let genuine = sign::github(h.github_delivery, "push", h.github_body, h.github_secret);
    assert_eq!(
        receive(app, "github", genuine, h.github_body).0,
        "duplicate"
    );
    let replay = sign::github("gh-replayed-later", "push", h.github_body, h.github_secret);
    assert_eq!(
        receive(app, "github", replay, h.github_body).1,
        "replayed",
        "the GitHub body is still bound to its id"
    );
    let body = r#"{"id":"evt_new_after_all","type":"invoice.paid"}"#;
    let fresh = sign::stripe(body, sign::now(), h.stripe_secret);
    assert_eq!(
        receive(app, "stripe", fresh, body).0,
        "claimed",
        "the secret verifies"
    );
    let retry: String = app
        .query_one(
            "SELECT status FROM webhook_claim('stripe', $1, 't', '{\"a\": 1}'::jsonb, NULL)",
            &[&h.failed_event],
        )
        .unwrap()
        .get(0);
    assert_eq!(retry, "retry", "the failed event is retried");
}

/// The result a handled delivery stores (`handled`).
pub const HANDLED: &str = r#"{"handled": true}"#;

/// A delivery received and completed with HANDLED as its result, in one
/// transaction, as a handler does.
pub fn handled(client: &mut Client, provider: &str, headers: &serde_json::Value, body: &str) {
    let mut tx = client.transaction().unwrap();
    let row = receive(&mut tx, provider, headers, body.as_bytes()).unwrap();
    assert_eq!(row.get::<_, String>("status"), "claimed");
    tx.execute(
        "SELECT webhook_complete($1::text::uuid, $2::text::jsonb)",
        &[&row.get::<_, String>("id_text"), &HANDLED],
    )
    .unwrap();
    tx.commit().unwrap();
}

/// The SQLSTATE of a server error.
pub fn sql_state(err: &postgres::Error) -> Option<&str> {
    err.code().map(|c| c.code())
}

/// The server's message ("db error" is all `Display` says).
pub fn message(err: &postgres::Error) -> String {
    err.as_db_error()
        .map(|db| db.message().to_string())
        .unwrap_or_else(|| err.to_string())
}

pub fn payload(event_id: &str) -> String {
    format!(r#"{{"id": "{event_id}", "type": "invoice.paid", "data": {{"amount": 1000}}}}"#)
}

/// What the handler answered the provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// 200 after doing the work.
    Done,
    /// 200 without doing anything: already processed.
    Duplicate,
    /// 409: another attempt is live; the provider will retry.
    InProgress,
    /// 500: the work failed and was recorded with webhook_fail.
    Failed,
}

impl Answer {
    pub fn acknowledged(self) -> bool {
        matches!(self, Answer::Done | Answer::Duplicate)
    }
}

pub struct Claim {
    pub id: String,
    pub claimed: bool,
    pub status: String,
    pub attempts: i32,
}

pub fn claim_in(
    tx: &mut impl postgres::GenericClient,
    provider: &str,
    event_id: &str,
    lease: Option<&str>,
) -> Result<Claim, postgres::Error> {
    let row = tx.query_one(
        "SELECT id::text, claimed, status, attempts
           FROM webhook_claim($1, $2, 'invoice.paid', $3::text, 'v1=test', $4::text::interval)",
        &[&provider, &event_id, &payload(event_id), &lease],
    )?;
    Ok(Claim {
        id: row.get(0),
        claimed: row.get(1),
        status: row.get(2),
        attempts: row.get(3),
    })
}

/// The one-transaction handler: claim, side effect and completion commit
/// together or not at all. `hold` keeps the transaction open after the
/// side effect, as slow business logic would.
pub fn deliver(client: &mut Client, provider: &str, event_id: &str, hold: Duration) -> Answer {
    try_deliver(client, provider, event_id, hold).expect("handler transaction")
}

pub fn try_deliver(
    client: &mut Client,
    provider: &str,
    event_id: &str,
    hold: Duration,
) -> Result<Answer, postgres::Error> {
    let mut tx = client.transaction()?;
    let claim = claim_in(&mut tx, provider, event_id, None)?;
    if !claim.claimed {
        tx.commit()?;
        return Ok(match claim.status.as_str() {
            "duplicate" => Answer::Duplicate,
            "in_progress" => Answer::InProgress,
            other => panic!("unexpected claim status {other}"),
        });
    }
    tx.execute(
        "INSERT INTO side_effects (provider, event_id) VALUES ($1, $2)",
        &[&provider, &event_id],
    )?;
    if !hold.is_zero() {
        std::thread::sleep(hold);
    }
    tx.execute("SELECT webhook_complete($1::text::uuid)", &[&claim.id])?;
    tx.commit()?;
    Ok(Answer::Done)
}

/// The provider's retry loop: deliver until acknowledged.
pub fn deliver_until_acknowledged(client: &mut Client, provider: &str, event_id: &str) -> usize {
    for attempt in 1..=200 {
        if deliver(client, provider, event_id, Duration::ZERO).acknowledged() {
            return attempt;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{provider}/{event_id} was never acknowledged");
}

pub fn side_effects(client: &mut Client, provider: &str, event_id: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM side_effects WHERE provider = $1 AND event_id = $2",
            &[&provider, &event_id],
        )
        .unwrap()
        .get(0)
}

pub fn event_state(client: &mut Client, provider: &str, event_id: &str) -> (String, i32) {
    let row = client
        .query_one(
            "SELECT status::text, attempts FROM webhook.events WHERE provider = $1 AND event_id = $2",
            &[&provider, &event_id],
        )
        .unwrap();
    (row.get(0), row.get(1))
}

/// The archive's processing_status of each delivery of an event, in order.
pub fn archive(client: &mut Client, provider: &str, event_id: &str) -> Vec<String> {
    client
        .query(
            "SELECT claim_status || ':' || processing_status FROM webhook.deliveries
              WHERE provider = $1 AND event_id = $2 ORDER BY created_at, id",
            &[&provider, &event_id],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// A handler as a SQL function, for clients that can only send one query
/// string (the raw-protocol client below, psql): the same one-transaction
/// pattern, answering the HTTP status.
pub const SQL_HANDLER: &str = r#"
CREATE FUNCTION handle(p_provider text, p_event_id text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    c record;
BEGIN
    SELECT * INTO c FROM webhook_claim(p_provider, p_event_id, 'invoice.paid',
                                       jsonb_build_object('id', p_event_id), NULL);
    IF c.status = 'duplicate' THEN RETURN 200; END IF;
    IF c.status = 'in_progress' THEN RETURN 409; END IF;
    INSERT INTO side_effects (provider, event_id) VALUES (p_provider, p_event_id);
    PERFORM webhook_complete(c.id);
    RETURN 200;
END
$$;
"#;

// ---------------------------------------------------------------------------
// Figures of a hardening scenario.

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Scenarios that count a whole provider's side effects, or stop the
/// server, must not overlap: each holds this for its duration.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Counts one scenario's deliveries and, at the end, checks and reports
/// what the server holds: side effects, duplicates, lost events and
/// backends that crashed while it ran.
pub struct Scenario {
    name: &'static str,
    provider: &'static str,
    crashes_before: usize,
    deliveries: std::sync::atomic::AtomicUsize,
}

#[derive(Debug)]
pub struct Figures {
    pub deliveries: usize,
    pub events: usize,
    pub side_effects: i64,
    pub duplicates: i64,
    pub lost: i64,
    pub crashed: usize,
}

impl Scenario {
    pub fn start(name: &'static str, provider: &'static str) -> Self {
        Scenario {
            name,
            provider,
            crashes_before: backend_crashes(),
            deliveries: 0.into(),
        }
    }

    pub fn sent(&self, n: usize) {
        self.deliveries
            .fetch_add(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Figures for `events` distinct events sent under this scenario's
    /// provider. Panics unless duplicates = lost = crashed = 0.
    pub fn finish(self, client: &mut Client, events: usize) -> Figures {
        let row = client
            .query_one(
                "SELECT count(*), coalesce(sum(n), 0)::bigint, coalesce(sum(n - 1), 0)::bigint
                   FROM (SELECT event_id, count(*) AS n FROM side_effects
                          WHERE provider = $1 GROUP BY event_id) per_event",
                &[&self.provider],
            )
            .unwrap();
        let with_effect: i64 = row.get(0);
        let figures = Figures {
            deliveries: self.deliveries.load(std::sync::atomic::Ordering::Relaxed),
            events,
            side_effects: row.get(1),
            duplicates: row.get(2),
            lost: events as i64 - with_effect,
            crashed: backend_crashes() - self.crashes_before,
        };
        eprintln!("{}: {figures:?}", self.name);
        report_line(
            "HARDENING_REPORT",
            &format!(
                "{}\t{}\t{}\t{}\t{}\t{}\t{}",
                self.name,
                figures.deliveries,
                figures.events,
                figures.side_effects,
                figures.duplicates,
                figures.lost,
                figures.crashed
            ),
        );
        assert_eq!(
            figures.duplicates, 0,
            "{}: duplicated side effects",
            self.name
        );
        assert_eq!(figures.lost, 0, "{}: lost events", self.name);
        assert_eq!(figures.crashed, 0, "{}: crashed backends", self.name);
        figures
    }
}

/// Append a line of figures to the file the environment variable `var`
/// names, when it is set (`make hardening` sets it).
fn report_line(var: &str, line: &str) {
    use std::io::Write;
    if let Ok(path) = std::env::var(var) {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        writeln!(file, "{line}").unwrap();
    }
}

/// One attack on the hardening report: how often it was tried, how often it
/// got through (must be 0), the slowest answer the server gave it, and the
/// backends that crashed meanwhile (must be 0).
pub struct Attack {
    name: &'static str,
    crashes_before: usize,
    attempts: usize,
    got_through: usize,
    slowest: Duration,
}

impl Attack {
    pub fn start(name: &'static str) -> Self {
        Attack {
            name,
            crashes_before: backend_crashes(),
            attempts: 0,
            got_through: 0,
            slowest: Duration::ZERO,
        }
    }

    /// Run one attempt, timed; `through` judges its outcome.
    pub fn attempt<T>(&mut self, run: impl FnOnce() -> T, through: impl FnOnce(&T) -> bool) -> T {
        let started = std::time::Instant::now();
        let outcome = run();
        self.slowest = self.slowest.max(started.elapsed());
        self.attempts += 1;
        if through(&outcome) {
            self.got_through += 1;
        }
        outcome
    }

    pub fn finish(self) {
        let crashed = backend_crashes() - self.crashes_before;
        let (name, attempts, through, slowest) =
            (self.name, self.attempts, self.got_through, self.slowest);
        eprintln!("{name}: {attempts} attempts, {through} got through, slowest {slowest:?}");
        report_line(
            "HARDENING_ATTACKS",
            &format!(
                "{name}\t{attempts}\t{through}\t{}\t{crashed}",
                slowest.as_millis()
            ),
        );
        assert!(attempts > 0, "{name}: never attempted");
        assert_eq!(through, 0, "{name}: the attack got through");
        assert_eq!(crashed, 0, "{name}: a backend crashed");
    }
}

/// Backends the postmaster saw die of a signal (a segfault, an abort, a
/// panic that escaped): PostgreSQL logs each one, then restarts every
/// backend. Terminations we ask for (pg_terminate_backend, an immediate
/// shutdown) are logged differently and not counted.
pub fn backend_crashes() -> usize {
    // Without the log nothing can be counted, and a count of 0 would pass
    // the check without having made it.
    let path = std::env::var("PG_SERVER_LOG").expect(
        "counting crashed backends needs the server's log (PG_SERVER_LOG): \
         run the hardening suites through `make hardening`",
    );
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("read the server log {path}: {e}"))
        .lines()
        .filter(|l| l.contains("terminated by signal") || l.contains("was terminated by exception"))
        .count()
}

// ---------------------------------------------------------------------------
// The server itself, for crash tests: only a server started by .ci/pg-temp.

fn server_env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: crash tests need a server started by .ci/pg-temp (make hardening)"
        )
    })
}

fn pg_ctl(args: &[&str]) -> std::process::ExitStatus {
    server_command(std::path::Path::new(&server_env("PG_BINDIR")).join("pg_ctl"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run pg_ctl")
}

/// A server program (pg_ctl, initdb, pg_basebackup) to run as the
/// server's user: PG_SERVER_USER where .ci/pg-temp set it, else
/// `postgres` when the tests run as root (PostgreSQL refuses root).
pub fn server_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    let user = std::env::var("PG_SERVER_USER")
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(|| as_root().then(|| "postgres".to_string()));
    match user {
        Some(user) => {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", &user, "--"]).arg(program);
            c
        }
        None => std::process::Command::new(program),
    }
}

/// Whether the tests run as root.
pub fn as_root() -> bool {
    static ROOT: OnceLock<bool> = OnceLock::new();
    *ROOT.get_or_init(|| {
        let out = std::process::Command::new("id")
            .arg("-u")
            .output()
            .expect("run id");
        String::from_utf8_lossy(&out.stdout).trim() == "0"
    })
}

/// Stop the server the way a power cut would: no checkpoint, no goodbye.
pub fn crash_server() {
    assert!(pg_ctl(&["-D", &server_env("PG_DATA_DIR"), "-m", "immediate", "stop"]).success());
}

pub fn start_server() {
    let status = pg_ctl(&[
        "-D",
        &server_env("PG_DATA_DIR"),
        "-l",
        &server_env("PG_SERVER_LOG"),
        "-o",
        &server_env("PG_SERVER_OPTS"),
        "-w",
        "start",
    ]);
    assert!(status.success(), "server restarted");
}

// ---------------------------------------------------------------------------
// A minimal PostgreSQL protocol client, for dropping a connection with a
// TCP reset at an exact moment, which a driver does not let one do.

pub fn query_then_reset(db: &str, sql: &str, mut before_reset: impl FnMut()) {
    use std::io::{Read, Write};
    let port: u16 = std::env::var("PGPORT")
        .unwrap_or_else(|_| "5432".into())
        .parse()
        .unwrap();
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let user = std::env::var("PGUSER").unwrap_or_else(|_| "postgres".into());

    let mut startup = Vec::new();
    startup.extend_from_slice(&196_608i32.to_be_bytes()); // protocol 3.0
    for (k, v) in [("user", user.as_str()), ("database", db)] {
        startup.extend_from_slice(k.as_bytes());
        startup.push(0);
        startup.extend_from_slice(v.as_bytes());
        startup.push(0);
    }
    startup.push(0);
    let mut msg = ((startup.len() + 4) as i32).to_be_bytes().to_vec();
    msg.extend(startup);
    stream.write_all(&msg).unwrap();

    // Read until ReadyForQuery; trust authentication only.
    loop {
        let mut header = [0u8; 5];
        stream.read_exact(&mut header).unwrap();
        let len = i32::from_be_bytes([header[1], header[2], header[3], header[4]]) as usize - 4;
        let mut body = vec![0u8; len];
        stream.read_exact(&mut body).unwrap();
        match header[0] {
            b'R' => assert_eq!(
                &body[..4],
                &[0, 0, 0, 0],
                "raw client supports trust authentication only"
            ),
            b'E' => panic!(
                "server refused the raw connection: {}",
                String::from_utf8_lossy(&body)
            ),
            b'Z' => break,
            _ => {}
        }
    }

    let mut query = vec![b'Q'];
    query.extend_from_slice(&((sql.len() + 5) as i32).to_be_bytes());
    query.extend_from_slice(sql.as_bytes());
    query.push(0);
    stream.write_all(&query).unwrap();

    before_reset();
    // Linger 0: close sends RST, and whatever the server answered is never read.
    socket2::SockRef::from(&stream)
        .set_linger(Some(Duration::ZERO))
        .unwrap();
    drop(stream);
}

pub fn wait_for(what: &str, mut ready: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !ready() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ---------------------------------------------------------------------------
// The inbox, as a worker uses it.

/// One round of an inbox worker in the one-transaction pattern: lease up
/// to `batch` of `provider`'s events for `consumer`, write each one's side
/// effect and complete it, commit. Returns the event ids it processed
/// (none: nothing was ready).
pub fn work_once(
    client: &mut Client,
    provider: &str,
    consumer: &str,
    batch: i32,
) -> Result<Vec<String>, postgres::Error> {
    work_once_of(client, Some(provider), consumer, batch)
}

/// `work_once` of one provider's queue, or of every provider's (`None`).
pub fn work_once_of(
    client: &mut Client,
    provider: Option<&str>,
    consumer: &str,
    batch: i32,
) -> Result<Vec<String>, postgres::Error> {
    let mut tx = client.transaction()?;
    let leased = tx.query(
        "SELECT id::text, provider, event_id FROM webhook_next($1, $2, $3)",
        &[&batch, &consumer, &provider],
    )?;
    let mut done = Vec::with_capacity(leased.len());
    if leased.is_empty() {
        tx.commit()?;
        return Ok(done);
    }
    // Prepared once a round, as a worker would: parsing and planning them
    // for every event is CPU the other workers of the test need.
    let effect = tx.prepare("INSERT INTO side_effects (provider, event_id) VALUES ($1, $2)")?;
    let complete = tx.prepare("SELECT webhook_complete($1::text::uuid)")?;
    for row in &leased {
        let (lease, provider, event_id): (String, String, String) =
            (row.get(0), row.get(1), row.get(2));
        tx.execute(&effect, &[&provider, &event_id])?;
        tx.execute(&complete, &[&lease])?;
        done.push(event_id);
    }
    tx.commit()?;
    Ok(done)
}

/// Queue `n` events `{prefix}{i}` of `provider`, a thousand per
/// transaction (each queued event holds its lock until its transaction
/// ends, like a claim).
pub fn enqueue_many(client: &mut Client, provider: &str, prefix: &str, n: i32) {
    for first in (1..=n).step_by(1000) {
        let last = (first + 999).min(n);
        client
            .execute(
                "SELECT count(*) FROM generate_series($3::int, $4::int) g,
                        webhook_enqueue($1, $2 || g, 'invoice.paid', jsonb_build_object('n', g))",
                &[&provider, &prefix, &first, &last],
            )
            .unwrap();
    }
}

/// Events of `provider` the inbox still holds unfinished for any consumer.
pub fn unfinished(client: &mut Client, provider: &str) -> i64 {
    client
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE provider = $1 AND status <> 'processed'",
            &[&provider],
        )
        .unwrap()
        .get(0)
}

/// A deterministic shuffle (no RNG crate needed, and runs are
/// reproducible): Fisher–Yates driven by a linear congruential generator.
pub fn shuffle<T>(items: &mut [T], mut seed: u64) {
    for i in (1..items.len()).rev() {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        items.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

// ---------------------------------------------------------------------------
// Metrics.

/// Roll up until everything committed before this call is counted.
pub fn settle(client: &mut Client) {
    let since: std::time::SystemTime = client
        .query_one("SELECT clock_timestamp()", &[])
        .unwrap()
        .get(0);
    wait_for("the metrics rollup to catch up", || {
        client
            .query_one("SELECT webhook_metrics_rollup()", &[])
            .unwrap();
        let until: std::time::SystemTime = client
            .query_one("SELECT counted_until FROM webhook.metric_marks", &[])
            .unwrap()
            .get(0);
        // Past the millisecond too: ids of that millisecond sort after its bound.
        until > since + Duration::from_millis(1)
    });
}

/// Run a client program of the server's (pg_dump, psql) with `args`, as
/// PGUSER.
pub fn client_program(program: &str, args: &[&str]) {
    let path = match std::env::var("PG_BINDIR") {
        Ok(dir) => format!("{dir}/{program}"),
        Err(_) => program.into(),
    };
    let output = std::process::Command::new(path)
        .args(args)
        .output()
        .expect("run a client program");
    assert!(
        output.status.success(),
        "{program} {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The move of docs/managed.md ("Moving to the compiled edition"): the
/// rows of schema webhook of database `source` dumped, and restored into
/// `target`, whose tables are there and empty. Where the source's tables
/// are an extension's (installed through pg_tle), the dump selects the
/// extension too, as the docs say: without it pg_dump leaves their rows
/// out.
pub fn move_rows(source: &str, target: &str, extension: bool) {
    let dump = std::env::temp_dir().join(format!("pgwi-move-{source}-{}.sql", std::process::id()));
    let dump = dump.to_str().unwrap();
    let mut args = vec![
        "--data-only",
        "--schema=webhook",
        "--load-via-partition-root",
        "--exclude-table-data=webhook.metric_marks",
        "--exclude-table-data=webhook.state_key",
        "--exclude-table-data=webhook.maintenance_locks",
        "--exclude-table-data=webhook._public_keys",
    ];
    if extension {
        args.push("--extension=pg_webhook_inbox");
    }
    args.extend(["-d", source, "-f", dump]);
    client_program("pg_dump", &args);
    client_program(
        "psql",
        &[
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "--single-transaction",
            "-d",
            target,
            "-c",
            "SET session_replication_role = replica",
            "-f",
            dump,
            "-c",
            "UPDATE webhook.events SET payload_hash = NULL",
        ],
    );
    let _ = std::fs::remove_file(dump);
}

/// Every row of schema webhook that a move keeps, table by table, in a
/// stable order (the payload digests aside: the editions compute them
/// from different forms of the same document, and a move clears them).
pub fn webhook_rows(client: &mut Client) -> String {
    let tables: Vec<String> = client
        .query(
            "SELECT c.relname::text FROM pg_class c
              WHERE c.relnamespace = 'webhook'::regnamespace AND c.relkind IN ('r', 'p')
                AND NOT c.relispartition AND c.relname NOT IN ('metric_marks', 'state_key', 'maintenance_locks', '_public_keys')
              ORDER BY 1",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    tables
        .iter()
        .map(|t| {
            let rows: Option<String> = client
                .query_one(
                    &format!(
                        "SELECT string_agg(r, E'\\n' ORDER BY r) FROM (
                             SELECT (to_jsonb(x) - 'payload_hash')::text AS r FROM webhook.{t} x) s"
                    ),
                    &[],
                )
                .unwrap()
                .get(0);
            format!("== {t}\n{}", rows.unwrap_or_default())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// Two renderings of tables (lines) the same, or the lines each alone has.
pub fn assert_same_tables(left: &str, right: &str, what: &str) {
    let only = |a: &str, b: &str| -> Vec<String> {
        let theirs: std::collections::HashSet<&str> = b.lines().collect();
        a.lines()
            .filter(|l| !theirs.contains(l))
            .map(str::to_string)
            .collect()
    };
    let (l, r) = (only(left, right), only(right, left));
    assert!(
        l.is_empty() && r.is_empty() && left.lines().count() == right.lines().count(),
        "{what}: the tables differ\n  only in the first:\n    {}\n  only in the second:\n    {}",
        l.join("\n    "),
        r.join("\n    ")
    );
}

/// The commit whose portable edition the upgrade tests start from, until
/// a published release's script is kept in sql/portable/: its twins are
/// an earlier state of this edition (before webhook_next's pick was split
/// by the shape of the call and the queue heads kept in a variable), so
/// the way from it drops functions, adds types and changes languages.
pub const EARLIER_PORTABLE: &str = "783cc4f";

/// The portable edition as it was at EARLIER_PORTABLE, built by that
/// commit's portable/build under the version `label`: the directory of its
/// scripts. None where the checkout has no such commit (a shallow clone).
pub fn earlier_portable(label: &str) -> Option<std::path::PathBuf> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("target").join(format!("portable-{label}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("tree")).unwrap();
    let extracted = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "git -C '{}' archive {EARLIER_PORTABLE} Cargo.toml sql portable | tar -x -C '{}'",
            root.display(),
            dir.join("tree").display()
        ))
        .stderr(std::process::Stdio::null())
        .status()
        .expect("run git archive");
    if !extracted.success() {
        return None;
    }
    let cargo = dir.join("tree").join("Cargo.toml");
    let text = std::fs::read_to_string(&cargo).unwrap();
    let version = format!("version = \"{}\"", env!("CARGO_PKG_VERSION"));
    std::fs::write(
        &cargo,
        text.replacen(&version, &format!("version = \"{label}\""), 1),
    )
    .unwrap();
    let built = std::process::Command::new("python3")
        .arg(dir.join("tree").join("portable").join("build"))
        .arg(dir.join("out"))
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run the earlier portable/build");
    assert!(built.success(), "the earlier portable/build failed");
    Some(dir.join("out"))
}

/// The upgrade from the portable edition's extension script of version
/// `label` in `earlier` (see earlier_portable, or a published release's
/// kept script in sql/portable/) to this version, as portable/build makes
/// it: the directory of its three forms.
pub fn portable_upgrade(earlier: &std::path::Path, label: &str) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = root
        .join("target")
        .join(format!("portable-upgrade-{label}"));
    std::fs::create_dir_all(&out).unwrap();
    let shared = out.join("shared.sql");
    std::fs::write(&shared, shared_changes(earlier, label)).unwrap();
    let built = std::process::Command::new("python3")
        .arg(root.join("portable").join("build"))
        .arg("--upgrade-from")
        .arg(earlier.join(format!("pg_webhook_inbox--{label}.sql")))
        .arg("--from-version")
        .arg(label)
        .arg("--shared")
        .arg(&shared)
        .arg(&out)
        .stdout(std::process::Stdio::null())
        .status()
        .expect("run portable/build");
    assert!(built.success(), "portable/build --upgrade-from failed");
    out
}

/// The shared SQL's changes from version `label` to this one, as the
/// compiled edition's upgrade scripts in sql/ make them. From a published
/// release: its upgrade scripts, one after the other. From the earlier
/// commit (of the version in development, whose upgrade script only
/// grows): what that script gained since, before its closing privilege
/// rule.
fn shared_changes(earlier: &std::path::Path, label: &str) -> String {
    let sql = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let v = env!("CARGO_PKG_VERSION");
    let step_from = |at: &str| -> Option<String> {
        std::fs::read_dir(&sql)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with(&format!("pg_webhook_inbox--{at}--")))
            .max()
    };
    let Some(tree) = label
        .strip_suffix("-earlier")
        .map(|_| earlier.parent().unwrap().join("tree"))
    else {
        let (mut at, mut text) = (label.to_string(), String::new());
        while at != v {
            let step = step_from(&at).unwrap_or_else(|| panic!("no upgrade script from {at}"));
            text += &std::fs::read_to_string(sql.join(&step)).unwrap();
            at = step["pg_webhook_inbox--".len() + at.len() + 2..step.len() - 4].to_string();
        }
        return text;
    };
    let script = std::fs::read_dir(&sql)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.ends_with(&format!("--{v}.sql")) && n.matches("--").count() == 2)
        .expect("the upgrade script to the version in development");
    let closing = "-- The privilege rule (roles.sql) for what this script made.";
    let now = std::fs::read_to_string(sql.join(&script)).unwrap();
    let then = std::fs::read_to_string(tree.join("sql").join(&script)).unwrap();
    let then = &then[..then
        .find(closing)
        .expect("the earlier upgrade script's privilege rule")];
    assert!(
        now.starts_with(then),
        "{script} changed before its end since {EARLIER_PORTABLE}"
    );
    now[then.len()..].to_string()
}

/// The portable edition's functions (attributes, arguments, result, body,
/// privileges, comment) and types, one line each: an upgraded database's
/// must be a fresh install's. pgcrypto's own functions are left out.
pub const PORTABLE_CATALOG: &str = r#"
SELECT 'function ' || p.oid::regprocedure || ' returns ' || coalesce(pg_get_function_result(p.oid), '')
       || ' secdef=' || p.prosecdef || ' volatile=' || p.provolatile::text || ' parallel=' || p.proparallel::text
       || ' strict=' || p.proisstrict || ' lang=' || l.lanname
       || ' config=' || coalesce(array_to_string(p.proconfig, ';'), '')
       || ' args=' || pg_get_function_arguments(p.oid) || ' src=' || md5(p.prosrc)
       || ' body=' || md5(coalesce(pg_get_function_sqlbody(p.oid), ''))
       || ' acl=' || coalesce((SELECT string_agg(a::text, ',' ORDER BY a::text) FROM unnest(p.proacl) a), 'default')
       || ' comment=' || coalesce(obj_description(p.oid, 'pg_proc'), '')
  FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
 WHERE p.pronamespace IN ('webhook'::regnamespace, 'public'::regnamespace)
   AND NOT EXISTS (SELECT FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
                    WHERE d.classid = 'pg_proc'::regclass AND d.objid = p.oid AND d.deptype = 'e'
                      AND x.extname <> 'pg_webhook_inbox')
UNION ALL
SELECT 'type ' || t.oid::regtype || ' ' || coalesce((SELECT string_agg(a.attname || ' ' || format_type(a.atttypid, a.atttypmod), ', ' ORDER BY a.attnum)
                                                       FROM pg_attribute a WHERE a.attrelid = t.typrelid AND a.attnum > 0), '')
  FROM pg_type t
 WHERE t.typnamespace = 'webhook'::regnamespace
   AND (t.typtype = 'e' OR EXISTS (SELECT FROM pg_class c WHERE c.oid = t.typrelid AND c.relkind = 'c'))
"#;

pub fn portable_catalog(client: &mut Client) -> String {
    let mut lines: Vec<String> = client
        .query(PORTABLE_CATALOG, &[])
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    lines.sort();
    lines.join("\n")
}

/// A portable edition in use before its upgrade: a queue with leases
/// taken and events waiting, a claim completed.
pub const PORTABLE_IN_USE: &str = "
    SELECT webhook_create_partitions();
    SELECT count(*) FROM webhook_register_provider('queue', secret => 'q', scheme => 'stripe', inbox => true);
    SELECT count(*) FROM generate_series(1, 5) g,
           webhook_enqueue('queue', 'q_' || g, 'thing', jsonb_build_object('n', g));
    SELECT count(*) FROM webhook_next(2, provider => 'queue');
    SELECT webhook_complete(c.id)
      FROM webhook_claim('queue', 'claimed_before', 'thing', '{\"n\": 0}'::jsonb, NULL) c;";

/// After the upgrade of PORTABLE_IN_USE from `from`, it goes on: the
/// events not leased before are leased now, the claim made before is a
/// duplicate.
pub fn portable_goes_on(c: &mut Client, from: &str) {
    let leased: i64 = c
        .query_one(
            "SELECT count(*) FROM webhook_next(10, provider => 'queue')",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(
        leased, 3,
        "from {from}: the events not leased before the upgrade"
    );
    let status: String = c
        .query_one(
            "SELECT status FROM webhook_claim('queue', 'claimed_before', 'thing', '{\"n\": 0}'::jsonb, NULL)",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(status, "duplicate", "from {from}");
}

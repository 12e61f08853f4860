#![cfg(feature = "client-tests")]
//! webhook-ingress, the HTTP front door, as teams run it: the real binary
//! (INGRESS_BIN) on loopback in front of a real server, connected as an
//! application role granted with webhook_grant_app, sent real HTTP.
//!
//! Every scheme of the catalog through it (the scheme matrix, signed for
//! https://hooks.example.com/webhooks/<scheme>: every change a sender can
//! make, answered exactly as webhook_receive answers it directly),
//! handshakes, bodies too large or too slow, a database restart and an
//! immediate stop under a storm of retrying senders, pool exhaustion, the
//! rate limit, graceful shutdown, health, readiness and metrics.
//!
//! `make ingress-test` runs it on a server of its own (it restarts it).

mod common;

use common::ingress::Answer;
use common::ingress::*;
use common::*;
use postgres::Client;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const APP: &str = "ingress_app";
const SECRET: &str = "ingress-secret";

// ---------------------------------------------------------------------------
// Databases.

/// A fresh database with the extension, the application role granted, and
/// a GitHub-scheme provider `gh` in inbox mode.
fn prepare(name: &str) -> Client {
    let mut db = empty_database(name);
    db.batch_execute("CREATE EXTENSION pg_webhook_inbox")
        .unwrap();
    ensure_role(&mut db, APP, true);
    db.batch_execute(&format!(
        "SELECT webhook_grant_app('{APP}');
         SELECT webhook_register_provider('gh', secret => '{SECRET}', scheme => 'github', inbox => true);"
    ))
    .unwrap();
    db
}

/// A GitHub delivery of `event_id`, signed.
fn github(event_id: &str) -> (Vec<(String, String)>, Vec<u8>) {
    let body = format!(r#"{{"id":"{event_id}","action":"opened","n":1}}"#);
    let headers = sign::github(event_id, "issues", &body, SECRET);
    (header_list(&headers), body.into_bytes())
}

/// The ingress's statements waiting on a lock.
fn waiting_on_locks(db: &mut Client) -> i64 {
    count(
        db,
        "SELECT count(*) FROM pg_stat_activity
          WHERE application_name = 'webhook-ingress' AND wait_event_type = 'Lock'",
    )
}

/// Queue `gh`'s events `ids` in a transaction left open: their locks held,
/// so that deliveries of them through the ingress wait.
fn hold_events<'a>(holder: &'a mut Client, ids: &[&str]) -> postgres::Transaction<'a> {
    let mut tx = holder.transaction().unwrap();
    for id in ids {
        tx.execute(
            "SELECT webhook_enqueue('gh', $1, 'issues', '{}'::jsonb)",
            &[id],
        )
        .unwrap();
    }
    tx
}

/// A delivery of `gh`'s event `id` through the ingress, on a thread.
fn deliver_later(ingress: &Arc<Ingress>, id: &str) -> std::thread::JoinHandle<Answer> {
    let (ingress, id) = (Arc::clone(ingress), id.to_string());
    std::thread::spawn(move || {
        let (headers, body) = github(&id);
        ingress.post("/webhooks/gh", &headers, &body)
    })
}

/// `gh`'s `sent` events, each stored once and queued once.
fn assert_each_stored_once(db: &mut Client, sent: usize) {
    let events = stored(db, "gh");
    let distinct = count(
        db,
        "SELECT count(DISTINCT event_id) FROM webhook.events WHERE provider = 'gh'",
    );
    let queued = count(
        db,
        "SELECT count(*) FROM webhook.inbox WHERE provider = 'gh'",
    );
    assert_eq!(events, sent as i64, "every event stored");
    assert_eq!(distinct, events, "none doubled");
    assert_eq!(queued, events, "each queued once");
}

fn stored(db: &mut Client, provider: &str) -> i64 {
    db.query_one(
        "SELECT count(*) FROM webhook.events WHERE provider = $1",
        &[&provider],
    )
    .unwrap()
    .get(0)
}

// ---------------------------------------------------------------------------

/// Every payload of @octokit/webhooks-examples (.ci/sdk-fixtures signs
/// them as GitHub does) posted to the ingress as GitHub posts it: each
/// answered 200 and queued once under its X-GitHub-Delivery with its
/// X-GitHub-Event as the type; its redelivery answered 200, nothing more
/// stored.
#[test]
fn every_github_example_payload_through_the_ingress_is_queued_once() {
    let _serial = one_at_a_time();
    let path = std::env::var("GITHUB_EXAMPLES").expect(
        "GITHUB_EXAMPLES names the file .ci/sdk-fixtures wrote (make ingress-test sets it)",
    );
    let examples: Vec<serde_json::Value> = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{path}: {e}"))
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut db = prepare("ingress_github_examples");
    db.execute(
        "SELECT webhook_register_provider('octokit', secret => $1, scheme => 'github', inbox => true)",
        &[&examples[0]["secret"].as_str().unwrap()],
    )
    .unwrap();
    let ingress = Ingress::start("ingress_github_examples", APP, &[]);
    for example in &examples {
        let headers = header_list(&example["headers"]);
        let body = example["body"].as_str().unwrap().as_bytes();
        for attempt in ["first", "again"] {
            let answer = ingress.post("/webhooks/octokit", &headers, body);
            let status = if attempt == "first" {
                "queued"
            } else {
                "duplicate"
            };
            assert_eq!(
                (
                    answer.status,
                    answer.json()["status"].as_str().unwrap_or("")
                ),
                (200, status),
                "{} {attempt}: {:?}",
                example["event"],
                answer.json()
            );
        }
    }
    let stored: Vec<(String, String)> = db
        .query(
            "SELECT event_id, event_type FROM webhook.inbox WHERE provider = 'octokit' ORDER BY event_id",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect();
    let mut expected: Vec<(String, String)> = examples
        .iter()
        .map(|e| {
            (
                e["delivery"].as_str().unwrap().to_string(),
                e["event"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    expected.sort();
    assert_eq!(
        stored, expected,
        "each example queued once, under its delivery and event"
    );
    eprintln!(
        "ingress: {} GitHub example payloads queued once",
        examples.len()
    );
}

/// Every delivery of the scheme matrix, through the ingress and straight
/// into webhook_receive on a twin database: the same status and reason
/// each time; the genuine delivery stored once and queued, its copy a
/// duplicate, a tampered one refused 401 with nothing stored.
#[test]
fn every_scheme_of_the_catalog_through_the_ingress_as_webhook_receive_answers() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut front = prepare("ingress_matrix");
    let mut twin = prepare("ingress_matrix_twin");
    let now = sign::now();
    let mut registered = std::collections::HashSet::new();
    let lines = scheme_matrix();
    for line in &lines {
        let scheme = line["scheme"].as_str().unwrap();
        let provider = scheme.split(';').next().unwrap().to_string();
        if !registered.insert(provider.clone()) {
            continue;
        }
        let elapsed = now - line["at"].as_i64().unwrap();
        let tolerance = line["tolerance"]
            .as_i64()
            .map(|t| format!("make_interval(secs => {})", t + elapsed + 600))
            .unwrap_or_else(|| "NULL".into());
        let source = |key: &str| match line[key].as_str() {
            Some(s) => format!("'{}'", s.replace('\'', "''")),
            None => "NULL".into(),
        };
        let sql = format!(
            "SELECT webhook_register_provider('{provider}', secret => '{}', scheme => '{}', \
             tolerance => {tolerance}, event_id_from => {}, event_type_from => {}, inbox => true)",
            line["secret"].as_str().unwrap().replace('\'', "''"),
            scheme.replace('\'', "''"),
            source("event_id_from"),
            source("event_type_from"),
        );
        front.batch_execute(&sql).unwrap();
        twin.batch_execute(&sql).unwrap();
    }
    // A claim-mode provider: refused by the ingress, nothing stored.
    front
        .batch_execute(&format!(
            "SELECT webhook_register_provider('claimed', secret => '{SECRET}', scheme => 'github', inbox => false)"
        ))
        .unwrap();
    let ingress = Ingress::start("ingress_matrix", APP, &[]);
    let mut direct = connect_as("ingress_matrix_twin", APP);

    let mut per_scheme: HashMap<String, Vec<(String, u16)>> = HashMap::new();
    let mut genuine_ids: HashMap<String, String> = HashMap::new();
    for line in &lines {
        let provider = line["scheme"].as_str().unwrap().split(';').next().unwrap();
        let change = line["change"].as_str().unwrap();
        let body = hex::decode(line["body"].as_str().unwrap()).unwrap();
        let url = line["url"].as_str();
        let through = ingress.post(
            &format!("/webhooks/{provider}"),
            &header_list(&line["headers"]),
            &body,
        );
        let row = direct
            .query_one(
                "SELECT status, http_status, reason, response, response_type, event_id
                   FROM webhook_receive($1, $2::text::jsonb, $3::bytea, inbox => true, url => $4)",
                &[&provider, &line["headers"].to_string(), &body, &url],
            )
            .unwrap();
        let expected = (
            row.get::<_, String>(0),
            row.get::<_, i32>(1) as u16,
            row.get::<_, String>(2),
        );
        if change == "the genuine delivery" {
            // Where the provider sends no id, the scheme's own (a
            // signature, a digest): what webhook_receive stored it under.
            genuine_ids.insert(
                provider.to_string(),
                row.get::<_, Option<String>>(5).unwrap_or_default(),
            );
        }
        if expected.0 == "handshake" {
            // An endpoint check is answered with what its provider expects.
            let response: String = row.get(3);
            let response_type: String = row.get(4);
            assert_eq!(
                (
                    through.status,
                    String::from_utf8_lossy(&through.body).to_string(),
                    through.header("content-type").map(str::to_string)
                ),
                (200, response, Some(response_type)),
                "{provider}, {change}: the handshake's answer"
            );
            per_scheme
                .entry(provider.to_string())
                .or_default()
                .push((change.to_string(), through.status));
            continue;
        }
        let got = through.json();
        assert_eq!(
            (
                got["status"].as_str().unwrap_or("").to_string(),
                through.status,
                got["reason"].as_str().unwrap_or("").to_string()
            ),
            expected,
            "{provider}, {change}: through the ingress vs webhook_receive\n{}",
            ingress.logs()
        );
        per_scheme
            .entry(provider.to_string())
            .or_default()
            .push((change.to_string(), through.status));
    }
    assert!(
        per_scheme.len() >= 20,
        "the catalog's schemes: {}",
        per_scheme.len()
    );
    for (provider, answers) in &per_scheme {
        let of = |change: &str| answers.iter().find(|(c, _)| c == change).map(|(_, s)| *s);
        assert!(
            of("the genuine delivery").is_some_and(|s| (200..300).contains(&s)),
            "{provider}: {answers:?}"
        );
        assert!(
            of("the same delivery again").is_some_and(|s| (200..300).contains(&s)),
            "{provider}: {answers:?}"
        );
        assert_eq!(of("a tampered signature"), Some(401), "{provider}");
        // Stored once and queued: one event, one inbox row, whatever the
        // changes that were refused or answered as duplicates.
        let queued: i64 = front
            .query_one(
                "SELECT count(*) FROM webhook.inbox WHERE provider = $1 AND event_id = $2",
                &[provider, &genuine_ids[provider]],
            )
            .unwrap()
            .get(0);
        assert_eq!(queued, 1, "{provider}: queued once");
    }
    assert_eq!(
        count(&mut front, "SELECT count(*) FROM webhook.events"),
        count(&mut twin, "SELECT count(*) FROM webhook.events"),
        "the same events stored"
    );

    let (headers, body) = github("claimed-1");
    let refused = ingress.post("/webhooks/claimed", &headers, &body);
    assert_eq!(refused.status, 404);
    assert_eq!(
        refused.json()["status"],
        "claim_mode",
        "{:?}",
        refused.json()
    );
    assert!(refused.json()["reason"]
        .as_str()
        .unwrap()
        .contains("inbox => true"));
    let unknown = ingress.post("/webhooks/nobody", &headers, &body);
    assert_eq!(
        (unknown.status, unknown.json()["status"].clone()),
        (404, json!("unknown_provider"))
    );
    assert_eq!(stored(&mut front, "claimed"), 0);

    // A provider registered after the ingress started is served at once.
    front
        .batch_execute(&format!(
            "SELECT webhook_register_provider('late', secret => '{SECRET}', scheme => 'github', inbox => true)"
        ))
        .unwrap();
    std::thread::sleep(Duration::from_millis(1100));
    let (headers, body) = github("late-1");
    assert_eq!(ingress.post("/webhooks/late", &headers, &body).status, 200);
    assert_eq!(stored(&mut front, "late"), 1);
}

/// Endpoint checks are answered with exactly the body and content type
/// their provider expects.
#[test]
fn handshakes_are_answered_as_their_providers_expect() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_handshakes");
    db.batch_execute(&format!(
        "SELECT webhook_register_provider('slack', secret => '{SECRET}', scheme => 'slack', inbox => true);
         SELECT webhook_register_provider('zoom', secret => '{SECRET}', scheme => 'zoom', inbox => true,
                                          event_id_from => 'body:event_ts', event_type_from => 'body:event');"
    ))
    .unwrap();
    let ingress = Ingress::start("ingress_handshakes", APP, &[]);
    let ts = sign::now().to_string();
    let signed = |prefix_header: &str, body: &str| {
        let sig = hex::encode(sign::hmac_sha256(
            SECRET.as_bytes(),
            &[format!("v0:{ts}:").as_bytes(), body.as_bytes()],
        ));
        (sig, prefix_header.to_string())
    };

    let body = r#"{"token":"x","challenge":"c-123","type":"url_verification"}"#;
    let (sig, _) = signed("slack", body);
    let answer = ingress.post(
        "/webhooks/slack",
        &[
            ("X-Slack-Request-Timestamp".into(), ts.clone()),
            ("X-Slack-Signature".into(), format!("v0={sig}")),
        ],
        body.as_bytes(),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    assert_eq!(answer.header("content-type"), Some("application/json"));
    assert_eq!(answer.json(), json!({ "challenge": "c-123" }));

    let body =
        r#"{"event":"endpoint.url_validation","payload":{"plainToken":"pt-9"},"event_ts":1}"#;
    let (sig, _) = signed("zoom", body);
    let answer = ingress.post(
        "/webhooks/zoom",
        &[
            ("x-zm-request-timestamp".into(), ts.clone()),
            ("x-zm-signature".into(), format!("v0={sig}")),
        ],
        body.as_bytes(),
    );
    assert_eq!(answer.status, 200, "{answer:?}");
    let expected = hex::encode(sign::hmac_sha256(SECRET.as_bytes(), &[b"pt-9"]));
    assert_eq!(
        answer.json(),
        json!({ "plainToken": "pt-9", "encryptedToken": expected })
    );
    // A forged check is refused like any forged delivery.
    let answer = ingress.post(
        "/webhooks/zoom",
        &[
            ("x-zm-request-timestamp".into(), ts),
            ("x-zm-signature".into(), "v0=00".into()),
        ],
        body.as_bytes(),
    );
    assert_eq!(answer.status, 401);
}

/// A body declared too large is refused before it is sent; one sent too
/// large without a length, and one sent too slowly, are refused too;
/// nothing of them is stored and the ingress goes on serving.
#[test]
fn oversized_and_slow_bodies_are_refused_before_the_database() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_bodies");
    let ingress = Ingress::start(
        "ingress_bodies",
        APP,
        &["--max-body", "4096", "--read-timeout", "1"],
    );
    let (headers, _) = github("big-1");

    // Declared: answered without a byte of the body sent.
    let started = Instant::now();
    let mut stream = TcpStream::connect(ingress.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&request_head(
            "POST",
            "/webhooks/gh",
            &headers,
            10 * 1024 * 1024,
        ))
        .unwrap();
    let answer = read_answer(&mut stream).unwrap();
    assert_eq!(answer.status, 413, "{answer:?}");
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // Chunked, no length: refused once past the limit.
    let mut stream = TcpStream::connect(ingress.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut head = String::from("POST /webhooks/gh HTTP/1.1\r\nHost: x\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n");
    for (k, v) in &headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).unwrap();
    let chunk = vec![b'a'; 1024];
    for _ in 0..8 {
        if stream
            .write_all(format!("{:x}\r\n", chunk.len()).as_bytes())
            .and_then(|_| stream.write_all(&chunk))
            .and_then(|_| stream.write_all(b"\r\n"))
            .is_err()
        {
            break;
        }
    }
    let _ = stream.write_all(b"0\r\n\r\n");
    assert_eq!(read_answer(&mut stream).unwrap().status, 413);

    // Slow: half the body, then nothing for longer than --read-timeout.
    let (headers, body) = github("slow-1");
    let mut stream = TcpStream::connect(ingress.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .write_all(&request_head("POST", "/webhooks/gh", &headers, body.len()))
        .unwrap();
    stream.write_all(&body[..body.len() / 2]).unwrap();
    let started = Instant::now();
    let answer = read_answer(&mut stream).unwrap();
    assert_eq!(answer.status, 408, "{answer:?}");
    assert!(started.elapsed() < Duration::from_secs(5));

    assert_eq!(stored(&mut db, "gh"), 0, "nothing stored");
    let metrics = ingress.metrics();
    assert!(
        metrics.contains("webhook_ingress_rejected_total{reason=\"too_large\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_rejected_total{reason=\"slow_body\"} 1"),
        "{metrics}"
    );
    let (headers, body) = github("after-1");
    assert_eq!(ingress.post("/webhooks/gh", &headers, &body).status, 200);
    assert_eq!(stored(&mut db, "gh"), 1);
}

// ---------------------------------------------------------------------------
// Connections: how many, and how long one may hold its place. Senders come
// from addresses of 127/8 (all loopback on Linux), so that the bound per
// source can be told from the bound in all.

/// A connection to the ingress from `source`.
fn connect_from(source: &str, to: std::net::SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let from: std::net::SocketAddr = format!("{source}:0").parse().unwrap();
    socket.bind(&from.into()).unwrap();
    socket
        .connect_timeout(&to.into(), Duration::from_secs(2))
        .unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream
}

/// A signed delivery posted from `source`, its connection closed after.
fn post_from(source: &str, ingress: &Ingress, id: &str) -> Answer {
    let (headers, body) = github(id);
    let mut stream = connect_from(source, ingress.addr);
    let mut request = request_head("POST", "/webhooks/gh", &headers, body.len());
    request.extend_from_slice(&body);
    // A refused connection is answered before the request is read: the
    // write may find it closed already, and the answer is still there.
    let _ = stream.write_all(&request);
    read_answer(&mut stream).unwrap_or_else(|e| panic!("from {source}: {e}"))
}

/// Whether the ingress has closed `stream`: it reads the end (or a
/// reset), not a timeout, within `wait`.
fn is_closed(stream: &mut TcpStream, wait: Duration) -> bool {
    use std::io::Read;
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut byte = [0u8; 512];
    loop {
        match stream.read(&mut byte) {
            Ok(0) => return true,
            // An answer before the close (a 503, a 408): read on.
            Ok(_) => continue,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return false
            }
            Err(_) => return true,
        }
    }
}

/// One answer on a kept-alive connection: the head, then as many bytes
/// as its Content-Length says.
fn read_one_answer(stream: &mut TcpStream) -> Answer {
    use std::io::Read;
    let mut raw = Vec::new();
    let mut byte = [0u8; 1];
    while !raw.ends_with(b"\r\n\r\n") {
        assert_eq!(
            stream.read(&mut byte).unwrap(),
            1,
            "closed mid-answer: {raw:?}"
        );
        raw.push(byte[0]);
    }
    let head = String::from_utf8(raw).unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse().unwrap())
        })
        .expect("a Content-Length");
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).unwrap();
    Answer {
        status: head.split(' ').nth(1).unwrap().parse().unwrap(),
        headers: HashMap::new(),
        body,
    }
}

/// Connections are bounded per source and in all, before a byte is read:
/// one over a bound is answered 503 with Retry-After and closed at once
/// (not left hanging), and a sender holding its whole share does not stop
/// deliveries from anyone else.
#[test]
fn open_connections_are_bounded_per_source_and_in_all() {
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_connections");
    let ingress = Ingress::start(
        "ingress_connections",
        APP,
        &[
            "--max-connections",
            "30",
            "--max-connections-per-source",
            "10",
            "--header-timeout",
            "60",
            "--idle-timeout",
            "60",
        ],
    );
    // One source opens fifteen connections and sends nothing: ten are
    // held, five refused.
    let mut held: Vec<TcpStream> = Vec::new();
    let mut refused = 0;
    for _ in 0..15 {
        let mut stream = connect_from("127.0.0.2", ingress.addr);
        if is_closed(&mut stream, Duration::from_millis(300)) {
            refused += 1;
        } else {
            held.push(stream);
        }
    }
    assert_eq!((held.len(), refused), (10, 5), "a source holds its share");
    let mut over = connect_from("127.0.0.2", ingress.addr);
    let answer = read_answer(&mut over).unwrap();
    assert_eq!(answer.status, 503, "{answer:?}");
    assert_eq!(answer.header("retry-after"), Some("1"));
    for i in 0..5 {
        let answer = post_from("127.0.0.1", &ingress, &format!("while-held-{i}"));
        assert_eq!(answer.status, 200, "another source is served: {answer:?}");
    }

    // Two more sources take their shares: thirty open, the bound in all.
    let mut others: Vec<TcpStream> = Vec::new();
    for source in ["127.0.0.3", "127.0.0.4"] {
        for _ in 0..10 {
            let mut stream = connect_from(source, ingress.addr);
            assert!(
                !is_closed(&mut stream, Duration::from_millis(100)),
                "{source}"
            );
            others.push(stream);
        }
    }
    let answer = post_from("127.0.0.5", &ingress, "full-1");
    assert_eq!(answer.status, 503, "over the bound in all: {answer:?}");
    assert_eq!(stored(&mut db, "gh"), 5);

    // Places given back are taken again.
    others.clear();
    wait_for("a delivery served again", || {
        post_from("127.0.0.5", &ingress, "full-1").status == 200
    });
    held.clear();
    let metrics = ingress.metrics();
    assert!(
        metrics.contains("webhook_ingress_connections_closed_total{reason=\"source_share\"} 6"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_connections_closed_total{reason=\"max_connections\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_connections_max 30\n"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_connections_per_source_max 10\n"),
        "{metrics}"
    );
    wait_for("every connection closed", || {
        gauge(&ingress, "webhook_ingress_connections_open") <= 1.0
    });
    assert_eq!(stored(&mut db, "gh"), 6);
}

/// Headers sent a byte at a time, connections opened and left silent, and
/// kept-alive connections left idle are each closed after their timeout,
/// however many there are, while deliveries from elsewhere are answered.
#[test]
fn slow_headers_and_idle_connections_are_closed_after_their_timeouts() {
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_slowloris");
    let ingress = Arc::new(Ingress::start(
        "ingress_slowloris",
        APP,
        &[
            "--header-timeout",
            "1",
            "--idle-timeout",
            "1",
            "--max-connections-per-source",
            "100",
        ],
    ));
    // Forty senders trickle a header a byte every 100 ms for six seconds.
    let trickles: Vec<_> = (0..40)
        .map(|_| {
            let addr = ingress.addr;
            std::thread::spawn(move || {
                let mut stream = connect_from("127.0.0.6", addr);
                let opened = Instant::now();
                stream
                    .write_all(b"POST /webhooks/gh HTTP/1.1\r\nHost: x\r\nX-Pad: ")
                    .unwrap();
                while opened.elapsed() < Duration::from_secs(6) {
                    if stream.write_all(b"a").is_err()
                        || is_closed(&mut stream, Duration::from_millis(100))
                    {
                        return opened.elapsed();
                    }
                }
                opened.elapsed()
            })
        })
        .collect();
    // Silent ones: opened, nothing sent.
    let mut silent: Vec<(TcpStream, Instant)> = (0..20)
        .map(|_| (connect_from("127.0.0.7", ingress.addr), Instant::now()))
        .collect();
    for i in 0..10 {
        let answer = post_from("127.0.0.1", &ingress, &format!("beside-slow-{i}"));
        assert_eq!(answer.status, 200, "{answer:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    for t in trickles {
        let took = t.join().unwrap();
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(4),
            "a trickled header closed after {took:?} (--header-timeout 1)"
        );
    }
    for (stream, opened) in &mut silent {
        assert!(
            is_closed(stream, Duration::from_secs(5)),
            "a silent connection"
        );
        let took = opened.elapsed();
        assert!(took >= Duration::from_millis(900), "{took:?}");
    }

    // Kept alive: a second request on the connection within the idle
    // timeout is served; then, left idle, it is closed.
    let (headers, body) = github("kept-1");
    let mut head = String::from("POST /webhooks/gh HTTP/1.1\r\nHost: x\r\n");
    for (k, v) in &headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut kept = connect_from("127.0.0.8", ingress.addr);
    for _ in 0..2 {
        kept.write_all(head.as_bytes()).unwrap();
        kept.write_all(&body).unwrap();
        assert_eq!(read_one_answer(&mut kept).status, 200);
        std::thread::sleep(Duration::from_millis(500));
    }
    let idle = Instant::now();
    assert!(is_closed(&mut kept, Duration::from_secs(5)), "left idle");
    let took = idle.elapsed();
    assert!(
        took >= Duration::from_millis(400) && took < Duration::from_secs(3),
        "closed {took:?} after the wait began (--idle-timeout 1, 0.5 s of it spent)"
    );
    // Its next request begun within the idle timeout, then trickled: the
    // header timeout runs from that first byte.
    let mut kept = connect_from("127.0.0.8", ingress.addr);
    kept.write_all(head.as_bytes()).unwrap();
    kept.write_all(&body).unwrap();
    assert_eq!(read_one_answer(&mut kept).status, 200);
    std::thread::sleep(Duration::from_millis(800));
    let begun = Instant::now();
    kept.write_all(b"POST").unwrap();
    let mut closed_after = None;
    while begun.elapsed() < Duration::from_secs(5) {
        if kept.write_all(b"/").is_err() || is_closed(&mut kept, Duration::from_millis(100)) {
            closed_after = Some(begun.elapsed());
            break;
        }
    }
    let took = closed_after.expect("a trickled second request is closed");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(3),
        "{took:?}"
    );

    let metrics = ingress.metrics();
    let closed = |reason: &str| -> f64 {
        metrics
            .lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "webhook_ingress_connections_closed_total{{reason=\"{reason}\"}} "
                ))
            })
            .map_or(0.0, |v| v.parse().unwrap())
    };
    assert!(closed("header_timeout") >= 61.0, "{metrics}");
    assert!(closed("idle_timeout") >= 1.0, "{metrics}");
    assert!(
        metrics.contains("webhook_ingress_header_timeout_seconds 1\n"),
        "{metrics}"
    );
    assert_eq!(
        stored(&mut db, "gh"),
        11,
        "the ten beside them, and kept-1 once"
    );
}

/// A request whose headers and body each arrive within their own bounds
/// but which takes longer in all than --total-timeout is answered when
/// that passes, not when the body's own timeout would.
#[test]
fn a_request_is_bounded_in_all_from_its_first_byte() {
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_total");
    let ingress = Ingress::start(
        "ingress_total",
        APP,
        &[
            "--header-timeout",
            "10",
            "--read-timeout",
            "10",
            "--total-timeout",
            "2",
        ],
    );
    let (headers, body) = github("total-1");
    let mut stream = connect_from("127.0.0.9", ingress.addr);
    let opened = Instant::now();
    let head = request_head("POST", "/webhooks/gh", &headers, body.len());
    let (first, rest) = head.split_at(head.len() / 2);
    stream.write_all(first).unwrap();
    std::thread::sleep(Duration::from_millis(1200));
    stream.write_all(rest).unwrap();
    stream.write_all(&body[..body.len() / 2]).unwrap();
    let answer = read_answer(&mut stream).unwrap();
    let took = opened.elapsed();
    assert_eq!(answer.status, 408, "{answer:?}");
    assert_eq!(answer.json()["status"], "total_timeout", "{answer:?}");
    assert!(
        took >= Duration::from_millis(1900) && took < Duration::from_secs(5),
        "answered {took:?} after the first byte (--total-timeout 2, --read-timeout 10)"
    );
    assert!(
        ingress
            .metrics()
            .contains("webhook_ingress_rejected_total{reason=\"total_timeout\"} 1"),
        "{}",
        ingress.metrics()
    );
    assert_eq!(stored(&mut db, "gh"), 0);
    assert_eq!(post_from("127.0.0.9", &ingress, "total-2").status, 200);
}

/// Senders deliver distinct events and retry each until it is answered
/// 2xx (as providers do), while the database is stopped immediately and
/// started again, twice. Afterwards: every event stored exactly once and
/// queued once, nothing answered 2xx that is not stored, and the answers
/// while it was away were 503 with Retry-After.
#[test]
fn a_database_restart_under_a_storm_loses_and_doubles_nothing() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_storm");
    let ingress = Arc::new(Ingress::start(
        "ingress_storm",
        APP,
        &["--connections", "4", "--request-timeout", "2"],
    ));
    const SENDERS: usize = 6;
    const EACH: usize = 60;
    let answers: Arc<Mutex<HashMap<u16, usize>>> = Arc::default();
    let retry_after_missing = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let senders: Vec<_> = (0..SENDERS)
        .map(|s| {
            let ingress = Arc::clone(&ingress);
            let answers = Arc::clone(&answers);
            let retry_after_missing = Arc::clone(&retry_after_missing);
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                for i in 0..EACH {
                    let (headers, body) = github(&format!("storm-{s}-{i}"));
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        assert!(Instant::now() < deadline, "storm-{s}-{i} never stored");
                        let status =
                            match http(ingress.addr, "POST", "/webhooks/gh", &headers, &body) {
                                Ok(a) => {
                                    if a.status == 503 && a.header("retry-after").is_none() {
                                        retry_after_missing.fetch_add(1, Ordering::Relaxed);
                                    }
                                    a.status
                                }
                                Err(_) => 0,
                            };
                        *answers.lock().unwrap().entry(status).or_default() += 1;
                        if (200..300).contains(&status) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    // A stop shorter than a request's deadline is ridden out (the
    // requests wait for the database); a longer one is answered 503.
    for down in [Duration::from_millis(800), Duration::from_millis(3500)] {
        let before = done.load(Ordering::Relaxed);
        wait_for("deliveries before the stop", || {
            done.load(Ordering::Relaxed) >= before + 30
        });
        crash_server();
        std::thread::sleep(down);
        start_server();
    }
    for s in senders {
        s.join().unwrap();
    }
    let mut db_again = connect("ingress_storm");
    let answers = answers.lock().unwrap().clone();
    eprintln!(
        "storm: {} events sent, answers by status {answers:?}",
        SENDERS * EACH
    );
    assert_each_stored_once(&mut db_again, SENDERS * EACH);
    assert!(
        answers.get(&503).copied().unwrap_or(0) > 0,
        "the stops were seen: {answers:?}"
    );
    assert_eq!(
        retry_after_missing.load(Ordering::Relaxed),
        0,
        "every 503 says when to retry"
    );
    assert!(
        !answers.keys().any(|s| *s >= 500 && *s != 503),
        "no other 5xx: {answers:?}"
    );
    let _ = &mut db;
}

/// `senders` threads each delivering `each` GitHub events `{prefix}-{s}-{i}`
/// through `ingress`, each sent again until it is answered 2xx (or once
/// only, `retry` false); the answers by status.
fn senders(
    ingress: &Arc<Ingress>,
    prefix: &str,
    senders: usize,
    each: usize,
    retry: bool,
    done: &Arc<AtomicUsize>,
) -> Vec<std::thread::JoinHandle<HashMap<u16, usize>>> {
    (0..senders)
        .map(|s| {
            let (ingress, prefix, done) =
                (Arc::clone(ingress), prefix.to_string(), Arc::clone(done));
            std::thread::spawn(move || {
                let mut answers: HashMap<u16, usize> = HashMap::new();
                for i in 0..each {
                    let (headers, body) = github(&format!("{prefix}-{s}-{i}"));
                    let deadline = Instant::now() + Duration::from_secs(60);
                    loop {
                        assert!(Instant::now() < deadline, "{prefix}-{s}-{i} never stored");
                        let status = http(ingress.addr, "POST", "/webhooks/gh", &headers, &body)
                            .map_or(0, |a| a.status);
                        *answers.entry(status).or_default() += 1;
                        if (200..300).contains(&status) || !retry {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                answers
            })
        })
        .collect()
}

fn merged(threads: Vec<std::thread::JoinHandle<HashMap<u16, usize>>>) -> HashMap<u16, usize> {
    let mut all = HashMap::new();
    for t in threads {
        for (status, n) in t.join().unwrap() {
            *all.entry(status).or_default() += n;
        }
    }
    all
}

/// Behind PgBouncer in transaction mode (4 server connections shared by
/// the ingress's 12), as on a managed host's pooled endpoint: with
/// `--pooler transaction`, a storm of deliveries through two restarts of
/// the pooler and one of the database is stored once each, and nothing is
/// refused: no delivery fails on a statement or a setting the pooler
/// moved, and the pooler's own errors while the database is away are
/// ridden out as the database's are. With `--pooler none` through the same
/// pooler, deliveries fail on their prepared statement, and the log says
/// which setting is missing: the hazard is real, and found.
#[test]
fn through_a_transaction_pooler_nothing_is_refused_lost_or_doubled() {
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_pooled");
    let pooler = common::pooler::Pooler::start(&[APP, "postgres"]);
    let conninfo = pooler.conninfo("ingress_pooled", APP);
    let ingress = Arc::new(Ingress::start_with(
        &conninfo,
        &[
            "--pooler",
            "transaction",
            "--connections",
            "12",
            // The default deadline. A delivery rides out the outage, then
            // the pooler's wait before it logs in again (a second here),
            // then the ingress's own backoff (a second at most): about
            // 2.6 s through the pooler's restart with 0.5 s down, up to
            // 4.8 s seen through the database's on a quiet machine.
            "--request-timeout",
            "9",
        ],
    ));
    const SENDERS: usize = 12;
    const EACH: usize = 50;
    let done = Arc::new(AtomicUsize::new(0));
    let storm = senders(&ingress, "pooled", SENDERS, EACH, true, &done);
    let progress = |what: &str| {
        let before = done.load(Ordering::Relaxed);
        wait_for(what, || done.load(Ordering::Relaxed) >= before + 100);
    };
    progress("deliveries before the pooler's first restart");
    pooler.restart(0.0);
    progress("deliveries before the pooler's second restart");
    pooler.restart(0.5);
    progress("deliveries before the database's restart");
    crash_server();
    std::thread::sleep(Duration::from_millis(500));
    start_server();
    let answers = merged(storm);
    let mut db_again = connect("ingress_pooled");
    let logs = ingress.logs();
    eprintln!(
        "through the pooler: {} events sent, answers by status {answers:?}",
        SENDERS * EACH
    );
    assert_each_stored_once(&mut db_again, SENDERS * EACH);
    assert!(
        !logs.contains("not_stored"),
        "a delivery failed on the database's answer, not an outage:\n{logs}"
    );
    // Each outage is shorter than a request's deadline: ridden out.
    let refusals: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("\"http_status\":5"))
        .collect();
    assert!(
        answers.keys().all(|s| (200..300).contains(s)),
        "nothing refused: {answers:?}; the ingress logged:\n{}",
        refusals.join("\n")
    );
    drop(ingress);

    let unaware = Arc::new(Ingress::start_with(&conninfo, &["--connections", "12"]));
    let answers = merged(senders(&unaware, "unaware", 8, 10, false, &Arc::default()));
    let logs = unaware.logs();
    assert!(
        answers.get(&503).copied().unwrap_or(0) > 0,
        "with --pooler none, the pooler's server connections lose the prepared statement: {answers:?}"
    );
    assert!(
        logs.contains("Set --pooler transaction"),
        "the log names the setting:\n{logs}"
    );
    let _ = &mut db;
}

/// One connection, held by a delivery waiting on its event's lock: the
/// next request waits its turn and is answered 503 when the pool's timeout
/// passes, one more than the queue holds at once; when the lock goes,
/// everything is served again.
#[test]
fn pool_exhaustion_is_answered_503_and_recovers() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_pool");
    let ingress = Arc::new(Ingress::start(
        "ingress_pool",
        APP,
        &[
            "--connections",
            "1",
            "--pool-timeout",
            "0.5",
            "--queue",
            "1",
            "--request-timeout",
            "20",
        ],
    ));
    // Another session holds the event's lock: webhook_enqueue of the same
    // event in a transaction left open.
    let mut holder = connect("ingress_pool");
    let tx = hold_events(&mut holder, &["held-1"]);
    let blocked = deliver_later(&ingress, "held-1");
    wait_for("the delivery to hold the one connection", || {
        ingress.metrics().contains("webhook_ingress_pool_in_use 1")
            && waiting_on_locks(&mut db) == 1
    });
    let queued = {
        let ingress = Arc::clone(&ingress);
        std::thread::spawn(move || {
            let (headers, body) = github("queued-1");
            let started = Instant::now();
            (
                ingress.post("/webhooks/gh", &headers, &body),
                started.elapsed(),
            )
        })
    };
    wait_for("a request waiting in the queue", || {
        ingress.metrics().contains("webhook_ingress_pool_waiting 1")
    });
    let (headers, body) = github("overflow-1");
    let overflow = ingress.post("/webhooks/gh", &headers, &body);
    assert_eq!(overflow.status, 503, "{overflow:?}");
    assert!(overflow.header("retry-after").is_some());
    let (answer, waited) = queued.join().unwrap();
    assert_eq!(answer.status, 503, "{answer:?}");
    assert!(waited >= Duration::from_millis(450), "{waited:?}");
    tx.commit().unwrap();
    let held = blocked.join().unwrap();
    assert_eq!(held.status, 200, "{held:?}");
    assert_eq!(held.json()["status"], "duplicate", "{:?}", held.json());
    for id in ["queued-1", "overflow-1"] {
        let (headers, body) = github(id);
        assert_eq!(
            ingress.post("/webhooks/gh", &headers, &body).status,
            200,
            "{id} on retry"
        );
    }
    let metrics = ingress.metrics();
    assert!(
        metrics.contains("webhook_ingress_rejected_total{reason=\"pool_timeout\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_rejected_total{reason=\"queue_full\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("webhook_ingress_pool_open 1"),
        "never more than one: {metrics}"
    );
    assert_eq!(stored(&mut db, "gh"), 3);
}

/// A delivery whose deadline passes while its statement waits on a lock:
/// answered 503, its statement cancelled and its connection closed, so the
/// next delivery gets a fresh connection at once instead of queueing behind
/// it, and the server never holds more of the ingress's backends than its
/// pool. And past --max-requests in flight, a delivery is refused at once.
#[test]
fn a_request_given_up_leaves_no_backend_behind_and_in_flight_is_bounded() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_given_up");
    let ingress = Arc::new(Ingress::start(
        "ingress_given_up",
        APP,
        &[
            "--connections",
            "1",
            "--request-timeout",
            "1",
            "--max-requests",
            "1",
        ],
    ));
    let mut holder = connect("ingress_given_up");
    let tx = hold_events(&mut holder, &["held-2"]);
    let blocked = deliver_later(&ingress, "held-2");
    wait_for("the delivery waiting on the lock", || {
        waiting_on_locks(&mut db) == 1
    });
    // One in flight already: the next is refused before anything else.
    let (headers, body) = github("over-1");
    let over = ingress.post("/webhooks/gh", &headers, &body);
    assert_eq!(
        (over.status, over.json()["status"].clone()),
        (503, json!("unavailable"))
    );
    assert!(ingress
        .metrics()
        .contains("webhook_ingress_rejected_total{reason=\"overloaded\"} 1"));
    let given_up = blocked.join().unwrap();
    assert_eq!(given_up.status, 503, "{given_up:?}");
    // Cancelled when given up, not when the server's statement_timeout
    // (twice the deadline) would end it.
    let answered = Instant::now();
    wait_for("the abandoned statement cancelled", || {
        waiting_on_locks(&mut db) == 0
    });
    assert!(
        answered.elapsed() < Duration::from_millis(500),
        "{:?}",
        answered.elapsed()
    );
    let (headers, body) = github("free-1");
    let started = Instant::now();
    let free = ingress.post("/webhooks/gh", &headers, &body);
    assert_eq!(free.status, 200, "{free:?}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    assert!(
        count(
            &mut db,
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'webhook-ingress'"
        ) <= 1,
        "never more backends than the pool"
    );
    tx.commit().unwrap();
    let (headers, body) = github("held-2");
    assert_eq!(
        ingress.post("/webhooks/gh", &headers, &body).json()["status"],
        "duplicate"
    );
    assert_eq!(stored(&mut db, "gh"), 2);
}

/// The rate limit holds per source, before the database; the source
/// behind a proxy is the proxy's last entry in the forwarded header.
#[test]
fn the_rate_limit_holds_per_source() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_rate");
    let ingress = Ingress::start(
        "ingress_rate",
        APP,
        &[
            "--rate",
            "2",
            "--burst",
            "4",
            "--client-ip-header",
            "X-Forwarded-For",
        ],
    );
    let send = |id: &str, forwarded: &str| {
        let (mut headers, body) = github(id);
        headers.push(("X-Forwarded-For".into(), forwarded.into()));
        ingress.post("/webhooks/gh", &headers, &body)
    };
    let mut statuses = Vec::new();
    for i in 0..8 {
        // The sender writes an address of its own in front: ignored.
        statuses.push(send(&format!("a-{i}"), &format!("10.0.0.{i}, 203.0.113.1")).status);
    }
    assert_eq!(&statuses[..4], &[200, 200, 200, 200], "{statuses:?}");
    assert!(
        statuses[4..].iter().filter(|s| **s == 429).count() >= 3,
        "{statuses:?}"
    );
    let limited = send("a-x", "203.0.113.1");
    assert_eq!(limited.status, 429);
    assert!(limited.header("retry-after").is_some());
    assert_eq!(send("b-1", "203.0.113.2").status, 200, "another source");
    std::thread::sleep(Duration::from_millis(1100));
    assert_eq!(
        send("a-late", "203.0.113.1").status,
        200,
        "its rate came back"
    );
    let accepted = statuses.iter().filter(|s| **s == 200).count() as i64 + 2;
    assert_eq!(
        stored(&mut db, "gh"),
        accepted,
        "refused ones never reached the database"
    );
}

/// SIGTERM while deliveries are in flight: they finish and are answered
/// 200 and stored; the process stops taking new ones and exits 0.
#[test]
fn graceful_shutdown_finishes_what_is_in_flight() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_shutdown");
    let mut ingress = Ingress::start(
        "ingress_shutdown",
        APP,
        &["--connections", "4", "--request-timeout", "30"],
    );
    let addr = ingress.addr;
    let mut holder = connect("ingress_shutdown");
    let tx = hold_events(&mut holder, &["inflight-0", "inflight-1", "inflight-2"]);
    let in_flight: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let (headers, body) = github(&format!("inflight-{i}"));
                http(addr, "POST", "/webhooks/gh", &headers, &body)
            })
        })
        .collect();
    wait_for("three deliveries in flight", || {
        waiting_on_locks(&mut db) == 3
    });
    ingress.terminate();
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        ingress.child.try_wait().unwrap().is_none(),
        "still finishing"
    );
    // Not ready any more: no new connection is accepted.
    assert!(
        http(addr, "GET", "/readyz", &[], b"").is_err(),
        "the listener is closed"
    );
    tx.rollback().unwrap();
    for t in in_flight {
        let answer = t.join().unwrap().expect("answered");
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    let status = ingress.wait_exit(Duration::from_secs(10));
    assert!(status.success(), "{status}: {}", ingress.logs());
    assert_eq!(stored(&mut db, "gh"), 3);
    assert!(ingress.logs().contains("\"event\":\"shutting_down\""));
}

/// /healthz, /readyz through a database stop, /metrics, the traceparent
/// passed on to the event's worker, the log free of bodies and secrets,
/// and a connection string listing a dead host first.
#[test]
fn health_readiness_metrics_logs_and_trace_context() {
    // Tests here stop the server: one at a time.
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_ops");
    // The first host refuses connections: the second one serves.
    let conninfo = format!(
        "host=127.0.0.1,{} port={},{} dbname=ingress_ops user={APP} connect_timeout=2",
        std::env::var("PGHOST").unwrap_or_else(|_| "127.0.0.1".into()),
        free_port(),
        std::env::var("PGPORT").unwrap_or_else(|_| "5432".into()),
    );
    let ingress = Ingress::start_with(&conninfo, &["--access-log", "true"]);
    let ready = ingress.get("/readyz").unwrap();
    assert_eq!(
        (ready.status, ready.json()["providers"].clone()),
        (200, json!(1)),
        "{ready:?}"
    );

    let (mut headers, body) = github("traced-1");
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    headers.push(("traceparent".into(), traceparent.into()));
    assert_eq!(ingress.post("/webhooks/gh", &headers, &body).status, 200);
    let mut worker = connect_as("ingress_ops", APP);
    let leased = worker
        .query_one(
            "SELECT event_id, traceparent FROM webhook_next(1, provider => 'gh')",
            &[],
        )
        .unwrap();
    assert_eq!(leased.get::<_, String>(0), "traced-1");
    let passed: Option<String> = leased.get(1);
    assert!(
        passed
            .as_deref()
            .is_some_and(|t| t.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-")),
        "{passed:?}"
    );

    let metrics = ingress.metrics();
    for expected in [
        "webhook_ingress_requests_total{provider=\"gh\",code=\"200\"} 1",
        "webhook_ingress_request_duration_seconds_count{provider=\"gh\"} 1",
        "webhook_ingress_pool_wait_seconds_count 1",
        "webhook_ingress_pool_max 8",
    ] {
        assert!(metrics.contains(expected), "{expected}\n{metrics}");
    }

    crash_server();
    let not_ready = ingress.get("/readyz").unwrap();
    start_server();
    assert_eq!(not_ready.status, 503, "{not_ready:?}");
    wait_for("ready again", || {
        ingress.get("/readyz").is_ok_and(|r| r.status == 200)
    });

    let logs = ingress.logs();
    for line in logs.lines() {
        let entry: Value =
            serde_json::from_str(line).unwrap_or_else(|_| panic!("not JSON: {line}"));
        assert!(
            entry["ts"].is_number() && entry["level"].is_string(),
            "{line}"
        );
    }
    let signature = headers
        .iter()
        .find(|(k, _)| k == "X-Hub-Signature-256")
        .unwrap()
        .1
        .clone();
    for secret_or_payload in [signature.as_str(), SECRET, "\"action\"", "opened"] {
        assert!(
            !logs.contains(secret_or_payload),
            "{secret_or_payload} logged:\n{logs}"
        );
    }
    assert!(
        logs.contains("\"event\":\"delivery\""),
        "the access log: {logs}"
    );
    let _ = &mut db;
}

/// A gauge's value in the ingress's metrics.
fn gauge(ingress: &Ingress, name: &str) -> f64 {
    let metrics = ingress.metrics();
    metrics
        .lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name}:\n{metrics}"))
}

/// The registry is read again every --providers-refresh seconds by the
/// ingress itself, with no delivery asking: a provider registered and one
/// switched to claim mode show in /metrics without a request, and a
/// delivery for the switched one is refused from what was read (a known
/// provider's request never reads the registry on its path).
#[test]
fn the_registry_is_kept_fresh_off_the_request_path() {
    let _serial = one_at_a_time();
    let mut db = prepare("ingress_refresh");
    let ingress = Ingress::start("ingress_refresh", APP, &["--providers-refresh", "1"]);
    assert_eq!(gauge(&ingress, "webhook_ingress_providers_served"), 1.0);
    let first_read = gauge(&ingress, "webhook_ingress_registry_read_timestamp_seconds");
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    assert!(now() - first_read < 30.0, "{first_read}");
    let (headers, body) = github("fresh-1");
    assert_eq!(ingress.post("/webhooks/gh", &headers, &body).status, 200);

    let within_refresh = |what: &str, served: f64| {
        let since = Instant::now();
        wait_for(what, || {
            gauge(&ingress, "webhook_ingress_providers_served") == served
        });
        assert!(
            since.elapsed() < Duration::from_secs(4),
            "{what} took {:?} with a refresh of 1 s",
            since.elapsed()
        );
    };
    db.batch_execute(&format!(
        "SELECT webhook_register_provider('later', secret => '{SECRET}', scheme => 'github', inbox => true)"
    ))
    .unwrap();
    within_refresh("the registered provider", 2.0);
    db.batch_execute("SELECT webhook_register_provider('gh', inbox => false)")
        .unwrap();
    within_refresh("the provider switched to claim mode", 1.0);
    assert!(gauge(&ingress, "webhook_ingress_registry_read_timestamp_seconds") > first_read);

    let (headers, body) = github("fresh-2");
    let refused = ingress.post("/webhooks/gh", &headers, &body);
    assert_eq!(
        (refused.status, refused.json()["status"].clone()),
        (404, json!("claim_mode")),
        "{refused:?}"
    );
    assert_eq!(stored(&mut db, "gh"), 1);
    let (headers, body) = github("fresh-3");
    assert_eq!(ingress.post("/webhooks/later", &headers, &body).status, 200);
}

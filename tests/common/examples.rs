//! The example receivers and workers (examples/python, examples/node,
//! examples/rust) run as their users run them, for the suites that change
//! the server under them (a failover, an extension update): each is its
//! own process with DATABASE_URL, PORT and EMAIL_URL, deliveries reach it
//! over HTTP signed as the providers sign them, and the workers' emails go
//! to a stand-in of an email API that records each request.
//!
//! The commands come from the environment, as `.ci/examples-test` builds
//! them: RECEIVERS and WORKERS, JSON objects `{language: [cmd, ...args]}`.
#![allow(dead_code)]

use postgres::Client;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The role the examples connect as: EXECUTE on the API, INSERT on
/// `orders`, nothing else.
pub const APP_ROLE: &str = "webhook_example_app";
pub const STRIPE_SECRET: &str = "whsec_examples_stripe";
pub const GITHUB_SECRET: &str = "examples-github-secret";

/// What the examples need in their database, run as its owner once the
/// extension is there: the business table, the application role, and two
/// providers: Stripe claimed in the receiver's transaction, GitHub (which
/// never redelivers) through the inbox.
pub const SHOP: &str = "
    CREATE TABLE orders (provider text, event_id text, event_type text, language text,
                         created_at timestamptz DEFAULT clock_timestamp());
    DO $$ BEGIN
      IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'webhook_example_app') THEN
        CREATE ROLE webhook_example_app LOGIN;
      END IF;
    END $$;
    SELECT webhook_grant_app('webhook_example_app');
    GRANT INSERT ON orders TO webhook_example_app;
    SELECT webhook_register_provider('stripe', secret => 'whsec_examples_stripe');
    SELECT webhook_register_provider('github', secret => 'examples-github-secret', inbox => true);";

/// `{language: [cmd, ...args]}` from the environment variable `var`.
pub fn commands(var: &str) -> BTreeMap<String, Vec<String>> {
    let json = std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: run `make examples-test`, which builds the examples and sets it")
    });
    serde_json::from_str(&json).unwrap_or_else(|e| panic!("{var}: {e}"))
}

/// A port nothing listens on now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A running example; SIGTERM when dropped (the examples finish what they
/// hold and exit on it), then killed if it lingers. Its stderr goes to a
/// log kept for a failing test.
pub struct Program {
    pub label: String,
    child: Child,
    pub log: std::path::PathBuf,
}

impl Program {
    pub fn spawn(label: &str, command: &[String], env: &[(&str, String)]) -> Program {
        let log = std::env::temp_dir().join(format!("pgwi-example-{label}.log"));
        let mut cmd = Command::new(&command[0]);
        cmd.args(&command[1..])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("start {label} ({command:?}): {e}"));
        Program {
            label: label.to_string(),
            child,
            log,
        }
    }

    /// SIGTERM, and its exit status once it stopped (10 s at most).
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// Still running: an example that died would make every figure after
    /// it meaningless.
    pub fn assert_running(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!(
                "{} exited ({status}):\n{}",
                self.label,
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// An HTTP/1.1 POST, one request per connection; the answer's status.
pub fn post(
    port: u16,
    path: &str,
    headers: &serde_json::Value,
    body: &str,
) -> std::io::Result<u16> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (name, value) in headers.as_object().unwrap() {
        request.push_str(&format!("{name}: {}\r\n", value.as_str().unwrap()));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes())?;
    let mut status_line = String::new();
    BufReader::new(stream).read_line(&mut status_line)?;
    status_line
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status in {status_line:?}")))
}

/// Until the program on `port` answers GET /healthz (60 s at most: a
/// receiver's first start compiles nothing, but loads its runtime).
pub fn wait_healthy(program: &mut Program, port: u16) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        program.assert_running();
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let asked = s.write_all(
                format!(
                    "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
                )
                .as_bytes(),
            );
            let mut line = String::new();
            if asked.is_ok()
                && BufReader::new(s).read_line(&mut line).is_ok()
                && line.contains(" 200")
            {
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{} never answered /healthz",
            program.label
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A stand-in for the email API the workers call: answers 200 to every
/// request and records its Idempotency-Key and the event it is about.
pub struct EmailApi {
    pub url: String,
    sent: Arc<Mutex<Vec<(String, String)>>>,
}

impl EmailApi {
    pub fn start() -> EmailApi {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/send", listener.local_addr().unwrap());
        let sent = Arc::new(Mutex::new(Vec::new()));
        let record = Arc::clone(&sent);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let record = Arc::clone(&record);
                std::thread::spawn(move || serve_emails(stream, &record));
            }
        });
        EmailApi { url, sent }
    }

    /// (idempotency key, event id) of each request so far.
    pub fn sent(&self) -> Vec<(String, String)> {
        self.sent.lock().unwrap().clone()
    }
}

/// The requests of one connection (kept alive or not, as the client asks).
fn serve_emails(stream: TcpStream, record: &Mutex<Vec<(String, String)>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let (mut length, mut key, mut close) = (0usize, String::new(), false);
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        loop {
            line.clear();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let header = line.trim_end();
            if header.is_empty() {
                break;
            }
            if let Some((name, value)) = header.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap_or(0),
                    "idempotency-key" => key = value.trim().to_string(),
                    "connection" => close = value.trim().eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let event = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["event"].as_str().map(str::to_string))
            .unwrap_or_default();
        record.lock().unwrap().push((key, event));
        let answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 13\r\n\r\n{\"sent\":true}";
        if writer.write_all(answer.as_bytes()).is_err() || close {
            return;
        }
    }
}

/// The receivers and workers of `languages`, all on `database_url`, and
/// the email API their workers call. `lease`: the workers' WORKER_LEASE.
pub struct Shop {
    pub email: EmailApi,
    /// language → the port its receiver listens on.
    pub receivers: BTreeMap<String, u16>,
    pub programs: Vec<Program>,
}

impl Shop {
    pub fn start(languages: &[&str], database_url: &str, lease: &str) -> Shop {
        let receiver_commands = commands("RECEIVERS");
        let worker_commands = commands("WORKERS");
        let email = EmailApi::start();
        let mut receivers = BTreeMap::new();
        let mut programs = Vec::new();
        for &language in languages {
            let port = free_port();
            let env = [
                ("DATABASE_URL", database_url.to_string()),
                ("EMAIL_URL", email.url.clone()),
                ("PORT", port.to_string()),
                ("WORKER_LEASE", lease.to_string()),
            ];
            let mut receiver = Program::spawn(
                &format!("{language}-receiver"),
                &receiver_commands[language],
                &env,
            );
            wait_healthy(&mut receiver, port);
            programs.push(receiver);
            programs.push(Program::spawn(
                &format!("{language}-worker"),
                &worker_commands[language],
                &env,
            ));
            receivers.insert(language.to_string(), port);
        }
        Shop {
            email,
            receivers,
            programs,
        }
    }

    /// Every example still running.
    pub fn assert_running(&mut self) {
        for p in &mut self.programs {
            p.assert_running();
        }
    }

    /// Each language's providers: two delivering Stripe events to the
    /// receiver's claim endpoint, one GitHub deliveries to its inbox.
    pub fn providers(&self, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<Delivered>> {
        let mut providers = Vec::new();
        for (language, &port) in &self.receivers {
            for t in 0..2 {
                providers.push(provider(
                    port,
                    Provider::Stripe,
                    format!("evt_{language}_{t}_"),
                    Arc::clone(stop),
                ));
            }
            providers.push(provider(
                port,
                Provider::GitHub,
                format!("gh-{language}-"),
                Arc::clone(stop),
            ));
        }
        providers
    }

    /// SIGTERM to every example; each must exit by itself, cleanly.
    pub fn stop(mut self) {
        for p in &mut self.programs {
            let status = p.terminate();
            assert!(
                status.is_some_and(|s| s.success() || s.code().is_none()),
                "{} on SIGTERM: {status:?}\n{}",
                p.label,
                std::fs::read_to_string(&p.log).unwrap_or_default()
            );
        }
    }
}

/// A provider the examples are delivered from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Provider {
    /// Claimed by the receiver in its transaction (POST /webhooks/stripe);
    /// retried by Stripe on anything but 2xx.
    Stripe,
    /// Stored in the inbox (POST /inbox/github), processed by the workers.
    /// GitHub never redelivers: an answer other than 2xx is a lost event
    /// unless someone redelivers it by hand, which this provider does and
    /// counts.
    GitHub,
}

impl Provider {
    pub fn name(self) -> &'static str {
        match self {
            Provider::Stripe => "stripe",
            Provider::GitHub => "github",
        }
    }

    fn path(self) -> &'static str {
        match self {
            Provider::Stripe => "/webhooks/stripe",
            Provider::GitHub => "/inbox/github",
        }
    }

    /// The delivery of `event_id`, signed now.
    fn signed(self, event_id: &str) -> (serde_json::Value, String) {
        match self {
            Provider::Stripe => {
                let body = super::payload(event_id);
                let headers = super::sign::stripe(&body, super::sign::now(), STRIPE_SECRET);
                (headers, body)
            }
            Provider::GitHub => {
                let body = format!(r#"{{"action": "opened", "issue": {{"title": "{event_id}"}}}}"#);
                let headers = super::sign::github(event_id, "issues", &body, GITHUB_SECRET);
                (headers, body)
            }
        }
    }
}

/// What a provider saw.
#[derive(Default, Debug)]
pub struct Delivered {
    /// (provider, event id) of each delivery answered 2xx: never sent again.
    pub acknowledged: Vec<(String, String)>,
    /// Answers other than 2xx by status ("connection": no answer), each
    /// followed by a redelivery.
    pub refused: BTreeMap<String, usize>,
    /// GitHub deliveries not acknowledged at their first attempt: events
    /// GitHub itself would have dropped.
    pub github_dropped: usize,
}

impl Delivered {
    pub fn merge(all: impl IntoIterator<Item = Delivered>) -> Delivered {
        let mut merged = Delivered::default();
        for d in all {
            merged.acknowledged.extend(d.acknowledged);
            for (k, n) in d.refused {
                *merged.refused.entry(k).or_default() += n;
            }
            merged.github_dropped += d.github_dropped;
        }
        merged
    }

    pub fn refusals(&self) -> usize {
        self.refused.values().sum()
    }
}

/// A provider's delivery loop, events `{prefix}1`, `{prefix}2`, … one after
/// another, each sent again (signed anew) until it is answered 2xx.
pub fn provider(
    port: u16,
    provider: Provider,
    prefix: String,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Delivered> {
    std::thread::spawn(move || {
        let mut seen = Delivered::default();
        let mut n = 0;
        while !stop.load(SeqCst) {
            n += 1;
            let event_id = format!("{prefix}{n}");
            for attempt in 1.. {
                let (headers, body) = provider.signed(&event_id);
                let answer = match post(port, provider.path(), &headers, &body) {
                    Ok(status) if (200..300).contains(&status) => None,
                    Ok(status) => Some(status.to_string()),
                    Err(_) => Some("connection".to_string()),
                };
                let Some(refused) = answer else {
                    seen.acknowledged
                        .push((provider.name().to_string(), event_id.clone()));
                    break;
                };
                if attempt == 1 && provider == Provider::GitHub {
                    seen.github_dropped += 1;
                }
                *seen.refused.entry(refused).or_default() += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        seen
    })
}

/// What the examples left: acknowledged events without their order
/// (lost), events with more than one order (doubled), inbox rows not
/// processed (stuck), and for the inbox's events, those emailed under more
/// than one key (emailed twice: a retry under the same key is the email
/// API's to drop) or not emailed at all.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub acknowledged: usize,
    pub lost: usize,
    pub doubled: usize,
    pub stuck: i64,
    pub emailed_twice: usize,
    pub not_emailed: usize,
}

impl Outcome {
    /// Traffic ran, and nothing was lost, doubled or left behind.
    pub fn assert_clean(&self) {
        let o = self;
        assert!(o.acknowledged > 100, "traffic ran: {o:?}");
        assert_eq!(o.lost, 0, "acknowledged and lost: {o:?}");
        assert_eq!(o.doubled, 0, "an order made twice: {o:?}");
        assert_eq!(o.emailed_twice, 0, "an event emailed under two keys: {o:?}");
        assert_eq!(
            o.not_emailed, 0,
            "an inbox event processed without its email: {o:?}"
        );
        assert_eq!(o.stuck, 0, "left in the inbox: {o:?}");
    }
}

pub fn outcome(c: &mut Client, delivered: &Delivered, email: &EmailApi) -> Outcome {
    let orders: BTreeMap<(String, String), i64> = c
        .query(
            "SELECT provider, event_id, count(*) FROM orders GROUP BY 1, 2",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| ((r.get(0), r.get(1)), r.get(2)))
        .collect();
    let stuck = super::traffic::unprocessed(c);
    let mut keys: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (key, event) in email.sent() {
        keys.entry(event).or_default().insert(key);
    }
    let inbox: Vec<&String> = delivered
        .acknowledged
        .iter()
        .filter(|(p, _)| p == Provider::GitHub.name())
        .map(|(_, e)| e)
        .collect();
    Outcome {
        acknowledged: delivered.acknowledged.len(),
        lost: delivered
            .acknowledged
            .iter()
            .filter(|k| !orders.contains_key(*k))
            .count(),
        doubled: orders.values().filter(|&&n| n > 1).count(),
        stuck,
        emailed_twice: keys.values().filter(|k| k.len() > 1).count(),
        not_emailed: inbox.iter().filter(|e| !keys.contains_key(**e)).count(),
    }
}

/// Until nothing in the inbox is ready or leased (`what` names the wait).
pub fn wait_drained(c: &mut Client, what: &str) {
    super::wait_for(what, || {
        super::count(
            c,
            "SELECT count(*) FROM webhook.inbox WHERE status IN ('ready', 'leased')",
        ) == 0
    });
}

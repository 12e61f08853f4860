//! webhook-ingress, the HTTP front door, run as its binary (INGRESS_BIN)
//! and spoken to over HTTP/1.1 written by hand: the tests need to send a
//! body slowly, or declare one larger than they send, which a client
//! library does not let one do.
#![allow(dead_code)]

use serde_json::Value;
use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The base URL the ingress is started with, for URL-signed schemes.
pub const PUBLIC_URL: &str = "https://hooks.example.com";

// ---------------------------------------------------------------------------
// The ingress process.

pub struct Ingress {
    pub child: Child,
    pub addr: SocketAddr,
    log: std::path::PathBuf,
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The connection string of the application role to `db`.
pub fn app_conninfo(db: &str, role: &str) -> String {
    format!(
        "host={} port={} dbname={db} user={role}",
        std::env::var("PGHOST").unwrap_or_else(|_| "127.0.0.1".into()),
        std::env::var("PGPORT").unwrap_or_else(|_| "5432".into()),
    )
}

impl Ingress {
    /// Start it on a free port with these settings (beyond the database,
    /// the public URL and the /webhooks prefix), and wait for /healthz.
    pub fn start(db: &str, role: &str, args: &[&str]) -> Ingress {
        Self::start_with(&app_conninfo(db, role), args)
    }

    pub fn start_with(conninfo: &str, args: &[&str]) -> Ingress {
        let bin = std::env::var("INGRESS_BIN")
            .expect("INGRESS_BIN names the webhook-ingress binary (make ingress-test sets it)");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = std::env::temp_dir().join(format!("ingress-{}.log", addr.port()));
        let child = Command::new(bin)
            .args(["--listen", &addr.to_string(), "--database", conninfo])
            .args(["--public-url", PUBLIC_URL, "--prefix", "/webhooks"])
            .args(args)
            .env_remove("DATABASE_URL")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start webhook-ingress");
        let mut ingress = Ingress { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(r) = ingress.get("/healthz") {
                assert_eq!(r.status, 200);
                break;
            }
            if let Some(status) = ingress.child.try_wait().unwrap() {
                panic!("webhook-ingress exited {status}: {}", ingress.logs());
            }
            assert!(
                Instant::now() < deadline,
                "webhook-ingress did not start: {}",
                ingress.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ingress
    }

    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn get(&self, path: &str) -> std::io::Result<Answer> {
        http(self.addr, "GET", path, &[], b"")
    }

    pub fn post(&self, path: &str, headers: &[(String, String)], body: &[u8]) -> Answer {
        http(self.addr, "POST", path, headers, body)
            .unwrap_or_else(|e| panic!("POST {path}: {e}\n{}", self.logs()))
    }

    pub fn metrics(&self) -> String {
        String::from_utf8(self.get("/metrics").unwrap().body).unwrap()
    }

    /// SIGTERM, as systemd stops it.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    }

    pub fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "webhook-ingress did not exit: {}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Ingress {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

// ---------------------------------------------------------------------------
// HTTP/1.1, by hand: the tests need to send a body slowly, or declare one
// larger than they send, which a client library does not let one do.

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: HashMap<String, String>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).map(String::as_str)
    }
}

pub fn request_head(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    length: usize,
) -> Vec<u8> {
    let mut head =
        format!("{method} {path} HTTP/1.1\r\nHost: ingress.test\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {length}\r\n\r\n"));
    head.into_bytes()
}

pub fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut request = request_head(method, path, headers, body.len());
    request.extend_from_slice(body);
    stream.write_all(&request)?;
    read_answer(&mut stream)
}

pub fn read_answer(stream: &mut TcpStream) -> std::io::Result<Answer> {
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| {
            std::io::Error::other(format!("no answer: {:?}", String::from_utf8_lossy(&raw)))
        })?;
    let head = String::from_utf8_lossy(&raw[..split]).to_string();
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no status line: {head}")))?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok(Answer {
        status,
        headers,
        body: raw[split + 4..].to_vec(),
    })
}

pub fn header_list(headers: &Value) -> Vec<(String, String)> {
    headers
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
        .collect()
}

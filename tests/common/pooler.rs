//! PgBouncer in transaction mode in front of the suites' server
//! (clients/testing/pooler): a few server connections shared by every
//! client, as on the pooled endpoints of managed hosts.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub struct Pooler {
    dir: PathBuf,
    pub port: u16,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("clients/testing/pooler")
}

fn run(args: &[&str]) {
    let status = Command::new(script())
        .args(args)
        .status()
        .expect("run clients/testing/pooler");
    assert!(status.success(), "pooler {args:?}");
}

impl Pooler {
    /// Started on a free port, letting in `users`.
    pub fn start(users: &[&str]) -> Pooler {
        let port = super::ingress::free_port();
        let dir = std::env::temp_dir().join(format!("pooler-{port}"));
        let mut args = vec!["start", dir.to_str().unwrap()];
        let port_text = port.to_string();
        args.push(&port_text);
        args.extend_from_slice(users);
        run(&args);
        Pooler { dir, port }
    }

    /// The connection string of `user` to `db` through it.
    pub fn conninfo(&self, db: &str, user: &str) -> String {
        format!("host=127.0.0.1 port={} dbname={db} user={user}", self.port)
    }

    /// Stopped at once, every client connection cut, then started again
    /// after `down` seconds.
    pub fn restart(&self, down: f64) {
        run(&["restart", self.dir.to_str().unwrap(), &down.to_string()]);
    }
}

impl Drop for Pooler {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .args(["stop", self.dir.to_str().unwrap()])
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

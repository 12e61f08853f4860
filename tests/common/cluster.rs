//! PostgreSQL clusters a suite makes, starts and stops itself (a primary
//! and its standby, an old major and a new one), each in a directory of
//! its own owned by the server's user.

use super::{as_root, server_command};
use postgres::{Client, Config, NoTls};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The bin directory of a PostgreSQL installation, from its pg_config.
pub fn bindir_of(pg_config: &str) -> PathBuf {
    let out = std::process::Command::new(pg_config)
        .arg("--bindir")
        .output()
        .unwrap_or_else(|e| panic!("run {pg_config}: {e}"));
    assert!(out.status.success(), "{pg_config} --bindir");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
}

/// A fresh, empty directory, the server's user's.
pub fn fresh_dir(dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    if as_root() {
        let status = std::process::Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .unwrap();
        assert!(status.success());
    }
    dir.to_path_buf()
}

/// A program of `bindir`, run as the server's user in `cwd`; it must
/// succeed.
pub fn program_in(bindir: &Path, cwd: &Path, name: &str, args: &[&str]) -> std::process::Output {
    let out = server_command(bindir.join(name))
        .args(args)
        .current_dir(cwd)
        .output()
        .unwrap_or_else(|e| panic!("run {name}: {e}"));
    assert!(
        out.status.success(),
        "{name} {args:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// One cluster: its installation, its data directory (whose parent holds
/// its socket and log) and its port; `options` adds server settings.
#[derive(Clone)]
pub struct Cluster {
    pub bindir: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    pub options: String,
}

impl Cluster {
    pub fn program(&self, name: &str, args: &[&str]) -> std::process::Output {
        program_in(&self.bindir, self.data.parent().unwrap(), name, args)
    }

    /// initdb, with `args` besides the data directory and a trusting
    /// superuser `postgres`.
    pub fn init(&self, args: &[&str]) {
        let data = self.data.to_str().unwrap();
        let mut all = vec!["-D", data, "-U", "postgres", "-A", "trust", "--no-sync"];
        all.extend_from_slice(args);
        self.program("initdb", &all);
    }

    pub fn server_options(&self) -> String {
        format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c max_connections=100 {}",
            self.port,
            self.data.parent().unwrap().display(),
            self.options
        )
    }

    pub fn start(&self) {
        let log = self.data.parent().unwrap().join("server.log");
        self.program(
            "pg_ctl",
            &[
                "-D",
                self.data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-o",
                &self.server_options(),
                "-w",
                "start",
            ],
        );
    }

    pub fn stop(&self, mode: &str) {
        self.program(
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-m", mode, "-w", "stop"],
        );
    }

    pub fn promote(&self) {
        self.program(
            "pg_ctl",
            &["-D", self.data.to_str().unwrap(), "-w", "promote"],
        );
    }

    pub fn config(&self, db: &str) -> Config {
        let mut c = Config::new();
        c.host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname(db)
            .connect_timeout(Duration::from_secs(5));
        c
    }

    pub fn connect(&self, db: &str) -> Client {
        self.config(db)
            .connect(NoTls)
            .unwrap_or_else(|e| panic!("connect to port {}: {e}", self.port))
    }
}

/// Stops its clusters when dropped, whatever stopped the test (a failed
/// assertion too), so that the next run finds their ports free.
pub struct StopOnDrop(pub Vec<Cluster>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        for c in &self.0 {
            // Whichever is still up; a stopped one's error is of no interest.
            let _ = server_command(c.bindir.join("pg_ctl"))
                .args(["-D", c.data.to_str().unwrap(), "-m", "immediate", "stop"])
                .output();
        }
    }
}

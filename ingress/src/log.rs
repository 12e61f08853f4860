//! Structured logs: one JSON object a line on standard error (journald
//! keeps it). What is logged is chosen where it is logged: never a body,
//! a header's value or the connection string.

use serde_json::Value;
use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

/// Log `event` at `level` with `fields` (an object).
pub fn event(level: &str, event: &str, fields: Value) {
    let ts = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut line = serde_json::Map::new();
    line.insert("ts".into(), Value::from((ts * 1000.0).round() / 1000.0));
    line.insert("level".into(), Value::from(level));
    line.insert("event".into(), Value::from(event));
    if let Value::Object(fields) = fields {
        line.extend(fields);
    }
    let mut out = std::io::stderr().lock();
    let _ = writeln!(out, "{}", Value::Object(line));
}

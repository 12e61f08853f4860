//! Per-source rate limiting, before the database is touched: a token
//! bucket per sender address (`--rate` deliveries a second, `--burst` at
//! once). The address is the peer's, or behind a proxy the last entry of
//! the header the proxy sets (`--client-ip-header`): the one the proxy
//! appended, which a sender cannot choose; earlier entries are the
//! sender's to write.
//!
//! The table of buckets is bounded: past `MAX_SOURCES` addresses, buckets
//! that have filled up again (sources quiet for a while, which a fresh
//! bucket treats the same) are dropped, and if none has, the oldest.

use axum::http::{HeaderMap, HeaderName};
use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_SOURCES: usize = 100_000;

pub struct RateLimit {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    pub fn new(rate: f64, burst: f64) -> Self {
        RateLimit {
            rate,
            burst,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one delivery's token for `source`; Err: how long until one is
    /// there.
    pub fn take(&self, source: IpAddr) -> Result<(), Duration> {
        let now = Instant::now();
        let mut buckets = self.buckets.lock().expect("the buckets' lock");
        if buckets.len() >= MAX_SOURCES && !buckets.contains_key(&source) {
            self.prune(&mut buckets, now);
        }
        let bucket = buckets.entry(source).or_insert(Bucket {
            tokens: self.burst,
            at: now,
        });
        let elapsed = now.duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * self.rate).min(self.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - bucket.tokens) / self.rate))
        }
    }

    fn prune(&self, buckets: &mut HashMap<IpAddr, Bucket>, now: Instant) {
        let full_after = self.burst / self.rate;
        buckets.retain(|_, b| now.duration_since(b.at).as_secs_f64() < full_after);
        if buckets.len() >= MAX_SOURCES {
            if let Some(oldest) = buckets.iter().min_by_key(|(_, b)| b.at).map(|(a, _)| *a) {
                buckets.remove(&oldest);
            }
        }
    }
}

/// The sender's address: the last entry of `header` when it is configured
/// and holds one, else the peer's.
pub fn source(peer: SocketAddr, headers: &HeaderMap, header: Option<&HeaderName>) -> IpAddr {
    header
        .and_then(|name| headers.get_all(name).iter().next_back())
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.rsplit(',').next())
        .and_then(|last| parse_address(last.trim()))
        .unwrap_or(peer.ip())
}

/// An address as proxies write it: bare, `[v6]`, with a port, or `for=` of
/// the `Forwarded` header.
fn parse_address(text: &str) -> Option<IpAddr> {
    let text = text.strip_prefix("for=").unwrap_or(text).trim_matches('"');
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            text.strip_prefix('[')
                .and_then(|t| t.split(']').next())
                .and_then(|t| t.parse().ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let limit = RateLimit::new(10.0, 3.0);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        for _ in 0..3 {
            assert!(limit.take(a).is_ok());
        }
        let wait = limit.take(a).unwrap_err();
        assert!(wait <= Duration::from_millis(100), "{wait:?}");
        assert!(limit.take(b).is_ok(), "another source has its own bucket");
        std::thread::sleep(Duration::from_millis(120));
        assert!(limit.take(a).is_ok(), "a token came back");
        assert!(limit.take(a).is_err());
    }

    #[test]
    fn the_source_is_the_proxy_s_last_entry_never_the_sender_s() {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let name = HeaderName::from_static("x-forwarded-for");
        let mut headers = HeaderMap::new();
        headers.insert(&name, "10.9.9.9, 203.0.113.7".parse().unwrap());
        assert_eq!(
            source(peer, &headers, Some(&name)),
            "203.0.113.7".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            source(peer, &headers, None),
            peer.ip(),
            "not configured: the peer"
        );
        headers.insert(&name, "garbage".parse().unwrap());
        assert_eq!(source(peer, &headers, Some(&name)), peer.ip());
        headers.insert(&name, "[2001:db8::1]:443".parse().unwrap());
        assert_eq!(
            source(peer, &headers, Some(&name)),
            "2001:db8::1".parse::<IpAddr>().unwrap()
        );
    }
}

//! Per-source rate limiting, before the database is touched: a token
//! bucket per source (`--rate` deliveries a second, `--burst` at once). A
//! source is the sender's address cut to its prefix (`source.rs`: an IPv6
//! sender is its /64), the address the peer's or, behind a proxy, the one
//! the proxy wrote (`--client-ip-header`).
//!
//! The table of buckets is bounded: once it holds `MAX_SOURCES`, buckets
//! that have filled up again (sources quiet for a while, which a fresh
//! bucket treats the same) are dropped, then the oldest, down to nine
//! tenths of the bound, so that the scan is paid once for a tenth of the
//! table's inserts rather than by each: a flood of new sources costs a
//! constant time per delivery, not one proportional to the table.

use crate::source::Prefixes;
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

const MAX_SOURCES: usize = 100_000;

pub struct RateLimit {
    rate: f64,
    burst: f64,
    prefixes: Prefixes,
    buckets: Mutex<HashMap<IpAddr, Bucket>>,
}

#[derive(Clone, Copy)]
struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimit {
    pub fn new(rate: f64, burst: f64, prefixes: Prefixes) -> Self {
        RateLimit {
            rate,
            burst,
            prefixes,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one delivery's token for the sender at `address`; Err: how
    /// long until one is there.
    pub fn take(&self, address: IpAddr) -> Result<(), Duration> {
        let source = self.prefixes.source(address);
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
        let keep = MAX_SOURCES * 9 / 10;
        if buckets.len() > keep {
            // The newest `keep` stay: the rest, oldest first, go.
            let mut ages: Vec<Instant> = buckets.values().map(|b| b.at).collect();
            let cut = ages.len() - keep;
            let (_, newest_gone, _) = ages.select_nth_unstable(cut - 1);
            let newest_gone = *newest_gone;
            buckets.retain(|_, b| b.at > newest_gone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_rate() {
        let limit = RateLimit::new(10.0, 3.0, Prefixes::default());
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
    fn an_ipv6_sender_has_one_bucket_for_its_64() {
        let limit = RateLimit::new(1.0, 2.0, Prefixes::default());
        assert!(limit.take("2001:db8:1:2::1".parse().unwrap()).is_ok());
        assert!(limit.take("2001:db8:1:2::2".parse().unwrap()).is_ok());
        assert!(
            limit.take("2001:db8:1:2:ffff::3".parse().unwrap()).is_err(),
            "another address of the same /64 shares its bucket"
        );
        assert!(limit.take("2001:db8:1:3::1".parse().unwrap()).is_ok());
    }

    #[test]
    fn a_flood_of_new_sources_is_pruned_a_tenth_at_a_time() {
        let limit = RateLimit::new(1.0, 1000.0, Prefixes { v4: 32, v6: 128 });
        let address = |i: u32| IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i));
        for i in 0..MAX_SOURCES as u32 {
            assert!(limit.take(address(i)).is_ok());
        }
        assert_eq!(limit.buckets.lock().unwrap().len(), MAX_SOURCES);
        // Full, and no bucket full again (1000 s to fill): one insert
        // prunes the oldest tenth, the next ones prune nothing.
        assert!(limit.take(address(MAX_SOURCES as u32)).is_ok());
        let after = limit.buckets.lock().unwrap().len();
        assert!(after <= MAX_SOURCES * 9 / 10 + 1, "{after}");
        let started = std::time::Instant::now();
        for i in 1..1000 {
            assert!(limit.take(address(MAX_SOURCES as u32 + i)).is_ok());
        }
        assert_eq!(limit.buckets.lock().unwrap().len(), after + 999);
        assert!(
            limit
                .buckets
                .lock()
                .unwrap()
                .contains_key(&address(MAX_SOURCES as u32 - 1)),
            "the newest stay"
        );
        assert!(
            !limit.buckets.lock().unwrap().contains_key(&address(0)),
            "the oldest went"
        );
        eprintln!("999 new sources after a prune: {:?}", started.elapsed());
    }
}

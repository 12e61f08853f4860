//! Who a sender is, for its share of connections and its rate: an address
//! cut to its network prefix, and behind a trusted proxy the address the
//! proxy wrote.
//!
//! One host holds a whole IPv6 /64 (its provider routes the prefix to it)
//! and may use any address of it, so counting per address would give it
//! 2^64 shares. An IPv6 sender is its /64 (`--source-prefix-v6`); an IPv4
//! one its address (`--source-prefix-v4` 32), or a wider prefix where the
//! DBA chooses one.

use axum::http::{HeaderMap, HeaderName};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;

/// The prefix lengths that make one source.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefixes {
    pub v4: u8,
    pub v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { v4: 32, v6: 64 }
    }
}

impl Prefixes {
    /// The source `address` belongs to: the address with the bits past
    /// its prefix cleared. An IPv4 address mapped into IPv6 is IPv4.
    pub fn source(&self, address: IpAddr) -> IpAddr {
        match address {
            IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(mask_u32(u32::from(v4), self.v4))),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => self.source(IpAddr::V4(v4)),
                None => IpAddr::V6(Ipv6Addr::from(mask_u128(u128::from(v6), self.v6))),
            },
        }
    }
}

fn mask_u32(bits: u32, prefix: u8) -> u32 {
    match prefix {
        0 => 0,
        p if p >= 32 => bits,
        p => bits & (u32::MAX << (32 - p)),
    }
}

fn mask_u128(bits: u128, prefix: u8) -> u128 {
    match prefix {
        0 => 0,
        p if p >= 128 => bits,
        p => bits & (u128::MAX << (128 - p)),
    }
}

/// Why the configured client-address header gave no address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unread {
    /// The request has no such header: the proxy did not set it.
    Absent,
    /// The header's last entry names no address (`unknown`, an obfuscated
    /// identifier, or something that is not an address at all).
    Unreadable,
}

impl Unread {
    pub fn label(self) -> &'static str {
        match self {
            Unread::Absent => "absent",
            Unread::Unreadable => "unreadable",
        }
    }
}

/// The sender's address as a trusted proxy wrote it in `header`: the last
/// entry (the one that proxy appended; earlier ones are the sender's to
/// write). `Forwarded` (RFC 7239) is read by its grammar: elements split
/// by `,`, pairs by `;`, parameter names in any case, values quoted or
/// not, the address in `for=`; any other header is a list of addresses
/// (`X-Forwarded-For`, `X-Real-IP`), each bare, `[v6]` or with a port.
pub fn client_address(headers: &HeaderMap, header: &HeaderName) -> Result<IpAddr, Unread> {
    let value = headers
        .get_all(header)
        .iter()
        .next_back()
        .ok_or(Unread::Absent)?
        .to_str()
        .map_err(|_| Unread::Unreadable)?;
    let last = last_element(value).ok_or(Unread::Unreadable)?;
    let address = if header.as_str() == "forwarded" {
        forwarded_for(last).ok_or(Unread::Unreadable)?
    } else {
        last.trim()
    };
    parse_address(address).ok_or(Unread::Unreadable)
}

/// The last element of a comma-separated header, commas inside quoted
/// strings left alone.
fn last_element(value: &str) -> Option<&str> {
    let mut quoted = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in value.char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if quoted => escaped = true,
            '"' => quoted = !quoted,
            ',' if !quoted => start = i + 1,
            _ => {}
        }
    }
    (!quoted)
        .then(|| value[start..].trim())
        .filter(|e| !e.is_empty())
}

/// The `for=` value of one `Forwarded` element, unquoted.
fn forwarded_for(element: &str) -> Option<&str> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim().eq_ignore_ascii_case("for").then(|| {
            let value = value.trim();
            value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(value)
        })
    })
}

/// An address as proxies write it: bare, `[v6]`, or either with a port.
fn parse_address(text: &str) -> Option<IpAddr> {
    text.parse::<IpAddr>()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .or_else(|| {
            text.strip_prefix('[')
                .and_then(|t| t.split(']').next())
                .and_then(|t| t.parse().ok())
        })
}

/// The sender's address: behind a proxy (`header` set), the address the
/// proxy wrote; else the peer's. A request through the proxy without a
/// readable address is taken as the peer's (the proxy's), and `unread`
/// is told why: never silently, since every such sender then shares the
/// proxy's one share and rate.
pub fn sender(
    peer: SocketAddr,
    headers: &HeaderMap,
    header: Option<&HeaderName>,
    unread: impl FnOnce(Unread),
) -> IpAddr {
    match header.map(|name| client_address(headers, name)) {
        None => peer.ip(),
        Some(Ok(address)) => address,
        Some(Err(why)) => {
            unread(why);
            peer.ip()
        }
    }
}

/// A log line for an event that may come thousands of times a second
/// (refusals at the door, unreadable proxy headers): at most one a
/// second, saying how many were not logged since the last.
pub struct Sampled {
    last: Mutex<Option<Instant>>,
    unlogged: AtomicU64,
}

impl Default for Sampled {
    fn default() -> Self {
        Sampled {
            last: Mutex::new(None),
            unlogged: AtomicU64::new(0),
        }
    }
}

impl Sampled {
    /// Log through `log` (given how many went unlogged before this one)
    /// unless a line was logged in the last second.
    pub fn log(&self, log: impl FnOnce(u64)) {
        let now = Instant::now();
        {
            let mut last = self.last.lock().expect("the sample's lock");
            if last.is_some_and(|at| now.duration_since(at).as_secs_f64() < 1.0) {
                self.unlogged.fetch_add(1, Ordering::Relaxed);
                return;
            }
            *last = Some(now);
        }
        log(self.unlogged.swap(0, Ordering::Relaxed));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_ipv6_sender_is_its_64_and_an_ipv4_one_its_address() {
        let p = Prefixes::default();
        assert_eq!(p.source(ip("2001:db8:1:2:aaaa::1")), ip("2001:db8:1:2::"));
        assert_eq!(
            p.source(ip("2001:db8:1:2:ffff:ffff:ffff:ffff")),
            p.source(ip("2001:db8:1:2::7"))
        );
        assert_ne!(
            p.source(ip("2001:db8:1:3::1")),
            p.source(ip("2001:db8:1:2::1"))
        );
        assert_eq!(p.source(ip("192.0.2.77")), ip("192.0.2.77"));
        assert_eq!(p.source(ip("::ffff:192.0.2.77")), ip("192.0.2.77"));
        let wide = Prefixes { v4: 24, v6: 48 };
        assert_eq!(wide.source(ip("192.0.2.77")), ip("192.0.2.0"));
        assert_eq!(wide.source(ip("2001:db8:1:2::1")), ip("2001:db8:1::"));
        assert_eq!(
            Prefixes { v4: 0, v6: 0 }.source(ip("192.0.2.1")),
            ip("0.0.0.0")
        );
        assert_eq!(
            Prefixes { v4: 32, v6: 128 }.source(ip("2001:db8::1")),
            ip("2001:db8::1")
        );
    }

    fn read(name: &'static str, value: &str) -> Result<IpAddr, Unread> {
        let name = HeaderName::from_static(name);
        let mut headers = HeaderMap::new();
        headers.insert(&name, value.parse().unwrap());
        client_address(&headers, &name)
    }

    #[test]
    fn forwarded_is_read_by_its_grammar() {
        for (value, want) in [
            ("for=192.0.2.60", "192.0.2.60"),
            ("for=192.0.2.60;proto=https;by=203.0.113.43", "192.0.2.60"),
            ("proto=https;For=192.0.2.60", "192.0.2.60"),
            ("FOR=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"),
            ("for=\"192.0.2.60:8080\";host=\"a,b\"", "192.0.2.60"),
            (
                "for=10.0.0.1, for=198.51.100.17;proto=http",
                "198.51.100.17",
            ),
            (
                "for=10.0.0.1;host=\"x, for=6.6.6.6\", for = 198.51.100.17",
                "198.51.100.17",
            ),
        ] {
            assert_eq!(read("forwarded", value), Ok(ip(want)), "{value}");
        }
        for value in [
            "for=unknown",
            "for=_hidden",
            "proto=https",
            "for=\"unterminated",
            "",
            ",",
        ] {
            assert_eq!(read("forwarded", value), Err(Unread::Unreadable), "{value}");
        }
    }

    #[test]
    fn a_list_header_is_its_last_entry() {
        assert_eq!(
            read("x-forwarded-for", "10.9.9.9, 203.0.113.7"),
            Ok(ip("203.0.113.7"))
        );
        assert_eq!(
            read("x-forwarded-for", "[2001:db8::1]:443"),
            Ok(ip("2001:db8::1"))
        );
        assert_eq!(read("x-real-ip", "203.0.113.7:5000"), Ok(ip("203.0.113.7")));
        assert_eq!(read("x-forwarded-for", "garbage"), Err(Unread::Unreadable));
        let absent = client_address(
            &HeaderMap::new(),
            &HeaderName::from_static("x-forwarded-for"),
        );
        assert_eq!(absent, Err(Unread::Absent));
    }

    #[test]
    fn the_peer_is_taken_only_where_no_header_is_configured_or_it_is_said() {
        let peer: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let name = HeaderName::from_static("forwarded");
        let mut headers = HeaderMap::new();
        let mut told = Vec::new();
        assert_eq!(sender(peer, &headers, None, |w| told.push(w)), peer.ip());
        assert!(told.is_empty(), "not behind a proxy: nothing to say");
        assert_eq!(
            sender(peer, &headers, Some(&name), |w| told.push(w)),
            peer.ip()
        );
        headers.insert(&name, "for=unknown".parse().unwrap());
        assert_eq!(
            sender(peer, &headers, Some(&name), |w| told.push(w)),
            peer.ip()
        );
        assert_eq!(told, [Unread::Absent, Unread::Unreadable]);
        headers.insert(&name, "for=198.51.100.17;proto=https".parse().unwrap());
        assert_eq!(
            sender(peer, &headers, Some(&name), |_| panic!("read")),
            ip("198.51.100.17")
        );
    }

    #[test]
    fn sampled_logs_once_a_second_and_counts_the_rest() {
        let sampled = Sampled::default();
        let mut lines = Vec::new();
        for _ in 0..5 {
            sampled.log(|unlogged| lines.push(unlogged));
        }
        assert_eq!(lines, [0]);
        *sampled.last.lock().unwrap() = Some(Instant::now() - std::time::Duration::from_secs(2));
        sampled.log(|unlogged| lines.push(unlogged));
        assert_eq!(lines, [0, 4]);
    }
}

//! What keeps the console safe when it is reachable: optional basic
//! authentication, the `Host` it answers to and the origin its forms come
//! from (against DNS rebinding, which makes another site's page same-origin
//! with a console on loopback), a CSRF token on every form, notices it
//! signed itself, and headers that forbid scripts, framing and sniffing. Who may *do* what is not decided here:
//! the console connects as the role it was given, and the database refuses
//! what that role may not do.

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

/// Secrets of this process, made at start: the CSRF key never leaves it.
pub struct Guard {
    csrf_key: [u8; 32],
    /// `user:password` for basic authentication, if required.
    basic: Option<(String, String)>,
    /// The names the console answers to, as `host` or `host:port`
    /// (lower case): its listen address, `localhost` and `127.0.0.1` on its
    /// port when it listens on loopback, and those configured.
    hosts: Vec<String>,
}

/// Compare two byte strings in time that depends on their lengths only.
pub fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Guard {
    pub fn new(basic: Option<(String, String)>, hosts: Vec<String>) -> Self {
        let mut csrf_key = [0u8; 32];
        getrandom::getrandom(&mut csrf_key).expect("the system's random source");
        Guard {
            csrf_key,
            basic,
            hosts,
        }
    }

    #[cfg(test)]
    pub fn with_key(csrf_key: [u8; 32], basic: Option<(String, String)>) -> Self {
        Guard {
            csrf_key,
            basic,
            hosts: hosts_for("127.0.0.1:8480".parse().unwrap(), &[]),
        }
    }

    /// Whether a request's `Host` is one the console answers to. A page
    /// that rebound its own name to 127.0.0.1 still sends that name.
    pub fn host_allowed(&self, host: Option<&str>) -> bool {
        host.is_some_and(|h| {
            self.hosts
                .iter()
                .any(|allowed| allowed.eq_ignore_ascii_case(h))
        })
    }

    /// Whether a form post comes from the console's own pages: its
    /// `Origin` (sent by every current browser on a POST) names a host the
    /// console answers to, and `Sec-Fetch-Site`, where sent, says
    /// same-origin. A post with neither header is a tool's, not a browser
    /// page's, and is judged by its token alone.
    pub fn same_origin(&self, origin: Option<&str>, fetch_site: Option<&str>) -> bool {
        if fetch_site.is_some_and(|site| site != "same-origin" && site != "none") {
            return false;
        }
        match origin {
            None => true,
            Some(origin) => origin
                .strip_prefix("http://")
                .or_else(|| origin.strip_prefix("https://"))
                .is_some_and(|host| self.host_allowed(Some(host))),
        }
    }

    /// The signature of a notice this console made (the outcome of an
    /// action, carried by its redirect): another site's link cannot put
    /// words on the console's pages.
    pub fn notice_mac(&self, notice: &str) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.csrf_key).expect("any key length");
        mac.update(b"pg_webhook_inbox console notice\n");
        mac.update(notice.as_bytes());
        hex::encode(&mac.finalize().into_bytes()[..16])
    }

    /// A notice, if it carries this console's signature.
    pub fn notice<'a>(&self, notice: Option<&'a str>, mac: Option<&str>) -> Option<&'a str> {
        let notice = notice?;
        mac.filter(|m| same(m.as_bytes(), self.notice_mac(notice).as_bytes()))
            .map(|_| notice)
    }

    /// Whether a request's `Authorization` header lets it in. Without basic
    /// authentication configured, every request does (the console then
    /// listens on 127.0.0.1 unless told otherwise).
    pub fn admits(&self, authorization: Option<&str>) -> bool {
        let Some((user, password)) = &self.basic else {
            return true;
        };
        let Some(encoded) = authorization.and_then(|h| h.strip_prefix("Basic ")) else {
            return false;
        };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else {
            return false;
        };
        let expected = format!("{user}:{password}");
        same(&decoded, expected.as_bytes())
    }

    /// The token every form carries: a MAC of this process's key, so that
    /// another site's page cannot know it, and a form posted from
    /// anywhere else is refused.
    pub fn csrf_token(&self) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.csrf_key).expect("any key length");
        mac.update(b"pg_webhook_inbox console form");
        hex::encode(mac.finalize().into_bytes())
    }

    pub fn csrf_valid(&self, token: Option<&str>) -> bool {
        token.is_some_and(|t| same(t.as_bytes(), self.csrf_token().as_bytes()))
    }
}

/// The `Host` values a console listening on `listen` answers to: the
/// address itself, and on loopback `localhost` and both loopback forms on
/// its port; then the names configured (`WEBHOOK_CONSOLE_HOSTS`, as a
/// reverse proxy in front of it sends them). Each with and without the
/// port, since browsers leave out a default one.
pub fn hosts_for(listen: std::net::SocketAddr, configured: &[String]) -> Vec<String> {
    let port = listen.port();
    let mut names: Vec<String> = vec![match listen {
        std::net::SocketAddr::V4(a) => a.ip().to_string(),
        std::net::SocketAddr::V6(a) => format!("[{}]", a.ip()),
    }];
    if listen.ip().is_loopback() {
        names.extend(["localhost".into(), "127.0.0.1".into(), "[::1]".into()]);
    }
    let mut hosts = Vec::new();
    for name in names {
        hosts.push(format!("{name}:{port}"));
        if port == 80 || port == 443 {
            hosts.push(name);
        }
    }
    hosts.extend(
        configured
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty()),
    );
    hosts
}

/// The `Host` values answered through a Unix socket: `localhost` (what
/// a client on the machine calls it) and those configured.
pub fn hosts_for_socket(configured: &[String]) -> Vec<String> {
    let mut hosts = vec!["localhost".to_string()];
    hosts.extend(
        configured
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty()),
    );
    hosts
}

/// Headers on every answer: no script may run (the console has none), no
/// other site may frame it, forms post only to it, nothing is sniffed and
/// no referrer leaks an event id to another site. (`same-origin`, not
/// `no-referrer`: under `no-referrer` a browser sends `Origin: null` with
/// the console's own form posts, and the origin check could not tell them
/// from another site's.)
pub const HEADERS: &[(&str, &str)] = &[
    (
        "content-security-policy",
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; \
         frame-ancestors 'none'; base-uri 'none'",
    ),
    ("x-content-type-options", "nosniff"),
    ("referrer-policy", "same-origin"),
    ("x-frame-options", "DENY"),
    ("cache-control", "no-store"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_authentication_takes_only_the_configured_pair() {
        let guard = Guard::with_key([7; 32], Some(("oncall".into(), "s3cret".into())));
        let header = |s: &str| {
            format!(
                "Basic {}",
                base64::engine::general_purpose::STANDARD.encode(s)
            )
        };
        assert!(guard.admits(Some(&header("oncall:s3cret"))));
        assert!(!guard.admits(Some(&header("oncall:s3cre"))));
        assert!(!guard.admits(Some(&header("oncall:s3cret2"))));
        assert!(!guard.admits(Some("Basic !!!")));
        assert!(!guard.admits(Some("Bearer x")));
        assert!(!guard.admits(None));
        assert!(Guard::with_key([7; 32], None).admits(None));
    }

    #[test]
    fn a_form_token_is_this_processs_own() {
        let one = Guard::with_key([1; 32], None);
        let other = Guard::with_key([2; 32], None);
        assert!(one.csrf_valid(Some(&one.csrf_token())));
        assert!(!one.csrf_valid(Some(&other.csrf_token())));
        assert!(!one.csrf_valid(Some("")));
        assert!(!one.csrf_valid(None));
    }

    #[test]
    fn only_the_console_s_own_names_are_answered() {
        let guard = Guard {
            csrf_key: [3; 32],
            basic: None,
            hosts: hosts_for(
                "127.0.0.1:8480".parse().unwrap(),
                &["console.internal".into()],
            ),
        };
        for host in [
            "127.0.0.1:8480",
            "localhost:8480",
            "LOCALHOST:8480",
            "[::1]:8480",
            "console.internal",
        ] {
            assert!(guard.host_allowed(Some(host)), "{host}");
        }
        // DNS rebinding: the attacker's name, resolved to 127.0.0.1.
        for host in [
            "evil.example:8480",
            "evil.example",
            "localhost",
            "127.0.0.1:8481",
            "localhost.evil.example:8480",
            "",
        ] {
            assert!(!guard.host_allowed(Some(host)), "{host}");
        }
        assert!(!guard.host_allowed(None));
        assert!(guard.same_origin(Some("http://localhost:8480"), Some("same-origin")));
        assert!(guard.same_origin(None, None));
        assert!(!guard.same_origin(Some("http://evil.example:8480"), None));
        assert!(!guard.same_origin(Some("http://localhost:8480"), Some("cross-site")));
        assert!(!guard.same_origin(None, Some("same-site")));
        assert!(!guard.same_origin(Some("null"), None));
        // A console listening everywhere answers to its configured names.
        let wide = hosts_for("0.0.0.0:80".parse().unwrap(), &["ops.example.com".into()]);
        assert!(wide.contains(&"ops.example.com".to_string()));
        assert!(!wide.contains(&"localhost:80".to_string()));
    }

    #[test]
    fn a_notice_is_shown_only_when_the_console_made_it() {
        let guard = Guard::with_key([5; 32], None);
        let mac = guard.notice_mac("Requeued 3 dead letters.");
        assert_eq!(
            guard.notice(Some("Requeued 3 dead letters."), Some(&mac)),
            Some("Requeued 3 dead letters.")
        );
        assert_eq!(
            guard.notice(Some("Your account is locked: call +1 555"), Some(&mac)),
            None
        );
        assert_eq!(guard.notice(Some("Requeued 3 dead letters."), None), None);
        assert_eq!(
            Guard::with_key([6; 32], None).notice(Some("Requeued 3 dead letters."), Some(&mac)),
            None
        );
    }

    #[test]
    fn comparison_needs_every_byte() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abc", b"abd"));
        assert!(!same(b"abc", b"ab"));
    }
}

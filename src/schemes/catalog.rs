//! The one list of signature schemes: their names, their aliases, where
//! their providers put the event id and type, and whether the signature
//! covers those. Rust parses scheme names from it, SQL reads it through
//! `webhook_schemes()` (the provider registry takes its defaults from
//! there), and the reference's table (docs/reference.md) is checked
//! against it by a test.

/// One scheme as the registry and the docs know it.
pub struct Entry {
    /// The canonical name, stored in `webhook.providers.scheme`.
    pub name: &'static str,
    /// Other names that mean the same scheme (provider names, mostly).
    pub aliases: &'static [&'static str],
    /// Where the event id is, as a registry source; None: the DBA says.
    pub event_id_from: Option<&'static str>,
    /// Where the event type is, as a registry source; None: the DBA says.
    pub event_type_from: Option<&'static str>,
    /// Whether the default event id is covered by the signature. When it
    /// is not, the delivery's signed bytes are bound to the id at first
    /// sight, so they cannot be replayed under another one.
    pub event_id_signed: bool,
    /// Whether the default event type is covered by the signature.
    pub event_type_signed: bool,
    /// For schemes that sign a timestamp, how far from now it may be, in
    /// seconds, unless the provider's registry entry (or the call) says
    /// otherwise. None: the scheme signs no timestamp.
    pub tolerance: Option<i64>,
    /// What the signature covers, for people.
    pub signs: &'static str,
    /// Ordering's preset (`ordering => true`): where the entity an event
    /// is about is, in the body; None: no path fits every event type, the
    /// DBA says.
    pub entity_key_from: Option<&'static str>,
    /// Ordering's preset: where the event's order value is, in the body.
    pub order_from: Option<&'static str>,
    /// For a provider whose signature is an HMAC of the body in one
    /// header: the generic scheme it is (`hmac;header=…`).
    pub generic: Option<&'static str>,
}

/// Five minutes, the window Stripe's and the Standard Webhooks libraries
/// use by default.
const FIVE_MINUTES: Option<i64> = Some(300);

pub const CATALOG: &[Entry] = &[
    Entry {
        name: "stripe",
        aliases: &[],
        event_id_from: Some("body:id"),
        event_type_from: Some("body:type"),
        event_id_signed: true,
        event_type_signed: true,
        tolerance: FIVE_MINUTES,
        signs: "timestamp and body",
        entity_key_from: Some("body:data.object.id"),
        // Unix seconds: events of the same second tie.
        order_from: Some("body:created"),
        generic: None,
    },
    Entry {
        name: "github",
        aliases: &[],
        event_id_from: Some("header:X-GitHub-Delivery"),
        event_type_from: Some("header:X-GitHub-Event"),
        event_id_signed: false,
        event_type_signed: false,
        tolerance: None,
        signs: "body only",
        entity_key_from: None,
        // The resource's own updated_at; which resource depends on the event.
        order_from: Some("body:pull_request.updated_at|body:issue.updated_at"),
        generic: None,
    },
    Entry {
        name: "standard",
        aliases: &[
            "svix",
            "clerk",
            "resend",
            "standardwebhooks",
            "standard-webhooks",
        ],
        // The id of whichever header family was verified (see receive.rs:
        // a signed source is always preferred over an unsigned one).
        event_id_from: Some("header:webhook-id|header:svix-id"),
        event_type_from: Some("body:type"),
        event_id_signed: true,
        event_type_signed: true,
        tolerance: FIVE_MINUTES,
        signs: "id, timestamp and body",
        entity_key_from: None,
        // The payload's own timestamp: webhook-timestamp changes on every retry.
        order_from: Some("body:timestamp"),
        generic: None,
    },
    Entry {
        name: "paddle",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:event_type"),
        event_id_signed: true,
        event_type_signed: true,
        tolerance: FIVE_MINUTES,
        signs: "timestamp and body",
        entity_key_from: Some("body:data.id"),
        order_from: Some("body:occurred_at"),
        generic: None,
    },
    Entry {
        name: "shopify",
        aliases: &[],
        // One delivery per subscription, all with the same event id:
        // deduplicating on it processes the event once.
        event_id_from: Some("header:X-Shopify-Event-Id"),
        event_type_from: Some("header:X-Shopify-Topic"),
        event_id_signed: false,
        event_type_signed: false,
        tolerance: None,
        signs: "body only",
        entity_key_from: None,
        order_from: Some("body:updated_at"),
        generic: None,
    },
    Entry {
        name: "slack",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:event.type"),
        event_id_signed: true,
        event_type_signed: true,
        tolerance: FIVE_MINUTES,
        signs: "timestamp and body",
        entity_key_from: None,
        order_from: Some("body:event_time"),
        generic: None,
    },
    Entry {
        name: "typeform",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:event_type"),
        event_id_signed: true,
        event_type_signed: true,
        tolerance: None,
        signs: "body only",
        entity_key_from: None,
        order_from: None,
        // `sha256=` and the base64 of HMAC-SHA256 of the raw body, keyed
        // with the webhook's secret as it is.
        generic: Some("hmac;header=Typeform-Signature;encoding=base64;prefix=sha256="),
    },
    Entry {
        name: "hmac",
        aliases: &[],
        event_id_from: None,
        event_type_from: None,
        event_id_signed: false,
        event_type_signed: false,
        tolerance: None,
        signs: "body only",
        entity_key_from: None,
        order_from: None,
        generic: None,
    },
];

/// The entry a scheme name or alias means, case-insensitively. The generic
/// form's options (`hmac;header=…`) are not part of its name.
pub fn lookup(name: &str) -> Option<&'static Entry> {
    let name = name.trim();
    let base = name.split(';').next().unwrap_or(name).trim();
    CATALOG.iter().find(|entry| {
        entry.name.eq_ignore_ascii_case(base)
            || entry.aliases.iter().any(|a| a.eq_ignore_ascii_case(base))
    })
}

/// "stripe, github, standard (aliases svix, clerk, …), …" for messages.
pub fn known() -> String {
    CATALOG
        .iter()
        .map(|entry| match (entry.name, entry.aliases) {
            ("hmac", _) => "hmac;header=<name>[;algorithm=…][;encoding=…][;prefix=…]".to_string(),
            (name, []) => name.to_string(),
            (name, aliases) => format!("{name} (aliases {})", aliases.join(", ")),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every alias the docs name must resolve to the scheme it is listed
    /// under, and every scheme must be in the docs' table.
    #[test]
    fn the_docs_name_every_scheme_and_alias_as_the_catalog_does() {
        let reference = include_str!("../../docs/reference.md");
        let table = reference
            .split("<!-- schemes:start -->")
            .nth(1)
            .and_then(|rest| rest.split("<!-- schemes:end -->").next())
            .expect("docs/reference.md has a schemes table between markers");
        let mut seen = Vec::new();
        for line in table
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with("| `"))
        {
            // An escaped pipe inside a cell is not a cell boundary.
            let line = line.replace("\\|", "/");
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let name = cells[1].trim_matches('`');
            let entry = lookup(name).unwrap_or_else(|| panic!("documented scheme {name} unknown"));
            assert_eq!(
                entry.name, name,
                "the docs list {name} under its canonical name"
            );
            let tolerance = match entry.tolerance {
                Some(300) => "5 minutes",
                Some(other) => panic!("document a tolerance of {other} s"),
                None => "—",
            };
            assert_eq!(cells[6], tolerance, "documented tolerance of {name}");
            let aliases: Vec<&str> = cells[2]
                .split(',')
                .map(|a| a.trim().trim_matches('`'))
                .filter(|a| !a.is_empty() && *a != "—")
                .collect();
            for alias in &aliases {
                assert_eq!(
                    lookup(alias).map(|e| e.name),
                    Some(entry.name),
                    "documented alias {alias} of {name}"
                );
            }
            assert_eq!(aliases, entry.aliases, "documented aliases of {name}");
            seen.push(entry.name);
        }
        let all: Vec<&str> = CATALOG.iter().map(|e| e.name).collect();
        assert_eq!(seen, all, "the docs' table lists every scheme, in order");
    }

    /// Typeform's construction, checked against a digest computed
    /// independently (`openssl dgst -sha256 -hmac` of the same bytes).
    #[test]
    fn typeform_signs_the_body_as_documented() {
        use crate::schemes::{verify, Reason, Scheme};
        let body = br#"{"event_id":"01HQ0000000000000000000000","event_type":"form_response"}"#;
        let scheme = Scheme::parse("t", "scheme", "typeform").unwrap();
        let headers = serde_json::json!({
            "Typeform-Signature": "sha256=fQkcu3ggW5JEmAGa4a2kSZpVA66deiIsxTv9PWsG8t8="
        });
        let verdict = verify(
            &scheme,
            &headers,
            body,
            &[Some("typeform-test-secret")],
            300,
            0,
        );
        assert_eq!(verdict.reason, Reason::Ok);
    }

    #[test]
    fn aliases_and_case_resolve() {
        for name in ["svix", "Clerk", "resend", "STANDARD", "standard-webhooks"] {
            assert_eq!(lookup(name).map(|e| e.name), Some("standard"), "{name}");
        }
        assert_eq!(lookup("hmac;header=X-Sig").map(|e| e.name), Some("hmac"));
        assert!(lookup("stripey").is_none());
    }
}

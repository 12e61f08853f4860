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
    /// For schemes that sign a timestamp, how far from now it may be, in
    /// seconds, unless the provider's registry entry (or the call) says
    /// otherwise. None: the scheme signs no timestamp.
    pub tolerance: Option<i64>,
    /// What the signature covers: what a delivery's values may be
    /// trusted for. Everything read from anything else is unsigned.
    pub covers: Covers,
    /// What the signature covers, for people.
    pub signs: &'static str,
    /// Ordering's preset (`ordering => true`): where the entity an event
    /// is about is, in the body; None: no path fits every event type, the
    /// DBA says.
    pub entity_key_from: Option<&'static str>,
    /// Ordering's preset: where the event's order value is, in the body.
    pub order_from: Option<&'static str>,
    /// How `Scheme::parse` makes the scheme: the one place a name meets
    /// its Rust variant.
    pub make: Make,
    /// What its bodies are.
    pub body: Body,
}

/// What a scheme's signature covers of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Covers {
    /// How much of the body it vouches for.
    pub body: BodyCover,
    /// The headers (lower case) it covers, in every header family the
    /// scheme has; a delivery is covered only by the family it was
    /// verified with (`Signed::covered_headers`).
    pub headers: &'static [&'static str],
}

/// How much of the body a signature vouches for. Only a digest makes the
/// body's values (event id and type, entity key, order value) the
/// signer's; under the others, the body a signature first arrives with is
/// bound to it (`webhook.signature_bindings`), and no other body is
/// accepted under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyCover {
    /// Every byte: the MAC or signature is computed over the body, or over
    /// a cryptographic digest of it.
    Digest,
    /// The form fields, concatenated without separators (Twilio's form
    /// callbacks): another body with the boundaries moved signs alike.
    Unframed,
    /// A checksum (PayPal's CRC32): anyone holding one delivery can build
    /// any number of other bodies with the same one.
    Checksum,
    /// Nothing of the body (Mailgun signs a timestamp and a token).
    Nothing,
}

impl BodyCover {
    /// As `webhook_schemes().body_covered` shows it.
    pub fn as_str(self) -> &'static str {
        match self {
            BodyCover::Digest => "digest",
            BodyCover::Unframed => "fields_unframed",
            BodyCover::Checksum => "checksum",
            BodyCover::Nothing => "none",
        }
    }

    /// Whether values read from the body are the signer's.
    pub fn vouches(self) -> bool {
        self == BodyCover::Digest
    }
}

impl Covers {
    /// Whether every alternative of a registry source (`header:…|body:…`)
    /// is covered, in the family that carries it.
    pub fn source(&self, source: &str) -> bool {
        source
            .split('|')
            .all(|alternative| match alternative.split_once(':') {
                Some(("body", _)) => self.body.vouches(),
                Some(("header", name)) => self.headers.iter().any(|h| h.eq_ignore_ascii_case(name)),
                _ => false,
            })
    }
}

impl Entry {
    /// Whether the default event id is covered by the signature; None when
    /// the scheme has no default (the DBA names the source). Where it is
    /// not, the delivery's signed bytes are bound to the id at first
    /// sight, so they cannot be replayed under another one.
    pub fn event_id_signed(&self) -> Option<bool> {
        self.event_id_from.map(|source| self.covers.source(source))
    }

    /// Whether the default event type is covered by the signature.
    pub fn event_type_signed(&self) -> Option<bool> {
        self.event_type_from
            .map(|source| self.covers.source(source))
    }
}

/// How a scheme is made from its entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Make {
    /// A scheme of its own, which takes no options.
    Plain(Kind),
    /// PayPal, whose registered name carries the webhook's id
    /// (`paypal;webhook_id=…`).
    PayPal,
    /// The generic HMAC, with its options (`hmac;header=…`).
    Hmac,
    /// A provider verified exactly as another scheme: that scheme's
    /// registered name (`standard`, or the generic `hmac;header=…` it is).
    VerifiedAs(&'static str),
}

/// The schemes of their own that take no options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Stripe,
    Github,
    Standard,
    Paddle,
    Shopify,
    Slack,
    Discord,
    SendGrid,
    Twilio,
    Square,
    Zoom,
    Twitch,
    Mailgun,
    Linear,
    HubSpot,
    Calendly,
}

/// What a provider's request bodies are, as `webhook_receive` reads them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Body {
    /// One event, a JSON object.
    Event,
    /// A batch: a JSON array of events (the event id and type are read off
    /// the first, `body:0.…`).
    Batch,
    /// Form fields (`application/x-www-form-urlencoded`), stored as a JSON
    /// object of strings; or a JSON object.
    Form,
    /// A JSON object, or form fields as `Form`; but a form whose only
    /// field is `payload` holding a JSON object is that object (Slack:
    /// events are JSON, slash commands a form, interactivity a form with
    /// the interaction as JSON in `payload`).
    FormOrPayload,
}

/// Five minutes, the window Stripe's and the Standard Webhooks libraries
/// use by default.
const FIVE_MINUTES: Option<i64> = Some(300);

/// What a Standard Webhooks signature covers besides the body, in either
/// header family (`webhook-*`, or Svix's `svix-*`).
const STANDARD_SIGNED_HEADERS: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "svix-id",
    "svix-timestamp",
];

pub const CATALOG: &[Entry] = &[
    Entry {
        name: "stripe",
        aliases: &[],
        event_id_from: Some("body:id"),
        event_type_from: Some("body:type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "timestamp and body",
        entity_key_from: Some("body:data.object.id"),
        // Unix seconds: events of the same second tie.
        order_from: Some("body:created"),
        make: Make::Plain(Kind::Stripe),
        body: Body::Event,
    },
    Entry {
        name: "github",
        aliases: &[],
        event_id_from: Some("header:X-GitHub-Delivery"),
        event_type_from: Some("header:X-GitHub-Event"),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only",
        entity_key_from: None,
        // The resource's own updated_at; which resource depends on the event.
        order_from: Some("body:pull_request.updated_at|body:issue.updated_at"),
        make: Make::Plain(Kind::Github),
        body: Body::Event,
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
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: STANDARD_SIGNED_HEADERS,
        },
        signs: "id, timestamp and body",
        entity_key_from: None,
        // The payload's own timestamp: webhook-timestamp changes on every retry.
        order_from: Some("body:timestamp"),
        make: Make::Plain(Kind::Standard),
        body: Body::Event,
    },
    Entry {
        name: "paddle",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:event_type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "timestamp and body",
        entity_key_from: Some("body:data.id"),
        order_from: Some("body:occurred_at"),
        make: Make::Plain(Kind::Paddle),
        body: Body::Event,
    },
    Entry {
        name: "shopify",
        aliases: &[],
        // One delivery per subscription, all with the same event id:
        // deduplicating on it processes the event once.
        event_id_from: Some("header:X-Shopify-Event-Id"),
        event_type_from: Some("header:X-Shopify-Topic"),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only",
        entity_key_from: None,
        order_from: Some("body:updated_at"),
        make: Make::Plain(Kind::Shopify),
        body: Body::Event,
    },
    Entry {
        name: "slack",
        aliases: &[],
        // Events carry an event id; slash commands and interactions a
        // trigger id (Slack retries neither). What has neither (a
        // view_closed, an app_rate_limited) is one request, known by its
        // signature, which is unique to its timestamp and body.
        event_id_from: Some("body:event_id|body:trigger_id|header:X-Slack-Signature"),
        event_type_from: Some("body:event.type|body:command|body:type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &["x-slack-request-timestamp"],
        },
        signs: "timestamp and body",
        entity_key_from: None,
        order_from: Some("body:event_time"),
        make: Make::Plain(Kind::Slack),
        body: Body::FormOrPayload,
    },
    Entry {
        name: "typeform",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:event_type"),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only",
        entity_key_from: None,
        order_from: None,
        // `sha256=` and the base64 of HMAC-SHA256 of the raw body, keyed
        // with the webhook's secret as it is.
        make: Make::VerifiedAs("hmac;header=Typeform-Signature;encoding=base64;prefix=sha256="),
        body: Body::Event,
    },
    Entry {
        name: "supabase",
        aliases: &[],
        // Supabase's Auth hooks follow Standard Webhooks (`v1,whsec_…`
        // secrets); the payload names the action in different places.
        event_id_from: Some("header:webhook-id"),
        event_type_from: Some("body:type|body:email_data.email_action_type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: STANDARD_SIGNED_HEADERS,
        },
        signs: "id, timestamp and body",
        entity_key_from: None,
        order_from: None,
        make: Make::VerifiedAs("standard"),
        body: Body::Event,
    },
    Entry {
        name: "discord",
        aliases: &[],
        event_id_from: Some("body:id"),
        event_type_from: Some("body:type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &["x-signature-timestamp"],
        },
        signs: "timestamp and body, Ed25519",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::Discord),
        body: Body::Event,
    },
    Entry {
        name: "sendgrid",
        aliases: &["twilio-sendgrid"],
        event_id_from: Some("body:0.sg_event_id"),
        event_type_from: Some("body:0.event"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &["x-twilio-email-event-webhook-timestamp"],
        },
        signs: "timestamp and body, ECDSA P-256",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::SendGrid),
        body: Body::Batch,
    },
    Entry {
        name: "paypal",
        aliases: &[],
        event_id_from: Some("body:id"),
        event_type_from: Some("body:event_type"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Checksum,
            headers: &["paypal-transmission-id", "paypal-transmission-time"],
        },
        signs: "transmission id and time, webhook id, CRC32 of the body; RSA-SHA256",
        entity_key_from: Some("body:resource.id"),
        order_from: Some("body:create_time"),
        make: Make::PayPal,
        body: Body::Event,
    },
    Entry {
        name: "twilio",
        aliases: &[],
        // One token per callback, the same on every retry. Where Twilio
        // sends none, the callback's signature: a retry is the same
        // request, signed alike, and another callback signs other fields.
        event_id_from: Some("header:I-Twilio-Idempotency-Token|header:X-Twilio-Signature"),
        event_type_from: Some(
            "body:MessageStatus|body:SmsStatus|body:CallStatus|body:EventType|body:type",
        ),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Unframed,
            headers: &[],
        },
        signs: "URL and form fields (or URL with the body's SHA-256)",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::Twilio),
        body: Body::Form,
    },
    Entry {
        name: "square",
        aliases: &[],
        event_id_from: Some("body:event_id"),
        event_type_from: Some("body:type"),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "URL and body",
        entity_key_from: Some("body:data.id"),
        order_from: Some("body:created_at"),
        make: Make::Plain(Kind::Square),
        body: Body::Event,
    },
    Entry {
        name: "zoom",
        aliases: &[],
        // Zoom's events carry no id of their own: the DBA names one.
        event_id_from: None,
        event_type_from: Some("body:event"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &["x-zm-request-timestamp"],
        },
        signs: "timestamp and body",
        entity_key_from: None,
        order_from: Some("body:event_ts"),
        make: Make::Plain(Kind::Zoom),
        body: Body::Event,
    },
    Entry {
        name: "twitch",
        aliases: &["eventsub"],
        event_id_from: Some("header:Twitch-Eventsub-Message-Id"),
        event_type_from: Some("body:subscription.type"),
        // Twitch: refuse messages more than 10 minutes old.
        tolerance: Some(600),
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[
                "twitch-eventsub-message-id",
                "twitch-eventsub-message-timestamp",
            ],
        },
        signs: "message id, timestamp and body",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::Twitch),
        body: Body::Event,
    },
    Entry {
        name: "mailgun",
        aliases: &[],
        event_id_from: Some("body:event-data.id"),
        event_type_from: Some("body:event-data.event"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Nothing,
            headers: &[],
        },
        signs: "timestamp and token in the body, not the event",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::Mailgun),
        body: Body::Event,
    },
    Entry {
        name: "linear",
        aliases: &[],
        event_id_from: Some("header:Linear-Delivery"),
        event_type_from: Some("body:type"),
        // Linear: refuse a webhookTimestamp more than a minute away.
        tolerance: Some(60),
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only (its webhookTimestamp in it)",
        entity_key_from: Some("body:data.id"),
        order_from: Some("body:webhookTimestamp"),
        make: Make::Plain(Kind::Linear),
        body: Body::Event,
    },
    Entry {
        name: "hubspot",
        aliases: &[],
        event_id_from: Some("body:0.eventId"),
        event_type_from: Some("body:0.subscriptionType"),
        tolerance: FIVE_MINUTES,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &["x-hubspot-request-timestamp"],
        },
        signs: "method, URL, body and timestamp (v3)",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::HubSpot),
        body: Body::Batch,
    },
    Entry {
        name: "calendly",
        aliases: &[],
        // Calendly's payloads carry no event id: the DBA names one.
        event_id_from: None,
        event_type_from: Some("body:event"),
        tolerance: Some(180),
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "timestamp and body",
        entity_key_from: None,
        order_from: None,
        make: Make::Plain(Kind::Calendly),
        body: Body::Event,
    },
    Entry {
        name: "woocommerce",
        aliases: &[],
        event_id_from: Some("header:X-WC-Webhook-Delivery-ID"),
        event_type_from: Some("header:X-WC-Webhook-Topic"),
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only",
        entity_key_from: None,
        order_from: None,
        // The base64 of HMAC-SHA256 of the raw body, keyed with the
        // webhook's secret as it is.
        make: Make::VerifiedAs("hmac;header=X-WC-Webhook-Signature;encoding=base64"),
        body: Body::Event,
    },
    Entry {
        name: "hmac",
        aliases: &[],
        event_id_from: None,
        event_type_from: None,
        tolerance: None,
        covers: Covers {
            body: BodyCover::Digest,
            headers: &[],
        },
        signs: "body only",
        entity_key_from: None,
        order_from: None,
        make: Make::Hmac,
        body: Body::Event,
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
                Some(600) => "10 minutes",
                Some(180) => "3 minutes",
                Some(60) => "1 minute",
                Some(other) => panic!("document a tolerance of {other} s"),
                None => "—",
            };
            assert_eq!(cells[7], tolerance, "documented tolerance of {name}");
            let body = match entry.covers.body {
                BodyCover::Digest => "a digest",
                BodyCover::Unframed => "unframed fields",
                BodyCover::Checksum => "a checksum",
                BodyCover::Nothing => "nothing",
            };
            assert_eq!(cells[6], body, "documented body coverage of {name}");
            // A default source the signature does not cover says so.
            for (cell, signed) in [
                (cells[3], entry.event_id_signed()),
                (cells[4], entry.event_type_signed()),
            ] {
                assert_eq!(
                    cell.contains("(unsigned"),
                    signed == Some(false),
                    "{name}: \"{cell}\" is marked unsigned exactly when it is"
                );
            }
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
            None,
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

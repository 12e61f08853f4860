//! The one list of signature schemes: their names, their aliases, where
//! their providers put the event id and type, and whether the signature
//! covers those. It is sql/schemes.catalog, which this module embeds and
//! the portable edition's build writes into its own `webhook._catalog()`:
//! both editions read the same file. Rust parses scheme names from it,
//! SQL reads it through `webhook_schemes()` (the provider registry takes
//! its defaults from there), and the reference's table
//! (docs/reference.md) is checked against it by a test.

use std::sync::OnceLock;

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
    /// A shared token in a header, with its option (`token;header=…`).
    Token,
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
    WorkOs,
    Zendesk,
    Telnyx,
    Sns,
    Adyen,
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

impl Kind {
    /// The kind a scheme of its own is, by its name in the catalog.
    fn named(name: &str) -> Option<Kind> {
        Some(match name {
            "stripe" => Kind::Stripe,
            "github" => Kind::Github,
            "standard" => Kind::Standard,
            "paddle" => Kind::Paddle,
            "shopify" => Kind::Shopify,
            "slack" => Kind::Slack,
            "discord" => Kind::Discord,
            "sendgrid" => Kind::SendGrid,
            "twilio" => Kind::Twilio,
            "square" => Kind::Square,
            "zoom" => Kind::Zoom,
            "twitch" => Kind::Twitch,
            "mailgun" => Kind::Mailgun,
            "linear" => Kind::Linear,
            "hubspot" => Kind::HubSpot,
            "calendly" => Kind::Calendly,
            "workos" => Kind::WorkOs,
            "zendesk" => Kind::Zendesk,
            "telnyx" => Kind::Telnyx,
            "aws_sns" => Kind::Sns,
            "adyen" => Kind::Adyen,
            _ => return None,
        })
    }
}

/// The catalog's file, as both editions read it.
const TEXT: &str = include_str!("../../sql/schemes.catalog");

/// Every scheme of the catalog, in its order, read from the file once.
pub fn catalog() -> &'static [Entry] {
    static ENTRIES: OnceLock<Vec<Entry>> = OnceLock::new();
    // The file is part of the build, and a test reads it: a malformed one
    // never gets this far.
    ENTRIES.get_or_init(|| read(TEXT).unwrap_or_else(|e| panic!("sql/schemes.catalog: {e}")))
}

/// The entries of a catalog file: blocks apart by a blank line, each line
/// a field's name and its value, `#` lines comments (the file says more).
fn read(text: &'static str) -> Result<Vec<Entry>, String> {
    let mut entries = Vec::new();
    let mut fields: Vec<(&'static str, &'static str)> = Vec::new();
    for line in text.lines().chain([""]) {
        let line = line.trim();
        if line.starts_with('#') {
            continue;
        }
        if line.is_empty() {
            if !fields.is_empty() {
                entries.push(entry(&fields)?);
                fields.clear();
            }
            continue;
        }
        let (field, value) = line.split_once(char::is_whitespace).unwrap_or((line, ""));
        if fields.iter().any(|(f, _)| *f == field) {
            return Err(format!("field {field} given twice"));
        }
        fields.push((field, value.trim()));
    }
    Ok(entries)
}

/// One block's entry.
fn entry(fields: &[(&'static str, &'static str)]) -> Result<Entry, String> {
    const KNOWN: &[&str] = &[
        "scheme",
        "aliases",
        "event_id_from",
        "event_type_from",
        "tolerance",
        "signs",
        "body_covered",
        "headers_covered",
        "entity_key_from",
        "order_from",
        "verified_as",
        "body",
    ];
    if let Some((field, _)) = fields.iter().find(|(f, _)| !KNOWN.contains(f)) {
        return Err(format!("unknown field {field}"));
    }
    let get = |field: &str| {
        fields
            .iter()
            .find(|(f, _)| *f == field)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_empty())
    };
    // Slices of the file, kept for the backend's life with the entries.
    let words = |field: &str| -> &'static [&'static str] {
        Box::leak(get(field).unwrap_or("").split_whitespace().collect())
    };
    let name = get("scheme").ok_or("an entry without a scheme")?;
    let make = match (get("verified_as"), name) {
        (Some(scheme), _) => Make::VerifiedAs(scheme),
        (None, "paypal") => Make::PayPal,
        (None, "hmac") => Make::Hmac,
        (None, "token") => Make::Token,
        (None, other) => Make::Plain(
            Kind::named(other).ok_or(format!("{other}: a scheme of its own no code verifies"))?,
        ),
    };
    Ok(Entry {
        name,
        aliases: words("aliases"),
        event_id_from: get("event_id_from"),
        event_type_from: get("event_type_from"),
        tolerance: get("tolerance")
            .map(|t| {
                t.parse::<i64>()
                    .map_err(|_| format!("{name}: tolerance {t}"))
            })
            .transpose()?,
        covers: Covers {
            body: match get("body_covered") {
                Some("digest") => BodyCover::Digest,
                Some("fields_unframed") => BodyCover::Unframed,
                Some("checksum") => BodyCover::Checksum,
                Some("none") => BodyCover::Nothing,
                other => return Err(format!("{name}: body_covered {other:?}")),
            },
            headers: words("headers_covered"),
        },
        signs: get("signs").unwrap_or(""),
        entity_key_from: get("entity_key_from"),
        order_from: get("order_from"),
        make,
        body: match get("body") {
            Some("event") => Body::Event,
            Some("batch") => Body::Batch,
            Some("form") => Body::Form,
            Some("form_or_payload") => Body::FormOrPayload,
            other => return Err(format!("{name}: body {other:?}")),
        },
    })
}

/// The entry a scheme name or alias means, case-insensitively. The generic
/// form's options (`hmac;header=…`) are not part of its name.
pub fn lookup(name: &str) -> Option<&'static Entry> {
    let name = name.trim();
    let base = name.split(';').next().unwrap_or(name).trim();
    catalog().iter().find(|entry| {
        entry.name.eq_ignore_ascii_case(base)
            || entry.aliases.iter().any(|a| a.eq_ignore_ascii_case(base))
    })
}

/// "stripe, github, standard (aliases svix, clerk, …), …" for messages.
pub fn known() -> String {
    catalog()
        .iter()
        .map(|entry| match (entry.name, entry.aliases) {
            ("hmac", _) => "hmac;header=<name>[;algorithm=…][;encoding=…][;prefix=…]".to_string(),
            ("token", _) => "token;header=<name>".to_string(),
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
        let all: Vec<&str> = catalog().iter().map(|e| e.name).collect();
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

    /// The file reads, each name and alias means one scheme, and every
    /// scheme of its own the code verifies has its entry.
    #[test]
    fn the_catalog_file_reads_and_names_each_scheme_once() {
        let entries = read(TEXT).unwrap();
        assert_eq!(entries.len(), catalog().len());
        let mut names: Vec<&str> = entries
            .iter()
            .flat_map(|e| std::iter::once(e.name).chain(e.aliases.iter().copied()))
            .collect();
        let count = names.len();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), count, "a name or alias given twice");
        for e in &entries {
            if let Make::Plain(kind) = e.make {
                assert_eq!(Kind::named(e.name), Some(kind));
            }
        }
        let plain = entries
            .iter()
            .filter(|e| matches!(e.make, Make::Plain(_)))
            .count();
        assert_eq!(plain, 21, "every Kind has its entry");
        for (broken, why) in [
            ("scheme stripe\nbody event\n", "body_covered"),
            (
                "scheme nosuch\nbody_covered digest\nbody event\n",
                "no code verifies",
            ),
            ("scheme stripe\nscheme github\n", "twice"),
            ("scheme stripe\ncolour blue\n", "unknown field"),
        ] {
            let err = read(broken).err().unwrap();
            assert!(err.contains(why), "{broken:?}: {err}");
        }
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

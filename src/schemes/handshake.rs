//! Endpoint checks: requests some providers send, before any event, to
//! prove that the URL is theirs to call. They carry no event; each wants a
//! particular answer, which `webhook_receive` returns in its `response`
//! column (with `response_type`) for the handler to send back as it is.
//! They are recognised only once the request is verified, like any
//! delivery, only for their provider's scheme, and only from the signed
//! body: a header the signature does not cover must not turn an event
//! into a handshake, or a handshake into an event.

use super::{Headers, Kind, Scheme};
use serde_json::{json, Value};

pub struct Handshake {
    /// What it is, as archived: `url_verification`, …
    pub kind: &'static str,
    pub response: String,
    pub content_type: &'static str,
}

const JSON: &str = "application/json";

/// The handshake this verified request is, if it is one. `hmac_key`: the
/// key of the secret that verified it (Zoom answers with an HMAC under it).
pub fn recognise(scheme: &Scheme, body: &Value, hmac_key: Option<&[u8]>) -> Option<Handshake> {
    let text = |value: &Value| value.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match scheme {
        // Slack's SSL check (a form: ssl_check=1&token=…), sent when a
        // slash command's URL is saved and now and then after: a 200 is
        // all it wants, as Slack's Bolt answers it. No event. (Its guard
        // reads without `?`: a `?` in a guard ends the whole match, and
        // the arms after it would never be tried.)
        Scheme::Plain(Kind::Slack)
            if body.get("ssl_check").and_then(Value::as_str) == Some("1") =>
        {
            Some(Handshake {
                kind: "ssl_check",
                response: String::new(),
                content_type: "text/plain",
            })
        }
        // Slack's Events API: echo the challenge.
        Scheme::Plain(Kind::Slack) if body.get("type")?.as_str()? == "url_verification" => {
            Some(Handshake {
                kind: "url_verification",
                response: json!({ "challenge": text(body.get("challenge")?)? }).to_string(),
                content_type: JSON,
            })
        }
        // Zoom: the plain token, and its HMAC-SHA256 under the secret token.
        Scheme::Plain(Kind::Zoom) if body.get("event")?.as_str()? == "endpoint.url_validation" => {
            let plain = text(body.get("payload")?.get("plainToken")?)?;
            let encrypted = hex::encode(crate::signature::hmac_sha256(
                hmac_key?,
                &[plain.as_bytes()],
            ));
            Some(Handshake {
                kind: "endpoint.url_validation",
                response: json!({ "plainToken": plain, "encryptedToken": encrypted }).to_string(),
                content_type: JSON,
            })
        }
        // Twitch: the raw challenge, as plain text. Its message-type
        // header is not signed; a challenge is only ever in a
        // verification's body, never in a notification's or revocation's.
        Scheme::Plain(Kind::Twitch) if body.get("challenge").is_some() => Some(Handshake {
            kind: "webhook_callback_verification",
            response: text(body.get("challenge")?)?,
            content_type: "text/plain",
        }),
        // Twitch: a revocation says the subscription has ended (its status
        // says why: authorization_revoked, user_removed,
        // notification_failures_exceeded, version_removed). It carries the
        // subscription and no event, in its signed body: acknowledged with
        // an empty 2xx and archived as a `revocation`, never claimed as an
        // event. Nothing more will come until it is subscribed again.
        Scheme::Plain(Kind::Twitch)
            if body.get("subscription").is_some() && body.get("event").is_none() =>
        {
            Some(Handshake {
                kind: "revocation",
                response: String::new(),
                content_type: "text/plain",
            })
        }
        // SNS: a subscription's confirmation, or its unsubscription's,
        // carries no event. It is confirmed by visiting its SubscribeURL
        // (in the archived body), which the database does not do: archived
        // and answered 200.
        Scheme::Plain(Kind::Sns)
            if matches!(
                body.get("Type").and_then(Value::as_str),
                Some("SubscriptionConfirmation" | "UnsubscribeConfirmation")
            ) =>
        {
            Some(Handshake {
                kind: if body.get("Type").and_then(Value::as_str)
                    == Some("SubscriptionConfirmation")
                {
                    "subscription_confirmation"
                } else {
                    "unsubscribe_confirmation"
                },
                response: String::new(),
                content_type: "text/plain",
            })
        }
        // Discord: a PING (type 1) is answered with a PONG.
        Scheme::Plain(Kind::Discord) if body.get("type")?.as_i64()? == 1 => Some(Handshake {
            kind: "ping",
            response: json!({ "type": 1 }).to_string(),
            content_type: JSON,
        }),
        Scheme::Preset(_, inner) => recognise(inner, body, hmac_key),
        _ => None,
    }
}

/// An endpoint check that comes in a request's headers alone, recognised
/// before its body is read: Okta's one-time verification, a GET with no
/// body, answered with the challenge it sends. A shared token's scheme
/// signs nothing, so its headers are as much the sender's as anything the
/// request holds: the token verified them all.
pub fn recognise_headers(scheme: &Scheme, headers: &Headers<'_>) -> Option<Handshake> {
    match scheme {
        Scheme::Preset("okta", _) => {
            let challenge = headers
                .get("X-Okta-Verification-Challenge")
                .ok()
                .filter(|challenge| !challenge.is_empty())?;
            Some(Handshake {
                kind: "verification",
                response: json!({ "verification": challenge }).to_string(),
                content_type: JSON,
            })
        }
        _ => None,
    }
}

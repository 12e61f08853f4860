//! The scheme coverage matrix. For every scheme in the catalog: a genuine
//! delivery, claimed (or queued); then every change a sender holding it
//! can make — another body under the same signature, other id and type
//! headers, the signature moved into another header family, a stale
//! timestamp, a tampered signature, the delivery sent again. None may
//! yield a new claimed or queued event, in claim mode or in inbox mode.
//!
//! The senders (`schemes::genuine`) sign independently of the scheme
//! modules; a scheme added to the catalog without one fails here.

#[pgrx::pg_schema]
mod tests {
    use crate::schemes::genuine::{Delivery, Expect, Sender};
    use crate::schemes::now_unix;
    use pgrx::prelude::*;

    struct Answer {
        status: String,
        reason: String,
    }

    fn receive(provider: &str, delivery: &Delivery, inbox: bool) -> Answer {
        Spi::connect_mut(|client| {
            let rows = client.update(
                "SELECT status::text, reason
                   FROM webhook_receive($1, $2::jsonb, $3, inbox => $4, url => $5)",
                None,
                &[
                    provider.into(),
                    delivery.headers.to_string().into(),
                    delivery.body.as_slice().into(),
                    inbox.into(),
                    delivery.url.into(),
                ],
            )?;
            let row = rows.first();
            Ok::<_, pgrx::spi::Error>(Answer {
                status: row.get::<String>(1)?.unwrap(),
                reason: row.get::<String>(2)?.unwrap_or_default(),
            })
        })
        .expect("webhook_receive answers")
    }

    fn events(provider: &str) -> i64 {
        Spi::get_one_with_args::<i64>(
            "SELECT count(DISTINCT event_id) FROM (
                    SELECT event_id FROM webhook.events WHERE provider = $1
                    UNION ALL
                    SELECT event_id FROM webhook.inbox WHERE provider = $1) e",
            &[provider.into()],
        )
        .unwrap()
        .unwrap_or(0)
    }

    #[pg_test]
    fn no_change_a_sender_can_make_yields_a_new_event_under_any_scheme() {
        let mut failures = Vec::new();
        let mut refused_bodies = 0;
        for sender in Sender::all() {
            for inbox in [false, true] {
                let provider = format!(
                    "m-{}-{}",
                    sender.name(),
                    if inbox { "inbox" } else { "claim" }
                );
                crate::in_db_tests::register_sender(&provider, &sender);
                let now = now_unix();
                let genuine = sender.deliver("evt-genuine", "thing.created", now);
                let first = receive(&provider, &genuine, inbox);
                let expected = if inbox { "queued" } else { "claimed" };
                assert_eq!(
                    (first.status.as_str(), events(&provider)),
                    (expected, 1),
                    "{provider}: the genuine delivery ({})",
                    first.reason
                );

                let changes = sender.changes(&genuine, now);
                for (change, delivery) in changes {
                    let answer = receive(&provider, &delivery, inbox);
                    let new_event =
                        matches!(answer.status.as_str(), "claimed" | "queued" | "retry");
                    if new_event || events(&provider) != 1 {
                        failures.push(format!(
                            "{provider}: {change} was answered {} ({})",
                            answer.status, answer.reason
                        ));
                    }
                    if change.starts_with("another body") && answer.reason == "replayed" {
                        refused_bodies += 1;
                    }
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // The schemes whose signature does not vouch for the body verify the
        // other body, and refuse it by its binding: PayPal, Twilio, Mailgun,
        // in both modes.
        // A shared token binds nothing: another body under its id is a
        // duplicate of the event, not a replay of signed bytes.
        let unvouched = Sender::all()
            .iter()
            .filter(|s| !s.entry.covers.body.vouches() && !s.signs_nothing())
            .count();
        assert_eq!(refused_bodies, 2 * unvouched);
        assert!(unvouched >= 3);
    }

    /// The first attempt failed halfway (its handler recorded the failure):
    /// the provider's redelivery, the same bytes under the same binding, is
    /// retried under every scheme, never refused as a replay.
    #[pg_test]
    fn a_redelivery_after_a_failed_attempt_is_retried_under_every_scheme() {
        let mut failures = Vec::new();
        for sender in Sender::all() {
            let provider = format!("r-{}", sender.name());
            crate::in_db_tests::register_sender(&provider, &sender);
            let genuine = sender.deliver("evt-failed", "thing.created", now_unix());
            let id = Spi::get_one_with_args::<pgrx::Uuid>(
                "SELECT id FROM webhook_receive($1, $2::jsonb, $3, inbox => false, url => $4)",
                &[
                    provider.as_str().into(),
                    genuine.headers.to_string().into(),
                    genuine.body.as_slice().into(),
                    genuine.url.into(),
                ],
            )
            .unwrap()
            .expect("the genuine delivery is claimed");
            Spi::run_with_args(
                "SELECT webhook_fail($1, 'downstream timeout')",
                &[id.into()],
            )
            .unwrap();
            let again = receive(&provider, &genuine, false);
            if again.status != "retry" {
                failures.push(format!(
                    "{provider}: the redelivery was answered {} ({})",
                    again.status, again.reason
                ));
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    /// What `webhook_schemes()` says each signature covers follows from the
    /// catalog: the body by a digest or not, the headers, and the
    /// signedness of the default sources derived from them.
    #[pg_test]
    fn webhook_schemes_shows_what_each_signature_covers() {
        let rows = Spi::connect(|client| {
            client
                .select(
                    "SELECT scheme, body_covered, event_id_signed, event_type_signed,
                            array_to_string(headers_covered, ',')
                       FROM webhook_schemes() ORDER BY scheme",
                    None,
                    &[],
                )?
                .map(|row| {
                    Ok((
                        row.get::<String>(1)?.unwrap(),
                        row.get::<String>(2)?.unwrap(),
                        row.get::<bool>(3)?,
                        row.get::<bool>(4)?,
                        row.get::<String>(5)?.unwrap_or_default(),
                    ))
                })
                .collect::<Result<Vec<_>, pgrx::spi::Error>>()
        })
        .unwrap();
        let find = |name: &str| rows.iter().find(|r| r.0 == name).unwrap().clone();
        assert_eq!(
            find("paypal"),
            (
                "paypal".into(),
                "checksum".into(),
                Some(false),
                Some(false),
                "paypal-transmission-id,paypal-transmission-time".into()
            )
        );
        assert_eq!(find("mailgun").1, "none");
        assert_eq!(
            (find("mailgun").2, find("mailgun").3),
            (Some(false), Some(false))
        );
        assert_eq!(find("twilio").1, "fields_unframed");
        assert_eq!(find("twilio").3, Some(false));
        assert_eq!(find("stripe").1, "digest");
        assert_eq!(
            (find("stripe").2, find("stripe").3),
            (Some(true), Some(true))
        );
        assert_eq!(
            (find("github").2, find("github").3),
            (Some(false), Some(false))
        );
        assert_eq!(
            (find("standard").2, find("standard").3),
            (Some(true), Some(true))
        );
        // No default source: the DBA names one, and it is judged then.
        assert_eq!(find("zoom").2, None);
        assert_eq!(rows.len(), crate::schemes::catalog::catalog().len());
    }

    /// A binding made by a release that bound ids only (Twilio's) keeps
    /// answering the provider's retries after the update: the first body
    /// seen since is bound, and another one refused.
    #[pg_test]
    fn a_binding_made_before_bodies_were_bound_takes_the_next_body() {
        let sender = Sender::of("twilio");
        crate::in_db_tests::register_sender("m-twilio-old", &sender);
        let now = now_unix();
        let genuine = sender.deliver("evt-old", "delivered", now);
        assert_eq!(receive("m-twilio-old", &genuine, true).status, "queued");
        Spi::run("UPDATE webhook.signature_bindings SET body_digest = NULL WHERE provider = 'm-twilio-old'")
            .unwrap();
        let again = receive("m-twilio-old", &genuine, true);
        assert_eq!(
            (again.status.as_str(), again.reason.as_str()),
            ("duplicate", "ok")
        );
        assert_eq!(
            Spi::get_one::<bool>(
                "SELECT body_digest IS NOT NULL FROM webhook.signature_bindings WHERE provider = 'm-twilio-old'"
            ),
            Ok(Some(true))
        );
        let recut = sender.other_body(&genuine, "evt-old", "delivered", now);
        assert_eq!(receive("m-twilio-old", &recut, true).reason, "replayed");
    }

    /// What else a provider sends to the same endpoint (endpoint checks,
    /// Slack's slash commands and interactions, Twilio's callbacks without
    /// a token): each answered as its provider expects in both modes, an
    /// event under the id and type its provider's documentation gives it,
    /// its redelivery a duplicate, and nothing written twice.
    #[pg_test]
    fn every_other_kind_of_request_is_received_as_its_provider_expects() {
        let mut kinds = 0;
        for sender in Sender::all() {
            for inbox in [false, true] {
                let provider = format!("k-{}-{}", sender.name(), u8::from(inbox));
                crate::in_db_tests::register_sender(&provider, &sender);
                for other in sender.other_kinds(now_unix()) {
                    let answer = |delivery: &Delivery| {
                        Spi::connect_mut(|client| {
                            let row = client
                                .update(
                                    "SELECT status::text, reason, event_id, event_type
                                       FROM webhook_receive($1, $2::jsonb, $3, inbox => $4, url => $5)",
                                    None,
                                    &[
                                        provider.as_str().into(),
                                        delivery.headers.to_string().into(),
                                        delivery.body.as_slice().into(),
                                        inbox.into(),
                                        delivery.url.into(),
                                    ],
                                )?
                                .first();
                            Ok::<_, pgrx::spi::Error>((
                                row.get::<String>(1)?.unwrap(),
                                row.get::<String>(2)?.unwrap_or_default(),
                                row.get::<String>(3)?,
                                row.get::<String>(4)?,
                            ))
                        })
                        .expect("webhook_receive answers")
                    };
                    let what = format!("{provider}: {}", other.what);
                    let (first, again) = (answer(&other.delivery), answer(&other.delivery));
                    match &other.expect {
                        Expect::Handshake(kind) => {
                            assert_eq!(
                                first,
                                (
                                    "handshake".into(),
                                    "handshake".into(),
                                    None,
                                    Some(kind.to_string())
                                ),
                                "{what}"
                            );
                            assert_eq!(again, first, "{what}: again");
                        }
                        Expect::Event { id, kind } => {
                            let status = if inbox { "queued" } else { "claimed" };
                            assert_eq!(
                                first,
                                (
                                    status.into(),
                                    "ok".into(),
                                    Some(id.clone()),
                                    Some(kind.clone())
                                ),
                                "{what}"
                            );
                            // Claimed in this very transaction: in progress
                            // until it commits; queued: a duplicate.
                            let again_status = if inbox { "duplicate" } else { "in_progress" };
                            assert_eq!(again.0, again_status, "{what}: again");
                            let stored = Spi::get_one_with_args::<i64>(
                                "SELECT count(*) FROM webhook.events WHERE provider = $1 AND event_id = $2",
                                &[provider.as_str().into(), id.as_str().into()],
                            );
                            let queued = Spi::get_one_with_args::<i64>(
                                "SELECT count(*) FROM webhook.inbox WHERE provider = $1 AND event_id = $2",
                                &[provider.as_str().into(), id.as_str().into()],
                            );
                            assert_eq!(
                                (stored, queued),
                                (Ok(Some(1)), Ok(Some(i64::from(inbox)))),
                                "{what}: stored once"
                            );
                        }
                    }
                    kinds += 1;
                }
            }
        }
        // Slack's five, Zoom's, Twitch's two, Discord's, Twilio's three,
        // Shopify's two, Supabase's five, SNS's confirmation and Okta's
        // verification, in both modes.
        assert_eq!(kinds, 2 * 21);
    }
}

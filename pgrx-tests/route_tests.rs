//! Routing in a tier of databases, for every scheme in the catalog: the
//! route key comes from signed material only, so every change a sender
//! can make without the secret (a fresh unsigned id, another body under a
//! signature that does not vouch for it) routes where the genuine delivery
//! did and meets it there; SQL's hash is Rust's; a slot's database takes
//! what routes to it, stamps its ids with its slot, and refuses the rest
//! before writing anything.

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::{assert_error, error_of};
    use crate::schemes::genuine::{Delivery, Sender};
    use crate::schemes::now_unix;
    use pgrx::prelude::*;
    use serde_json::Value;

    const SLOTS: i32 = 8;

    /// Registers the provider; its event id source as registered.
    fn register(provider: &str, sender: &Sender) -> String {
        crate::in_db_tests::register_sender(provider, sender);
        Spi::get_one_with_args::<String>(
            "SELECT event_id_from FROM webhook.providers WHERE name = $1",
            &[provider.into()],
        )
        .unwrap()
        .unwrap()
    }

    fn route_key(sender: &Sender, event_id_from: &str, delivery: &Delivery) -> String {
        Spi::get_one_with_args::<String>(
            "SELECT webhook_route_key($1, $2, NULL, $3::jsonb, $4, $5)",
            &[
                sender.registration().scheme.as_str().into(),
                event_id_from.into(),
                delivery.headers.to_string().into(),
                delivery.body.as_slice().into(),
                delivery.url.into(),
            ],
        )
        .unwrap()
        .expect("every delivery has a route key")
    }

    fn slot_in_sql(provider: &str, key: &str) -> i32 {
        Spi::get_one_with_args::<i32>(
            "SELECT webhook_route_slot($1, $2, $3)",
            &[provider.into(), key.into(), SLOTS.into()],
        )
        .unwrap()
        .unwrap()
    }

    fn hold(slot: i32) {
        Spi::run(&format!(
            "SET LOCAL webhook.slots = {SLOTS}; SET LOCAL webhook.slot = {slot}"
        ))
        .unwrap();
    }

    /// The call that receives `delivery`, for `error_of`.
    fn receive_sql(provider: &str, delivery: &Delivery) -> String {
        format!(
            "SELECT webhook_receive('{provider}', '{}'::jsonb, '\\x{}'::bytea, url => {})",
            delivery.headers.to_string().replace('\'', "''"),
            hex::encode(&delivery.body),
            delivery
                .url
                .map_or("NULL".to_string(), |u| format!("'{u}'")),
        )
    }

    fn events(provider: &str) -> i64 {
        Spi::get_one_with_args::<i64>(
            "SELECT count(*) FROM webhook.events WHERE provider = $1",
            &[provider.into()],
        )
        .unwrap()
        .unwrap_or(0)
    }

    /// The headers a sender may set without the secret: the registry's
    /// header sources the scheme's signature never covers.
    fn with_fresh_unsigned_ids(
        sender: &Sender,
        delivery: &Delivery,
        event_id_from: &str,
    ) -> Delivery {
        let mut replay = delivery.clone();
        let object = replay.headers.as_object_mut().unwrap();
        for source in event_id_from.split('|').chain(["header:X-Event-Type"]) {
            let Some(name) = source.strip_prefix("header:") else {
                continue;
            };
            // The signature header is no id a sender may set freely.
            if sender
                .signature_headers()
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
            {
                continue;
            }
            let covered = sender
                .entry
                .covers
                .headers
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name));
            if !covered {
                object.retain(|k, _| !k.eq_ignore_ascii_case(name));
                object.insert(name.to_string(), Value::from("fresh-unsigned-id"));
            }
        }
        replay
    }

    /// Whether a source's alternative is present in a delivery: a header
    /// it carries, or a path its JSON body has.
    fn present(delivery: &Delivery, alternative: &str) -> bool {
        match alternative.split_once(':') {
            Some(("header", name)) => delivery
                .headers
                .as_object()
                .unwrap()
                .keys()
                .any(|k| k.eq_ignore_ascii_case(name)),
            Some(("body", path)) => serde_json::from_slice::<Value>(&delivery.body)
                .ok()
                .and_then(|body| {
                    path.split('.')
                        .try_fold(body, |value, key| match key.parse::<usize>() {
                            Ok(i) => value.get(i).cloned(),
                            Err(_) => value.get(key).cloned(),
                        })
                })
                .is_some(),
            _ => false,
        }
    }

    #[pg_test]
    fn every_scheme_routes_by_signed_material_only() {
        let mut failures = Vec::new();
        let mut by_event = 0;
        for sender in Sender::all() {
            let provider = format!("r-{}", sender.name());
            let event_id_from = register(&provider, &sender);
            let now = now_unix();
            let genuine = sender.deliver("evt-route", "thing.created", now);
            let key = route_key(&sender, &event_id_from, &genuine);
            // Signed when a signed alternative of the source is present in
            // this delivery (a signed one always wins).
            let signs_id = event_id_from.split('|').any(|alternative| {
                let signed = Spi::get_one_with_args::<bool>(
                    "SELECT webhook_source_signed($1, $2)",
                    &[
                        sender.registration().scheme.as_str().into(),
                        alternative.into(),
                    ],
                )
                .unwrap()
                .unwrap();
                signed && present(&genuine, alternative)
            });
            let expected_kind = if signs_id || sender.signs_nothing() {
                "event:"
            } else {
                "signed:"
            };
            if !key.starts_with(expected_kind) {
                failures.push(format!("{provider}: {key}, expected {expected_kind}…"));
            }
            by_event += i32::from(key.starts_with("event:"));

            // SQL's slot is Rust's.
            let slot = slot_in_sql(&provider, &key);
            if slot != crate::route::slot(crate::route::hash(&provider, &key), SLOTS) {
                failures.push(format!("{provider}: SQL and Rust disagree on {key}"));
            }

            // A replay under fresh unsigned ids, and another body under a
            // signature that does not vouch for the body, route alike;
            // where nothing is signed, a fresh id is another event.
            let mut replays = Vec::new();
            if !sender.signs_nothing() {
                replays.push((
                    "fresh unsigned ids",
                    with_fresh_unsigned_ids(&sender, &genuine, &event_id_from),
                ));
            }
            if !sender.entry.covers.body.vouches() {
                replays.push((
                    "another body under the same signature",
                    sender.other_body(&genuine, "evt-other", "thing.refunded", now),
                ));
            }
            for (change, replay) in &replays {
                let replayed_key = route_key(&sender, &event_id_from, replay);
                if replayed_key != key {
                    failures.push(format!(
                        "{provider}: {change} routes by {replayed_key}, not {key}"
                    ));
                }
            }

            // The slot's database takes it and stamps its id; any other
            // refuses it before writing anything.
            hold((slot + 1) % SLOTS);
            let refused = error_of(&receive_sql(&provider, &genuine));
            if !refused.starts_with("55000: ")
                || !refused.contains(&format!("routes to slot {slot}"))
            {
                failures.push(format!("{provider}: another slot answered {refused}"));
            }
            if events(&provider) != 0 {
                failures.push(format!("{provider}: a refused delivery left an event"));
            }
            hold(slot);
            let (status, stamped) = Spi::get_two_with_args::<String, i32>(
                "SELECT r.status, webhook_slot_of(r.id)
                   FROM webhook_receive($1, $2::jsonb, $3, url => $4) r",
                &[
                    provider.as_str().into(),
                    genuine.headers.to_string().into(),
                    genuine.body.as_slice().into(),
                    genuine.url.into(),
                ],
            )
            .unwrap();
            let taken = matches!(status.as_deref(), Some("claimed" | "queued"));
            if !taken || stamped != Some(slot) {
                failures.push(format!(
                    "{provider}: its slot answered {status:?} with an id of slot {stamped:?}"
                ));
            }
            // The replays reach the genuine delivery's slot, and are not new
            // events there.
            for (change, replay) in &replays {
                let answer = Spi::get_one_with_args::<String>(
                    "SELECT status FROM webhook_receive($1, $2::jsonb, $3, url => $4)",
                    &[
                        provider.as_str().into(),
                        replay.headers.to_string().into(),
                        replay.body.as_slice().into(),
                        replay.url.into(),
                    ],
                );
                let answer = answer.ok().flatten().unwrap_or_else(|| "an error".into());
                if matches!(answer.as_str(), "claimed" | "queued" | "retry")
                    || events(&provider) != 1
                {
                    failures.push(format!(
                        "{provider}: {change} was answered {answer} in its slot"
                    ));
                }
            }
            Spi::run("RESET webhook.slot; RESET webhook.slots").unwrap();
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
        // Most schemes sign their event id; GitHub, Shopify, PayPal, Twilio
        // and Mailgun route by their signed bytes.
        assert!(by_event >= 10, "{by_event} schemes route by event id");
    }

    #[pg_test]
    fn an_ordered_provider_routes_by_entity() {
        Spi::run(
            "SELECT webhook_register_provider('r-orders', secret => 'whsec_o', scheme => 'stripe',
                     ordering => true, entity_key_from => 'body:data.object.id', order_from => 'body:created')",
        )
        .unwrap();
        let key_of = |body: &str| {
            Spi::get_one_with_args::<String>(
                "SELECT webhook_route_key('stripe', 'body:id', 'body:data.object.id',
                        jsonb_build_object('Stripe-Signature', 't=1,v1=' || repeat('0', 64)), $1::bytea)",
                &[body.as_bytes().into()],
            )
            .unwrap()
            .unwrap()
        };
        let first = key_of(r#"{"id":"evt_1","created":1,"data":{"object":{"id":"cus_9"}}}"#);
        let second = key_of(r#"{"id":"evt_2","created":2,"data":{"object":{"id":"cus_9"}}}"#);
        let keyless = key_of(r#"{"id":"evt_3","created":3,"data":{"object":{}}}"#);
        assert_eq!(first, "entity:cus_9");
        assert_eq!(second, first);
        assert_eq!(keyless, "event:evt_3");
    }

    #[pg_test]
    fn unreadable_deliveries_route_by_their_body() {
        let body = b"not json";
        let key = Spi::get_one_with_args::<String>(
            "SELECT webhook_route_key('stripe', 'body:id', NULL, '{}'::jsonb, $1)",
            &[body.as_slice().into()],
        )
        .unwrap()
        .unwrap();
        use sha2::Digest;
        assert_eq!(
            key,
            format!("body:{}", hex::encode(sha2::Sha256::digest(body)))
        );
    }

    #[pg_test]
    fn slot_settings_are_checked() {
        assert_error(
            "SELECT webhook_set_slot(1, 6)",
            "22023",
            "argument \"slots\" must be a power of two",
        );
        assert_error(
            "SELECT webhook_set_slot(8, 8)",
            "22023",
            "argument \"slot\" must be from 0 to 7",
        );
        assert_error(
            "SELECT webhook_set_slot(NULL, 8)",
            "22023",
            "argument \"slot\"",
        );
        assert_error(
            "SELECT webhook_route_key(NULL, 'body:id', NULL, '{}', '')",
            "22004",
            "argument \"scheme\"",
        );
        assert_error(
            "SELECT webhook_route_key('nope', 'body:id', NULL, '{}', '')",
            "42704",
            "argument \"scheme\"",
        );
        Spi::run(
            "SELECT webhook_register_provider('r-bad', secret => 's', scheme => 'github');
             SET LOCAL webhook.slots = 6; SET LOCAL webhook.slot = 1",
        )
        .unwrap();
        assert_error(
            "SELECT webhook_receive('r-bad', '{}', '{}'::text)",
            "22023",
            "\"webhook.slots\" (6)",
        );
        // Outside a tier, ids carry no slot: their last bytes are random.
        Spi::run("RESET webhook.slot; RESET webhook.slots").unwrap();
        let distinct = Spi::get_one::<i64>(
            "SELECT count(DISTINCT webhook_slot_of((webhook_claim('r-bad', 'e' || i, 't', '{}'::jsonb, NULL)).id))
               FROM generate_series(1, 20) i",
        )
        .unwrap()
        .unwrap();
        assert!(distinct > 1);
    }

    #[pg_test]
    fn a_route_change_in_a_tier_needs_reroute() {
        Spi::run(
            "SELECT webhook_register_provider('r-moving', secret => 'whsec_m', scheme => 'stripe');
             SET LOCAL webhook.slots = 8; SET LOCAL webhook.slot = 3",
        )
        .unwrap();
        // Each argument that moves the route key: ordering (entity key),
        // the event id's source, the scheme.
        for change in [
            "ordering => true",
            "entity_key_from => 'body:data.object.id', order_from => 'body:created'",
            "event_id_from => 'header:X-Id'",
            "scheme => 'hmac;header=X-Sig'",
        ] {
            assert_error(
                &format!("SELECT webhook_register_provider('r-moving', {change})"),
                "55000",
                "would route its deliveries to other slots",
            );
        }
        let route = || {
            Spi::get_one::<String>(
                "SELECT scheme || ' ' || event_id_from || ' ' || coalesce(entity_key_from, '-')
                   FROM webhook.providers WHERE name = 'r-moving'",
            )
            .unwrap()
            .unwrap()
        };
        assert_eq!(route(), "stripe body:id -");
        // What does not move the route key is taken as before.
        Spi::run("SELECT webhook_register_provider('r-moving', inbox => true, tolerance => '10 minutes')").unwrap();
        Spi::run("SELECT webhook_register_provider('r-moving', scheme => 'stripe', event_id_from => 'body:id')").unwrap();
        // Forced, it moves.
        Spi::run("SELECT webhook_register_provider('r-moving', ordering => true, reroute => true)")
            .unwrap();
        assert_eq!(route(), "stripe body:id body:data.object.id");
        // Outside a tier there is no route to keep.
        Spi::run("RESET webhook.slot; RESET webhook.slots").unwrap();
        Spi::run("SELECT webhook_register_provider('r-moving', ordering => false)").unwrap();
        assert_eq!(route(), "stripe body:id -");
    }
}

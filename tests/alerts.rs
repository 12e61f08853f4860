//! Alerts raised inside the database: each rule kind fires on its
//! condition and resolves when it clears, one alert per rule and subject,
//! a NOTIFY per change (none while silenced), and only operators read
//! and acknowledge them.
#![cfg(feature = "client-tests")]

mod common;
use common::sign::{now, stripe};
use common::*;
use postgres::Client;
use std::time::Duration;

const DB: &str = "pgwi_alerts";

fn setup() -> (std::sync::MutexGuard<'static, ()>, Client) {
    // Evaluations see every rule and provider of the database.
    let guard = one_at_a_time();
    (guard, connect(database(DB)))
}

/// Evaluate; the changes about `provider`: (change, rule, status).
fn evaluate(client: &mut Client, provider: &str) -> Vec<(String, String, String)> {
    // What the test did is counted first (a delivery made in the same
    // millisecond as a rollup is counted by the next one).
    settle(client);
    client
        .query(
            "SELECT change, rule, status::text FROM webhook_alerts_evaluate() WHERE provider = $1",
            &[&provider],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The unresolved alert of a rule about a provider: (id, status, value).
fn unresolved(client: &mut Client, rule: &str, provider: &str) -> Option<(i64, String, f64)> {
    client
        .query_opt(
            "SELECT id, status::text, value FROM webhook.alerts
              WHERE rule = $1 AND provider = $2 AND status <> 'resolved'",
            &[&rule, &provider],
        )
        .unwrap()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
}

/// Notifications on webhook_alert about `provider` received so far:
/// (change, status).
fn heard(listener: &mut Client, provider: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    use postgres::fallible_iterator::FallibleIterator;
    let mut notes = listener.notifications();
    let mut it = notes.timeout_iter(Duration::from_millis(300));
    while let Some(n) = it.next().unwrap() {
        let v: serde_json::Value = serde_json::from_str(n.payload()).unwrap();
        if v["provider"] == provider {
            out.push((
                v["change"].as_str().unwrap().into(),
                v["status"].as_str().unwrap().into(),
            ));
        }
    }
    out
}

fn listener() -> Client {
    let mut l = connect(database(DB));
    l.batch_execute("LISTEN webhook_alert").unwrap();
    l
}

#[test]
fn an_alert_opens_is_acknowledged_and_resolves_with_one_notification_each() {
    let (_one, mut c) = setup();
    let mut l = listener();
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\")
         VALUES ('backlog_waits', 'oldest_ready', 'al_backlog', 0.2, '5 minutes')",
    )
    .unwrap();
    enqueue_many(&mut c, "al_backlog", "b", 3);
    assert!(
        evaluate(&mut c, "al_backlog").is_empty(),
        "not waited long enough yet"
    );
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        evaluate(&mut c, "al_backlog"),
        [("opened".into(), "backlog_waits".into(), "open".into())]
    );
    let (id, status, first) = unresolved(&mut c, "backlog_waits", "al_backlog").unwrap();
    assert_eq!(status, "open");
    assert!(first > 0.2, "{first}");

    // Still firing: the same alert, its value updated; no new one, no noise.
    std::thread::sleep(Duration::from_millis(100));
    assert!(evaluate(&mut c, "al_backlog").is_empty());
    let (same, _, later) = unresolved(&mut c, "backlog_waits", "al_backlog").unwrap();
    assert_eq!(same, id);
    assert!(later > first);

    // An operator acknowledges it; it stays until the backlog clears.
    let db = database(DB);
    ensure_role(&mut c, "al_ops", true);
    c.batch_execute("SELECT webhook_grant_operator('al_ops')")
        .unwrap();
    let mut ops = connect_as(db, "al_ops");
    let by: String = ops
        .query_one(
            "SELECT acknowledged_by FROM webhook_alert_acknowledge($1)",
            &[&id],
        )
        .unwrap()
        .get(0);
    assert_eq!(by, "al_ops");
    assert!(evaluate(&mut c, "al_backlog").is_empty());
    assert_eq!(
        unresolved(&mut c, "backlog_waits", "al_backlog").unwrap().1,
        "acknowledged"
    );

    while !work_once(&mut c, "al_backlog", "default", 10)
        .unwrap()
        .is_empty()
    {}
    assert_eq!(
        evaluate(&mut c, "al_backlog"),
        [("resolved".into(), "backlog_waits".into(), "resolved".into())]
    );
    assert_eq!(unresolved(&mut c, "backlog_waits", "al_backlog"), None);
    assert_eq!(
        heard(&mut l, "al_backlog"),
        [
            ("opened".into(), "open".into()),
            ("acknowledged".into(), "acknowledged".into()),
            ("resolved".into(), "resolved".into())
        ]
    );

    // A new backlog is a new alert.
    enqueue_many(&mut c, "al_backlog", "again", 1);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(evaluate(&mut c, "al_backlog").len(), 1);
    let (fresh, status, _) = unresolved(&mut c, "backlog_waits", "al_backlog").unwrap();
    assert!(fresh != id && status == "open");

    // Disabling the rule resolves what it raised.
    c.batch_execute("UPDATE webhook.alert_rules SET enabled = false WHERE name = 'backlog_waits'")
        .unwrap();
    assert_eq!(evaluate(&mut c, "al_backlog")[0].0, "resolved");
    while !work_once(&mut c, "al_backlog", "default", 10)
        .unwrap()
        .is_empty()
    {}
}

#[test]
fn a_silenced_alert_sends_nothing_and_is_still_tracked() {
    let (_one, mut c) = setup();
    let mut l = listener();
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\")
         VALUES ('quiet_backlog', 'oldest_ready', 'al_hush', 0.1, '5 minutes')",
    )
    .unwrap();
    enqueue_many(&mut c, "al_hush", "h", 1);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(evaluate(&mut c, "al_hush").len(), 1);
    let (id, _, _) = unresolved(&mut c, "quiet_backlog", "al_hush").unwrap();
    assert_eq!(heard(&mut l, "al_hush"), [("opened".into(), "open".into())]);
    c.query_one("SELECT webhook_alert_silence($1, '1 hour')", &[&id])
        .unwrap();
    c.query_one("SELECT webhook_alert_acknowledge($1)", &[&id])
        .unwrap();
    while !work_once(&mut c, "al_hush", "default", 10)
        .unwrap()
        .is_empty()
    {}
    assert_eq!(
        evaluate(&mut c, "al_hush")[0].0,
        "resolved",
        "tracked all the same"
    );
    assert_eq!(
        heard(&mut l, "al_hush"),
        [],
        "silenced: no acknowledged, no resolved"
    );
}

#[test]
fn forged_deliveries_raise_a_rejection_spike() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "SELECT webhook_register_provider('al_forged', scheme => 'stripe', secret => 'whsec_real')",
    )
    .unwrap();
    let deliver_signed = |c: &mut Client, id: &str, secret: &str| {
        let body = payload(id);
        receive(
            c,
            "al_forged",
            &stripe(&body, now(), secret),
            body.as_bytes(),
        )
        .unwrap()
        .get::<_, i32>("http_status")
    };
    for i in 0..3 {
        assert_eq!(deliver_signed(&mut c, &format!("ok{i}"), "whsec_real"), 200);
    }
    // Below the default's ten deliveries nothing is judged.
    for i in 0..5 {
        deliver_signed(&mut c, &format!("bad{i}"), "whsec_rotated_on_one_side");
    }
    assert!(evaluate(&mut c, "al_forged").is_empty());
    for i in 5..12 {
        deliver_signed(&mut c, &format!("bad{i}"), "whsec_rotated_on_one_side");
    }
    assert_eq!(
        evaluate(&mut c, "al_forged"),
        [("opened".into(), "rejection_spike".into(), "open".into())]
    );
    let (_, _, share) = unresolved(&mut c, "rejection_spike", "al_forged").unwrap();
    assert!((share - 12.0 / 15.0).abs() < 1e-9, "{share}");
}

#[test]
fn a_provider_that_normally_sends_and_falls_silent_raises_silence() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\")
         VALUES ('shop_silent', 'silence', 'al_quiet', 5, '10 minutes');
         SELECT webhook_metrics_rollup();
         -- Its history: deliveries half an hour ago, none since.
         INSERT INTO webhook.metric_minutes (minute, provider, consumer, metric, label, count)
         VALUES (date_trunc('minute', now() - interval '30 minutes'), 'al_quiet', '', 'deliveries', 'claimed', 8);
         -- A provider that rarely sends is not expected to.
         INSERT INTO webhook.metric_minutes (minute, provider, consumer, metric, label, count)
         VALUES (date_trunc('minute', now() - interval '30 minutes'), 'al_rare', '', 'deliveries', 'claimed', 2);",
    )
    .unwrap();
    assert_eq!(
        evaluate(&mut c, "al_quiet"),
        [("opened".into(), "shop_silent".into(), "open".into())]
    );
    assert!(evaluate(&mut c, "al_rare").is_empty());
    // The next delivery ends the silence.
    deliver(&mut c, "al_quiet", "back", Duration::ZERO);
    let mut changes = Vec::new();
    wait_for("the delivery to be counted", || {
        changes = evaluate(&mut c, "al_quiet");
        !changes.is_empty()
    });
    assert_eq!(
        changes,
        [("resolved".into(), "shop_silent".into(), "resolved".into())]
    );
}

#[test]
fn an_old_secret_still_verifying_long_after_a_new_one_raises_secret_rotation() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "SELECT webhook_register_provider('al_rotate', scheme => 'stripe', secret => 'whsec_old');
         SELECT webhook_add_secret('al_rotate', 'whsec_new');
         -- The new secret was added eight days ago.
         UPDATE webhook.provider_secrets SET added_at = now() - interval '8 days'
          WHERE provider = 'al_rotate' AND secret = 'whsec_new';
         UPDATE webhook.provider_secrets SET added_at = now() - interval '30 days'
          WHERE provider = 'al_rotate' AND secret = 'whsec_old';",
    )
    .unwrap();
    let body = payload("signed_with_new");
    receive(
        &mut c,
        "al_rotate",
        &stripe(&body, now(), "whsec_new"),
        body.as_bytes(),
    )
    .unwrap();
    assert!(
        evaluate(&mut c, "al_rotate").is_empty(),
        "the sender switched"
    );
    let body = payload("signed_with_old");
    receive(
        &mut c,
        "al_rotate",
        &stripe(&body, now(), "whsec_old"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(
        evaluate(&mut c, "al_rotate"),
        [("opened".into(), "secret_rotation".into(), "open".into())]
    );
    // Once the old one is retired (forced: it is in use), it cannot verify.
    c.batch_execute("SET client_min_messages = error; SELECT webhook_retire_secret('al_rotate', 'whsec_old', force => true)")
        .unwrap();
    assert_eq!(evaluate(&mut c, "al_rotate")[0].0, "resolved");
}

#[test]
fn dead_letters_and_a_failure_rate_raise_their_alerts() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\", min_events)
         VALUES ('flaky', 'failure_rate', 'al_fail', 0.2, '15 minutes', 4)",
    )
    .unwrap();
    for i in 0..3 {
        deliver(&mut c, "al_fail", &format!("fine{i}"), Duration::ZERO);
    }
    let claim = claim_in(&mut c, "al_fail", "broken", None).unwrap();
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'no such customer', permanent => true)",
        &[&claim.id],
    )
    .unwrap();
    let mut changes = evaluate(&mut c, "al_fail");
    changes.sort();
    assert_eq!(
        changes,
        [
            ("opened".into(), "dead_letters".into(), "open".into()),
            ("opened".into(), "flaky".into(), "open".into())
        ]
    );
    assert_eq!(
        unresolved(&mut c, "flaky", "al_fail").unwrap().2,
        0.25,
        "1 of 4"
    );
    // One more success brings the rate to 1 in 5: not above the rule's 20 %.
    deliver(&mut c, "al_fail", "fine_again", Duration::ZERO);
    let changes = evaluate(&mut c, "al_fail");
    assert_eq!(
        changes,
        [("resolved".into(), "flaky".into(), "resolved".into())]
    );
    assert!(
        unresolved(&mut c, "dead_letters", "al_fail").is_some(),
        "the dead letter stays"
    );
}

#[test]
fn only_operators_read_and_acknowledge_alerts_and_a_monitor_reads_only_metrics() {
    let (_one, mut c) = setup();
    let db = database(DB);
    for role in ["al_app", "al_monitor"] {
        ensure_role(&mut c, role, true);
    }
    c.batch_execute(
        "SELECT webhook_grant_app('al_app'); SELECT webhook_grant_monitor('al_monitor');",
    )
    .unwrap();
    for role in ["al_app", "al_monitor"] {
        let mut r = connect_as(db, role);
        for sql in [
            "SELECT count(*) FROM webhook.alerts",
            "SELECT webhook_alert_acknowledge(1)",
            "SELECT webhook_alert_silence(1, '1 hour')",
            "SELECT count(*) FROM webhook_alerts_evaluate()",
            "SELECT count(*) FROM webhook.metric_totals",
            "UPDATE webhook.alert_rules SET enabled = false",
        ] {
            let err = r.batch_execute(sql).unwrap_err();
            assert_eq!(sql_state(&err), Some("42501"), "{role}: {sql}");
        }
    }
    let mut app = connect_as(db, "al_app");
    let err = app
        .batch_execute("SELECT count(*) FROM webhook_metrics()")
        .unwrap_err();
    assert_eq!(
        sql_state(&err),
        Some("42501"),
        "the app role reads no metrics"
    );
    let mut monitor = connect_as(db, "al_monitor");
    let text: String = monitor
        .query_one("SELECT webhook_metrics_prometheus()", &[])
        .unwrap()
        .get(0);
    assert!(text.contains("# TYPE webhook_deliveries_total counter"));
}

#[test]
fn bad_arguments_are_refused_with_their_own_errors() {
    let (_one, mut c) = setup();
    for (sql, state, words) in [
        ("SELECT webhook_alert_acknowledge(NULL)", "22004", "\"alert_id\""),
        ("SELECT webhook_alert_acknowledge(-1)", "P0002", "no alert"),
        ("SELECT webhook_alert_silence(NULL, '1 hour')", "22004", "\"alert_id\""),
        ("SELECT webhook_alert_silence(1, '-1 hour')", "22023", "\"duration\""),
        ("SELECT webhook_alert_silence(1, '90 days')", "22023", "\"duration\""),
        (
            "INSERT INTO webhook.alert_rules (name, kind, threshold, \"window\") VALUES ('x', 'failure_rate', 5, '1 hour')",
            "23514",
            "alert_rules_rate_check",
        ),
        (
            "INSERT INTO webhook.alert_rules (name, kind, threshold, \"window\") VALUES ('Bad Name', 'silence', 5, '1 hour')",
            "23514",
            "alert_rules_name_check",
        ),
    ] {
        let err = c.batch_execute(sql).unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{sql}: {}", message(&err));
        assert!(message(&err).contains(words), "{sql}: {}", message(&err));
    }
    // A resolved alert is not acknowledged again.
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\")
         VALUES ('gone_backlog', 'oldest_ready', 'al_gone', 0, '5 minutes')",
    )
    .unwrap();
    enqueue_many(&mut c, "al_gone", "g", 1);
    std::thread::sleep(Duration::from_millis(50));
    evaluate(&mut c, "al_gone");
    let (id, _, _) = unresolved(&mut c, "gone_backlog", "al_gone").unwrap();
    while !work_once(&mut c, "al_gone", "default", 10)
        .unwrap()
        .is_empty()
    {}
    evaluate(&mut c, "al_gone");
    let err = c
        .query_one("SELECT webhook_alert_acknowledge($1)", &[&id])
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("55000"));
}

/// The dead_letters alert is open exactly while dead letters wait: it
/// resolves when they are requeued, and stays while they wait, however
/// long ago they were parked. For claimed events and for inbox rows.
#[test]
fn the_dead_letters_alert_follows_the_dead_letters() {
    let (_one, mut c) = setup();
    // A claimed event and an inbox row, each parked.
    let claim = claim_in(&mut c, "al_dead", "claimed_dead", None).unwrap();
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'no such customer', permanent => true)",
        &[&claim.id],
    )
    .unwrap();
    enqueue_many(&mut c, "al_dead_q", "q", 1);
    let lease: String = c
        .query_one(
            "SELECT id::text FROM webhook_next(1, 'default', 'al_dead_q')",
            &[],
        )
        .unwrap()
        .get(0);
    c.execute(
        "SELECT webhook_fail($1::text::uuid, 'no such order', permanent => true)",
        &[&lease],
    )
    .unwrap();
    // One evaluation opens both (it reports the changes of one provider).
    assert_eq!(
        evaluate(&mut c, "al_dead"),
        [("opened".into(), "dead_letters".into(), "open".into())]
    );
    assert!(unresolved(&mut c, "dead_letters", "al_dead_q").is_some());
    // Long after the rule's window, still waiting: still open.
    c.batch_execute(
        "INSERT INTO webhook.alert_rules (name, kind, threshold, \"window\")
         VALUES ('dead_letters', 'dead_letters', 0, '1 second')",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(evaluate(&mut c, "al_dead").is_empty());
    assert!(
        unresolved(&mut c, "dead_letters", "al_dead").is_some(),
        "still waiting, still open"
    );
    // Requeued: resolved at the next evaluation.
    c.batch_execute(
        "SELECT webhook_requeue('al_dead', 'claimed_dead');
         SELECT webhook_requeue('al_dead_q', 'q1');",
    )
    .unwrap();
    assert_eq!(
        evaluate(&mut c, "al_dead"),
        [("resolved".into(), "dead_letters".into(), "resolved".into())]
    );
    assert!(unresolved(&mut c, "dead_letters", "al_dead_q").is_none());
    c.batch_execute("DELETE FROM webhook.alert_rules WHERE name = 'dead_letters'")
        .unwrap();
}

/// Refused deliveries are not the provider speaking: a forged request
/// every so often does not keep "this provider went quiet" from firing.
#[test]
fn forged_requests_do_not_break_a_silence() {
    let (_one, mut c) = setup();
    c.batch_execute(
        "SELECT webhook_register_provider('al_hushed', secret => 'whsec_hushed', scheme => 'stripe');
         INSERT INTO webhook.alert_rules (name, kind, provider, threshold, \"window\")
         VALUES ('hushed_silent', 'silence', 'al_hushed', 5, '10 minutes');
         SELECT webhook_metrics_rollup();
         INSERT INTO webhook.metric_minutes (minute, provider, consumer, metric, label, count)
         VALUES (date_trunc('minute', now() - interval '30 minutes'), 'al_hushed', '', 'deliveries', 'claimed', 8);",
    )
    .unwrap();
    assert_eq!(
        evaluate(&mut c, "al_hushed"),
        [("opened".into(), "hushed_silent".into(), "open".into())]
    );
    // Forgeries arrive: refused, and the silence goes on.
    for n in 0..3 {
        let body = payload(&format!("evt_forged_{n}"));
        let answer = receive(
            &mut c,
            "al_hushed",
            &stripe(&body, now(), "whsec_attacker"),
            body.as_bytes(),
        )
        .unwrap();
        assert_eq!(answer.get::<_, String>("status"), "rejected");
    }
    settle(&mut c);
    assert!(evaluate(&mut c, "al_hushed").is_empty());
    assert!(unresolved(&mut c, "hushed_silent", "al_hushed").is_some());
    // A genuine delivery ends it.
    let body = payload("evt_genuine");
    let answer = receive(
        &mut c,
        "al_hushed",
        &stripe(&body, now(), "whsec_hushed"),
        body.as_bytes(),
    )
    .unwrap();
    assert_eq!(answer.get::<_, String>("status"), "claimed");
    let mut changes = Vec::new();
    wait_for("the delivery to be counted", || {
        changes = evaluate(&mut c, "al_hushed");
        !changes.is_empty()
    });
    assert_eq!(
        changes,
        [("resolved".into(), "hushed_silent".into(), "resolved".into())]
    );
}

/// Invented names open one alert between them, not one each.
#[test]
fn invented_provider_names_open_one_alert_between_them() {
    let (_one, mut c) = setup();
    c.batch_execute("ALTER DATABASE pgwi_alerts SET webhook.metrics_unregistered_providers = 0;")
        .unwrap();
    let mut c = connect(database(DB));
    for n in 0..40 {
        let claim = claim_in(&mut c, &format!("al-made-up-{n}"), "e", None).unwrap();
        c.execute(
            "SELECT webhook_fail($1::text::uuid, 'made up', permanent => true)",
            &[&claim.id],
        )
        .unwrap();
    }
    settle(&mut c);
    let opened = c
        .query(
            "SELECT provider FROM webhook_alerts_evaluate() WHERE change = 'opened' AND rule = 'dead_letters'
                AND (provider LIKE 'al-made-up-%' OR provider = '(other)')",
            &[],
        )
        .unwrap();
    assert_eq!(opened.len(), 1, "one alert for every invented name");
    assert_eq!(opened[0].get::<_, String>(0), "(other)");
    c.batch_execute(
        "SELECT webhook_requeue_dead(provider => 'al-made-up-' || n) FROM generate_series(0, 39) n;
         ALTER DATABASE pgwi_alerts RESET webhook.metrics_unregistered_providers;",
    )
    .unwrap();
    c.query("SELECT webhook_alerts_evaluate()", &[]).unwrap();
}

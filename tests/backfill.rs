//! Backfilling a consumer added to a provider: the earlier events of a
//! time range are queued for it alone, each once however often the
//! backfill runs, and both consumers' workers then process each event
//! once; spread at a rate, the events queued live overtake it; bad
//! arguments and the application role are refused.
#![cfg(feature = "client-tests")]

mod common;
use common::*;
use postgres::Client;

const DB: &str = "pgwi_backfill";

fn register(admin: &mut Client, provider: &str, consumers: &[&str]) {
    let consumers: Vec<String> = consumers.iter().map(|c| c.to_string()).collect();
    admin
        .execute(
            "SELECT webhook_register_provider($1, scheme => 'stripe', secret => 'whsec_backfill',
                                              consumers => $2)",
            &[&provider, &consumers],
        )
        .unwrap();
}

fn ready(admin: &mut Client, provider: &str, consumer: &str) -> i64 {
    admin
        .query_one(
            "SELECT count(*) FROM webhook.inbox WHERE provider = $1 AND consumer = $2 AND status <> 'processed'",
            &[&provider, &consumer],
        )
        .unwrap()
        .get(0)
}

fn backfill(admin: &mut Client, provider: &str, consumer: &str, rate: Option<f64>) -> i64 {
    admin
        .query_one(
            "SELECT webhook_backfill($1, $2, now() - interval '1 hour', rate => $3)",
            &[&provider, &consumer, &rate],
        )
        .unwrap()
        .get(0)
}

#[test]
fn a_consumer_added_later_gets_the_earlier_events_once_and_the_others_nothing_more() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "bf_stripe", &["billing"]);
    enqueue_many(&mut admin, "bf_stripe", "evt_", 500);
    // Billing processed half of them before analytics came.
    for _ in 0..25 {
        work_once(&mut admin, "bf_stripe", "billing", 10).unwrap();
    }
    register(&mut admin, "bf_stripe", &["billing", "analytics"]);
    let billing_before = ready(&mut admin, "bf_stripe", "billing");
    assert_eq!(billing_before, 250);

    assert_eq!(backfill(&mut admin, "bf_stripe", "analytics", None), 500);
    // Again, by mistake: nothing more.
    assert_eq!(backfill(&mut admin, "bf_stripe", "analytics", None), 0);
    assert_eq!(
        ready(&mut admin, "bf_stripe", "billing"),
        billing_before,
        "billing untouched"
    );

    // Both consumers' workers drain, while the events keep coming.
    let workers: Vec<_> = ["billing", "analytics", "analytics"]
        .into_iter()
        .map(|consumer| {
            std::thread::spawn(move || {
                let mut client = connect(db);
                let mut done = 0;
                loop {
                    let n = work_once_of(&mut client, Some("bf_stripe"), consumer, 10)
                        .unwrap()
                        .len();
                    if n == 0 {
                        return done;
                    }
                    done += n;
                }
            })
        })
        .collect();
    let done: Vec<usize> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    assert_eq!(done[0], 250);
    assert_eq!(done[1] + done[2], 500);
    // Every event has its one side effect per consumer: billing's 500 and
    // analytics' 500 (side_effects does not say which consumer).
    let effects: i64 = admin
        .query_one(
            "SELECT count(*) FROM side_effects WHERE provider = 'bf_stripe'",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(effects, 1000);
    let twice: i64 = admin
        .query_one(
            "SELECT count(*) FROM (SELECT event_id FROM side_effects WHERE provider = 'bf_stripe'
                                    GROUP BY event_id HAVING count(*) <> 2) x",
            &[],
        )
        .unwrap()
        .get(0);
    assert_eq!(twice, 0, "each event once per consumer");
}

#[test]
fn a_backfill_spread_at_a_rate_lets_live_events_overtake_it() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "bf_rate", &["first"]);
    enqueue_many(&mut admin, "bf_rate", "old_", 200);
    register(&mut admin, "bf_rate", &["first", "late"]);
    // 200 events at 20 a second: ten seconds of them.
    assert_eq!(backfill(&mut admin, "bf_rate", "late", Some(20.0)), 200);
    let spread: f64 = admin
        .query_one(
            "SELECT extract(epoch FROM max(run_at) - min(run_at))::float8 FROM webhook.inbox
              WHERE provider = 'bf_rate' AND consumer = 'late'",
            &[],
        )
        .unwrap()
        .get(0);
    assert!((9.9..=10.0).contains(&spread), "{spread}");
    // A live event, queued now, is leased before the backfill's later ones.
    admin
        .execute(
            "SELECT webhook_enqueue('bf_rate', 'live_1', 'invoice.paid', '{}'::jsonb)",
            &[],
        )
        .unwrap();
    let leased: Vec<String> = admin
        .query(
            "SELECT event_id FROM webhook_next(5, 'late', 'bf_rate')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert!(leased.contains(&"live_1".to_string()), "{leased:?}");
    assert!(leased.len() <= 2, "only what is due: {leased:?}");
}

#[test]
fn a_backfill_refuses_what_it_cannot_do_with_its_own_sqlstates() {
    let db = database(DB);
    let mut admin = connect(db);
    register(&mut admin, "bf_errors", &["one"]);
    ensure_role(&mut admin, "bf_app", true);
    admin
        .batch_execute("SELECT webhook_grant_app('bf_app')")
        .unwrap();
    for (call, state) in [
        (
            "SELECT webhook_backfill('bf_errors', 'two', now())",
            "22023",
        ),
        (
            "SELECT webhook_backfill('bf_nobody', 'one', now())",
            "42704",
        ),
        ("SELECT webhook_backfill('bf_errors', 'one', NULL)", "22004"),
        ("SELECT webhook_backfill(NULL, 'one', now())", "22004"),
        (
            "SELECT webhook_backfill('bf_errors', 'one', now(), rate => 0)",
            "22023",
        ),
    ] {
        let err = admin.batch_execute(call).unwrap_err();
        assert_eq!(sql_state(&err), Some(state), "{call}: {}", message(&err));
        assert!(
            message(&err).starts_with("webhook_backfill: argument"),
            "{}",
            message(&err)
        );
    }
    let err = connect_as(db, "bf_app")
        .batch_execute("SELECT webhook_backfill('bf_errors', 'one', now())")
        .unwrap_err();
    assert_eq!(sql_state(&err), Some("42501"), "{}", message(&err));
}

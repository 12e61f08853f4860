//! What CREATE EXTENSION leaves behind: tables in schema `webhook`, the
//! privileges on them, and the security settings of each function.

#[pgrx::pg_schema]
mod tests {
    use pgrx::prelude::*;

    fn one<T: pgrx::FromDatum + pgrx::IntoDatum>(sql: &str) -> T {
        Spi::get_one::<T>(sql).expect(sql).expect(sql)
    }

    #[pg_test]
    fn tables_live_in_schema_webhook() {
        let n: i64 = one(
            "SELECT count(*) FROM pg_tables
              WHERE schemaname = 'webhook' AND tablename IN ('events', 'delivery_log', 'delivery_failures')",
        );
        assert_eq!(n, 3);
        let view: i64 = one("SELECT count(*) FROM pg_views WHERE schemaname = 'webhook' AND viewname = 'deliveries'");
        assert_eq!(view, 1, "the archive with outcomes is a view");
    }

    #[pg_test]
    fn dedup_is_the_primary_key_of_events() {
        let def: String = one("SELECT pg_get_constraintdef(oid) FROM pg_constraint
              WHERE conrelid = 'webhook.events'::regclass AND contype = 'p'");
        assert_eq!(def, "PRIMARY KEY (provider, event_id)");
    }

    #[pg_test]
    fn archived_payloads_are_compressed_inside_the_row() {
        let toast_before = toast_bytes();
        // A typical kilobyte of webhook JSON, as a claim archives it.
        let id: pgrx::Uuid = one(
            "SELECT id FROM webhook_claim('stripe', 'evt_compact', 'invoice.paid',
                 jsonb_build_object('id', 'evt_compact', 'type', 'invoice.paid', 'lines',
                     (SELECT jsonb_agg(jsonb_build_object('id', 'il_' || i, 'amount', i * 100,
                                                          'description', 'Pro plan, monthly'))
                        FROM generate_series(1, 20) i)), NULL)",
        );
        let (stored, plain) = Spi::get_two_with_args::<i32, i32>(
            "SELECT pg_column_size(payload), octet_length(payload::text)
               FROM webhook.delivery_log WHERE id = $1",
            &[id.into()],
        )
        .unwrap();
        let (stored, plain) = (stored.unwrap(), plain.unwrap());
        assert!(plain > 1000, "the payload is {plain} bytes of text");
        assert!(
            stored * 2 < plain,
            "archived payload takes {stored} bytes for {plain} bytes of JSON"
        );
        // Compressed in the row, not moved to TOAST: nothing went there.
        assert_eq!(toast_bytes(), toast_before);
    }

    #[pg_test]
    fn archived_raw_bodies_and_headers_are_compressed_and_read_back_exactly() {
        let toast_before = toast_bytes();
        Spi::run("SELECT webhook_register_provider('stripe', secret => 'whsec_compact')").unwrap();
        // A kilobyte and a half of JSON, signed, with the dozen headers a
        // provider sends.
        let body: String = one(
            "SELECT jsonb_build_object('id', 'evt_raw', 'type', 'invoice.paid', 'lines',
                 (SELECT jsonb_agg(jsonb_build_object('id', 'il_' || i, 'amount', i * 100,
                                                      'description', 'Pro plan, monthly'))
                    FROM generate_series(1, 20) i))::text",
        );
        let headers = format!(
            "(SELECT jsonb_build_object('Stripe-Signature', 't=' || ts || ',v1=' ||
                     encode(hmac(ts || '.' || '{body}', 'whsec_compact', 'sha256'), 'hex'))
                 || (SELECT jsonb_object_agg('X-Forwarded-Header-' || i, 'proxy.example.com, 10.0.0.' || i)
                       FROM generate_series(1, 12) i)
                FROM (SELECT extract(epoch FROM clock_timestamp())::bigint::text AS ts) t)"
        );
        let (status, http, _) = crate::in_db_tests::receive("stripe", &headers, &body);
        assert_eq!((status.as_str(), http), ("claimed", 200));
        let row = Spi::get_one_with_args::<String>(
            "SELECT pg_column_compression(raw_body) || ' ' || pg_column_compression(headers)
                    || ' ' || (pg_column_size(raw_body) * 2 < octet_length(raw_body))::text
                    || ' ' || (pg_column_size(headers) * 2 < octet_length(headers::text))::text
                    || ' ' || (convert_from(raw_body, 'UTF8') = $1)::text
               FROM webhook.delivery_log WHERE event_id = 'evt_raw'",
            &[body.as_str().into()],
        )
        .unwrap()
        .unwrap();
        let parts: Vec<&str> = row.split(' ').collect();
        assert!(
            matches!(parts[0], "lz4" | "pglz") && matches!(parts[1], "lz4" | "pglz"),
            "{row}"
        );
        assert_eq!(&parts[2..], ["true", "true", "true"], "{row}");
        assert_eq!(toast_bytes(), toast_before);
    }

    /// The TOAST of the archive's partition the tests' deliveries land in
    /// (no day's partition is made here).
    fn toast_bytes() -> i64 {
        one("SELECT pg_relation_size(reltoastrelid) FROM pg_class
              WHERE oid = 'webhook.delivery_log_default'::regclass")
    }

    const TOUCHING_STATE: &str =
        "('webhook_receive', 'webhook_claim', 'webhook_complete', 'webhook_fail',
        'webhook_extend', 'webhook_requeue', 'webhook_purge', 'webhook_register_provider',
        'webhook_add_secret', 'webhook_retire_secret', 'webhook_providers',
        'webhook_metrics', 'webhook_metrics_prometheus', 'webhook_metrics_rollup', 'webhook_metric_quantile',
        'webhook_alerts_evaluate', 'webhook_alert_acknowledge', 'webhook_alert_silence',
        'webhook_pause', 'webhook_resume', 'webhook_quarantine', 'webhook_release', 'webhook_set_limit',
        'webhook_enqueue_polled', 'webhook_backfill', 'webhook_replay', 'webhook_replay_pause',
        'webhook_replay_resume', 'webhook_replay_cancel')";

    #[pg_test]
    fn functions_that_touch_the_tables_are_security_definer_with_a_pinned_search_path() {
        let bad: Vec<String> = Spi::connect(|c| {
            c.select(
                &format!(
                    "SELECT proname::text FROM pg_proc
                      WHERE proname IN {TOUCHING_STATE}
                        AND NOT (prosecdef AND proconfig @> ARRAY['search_path=pg_catalog, pg_temp'])"
                ),
                None,
                &[],
            )
            .unwrap()
            .map(|r| r.get::<String>(1).unwrap().unwrap())
            .collect()
        });
        assert!(
            bad.is_empty(),
            "not SECURITY DEFINER with a pinned search_path: {bad:?}"
        );
        let count: i64 = one(&format!(
            "SELECT count(*) FROM pg_proc WHERE proname IN {TOUCHING_STATE}"
        ));
        assert_eq!(count, 32, "every overload is covered");
    }

    #[pg_test]
    fn public_may_not_call_the_writers_nor_touch_the_tables() {
        let callable: i64 = one(&format!(
            "SELECT count(*) FROM pg_proc
              WHERE (proname IN {TOUCHING_STATE}
                     OR proname IN ('webhook_grant_app', 'webhook_grant_operator')
                     OR pronamespace = 'webhook'::regnamespace)
                AND has_function_privilege('public', oid, 'EXECUTE')"
        ));
        assert_eq!(callable, 0);
        // And by rule: no member function of the extension but the
        // table-free catalog and verification functions.
        let mut members: Vec<String> = Spi::connect(|c| {
            c.select(
                "SELECT p.proname::text FROM pg_depend d
                   JOIN pg_extension x ON x.oid = d.refobjid
                   JOIN pg_proc p ON p.oid = d.objid
                  WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'
                    AND x.extname = 'pg_webhook_inbox'
                    AND has_function_privilege('public', p.oid, 'EXECUTE')
                  ORDER BY 1",
                None,
                &[],
            )?
            .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
        members.dedup(); // overloads
        assert_eq!(
            members,
            [
                "verify_hmac",
                "webhook_schemes",
                "webhook_verify",
                "webhook_verify_detail"
            ]
        );
        let writable: i64 = one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
              WHERE n.nspname = 'webhook' AND c.relkind IN ('r', 'p', 'v')
                AND (has_table_privilege('public', c.oid, 'SELECT')
                  OR has_table_privilege('public', c.oid, 'INSERT')
                  OR has_table_privilege('public', c.oid, 'UPDATE')
                  OR has_table_privilege('public', c.oid, 'DELETE'))",
        );
        assert_eq!(writable, 0);
        let verify_public: bool = one(
            "SELECT bool_and(has_function_privilege('public', oid, 'EXECUTE'))
               FROM pg_proc WHERE proname IN ('verify_hmac', 'webhook_verify', 'webhook_verify_detail')",
        );
        assert!(verify_public);
    }

    #[pg_test]
    fn the_tables_whose_rows_pg_dump_keeps_are_registered() {
        // Registered with pg_extension_config_dump: pg_dump keeps their
        // rows. (tests/dump_restore.rs restores them for real.)
        let dumped: String = one(
            "SELECT string_agg(c::regclass::text, ', ' ORDER BY c::regclass::text COLLATE \"C\")
               FROM pg_extension x, unnest(x.extconfig) c
              WHERE x.extname = 'pg_webhook_inbox'",
        );
        assert_eq!(
            dumped,
            "webhook.alert_rules, webhook.alerts, webhook.alerts_id_seq, \
             webhook.app_scopes, webhook.breakers, webhook.delivery_failures, webhook.delivery_log_default, \
             webhook.events, webhook.filters, webhook.idempotency_keys, webhook.inbox, webhook.inbox_failures, \
             webhook.limit_slots, webhook.limits, webhook.metric_held, webhook.metric_minutes, webhook.metric_open, \
             webhook.metric_totals, webhook.pauses, webhook.polled, webhook.provider_secrets, webhook.providers, \
             webhook.replay_items, webhook.replays, webhook.requeues, webhook.secret_uses, webhook.signature_bindings, \
             webhook.trace_contexts, webhook.watermarks"
        );
    }

    #[pg_test]
    fn webhook_next_is_never_jit_compiled() {
        let config: String = one("SELECT array_to_string(proconfig, ',') FROM pg_proc
              WHERE oid = 'webhook_next(integer, text, text, text, interval)'::regprocedure");
        assert!(config.split(',').any(|c| c == "jit=off"), "{config}");
    }

    #[pg_test]
    fn settings_exist_with_their_defaults() {
        let value: String = one("SELECT current_setting('webhook.lease_timeout')");
        assert_eq!(value, "5min");
        let value: String = one("SELECT current_setting('webhook.max_payload_size')");
        assert_eq!(value, "25MB");
        let value: String = one("SELECT current_setting('webhook.max_attempts')");
        assert_eq!(value, "10");
        let value: String = one("SELECT current_setting('webhook.max_lease')");
        assert_eq!(value, "1h");
        let value: String = one("SELECT current_setting('webhook.rejected_body_limit')");
        assert_eq!(value, "4kB");
        let value: String = one("SELECT current_setting('webhook.idempotency_retention')");
        assert_eq!(value, "1d");
        let value: String = one("SELECT current_setting('webhook.idempotency_max_response')");
        assert_eq!(value, "1MB");
        let value: String = one("SELECT current_setting('webhook.metrics_retention')");
        assert_eq!(value, "14d");
        let value: String = one("SELECT current_setting('webhook.redact_headers')");
        assert!(
            value.starts_with("authorization, proxy-authorization, cookie"),
            "{value}"
        );
    }

    /// An application may not lift the ceilings the DBA set.
    #[pg_test]
    fn only_a_superuser_sets_the_ceilings() {
        let context: Vec<String> = Spi::connect(|c| {
            c.select(
                "SELECT name || '=' || context FROM pg_settings
                  WHERE name IN ('webhook.max_lease', 'webhook.rejected_body_limit',
                                 'webhook.redact_headers', 'webhook.max_payload_size')
                  ORDER BY name",
                None,
                &[],
            )?
            .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
        assert_eq!(
            context,
            [
                "webhook.max_lease=superuser",
                "webhook.max_payload_size=superuser",
                "webhook.redact_headers=superuser",
                "webhook.rejected_body_limit=superuser"
            ]
        );
    }

    fn texts(sql: &str) -> Vec<String> {
        Spi::connect(|c| {
            c.select(sql, None, &[])?
                .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
                .collect::<Result<Vec<_>, _>>()
        })
        .expect(sql)
    }

    /// Rust's statuses are the SQL enums' labels, in order.
    #[pg_test]
    fn rust_statuses_match_the_sql_enums() {
        use crate::status::{ClaimStatus, EventStatus, InboxStatus, KeyStatus};
        let sql = |ty: &str| {
            texts(&format!(
                "SELECT unnest(enum_range(NULL::webhook.{ty}))::text"
            ))
        };
        fn labels<T: Copy>(all: &[T], as_str: fn(T) -> &'static str) -> Vec<&'static str> {
            all.iter().map(|s| as_str(*s)).collect()
        }
        assert_eq!(
            sql("claim_status"),
            labels(ClaimStatus::ALL, ClaimStatus::as_str)
        );
        assert_eq!(
            sql("event_status"),
            labels(EventStatus::ALL, EventStatus::as_str)
        );
        assert_eq!(
            sql("inbox_status"),
            labels(InboxStatus::ALL, InboxStatus::as_str)
        );
        assert_eq!(sql("key_status"), labels(KeyStatus::ALL, KeyStatus::as_str));
        for (ty, sql_type) in [
            (ClaimStatus::SQL_TYPE, "webhook.claim_status"),
            (EventStatus::SQL_TYPE, "webhook.event_status"),
            (InboxStatus::SQL_TYPE, "webhook.inbox_status"),
            (KeyStatus::SQL_TYPE, "webhook.key_status"),
        ] {
            assert_eq!(ty, sql_type);
        }
    }

    /// \df+ and \d+ show a DBA what each thing is: every function, table,
    /// view and type of the extension, and every table column, has a
    /// comment.
    #[pg_test]
    fn everything_a_dba_sees_has_a_comment() {
        let missing = texts(
            "WITH members AS (
                 SELECT d.classid, d.objid FROM pg_depend d JOIN pg_extension x ON x.oid = d.refobjid
                  WHERE d.refclassid = 'pg_extension'::regclass AND d.deptype = 'e'
                    AND x.extname = 'pg_webhook_inbox'
             )
             SELECT 'function ' || p.oid::regprocedure FROM members m JOIN pg_proc p ON p.oid = m.objid
              WHERE m.classid = 'pg_proc'::regclass AND obj_description(p.oid, 'pg_proc') IS NULL
                -- the tests and their helpers, installed with the test build only
                AND p.pronamespace::regnamespace::text <> 'tests'
                AND p.proname NOT IN ('error_of', 'error_detail_of', 'hmac')
             UNION ALL
             SELECT 'relation ' || c.oid::regclass FROM members m JOIN pg_class c ON c.oid = m.objid
              WHERE m.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p', 'v')
                AND obj_description(c.oid, 'pg_class') IS NULL
             UNION ALL
             SELECT 'column ' || c.oid::regclass || '.' || a.attname
               FROM members m JOIN pg_class c ON c.oid = m.objid
               JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
              -- a partition's columns are its parent's, described there
              WHERE m.classid = 'pg_class'::regclass AND c.relkind IN ('r', 'p') AND NOT c.relispartition
                AND col_description(c.oid, a.attnum) IS NULL
             UNION ALL
             SELECT 'type ' || t.oid::regtype FROM members m JOIN pg_type t ON t.oid = m.objid
              WHERE m.classid = 'pg_type'::regclass AND t.typtype = 'e'
                AND obj_description(t.oid, 'pg_type') IS NULL
             ORDER BY 1",
        );
        assert!(missing.is_empty(), "no comment on: {missing:#?}");
    }

    #[pg_test]
    fn a_deliverys_signature_and_ids_stay_in_the_archive_row() {
        let toast: String = one(
            "SELECT reltoastrelid::regclass::text FROM pg_class WHERE oid = 'webhook.delivery_log_default'::regclass",
        );
        let toast_rows = || one::<i64>(&format!("SELECT count(*) FROM {toast}"));
        let before = toast_rows();
        // A Stripe-shaped signature (about a hundred bytes), a long id, and
        // a payload that keeps the row past 2 kB compressed, where the
        // toaster starts moving columns out of the row.
        Spi::run(
            "SELECT * FROM webhook_claim('stripe', 'evt_' || repeat(md5('id'), 3), 'invoice.paid',
                                         (SELECT jsonb_build_object('lines', jsonb_agg(md5(i::text) || md5((i * 7)::text)))
                                            FROM generate_series(1, 100) i),
                                         't=1700000000,v1=' || md5('a') || md5('b') || ',v0=' || md5('c'))",
        )
        .unwrap();
        assert_eq!(
            toast_rows(),
            before,
            "nothing of the delivery went to TOAST"
        );
        assert_eq!(
            Spi::get_one::<String>(
                "SELECT string_agg(attname || '=' || attstorage::text, ',' ORDER BY attname)
                   FROM pg_attribute
                  WHERE attrelid = 'webhook.delivery_log'::regclass
                    AND attname IN ('provider', 'event_id', 'event_type', 'signature')"
            ),
            Ok(Some(
                "event_id=m,event_type=m,provider=p,signature=m".into()
            ))
        );
    }
}

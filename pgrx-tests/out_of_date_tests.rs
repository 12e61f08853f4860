//! The C symbols only SQL older than the first published release names:
//! each one refuses with the hint to update, and the current SQL names
//! none of them.

#[pgrx::pg_schema]
mod tests {
    use crate::out_of_date::SYMBOLS;
    use pgrx::prelude::*;

    /// What calling `symbol` through a function of an out-of-date SQL
    /// raises: `SQLSTATE|message|hint`.
    fn call_as_old_sql(symbol: &str) -> String {
        Spi::run(&format!(
            "CREATE OR REPLACE FUNCTION pg_temp.old_entry_point() RETURNS void
             LANGUAGE c AS '$libdir/pg_webhook_inbox', '{symbol}'"
        ))
        .unwrap();
        Spi::get_one::<String>(
            "DO $$
             DECLARE state text; message text; hint text;
             BEGIN
                 PERFORM pg_temp.old_entry_point();
                 RAISE NOTICE 'no error';
             EXCEPTION WHEN OTHERS THEN
                 GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
                                         hint = PG_EXCEPTION_HINT;
                 PERFORM set_config('test.raised', state || '|' || message || '|' || hint, true);
             END $$;
             SELECT current_setting('test.raised', true)",
        )
        .unwrap()
        .unwrap_or_default()
    }

    #[pg_test]
    fn every_out_of_date_symbol_says_to_update() {
        assert!(SYMBOLS.len() > 20);
        for symbol in SYMBOLS {
            let raised = call_as_old_sql(symbol);
            let parts: Vec<&str> = raised.splitn(3, '|').collect();
            assert_eq!(parts.len(), 3, "{symbol}: {raised}");
            assert_eq!(parts[0], "42883", "{symbol}: {raised}");
            assert!(
                parts[1].contains("older than its library") && parts[1].contains(symbol),
                "{symbol}: {raised}"
            );
            assert!(
                parts[2].starts_with("Run: ALTER EXTENSION pg_webhook_inbox UPDATE"),
                "{symbol}: {raised}"
            );
        }
    }

    #[pg_test]
    fn the_current_sql_names_no_out_of_date_symbol() {
        let named: Vec<String> = Spi::connect(|c| {
            c.select(
                "SELECT p.prosrc FROM pg_proc p JOIN pg_language l ON l.oid = p.prolang
                  WHERE l.lanname = 'c' AND p.probin LIKE '%pg_webhook_inbox'",
                None,
                &[],
            )?
            .map(|row| row.get::<String>(1).map(Option::unwrap_or_default))
            .collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
        assert!(named.len() > 20, "the extension's C functions: {named:?}");
        for symbol in &named {
            assert!(
                !SYMBOLS.contains(&symbol.as_str()),
                "{symbol} is named by the current SQL and stubbed as out of date"
            );
        }
    }
}

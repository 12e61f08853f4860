//! verify_hmac against published test vectors: RFC 4231 (HMAC-SHA-256 and
//! HMAC-SHA-512, test case 2) and RFC 2202 (HMAC-SHA-1, test case 2):
//! key "Jefe", data "what do ya want for nothing?".

#[pgrx::pg_schema]
mod tests {
    use crate::in_db_tests::assert_error;
    use pgrx::prelude::*;

    const SHA256: &str = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
    const SHA1: &str = "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79";
    const SHA512: &str = "164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd610270cd7\
                          ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737";

    fn verify(sql_args: &str) -> bool {
        Spi::get_one::<bool>(&format!("SELECT verify_hmac({sql_args})"))
            .unwrap()
            .unwrap()
    }

    const DATA: &str = "'what do ya want for nothing?'";

    #[pg_test]
    fn rfc_vectors_verify_for_each_algorithm() {
        assert!(verify(&format!("'Jefe', {DATA}, '{SHA256}'")));
        assert!(verify(&format!("'Jefe', {DATA}, '{SHA256}', 'sha256'")));
        assert!(verify(&format!("'Jefe', {DATA}, '{SHA1}', 'sha1'")));
        assert!(verify(&format!("'Jefe', {DATA}, '{SHA512}', 'sha512'")));
        assert!(verify(&format!(
            "'Jefe', convert_to({DATA}, 'UTF8'), '{SHA256}'"
        )));
    }

    #[pg_test]
    fn encodings_and_prefixes_are_accepted() {
        let b64 = format!("encode(decode('{SHA256}', 'hex'), 'base64')");
        assert!(verify(&format!("'Jefe', {DATA}, {b64}")));
        assert!(verify(&format!("'Jefe', {DATA}, rtrim({b64}, '=')")));
        assert!(verify(&format!(
            "'Jefe', {DATA}, translate({b64}, '+/', '-_')"
        )));
        assert!(verify(&format!("'Jefe', {DATA}, upper('{SHA256}')")));
        assert!(verify(&format!("'Jefe', {DATA}, 'sha256={SHA256}'")));
        assert!(verify(&format!("'Jefe', {DATA}, 'sha1={SHA1}', 'SHA1'")));
    }

    #[pg_test]
    fn any_change_is_rejected() {
        let mut flipped = SHA256.to_string();
        flipped.replace_range(0..1, "4");
        assert!(!verify(&format!("'Jefe', {DATA}, '{flipped}'")));
        assert!(!verify(&format!("'Jefd', {DATA}, '{SHA256}'")));
        assert!(!verify(&format!(
            "'Jefe', 'what do ya want for nothing!', '{SHA256}'"
        )));
    }

    #[pg_test]
    fn verify_refuses_bad_arguments_with_their_own_sqlstate() {
        let cases = [
            (
                format!("SELECT verify_hmac(NULL, {DATA}, '{SHA256}')"),
                "22004",
                "\"secret\"",
            ),
            (
                format!("SELECT verify_hmac('', {DATA}, '{SHA256}')"),
                "2200F",
                "\"secret\"",
            ),
            (
                format!("SELECT verify_hmac('k', NULL::bytea, '{SHA256}')"),
                "22004",
                "\"payload\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, NULL)"),
                "22004",
                "\"signature\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, '{SHA256}', NULL)"),
                "22004",
                "\"algorithm\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, '{SHA256}', 'md5')"),
                "42704",
                "\"algorithm\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, 'not-a-signature')"),
                "22P02",
                "\"signature\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, '{}')", &SHA256[..62]),
                "22P02",
                "\"signature\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, 'sha1={SHA256}')"),
                "22P02",
                "\"signature\"",
            ),
            (
                format!("SELECT verify_hmac('k', {DATA}, '{SHA1}')"),
                "22P02",
                "\"signature\"",
            ),
        ];
        for (sql, sqlstate, needle) in &cases {
            assert_error(sql, sqlstate, needle);
        }
    }
}

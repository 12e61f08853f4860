//! In-database tests, one module per topic. Each test runs inside a single
//! transaction that is rolled back; commits, concurrency and killed
//! backends are tested from `tests/` over real connections.

mod claim_tests;
mod lifecycle_tests;
mod signature_tests;
mod schema_tests;

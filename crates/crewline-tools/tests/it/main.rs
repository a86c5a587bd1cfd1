//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod claims;
mod executor;
mod exports;
mod intents;
mod ledger;
mod registry;
mod schema;
mod sessions;

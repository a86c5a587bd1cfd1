//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;

mod chat;
mod chat_record;
mod demo;
mod eval;
mod eval_started_crew;
mod ledger;
mod load;
mod new;
mod platform;
mod playground;
mod voice;

//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;

mod approvals;
mod barge_in;
mod breakers;
mod call_approvals;
mod checkpoint;
mod claims;
mod contract;
mod expiry;
mod frozen;
mod killed;
mod lease;
mod ledger;
mod outage;
mod persistence;
mod replicas;
mod sentinel;

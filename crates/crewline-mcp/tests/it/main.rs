//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;

mod balancer;
mod cancellation;
mod client_bounds;
mod client_round_trip;
mod crew_server_merge;
mod schema_flavour;
mod server_calls;
mod server_http;
mod server_limits;
mod session_scope;
mod structured_output;

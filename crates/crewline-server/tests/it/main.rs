//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;
mod fake_llm;

mod auth;
mod bad_input;
mod balancer;
mod call_cost;
mod calls;
mod drain_under_load;
mod endpoints;
mod faults_llm;
mod faults_tools;
mod frozen_replica;
mod limits;
mod message_budget;
mod metrics_labels;
mod origins;
mod provider_metrics;
mod resume;
mod shutdown_tools;
mod shutdown_two_servers;
mod token_metrics;

//! `crewline mock-llm`: argument parsing over the testkit's mock model
//! ([`crewline_testkit::mock_llm`]), re-exported here so existing imports keep working.

mod cli;

pub use cli::{MockLlmArgs, run as run_cli};
pub use crewline_testkit::mock_llm::*;

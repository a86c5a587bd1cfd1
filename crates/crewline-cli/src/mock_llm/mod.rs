//! `crewline mock-llm`: argument parsing over the testkit's mock model
//! ([`crewline_testkit::mock_llm`]).

mod cli;

pub use cli::{MockLlmArgs, ScheduleStart, run as run_cli, start};

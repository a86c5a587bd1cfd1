//! `crewline load`: argument parsing over the testkit's load generator
//! ([`crewline_testkit::load`]), re-exported here so existing imports keep working.

mod cli;

pub use cli::{LoadArgs, ScenarioArg, run as run_cli};
pub use crewline_testkit::load::*;

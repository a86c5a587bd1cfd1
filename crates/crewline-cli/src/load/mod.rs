//! `crewline load`: argument parsing over the testkit's load generator
//! ([`crewline_load`]).

mod cli;

pub use cli::{LoadArgs, ScenarioArg, run as run_cli};

//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;

mod caller_moves;
mod example_suites;
mod faults;
mod handoffs;
mod html_report;
mod judge;
mod replay;
mod scenario_files;
mod silence;
mod simulated_caller;
mod tool_faults;
mod weather_crew;

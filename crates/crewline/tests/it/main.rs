//! The integration tests as one binary (one link, one copy of the dependencies' code
//! instead of one per file); a test that needs a process of its own stays a file of
//! its own in `tests/`.

mod common;

mod answer_limits;
mod call_end;
mod context_bound;
mod cut_short;
mod idle_race;
// Public, as the file was a crate root: its `documented` module checks that the generated items
// pass `missing_docs`, a lint that only looks at what the crate exports.
pub mod function_tool;
mod router;
mod run_once;
mod session;
mod tool_loop;
mod ui;

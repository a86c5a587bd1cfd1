//! The crewline command line as a library: the interactive `chat` loop (which can speak
//! the replies with `crewline-speech`, like the platform would), and the `demo`, which runs
//! the weather crew of `examples/voice_agent.rs`; `load` and `mock-llm` are argument parsing over
//! `crewline-testkit`, which holds the platform client, the mock model and the load engine;
//! `playground` serves `crewline-playground`'s page; `ledger pending` lists the calls with
//! effects a crash left with no outcome; `fake-bank` serves the testkit's fake bank for chaos
//! runs; `eval` runs `crewline-eval`'s scenario files and writes their reports; `new` writes
//! a crew project from a template.
//!
//! Nothing here prints on its own: the chat loop and the demo write to the writer they are
//! given, so they can be tested with an in-memory buffer and reused by other tools.

pub mod chat;
pub mod demo;
pub mod echo;
pub mod eval;
pub mod fake_bank;
pub mod ledger;
pub mod load;
pub mod mock_llm;
pub mod new;
pub mod playground;
pub mod render;
// The demo's weather crew: `examples/voice_agent.rs` itself (src/voice_agent.rs is a link to it,
// which `cargo package` ships as a file), so the demo is the example and the CLI publishes
// without the unpublished examples crate. Its `main` and flags go unused here.
#[allow(dead_code, unreachable_pub, missing_docs)]
mod voice_agent;

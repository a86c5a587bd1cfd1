//! The crewline command line as a library: a platform client that drives a crew over a real
//! WebSocket the way the voice platform does, the interactive `chat` loop (with `voice`, which
//! speaks the replies like the platform would), the example crew and the `demo`.
//!
//! Nothing here prints on its own: the chat loop and the demo write to the writer they are
//! given, so they can be tested with an in-memory buffer and reused by other tools.

pub mod chat;
/// The weather voice crew that `crewline demo` serves: the `voice_agent` example's own code,
/// so that the demo runs exactly what the example shows.
#[path = "../../../examples/voice_agent/crew.rs"]
pub mod crew;
pub mod demo;
pub mod load;
pub mod mock_llm;
pub mod platform;
pub mod render;
pub mod voice;

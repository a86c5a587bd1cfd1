//! crewline's example crews as a library: each module is one of the repository's
//! `examples/*.rs` files itself (`#[path]`), so what `cargo run --example NAME` serves, what
//! `crewline demo` runs and what the tests drive is one source. Each file is a whole program a
//! user copies (its tools, its prompt, its offline scripted model and its `main`); here its
//! `main` goes unused.
//!
//! | module | the crew |
//! | --- | --- |
//! | [`voice_agent`] | the weather agent: a filler while the slow lookups run, parallel tool calls |
//! | [`sentiment_background`] | the weather agent behind a background node that scores sentiment and escalates |
//! | [`call_control`] | a support agent whose tools end and transfer the call |
//! | [`collections_router`] | intake, verify and resolve on the deterministic router |
//! | [`support_triage`] | a router that picks the desk from a typed answer; a tool that extracts an address |
//! | [`bank_support`] | balances and transfers that run only after the caller's yes |
//! | [`slow_booking`] | a restaurant line: a search that reports progress, a booking in the background |
//! | [`text_chat`] | a web shop's chat assistant answering in markdown |
//! | [`remote_weather`] | a crew whose `get_weather` runs in a client's process |
//! | [`azure_weather`] | the weather crew on a team's own Azure OpenAI client |
//!
//! The model a crew runs on and the flags every example shares are crewline-server's
//! ([`crewline_server::model`], [`crewline_server::ModelArgs`]).
//!
//! ```
//! use std::time::Duration;
//!
//! use crewline_examples::voice_agent;
//! use crewline_server::model::ModelChoice;
//!
//! let model = voice_agent::model(ModelChoice::Scripted, None, Duration::ZERO)?;
//! let crew = voice_agent::WeatherCrew::new(model.llm, voice_agent::WEATHER_SERVICE_DELAY)?;
//! let _server = crewline_server::CrewServer::new(crew.agent().clone());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

// The examples that build on the weather crew (`sentiment_background`, `remote_weather`,
// `azure_weather`) each include `voice_agent.rs` as a module of their own, as a user's copy
// does; in this library that is one copy of its code per example, on purpose.
#![allow(clippy::duplicate_mod)]

// Each example's `main` (and what only it uses) is dead code in this library.
#[allow(dead_code)]
#[path = "../../../examples/azure_weather.rs"]
pub mod azure_weather;
#[allow(dead_code)]
#[path = "../../../examples/bank_support.rs"]
pub mod bank_support;
#[allow(dead_code)]
#[path = "../../../examples/call_control.rs"]
pub mod call_control;
#[allow(dead_code)]
#[path = "../../../examples/collections_router.rs"]
pub mod collections_router;
#[allow(dead_code)]
#[path = "../../../examples/remote_weather.rs"]
pub mod remote_weather;
#[allow(dead_code)]
#[path = "../../../examples/sentiment_background.rs"]
pub mod sentiment_background;
#[allow(dead_code)]
#[path = "../../../examples/slow_booking.rs"]
pub mod slow_booking;
#[allow(dead_code)]
#[path = "../../../examples/support_triage.rs"]
pub mod support_triage;
#[allow(dead_code)]
#[path = "../../../examples/text_chat.rs"]
pub mod text_chat;

/// The weather crew of the `voice_agent` example, as `sentiment_background` builds on it (one
/// copy, so the types the tests pass between the two are the same).
pub use sentiment_background::voice_agent;

//! crewline's example crews as a library: each module is one crew a user would copy, with its
//! tools, its prompt and the scripted model it runs on offline.
//!
//! The `cargo run --example NAME` programs in the repository's `examples/` folder serve these
//! crews; `crewline demo` runs [`voice_agent`]'s weather crew; the repository's tests drive
//! every crew through a real server. So what an example shows is what is tested.
//!
//! | module | the crew |
//! | --- | --- |
//! | [`voice_agent`] | the weather agent: a filler while the slow lookups run, parallel tool calls |
//! | [`sentiment_background`] | the weather agent behind a background node that scores sentiment and escalates |
//! | [`call_control`] | a support agent whose tools end and transfer the call |
//! | [`collections_router`] | intake, verify and resolve on the deterministic router |
//! | [`bank_support`] | balances and transfers that run only after the caller's yes |
//! | [`text_chat`] | a web shop's chat assistant answering in markdown |
//! | [`remote_weather`] | a crew whose `get_weather` runs in a client's process |
//!
//! [`model`] picks the model a crew runs on (OpenAI with `OPENAI_API_KEY`, else the crew's
//! scripted one) and [`args`] holds the command-line pieces every example shares.
//!
//! ```
//! use std::time::Duration;
//!
//! use crewline_examples::{model::ModelChoice, voice_agent};
//!
//! let model = voice_agent::model(ModelChoice::Scripted, None, Duration::ZERO)?;
//! let crew = voice_agent::WeatherCrew::new(model.llm, voice_agent::WEATHER_SERVICE_DELAY)?;
//! let _server = crewline_server::CrewServer::new(crew.agent().clone());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

pub mod args;
pub mod bank_support;
pub mod call_control;
pub mod collections_router;
pub mod model;
pub mod remote_weather;
pub mod sentiment_background;
pub mod text_chat;
pub mod voice_agent;

//! Test doubles and instruments for crewline crews, in one place.
//!
//! - [`conversation`]: scripted conversations against a crew ([`TestCrew`], [`TestCall`]),
//!   served on a socket or run in process, with assertions on each turn ([`TurnRecord`]): how
//!   a crew author tests a crew.
//! - [`mock_llm`]: an OpenAI-compatible mock model served over HTTP ([`MockLlm`]), scripted
//!   per request, with fault modes (HTTP errors, stalls, cut streams) for client tests.
//! - [`platform`]: a platform client ([`PlatformClient`]) that plays the voice platform's part
//!   against a crew over a real WebSocket, or in process.
//! - the load generator behind `crewline load` is a crate of its own, `crewline-load`.
//! - [`bank`]: a fake bank over HTTP that counts transfers by idempotency key ([`bank::FakeBank`]).
//! - [`haproxy`]: a real HAProxy in front of test servers, for what a load balancer sees.
//! - [`CapturedLogs`]: the process's log lines in memory, for tests that bound what is logged.
//! - [`ScriptedLlm`]: an in-process model that plays back scripted replies (defined in
//!   `crewline-llm`, because the example crews ship it as their offline model; re-exported
//!   here so every double is found in one crate).
//!
//! [`guide`] (`docs/testing.md`) shows how to test a crew with it.

pub mod bank;
pub mod conversation;
pub mod haproxy;
pub mod logs;
pub mod mock_llm;
pub mod platform;

pub use conversation::{TestCall, TestCrew, TestkitError, ToolCallCheck, TurnRecord};
pub use crewline::llm::{Reply as ScriptedReply, ScriptedLlm};
pub use logs::CapturedLogs;
pub use mock_llm::{MockLlm, RunningMockLlm, Script};
pub use platform::{PlatformClient, PlatformConfig, PlatformError};

/// The guide for crew authors, `docs/testing.md`, whose examples are compiled as doctests.
// A symlink to docs/testing.md inside the crate, so that the packaged crate has it too.
#[doc = include_str!("guide.md")]
pub mod guide {}

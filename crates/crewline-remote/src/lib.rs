//! Remote custom tools for crewline, over a Smooth-style polling task API.
//!
//! The pattern: an agent that needs a tool whose code runs on the client's side emits a
//! `tool_call` event; the client polls for events, runs the tool locally, and posts the
//! result; the agent goes on. Both sides are here:
//!
//! - [`TaskClient`] (client side): registers a [`ToolRegistry`](crewline_tools::ToolRegistry)'s
//!   tools as a task's `custom_tools` with any Smooth-style API (`POST /task`), polls for
//!   `tool_call` events with a cursor (`GET /task/{id}?event_t=`), runs each through the
//!   registry's executor and answers `POST /task/{id}/event` with `{code, output}`: 200 for
//!   a result, 400 for an error the agent can correct, 500 for a failure.
//! - [`TaskApi`] (server side): the same API served by a crew server for its own crews. A
//!   call whose variables carry `task_id` gets a [`RemoteTool`] per custom tool; a call of
//!   one parks until the client answers or the tool's timeout passes (the model reads "not
//!   called" if no poll took the call, else `OutcomeUnknown`: it may have run). A call
//!   attached with its platform call id ([`TaskApi::attach_for`]) holds its task under a
//!   lease of seconds and attaches it again after a reconnect. Long polling (`wait_ms`) delivers events as soon as they exist. State lives
//!   behind [`TaskStore`] ([`MemoryStore`] by default).
//!
//! ```no_run
//! use crewline_remote::{ClientConfig, TaskClient, wire::TaskRequest};
//! use crewline_tools::ToolRegistry;
//!
//! # async fn run(registry: ToolRegistry) -> Result<(), crewline_remote::ClientError> {
//! let client = TaskClient::new(ClientConfig::new("http://127.0.0.1:8080").api_key("secret"))?;
//! let outcome = client.run(TaskRequest::default(), &registry).await?;
//! tracing::info!(answered = outcome.calls_answered, "task finished");
//! # Ok(()) }
//! ```

mod client;
mod server;
#[cfg(any(test, feature = "store-contract"))]
#[doc(hidden)]
pub mod store_contract;
pub mod wire;

pub use client::{
    ApiKey, Backoff, ClientConfig, ClientError, MAX_CONCURRENT_CALLS, MAX_RESPONSE_BYTES,
    TaskClient, TaskOutcome, answer_for, run_tool_call,
};
pub use server::{
    AttachError, Credential, CredentialError, DEFAULT_ATTACH_LEASE, DEFAULT_REATTACH_GRACE,
    DEFAULT_TOOL_TIMEOUT, MAX_OUTPUT_BYTES, MAX_TOOL_TIMEOUT, MAX_WAIT, MemoryStore,
    OutputTooLarge, Polled, Principal, RemoteTool, RemoteTools, SMOOTH_PREFIX, StoreError,
    StoreLimits, TASK_ID_VARIABLE, TaskApi, TaskOutput, TaskSnapshot, TaskStore, WITHDRAW_TIMEOUT,
    Withdrawn, json_len,
};

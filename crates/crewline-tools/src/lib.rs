//! Tools for crewline agents.
//!
//! A [`Tool`] has a name, a description, a JSON Schema for its arguments and an async body. The
//! [`ToolRegistry`] holds an agent's tools, gives the model their OpenAI definitions (with
//! schemas normalised so that strict mode and the common compatible servers accept them), and
//! runs the model's tool calls: every call gets exactly one [`ToolResult`](crewline_core::ToolResult),
//! in call order, and no failure (unknown tool, bad arguments, an error, a panic) ever escapes as
//! anything but an error result the model can read.
//!
//! Every call goes through one [`Executor`] (see [`executor`]): validation, hooks,
//! guardrails, approval, run limits, a result cache, timeouts and cancellation, and a ledger.
//!
//! Most tools are written with `#[function_tool]` from the `crewline` crate.

mod catalog;
mod error;
pub mod executor;
mod exports;
mod registry;
mod schema;
mod tool;

#[doc(hidden)]
#[path = "macro_support.rs"]
pub mod __private;

pub use catalog::is_valid_tool_name;
pub use error::RegistryError;
pub use executor::{
    BackgroundRecord, CallContext, CutShort, DEFAULT_MAX_RESULT_BYTES, DEFAULT_RETRY_WINDOW,
    DetachedTasks, Executor, ExecutorBuilder, INTERRUPTED_MESSAGE, IdempotencyKey, PANIC_MESSAGE,
    Progress, RunSyncError, SessionScope, ToolCallError, ToolNotice, ToolNotices, ToolRun,
    run_sync, validation::CallArguments,
};
pub use exports::{ExportError, Exports, NameRules, PYTHON_KEYWORDS, Target};
pub use registry::{DEFAULT_MAX_CONCURRENCY, ExecuteOptions, ToolRegistry};
pub use schema::{normalize_schema, schema_for};
pub use tool::{Tool, ToolError, ToolPolicy, ToolProvider};

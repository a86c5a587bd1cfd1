//! The shared vocabulary of crewline.
//!
//! Every other crewline crate speaks in these types: chat [`Message`]s in the OpenAI shape, the
//! [`ToolCall`]s a model asks for, the [`ToolResult`]s that answer them, and the conversation
//! [`Context`] an agent keeps across turns.
//!
//! ```
//! use crewline_core::{Context, Message, ToolCall, ToolResult};
//!
//! let mut context = Context::with_system("You are a helpful voice agent.");
//! context.add(Message::user("What's the weather in Paris?"));
//! let call = ToolCall::new("call_1", "get_weather", r#"{"location":"Paris"}"#);
//! context.add(Message::assistant_with_tools("", vec![call.clone()]));
//! context.add(ToolResult::ok(&call, "18°C, cloudy").to_message());
//! assert_eq!(context.len(), 4);
//! ```

mod context;
mod definition;
mod error;
mod excerpt;
mod json_len;
mod message;
mod panic;
mod tool_call;

pub use context::{
    ByteEstimate, Context, ContextLimits, ESTIMATE_BYTES_PER_TOKEN, MESSAGE_OVERHEAD_TOKENS,
    TokenCounter,
};
pub use definition::{OpenAiTool, ToolDefinition};
pub use error::{CoreError, ErrorChain, ErrorDetail, ToolErrorKind, error_chain};
pub use excerpt::{Excerpt, LOG_EXCERPT_BYTES, MAX_ID_BYTES, excerpt, id_excerpt, prefix};
pub use json_len::{json_len, json_len_within};
pub use message::{Message, Role};
pub use panic::panic_message;
pub use tool_call::{ToolCall, ToolFailure, ToolResult};

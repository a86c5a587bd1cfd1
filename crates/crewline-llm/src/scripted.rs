//! A deterministic, offline chat model.
// SKELETON: the helper owning this file replaces the bodies.

use std::{sync::Arc, time::Duration};

use async_trait::async_trait;
use serde_json::Value;

use crate::{ChatRequest, LlmClient, LlmError, LlmStream};

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Stream this text in chunks.
    Text(String),
    /// Optionally say `text`, then call these tools (name, arguments).
    ToolCalls {
        /// Text spoken before the calls (may be empty).
        text: String,
        /// The calls, as (tool name, arguments).
        calls: Vec<(String, Value)>,
    },
    /// Fail before the first byte with this error.
    Fail(LlmError),
    /// Stream this text, then break off with [`LlmError::StreamCut`].
    CutAfter(String),
}

type Responder = dyn Fn(&ChatRequest) -> Reply + Send + Sync;

/// A deterministic, offline model: plays a script of [`Reply`]s, or answers with a function
/// of the request.
#[derive(Clone)]
pub struct ScriptedLlm {
    _responder: Arc<Responder>,
    _chunk_delay: Duration,
}

#[async_trait]
impl LlmClient for ScriptedLlm {
    async fn stream_chat(&self, _request: ChatRequest) -> Result<LlmStream, LlmError> {
        todo!()
    }
}

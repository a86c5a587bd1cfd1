//! The OpenAI-compatible streaming client.
// SKELETON: the helper owning this file replaces the bodies.

use async_trait::async_trait;

use crate::{ChatRequest, LlmClient, LlmError, LlmStream};

/// A client for OpenAI and OpenAI-compatible servers.
#[derive(Debug, Clone)]
pub struct OpenAiClient {}

/// Settings for an [`OpenAiClient`].
#[derive(Debug, Clone, Default)]
pub struct OpenAiClientBuilder {}

#[async_trait]
impl LlmClient for OpenAiClient {
    async fn stream_chat(&self, _request: ChatRequest) -> Result<LlmStream, LlmError> {
        todo!()
    }
}

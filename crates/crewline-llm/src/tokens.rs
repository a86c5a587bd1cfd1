//! [`TiktokenCounter`]: a context's tokens counted as OpenAI models count them.

use crewline_core::TokenCounter;
use tiktoken_rs::{CoreBPE, tokenizer::Tokenizer};

/// Counts tokens by an OpenAI tokenizer: `o200k_base` (gpt-4o, gpt-4.1, the o-series, gpt-5)
/// or `cl100k_base` (gpt-4, gpt-3.5), as the model's name says.
///
/// The tables load once per process, on the first counter of their kind, and are shared by
/// every call after: build the counter when the crew is built (loading takes a moment and
/// blocks), never on a turn.
///
/// ```
/// use crewline_core::TokenCounter;
/// use crewline_llm::TiktokenCounter;
///
/// let counter = TiktokenCounter::for_model("gpt-4o-mini").expect("an OpenAI model");
/// assert_eq!(counter.name(), "o200k_base");
/// assert_eq!(counter.count("Hello, world!"), 4);
/// assert!(TiktokenCounter::for_model("llama-3.1-8b").is_none());
/// ```
#[derive(Clone, Copy)]
pub struct TiktokenCounter {
    bpe: &'static CoreBPE,
    name: &'static str,
}

impl std::fmt::Debug for TiktokenCounter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TiktokenCounter")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl TiktokenCounter {
    /// The counter for `model` (an OpenAI model name, a fine-tune's `ft:` name included), its
    /// tables loaded; `None` for a model whose tokenizer is not one of these two.
    pub fn for_model(model: &str) -> Option<Self> {
        match tiktoken_rs::tokenizer::get_tokenizer(model)? {
            Tokenizer::O200kBase => Some(Self::o200k()),
            Tokenizer::Cl100kBase => Some(Self::cl100k()),
            _ => None,
        }
    }

    /// `o200k_base`, its tables loaded.
    pub fn o200k() -> Self {
        Self {
            bpe: tiktoken_rs::o200k_base_singleton(),
            name: "o200k_base",
        }
    }

    /// `cl100k_base`, its tables loaded.
    pub fn cl100k() -> Self {
        Self {
            bpe: tiktoken_rs::cl100k_base_singleton(),
            name: "cl100k_base",
        }
    }
}

impl TokenCounter for TiktokenCounter {
    fn count(&self, text: &str) -> usize {
        // Ordinary text: a caller saying "<|endoftext|>" is words, not a special token.
        self.bpe.encode_ordinary(text).len()
    }

    fn name(&self) -> &str {
        self.name
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crewline_core::{ByteEstimate, Context, MESSAGE_OVERHEAD_TOKENS, Message};
    use std::sync::Arc;

    const SAID: &str = "Could you tell me whether the hotel has parking, and what breakfast costs \
                        for two people on the 14th?";

    #[test]
    fn openai_models_count_by_their_tokenizer_and_the_estimate_is_near() {
        let o200k = TiktokenCounter::for_model("gpt-4o").map(|c| c.count(SAID));
        let cl100k = TiktokenCounter::for_model("gpt-3.5-turbo").map(|c| c.count(SAID));
        assert_eq!(o200k, Some(23));
        assert_eq!(cl100k, Some(23));
        assert_eq!(
            TiktokenCounter::for_model("gpt-5-mini").map(|c| c.name().to_owned()),
            Some("o200k_base".to_owned())
        );
        // 101 bytes at 4 a token: 26, three more than the tokenizers.
        assert_eq!(ByteEstimate.count(SAID), 26);
    }

    #[test]
    fn a_context_counts_each_message_by_the_tokenizer() {
        let context = Context::from(vec![Message::user(SAID)])
            .with_token_counter(Arc::new(TiktokenCounter::o200k()));
        assert_eq!(context.tokens(), 23 + MESSAGE_OVERHEAD_TOKENS);
    }
}

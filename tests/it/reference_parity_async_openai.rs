//! The recorded reference scenarios (see `reference_parity.rs`) with the crews on
//! `AsyncOpenAiClient` instead of the default client: the same frames, outcomes and LLM
//! request bodies, so a crew behaves the same on either client.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

use crate::parity;

/// Declares one test per scenario, run on the async-openai client.
macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                parity::check_on(stringify!($name), parity::crews::mock_async_openai_client).await;
            }
        )*
    };
}

with_scenarios!(scenarios);

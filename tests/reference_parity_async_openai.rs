//! The recorded reference scenarios (see `reference_parity.rs`) with the crews on
//! `AsyncOpenAiClient` instead of the default client: the same frames, outcomes and LLM
//! request bodies, so a crew behaves the same on either client.

// Test code: a failed unwrap is a failed test.
#![allow(clippy::unwrap_used)]

mod parity;

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

scenarios!(
    background_error,
    bad_frame_no_type,
    bad_frame_not_json,
    bad_frame_text,
    bad_frame_unknown_type,
    bad_frame_wrong_field_type,
    bad_frames,
    disconnect_mid_generation,
    end_call,
    frame_extra_fields,
    handshake,
    handshake_invalid_init,
    handshake_timeout,
    handshake_wrong_first_frame,
    http_endpoints,
    interrupt_mid_stream,
    llm_error_500,
    llm_error_mid_stream,
    text_turn,
    tool_errors,
    tool_turn,
    transfer_call,
    two_tools,
    two_tools_sequential,
);

//! The text chat example driven through the real server by the platform client in a `chat`
//! conversation: markdown replies, no filler while the tool runs, and voice calls refused.

use crate::common;

use std::sync::Arc;

use crewline::{SessionSetup, llm::LlmClient, protocol::ConversationType};
use crewline_examples::text_chat as chat;
use crewline_server::CrewServer;
use crewline_testkit::platform::{
    CrewFrame, PlatformClient, PlatformConfig, PlatformError, ToolOutcome,
};
use serde_json::json;

use common::say;

/// Serves the chat crew on 127.0.0.1 (port 0); returns its WebSocket URL.
async fn serve() -> String {
    let llm: Arc<dyn LlmClient> = Arc::new(chat::scripted_chat_model());
    let server = CrewServer::new(move |setup: SessionSetup| {
        let crew = chat::chat_crew(&setup, llm.clone());
        async move { crew }
    });
    common::serve(server).await
}

/// Connects to `url` as a `kind` conversation; the handshake's outcome is returned.
async fn connect(url: &str, kind: ConversationType) -> Result<PlatformClient, PlatformError> {
    let mut config = PlatformConfig::new(url);
    config.conversation_type = kind;
    common::connect_with(config).await
}

#[tokio::test]
async fn a_chat_gets_markdown_answers_and_no_filler_while_the_tool_runs() {
    let url = serve().await;
    let mut client = connect(&url, ConversationType::Chat)
        .await
        .expect("a chat is served");

    let hello = say(&mut client, "Hi!").await;
    assert!(hello.text.contains("**order number**"), "{}", hello.text);

    let order = say(&mut client, "Where is my order #1042?").await;
    assert_eq!(order.tool_events(), ["tool_call_start", "tool_call_end"]);
    assert_eq!(order.tools[0].name, "order_status");
    assert_eq!(order.tools[0].arguments, json!({"order_id": "1042"}));
    assert!(matches!(
        &order.tools[0].outcome,
        ToolOutcome::Ok(result) if result["status"] == "shipped"
    ));
    // Nothing is said until the order is known: the text is only the answer.
    let first_chunk = order
        .frames
        .iter()
        .position(|f| matches!(f.frame, CrewFrame::Chunk { .. }))
        .expect("an answer");
    let tool_end = order
        .frames
        .iter()
        .position(|f| matches!(f.frame, CrewFrame::ToolEnd(_)))
        .expect("the lookup ended");
    assert!(tool_end < first_chunk, "no filler before the lookup ended");
    assert_eq!(
        order.text,
        "**Order 1042** is shipped.\n\n\
         - 1 × Trail runner shoes\n\
         - 2 × Merino socks\n\n\
         Expected delivery: **Friday**. Details are on \
         [your order page](https://shop.example.com/orders/1042)."
    );
    assert!(order.chunks > 1, "the answer streams in pieces");
    assert!(order.errors.is_empty());
}

#[tokio::test]
async fn an_unknown_order_is_explained_not_guessed() {
    let url = serve().await;
    let mut client = connect(&url, ConversationType::Chat)
        .await
        .expect("a chat is served");

    let summary = say(&mut client, "Status of order 9999 please").await;

    assert_eq!(
        summary.tool_events(),
        ["tool_call_start", "tool_call_error"]
    );
    assert!(
        summary
            .text
            .starts_with("Sorry, I couldn't find that order. There is no order 9999"),
        "{}",
        summary.text
    );
}

#[tokio::test]
async fn a_voice_call_is_refused_with_a_reason() {
    let url = serve().await;

    for kind in [
        ConversationType::TelephonyInbound,
        ConversationType::Webcall,
    ] {
        let refused = connect(&url, kind).await;
        match refused {
            Err(PlatformError::Rejected { message }) => {
                assert!(message.contains("answers text chats"), "{message}");
            }
            other => panic!("a {kind:?} call was not refused: {other:?}"),
        }
    }
    // The server is still there for chats.
    assert!(connect(&url, ConversationType::Chat).await.is_ok());
}

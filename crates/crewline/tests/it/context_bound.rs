//! A call's conversation stays bounded: transcript updates flooding in between requests do
//! not grow the context (and the model's prompt) without limit, and what the model is sent
//! stays a valid conversation.

use crate::common;

use crewline::{
    ToolLoop,
    agent::LoopAgent,
    llm::{Reply, ScriptedLlm},
    protocol::EventBody,
    router::{DeterministicRouter, SubAgent},
    tool::ToolRegistry,
    types::{ContextLimits, Message},
};
use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
};

use crewline::{
    Session,
    llm::ChatRequest,
    prelude::*,
    protocol::{
        ConversationType, LlmRequest, SessionContext, SystemInit, TranscriptRole, TranscriptUpdate,
    },
};
use serde_json::{Map, json};
use tokio::sync::mpsc;

const PROMPT: &str = "You are a test agent.";

struct Weather;

#[tools]
impl Weather {
    /// Get the weather.
    ///
    /// # Arguments
    /// * `location` - A city
    #[function_tool]
    async fn get_weather(&self, location: String) -> String {
        format!("Sunny in {location}")
    }
}

/// Every tool message answers a call of an earlier assistant message.
fn no_orphaned_tool_results(messages: &[Message]) -> bool {
    let mut calls = HashSet::new();
    messages.iter().all(|message| {
        calls.extend(message.tool_calls().iter().map(|call| call.id.clone()));
        match message {
            Message::Tool { tool_call_id, .. } => calls.contains(tool_call_id),
            _ => true,
        }
    })
}

/// The test model: records every request, calls the weather tool when asked.
fn model(seen: Arc<Mutex<Vec<Vec<Message>>>>) -> Arc<ScriptedLlm> {
    Arc::new(ScriptedLlm::from_fn(move |request: &ChatRequest| {
        seen.lock()
            .expect("not poisoned")
            .push(request.messages.to_vec());
        match request.messages.last() {
            Some(Message::Tool { content, .. }) => Reply::text(format!("Tool said: {content}")),
            Some(Message::User { content }) if content == "weather" => {
                Reply::tool_call("get_weather", json!({"location": "Paris"}))
            }
            _ => Reply::text("Noted."),
        }
    }))
}

async fn start(node: OutputNode) -> common::Line {
    let (outbound, frames) = mpsc::channel(4096);
    let init = SystemInit {
        version: "1.0".into(),
        session_context: SessionContext {
            initial_variables: Map::new(),
            conversation_type: ConversationType::Webcall,
            caller: None,
        },
        output_agent_settings: None,
    };
    let setup = SessionSetup::new(init, outbound);
    let mut crew = Crew::new();
    crew.add_node(node);
    let session = Session::start(crew, setup).await.expect("crew starts");
    common::Line { session, frames }
}

/// `count` transcript updates, user and assistant in turn, then a request.
async fn flood(line: &mut common::Line, tag: &str, count: usize) {
    for i in 0..count {
        let role = if i % 2 == 0 {
            TranscriptRole::User
        } else {
            TranscriptRole::Assistant
        };
        line.send(EventBody::TranscriptUpdate(TranscriptUpdate {
            role,
            content: format!("{tag} line {i}"),
        }));
    }
    line.send(EventBody::LlmRequest(LlmRequest::default()));
    line.until("agent.llm.response.end").await;
}

#[tokio::test]
async fn a_flood_of_transcripts_keeps_the_prompt_bounded_and_valid() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut registry = ToolRegistry::new();
    registry
        .discover(&Arc::new(Weather))
        .expect("tools register");
    let agent = LoopAgent::new(
        PROMPT,
        ToolLoop::new(model(seen.clone()), Arc::new(registry)),
    );
    let mut line = start(OutputNode::new("agent", agent)).await;
    line.user_turn("weather");
    line.until("agent.llm.response.end").await;
    // 1 200 transcript updates, more than the default bound of 1 000 messages, in batches
    // the session's inbox takes, each followed by a request.
    for batch in 0..6 {
        flood(&mut line, &format!("batch {batch}"), 200).await;
    }
    // A tool call made now keeps its result in the next request.
    line.user_turn("weather");
    line.until("agent.llm.response.end").await;

    let seen = seen.lock().expect("not poisoned");
    let bound = ContextLimits::default().max_messages;
    for messages in seen.iter() {
        assert!(messages.len() <= bound, "{} messages", messages.len());
        assert_eq!(messages[0], Message::system(PROMPT), "the prompt stays");
        assert!(
            no_orphaned_tool_results(messages),
            "no tool result without its call"
        );
    }
    let last = seen.last().expect("requests");
    assert!(
        matches!(&last[last.len() - 2..], [assistant, Message::Tool { .. }]
            if assistant.tool_calls().len() == 1),
        "the recent tool call is sent with its result"
    );
    // The first tool call was dropped with its result, not one without the other.
    assert!(!last.iter().any(|m| m.text() == Some("batch 0 line 0")));
}

#[tokio::test]
async fn a_routers_bound_holds_across_its_transitions() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let router = DeterministicRouter::builder("first", model(seen.clone()))
        .sub_agent(SubAgent::new("first", "first: greet."))
        .sub_agent(SubAgent::new("second", "second: help."))
        .add_default("first", "second")
        .context_limits(ContextLimits {
            max_messages: 8,
            max_bytes: usize::MAX,
            ..ContextLimits::default()
        })
        .build()
        .expect("the router builds");
    let mut line = start(OutputNode::new("router", router)).await;
    line.user_turn("hello");
    line.until("agent.llm.response.end").await;
    // The turn moved the router to `second`, which rebuilt the context with its prompt.
    flood(&mut line, "after", 30).await;

    let seen = seen.lock().expect("not poisoned");
    let last = seen.last().expect("requests");
    assert_eq!(last[0], Message::system("second: help."));
    assert!(
        last.len() <= 8,
        "{} messages after the transition",
        last.len()
    );
}

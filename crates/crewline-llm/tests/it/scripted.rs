//! Tests of the scripted model: it must stream like a real OpenAI model, deterministically.
#![allow(clippy::unwrap_used)]

use std::{collections::HashSet, time::Duration};

use crewline_core::{Message, ToolCall};
use crewline_llm::{
    ChatRequest, FinishReason, LlmClient, LlmError, Reply, ScriptError, ScriptedLlm, StreamItem,
    ToolChoice, collect,
};
use futures::StreamExt;
use serde_json::json;
use tokio::time::Instant;

fn ask(text: &str) -> ChatRequest {
    ChatRequest::new(vec![Message::user(text)])
}

/// Every item of one streamed answer, errors included.
async fn items(llm: &ScriptedLlm, request: ChatRequest) -> Vec<Result<StreamItem, LlmError>> {
    llm.stream_chat(request).await.unwrap().collect().await
}

fn texts(items: &[Result<StreamItem, LlmError>]) -> Vec<String> {
    items
        .iter()
        .filter_map(|item| match item {
            Ok(StreamItem::Text(text)) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn text_streams_word_by_word_and_reassembles_exactly() {
    let llm = ScriptedLlm::new([Reply::text("Hello there friend")]);
    let items = items(&llm, ask("hi")).await;
    assert_eq!(texts(&items), ["Hello ", "there ", "friend"]);
    let n = items.len();
    assert!(matches!(
        items[n - 2],
        Ok(StreamItem::Finish(FinishReason::Stop))
    ));
    assert!(matches!(items[n - 1], Ok(StreamItem::Usage(_))));
}

#[tokio::test]
async fn odd_whitespace_and_non_ascii_survive_chunking() {
    let text = "  Grüße,\n\twie  geht's? 東京 🌧 ";
    let llm = ScriptedLlm::new([Reply::text(text), Reply::text(text)]);
    let words = texts(&items(&llm, ask("a")).await);
    assert!(words.len() > 3, "{words:?}");
    assert_eq!(words.concat(), text);

    let llm = llm.with_chunk_chars(3);
    let pieces = texts(&items(&llm, ask("b")).await);
    assert!(pieces.iter().all(|p| p.chars().count() <= 3), "{pieces:?}");
    assert_eq!(pieces.concat(), text);
}

#[tokio::test]
async fn collect_gives_the_whole_answer_with_usage() {
    let llm = ScriptedLlm::new([Reply::text("It is sunny in Paris.")]);
    let response = llm.chat(ask("Weather in Paris?")).await.unwrap();
    assert_eq!(response.content, "It is sunny in Paris.");
    assert!(response.tool_calls.is_empty());
    assert_eq!(response.finish_reason, Some(FinishReason::Stop));
    let usage = response.usage.unwrap();
    assert!(usage.prompt_tokens > 0 && usage.completion_tokens > 0);
    assert_eq!(
        usage.total_tokens,
        usage.prompt_tokens + usage.completion_tokens
    );

    // The same script gives the same usage: nothing depends on time or randomness.
    let again = ScriptedLlm::new([Reply::text("It is sunny in Paris.")]);
    let stream = again.stream_chat(ask("Weather in Paris?")).await.unwrap();
    assert_eq!(collect(stream).await.unwrap().usage, Some(usage));
}

#[tokio::test]
async fn two_tool_calls_assemble_with_unique_ids_after_the_text() {
    let llm = ScriptedLlm::new([Reply::tool_calls([
        (
            "get_weather",
            json!({"location": "Zürich", "unit": "celsius"}),
        ),
        ("get_time", json!({"tz": "Europe/Zurich"})),
    ])
    .with_text("Let me check.")]);
    let items = items(&llm, ask("weather and time?")).await;
    assert_eq!(texts(&items).concat(), "Let me check.");
    let calls = items
        .iter()
        .find_map(|item| match item {
            Ok(StreamItem::ToolCalls(calls)) => Some(calls.clone()),
            _ => None,
        })
        .unwrap();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].name, "get_weather");
    assert_eq!(
        calls[0].parse_arguments().unwrap(),
        json!({"location": "Zürich", "unit": "celsius"})
    );
    assert_eq!(calls[1].name, "get_time");
    assert_eq!(
        calls[1].parse_arguments().unwrap(),
        json!({"tz": "Europe/Zurich"})
    );
    assert_ne!(calls[0].id, calls[1].id);
    assert!(calls.iter().all(|c| c.id.starts_with("call_")));
    assert!(matches!(
        items[items.len() - 2],
        Ok(StreamItem::Finish(FinishReason::ToolCalls))
    ));
}

#[tokio::test]
async fn tool_call_ids_are_unique_across_turns_and_deterministic() {
    let script = || {
        [
            Reply::tool_call("f", json!({})),
            Reply::tool_call("f", json!(null)),
        ]
    };
    let run = |llm: ScriptedLlm| async move {
        let mut ids = Vec::new();
        for _ in 0..2 {
            ids.extend(llm.chat(ask("go")).await.unwrap().tool_calls);
        }
        ids
    };
    let first = run(ScriptedLlm::new(script())).await;
    let second = run(ScriptedLlm::new(script())).await;
    assert_eq!(first, second);
    let ids: HashSet<_> = first.iter().map(|c| c.id.clone()).collect();
    assert_eq!(ids.len(), 2);
    assert!(first.iter().all(|c| c.arguments == "{}"), "{first:?}");
}

#[tokio::test]
async fn from_fn_reacts_to_tool_results() {
    let llm =
        ScriptedLlm::from_fn(
            |request| match ScriptedLlm::last_tool_results(request).as_slice() {
                [] => Reply::tool_call("get_weather", json!({"location": "Paris"})),
                results => Reply::text(format!("The weather: {}.", results.join(" and "))),
            },
        );
    let first = llm.chat(ask("Weather in Paris?")).await.unwrap();
    let call: ToolCall = first.tool_calls[0].clone();
    assert_eq!(call.name, "get_weather");

    let follow_up = ChatRequest::new(vec![
        Message::user("Weather in Paris?"),
        Message::assistant_with_tools("", vec![call.clone()]),
        Message::tool(call.id.clone(), "18°C, cloudy"),
    ]);
    let second = llm.chat(follow_up).await.unwrap();
    assert_eq!(second.content, "The weather: 18°C, cloudy.");
    assert_eq!(second.finish_reason, Some(FinishReason::Stop));
    assert_eq!(llm.requests().len(), 2);
    assert_eq!(llm.remaining(), None);
}

#[test]
fn last_tool_results_reads_only_the_latest_round() {
    let request = ChatRequest::new(vec![
        Message::tool("old", "stale"),
        Message::assistant("ok"),
        Message::tool("a", "one"),
        Message::tool("b", "two"),
    ]);
    assert_eq!(ScriptedLlm::last_tool_results(&request), ["one", "two"]);
    assert!(ScriptedLlm::last_tool_results(&ask("hi")).is_empty());
}

#[tokio::test]
async fn running_out_of_script_is_a_clear_error() {
    let llm = ScriptedLlm::new([Reply::text("one"), Reply::text("two")]);
    assert_eq!(llm.remaining(), Some(2));
    llm.chat(ask("1")).await.unwrap();
    llm.chat(ask("2")).await.unwrap();
    assert_eq!(llm.remaining(), Some(0));
    let err = llm.stream_chat(ask("3")).await.err().unwrap();
    assert!(matches!(&err, LlmError::Other(_)), "{err:?}");
    assert!(
        err.to_string().contains("exhausted after 2 replies"),
        "{err}"
    );
    // The scripted model's own error is the cause, for code that tells it apart.
    let cause = std::iter::successors(std::error::Error::source(&err), |e| e.source())
        .find_map(|e| e.downcast_ref::<ScriptError>());
    assert_eq!(cause, Some(&ScriptError::Exhausted { played: 2 }));
    // The unanswered request is still logged, for assertions.
    assert_eq!(llm.requests().len(), 3);
}

#[tokio::test]
async fn tool_choice_none_gets_words_instead_of_calls() {
    let llm = ScriptedLlm::new([
        Reply::tool_call("f", json!({})).with_text("Sorry, one moment."),
        Reply::tool_call("f", json!({})),
    ]);
    let no_tools = || ask("go").with_tool_choice(ToolChoice::None);

    let with_text = llm.chat(no_tools()).await.unwrap();
    assert_eq!(with_text.content, "Sorry, one moment.");
    assert!(with_text.tool_calls.is_empty());
    assert_eq!(with_text.finish_reason, Some(FinishReason::Stop));

    let without_text = llm.chat(no_tools()).await.unwrap();
    assert!(!without_text.content.is_empty());
    assert!(without_text.tool_calls.is_empty());
    assert_eq!(without_text.finish_reason, Some(FinishReason::Stop));
}

#[tokio::test]
async fn fail_errors_before_the_first_byte() {
    let llm = ScriptedLlm::new([
        Reply::Fail(LlmError::Api {
            status: Some(503),
            message: "overloaded".into(),
            retry_after: None,
        }),
        Reply::text("recovered"),
    ]);
    let err = llm.stream_chat(ask("hi")).await.err().unwrap();
    assert!(matches!(
        err,
        LlmError::Api {
            status: Some(503),
            ..
        }
    ));
    assert_eq!(llm.chat(ask("again")).await.unwrap().content, "recovered");
}

#[tokio::test]
async fn cut_after_streams_the_text_then_breaks_off() {
    let llm = ScriptedLlm::new([Reply::CutAfter("I was saying".into())]);
    let items = items(&llm, ask("hi")).await;
    assert_eq!(texts(&items).concat(), "I was saying");
    assert!(matches!(items.last(), Some(Err(LlmError::StreamCut(_)))));
    assert!(
        !items.iter().any(|i| matches!(i, Ok(StreamItem::Finish(_)))),
        "a cut stream has no finish: {items:?}"
    );
    let llm = ScriptedLlm::new([Reply::CutAfter("half".into())]);
    let err = llm.chat(ask("hi")).await.unwrap_err();
    assert!(matches!(err, LlmError::StreamCut(_)));
}

#[tokio::test(start_paused = true)]
async fn chunk_delay_paces_every_item() {
    let delay = Duration::from_millis(40);
    let llm = ScriptedLlm::new([Reply::text("one two three")]).with_chunk_delay(delay);
    let start = Instant::now();
    let mut stream = llm.stream_chat(ask("count")).await.unwrap();
    let mut arrivals = Vec::new();
    while let Some(item) = stream.next().await {
        item.unwrap();
        arrivals.push(start.elapsed());
    }
    // 3 words + finish + usage, each after one more delay.
    let expected: Vec<_> = (1..=5).map(|n| delay * n).collect();
    assert_eq!(arrivals, expected);
}

#[tokio::test(start_paused = true)]
async fn no_delay_by_default() {
    let llm = ScriptedLlm::new([Reply::text("one two three")]);
    let start = Instant::now();
    llm.chat(ask("count")).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn dropping_the_stream_mid_way_leaves_the_model_ready() {
    let llm = ScriptedLlm::new([Reply::text("a b c d e f"), Reply::text("next")])
        .with_chunk_delay(Duration::from_secs(1));
    let mut stream = llm.stream_chat(ask("go")).await.unwrap();
    assert_eq!(
        stream.next().await.unwrap().unwrap(),
        StreamItem::Text("a ".into())
    );
    drop(stream);
    // Nothing keeps running in the background: the model answers the next request at once.
    let start = Instant::now();
    let fast = llm.clone().with_chunk_delay(Duration::ZERO);
    assert_eq!(fast.chat(ask("again")).await.unwrap().content, "next");
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test]
async fn clones_share_the_script_and_the_request_log() {
    let llm = ScriptedLlm::new([Reply::text("one"), Reply::text("two")]);
    let clone = llm.clone();
    assert_eq!(clone.chat(ask("first")).await.unwrap().content, "one");
    assert_eq!(llm.chat(ask("second")).await.unwrap().content, "two");
    let asked: Vec<_> = llm
        .requests()
        .iter()
        .map(|r| r.messages[0].text().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(asked, ["first", "second"]);
    assert_eq!(clone.remaining(), Some(0));
    let debug = format!("{llm:?}");
    assert!(
        debug.contains("ScriptedLlm") && debug.contains("remaining: 0"),
        "{debug}"
    );
}

//! A local model that writes its tool call as text in the answer's content (Hermes'
//! `<tool_call>` tags, as Qwen does through a server without a tool parser): with
//! `detect_text_tool_calls` the agent runs the tool and nothing of the call is spoken; without
//! it the text is speech, as before.

#![allow(clippy::unwrap_used)]

use crate::common;

use common::bounded;

use crewline::{
    Agent,
    llm::{OpenAiClient, TextToolCallFormat},
    prelude::*,
};
use crewline_testkit::{RunningMockLlm, TestCrew, mock_llm::MockLlm, mock_llm::Script};
use serde_json::json;

struct Weather;

#[tools]
impl Weather {
    /// Get the current weather for a city.
    #[function_tool]
    async fn get_weather(&self, city: String) -> Result<String, ToolError> {
        Ok(format!("18°C and sunny in {city}"))
    }
}

/// A model answering the first request of a turn with a Hermes call in its content, cut
/// inside the tag, and the request after the tool's result with speech.
async fn local_model() -> RunningMockLlm {
    let script = Script::from_json(&json!({"replies": [
        {"when": {"last_role": "tool"}, "reply": {"content_chunks": ["It is 18°C ", "in Paris."]}},
        {"reply": {"content_chunks": [
            "<tool",
            "_call>\n{\"name\": \"get_weather\", ",
            "\"arguments\": {\"city\": \"Pa",
            "ris\"}}\n</tool_",
            "call>",
        ]}},
    ]}))
    .unwrap();
    MockLlm::new(script)
        .spawn("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap()
}

fn client(mock: &RunningMockLlm) -> OpenAiClient {
    OpenAiClient::builder()
        .model("qwen2.5:7b")
        .api_key("sk-local")
        .base_url(mock.base_url())
        .read_env(false)
        .max_retries(0)
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_call_written_as_text_is_run_and_not_spoken() {
    bounded(async {
        let mock = local_model().await;
        let agent = Agent::builder(client(&mock))
            .tools(Weather)
            .detect_text_tool_calls([TextToolCallFormat::Hermes])
            .build()
            .unwrap();
        let crew = TestCrew::serve(agent).await.unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call.say("What's the weather in Paris?").await.unwrap();
        turn.assert_tools_called(&["get_weather"])
            .assert_no_errors();
        turn.assert_tool_call("get_weather", json!({"city": "Paris"}))
            .succeeded();
        turn.assert_text("It is 18°C in Paris.");

        // The model heard back its call as a call, with the tool's answer under the same id.
        let requests = mock.mock().requests();
        assert_eq!(requests.len(), 2);
        let messages = requests[1].body["messages"].as_array().unwrap();
        let assistant = messages.iter().find(|m| m["role"] == "assistant").unwrap();
        assert_eq!(assistant["tool_calls"][0]["id"], "call_text_0");
        assert_eq!(
            assistant["tool_calls"][0]["function"]["name"],
            "get_weather"
        );
        let said = assistant["content"].as_str().unwrap_or_default();
        assert!(!said.contains("tool_call"), "{assistant}");
        let result = messages.iter().find(|m| m["role"] == "tool").unwrap();
        assert_eq!(result["tool_call_id"], "call_text_0");
        assert!(
            result["content"]
                .as_str()
                .is_some_and(|c: &str| c.contains("18°C")),
            "{result}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_detection_the_text_is_speech() {
    bounded(async {
        let mock = local_model().await;
        let agent = Agent::builder(client(&mock))
            .tools(Weather)
            .build()
            .unwrap();
        let crew = TestCrew::serve(agent).await.unwrap();
        let mut call = crew.call().await.unwrap();

        let turn = call.say("What's the weather in Paris?").await.unwrap();
        turn.assert_no_tool_calls()
            .assert_text_contains("<tool_call>");
        assert_eq!(mock.mock().requests().len(), 1);
    })
    .await;
}

//! A silent caller, through the real server on a paused clock: the agent's nudges after a
//! silence, the goodbye and `agent.end_call` after the last one, what resets the silence, and
//! where it never speaks (over the caller, over a reply, in a chat, without a policy).

#![allow(clippy::unwrap_used)]

use std::time::Duration;

use crewline::{
    idle::{DEFAULT_GOODBYE, DEFAULT_NUDGE, IdlePolicy},
    llm::OpenAiClient,
    prelude::*,
    protocol::{ConversationType, EventBody},
};
use crewline_testkit::{
    MockLlm, PlatformClient, ScriptedLlm, ScriptedReply as Reply, TestCrew,
    mock_llm::Script,
    platform::{CrewFrame, PlatformConfig},
};
use serde_json::{Value, json};
use tokio::time::Instant;

/// The silence of the policies here.
const SILENCE: Duration = Duration::from_secs(10);
/// How much later than its silence something may be said (on the paused clock, only the
/// scripted model's and the sockets' own waits, which are none).
const SLACK: Duration = Duration::from_millis(100);

/// A web call to `crew` of `conversation_type`; the caller has joined.
async fn call(crew: &TestCrew, conversation_type: ConversationType) -> PlatformClient {
    let config = PlatformConfig {
        conversation_type,
        ..crew.config()
    };
    PlatformClient::connect(config).await.unwrap()
}

/// An agent greeting every turn, with `policy` when given.
fn agent(policy: Option<IdlePolicy>) -> Agent {
    let model = ScriptedLlm::from_fn(|_| Reply::text("Hello! How can I help?"));
    let builder = Agent::builder(model).prompt("Be brief.");
    match policy {
        Some(policy) => builder.idle(policy),
        None => builder,
    }
    .build()
    .unwrap()
}

/// A turn of the caller's, to its end; no `agent.speak` may come inside it.
async fn say(client: &mut PlatformClient, words: &str) {
    let summary = client.user_turn(words).unwrap().finish().await.unwrap();
    assert!(summary.ended, "{summary:?}");
    assert!(
        summary.speeches.is_empty(),
        "nothing said over a reply: {summary:?}"
    );
}

/// One out-of-turn frame as a word: `idle:<step>:<nudge>`, `speak:<text>`, `end_call`, or
/// its wire name.
fn word(frame: CrewFrame) -> String {
    match frame {
        CrewFrame::Log { name, payload } if name == "idle" => {
            format!(
                "idle:{}:{}",
                payload["step"].as_str().unwrap(),
                payload["nudge"]
            )
        }
        CrewFrame::Speak { text } => format!("speak:{text}"),
        CrewFrame::EndCall => "end_call".to_owned(),
        other => other.wire_type().to_owned(),
    }
}

/// What the crew says out of turn within `wait`.
async fn heard(client: &mut PlatformClient, wait: Duration) -> Vec<String> {
    let deadline = Instant::now() + wait;
    let mut heard = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Some(frame) = client.recv_idle(left).await.unwrap() else {
            return heard;
        };
        heard.push(word(frame.frame));
    }
}

/// The next thing the crew says out of turn (within a minute) and all that comes with it;
/// and how long the silence before it was, on the paused clock: from `since` (the end of the
/// last thing said), which moves to when this was said.
async fn next_said(client: &mut PlatformClient, since: &mut Instant) -> (Duration, Vec<String>) {
    let first = client
        .recv_idle(Duration::from_secs(60))
        .await
        .unwrap()
        .expect("the crew says something within a minute");
    let silence = first.at.duration_since(*since);
    *since = first.at;
    let mut said = vec![word(first.frame)];
    said.extend(heard(client, Duration::from_millis(1)).await);
    (silence, said)
}

/// Asserts that `silence` is the policy's: not shorter, and not more than the time it
/// takes to say something later.
fn assert_silence(silence: Duration) {
    assert!(
        (SILENCE..SILENCE + SLACK).contains(&silence),
        "a silence of {silence:?}, not {SILENCE:?}"
    );
}

fn nudge(n: u32) -> Vec<String> {
    vec![format!("idle:nudge:{n}"), format!("speak:{DEFAULT_NUDGE}")]
}

#[tokio::test(start_paused = true)]
async fn a_silent_caller_is_nudged_twice_then_told_goodbye_and_the_call_ends() {
    let crew = TestCrew::serve(agent(Some(IdlePolicy::phone_call())))
        .await
        .unwrap();
    let mut client = call(&crew, ConversationType::TelephonyInbound).await;
    say(&mut client, "Hi").await;
    let mut since = Instant::now();

    // Counted from the end of the reply: nothing before the silence, a nudge at its end.
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(2));
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(
        said,
        [
            "idle:goodbye:null".to_owned(),
            format!("speak:{DEFAULT_GOODBYE}"),
            "end_call".to_owned()
        ]
    );
    // The call is over: nothing more is said, and no turn is answered.
    assert_eq!(heard(&mut client, SILENCE * 6).await, Vec::<String>::new());
    client
        .send(EventBody::LlmRequest(Default::default()))
        .unwrap();
    assert_eq!(heard(&mut client, SILENCE).await, Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn caller_speech_resets_the_silence_and_no_nudge_comes_while_the_caller_speaks() {
    let crew = TestCrew::serve(agent(Some(IdlePolicy::phone_call())))
        .await
        .unwrap();
    let mut client = call(&crew, ConversationType::Webcall).await;
    say(&mut client, "Hi").await;

    // The caller starts speaking a moment before the silence ends, and goes on for long.
    let moment = Duration::from_millis(1);
    assert_eq!(
        heard(&mut client, SILENCE - moment).await,
        Vec::<String>::new()
    );
    client.send(EventBody::UserStartedSpeaking).unwrap();
    assert_eq!(heard(&mut client, SILENCE * 5).await, Vec::<String>::new());

    // The silence starts when they stop.
    client.send(EventBody::UserStoppedSpeaking).unwrap();
    let mut since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));

    // A word after the nudge starts the count over: the next nudge is the first again.
    client.send(EventBody::UserStartedSpeaking).unwrap();
    client.send(EventBody::UserStoppedSpeaking).unwrap();
    since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));

    // So does a turn: the silence starts at the end of its reply.
    say(&mut client, "Sorry, I'm here.").await;
    since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));
}

#[tokio::test(start_paused = true)]
async fn no_nudge_comes_while_a_long_reply_streams() {
    // A reply of 12 words, 3 s apart: half a minute of speech.
    let model = ScriptedLlm::from_fn(|_| {
        Reply::text("one two three four five six seven eight nine ten eleven twelve")
    })
    .with_chunk_delay(Duration::from_secs(3));
    let agent = Agent::builder(model)
        .idle(IdlePolicy::phone_call())
        .build()
        .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew, ConversationType::TelephonyOutbound).await;

    say(&mut client, "Tell me a story").await;
    let mut since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));
}

#[tokio::test(start_paused = true)]
async fn after_a_barge_in_the_silence_waits_for_the_caller_to_stop_speaking() {
    let model = ScriptedLlm::from_fn(|_| {
        Reply::text("one two three four five six seven eight nine ten eleven twelve")
    })
    .with_chunk_delay(Duration::from_secs(3));
    let agent = Agent::builder(model)
        .idle(IdlePolicy::phone_call())
        .build()
        .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew, ConversationType::TelephonyInbound).await;

    // The caller barges in on the second word and talks on.
    let mut turn = client.user_turn("Tell me a story").unwrap();
    while let Some(frame) = turn.next().await.unwrap() {
        if matches!(frame.frame, CrewFrame::Chunk { .. }) {
            // The platform's barge-in, without a `started_speaking`: the interrupt alone says
            // the caller speaks.
            turn.send_interrupt().unwrap();
            break;
        }
    }
    let summary = turn.finish().await.unwrap();
    assert!(
        summary.interrupt.is_some() && summary.speeches.is_empty(),
        "{summary:?}"
    );
    assert_eq!(heard(&mut client, SILENCE * 5).await, Vec::<String>::new());

    // The silence starts when they stop.
    client.send(EventBody::UserStoppedSpeaking).unwrap();
    let mut since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, nudge(1));
}

#[tokio::test(start_paused = true)]
async fn a_chat_and_a_crew_without_a_policy_are_never_nudged() {
    let with_policy = TestCrew::serve(agent(Some(IdlePolicy::phone_call())))
        .await
        .unwrap();
    let mut chat = call(&with_policy, ConversationType::Chat).await;
    say(&mut chat, "Hi").await;
    assert_eq!(heard(&mut chat, SILENCE * 10).await, Vec::<String>::new());

    let without = TestCrew::serve(agent(None)).await.unwrap();
    let mut phone = call(&without, ConversationType::TelephonyInbound).await;
    say(&mut phone, "Hi").await;
    assert_eq!(heard(&mut phone, SILENCE * 10).await, Vec::<String>::new());
    phone.send(EventBody::UserStartedSpeaking).unwrap();
    phone.send(EventBody::UserStoppedSpeaking).unwrap();
    assert_eq!(heard(&mut phone, SILENCE * 10).await, Vec::<String>::new());
}

#[tokio::test(start_paused = true)]
async fn a_generated_nudge_is_the_models_words_to_the_instruction_without_tools() {
    // The mock model: an instruction last (the nudge's request) gets the check-in.
    let script = Script::from_json(&json!({"replies": [
        {"when": {"last_role": "system"}, "reply": {"content_chunks": ["Hello? ", "Still with me?"]}},
        {"reply": {"content_chunks": ["Hello! ", "How can I help?"]}},
    ]}))
    .unwrap();
    let mock = MockLlm::new(script).start().await.unwrap();
    let model = OpenAiClient::builder()
        .model("mock-gpt")
        .base_url(mock.base_url())
        .api_key("sk-mock")
        .read_env(false)
        .build()
        .unwrap();
    let policy = IdlePolicy::phone_call()
        .nudges(1)
        .nudge_generated("The caller is quiet. Ask whether they are still there.");
    let agent = Agent::builder(model)
        .prompt("Be brief.")
        .idle(policy)
        .build()
        .unwrap();
    let crew = TestCrew::serve(agent).await.unwrap();
    let mut client = call(&crew, ConversationType::TelephonyInbound).await;
    say(&mut client, "Hi").await;
    let mut since = Instant::now();

    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(said, ["idle:nudge:1", "speak:Hello? Still with me?"]);
    let requests = mock.mock().requests();
    let asked = &requests.last().unwrap().body;
    let messages = asked["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap(),
        &json!({"role": "system", "content": "The caller is quiet. Ask whether they are still there."})
    );
    assert!(
        messages
            .iter()
            .any(|m| m["content"] == "Hello! How can I help?"),
        "the model sees the conversation: {messages:?}"
    );
    assert!(asked.get("tools").is_none_or(Value::is_null), "{asked}");

    // The goodbye, fixed, after the one nudge.
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert_silence(silence);
    assert_eq!(
        said,
        [
            "idle:goodbye:null".to_owned(),
            format!("speak:{DEFAULT_GOODBYE}"),
            "end_call".to_owned()
        ]
    );
}

/// The weather-free agent on the mock model, whose nudge's words take `wording_ms`.
async fn slow_wording_crew(wording_ms: u64) -> (TestCrew, crewline_testkit::RunningMockLlm) {
    let script = Script::from_json(&json!({"replies": [
        {"when": {"last_role": "system"}, "reply": {"content_chunks": ["Still with me?"], "first_byte_delay_ms": wording_ms}},
        {"reply": {"content_chunks": ["Hello!"]}},
    ]}))
    .unwrap();
    let mock = MockLlm::new(script).start().await.unwrap();
    let model = OpenAiClient::builder()
        .model("mock-gpt")
        .base_url(mock.base_url())
        .api_key("sk-mock")
        .read_env(false)
        .build()
        .unwrap();
    let policy = IdlePolicy::phone_call().nudge_generated("Ask whether they are still there.");
    let agent = Agent::builder(model).idle(policy).build().unwrap();
    (TestCrew::serve(agent).await.unwrap(), mock)
}

#[tokio::test(start_paused = true)]
async fn a_nudge_being_worded_when_the_caller_speaks_is_never_said() {
    let (crew, _mock) = slow_wording_crew(3_000).await;
    let mut client = call(&crew, ConversationType::TelephonyInbound).await;
    say(&mut client, "Hi").await;

    // The model is wording the nudge (10 s to 13 s) when the caller speaks.
    assert_eq!(
        heard(&mut client, SILENCE + Duration::from_secs(1)).await,
        Vec::<String>::new()
    );
    client.send(EventBody::UserStartedSpeaking).unwrap();
    assert_eq!(heard(&mut client, SILENCE * 3).await, Vec::<String>::new());

    // After they stop, a new silence, and the model's words once they are ready.
    client.send(EventBody::UserStoppedSpeaking).unwrap();
    let mut since = Instant::now();
    let (silence, said) = next_said(&mut client, &mut since).await;
    let wording = Duration::from_secs(3);
    assert!(
        (SILENCE + wording..SILENCE + wording + SLACK).contains(&silence),
        "{silence:?}"
    );
    assert_eq!(said, ["idle:nudge:1", "speak:Still with me?"]);
}

#[tokio::test(start_paused = true)]
async fn a_model_slower_than_the_silence_gets_the_fixed_nudge_said_instead() {
    let (crew, _mock) = slow_wording_crew(60_000).await;
    let mut client = call(&crew, ConversationType::TelephonyInbound).await;
    say(&mut client, "Hi").await;
    let mut since = Instant::now();
    // The silence, then as long again for the words, which do not come.
    let (silence, said) = next_said(&mut client, &mut since).await;
    assert!(
        (SILENCE * 2..SILENCE * 2 + SLACK).contains(&silence),
        "{silence:?}"
    );
    assert_eq!(said, nudge(1));
}

//! A corpus of provider streams: one SSE transcript per provider and case, each served byte
//! for byte and read by a real client, whose assembled answer (text, tool calls, usage, finish
//! reason, or the error) must match the expected outcome written next to it.
//!
//! Layout: `tests/providers/<provider>/<case>.sse` is the transcript: a header of `#` lines
//! naming its sources, one blank line, then the HTTP body exactly as the provider sends it
//! (CRLF where it uses CRLF; `.gitattributes` keeps git from touching the bytes).
//! `<case>.expected.json` is what a crew must get out of it. See `docs/providers.md`.
//!
//! Each transcript is served three ways, so the parser meets every boundary a network can cut:
//! in one piece; cut inside every multi-byte UTF-8 character, between every CR and its LF, and
//! inside every `data:` line; and one byte per HTTP chunk.
//!
//! The server is a small byte-exact one here rather than the testkit's raw mock: the raw mock
//! frames each event itself (`data: {event}\n\n`, one event per write), so it cannot send CRLF
//! line ends, SSE comments or a cut inside a line or a UTF-8 character.
//!
//! The case list is written once ([`cases!`]); a client is plugged in with one line, as
//! `openai_client` is at the bottom.

use std::path::{Path, PathBuf};

use crewline_core::Message;
use crewline_llm::{ChatRequest, FinishReason, LlmClient, LlmError, OpenAiClient, StreamItem};
use futures::StreamExt;
use serde_json::Value;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpListener,
};

/// Makes the client under test for a server at `base_url` (`http://127.0.0.1:PORT/v1`).
type Factory = fn(&str) -> Box<dyn LlmClient>;

/// Every transcript of the corpus, as `test_name => "provider/case"`; a case the client
/// cannot read yet carries `#[ignore = "why"]` (listed in `docs/providers.md`); a client that
/// reads a case differently has its own `<case>.<client>.expected.json`.
macro_rules! cases {
    ($callback:ident!($($args:tt)*)) => {
        $callback! {$($args)*;
            openai_text => "openai/text",
            openai_tool_call => "openai/tool_call",
            openai_parallel_tool_calls => "openai/parallel_tool_calls",
            openai_error => "openai/error",
            openai_usage => "openai/usage",
            azure_text => "azure/text",
            azure_tool_call => "azure/tool_call",
            azure_parallel_tool_calls => "azure/parallel_tool_calls",
            azure_content_filter => "azure/content_filter",
            azure_usage => "azure/usage",
            groq_text => "groq/text",
            groq_tool_call => "groq/tool_call",
            groq_parallel_tool_calls => "groq/parallel_tool_calls",
            groq_error => "groq/error",
            groq_usage => "groq/usage",
            together_text => "together/text",
            together_tool_call => "together/tool_call",
            together_parallel_tool_calls => "together/parallel_tool_calls",
            together_error => "together/error",
            fireworks_text => "fireworks/text",
            fireworks_tool_call => "fireworks/tool_call",
            fireworks_parallel_tool_calls => "fireworks/parallel_tool_calls",
            fireworks_usage => "fireworks/usage",
            mistral_text => "mistral/text",
            mistral_tool_call => "mistral/tool_call",
            mistral_parallel_tool_calls => "mistral/parallel_tool_calls",
            mistral_tool_call_fragmented => "mistral/tool_call_fragmented",
            deepseek_reasoning => "deepseek/reasoning",
            deepseek_tool_call => "deepseek/tool_call",
            deepseek_parallel_tool_calls => "deepseek/parallel_tool_calls",
            deepseek_keep_alive => "deepseek/keep_alive",
            openrouter_text => "openrouter/text",
            openrouter_tool_call => "openrouter/tool_call",
            openrouter_parallel_tool_calls => "openrouter/parallel_tool_calls",
            openrouter_error => "openrouter/error",
            vllm_reasoning => "vllm/reasoning",
            vllm_tool_call => "vllm/tool_call",
            vllm_parallel_tool_calls => "vllm/parallel_tool_calls",
            vllm_error => "vllm/error",
            vllm_continuous_usage => "vllm/continuous_usage",
            ollama_text => "ollama/text",
            ollama_tool_call => "ollama/tool_call",
            ollama_tool_call_finish_stop => "ollama/tool_call_finish_stop",
            ollama_parallel_tool_calls => "ollama/parallel_tool_calls",
            ollama_error => "ollama/error",
            ollama_usage => "ollama/usage",
            llamacpp_text => "llamacpp/text",
            llamacpp_tool_call => "llamacpp/tool_call",
            llamacpp_parallel_tool_calls => "llamacpp/parallel_tool_calls",
            llamacpp_reasoning => "llamacpp/reasoning",
            llamacpp_error => "llamacpp/error",
            lmstudio_text => "lmstudio/text",
            lmstudio_tool_call => "lmstudio/tool_call",
            lmstudio_tool_call_whole => "lmstudio/tool_call_whole",
            lmstudio_parallel_tool_calls => "lmstudio/parallel_tool_calls",
            gemini_text => "gemini/text",
            gemini_tool_call => "gemini/tool_call",
            gemini_parallel_tool_calls => "gemini/parallel_tool_calls",
            gemini_parallel_tool_calls_index_0 => "gemini/parallel_tool_calls_index_0",
        }
    };
}

/// One `#[tokio::test]` per case for the client `$factory` makes, named `$client` where a
/// case expects another outcome of it (`<case>.<client>.expected.json`).
macro_rules! corpus_tests {
    ($factory:path, $client:literal; $($(#[$meta:meta])* $test:ident => $file:literal),* $(,)?) => {
        $(
            $(#[$meta])*
            #[tokio::test]
            async fn $test() {
                super::run_case($factory, $client, $file).await;
            }
        )*
    };
}

/// The case files, for the test that every transcript on disk is run.
macro_rules! case_files {
    (; $($(#[$meta:meta])* $test:ident => $file:literal),* $(,)?) => {
        &[$($file),*]
    };
}

/// Where the transcripts live.
fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/providers")
}

/// A transcript: its sources (the header) and the body to serve.
struct Transcript {
    sources: Vec<String>,
    body: Vec<u8>,
}

/// Splits a transcript file into its `#` header and the body after the first blank line.
fn read_transcript(case: &str) -> Transcript {
    let path = corpus_dir().join(format!("{case}.sse"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut sources = Vec::new();
    let mut rest = bytes.as_slice();
    loop {
        let end = rest
            .iter()
            .position(|&b| b == b'\n')
            .unwrap_or_else(|| panic!("{case}: no blank line after the header"));
        let line = &rest[..end];
        rest = &rest[end + 1..];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            break;
        }
        let line = std::str::from_utf8(line).expect("the header is UTF-8");
        let comment = line
            .strip_prefix('#')
            .unwrap_or_else(|| panic!("{case}: header line {line:?} does not start with #"));
        sources.push(comment.trim().to_owned());
    }
    Transcript {
        sources,
        body: rest.to_vec(),
    }
}

/// What a crew gets out of one answer.
#[derive(Debug, Default)]
struct Outcome {
    text: String,
    tool_calls: Vec<crewline_core::ToolCall>,
    finish: Option<FinishReason>,
    usage: Option<crewline_llm::Usage>,
    error: Option<LlmError>,
}

/// Streams one answer from `base_url` to its end (or its first error).
async fn ask(client: &dyn LlmClient) -> Outcome {
    let mut outcome = Outcome::default();
    let request = ChatRequest::new(vec![Message::user("What's the weather in Paris?")]);
    let mut stream = match client.stream_chat(request).await {
        Ok(stream) => stream,
        Err(error) => {
            outcome.error = Some(error);
            return outcome;
        }
    };
    while let Some(item) = stream.next().await {
        match item {
            Ok(StreamItem::Text(text)) => outcome.text.push_str(&text),
            Ok(StreamItem::ToolCalls(calls)) => outcome.tool_calls.extend(calls),
            Ok(StreamItem::Finish(reason)) => outcome.finish = Some(reason),
            Ok(StreamItem::Usage(usage)) => outcome.usage = Some(usage),
            // Never spoken: the reasoning is the node's to see, not the caller's to hear.
            Ok(StreamItem::Reasoning(_) | StreamItem::Provider(_)) => {}
            Err(error) => {
                outcome.error = Some(error);
                break;
            }
        }
    }
    outcome
}

fn finish_name(reason: &FinishReason) -> String {
    match reason {
        FinishReason::Stop => "stop".to_owned(),
        FinishReason::Length => "length".to_owned(),
        FinishReason::ToolCalls => "tool_calls".to_owned(),
        FinishReason::ContentFilter => "content_filter".to_owned(),
        FinishReason::Other(other) => other.clone(),
    }
}

fn error_kind(error: &LlmError) -> &'static str {
    match error {
        LlmError::Api { .. } => "api",
        LlmError::StreamCut(_) => "stream_cut",
        LlmError::InvalidResponse(_) => "invalid_response",
        LlmError::Timeout(_) => "timeout",
        LlmError::Connect(_) => "connect",
        LlmError::TooLarge { .. } => "too_large",
        _ => "other",
    }
}

/// Compares an outcome with the expected one; returns what differs.
fn differences(outcome: &Outcome, expected: &Value) -> Vec<String> {
    let mut wrong = Vec::new();
    let want_text = expected["text"].as_str().unwrap_or_default();
    if outcome.text != want_text {
        wrong.push(format!("text {:?}, expected {want_text:?}", outcome.text));
    }
    let want_calls = expected["tool_calls"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if outcome.tool_calls.len() != want_calls.len() {
        wrong.push(format!(
            "{} tool calls {:?}, expected {}",
            outcome.tool_calls.len(),
            outcome.tool_calls,
            want_calls.len()
        ));
    }
    for (at, (call, want)) in outcome.tool_calls.iter().zip(&want_calls).enumerate() {
        match want.get("id").and_then(Value::as_str) {
            Some(id) if call.id != id => {
                wrong.push(format!("call {at}: id {:?}, expected {id:?}", call.id));
            }
            // No id expected: the provider sends none, so any non-empty one will do.
            None if call.id.is_empty() => wrong.push(format!("call {at}: empty id")),
            _ => {}
        }
        if call.name != want["name"].as_str().unwrap_or_default() {
            wrong.push(format!(
                "call {at}: name {:?}, expected {}",
                call.name, want["name"]
            ));
        }
        match serde_json::from_str::<Value>(&call.arguments) {
            Ok(arguments) if arguments == want["arguments"] => {}
            _ => wrong.push(format!(
                "call {at}: arguments {:?}, expected {}",
                call.arguments, want["arguments"]
            )),
        }
    }
    let ids: std::collections::HashSet<&str> =
        outcome.tool_calls.iter().map(|c| c.id.as_str()).collect();
    if ids.len() != outcome.tool_calls.len() {
        wrong.push("tool call ids are not unique".to_owned());
    }
    let finish = outcome.finish.as_ref().map(finish_name);
    let want_finish = expected["finish_reason"].as_str().map(str::to_owned);
    if finish != want_finish {
        wrong.push(format!("finish {finish:?}, expected {want_finish:?}"));
    }
    let usage = outcome.usage.map(|u| {
        serde_json::json!({
            "prompt_tokens": u.prompt_tokens,
            "completion_tokens": u.completion_tokens,
            "total_tokens": u.total_tokens,
        })
    });
    let want_usage = expected.get("usage").cloned().filter(|u| !u.is_null());
    if usage != want_usage {
        wrong.push(format!("usage {usage:?}, expected {want_usage:?}"));
    }
    match (
        &outcome.error,
        expected.get("error").filter(|e| !e.is_null()),
    ) {
        (None, None) => {}
        (Some(error), None) => wrong.push(format!("unexpected error: {error}")),
        (None, Some(want)) => wrong.push(format!("no error, expected {want}")),
        (Some(error), Some(want)) => {
            if error_kind(error) != want["kind"].as_str().unwrap_or_default() {
                wrong.push(format!("error {error:?}, expected kind {}", want["kind"]));
            }
            let message = crewline_core::error_chain(error);
            if let Some(part) = want["message_contains"].as_str()
                && !message.contains(part)
            {
                wrong.push(format!("error message {message:?} lacks {part:?}"));
            }
        }
    }
    wrong
}

/// How the body is cut into HTTP chunks.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// One chunk.
    Whole,
    /// Inside every multi-byte UTF-8 character, between every CR and LF, inside every line.
    AtEdges,
    /// One byte per chunk.
    Bytewise,
}

/// The places [`Cut::AtEdges`] cuts `body`.
fn edge_cuts(body: &[u8]) -> Vec<usize> {
    let mut cuts = Vec::new();
    let mut line_start = 0;
    for (at, &byte) in body.iter().enumerate() {
        // The first byte of a multi-byte character: cut right after it.
        if byte >= 0xC0 {
            cuts.push(at + 1);
        }
        if byte == b'\r' && body.get(at + 1) == Some(&b'\n') {
            cuts.push(at + 1);
        }
        if byte == b'\n' || byte == b'\r' {
            let line = &body[line_start..at];
            if line.len() > 4 {
                // Inside the field name (`da|ta:`) and in the middle of the value.
                cuts.push(line_start + 2);
                cuts.push(line_start + line.len() / 2);
            }
            line_start = at + 1;
        }
    }
    cuts.retain(|&cut| cut > 0 && cut < body.len());
    cuts.sort_unstable();
    cuts.dedup();
    cuts
}

fn pieces(body: &[u8], cut: Cut) -> Vec<&[u8]> {
    match cut {
        Cut::Whole => vec![body],
        Cut::Bytewise => body.chunks(1).collect(),
        Cut::AtEdges => {
            let mut out = Vec::new();
            let mut from = 0;
            for to in edge_cuts(body) {
                out.push(&body[from..to]);
                from = to;
            }
            out.push(&body[from..]);
            out
        }
    }
}

/// Serves one request on 127.0.0.1: a 200 `text/event-stream` whose chunked body is `pieces`,
/// one HTTP chunk each, then the body's end. Returns the client's base URL.
async fn serve(pieces: Vec<Vec<u8>>) -> (String, tokio::task::JoinHandle<std::io::Result<()>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("address");
    let task = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await?;
        socket.set_nodelay(true)?;
        read_request(&mut socket).await?;
        socket
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n")
            .await?;
        for piece in pieces {
            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
            framed.extend_from_slice(&piece);
            framed.extend_from_slice(b"\r\n");
            socket.write_all(&framed).await?;
            socket.flush().await?;
        }
        socket.write_all(b"0\r\n\r\n").await?;
        socket.shutdown().await
    });
    (format!("http://{addr}/v1"), task)
}

/// Reads the request's head and body (the server answers only once it has it all).
async fn read_request(socket: &mut tokio::net::TcpStream) -> std::io::Result<()> {
    let mut data = Vec::new();
    let mut buf = [0_u8; 4096];
    let head_end = loop {
        if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        data.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&data[..head_end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|line| line.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while data.len() < head_end + length {
        let n = socket.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        data.extend_from_slice(&buf[..n]);
    }
    Ok(())
}

/// Serves `case` every way it can be cut, reads it with a client from `make`, and checks the
/// outcome against `<case>.<client>.expected.json` where a client cannot do better (its
/// `note` says why), else `<case>.expected.json`.
async fn run_case(make: Factory, client: &str, case: &str) {
    let transcript = read_transcript(case);
    let own = corpus_dir().join(format!("{case}.{client}.expected.json"));
    let expected_path = if own.exists() {
        own
    } else {
        corpus_dir().join(format!("{case}.expected.json"))
    };
    let expected: Value = serde_json::from_slice(
        &std::fs::read(&expected_path)
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display())),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
    let mut failures = Vec::new();
    for cut in [Cut::Whole, Cut::AtEdges, Cut::Bytewise] {
        let pieces: Vec<Vec<u8>> = pieces(&transcript.body, cut)
            .into_iter()
            .map(<[u8]>::to_vec)
            .collect();
        let (base_url, server) = serve(pieces).await;
        let client = make(&base_url);
        let outcome = ask(client.as_ref()).await;
        drop(client);
        server.abort();
        for wrong in differences(&outcome, &expected) {
            failures.push(format!("{cut:?}: {wrong}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{case} (sources: {}):\n  {}",
        transcript.sources.join("; "),
        failures.join("\n  ")
    );
}

#[test]
fn every_transcript_is_run_states_its_source_and_has_an_expected_outcome() {
    let listed: &[&str] = cases!(case_files!());
    let mut on_disk = Vec::new();
    for provider in std::fs::read_dir(corpus_dir()).expect("corpus dir") {
        let provider = provider.expect("entry").path();
        if !provider.is_dir() {
            continue;
        }
        for file in std::fs::read_dir(&provider).expect("provider dir") {
            let file = file.expect("entry").path();
            if file.extension().is_some_and(|e| e == "sse") {
                let name = format!(
                    "{}/{}",
                    provider.file_name().expect("name").to_string_lossy(),
                    file.file_stem().expect("stem").to_string_lossy()
                );
                on_disk.push(name);
            }
        }
    }
    on_disk.sort();
    let mut listed_sorted: Vec<String> = listed.iter().map(|s| (*s).to_owned()).collect();
    listed_sorted.sort();
    assert_eq!(on_disk, listed_sorted, "transcripts on disk vs cases!()");
    for case in listed {
        let transcript = read_transcript(case);
        assert!(
            transcript.sources.iter().any(|s| s.starts_with("source:")),
            "{case} names no `# source:`"
        );
        assert!(
            corpus_dir().join(format!("{case}.expected.json")).exists(),
            "{case} has no expected outcome"
        );
        assert!(!transcript.body.is_empty(), "{case} has an empty body");
    }
}

#[test]
fn edge_cuts_split_characters_crlf_pairs_and_lines() {
    let body = "data: é\r\n\r\n".as_bytes();
    let cuts = edge_cuts(body);
    // Inside `é` (bytes 6..8), between the CRs and LFs, inside the `data:` line.
    assert!(cuts.contains(&7), "{cuts:?}");
    assert!(cuts.contains(&9) && cuts.contains(&11), "{cuts:?}");
    assert!(cuts.contains(&2), "{cuts:?}");
}

/// The default client, as a crew builds it (no retries: one transcript, one request).
fn openai_client(base_url: &str) -> Box<dyn LlmClient> {
    Box::new(
        OpenAiClient::builder()
            .model("corpus-model")
            .api_key("sk-corpus")
            .base_url(base_url)
            .read_env(false)
            .max_retries(0)
            .build()
            .expect("client"),
    )
}

/// The corpus on the default client. A second client is one more line like this one.
mod openai_client {
    cases!(corpus_tests!(super::openai_client, "openai"));
}

/// The async-openai client, over a plain `async_openai::Client<OpenAIConfig>`.
#[cfg(feature = "async-openai")]
fn async_openai_client(base_url: &str) -> Box<dyn LlmClient> {
    use async_openai::{Client, config::OpenAIConfig};
    let config = OpenAIConfig::new()
        .with_api_base(base_url)
        .with_api_key("sk-corpus");
    Box::new(crewline_llm::AsyncOpenAiClient::new(
        Client::with_config(config),
        "corpus-model",
    ))
}

/// The corpus on the async-openai client.
#[cfg(feature = "async-openai")]
mod async_openai_client {
    cases!(corpus_tests!(super::async_openai_client, "async-openai"));
}

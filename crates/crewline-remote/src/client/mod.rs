//! The client: registers a registry's tools with a task API and answers the agent's calls.
//!
//! [`TaskClient::run`] creates a task whose `custom_tools` are the registry's tools exported
//! to [`Target::Remote`], then polls `GET /task/{id}?event_t=<cursor>` until the task
//! finishes. Each new `tool_call` event runs through the registry's executor (validation,
//! hooks, timeouts, ...) in a task of its own, so a slow tool does not hold up polling, and is
//! answered with `POST /task/{id}/event`. Events are deduplicated by id, events that come with
//! the final poll are still answered, and network errors, 5xx and 429 are retried with
//! exponential backoff up to a limit, after which a typed [`ClientError::GaveUp`] is returned.
//!
//! What the API sends is bounded whatever it is: a response body is read up to
//! [`ClientConfig::max_response_bytes`] (8 MiB; past it [`ClientError::TooLarge`], nothing more
//! is read), an error body up to 64 KiB (its first 500 characters become the error's detail),
//! and however many tool calls a poll brings, at most [`ClientConfig::max_concurrent_calls`]
//! (64) run at once, the others as those finish. An event whose id is over 256 bytes is
//! skipped with a warning.

use std::{
    collections::{HashSet, VecDeque},
    sync::Arc,
    time::Duration,
};

use axum::body::Bytes;
use backon::Retryable;
use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
use crewline_tools::{CallContext, PANIC_MESSAGE, SessionScope, Target, ToolRegistry};
use reqwest::{Method, StatusCode, Url};
use serde::{Serialize, de::DeserializeOwned};
use serde_json::{Value, json};
use tokio::task::JoinSet;

use crate::wire::{
    CustomTool, Envelope, ErrorBody, EventAck, TOOL_CALL, TaskEvent, TaskRequest, TaskResponse,
    TaskStatus, ToolAnswer, ToolCallPayload,
};

mod config;
mod error;

pub use self::{
    config::{ApiKey, Backoff, ClientConfig, MAX_CONCURRENT_CALLS, MAX_RESPONSE_BYTES},
    error::ClientError,
};

/// How many event ids the client remembers for deduplication.
const SEEN_EVENTS: usize = 4096;
/// The longest event id the client handles: ids are remembered ([`SEEN_EVENTS`] of them) and
/// sent back with the answer, and real ones are a few dozen bytes (`evt_` and a UUID).
const MAX_EVENT_ID_BYTES: usize = 256;
/// How much of an error response's body is read, for its `detail`: enough for any real
/// explanation, never a whole (hostile) page.
const ERROR_BODY_BYTES: usize = 64 << 10;

/// How a served task ended.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    /// The task's id.
    pub task_id: String,
    /// Its final status.
    pub status: TaskStatus,
    /// Its output, if the API gave one.
    pub output: Option<Value>,
    /// Tool calls run and answered.
    pub calls_answered: usize,
    /// Tool calls whose answer the API refused (e.g. the agent stopped waiting).
    pub answers_rejected: usize,
    /// Events seen more than once and skipped.
    pub duplicates_skipped: usize,
}

/// A client of a Smooth-style task API; cheap to clone.
#[derive(Debug, Clone)]
pub struct TaskClient {
    http: reqwest::Client,
    base: Url,
    config: Arc<ClientConfig>,
}

impl TaskClient {
    /// A client for `config`.
    pub fn new(config: ClientConfig) -> Result<Self, ClientError> {
        let base = Url::parse(&config.base_url)
            .map_err(|e| ClientError::Config(format!("base URL `{}`: {e}", config.base_url)))?;
        if base.cannot_be_a_base() {
            return Err(ClientError::Config(format!(
                "base URL `{}` cannot have paths appended",
                config.base_url
            )));
        }
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ClientError::Config(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            config: Arc::new(config),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.config
    }

    /// The `custom_tools` for the tools of `registry` exported to [`Target::Remote`].
    pub fn custom_tools(registry: &ToolRegistry) -> Result<Vec<CustomTool>, ClientError> {
        let exported = registry.export(Target::Remote)?;
        Ok(exported
            .definitions()
            .into_iter()
            .filter_map(|definition| {
                let tool = exported.get(&definition.name)?;
                Some(CustomTool {
                    inputs: tool.parameters(),
                    output: output_description(tool.result_schema().as_ref()),
                    timeout_ms: tool
                        .policy()
                        .timeout
                        .map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
                    name: definition.name,
                    description: definition.description,
                })
            })
            .collect())
    }

    /// `POST /task`: creates a task.
    pub async fn create_task(&self, request: &TaskRequest) -> Result<TaskResponse, ClientError> {
        let url = self.url(&["task"]);
        self.retrying("create task", || async {
            let (_, body) = self
                .send(Method::POST, url.clone(), Some(request), None)
                .await?;
            decode::<Envelope<TaskResponse>>(&body, "task").map(|e| e.r)
        })
        .await
    }

    /// `GET /task/{id}?event_t=..`: the task and its events after `event_t` (long-polled when
    /// configured).
    pub async fn poll(&self, task_id: &str, event_t: u64) -> Result<TaskResponse, ClientError> {
        let mut url = self.url(&["task", task_id]);
        url.query_pairs_mut()
            .append_pair("event_t", &event_t.to_string());
        if let Some(wait) = self.config.long_poll {
            url.query_pairs_mut()
                .append_pair("wait_ms", &wait.as_millis().to_string());
        }
        let extra = self.config.long_poll;
        self.retrying("poll task", || async {
            let (_, body) = self
                .send::<()>(Method::GET, url.clone(), None, extra)
                .await
                .map_err(|e| not_found(e, task_id))?;
            decode::<Envelope<TaskResponse>>(&body, "task").map(|e| e.r)
        })
        .await
    }

    /// `POST /task/{id}/event`: answers the tool call `event_id`.
    ///
    /// When a retried answer is refused as already answered (409), the earlier attempt got
    /// through: that is a success.
    pub async fn answer(
        &self,
        task_id: &str,
        event_id: &str,
        answer: &ToolAnswer,
    ) -> Result<(), ClientError> {
        let url = self.url(&["task", task_id, "event"]);
        let event = answer.to_event(event_id);
        let mut attempt = 0;
        self.retrying("answer tool call", || {
            attempt += 1;
            let retry = attempt > 1;
            let url = url.clone();
            let event = &event;
            async move {
                match self.send(Method::POST, url, Some(event), None).await {
                    Ok((_, body)) => decode::<Envelope<EventAck>>(&body, "event ack").map(|_| ()),
                    Err(ClientError::Status { status: 409, .. }) if retry => Ok(()),
                    Err(error) => Err(not_found(error, task_id)),
                }
            }
        })
        .await
    }

    /// `DELETE /task/{id}`: cancels the task.
    pub async fn cancel(&self, task_id: &str) -> Result<TaskResponse, ClientError> {
        let url = self.url(&["task", task_id]);
        self.retrying("cancel task", || async {
            let (_, body) = self
                .send::<()>(Method::DELETE, url.clone(), None, None)
                .await
                .map_err(|e| not_found(e, task_id))?;
            decode::<Envelope<TaskResponse>>(&body, "task").map(|e| e.r)
        })
        .await
    }

    /// Creates a task with the registry's remote tools added to `request.custom_tools`, then
    /// answers its tool calls until it finishes (see [`serve`](Self::serve)).
    pub async fn run(
        &self,
        mut request: TaskRequest,
        registry: &ToolRegistry,
    ) -> Result<TaskOutcome, ClientError> {
        request.custom_tools.extend(Self::custom_tools(registry)?);
        let task = self.create_task(&request).await?;
        tracing::info!(task_id = %task.id, status = %task.status, "task created");
        self.serve(&task.id, registry).await
    }

    /// Polls the task `task_id` and answers its tool calls with the tools of `registry`
    /// exported to [`Target::Remote`], until the task finishes.
    pub async fn serve(
        &self,
        task_id: &str,
        registry: &ToolRegistry,
    ) -> Result<TaskOutcome, ClientError> {
        let tools = registry.export(Target::Remote)?;
        // All calls of one task share a run (its limits and cancellation) and a session scope
        // of their own: nothing the executor keeps for this task reaches another caller.
        let context = tools.context().with_scope(SessionScope::new());
        let mut seen = SeenEvents::default();
        let mut cursor = 0u64;
        let mut calls: JoinSet<bool> = JoinSet::new();
        let mut outcome = TaskOutcome {
            task_id: task_id.to_owned(),
            status: TaskStatus::Waiting,
            output: None,
            calls_answered: 0,
            answers_rejected: 0,
            duplicates_skipped: 0,
        };
        loop {
            let started = tokio::time::Instant::now();
            let task = self.poll(task_id, cursor).await?;
            let mut fresh = 0usize;
            for event in task.events {
                if event.id.len() > MAX_EVENT_ID_BYTES {
                    // Remembered for deduplication, echoed in the answer: an id of any length
                    // would let the API make the client hold megabytes per event for as long
                    // as it remembers ids. No real event id is that long; the event is skipped
                    // (and the cursor moved past it, so it is not fetched again).
                    tracing::warn!(
                        id = %event.id.chars().take(32).collect::<String>(),
                        bytes = event.id.len(),
                        "an event with an over-long id was skipped"
                    );
                    if let Some(timestamp) = event.timestamp {
                        cursor = cursor.max(timestamp);
                    }
                    continue;
                }
                if !seen.insert(&event.id) {
                    outcome.duplicates_skipped += 1;
                    continue;
                }
                fresh += 1;
                if let Some(timestamp) = event.timestamp {
                    cursor = cursor.max(timestamp);
                }
                if event.name != TOOL_CALL {
                    tracing::debug!(event = %event.name, id = %event.id, "event skipped");
                    continue;
                }
                // However many calls one poll brings, at most `max_concurrent_calls` run at
                // once: the rest wait here (and polling with them) for a running one to end.
                while calls.len() >= self.config.max_concurrent_calls.max(1) {
                    if let Some(done) = calls.join_next().await {
                        outcome.count(done);
                    }
                }
                let client = self.clone();
                let (tools, context, task_id) =
                    (tools.clone(), context.clone(), task_id.to_owned());
                calls.spawn(async move {
                    let answer = run_tool_call(&tools, &context, &event).await;
                    match client.answer(&task_id, &event.id, &answer).await {
                        Ok(()) => true,
                        Err(error) => {
                            tracing::warn!(error = %crewline_core::ErrorChain(&error), event_id = %event.id, "tool answer refused");
                            false
                        }
                    }
                });
            }
            while let Some(done) = calls.try_join_next() {
                outcome.count(done);
            }
            outcome.status = task.status;
            if task.status.is_terminal() {
                outcome.output = task.output;
                break;
            }
            if fresh == 0 {
                // A server that does not long-poll answers at once: keep a steady pace.
                let idle = self.config.poll_interval.saturating_sub(started.elapsed());
                tokio::time::sleep(idle).await;
            }
        }
        // Calls from the final poll (or still running) are answered before returning.
        while let Some(done) = calls.join_next().await {
            outcome.count(done);
        }
        tracing::info!(task_id, status = %outcome.status, answered = outcome.calls_answered,
            "task finished");
        Ok(outcome)
    }

    /// `base/segments...`, each segment percent-encoded.
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().extend(segments);
        }
        url
    }

    /// One request; a non-2xx status is an error carrying the API's `detail`.
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
        extra_time: Option<Duration>,
    ) -> Result<(StatusCode, Bytes), ClientError> {
        let timeout = self.config.request_timeout + extra_time.unwrap_or_default();
        let mut request = self.http.request(method, url).timeout(timeout);
        if let Some(key) = &self.config.api_key {
            // Both ways: a crewline task API behind a crew server's bearer layer reads the
            // `Authorization` header, Smooth reads `apikey`.
            request = request
                .header("apikey", key.expose())
                .bearer_auth(key.expose());
        }
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(ClientError::Network)?;
        let status = response.status();
        if status.is_success() {
            let body = read_body(response, self.config.max_response_bytes).await?;
            return Ok((status, body));
        }
        let body = read_prefix(response, ERROR_BODY_BYTES)
            .await
            .map_err(ClientError::Network)?;
        // The explanation goes into errors and log lines: its first 500 characters.
        let detail = serde_json::from_slice::<ErrorBody>(&body)
            .map(|e| e.detail)
            .unwrap_or_else(|_| String::from_utf8_lossy(&body).into_owned())
            .chars()
            .take(500)
            .collect();
        Err(match status.as_u16() {
            code @ (401 | 403) => ClientError::Unauthorized {
                status: code,
                detail,
            },
            code => ClientError::Status {
                status: code,
                detail,
            },
        })
    }

    /// Runs `attempt` until it succeeds, fails for good, or the backoff's attempts run out.
    async fn retrying<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T, ClientError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        retrying(self.config.backoff, what, attempt).await
    }
}

/// Runs `attempt` under `backoff`; a retryable failure left when the attempts run out is
/// [`ClientError::GaveUp`].
async fn retrying<T, F, Fut>(backoff: Backoff, what: &str, attempt: F) -> Result<T, ClientError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ClientError>>,
{
    let mut attempts = 1;
    let result = attempt
        .retry(backoff.schedule())
        .when(ClientError::is_retryable)
        .notify(|error, delay| {
            tracing::warn!(error = %crewline_core::ErrorChain(error), attempt = attempts, ?delay, "{what} failed; retrying");
            attempts += 1;
        })
        .await;
    match result {
        Err(error) if error.is_retryable() => Err(ClientError::GaveUp {
            attempts,
            last: Box::new(error),
        }),
        other => other,
    }
}

impl TaskOutcome {
    fn count(&mut self, joined: Result<bool, tokio::task::JoinError>) {
        match joined {
            Ok(true) => self.calls_answered += 1,
            Ok(false) => self.answers_rejected += 1,
            Err(error) => {
                tracing::error!(error = %crewline_core::ErrorChain(&error), "a tool call task failed");
                self.answers_rejected += 1;
            }
        }
    }
}

/// A 404 about a task is [`ClientError::TaskNotFound`].
fn not_found(error: ClientError, task_id: &str) -> ClientError {
    match error {
        ClientError::Status { status: 404, .. } => ClientError::TaskNotFound(task_id.to_owned()),
        other => other,
    }
}

/// The whole body of `response`, or [`ClientError::TooLarge`] as soon as it is known to be
/// over `limit` (its declared length, or the bytes read so far): never more than `limit` is
/// held.
async fn read_body(mut response: reqwest::Response, limit: usize) -> Result<Bytes, ClientError> {
    let too_large = || ClientError::TooLarge { limit };
    if response
        .content_length()
        .is_some_and(|length| length > u64::try_from(limit).unwrap_or(u64::MAX))
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(ClientError::Network)? {
        if body.len().saturating_add(chunk.len()) > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Bytes::from(body))
}

/// At most the first `limit` bytes of `response`'s body; the rest is never read.
async fn read_prefix(mut response: reqwest::Response, limit: usize) -> reqwest::Result<Bytes> {
    let mut body = Vec::new();
    while body.len() < limit {
        let Some(chunk) = response.chunk().await? else {
            break;
        };
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
    }
    Ok(Bytes::from(body))
}

fn decode<T: DeserializeOwned>(body: &[u8], what: &'static str) -> Result<T, ClientError> {
    serde_json::from_slice(body).map_err(|source| ClientError::Decode { what, source })
}

/// Runs one `tool_call` event through the registry's executor and says how to answer it.
pub async fn run_tool_call(
    tools: &ToolRegistry,
    context: &CallContext,
    event: &TaskEvent,
) -> ToolAnswer {
    let payload: ToolCallPayload = match serde_json::from_value(event.payload.clone()) {
        Ok(payload) => payload,
        Err(error) => {
            return ToolAnswer::tool_error(json!({"error": {
                "kind": ToolErrorKind::ToolArgsInvalid,
                "message": format!("the tool_call payload needs `name` and `input`: {error}"),
            }}));
        }
    };
    let arguments = match payload.input {
        Value::Null => String::from("{}"),
        // Some agents send the arguments as JSON text.
        Value::String(text) => text,
        other => other.to_string(),
    };
    let call = ToolCall::new(event.id.clone(), payload.name, arguments);
    let run = tools.execute_one(&call, context).await;
    answer_for(run.result)
}

/// The answer for a tool result: 200 with the output, 400 for errors the agent can correct,
/// 500 for failures (panic, timeout, cancellation, run limits).
///
/// A successful result whose content is a JSON object or array is sent as that JSON; any
/// other content is sent as a string. An error is sent as `{"error": {"kind", "message"}}`.
///
/// # Examples
///
/// ```
/// use crewline_core::{ToolCall, ToolErrorKind, ToolResult};
/// use crewline_remote::answer_for;
/// use serde_json::json;
///
/// let call = ToolCall::new("evt_1", "read_clipboard", "{}");
/// let ok = answer_for(ToolResult::from_value(&call, json!({"text": "hi"})));
/// assert_eq!((ok.code, ok.output), (200, json!({"text": "hi"})));
///
/// let bad_args = answer_for(ToolResult::error(&call, ToolErrorKind::ToolArgsInvalid, "`n` must be a number"));
/// assert_eq!(bad_args.code, 400); // the agent can correct it
/// assert_eq!(bad_args.output["error"]["kind"], "ToolArgsInvalid");
///
/// let late = answer_for(ToolResult::error(&call, ToolErrorKind::Timeout, "took longer than 5s"));
/// assert_eq!(late.code, 500);
/// ```
pub fn answer_for(result: ToolResult) -> ToolAnswer {
    let failure = match result.outcome {
        Ok(value) => {
            let output = match value {
                // A tool that returns JSON text (a proxied tool) is sent as that JSON.
                Value::String(text) => {
                    let trimmed = text.trim_start();
                    if trimmed.starts_with('{') || trimmed.starts_with('[') {
                        serde_json::from_str(&text).unwrap_or(Value::String(text))
                    } else {
                        Value::String(text)
                    }
                }
                value @ (Value::Object(_) | Value::Array(_)) => value,
                other => Value::String(other.to_string()),
            };
            return ToolAnswer::ok(output);
        }
        Err(failure) => failure,
    };
    let kind = failure.kind;
    let panicked = kind == ToolErrorKind::ToolError && failure.message == PANIC_MESSAGE;
    let output = json!({"error": {"kind": kind, "message": failure.message}});
    // A panic is a failure (500), not an error the agent can correct.
    match kind {
        ToolErrorKind::Timeout
        | ToolErrorKind::Cancelled
        | ToolErrorKind::RunLimitExceeded
        | ToolErrorKind::ApprovalPending
        | ToolErrorKind::StillRunning
        | ToolErrorKind::OutcomeUnknown => ToolAnswer::failure(output),
        ToolErrorKind::ToolError if panicked => ToolAnswer::failure(output),
        _ => ToolAnswer::tool_error(output),
    }
}

/// What a remote agent is told a tool returns, from its result schema.
fn output_description(schema: Option<&Value>) -> String {
    let Some(schema) = schema else {
        return String::from("The tool's result, as text or JSON.");
    };
    for key in ["description", "title"] {
        if let Some(text) = schema.get(key).and_then(Value::as_str) {
            return text.to_owned();
        }
    }
    format!("JSON matching this schema: {schema}")
}

/// The ids of events already handled, bounded (oldest forgotten first).
#[derive(Default)]
struct SeenEvents {
    ids: HashSet<String>,
    order: VecDeque<String>,
}

impl SeenEvents {
    /// Remembers `id`; `false` when it was already seen.
    fn insert(&mut self, id: &str) -> bool {
        if self.ids.contains(id) {
            return false;
        }
        if self.order.len() == SEEN_EVENTS
            && let Some(oldest) = self.order.pop_front()
        {
            self.ids.remove(&oldest);
        }
        self.ids.insert(id.to_owned());
        self.order.push_back(id.to_owned());
        true
    }
}

#[cfg(test)]
mod tests;

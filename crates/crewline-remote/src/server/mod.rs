//! The task API served for crewline's own crews.
//!
//! A remote client (in any language) registers its tools with `POST /task` and gets a task
//! id; the platform call carries the id as the call variable `task_id`; the crew's setup code
//! [attaches](TaskApi::attach_call) the task, which adds a [`RemoteTool`] per custom tool to
//! the call's registry. When the model calls one, the client sees a `tool_call` event in
//! `GET /task/{id}?event_t=..&wait_ms=..` (a long poll that answers as soon as the event
//! exists) and answers with `POST /task/{id}/event`. When the call ends, the task is `done`.
//!
//! | Route | Does |
//! |---|---|
//! | `POST /task` | creates a task (`custom_tools` are checked like a registry checks tools; `inputs` is a JSON Schema or smooth-py's map of parameter name to schema) |
//! | `GET /task/{id}?event_t=&wait_ms=` | the task and its events after `event_t`; 202 while it runs, 200 once finished, with its `output` (what the call concluded, see [`TaskOutput`]) |
//! | `POST /task/{id}/event` | answers a tool call: `{"name": "tool_call", "id", "payload": {"code", "output"}}` |
//! | `DELETE /task/{id}` | cancels the task; waiting calls fail with a tool error |
//!
//! **Authentication** is crewline-auth's layer, as on every crewline route: with a key
//! ([`TaskApi::api_key`], [`TaskApi::credential`]) every route needs it, as the `apikey` header
//! (Smooth's) or `Authorization: Bearer`. A handler reads which key let the request in from
//! its `Extension<Principal>` (named `anonymous` when no key is set); a key sees only the
//! tasks it created (another key's task is `404`, as if it did not exist). Merged into a
//! `CrewServer`, the routes are also behind the crew server's layer, which refuses to serve
//! beyond loopback without a credential: give task clients the crew server's token, or add the
//! task key to the crew server too (`CrewServer::credential`), since the client sends its key
//! both ways.
//!
//! Every request is bounded ([`StoreLimits`]): a caller over its own task or byte budget gets
//! 429, a task over its byte budget 413, and a full store 503, each with the reason; a shared
//! store that is down (Redis) is 503 too, naming the store and the cause.

mod inputs;
mod store;
mod tool;

use std::{collections::HashMap, sync::Arc, time::Duration};

use axum::{
    Extension, Json, Router,
    body::Bytes,
    extract::{Path, RawQuery, State},
    http::{HeaderName, StatusCode},
    response::{IntoResponse, Response},
    routing::{get, post},
};
use crewline_auth::Auth;
pub use crewline_auth::{Credential, CredentialError, Principal};
use crewline_tools::ToolRegistry;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

pub use self::{
    store::{
        MemoryStore, Polled, StoreError, StoreLimits, TaskSnapshot, TaskStore, Withdrawn, json_len,
    },
    tool::{
        MAX_OUTPUT_BYTES, OutputTooLarge, RemoteTool, RemoteTools, TaskOutput, WITHDRAW_TIMEOUT,
    },
};
use crate::wire::{
    Envelope, ErrorBody, EventAck, EventRequest, TOOL_CALL, TaskRequest, TaskResponse, TaskStatus,
    ToolAnswer,
};

/// The call variable (in `system.init`'s `initial_variables`) that names the call's task.
pub const TASK_ID_VARIABLE: &str = "task_id";
/// The default time a remote tool waits for its client's answer: 30 s.
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest a poll may be held open (`wait_ms` is capped to it): 30 s.
pub const MAX_WAIT: Duration = Duration::from_secs(30);
/// The longest timeout a custom tool may ask for: 10 min.
pub const MAX_TOOL_TIMEOUT: Duration = Duration::from_secs(600);
/// How long a call's hold on its task lasts without renewal (renewed every third of it while
/// the call lives): 10 s. A task whose replica died is attachable by another call after it.
pub const DEFAULT_ATTACH_LEASE: Duration = Duration::from_secs(10);
/// How long the task of a call that ended (its socket closed) waits for the same call id to
/// re-attach it before it is `done`: 2 s. Only for calls attached with their call id.
pub const DEFAULT_REATTACH_GRACE: Duration = Duration::from_secs(2);
/// Where Smooth serves its task API (its SDK's base URL `.../api/` plus its `api_version`
/// `v1`); the task routes are served here and at the root.
pub const SMOOTH_PREFIX: &str = "/api/v1";

/// Why a call could not attach its task.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AttachError {
    /// The store refused (unknown task, already attached, finished).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The `task_id` call variable is not a string.
    #[error("the call variable `task_id` must be a string, not {0}")]
    NotAString(Value),
}

/// The task API: its routes, its store, and the attaching of tasks to calls; cheap to clone.
///
/// # Examples
///
/// The whole round trip in one process: the client registers its tools as a task, the crew
/// attaches the task to a call, and a call of the remote tool is run on the client's side:
///
/// ```
/// # use async_trait::async_trait;
/// # use crewline_tools::{Exports, Tool, ToolError, ToolPolicy};
/// # use serde_json::{Value, json};
/// # /// A tool that only the client's machine can run.
/// # struct ReadClipboard;
/// # #[async_trait]
/// # impl Tool for ReadClipboard {
/// #     fn name(&self) -> &str { "read_clipboard" }
/// #     fn description(&self) -> &str { "The text on the user's clipboard." }
/// #     fn parameters(&self) -> Value { json!({"type": "object", "properties": {}}) }
/// #     fn policy(&self) -> ToolPolicy { ToolPolicy::new().exports(Exports::all()) }
/// #     async fn call(&self, _args: Value) -> Result<Value, ToolError> { Ok(json!("Meet at 10:30")) }
/// # }
/// use std::time::Duration;
///
/// use crewline_core::ToolCall;
/// use crewline_remote::{ClientConfig, TaskApi, TaskClient, wire::{TaskRequest, TaskStatus}};
/// use crewline_tools::{ExecuteOptions, ToolRegistry};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// // The crew server's side (usually `CrewServer::merge(api.router())`).
/// let api = TaskApi::new().api_key("s3cret")?.tool_timeout(Duration::from_secs(5));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
/// let base_url = format!("http://{}", listener.local_addr()?);
/// tokio::spawn(axum::serve(listener, api.router()).into_future());
///
/// // The client's side: its own tools, offered as the task's custom tools.
/// let mut local = ToolRegistry::new();
/// local.register(ReadClipboard)?;
/// let client = TaskClient::new(ClientConfig::new(base_url).api_key("s3cret"))?;
/// let request = TaskRequest { custom_tools: TaskClient::custom_tools(&local)?, ..TaskRequest::default() };
/// let task_id = client.create_task(&request).await?.id;
/// let answering = tokio::spawn({
///     let task_id = task_id.clone();
///     async move { client.serve(&task_id, &local).await }
/// });
///
/// // The crew's side: a call attaches the task; its tools join the call's registry.
/// let remote = api.attach(&task_id).await?;
/// let mut crew_tools = ToolRegistry::new();
/// remote.register_into(&mut crew_tools)?;
/// let call = ToolCall::new("call_1", "read_clipboard", "{}");
/// let result = &crew_tools.execute(&[call], ExecuteOptions::new()).await[0].result;
/// assert_eq!(result.content(), "Meet at 10:30"); // run on the client's side
///
/// drop((remote, crew_tools)); // the call ends: the task is done
/// let outcome = answering.await??;
/// assert_eq!((outcome.status, outcome.calls_answered), (TaskStatus::Done, 1));
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct TaskApi {
    store: Arc<dyn TaskStore>,
    credentials: Vec<Credential>,
    tool_timeout: Duration,
    max_wait: Duration,
    lease: Duration,
    reattach_grace: Duration,
}

impl std::fmt::Debug for TaskApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TaskApi")
            .field("credentials", &self.credentials)
            .field("tool_timeout", &self.tool_timeout)
            .field("max_wait", &self.max_wait)
            .field("lease", &self.lease)
            .field("reattach_grace", &self.reattach_grace)
            .finish_non_exhaustive()
    }
}

impl Default for TaskApi {
    fn default() -> Self {
        Self::new()
    }
}

impl TaskApi {
    /// A task API over a [`MemoryStore`] with default limits, without authentication.
    pub fn new() -> Self {
        Self::with_store(MemoryStore::new())
    }

    /// A task API over `store`.
    pub fn with_store(store: impl TaskStore) -> Self {
        Self {
            store: Arc::new(store),
            credentials: Vec::new(),
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            max_wait: MAX_WAIT,
            lease: DEFAULT_ATTACH_LEASE,
            reattach_grace: DEFAULT_REATTACH_GRACE,
        }
    }

    /// How long a call's hold on its task lasts without renewal (default
    /// [`DEFAULT_ATTACH_LEASE`]): a task whose replica died is attachable again after it.
    pub fn attach_lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// How long the task of a call attached with its call id waits, once the call's tools are
    /// dropped, for the same call to re-attach it (a reconnect) before it is `done` (default
    /// [`DEFAULT_REATTACH_GRACE`]).
    pub fn reattach_grace(mut self, grace: Duration) -> Self {
        self.reattach_grace = grace;
        self
    }

    /// Requires this key on every route, as the `apikey` header (Smooth's) or
    /// `Authorization: Bearer <key>` (the credential is named `default`); an empty key is an
    /// error (it would admit an empty header).
    pub fn api_key(self, key: impl AsRef<[u8]>) -> Result<Self, CredentialError> {
        Ok(self.credential(Credential::new("default", key)?))
    }

    /// Also accepts `credential`, as [`api_key`](Self::api_key) accepts its key; handlers see
    /// its name in their `Extension<Principal>` (to count tasks per key).
    pub fn credential(mut self, credential: Credential) -> Self {
        self.credentials.push(credential);
        self
    }

    /// Whether a key is required.
    pub fn has_credentials(&self) -> bool {
        !self.credentials.is_empty()
    }

    /// How long remote tools wait for an answer when their spec sets no `timeout_ms`
    /// (default 30 s).
    pub fn tool_timeout(mut self, timeout: Duration) -> Self {
        self.tool_timeout = timeout;
        self
    }

    /// The longest a poll may be held open (default and maximum 30 s).
    pub fn max_wait(mut self, wait: Duration) -> Self {
        self.max_wait = wait.min(MAX_WAIT);
        self
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn TaskStore> {
        &self.store
    }

    /// The routes, to merge into the crew server (`CrewServer::merge`) or serve alone: the
    /// task API at Smooth's own paths (`/api/v1/task`, `/api/v1/task/{id}`,
    /// `/api/v1/task/{id}/event`, so Smooth's SDK works with its defaults given the base URL
    /// `http://host:port/api/`) and at `/task...` as before; `POST /api/v1/telemetry`, which
    /// Smooth's SDK sends, gets a quiet `204`.
    pub fn router(&self) -> Router {
        let tasks = Router::new()
            .route("/task", post(create_task))
            .route("/task/{id}", get(poll_task).delete(cancel_task))
            .route("/task/{id}/event", post(post_event))
            .route_layer(self.auth().layer())
            .with_state(self.clone());
        // Added after the auth layer, which covers only the routes before it: the SDK's
        // telemetry carries nothing a crew reads, and is dropped unread.
        let smooth = tasks
            .clone()
            .route("/telemetry", post(|| async { StatusCode::NO_CONTENT }));
        tasks.nest(SMOOTH_PREFIX, smooth)
    }

    /// The auth layer's settings: the keys, or anyone (as `anonymous`) when none is set.
    fn auth(&self) -> Auth {
        if self.credentials.is_empty() {
            Auth::unauthenticated()
        } else {
            Auth::required(self.credentials.iter().cloned())
                .header(HeaderName::from_static("apikey"))
        }
    }

    /// Attaches the task `task_id` to a call: the task runs, and its custom tools come back
    /// as [`RemoteTools`] for the call's registry. The task finishes when they are dropped.
    /// The call holds the task under a lease renewed while the tools live; if its replica
    /// dies, another call may attach the task once the lease lapses.
    pub async fn attach(&self, task_id: &str) -> Result<RemoteTools, AttachError> {
        self.attach_holding(task_id, "", Duration::ZERO).await
    }

    /// Attaches the task `task_id` to the platform call `call_id`, as [`attach`](Self::attach)
    /// does; the same call id attaches it again after a reconnect, on any replica (the calls
    /// the previous attachment left waiting are settled: "not called" if no client took them,
    /// an unknown outcome if one did). Another call cannot while the lease lives.
    pub async fn attach_for(
        &self,
        task_id: &str,
        call_id: &str,
    ) -> Result<RemoteTools, AttachError> {
        self.attach_holding(task_id, call_id, self.reattach_grace)
            .await
    }

    async fn attach_holding(
        &self,
        task_id: &str,
        call_id: &str,
        grace: Duration,
    ) -> Result<RemoteTools, AttachError> {
        let holding = tool::Holding {
            token: uuid::Uuid::new_v4().simple().to_string(),
            lease: self.lease,
            grace,
        };
        let task = self
            .store
            .attach_leased(task_id, call_id, &holding.token, self.lease)
            .await?;
        tracing::info!(
            task_id,
            tools = task.custom_tools.len(),
            "task attached to a call"
        );
        Ok(RemoteTools::new(
            Arc::clone(&self.store),
            task.id,
            task.custom_tools,
            self.tool_timeout,
            Some(holding),
        ))
    }

    /// Attaches the task named by the call variable `task_id`, if the call has one.
    pub async fn attach_call(
        &self,
        variables: &Map<String, Value>,
    ) -> Result<Option<RemoteTools>, AttachError> {
        self.attach_call_for(variables, None).await
    }

    /// Attaches the task named by the call variable `task_id`, if the call has one, for the
    /// platform call `call_id` (`session_context.caller.call_id`), so that a reconnect of the
    /// same call attaches it again ([`attach_for`](Self::attach_for)).
    pub async fn attach_call_for(
        &self,
        variables: &Map<String, Value>,
        call_id: Option<&str>,
    ) -> Result<Option<RemoteTools>, AttachError> {
        let id = match variables.get(TASK_ID_VARIABLE) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::String(id)) => id,
            Some(other) => return Err(AttachError::NotAString(other.clone())),
        };
        match call_id.filter(|call_id| !call_id.is_empty()) {
            Some(call_id) => self.attach_for(id, call_id).await.map(Some),
            None => self.attach(id).await.map(Some),
        }
    }
}

/// An error response: a status and `{"detail": ...}`.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    detail: String,
}

impl ApiError {
    fn bad_request(detail: impl Into<String>) -> Self {
        Self {
            status: StatusCode::BAD_REQUEST,
            detail: detail.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(ErrorBody {
                detail: self.detail,
            }),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        let status = match &error {
            StoreError::UnknownTask(_)
            | StoreError::UnknownEvent { .. }
            | StoreError::UnknownTool { .. } => StatusCode::NOT_FOUND,
            StoreError::NotAToolCall(_) => StatusCode::BAD_REQUEST,
            StoreError::AlreadyAnswered(_)
            | StoreError::NotWaiting(_)
            | StoreError::AlreadyAttached(_)
            | StoreError::Finished { .. } => StatusCode::CONFLICT,
            // A shared store that is down (Redis) is as temporary as a full one.
            StoreError::Full(_)
            | StoreError::FullBytes(_)
            | StoreError::Backend(_)
            | StoreError::Unreachable(_) => StatusCode::SERVICE_UNAVAILABLE,
            StoreError::TooManyTasks(_) | StoreError::OwnerBudget(_) => {
                StatusCode::TOO_MANY_REQUESTS
            }
            StoreError::TaskBudget(_) => StatusCode::PAYLOAD_TOO_LARGE,
        };
        Self {
            status,
            detail: crewline_core::error_chain(&error),
        }
    }
}

/// Parses a JSON body with an error that says what is wrong and where.
fn parse_body<T: DeserializeOwned>(body: &[u8], what: &str) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|error| ApiError::bad_request(format!("malformed {what} JSON: {error}")))
}

fn task_response(task: TaskSnapshot, events: Vec<crate::wire::TaskEvent>) -> TaskResponse {
    let mut extra = Map::new();
    if let Some(text) = task.task {
        extra.insert("task".to_owned(), Value::String(text));
    }
    TaskResponse {
        id: task.id,
        status: task.status,
        output: task.output,
        events,
        extra,
    }
}

async fn create_task(
    State(api): State<TaskApi>,
    Extension(principal): Extension<Principal>,
    body: Bytes,
) -> Result<Json<Envelope<TaskResponse>>, ApiError> {
    let mut request: TaskRequest = parse_body(&body, "task request")?;
    let mut check = ToolRegistry::new();
    for spec in &mut request.custom_tools {
        spec.inputs = inputs::input_schema(&spec.inputs).map_err(|error| {
            ApiError::bad_request(format!("custom tool `{}`: {error}", spec.name))
        })?;
        if let Some(timeout) = spec.timeout_ms
            && (timeout == 0 || Duration::from_millis(timeout) > MAX_TOOL_TIMEOUT)
        {
            return Err(ApiError::bad_request(format!(
                "custom tool `{}`: timeout_ms must be between 1 and {}",
                spec.name,
                MAX_TOOL_TIMEOUT.as_millis()
            )));
        }
        check
            .register(tool::SpecCheck(spec.clone()))
            .map_err(|error| ApiError::bad_request(format!("custom_tools: {error}")))?;
    }
    let task = api
        .store
        .create(principal.name(), request.task, request.custom_tools)
        .await?;
    tracing::info!(task_id = %task.id, tools = task.custom_tools.len(), "task created");
    Ok(Json(Envelope {
        r: task_response(task, Vec::new()),
    }))
}

/// Reads `name` from the query: an integer (or a float, floored) of at least 0.
fn query_number(query: &HashMap<String, String>, name: &str) -> Result<Option<u64>, ApiError> {
    let Some(text) = query.get(name) else {
        return Ok(None);
    };
    if let Ok(number) = text.parse::<u64>() {
        return Ok(Some(number));
    }
    match text.parse::<f64>() {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(number) if number.is_finite() && number >= 0.0 => Ok(Some(number as u64)),
        _ => Err(ApiError::bad_request(format!(
            "`{name}` must be a non-negative number of milliseconds, not `{text}`"
        ))),
    }
}

/// The query's `key=value` pairs, percent-decoded (`form_urlencoded`, as browsers and HTTP
/// clients encode them); a key given twice keeps its last value.
fn parse_query(raw: Option<&str>) -> HashMap<String, String> {
    form_urlencoded::parse(raw.unwrap_or_default().as_bytes())
        .filter(|(key, _)| !key.is_empty())
        .map(|(key, value)| (key.into_owned(), value.into_owned()))
        .collect()
}

/// Checks that the task `id` is `principal`'s: another caller's task is answered as unknown,
/// so a key never learns of, reads or answers another key's tasks.
async fn own_task(api: &TaskApi, id: &str, principal: &Principal) -> Result<(), ApiError> {
    let task = api.store.get(id).await?;
    if task.owner == principal.name() {
        Ok(())
    } else {
        Err(StoreError::UnknownTask(id.to_owned()).into())
    }
}

async fn poll_task(
    State(api): State<TaskApi>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    own_task(&api, &id, &principal).await?;
    let query = parse_query(raw.as_deref());
    let after = query_number(&query, "event_t")?.unwrap_or(0);
    let wait = query_number(&query, "wait_ms")?
        .map_or(Duration::ZERO, Duration::from_millis)
        .min(api.max_wait);
    let polled = api.store.poll(&id, after, wait).await?;
    // Smooth's convention: 202 while the task runs, 200 once it has finished.
    let status = if polled.task.status.is_terminal() {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    let body = Envelope {
        r: task_response(polled.task, polled.events),
    };
    Ok((status, Json(body)).into_response())
}

async fn post_event(
    State(api): State<TaskApi>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Json<Envelope<EventAck>>, ApiError> {
    own_task(&api, &id, &principal).await?;
    let event: EventRequest = parse_body(&body, "event")?;
    if event.name != TOOL_CALL {
        return Err(ApiError::bad_request(format!(
            "event `{}` is not supported here: only `tool_call` answers are accepted",
            event.name
        )));
    }
    let Some(event_id) = event.id else {
        return Err(ApiError::bad_request(
            "a tool_call answer needs the `id` of the tool_call event it answers",
        ));
    };
    let answer: ToolAnswer = serde_json::from_value(event.payload).map_err(|error| {
        ApiError::bad_request(format!(
            "a tool_call answer's payload is {{\"code\": 200|400|500, \"output\": ...}}: {error}"
        ))
    })?;
    if !matches!(answer.code, 200 | 400 | 500) {
        return Err(ApiError::bad_request(format!(
            "payload.code must be 200 (success), 400 (an error the agent can correct) or 500 \
             (a failure), not {}",
            answer.code
        )));
    }
    api.store.answer(&id, &event_id, answer).await?;
    Ok(Json(Envelope {
        r: EventAck { id: event_id },
    }))
}

async fn cancel_task(
    State(api): State<TaskApi>,
    Extension(principal): Extension<Principal>,
    Path(id): Path<String>,
) -> Result<Json<Envelope<TaskResponse>>, ApiError> {
    own_task(&api, &id, &principal).await?;
    let task = api.store.finish(&id, TaskStatus::Cancelled, None).await?;
    Ok(Json(Envelope {
        r: task_response(task, Vec::new()),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_numbers_accept_integers_and_floats_only() {
        let query = parse_query(Some("event_t=12&wait_ms=1.9&bad=x&flag"));
        assert_eq!(query_number(&query, "event_t").unwrap(), Some(12));
        assert_eq!(query_number(&query, "wait_ms").unwrap(), Some(1));
        assert_eq!(query_number(&query, "missing").unwrap(), None);
        assert!(query_number(&query, "bad").is_err());
        assert!(query.contains_key("flag"));
    }

    #[test]
    fn query_values_are_percent_decoded() {
        let query = parse_query(Some(
            "event_t=%31%32&wait_ms=2%2E5&twice=1&twice=7&note=a+b%26c",
        ));
        assert_eq!(query_number(&query, "event_t").unwrap(), Some(12));
        assert_eq!(query_number(&query, "wait_ms").unwrap(), Some(2));
        assert_eq!(query_number(&query, "twice").unwrap(), Some(7));
        assert_eq!(query.get("note").map(String::as_str), Some("a b&c"));
        // A value that decodes to something else than a number is still refused, by name.
        let query = parse_query(Some("wait_ms=1%20s"));
        let error = query_number(&query, "wait_ms").unwrap_err();
        assert!(format!("{error:?}").contains("wait_ms"), "{error:?}");
    }
}

//! [`RemoteTool`]: a crew's tool whose code runs on the client that registered it.

use std::{
    fmt,
    sync::{
        Arc, Mutex, PoisonError,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use crewline_core::{Context, Message};
use crewline_tools::{
    CutShort, Exports, RegistryError, Target, Tool, ToolError, ToolPolicy, ToolRegistry,
};
use serde_json::Value;

use super::store::{StoreError, TaskStore, Withdrawn};
use crate::wire::{CustomTool, TaskEvent, TaskStatus, ToolAnswer};

/// The most bytes of JSON a task's output may hold: what a call concluded, not its transcript.
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Why [`TaskOutput::set`] refused an output.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("a task's output may hold at most {max} bytes of JSON; this one holds {size}")]
pub struct OutputTooLarge {
    /// The output's size.
    pub size: usize,
    /// [`MAX_OUTPUT_BYTES`].
    pub max: usize,
}

/// What a call concluded, which its task finishes with (`output` in `GET /task/{id}`, what
/// Smooth's SDK returns from `task.result().output`); shared by the call's code, cheap to clone.
///
/// The crew [`set`](Self::set)s it (a result, a structured record); when it sets nothing, the
/// output is the agent's last reply, as text, once [`record_last_reply`](Self::record_last_reply)
/// saw the conversation (wire it to `AgentBuilder::on_call_end`), and `null` if the agent never
/// spoke.
#[derive(Clone, Default)]
pub struct TaskOutput {
    state: Arc<Mutex<OutputState>>,
}

#[derive(Default)]
struct OutputState {
    set: Option<Value>,
    last_reply: Option<String>,
}

impl fmt::Debug for TaskOutput {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TaskOutput")
            .field("output", &self.get())
            .finish()
    }
}

impl TaskOutput {
    fn state(&self) -> std::sync::MutexGuard<'_, OutputState> {
        // Every update is one assignment: a poisoned lock still holds consistent data.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The call's conclusion, replacing any before it; refused over [`MAX_OUTPUT_BYTES`].
    pub fn set(&self, output: impl Into<Value>) -> Result<(), OutputTooLarge> {
        let output = output.into();
        let size = super::store::json_len(&output);
        if size > MAX_OUTPUT_BYTES {
            return Err(OutputTooLarge {
                size,
                max: MAX_OUTPUT_BYTES,
            });
        }
        self.state().set = Some(output);
        Ok(())
    }

    /// Notes the agent's last reply in `context` (the default output), cut at a character
    /// boundary to fit [`MAX_OUTPUT_BYTES`].
    pub fn record_last_reply(&self, context: &Context) {
        let reply = context
            .messages()
            .iter()
            .rev()
            .find_map(|message| match message {
                Message::Assistant {
                    content: Some(text),
                    ..
                } if !text.trim().is_empty() => Some(text.trim()),
                _ => None,
            });
        let Some(reply) = reply else { return };
        // Room for the quotes and escapes of the JSON string.
        let mut end = reply.len().min(MAX_OUTPUT_BYTES / 2);
        while !reply.is_char_boundary(end) {
            end -= 1;
        }
        self.state().last_reply = Some(reply[..end].to_owned());
    }

    /// What the task would finish with now: the output set, else the last reply noted.
    pub fn get(&self) -> Option<Value> {
        let state = self.state();
        state
            .set
            .clone()
            .or_else(|| state.last_reply.clone().map(Value::String))
    }
}

/// How a call holds its task: the attachment's token, its lease (renewed while the call
/// lives), and how long a dropped call's task waits for the same call to re-attach it.
#[derive(Debug, Clone)]
pub(crate) struct Holding {
    pub(crate) token: String,
    pub(crate) lease: Duration,
    pub(crate) grace: Duration,
}

/// Holds the task while the call lives (renewing its lease), and finishes it when the last of
/// its tools is dropped (the call has ended), with what the call concluded, unless the same
/// call re-attached it meanwhile.
struct Lease {
    store: Arc<dyn TaskStore>,
    task_id: String,
    output: TaskOutput,
    holding: Option<Holding>,
    renewal: Option<tokio::task::AbortHandle>,
    /// Set once another attachment took the task: this call's tools are no longer its.
    lost: Arc<AtomicBool>,
}

impl Lease {
    /// Renews `holding`'s lease every third of it until dropped or the task is lost.
    fn renew(
        store: Arc<dyn TaskStore>,
        task_id: String,
        holding: &Holding,
        lost: Arc<AtomicBool>,
    ) -> tokio::task::AbortHandle {
        let (token, lease) = (holding.token.clone(), holding.lease);
        let every = (lease / 3).max(Duration::from_millis(10));
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                match store.renew(&task_id, &token, lease).await {
                    Ok(()) => {}
                    // The store may come back before the lease lapses.
                    Err(error @ (StoreError::Backend(_) | StoreError::Unreachable(_))) => {
                        tracing::warn!(error = %crewline_core::ErrorChain(&error), task_id, "task lease not renewed");
                    }
                    Err(error) => {
                        tracing::warn!(error = %crewline_core::ErrorChain(&error), task_id, "task lost: another call attached it");
                        lost.store(true, Ordering::SeqCst);
                        return;
                    }
                }
            }
        })
        .abort_handle()
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(renewal) = self.renewal.take() {
            renewal.abort();
        }
        let (store, task_id) = (Arc::clone(&self.store), std::mem::take(&mut self.task_id));
        let output = self.output.get();
        let holding = self.holding.take();
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    let finished = match &holding {
                        Some(holding) => {
                            // A dropped socket may be the call reconnecting: its task waits a
                            // moment for the same call to attach it again.
                            tokio::time::sleep(holding.grace).await;
                            store
                                .release(&task_id, &holding.token, TaskStatus::Done, output)
                                .await
                        }
                        None => store
                            .finish(&task_id, TaskStatus::Done, output)
                            .await
                            .map(|_| true),
                    };
                    match finished {
                        Ok(true) => {}
                        Ok(false) => {
                            tracing::debug!(task_id, "task left to the call that re-attached it")
                        }
                        // The store itself failed: the task is released when its lease lapses.
                        Err(error @ (StoreError::Backend(_) | StoreError::Unreachable(_))) => {
                            tracing::warn!(error = %crewline_core::ErrorChain(&error), task_id, "task not finished at call end");
                        }
                        Err(error) => {
                            tracing::debug!(error = %crewline_core::ErrorChain(&error), task_id, "task not finished at call end");
                        }
                    }
                });
            }
            Err(_) => tracing::warn!(task_id, "call ended outside a runtime; task left running"),
        }
    }
}

/// A tool of a crew whose calls are answered by the client of a task: a call becomes a
/// `tool_call` event the client polls for, and waits (up to the tool's timeout) for the
/// client's `POST /task/{id}/event`.
///
/// Answers map to results: 200 is the result; 400 is a tool error the model can correct
/// (`ToolArgsInvalid` when the client says so in `output.error.kind`, else `ToolError`); 500
/// is a failure on the client's side.
///
/// Without an answer, the model is told "not called" only when that is certain: the store
/// refused the call, or the call was [withdrawn](TaskStore::withdraw) before any poll
/// returned it. Once a poll may have handed it to the client (no answer within the tool's
/// timeout, its task ended, the store failed or froze after the call was sent), the model
/// reads `OutcomeUnknown`: it may have run, and must not be run again.
///
/// The same holds when the caller barges in (the executor drops the call, see
/// [`CutShort`]): a call no client took is withdrawn and reads `Cancelled`; one a client
/// took reads `OutcomeUnknown`, and its late answer is refused; one answered reads its
/// answer. A store that cannot tell at once ([`TaskStore::withdraw_now`]: Redis needs a round
/// trip) reads `OutcomeUnknown` once the call was sent, and withdraws it behind.
pub struct RemoteTool {
    spec: CustomTool,
    timeout: Duration,
    store: Arc<dyn TaskStore>,
    task_id: String,
    _lease: Arc<Lease>,
}

impl fmt::Debug for RemoteTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteTool")
            .field("name", &self.spec.name)
            .field("task_id", &self.task_id)
            .field("timeout", &self.timeout)
            .finish()
    }
}

#[async_trait]
impl Tool for RemoteTool {
    fn name(&self) -> &str {
        &self.spec.name
    }

    fn description(&self) -> &str {
        &self.spec.description
    }

    fn parameters(&self) -> Value {
        self.spec.inputs.clone()
    }

    fn policy(&self) -> ToolPolicy {
        // The client's tool is the crew's to call; offering it onwards (MCP, other remote
        // agents) would route one client's code to strangers.
        ToolPolicy::default()
            .timeout(self.timeout + WITHDRAW_TIMEOUT)
            .exports(Exports::only(&[Target::Crew]))
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        if self._lease.lost.load(Ordering::SeqCst) {
            return Err(ToolError::new(
                "the remote tool was not called: this call no longer holds its task (another \
                 call attached it)",
            ));
        }
        let store = self.store.as_ref();
        // Cut short from here on (a barge-in), the call may have reached the client: the
        // model must not read "cancelled" unless the withdraw below says no client took it.
        let cut = CutShort::current();
        if let Some(cut) = &cut {
            cut.reads(Err(unknown(CUT_AFTER_SENT)));
        }
        let (event, mut waiting) = self.emit(arguments, cut).await.map_err(|error| {
            let message = match error {
                // The request may have reached the store, and a poller may have taken
                // the call before the reply was lost: it may run.
                StoreError::Backend(_) => return unknown(UNKNOWN_STORE).with_detail(error),
                StoreError::TaskBudget(_)
                | StoreError::OwnerBudget(_)
                | StoreError::FullBytes(_) => {
                    "the remote tool was not called: its task holds as much as it may"
                }
                StoreError::UnknownTool { .. } => {
                    "the remote tool was not called: its client never registered it"
                }
                StoreError::Unreachable(_) => {
                    "the remote tool was not called: the task store is unavailable"
                }
                _ => "the remote tool is not available: its client's task has ended",
            };
            ToolError::new(message).with_detail(error)
        })?;
        let deadline = tokio::time::Instant::now() + self.timeout;
        let answer = loop {
            match tokio::time::timeout_at(deadline, store.wait_answer(&self.task_id, &event.id))
                .await
            {
                // A store that cannot be read right now (Redis frozen or restarting) may come
                // back before the deadline, with the client's answer.
                Ok(Err(StoreError::Backend(_) | StoreError::Unreachable(_))) => {
                    let now = tokio::time::Instant::now();
                    if now >= deadline {
                        break None;
                    }
                    tokio::time::sleep_until((now + STORE_RETRY).min(deadline)).await;
                }
                Ok(answer) => break Some(answer),
                Err(_) => break None,
            }
        };
        let error = match answer {
            Some(Ok(answer)) => {
                waiting.answered = true;
                return result_of(answer);
            }
            // The task ended while the call waited: whether its client ran it is the
            // withdraw's to say.
            Some(Err(StoreError::NotWaiting(_))) | None => {
                let ended = answer.is_some();
                let withdrawn = tokio::time::timeout(
                    WITHDRAW_TIMEOUT,
                    store.withdraw(&self.task_id, &event.id),
                )
                .await;
                waiting.answered = withdrawn.is_ok();
                return match withdrawn {
                    Ok(Ok(Withdrawn::Answered(answer))) => result_of(answer),
                    Ok(Ok(Withdrawn::NeverHandedOut)) if ended => Err(ToolError::new(
                        "the remote tool was not called: its client's task ended first",
                    )),
                    Ok(Ok(Withdrawn::NeverHandedOut)) => Err(ToolError::new(format!(
                        "the remote tool was not called: its client did not take the call \
                         within {}",
                        spoken(self.timeout)
                    ))),
                    Ok(Ok(_)) if ended => Err(unknown(
                        "the remote tool's client received the call, then its task ended \
                         without an answer: it may have run. Do not call it again; tell the \
                         user it is not known whether it was done",
                    )),
                    Ok(Ok(_)) => Err(unknown(&format!(
                        "the remote tool's client received the call but did not answer within \
                         {}: it may have run. Do not call it again; tell the user it is not \
                         known whether it was done",
                        spoken(self.timeout)
                    ))),
                    Ok(Err(error)) => Err(unknown(UNKNOWN_STORE).with_detail(error)),
                    Err(_) => Err(unknown(UNKNOWN_STORE)),
                };
            }
            Some(Err(error)) => error,
        };
        // The call's state is gone (its task expired, or its answer was taken elsewhere):
        // it was emitted, so it may have run.
        waiting.answered = true;
        Err(
            unknown("the remote tool's answer was lost: it may have run. Do not call it again")
                .with_detail(error),
        )
    }
}

impl RemoteTool {
    /// Emits the call for the client to take, and the guard that withdraws it if this call is
    /// dropped before its answer. The emit runs as a task of its own that makes the guard as
    /// soon as the store has the call: a barge-in that drops this call while the store is
    /// writing it (the store has it, a client may take it, its id is not back here yet) still
    /// withdraws it, as a cut call is withdrawn; otherwise it would wait in the store, and take
    /// a late answer, forever.
    async fn emit(
        &self,
        arguments: Value,
        cut: Option<CutShort>,
    ) -> Result<(TaskEvent, Waiting), StoreError> {
        let (sender, receiver) = tokio::sync::oneshot::channel();
        let store = Arc::clone(&self.store);
        let (task_id, tool) = (self.task_id.clone(), self.spec.name.clone());
        tokio::spawn(async move {
            let emitted = store
                .emit_tool_call(&task_id, &tool, arguments)
                .await
                .map(|event| {
                    let waiting = Waiting {
                        store: Arc::clone(&store),
                        task_id,
                        event_id: event.id.clone(),
                        answered: false,
                        cut,
                    };
                    (event, waiting)
                });
            // Not taken (the call was dropped meanwhile): the guard drops here, or with the
            // channel, and withdraws the call.
            let _ = sender.send(emitted);
        });
        receiver.await.unwrap_or_else(|_| {
            // The emit's task panicked or its runtime is shutting down: whether the store
            // holds the call is not known.
            Err(StoreError::Backend(crewline_core::ErrorDetail::new(
                "the tool call's emit did not finish",
            )))
        })
    }
}

/// What the model reads when the caller interrupted once the call was sent, and whether a
/// client took it cannot be told at once (a shared store needs a round trip).
const CUT_AFTER_SENT: &str = "the caller interrupted after the remote tool's call was sent to \
                              its client: it may have run. Do not call it again; tell the \
                              user it is not known whether it was done";

/// What the model reads when the caller interrupted once the client took the call.
const CUT_AFTER_TAKEN: &str = "the caller interrupted after the remote tool's client took the \
                               call: it may have run. Do not call it again; tell the user it \
                               is not known whether it was done";

/// What the model reads when the store failed after the call may have been handed out.
const UNKNOWN_STORE: &str = "the task store failed after the remote tool's call may have \
                             reached its client: it may have run. Do not call it again; tell \
                             the user it is not known whether it was done";

/// How long a remote tool waits before reading its answer again after the store failed.
const STORE_RETRY: Duration = Duration::from_millis(250);

/// The most a remote tool spends withdrawing its call once its time is up: a Redis command's
/// reply timeout (5 s) and a little more. The executor's own timeout for the tool is its
/// timeout plus this, so the tool (which knows whether its call was handed out) speaks first.
pub const WITHDRAW_TIMEOUT: Duration = Duration::from_secs(6);

/// `duration` as the model reads it: `300 ms`, `30 s`.
fn spoken(duration: Duration) -> String {
    if duration < Duration::from_secs(1) {
        format!("{} ms", duration.as_millis())
    } else {
        format!("{} s", duration.as_secs())
    }
}

/// A tool error for a call that may or may not have run.
fn unknown(message: &str) -> ToolError {
    ToolError::outcome_unknown(message)
}

/// Withdraws the call if its future is dropped before the answer (a barge-in, the
/// executor's timeout), and tells the executor what that means for the model.
struct Waiting {
    store: Arc<dyn TaskStore>,
    task_id: String,
    event_id: String,
    answered: bool,
    /// What the call reads if it is cut short (set to "may have run" before the emit).
    cut: Option<CutShort>,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if self.answered {
            return;
        }
        let said = match self.store.withdraw_now(&self.task_id, &self.event_id) {
            // No client took it, and none ever will: cancelled, as the executor says.
            Some(Withdrawn::NeverHandedOut) => None,
            Some(Withdrawn::HandedOut) => Some(Err(unknown(CUT_AFTER_TAKEN))),
            Some(Withdrawn::Answered(answer)) => Some(result_of(answer)),
            None => {
                // The store cannot tell at once: the model reads that it may have run (set
                // before the emit), and the call is withdrawn in the background so that no
                // client takes it from now on.
                match tokio::runtime::Handle::try_current() {
                    Ok(runtime) => {
                        let store = Arc::clone(&self.store);
                        let (task_id, event_id) =
                            (self.task_id.to_owned(), self.event_id.to_owned());
                        runtime.spawn(async move {
                            let withdrawn = tokio::time::timeout(
                                WITHDRAW_TIMEOUT,
                                store.withdraw(&task_id, &event_id),
                            )
                            .await;
                            if !matches!(withdrawn, Ok(Ok(_))) {
                                tracing::debug!(task_id, event_id, "cut call not withdrawn");
                                store.abandon(&task_id, &event_id);
                            }
                        });
                    }
                    Err(_) => self.store.abandon(&self.task_id, &self.event_id),
                }
                return;
            }
        };
        if let Some(cut) = &self.cut {
            match said {
                Some(outcome) => cut.reads(outcome),
                None => cut.clear(),
            }
        }
    }
}

/// The tool's result for the client's answer.
fn result_of(answer: ToolAnswer) -> Result<Value, ToolError> {
    match answer.code {
        200..=299 => Ok(answer.output),
        400..=499 => {
            let message = answer.error_message();
            if answer.error_kind() == Some("ToolArgsInvalid") {
                Err(ToolError::invalid_arguments(message))
            } else {
                Err(ToolError::new(message))
            }
        }
        _ => Err(ToolError::new(format!(
            "the tool failed on the client's side: {}",
            answer.error_message()
        ))),
    }
}

/// The remote tools of one attached task, to add to the call's registry.
///
/// The task finishes (`done`) when these tools are dropped, i.e. when the call ends.
pub struct RemoteTools {
    task_id: String,
    tools: Vec<Arc<RemoteTool>>,
    lease: Arc<Lease>,
}

impl fmt::Debug for RemoteTools {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteTools")
            .field("task_id", &self.task_id)
            .field(
                "tools",
                &self.tools.iter().map(|t| t.name()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl RemoteTools {
    /// The tools of task `task_id`, per its `custom_tools`.
    pub(crate) fn new(
        store: Arc<dyn TaskStore>,
        task_id: String,
        specs: Vec<CustomTool>,
        default_timeout: Duration,
        holding: Option<Holding>,
    ) -> Self {
        let lost = Arc::new(AtomicBool::new(false));
        let renewal = holding.as_ref().map(|holding| {
            Lease::renew(
                Arc::clone(&store),
                task_id.clone(),
                holding,
                Arc::clone(&lost),
            )
        });
        let lease = Arc::new(Lease {
            store: Arc::clone(&store),
            task_id: task_id.clone(),
            output: TaskOutput::default(),
            holding,
            renewal,
            lost,
        });
        let tools = specs
            .into_iter()
            .map(|spec| {
                let timeout = spec
                    .timeout_ms
                    .map_or(default_timeout, Duration::from_millis);
                Arc::new(RemoteTool {
                    spec,
                    timeout,
                    store: Arc::clone(&store),
                    task_id: task_id.clone(),
                    _lease: Arc::clone(&lease),
                })
            })
            .collect();
        Self {
            task_id,
            tools,
            lease,
        }
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
    }

    /// What the task finishes with when the call ends: set it, or let it default to the
    /// agent's last reply (see [`TaskOutput`]).
    pub fn output(&self) -> TaskOutput {
        self.lease.output.clone()
    }

    /// The tools' names.
    pub fn names(&self) -> Vec<&str> {
        self.tools.iter().map(|t| t.name()).collect()
    }

    /// The tools, to register one by one.
    pub fn tools(&self) -> Vec<Arc<dyn Tool>> {
        self.tools
            .iter()
            .map(|t| Arc::clone(t) as Arc<dyn Tool>)
            .collect()
    }

    /// Adds every tool to `registry`; if one cannot be added (a name clash), none is.
    pub fn register_into(&self, registry: &mut ToolRegistry) -> Result<(), RegistryError> {
        let mut updated = registry.clone();
        for tool in self.tools() {
            updated.register_arc(tool)?;
        }
        *registry = updated;
        Ok(())
    }
}

/// A stand-in used to check `custom_tools` with the registry's own rules at task creation.
pub(crate) struct SpecCheck(pub(crate) CustomTool);

#[async_trait]
impl Tool for SpecCheck {
    fn name(&self) -> &str {
        &self.0.name
    }

    fn description(&self) -> &str {
        &self.0.description
    }

    fn parameters(&self) -> Value {
        self.0.inputs.clone()
    }

    async fn call(&self, _arguments: Value) -> Result<Value, ToolError> {
        Err(ToolError::new("a tool specification cannot be called"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn answers_become_results_by_code() {
        assert_eq!(
            result_of(ToolAnswer::ok(json!({"t": 1}))).unwrap(),
            json!({"t": 1})
        );
        let invalid = result_of(ToolAnswer::tool_error(json!({"error": {
            "kind": "ToolArgsInvalid", "message": "city is required"}})))
        .unwrap_err();
        assert!(invalid.is_invalid_arguments());
        assert_eq!(invalid.message(), "city is required");
        let plain = result_of(ToolAnswer::tool_error(json!("no such city"))).unwrap_err();
        assert!(!plain.is_invalid_arguments());
        assert_eq!(plain.message(), "no such city");
        let failed = result_of(ToolAnswer::failure(json!("disk full"))).unwrap_err();
        assert_eq!(
            failed.message(),
            "the tool failed on the client's side: disk full"
        );
    }
}

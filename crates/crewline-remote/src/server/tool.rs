//! [`RemoteTool`]: a crew's tool whose code runs on the client that registered it.

use std::{fmt, sync::Arc, time::Duration};

use async_trait::async_trait;
use crewline_tools::{Exports, RegistryError, Target, Tool, ToolError, ToolPolicy, ToolRegistry};
use serde_json::Value;

use super::store::{StoreError, TaskStore};
use crate::wire::{CustomTool, TaskStatus, ToolAnswer};

/// Finishes the task when the last of its tools is dropped (the call has ended).
struct Lease {
    store: Arc<dyn TaskStore>,
    task_id: String,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let (store, task_id) = (Arc::clone(&self.store), std::mem::take(&mut self.task_id));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                runtime.spawn(async move {
                    if let Err(error) = store.finish(&task_id, TaskStatus::Done).await {
                        tracing::debug!(%error, task_id, "task not finished at call end");
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
/// is a failure on the client's side. No answer in time is the executor's `Timeout`.
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
            .timeout(self.timeout)
            .exports(Exports::only(&[Target::Crew]))
    }

    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        let store = self.store.as_ref();
        let event = store
            .emit_tool_call(&self.task_id, &self.spec.name, arguments)
            .await
            .map_err(|error| {
                let message = match error {
                    StoreError::TaskBudget(_)
                    | StoreError::OwnerBudget(_)
                    | StoreError::FullBytes(_) => {
                        "the remote tool was not called: its task holds as much as it may"
                    }
                    _ => "the remote tool is not available: its client's task has ended",
                };
                ToolError::new(message).with_detail(error)
            })?;
        let mut waiting = Waiting {
            store,
            task_id: &self.task_id,
            event_id: &event.id,
            answered: false,
        };
        let answer = store.wait_answer(&self.task_id, &event.id).await;
        waiting.answered = true;
        match answer {
            Ok(answer) => result_of(answer),
            Err(error @ StoreError::NotWaiting(_)) => Err(ToolError::new(
                "the client cancelled its task; the tool is no longer available",
            )
            .with_detail(error)),
            Err(error) => {
                Err(ToolError::new("the remote tool's answer was lost").with_detail(error))
            }
        }
    }
}

/// Abandons the call if its future is dropped before the answer (timeout, barge-in).
struct Waiting<'a> {
    store: &'a dyn TaskStore,
    task_id: &'a str,
    event_id: &'a str,
    answered: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.store.abandon(self.task_id, self.event_id);
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
    _lease: Arc<Lease>,
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
    ) -> Self {
        let lease = Arc::new(Lease {
            store: Arc::clone(&store),
            task_id: task_id.clone(),
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
            _lease: lease,
        }
    }

    /// The task's id.
    pub fn task_id(&self) -> &str {
        &self.task_id
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

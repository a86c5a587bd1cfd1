//! What a replica leaves in Redis when its process is killed with SIGKILL (no drop, no
//! release, no renewal ever again), shown with a real process: this test binary runs itself
//! again in a child role, and the test kills the child.
//!
//! - A remote-tool task the dead replica held: the same call id re-attaches it at once from
//!   another process, and its tools work there; another call takes a task only once its
//!   lease lapsed (1 s here, 10 s by default), not after the 4 h age limit.
//! - An approval the dead replica's caller waited on: a decision given after the kill is
//!   collected by the call's new process, which runs the tool once; a reconnect before the
//!   decision waits on the dead replica's question instead of asking a second one.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::{
    io::{BufRead, BufReader, Write},
    process::{Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::{Duration, Instant},
};

use async_trait::async_trait;
use common::RedisServer;
use crewline_core::{ToolCall, ToolResult};
use crewline_redis::{RedisApproval, RedisConfig, RedisStore};
use crewline_remote::{
    AttachError, StoreError, StoreLimits, TaskApi, TaskStore,
    wire::{CustomTool, ToolAnswer},
};
use crewline_tools::{
    CallContext, ExecuteOptions, Executor, SessionScope, Tool, ToolError, ToolPolicy, ToolRegistry,
    executor::approval::{ApprovalDecision, ApprovalRequest},
};
use serde_json::{Value, json};

/// Set in a child process: its role and what it needs, separated by spaces.
const ROLE: &str = "CREWLINE_KILLED_TEST_ROLE";
/// What a child prints once it holds what the test kills it with.
const READY: &str = "killed-test: ready";
/// What the child's refund prints if it ever runs (it must not: it is killed before).
const REFUNDED: &str = "killed-test: refunded";
/// The attach lease of these tests (the default is 10 s).
const LEASE: Duration = Duration::from_secs(1);
/// Generous: only reached when a test is about to fail.
const DEADLOCK: Duration = Duration::from_secs(60);
/// The prefix of every key these tests write.
const PREFIX: &str = "killed:";

/// A child process running this binary's test `role` with `ROLE` set to `arguments`;
/// killed (SIGKILL) when dropped.
struct Child {
    process: std::process::Child,
}

impl Child {
    /// Starts the child and waits until it printed [`READY`].
    async fn ready(role: &str, arguments: String) -> Self {
        let mut process = Command::new(std::env::current_exe().expect("this test binary"))
            .args([role, "--exact", "--nocapture", "--test-threads=1"])
            .env(ROLE, arguments)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("the test binary runs again as a child");
        let stdout = process.stdout.take().expect("its stdout");
        let ready = tokio::task::spawn_blocking(move || {
            let mut lines = BufReader::new(stdout).lines();
            let ready = lines
                .by_ref()
                .map_while(Result::ok)
                .any(|l| l.contains(READY));
            // Keep the pipe drained so the child never blocks on a write.
            std::thread::spawn(move || for _ in lines {});
            ready
        });
        let ready = tokio::time::timeout(DEADLOCK, ready)
            .await
            .expect("the child got ready in time")
            .expect("its output was read");
        assert!(ready, "the child exited before it was ready");
        Self { process }
    }

    /// SIGKILL (`Child::kill` on unix): no polite path, nothing released or flushed.
    fn kill(mut self) {
        self.process.kill().expect("SIGKILL");
        let status = self.process.wait().expect("reaped");
        assert!(!status.success(), "killed, not exited: {status}");
    }

    /// Whether the child is still running.
    fn alive(&mut self) -> bool {
        matches!(self.process.try_wait(), Ok(None))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// This child's `ROLE` arguments, if this process is the child of `role`.
fn role(role: &str) -> Option<Vec<String>> {
    let value = std::env::var(ROLE).ok()?;
    let mut words = value.split(' ').map(str::to_owned);
    (words.next().as_deref() == Some(role)).then(|| words.collect())
}

/// Writes `line` to the parent (the child's stdout), at once.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").expect("stdout");
    out.flush().expect("stdout");
}

/// Waits forever (the child's end: the test kills it here).
async fn until_killed() {
    say(READY);
    std::future::pending::<()>().await;
}

// ---------------------------------------------------------------- remote-tool task lease

fn pay() -> Vec<CustomTool> {
    vec![CustomTool {
        name: "pay".to_owned(),
        description: "Pays a bill.".to_owned(),
        inputs: json!({"type": "object"}),
        output: String::new(),
        timeout_ms: Some(20_000),
    }]
}

async fn store(url: &str) -> RedisStore {
    RedisConfig::new(url)
        .prefix(PREFIX)
        .limits(StoreLimits::default())
        .connect()
        .await
        .expect("connected")
}

fn refused(result: &Result<crewline_remote::RemoteTools, AttachError>) -> bool {
    matches!(
        result,
        Err(AttachError::Store(StoreError::AlreadyAttached(_)))
    )
}

/// Not a test of its own: the replica `tasks_of_a_killed_replica...` starts and kills. It
/// attaches the first task for `call-A`, the second for `call-C`, then renews their leases
/// until killed.
#[tokio::test]
async fn child_replica_holding_tasks() {
    let Some(arguments) = role("tasks") else {
        return;
    };
    let [url, first, second] = &arguments[..] else {
        panic!("tasks <url> <task> <task>: {arguments:?}");
    };
    let api = TaskApi::with_store(store(url).await).attach_lease(LEASE);
    let _first = api.attach_for(first, "call-A").await.expect("attached");
    let _second = api.attach_for(second, "call-C").await.expect("attached");
    until_killed().await;
}

/// Answers the first tool call of `task` as its client does: `paid`.
async fn client_answers(store: &RedisStore, task: &str) {
    loop {
        let polled = store
            .poll(task, 0, Duration::from_secs(1))
            .await
            .expect("poll");
        if let Some(event) = polled.events.into_iter().find(|e| e.name == "tool_call") {
            store
                .answer(task, &event.id, ToolAnswer::ok(json!("paid")))
                .await
                .expect("answer");
            return;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_of_a_killed_replica_are_reattached_by_their_call_at_once_and_freed_after_the_lease()
{
    let Some(server) = RedisServer::start() else {
        return;
    };
    let b = store(&server.url()).await;
    let first = b.create("a", None, pay()).await.expect("create");
    let second = b.create("a", None, pay()).await.expect("create");
    let mut a = Child::ready(
        "killed::child_replica_holding_tasks",
        format!("tasks {} {} {}", server.url(), first.id, second.id),
    )
    .await;
    let api = TaskApi::with_store(b.clone()).attach_lease(LEASE);

    // While A lives, it renews its leases: another call is refused well past one lease.
    tokio::time::sleep(LEASE * 2).await;
    assert!(a.alive());
    assert!(refused(&api.attach_for(&second.id, "call-D").await));

    a.kill();
    let killed = Instant::now();
    // Its call reconnects to this replica: the same call id attaches its task at once...
    let reattached = api
        .attach_for(&first.id, "call-A")
        .await
        .expect("the same call re-attaches at once after the kill");
    let reattached_after = killed.elapsed();
    assert!(refused(&api.attach_for(&first.id, "call-B").await));
    // ...and its tools work here.
    let mut tools = ToolRegistry::new();
    reattached.register_into(&mut tools).expect("register");
    let call = [ToolCall::new("c1", "pay", "{}")];
    let (runs, ()) = tokio::join!(
        tools.execute(&call, ExecuteOptions::new()),
        client_answers(&b, &first.id)
    );
    assert_eq!(runs[0].result.content(), "paid");

    // Another call, for the task whose call never came back: refused while the dead
    // replica's lease lives, attached once it lapsed.
    let mut refusals = 0;
    let taken = loop {
        match api.attach_for(&second.id, "call-D").await {
            Ok(remote) => break remote,
            Err(AttachError::Store(StoreError::AlreadyAttached(_)))
                if killed.elapsed() < LEASE * 5 =>
            {
                refusals += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(error) => panic!("not freed within five leases: {error}"),
        }
    };
    let taken_after = killed.elapsed();
    eprintln!(
        "lease {LEASE:?}, SIGKILLed holder: its call re-attached after {reattached_after:?}, \
         another call took its other task after {taken_after:?}"
    );
    assert!(refusals > 0, "another call got a living lease's task");
    assert_eq!(taken.names(), ["pay"]);
}

// ------------------------------------------------------------------------------ approvals

/// A refund that needs an operator's confirmation; counts its runs and prints [`REFUNDED`].
struct Refund(Arc<AtomicUsize>);

#[async_trait]
impl Tool for Refund {
    fn name(&self) -> &str {
        "refund"
    }
    fn description(&self) -> &str {
        "Refunds the caller."
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"cents": {"type": "integer"}}})
    }
    fn policy(&self) -> ToolPolicy {
        ToolPolicy::new().confirm(true)
    }
    async fn call(&self, arguments: Value) -> Result<Value, ToolError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        say(REFUNDED);
        Ok(json!({"refunded": arguments["cents"]}))
    }
}

async fn approvals(url: &str) -> RedisApproval {
    let connection = RedisConfig::new(url)
        .prefix(PREFIX)
        .open()
        .await
        .expect("connected");
    RedisApproval::new(connection)
}

/// A replica's crew: the refund behind `approvals`, and its runs.
fn crew(approvals: RedisApproval) -> (ToolRegistry, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let executor = Executor::builder().approval(Arc::new(approvals)).build();
    let mut tools = ToolRegistry::new().with_executor(executor);
    tools.register(Refund(Arc::clone(&runs))).expect("register");
    (tools, runs)
}

/// The platform call `call` asking for a refund of $50, in its call's scope.
async fn refund(tools: &ToolRegistry, call: &str) -> ToolResult {
    let context: CallContext = tools.context().with_scope(SessionScope::for_call(call));
    let runs = tools
        .execute(
            &[ToolCall::new("c1", "refund", r#"{"cents": 5000}"#)],
            ExecuteOptions::new().in_run(context),
        )
        .await;
    runs.into_iter().next().expect("one run").result
}

/// Not a test of its own: the replica the approval tests start and kill, its caller waiting
/// (for a minute) on the operator's decision of a refund.
#[tokio::test]
async fn child_replica_waiting_for_approval() {
    let Some(arguments) = role("approval") else {
        return;
    };
    let [url, call] = &arguments[..] else {
        panic!("approval <url> <call>: {arguments:?}");
    };
    let (tools, _) = crew(approvals(url).await.wait_timeout(DEADLOCK));
    say(READY);
    let result = refund(&tools, call).await;
    // Only reached if the test failed to kill this process in time.
    say(&format!(
        "killed-test: the wait ended: {}",
        result.content()
    ));
}

/// The request the dead replica parked, once the operator sees it.
async fn parked(operator: &RedisApproval) -> ApprovalRequest {
    let deadline = Instant::now() + DEADLOCK;
    loop {
        let pending = operator.pending().await.expect("the parked calls");
        if let Some(first) = pending.into_iter().next() {
            return first;
        }
        assert!(Instant::now() < deadline, "nothing was parked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_given_after_the_waiting_replica_was_killed_is_collected_by_the_calls_new_process()
 {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = Child::ready(
        "killed::child_replica_waiting_for_approval",
        format!("approval {} call-1", server.url()),
    )
    .await;
    let operator = approvals(&server.url()).await;
    let question = parked(&operator).await;
    a.kill();
    operator
        .decide(&question.id, ApprovalDecision::Approve)
        .await
        .expect("decided after the kill");

    // The call reconnects to this replica, whose caller does not wait: it must collect the
    // decision at once. Another call asking the same is not approved by it.
    let (tools, runs) = crew(approvals(&server.url()).await.wait(false));
    let other = refund(&tools, "call-2").await;
    assert!(other.is_error(), "{}", other.content());
    let collected = refund(&tools, "call-1").await;
    assert!(!collected.is_error(), "{}", collected.content());
    assert_eq!(collected.content(), r#"{"refunded":5000}"#);
    assert_eq!(runs.load(Ordering::SeqCst), 1, "refunded once, here");
    // Used once: the model's retry is a new question.
    let again = refund(&tools, "call-1").await;
    assert!(again.is_error(), "{}", again.content());
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_reconnected_after_its_waiting_replica_was_killed_waits_on_the_same_question() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let a = Child::ready(
        "killed::child_replica_waiting_for_approval",
        format!("approval {} call-1", server.url()),
    )
    .await;
    let operator = approvals(&server.url()).await;
    let question = parked(&operator).await;
    a.kill();

    // The call reconnects here before the operator decides; its caller waits.
    let (tools, runs) = crew(approvals(&server.url()).await.wait_timeout(DEADLOCK));
    let waiting = tokio::spawn(async move {
        let result = refund(&tools, "call-1").await;
        (result, tools)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let pending = operator.pending().await.expect("pending");
    assert_eq!(
        pending.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(),
        [question.id.as_str()],
        "one question for one call"
    );
    operator
        .decide(&question.id, ApprovalDecision::Approve)
        .await
        .expect("decided");
    let (result, _tools) = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("woken by the decision")
        .expect("the caller here");
    assert!(!result.is_error(), "{}", result.content());
    assert_eq!(runs.load(Ordering::SeqCst), 1, "refunded once, here");
}

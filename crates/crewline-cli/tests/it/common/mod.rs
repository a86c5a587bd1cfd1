//! A real crew server on 127.0.0.1:0 serving the demo's weather crew, for the tests.

// Test helpers: a failed setup should panic and fail the test; not every file uses every helper.
#![allow(dead_code, unreachable_pub, clippy::unwrap_used, clippy::expect_used)]

use std::{future::Future, sync::Arc, time::Duration};

use crewline::llm::ScriptedLlm;
use crewline_examples::voice_agent::{WeatherCrew, scripted_weather_model};
use crewline_server::{CrewServer, ServerHandle};
use tokio::{net::TcpListener, task::JoinHandle};

/// A bound on each whole test, far above what it needs, so a hang fails instead of stalling CI.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(120);

/// A running crew server; stops when dropped.
pub struct TestServer {
    /// `ws://127.0.0.1:<port>/ws`.
    pub url: String,
    /// The model, whose clones share its request log.
    pub llm: ScriptedLlm,
    pub handle: ServerHandle,
    task: JoinHandle<()>,
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.handle.shutdown();
        self.task.abort();
    }
}

/// Serves the weather crew with a scripted model pausing `chunk_delay` per piece and a fast
/// weather service; `configure` may add options (e.g. a token).
pub async fn start_with(
    chunk_delay: Duration,
    configure: impl FnOnce(CrewServer) -> CrewServer,
) -> TestServer {
    let llm = scripted_weather_model(chunk_delay);
    let crew = WeatherCrew::new(Arc::new(llm.clone()), Duration::from_millis(50)).unwrap();
    let server = configure(CrewServer::new(crew.agent().clone()));
    let handle = server.handle();
    let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        server.serve(listener).await.unwrap();
    });
    TestServer {
        url: format!("ws://{addr}/ws"),
        llm,
        handle,
        task,
    }
}

/// [`start_with`] without options.
pub async fn start(chunk_delay: Duration) -> TestServer {
    start_with(chunk_delay, |server| server).await
}

/// Runs `test` under [`TEST_TIMEOUT`].
pub async fn bounded<T>(test: impl Future<Output = T>) -> T {
    tokio::time::timeout(TEST_TIMEOUT, test)
        .await
        .expect("the test took longer than its bound")
}

/// Runs the `crewline` binary with `args`, feeding `stdin` and closing it, under
/// [`TEST_TIMEOUT`] (the child is killed if it outlives it); returns (success, stdout, stderr).
pub async fn run_binary(args: &[&str], stdin: &str) -> (bool, String, String) {
    run_binary_with_env(args, stdin, &[]).await
}

/// [`run_binary`] with these environment variables set (and no `OPENAI_API_KEY` or
/// `CREWLINE_AUTH_TOKEN` from the test's own environment).
pub async fn run_binary_with_env(
    args: &[&str],
    stdin: &str,
    env: &[(&str, &str)],
) -> (bool, String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_crewline"))
        .args(args)
        .env_remove("OPENAI_API_KEY")
        .env_remove("CREWLINE_AUTH_TOKEN")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    input.write_all(stdin.as_bytes()).await.unwrap();
    // End of input: the chat finishes its queued lines and leaves.
    drop(input);
    let output = bounded(child.wait_with_output()).await.unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

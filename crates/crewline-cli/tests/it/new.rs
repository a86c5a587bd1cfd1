//! `crewline new` from the outside: the binary writes a project, refuses what it must, and
//! (with `CREWLINE_FULL_TESTS=1`) each template's project passes its own `cargo fmt --check`,
//! `cargo clippy -D warnings` and `cargo test --offline` on the first try and serves a call
//! over the real WebSocket.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{BufRead, BufReader, Write},
    path::{Path, PathBuf},
    process::{Child, Command, Output, Stdio},
    sync::mpsc,
    time::{Duration, Instant},
};

use crewline_testkit::TestCrew;
use serde_json::json;

/// The workspace's root: the crewline checkout the projects depend on by path.
fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned()
}

/// A fresh, missing directory for one test's projects.
fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("crewline-new-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Runs `crewline new ARGS...`.
fn crewline_new(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_crewline"))
        .arg("new")
        .args(args)
        .output()
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_project_is_written_and_the_next_two_commands_are_printed() {
    let root = scratch("written");
    let dir = root.join("support");
    let checkout = workspace();
    let output = crewline_new(&[
        "support-bot",
        "--template",
        "router",
        "--dir",
        dir.to_str().unwrap(),
        "--crewline-path",
        checkout.to_str().unwrap(),
    ]);
    let stdout = text(&output.stdout);
    assert!(output.status.success(), "{stdout}{}", text(&output.stderr));
    for line in [
        "Created support-bot (router template) in",
        "  Cargo.toml\n",
        "  tests/crew.rs\n",
        "  evals/crew.toml\n",
        "  kubernetes/deployment.yaml\n",
        "  .github/workflows/ci.yml\n",
        "cargo run ",
        "cargo test ",
    ] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
    assert!(
        stdout.contains(&format!("cd {}", dir.display())),
        "{stdout}"
    );
    // Dependencies by path into this checkout, the name everywhere.
    let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
    let crewline = checkout.join("crates/crewline");
    assert!(
        manifest.contains(&format!(
            "crewline = {{ path = \"{}\" }}",
            crewline.display()
        )),
        "{manifest}"
    );
    assert!(manifest.contains("name = \"support-bot\""), "{manifest}");
    let main = std::fs::read_to_string(dir.join("src/main.rs")).unwrap();
    assert!(main.contains("use support_bot::"), "{main}");
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    assert!(readme.contains("```sh\ncargo run\n```") && readme.contains("```sh\ncargo test\n```"));
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn an_invalid_name_is_refused_and_nothing_is_written() {
    let root = scratch("invalid");
    let dir = root.join("x");
    let output = crewline_new(&["2fast", "--dir", dir.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("`2fast` cannot be a crate's name: it must start with an ASCII letter"),
        "{stderr}"
    );
    assert!(!dir.exists());
}

#[test]
fn a_directory_that_holds_anything_is_never_written_into() {
    let root = scratch("not-empty");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("Cargo.toml"), "mine").unwrap();
    let output = crewline_new(&["my-crew", "--dir", root.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = text(&output.stderr);
    assert!(
        stderr.contains("already exists and is not empty"),
        "{stderr}"
    );
    assert_eq!(
        std::fs::read_to_string(root.join("Cargo.toml")).unwrap(),
        "mine"
    );
    assert_eq!(std::fs::read_dir(&root).unwrap().count(), 1);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn the_deployment_files_follow_the_workspaces_deploy_folder() {
    // The templates hold copies of deploy/ (only src/ is packaged): a change there must
    // reach them. Comments may differ; every other line matches, names substituted.
    let root = scratch("deploy");
    let output = crewline_new(&["my-crew", "--dir", root.to_str().unwrap()]);
    assert!(output.status.success(), "{}", text(&output.stderr));
    let code = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|line| !line.trim_start().starts_with('#'))
            .map(|line| {
                line.split(" #")
                    .next()
                    .unwrap_or(line)
                    .trim_end()
                    .to_owned()
            })
            .collect()
    };
    let deploy = workspace().join("deploy");
    for manifest in [
        "deployment",
        "service",
        "hpa",
        "hpa-active-sessions",
        "pdb",
        "secret.example",
    ] {
        let ours = std::fs::read_to_string(deploy.join(format!("kubernetes/{manifest}.yaml")))
            .unwrap()
            .replace("name: crewline\n", "name: my-crew\n")
            .replace(
                "app.kubernetes.io/name: crewline\n",
                "app.kubernetes.io/name: my-crew\n",
            )
            .replace(
                "image: crewline/voice-agent:latest",
                "image: my-crew:latest",
            );
        let written =
            std::fs::read_to_string(root.join(format!("kubernetes/{manifest}.yaml"))).unwrap();
        assert_eq!(code(&written), code(&ours), "kubernetes/{manifest}.yaml");
    }
    // The runtime image is the workspace's.
    let runtime = |text: &str| code(&text[text.find("FROM debian").unwrap()..]);
    let ours = std::fs::read_to_string(deploy.join("Dockerfile")).unwrap();
    let written = std::fs::read_to_string(root.join("Dockerfile")).unwrap();
    assert_eq!(runtime(&written), runtime(&ours), "Dockerfile");
    std::fs::remove_dir_all(&root).unwrap();
}

/// Kills the crew it holds when dropped, so a failed test leaves no server running.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the project's crew binary on a free port (scripted model) and returns it with its
/// WebSocket URL, read from its `crew server listening addr=…` log line.
fn start_crew(binary: &Path) -> (Running, String) {
    let mut child = Command::new(binary)
        .args(["--port", "0", "--scripted"])
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|error| panic!("could not start {}: {error}", binary.display()));
    let stderr = child.stderr.take().unwrap();
    let running = Running(child);
    let (addr_tx, addr_rx) = mpsc::channel();
    // Reads every line (so the crew never blocks on a full pipe), and sends the address.
    std::thread::spawn(move || {
        let mut seen = String::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("crew server listening")
                && let Some(addr) = line.split("addr=").nth(1)
            {
                let _ = addr_tx.send(Ok(addr.split_whitespace().next().unwrap_or("").to_owned()));
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        let _ = addr_tx.send(Err(seen));
    });
    // A bound on a hang, far above the start-up time, not a speed check.
    match addr_rx.recv_timeout(Duration::from_secs(60)) {
        Ok(Ok(addr)) => (running, format!("ws://{addr}/ws")),
        Ok(Err(log)) => panic!("the crew stopped before it listened:\n{log}"),
        Err(error) => panic!("the crew never said where it listens: {error}"),
    }
}

/// Runs `command` in `dir`, failing the test with its output when it fails.
fn run(dir: &Path, command: &mut Command) {
    let output = command.current_dir(dir).output().unwrap();
    assert!(
        output.status.success(),
        "{command:?} failed in {}:\n{}{}",
        dir.display(),
        text(&output.stdout),
        text(&output.stderr)
    );
}

/// The end to end check: each template's project, generated with its crewline dependencies
/// pointing at this workspace, passes what its CI runs (`cargo fmt --check`, `cargo clippy
/// --all-targets -D warnings`, `cargo test --offline` with the workspace's Cargo.lock: the same
/// versions, nothing to download), and its binary serves a call. It builds a second copy of
/// the dependencies (in `<target>/tests/crewline-new`, shared by the three templates), so it
/// runs only with `CREWLINE_FULL_TESTS=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_templates_project_passes_its_own_tests_and_serves_a_call() {
    if std::env::var_os("CREWLINE_FULL_TESTS").is_none_or(|value| value != "1") {
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: crewline new end-to-end: set CREWLINE_FULL_TESTS=1 (builds each \
             template's project and a second copy of the dependencies)"
        );
        return;
    }
    // `<target>/debug/deps/it-…`: the nested builds get a folder of the same target, since
    // this `cargo test` holds the lock of `<target>/debug`.
    let exe = std::env::current_exe().unwrap();
    let target = exe.ancestors().nth(3).unwrap().join("tests/crewline-new");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let root = scratch("e2e");
    for template in ["voice-agent", "router", "remote-tools"] {
        // One name as long as allowed: the generated code stays formatted whatever the name.
        let name = match template {
            "router" => "my-router-crew-whose-name-is-forty-chars".to_owned(),
            _ => format!("my-{template}"),
        };
        let dir = root.join(&name);
        let output = crewline_new(&[
            &name,
            "--template",
            template,
            "--dir",
            dir.to_str().unwrap(),
            "--crewline-path",
            workspace().to_str().unwrap(),
        ]);
        assert!(output.status.success(), "{}", text(&output.stderr));
        std::fs::copy(workspace().join("Cargo.lock"), dir.join("Cargo.lock")).unwrap();

        let started = Instant::now();
        run(&dir, Command::new(&cargo).args(["fmt", "--check"]));
        // What the project's CI workflow runs, in its order.
        run(
            &dir,
            Command::new(&cargo)
                .args([
                    "clippy",
                    "--offline",
                    "--all-targets",
                    "--",
                    "-D",
                    "warnings",
                ])
                .env("CARGO_TARGET_DIR", &target),
        );
        run(
            &dir,
            Command::new(&cargo)
                .args(["test", "--offline"])
                .env("CARGO_TARGET_DIR", &target)
                .env_remove("OPENAI_API_KEY")
                .env_remove("OPENAI_BASE_URL"),
        );
        // How long it took, for the report (no assertion: speed goals live in benches).
        let _ = writeln!(
            std::io::stderr(),
            "crewline new end-to-end: {template}: fmt, clippy and cargo test in {:.0?}",
            started.elapsed()
        );

        // The README's first command: the crew serves a call (`cargo test` built the binary).
        let (_crew, url) = start_crew(&target.join("debug").join(&name));
        let crew = TestCrew::at(url);
        let mut call = crew.call().await.unwrap();
        let turn = call.say("Hi!").await.unwrap();
        turn.assert_no_errors().assert_no_tool_calls();
        assert!(!turn.text().is_empty(), "{template}: {turn}");
        if template == "voice-agent" {
            let turn = call.say("What's the weather in Paris?").await.unwrap();
            turn.assert_tool_call("get_weather", json!({"city": "Paris"}))
                .succeeded();
        }
        call.hang_up().await.unwrap();
    }
    std::fs::remove_dir_all(&root).unwrap();
}

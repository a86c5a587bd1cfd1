//! The playground in a real browser: Debian's headless Chromium driven through chromedriver
//! (WebDriver, with fantoccini), against the demo weather crew served on loopback with its
//! scripted model and a token.
//!
//! Where `chromium` or `chromedriver` is missing, each test prints a note and passes, unless
//! `CREWLINE_REQUIRE_CHROMIUM` is set (CI sets it once it has installed them): then it fails.
//! Each test saves a screenshot under `<target>/playground-screenshots/`.
//!
//! The tests take turns with one browser at a time (a 2-core machine runs one Chromium well).

use std::{
    net::SocketAddr,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex},
    time::Duration,
};

use crewline_examples::voice_agent::{self, WEATHER_SERVICE_DELAY, WeatherCrew};
use crewline_playground::Playground;
use crewline_server::{CrewServer, model::ModelChoice};
use fantoccini::{Client, ClientBuilder, Locator};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::{net::TcpListener, task::JoinHandle};
use tokio_tungstenite::tungstenite::Message;

/// The variable that makes a missing Chromium a failure instead of a skipped test.
const REQUIRE_VARIABLE: &str = "CREWLINE_REQUIRE_CHROMIUM";
const TOKEN: &str = "playground-test-token";
/// The longest wait for something the page should show.
const WAIT: Duration = Duration::from_secs(20);

/// One browser at a time.
static BROWSER_TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Where a program is: `/usr/bin/NAME` (Debian's packages), else the first on `PATH`.
fn program(name: &str) -> Option<PathBuf> {
    let debian = Path::new("/usr/bin").join(name);
    if debian.is_file() {
        return Some(debian);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// Chromium and chromedriver, when both are here; a missing one fails the test when
/// [`REQUIRE_VARIABLE`] is set, and is a note otherwise.
fn chromium_available(test: &str) -> Option<(PathBuf, PathBuf)> {
    let (chromium, driver) = (program("chromium"), program("chromedriver"));
    if let (Some(chromium), Some(driver)) = (&chromium, &driver) {
        return Some((chromium.clone(), driver.clone()));
    }
    let missing: Vec<&str> = [("chromium", &chromium), ("chromedriver", &driver)]
        .into_iter()
        .filter(|(_, path)| path.is_none())
        .map(|(name, _)| name)
        .collect();
    assert!(
        std::env::var_os(REQUIRE_VARIABLE).is_none(),
        "{REQUIRE_VARIABLE} is set but {} is not installed",
        missing.join(" and ")
    );
    // Past the test harness's capture, so that every run shows what it skipped.
    {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED: {test}: {} not installed (apt-get install chromium chromium-driver)",
            missing.join(" and ")
        );
    }
    None
}

/// This test's browser, once Chromium is here and it is this test's turn: `None` (the test
/// skips with a note) where Chromium is missing and not required.
async fn browser_for(
    test: &'static str,
) -> Option<(tokio::sync::MutexGuard<'static, ()>, Browser)> {
    let programs = chromium_available(test)?;
    let turn = BROWSER_TURN.lock().await;
    Some((turn, Browser::start(test, programs).await))
}

/// Serves `playground` on a free loopback port: the page's address and the serving task.
async fn serve_page(
    playground: Playground,
) -> (
    String,
    JoinHandle<Result<(), crewline_playground::PlaygroundError>>,
) {
    let listener = crewline_playground::listen(0).await.expect("a port");
    let page = crewline_playground::page_url(listener.local_addr().expect("an address"));
    (page, tokio::spawn(playground.serve(listener)))
}

/// Where screenshots go: `<target>/playground-screenshots/` (the test binary is in
/// `<target>/debug/deps/`).
fn screenshot_dir() -> PathBuf {
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.parent()?.to_path_buf()))
        .unwrap_or_else(std::env::temp_dir);
    target.join("playground-screenshots")
}

/// A fresh folder under the system's temporary directory.
fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "crewline-playground-{name}-{}-{}",
        std::process::id(),
        uuid_like()
    ));
    std::fs::create_dir_all(&dir).expect("a temporary folder");
    dir
}

fn uuid_like() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos())
}

/// chromedriver on a free loopback port and a headless Chromium session through it; both
/// stop when this is closed or dropped.
struct Browser {
    client: Option<Client>,
    driver: Child,
    profile: PathBuf,
    downloads: PathBuf,
    test: &'static str,
}

impl Browser {
    async fn start(test: &'static str, (chromium, chromedriver): (PathBuf, PathBuf)) -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let driver = Command::new(chromedriver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver starts");
        let profile = temp_dir("profile");
        let downloads = temp_dir("downloads");
        let mut browser = Self {
            client: None,
            driver,
            profile,
            downloads,
            test,
        };
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        for _ in 0..200 {
            if tokio::net::TcpStream::connect(addr).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let capabilities = json!({
            "goog:chromeOptions": {
                "binary": chromium.display().to_string(),
                "args": [
                    "--headless",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-quic",
                    "--no-first-run",
                    "--disable-background-networking",
                    "--disable-component-update",
                    "--disable-sync",
                    "--disable-dev-shm-usage",
                    "--disable-breakpad",
                    "--disable-crash-reporter",
                    "--window-size=1400,1150",
                    format!("--user-data-dir={}", browser.profile.display()),
                ],
                "prefs": {
                    "download.default_directory": browser.downloads.display().to_string(),
                    "download.prompt_for_download": false,
                },
            }
        });
        let capabilities = match capabilities {
            Value::Object(map) => map,
            _ => unreachable!("an object"),
        };
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://{addr}"))
            .await
            .expect("a Chromium session through chromedriver");
        browser.client = Some(client);
        browser
    }

    fn client(&self) -> &Client {
        self.client.as_ref().expect("a session")
    }

    /// Opens the page and waits for it to have read its configuration.
    async fn open(&self, page: &str) {
        self.client().goto(page).await.expect("the page loads");
        self.wait_for(
            "the page to start",
            "return document.body.dataset.ready === 'true';",
        )
        .await;
    }

    /// Runs `script` (a function body) in the page.
    async fn js(&self, script: &str) -> Value {
        self.js_with(script, Vec::new()).await
    }

    async fn js_with(&self, script: &str, args: Vec<Value>) -> Value {
        self.client()
            .execute(script, args)
            .await
            .unwrap_or_else(|error| panic!("script failed: {error}\n{script}"))
    }

    /// Waits until `script` returns true; fails with a screenshot after [`WAIT`].
    async fn wait_for(&self, what: &str, script: &str) {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            if self.js(script).await == Value::Bool(true) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                self.screenshot("timeout").await;
                let status = self
                    .js("return document.getElementById('status').textContent + ' / ' + document.getElementById('connect-error').textContent;")
                    .await;
                panic!("timed out waiting for {what} (status: {status})");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn type_into(&self, id: &str, text: &str) {
        let field = self
            .client()
            .find(Locator::Id(id))
            .await
            .expect("the field");
        field.clear().await.expect("cleared");
        field.send_keys(text).await.expect("typed");
    }

    async fn click(&self, id: &str) {
        self.client()
            .find(Locator::Id(id))
            .await
            .expect("the button")
            .click()
            .await
            .expect("clicked");
    }

    /// Connects with the form's values and waits for `agent.ready`.
    async fn connect(&self) {
        self.click("connect").await;
        self.wait_for(
            "agent.ready",
            "return document.getElementById('status').dataset.state === 'ready';",
        )
        .await;
    }

    /// Types a turn and sends it.
    async fn say(&self, text: &str) {
        self.type_into("say", text).await;
        self.click("send").await;
    }

    /// The turn `index` (from 1) as the page holds it.
    async fn turn(&self, index: usize) -> Value {
        self.js_with(
            "const t = window.crewlinePlayground.call().turns[arguments[0] - 1]; \
             if (!t) return null; const copy = Object.assign({}, t); delete copy.aggregator; return copy;",
            vec![json!(index)],
        )
        .await
    }

    async fn wait_turn_ended(&self, index: usize) {
        self.wait_for(
            &format!("turn {index} to end"),
            &format!(
                "const t = window.crewlinePlayground.call().turns[{}]; return Boolean(t && t.ended);",
                index - 1
            ),
        )
        .await;
    }

    /// The call as the page's JSONL has it, one entry per frame.
    async fn entries(&self) -> Vec<Value> {
        let jsonl = self.js("return window.crewlinePlayground.jsonl();").await;
        frames(jsonl.as_str().expect("JSONL"))
    }

    /// The types of the frames the page sent, in order.
    async fn sent_types(&self) -> Vec<String> {
        self.entries()
            .await
            .into_iter()
            .filter(|entry| entry["dir"] == "out")
            .filter_map(|entry| entry["frame"]["type"].as_str().map(str::to_owned))
            .collect()
    }

    /// Saves a screenshot as `<test>-<name>.png` and returns its path.
    async fn screenshot(&self, name: &str) -> PathBuf {
        let dir = screenshot_dir();
        let path = dir.join(format!("{}-{name}.png", self.test));
        match self.client().screenshot().await {
            Ok(png) => {
                if std::fs::create_dir_all(&dir).is_ok() && std::fs::write(&path, png).is_ok() {
                    eprintln!("screenshot: {}", path.display());
                }
            }
            Err(error) => eprintln!("no screenshot: {error}"),
        }
        path
    }

    async fn close(mut self) {
        if let Some(client) = self.client.take() {
            let _ = client.close().await;
        }
    }
}

/// Ends the Chromium processes of the profile `profile` (a test that failed before closing its
/// session leaves them behind when chromedriver is killed): found by their
/// `--user-data-dir`, which is this test's alone, and killed by process id.
fn end_browser_processes(profile: &Path) {
    let flag = format!("--user-data-dir={}", profile.display());
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return;
    };
    let mut ended = false;
    for process in processes.filter_map(Result::ok) {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(process.path().join("cmdline")) else {
            continue;
        };
        if cmdline.split(|&b| b == 0).any(|arg| arg == flag.as_bytes()) {
            let _ = Command::new("kill")
                .args(["-9", &pid.to_string()])
                .stderr(Stdio::null())
                .status();
            ended = true;
        }
    }
    if ended {
        // Let them go before their profile is removed.
        std::thread::sleep(Duration::from_millis(500));
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        end_browser_processes(&self.profile);
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self.profile);
        let _ = std::fs::remove_dir_all(&self.downloads);
    }
}

/// The demo crew (scripted model, the weather service's real delay) with [`TOKEN`], and the
/// playground for it, both on loopback; stopped when dropped.
struct Served {
    crew: SocketAddr,
    page: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Served {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn serve_demo_crew() -> (SocketAddr, JoinHandle<()>) {
    let model = voice_agent::model(ModelChoice::Scripted, None, Duration::from_millis(40))
        .expect("the scripted model");
    let crew = WeatherCrew::new(model.llm, WEATHER_SERVICE_DELAY).expect("the crew");
    let server = CrewServer::new(crew.agent().clone()).auth_token(TOKEN);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let task = tokio::spawn(async move {
        if let Err(error) = server.serve(listener).await {
            eprintln!("the crew server failed: {error}");
        }
    });
    (addr, task)
}

/// The crew, and the page pointed at `page_crew_url` (the crew itself when `None`).
async fn serve(page_crew_url: Option<String>) -> Served {
    let (crew, crew_task) = serve_demo_crew().await;
    let url = page_crew_url.unwrap_or_else(|| format!("ws://{crew}/ws"));
    let listener = crewline_playground::listen(0).await.expect("a port");
    let page = crewline_playground::page_url(listener.local_addr().expect("an address"));
    let page_task = tokio::spawn(async move {
        if let Err(error) = Playground::new(url).token(TOKEN).serve(listener).await {
            eprintln!("the playground failed: {error}");
        }
    });
    Served {
        crew,
        page,
        tasks: vec![crew_task, page_task],
    }
}

fn frames(jsonl: &str) -> Vec<Value> {
    jsonl
        .lines()
        .map(|line| serde_json::from_str(line).expect("each line is JSON"))
        .collect()
}

#[tokio::test]
async fn a_text_turn_with_the_weather_tool_shows_the_reply_and_the_tool_bar_with_figures() {
    let Some((_turn, browser)) = browser_for("text_turn").await else {
        return;
    };
    let served = serve(None).await;
    browser.open(&served.page).await;
    // The form starts from /config.json: the crew's URL and token, in no page URL.
    assert_eq!(
        browser
            .js("return document.getElementById('crew-url').value;")
            .await,
        json!(format!("ws://{}/ws", served.crew))
    );
    assert_eq!(
        browser
            .js("return document.getElementById('token').value;")
            .await,
        json!(TOKEN)
    );
    assert!(
        !browser
            .client()
            .current_url()
            .await
            .expect("a URL")
            .as_str()
            .contains(TOKEN)
    );
    browser.connect().await;

    browser.say("What's the weather in Paris and Tokyo?").await;
    browser.wait_turn_ended(1).await;
    let turn = browser.turn(1).await;
    let text = turn["text"].as_str().expect("text");
    assert!(text.contains("In Paris it is"), "{text}");
    assert!(text.contains("In Tokyo it is"), "{text}");
    let tools = turn["tools"].as_array().expect("tools");
    assert_eq!(tools.len(), 2, "{turn}");
    for tool in tools {
        assert_eq!(tool["name"], "get_weather");
        assert_eq!(tool["success"], true);
        let latency = tool["latency"].as_f64().expect("a latency");
        assert!(latency >= 250.0, "the service takes ~300 ms: {latency}");
    }
    let first_chunk = turn["firstChunkAt"].as_f64().expect("a first chunk");
    let end = turn["endAt"].as_f64().expect("an end");
    assert!(first_chunk <= end, "{turn}");
    assert!(turn["firstSentenceAt"].as_f64().is_some(), "{turn}");

    // What a person sees: the reply, two tool bars with their figures, the turn's row.
    let shown = browser
        .js(
            "const bars = [...document.querySelectorAll('[data-testid=tool-bar]')]; \
             const row = document.querySelector('[data-testid=turn-figure][data-index=\"1\"]'); \
             return { \
               bars: bars.map(b => ({name: b.dataset.name, state: b.dataset.state, text: b.textContent})), \
               reply: document.querySelector('[data-testid=reply]').textContent, \
               ttfc: row.querySelector('[data-testid=ttfc]').textContent, \
               ttfs: row.querySelector('[data-testid=ttfs]').textContent, \
               toolTime: row.querySelector('[data-testid=tool-time]').textContent, \
               tools: row.querySelector('[data-testid=tools]').textContent, \
               callTools: document.querySelector('[data-testid=call-tools] .value').textContent, \
               points: document.querySelectorAll('[data-testid=ttfc-point]').length, \
               providers: document.querySelectorAll('[data-testid=turn-provider]').length, \
               notes: row.querySelector('[data-testid=notes]').textContent, \
             };",
        )
        .await;
    let bars = shown["bars"].as_array().expect("bars");
    assert_eq!(bars.len(), 2, "{shown}");
    for bar in bars {
        assert_eq!(bar["name"], "get_weather", "{shown}");
        assert_eq!(bar["state"], "ok", "{shown}");
        let label = bar["text"].as_str().expect("a label");
        assert!(
            label.contains("get_weather(") && label.contains(" ms"),
            "{label}"
        );
        assert!(label.contains("location"), "{label}");
    }
    assert!(
        shown["reply"]
            .as_str()
            .expect("reply")
            .contains("In Paris it is")
    );
    for figure in ["ttfc", "ttfs", "toolTime"] {
        let value = shown[figure].as_str().expect("a figure");
        assert!(value.ends_with(" ms"), "{figure}: {value}");
    }
    assert_eq!(shown["tools"], "2");
    assert_eq!(shown["callTools"], "2");
    assert_eq!(shown["points"], 1);
    // A crew on one model names no provider.
    assert_eq!(shown["providers"], 0, "{shown}");
    assert!(
        !shown["notes"]
            .as_str()
            .unwrap_or_default()
            .contains("answered by"),
        "{shown}"
    );
    assert_eq!(turn["provider"], Value::Null, "{turn}");
    browser.screenshot("tool-turn").await;

    // A call in progress: the long story streaming under the tool turn (the README's picture).
    browser.say("Tell me a long story about the weather.").await;
    browser
        .wait_for(
            "the story to stream",
            "const t = window.crewlinePlayground.call().turns[1]; return Boolean(t && t.chunks >= 12);",
        )
        .await;
    browser.screenshot("call-in-progress").await;
    browser.wait_turn_ended(2).await;
    browser.close().await;
}

#[tokio::test]
async fn a_barge_in_stops_the_reply_and_no_text_follows_it() {
    let Some((_turn, browser)) = browser_for("barge_in").await else {
        return;
    };
    let served = serve(None).await;
    browser.open(&served.page).await;
    browser.connect().await;

    browser.say("Tell me a long story about the weather.").await;
    browser
        .wait_for(
            "a few chunks of the story",
            "const t = window.crewlinePlayground.call().turns[0]; return Boolean(t && t.chunks >= 3);",
        )
        .await;
    // Typing while the reply streams: the interrupt goes first, then the new turn.
    browser.say("Sorry, never mind. Thanks, bye!").await;
    let at_barge_in = browser.turn(1).await["text"].clone();
    browser.wait_turn_ended(2).await;
    // Anything the crew still sends arrives within this window.
    tokio::time::sleep(Duration::from_millis(400)).await;

    let first = browser.turn(1).await;
    assert!(first["interruptAt"].as_f64().is_some(), "{first}");
    assert_eq!(first["ended"], true, "the interrupted reply still ends");
    assert_eq!(first["text"], at_barge_in, "no text after the barge-in");
    assert_eq!(
        first["leakedChunks"], 0,
        "no chunks after the interrupted turn's end"
    );
    let story = first["text"].as_str().expect("text");
    assert!(story.starts_with("Once upon a time"), "{story}");
    assert!(
        !story.trim_end().ends_with("thin and wispy again."),
        "the story was cut short: {story}"
    );
    let second = browser.turn(2).await;
    assert!(
        second["text"]
            .as_str()
            .expect("text")
            .contains("Thanks for calling"),
        "{second}"
    );
    assert!(second["interruptAt"].is_null(), "{second}");

    // As `crewline chat` does: the interrupt first; the new turn once the interrupted reply
    // has ended.
    let entries = browser.entries().await;
    let kind = |entry: &Value| {
        format!(
            "{} {}",
            entry["dir"].as_str().unwrap_or(""),
            entry["frame"]["type"].as_str().unwrap_or("")
        )
    };
    let interrupt = entries
        .iter()
        .position(|e| kind(e) == "out system.control.interrupt")
        .expect("an interrupt was sent");
    let request = interrupt
        + entries[interrupt..]
            .iter()
            .position(|e| kind(e) == "out system.llm.request")
            .expect("the next turn was sent");
    let between: Vec<String> = entries[interrupt..request].iter().map(kind).collect();
    assert!(
        between.contains(&"in agent.llm.response.end".to_owned()),
        "the new turn waits for the interrupted reply's end: {between:?}"
    );
    assert_eq!(
        entries[request - 1]["frame"],
        json!({
            "type": "agent.transcript.update",
            "timestamp": entries[request - 1]["frame"]["timestamp"],
            "role": "user",
            "content": "Sorry, never mind. Thanks, bye!"
        })
    );
    let shown = browser
        .js(
            "return { \
               marks: document.querySelectorAll('[data-testid=turn][data-index=\"1\"] [data-testid=barge-in]').length, \
               state: document.querySelector('[data-testid=turn][data-index=\"1\"]').dataset.state, \
               bubble: document.querySelector('[data-testid=agent-bubble][data-turn=\"1\"]').classList.contains('interrupted'), \
               bargeIns: document.querySelector('[data-testid=call-barge-ins] .value').textContent, \
             };",
        )
        .await;
    assert_eq!(
        shown,
        json!({"marks": 1, "state": "interrupted", "bubble": true, "bargeIns": "1"})
    );
    browser.screenshot("after-barge-in").await;
    browser.close().await;
}

#[tokio::test]
async fn a_wrong_token_is_shown_as_refused() {
    let Some((_turn, browser)) = browser_for("wrong_token").await else {
        return;
    };
    let served = serve(None).await;
    browser.open(&served.page).await;
    browser.type_into("token", "not-the-token").await;
    browser.click("connect").await;
    browser
        .wait_for(
            "the refusal",
            "const e = document.getElementById('connect-error'); return !e.hidden && e.textContent.length > 0;",
        )
        .await;
    let error = browser
        .js("return document.getElementById('connect-error').textContent;")
        .await;
    let error = error.as_str().expect("text");
    assert!(error.contains("refused (check the token)"), "{error}");
    assert_eq!(
        browser
            .js("return document.getElementById('status').dataset.state;")
            .await,
        "failed"
    );
    assert_eq!(
        browser
            .js("return document.getElementById('say').disabled;")
            .await,
        true
    );
    browser.screenshot("refused").await;
    browser.close().await;
}

/// Frames the crew and the page exchanged, as seen between them.
type Recorded = Arc<Mutex<Vec<(&'static str, Value)>>>;

/// A WebSocket relay between the page and the crew that records every frame each way.
// The handshake callback's signature is tungstenite's (its error is an HTTP response).
#[allow(clippy::result_large_err)]
async fn recording_relay(crew: SocketAddr) -> (SocketAddr, Recorded, JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let recorded: Recorded = Arc::default();
    let log = Arc::clone(&recorded);
    let task = tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let path = Arc::new(Mutex::new(String::from("/ws")));
        let seen = Arc::clone(&path);
        let callback =
            move |request: &tokio_tungstenite::tungstenite::handshake::server::Request,
                  response| {
                if let Some(path_and_query) = request.uri().path_and_query()
                    && let Ok(mut path) = seen.lock()
                {
                    *path = path_and_query.to_string();
                }
                Ok(response)
            };
        let Ok(page) = tokio_tungstenite::accept_hdr_async(stream, callback).await else {
            return;
        };
        let target = format!(
            "ws://{crew}{}",
            path.lock().map(|p| p.clone()).unwrap_or_default()
        );
        let Ok((crew, _)) = tokio_tungstenite::connect_async(target).await else {
            return;
        };
        let (mut page_tx, mut page_rx) = page.split();
        let (mut crew_tx, mut crew_rx) = crew.split();
        let record = |dir: &'static str, message: &Message| {
            let text = match message {
                Message::Text(text) => text.as_str().to_owned(),
                Message::Binary(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                _ => return,
            };
            if let (Ok(value), Ok(mut log)) = (serde_json::from_str(&text), log.lock()) {
                log.push((dir, value));
            }
        };
        loop {
            tokio::select! {
                message = page_rx.next() => match message {
                    Some(Ok(message)) => {
                        record("out", &message);
                        if crew_tx.send(message).await.is_err() { break; }
                    }
                    _ => break,
                },
                message = crew_rx.next() => match message {
                    Some(Ok(message)) => {
                        record("in", &message);
                        if page_tx.send(message).await.is_err() { break; }
                    }
                    _ => break,
                },
            }
        }
    });
    (addr, recorded, task)
}

#[tokio::test]
async fn the_downloaded_jsonl_matches_the_frames_the_crew_sent_and_loads_back() {
    let Some((_turn, browser)) = browser_for("jsonl").await else {
        return;
    };
    let (crew, crew_task) = serve_demo_crew().await;
    let (relay, recorded, relay_task) = recording_relay(crew).await;
    let (page, page_task) =
        serve_page(Playground::new(format!("ws://{relay}/ws")).token(TOKEN)).await;
    browser.open(&page).await;
    browser.connect().await;
    browser.say("What's the weather in London?").await;
    browser.wait_turn_ended(1).await;
    // The assistant's transcript goes out after the end; let it and any echo arrive.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let jsonl = browser
        .js("return window.crewlinePlayground.jsonl();")
        .await;
    let jsonl = jsonl.as_str().expect("JSONL").to_owned();
    let lines = frames(&jsonl);
    let mut last = 0.0;
    for line in &lines {
        let t = line["t"].as_f64().expect("a time");
        assert!(t >= last, "times only grow: {line}");
        last = t;
    }
    let recorded = recorded.lock().expect("the record").clone();
    for dir in ["in", "out"] {
        let page_side: Vec<&Value> = lines
            .iter()
            .filter(|line| line["dir"] == dir)
            .map(|line| &line["frame"])
            .collect();
        let wire: Vec<&Value> = recorded
            .iter()
            .filter(|(d, _)| *d == dir)
            .map(|(_, frame)| frame)
            .collect();
        assert_eq!(
            page_side, wire,
            "the {dir} frames of the JSONL are the wire's"
        );
    }
    let received: Vec<&str> = lines
        .iter()
        .filter(|line| line["dir"] == "in")
        .filter_map(|line| line["frame"]["type"].as_str())
        .collect();
    for expected in [
        "agent.ready",
        "agent.llm.response.start",
        "agent.llm.response.chunk",
        "agent.log",
        "agent.llm.response.end",
    ] {
        assert!(received.contains(&expected), "{expected} in {received:?}");
    }

    // The download button writes the same JSONL.
    browser.click("download").await;
    let mut downloaded = None;
    for _ in 0..100 {
        let file = std::fs::read_dir(&browser.downloads).ok().and_then(|dir| {
            dir.filter_map(Result::ok)
                .map(|entry| entry.path())
                .find(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        });
        if let Some(file) = file
            && let Ok(text) = std::fs::read_to_string(&file)
            && !text.is_empty()
        {
            downloaded = Some(text);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let downloaded = downloaded.expect("the download arrived");
    assert_eq!(
        frames(&downloaded),
        lines,
        "the downloaded file is the JSONL"
    );

    // Loaded back through the file input, the call looks as it did.
    let saved = temp_dir("saved").join("call.jsonl");
    std::fs::write(&saved, &jsonl).expect("written");
    browser.click("disconnect").await;
    browser
        .client()
        .find(Locator::Id("load"))
        .await
        .expect("the file input")
        .send_keys(&saved.display().to_string())
        .await
        .expect("a file chosen");
    browser
        .wait_for(
            "the loaded call",
            "return document.getElementById('status').dataset.state === 'replay';",
        )
        .await;
    let replayed = browser.turn(1).await;
    assert_eq!(replayed["tools"].as_array().map(Vec::len), Some(1));
    assert!(
        replayed["text"]
            .as_str()
            .expect("text")
            .contains("In London it is")
    );
    assert_eq!(
        browser
            .js("return window.crewlinePlayground.call().frames.length;")
            .await,
        json!(lines.len())
    );
    browser.screenshot("replayed").await;
    browser.close().await;
    let _ = std::fs::remove_dir_all(saved.parent().unwrap_or(Path::new("/nonexistent")));
    for task in [crew_task, relay_task] {
        task.abort();
    }
    page_task.abort();
}

/// Stand-ins for the browser's recognizer and synthesizer: each utterance "plays" for
/// 1.5 s, one after another; `window.__recognizer` is the live recognizer.
const SPEECH_STAND_INS: &str = r#"
window.__spoken = [];
window.__cancels = 0;
class FakeUtterance { constructor(text) { this.text = text; } }
const synth = {
  speaking: false, queue: [], timer: null,
  speak(u) { window.__spoken.push(u.text); this.queue.push(u); if (!this.speaking) this.next(); },
  next() {
    const u = this.queue.shift();
    if (!u) { this.speaking = false; return; }
    this.speaking = true;
    this.timer = setTimeout(() => { if (u.onend) u.onend(); this.next(); }, 1500);
  },
  cancel() {
    window.__cancels += 1;
    clearTimeout(this.timer);
    const dropped = this.queue; this.queue = []; this.speaking = false;
    for (const u of dropped) if (u.onend) u.onend();
  },
};
class FakeRecognition {
  start() { window.__recognizer = this; }
  stop() {}
}
window.__say = (text) => {
  const r = window.__recognizer;
  if (r.onspeechstart) r.onspeechstart();
  const result = [{ transcript: text }];
  result.isFinal = true;
  r.onresult({ resultIndex: 0, results: [result] });
};
window.crewlinePlaygroundSpeech = { Recognition: FakeRecognition, synth, Utterance: FakeUtterance };
return true;
"#;

#[tokio::test]
async fn voice_speaks_each_sentence_as_it_completes_and_speech_interrupts_the_agent() {
    let Some((_turn, browser)) = browser_for("voice").await else {
        return;
    };
    let served = serve(None).await;
    browser.open(&served.page).await;
    browser.js(SPEECH_STAND_INS).await;
    browser.connect().await;
    browser.click("mic").await;
    assert_eq!(
        browser
            .js("return document.getElementById('speak-replies').checked && Boolean(window.__recognizer);")
            .await,
        true
    );

    // A spoken turn: the final transcript is the user turn; each sentence is spoken once it
    // is complete, the first while the reply still streams.
    browser
        .js("window.__say(\"What's the weather in Paris?\"); return true;")
        .await;
    browser.wait_turn_ended(1).await;
    let turn = browser.turn(1).await;
    assert_eq!(turn["user"], "What's the weather in Paris?");
    assert_eq!(turn["source"], "voice");
    let sentences: Vec<Value> = turn["sentences"]
        .as_array()
        .expect("sentences")
        .iter()
        .map(|s| s["text"].clone())
        .collect();
    assert!(sentences.len() >= 2, "{turn}");
    assert_eq!(sentences[0], "Let me check that for you.");
    let spoken = browser.js("return window.__spoken;").await;
    assert_eq!(
        spoken,
        Value::Array(sentences.clone()),
        "each sentence spoken once, in order"
    );
    let first_spoken = browser
        .js("return window.crewlinePlayground.call().spoken[0].t;")
        .await
        .as_f64()
        .expect("a time");
    let ended = turn["requestAt"].as_f64().unwrap_or(0.0) + turn["endAt"].as_f64().unwrap_or(0.0);
    assert!(
        first_spoken + 200.0 < ended,
        "the first sentence was spoken before the reply ended ({first_spoken} vs {ended})"
    );
    let out: Vec<String> = browser.sent_types().await;
    let request = out
        .iter()
        .position(|t| t == "system.llm.request")
        .expect("a request");
    assert_eq!(
        &out[request - 3..=request],
        [
            "system.user.started_speaking",
            "system.user.stopped_speaking",
            "agent.transcript.update",
            "system.llm.request"
        ],
        "{out:?}"
    );

    // The caller starts speaking while the agent tells its story: the audio stops and the
    // crew is interrupted.
    browser
        .js("window.__say('Tell me a long story about the weather.'); return true;")
        .await;
    browser
        .wait_for(
            "the story to be spoken",
            "const t = window.crewlinePlayground.call().turns[1]; return Boolean(t && t.sentences.length >= 1 && t.chunks >= 3);",
        )
        .await;
    let cancels_before = browser.js("return window.__cancels;").await;
    browser
        .js("window.__recognizer.onspeechstart(); return true;")
        .await;
    let after = browser
        .js("return {cancels: window.__cancels, speaking: window.crewlinePlaygroundSpeech.synth.speaking, interruptAt: window.crewlinePlayground.call().turns[1].interruptAt};")
        .await;
    assert!(
        after["cancels"].as_u64() > cancels_before.as_u64(),
        "the audio was cancelled: {after}"
    );
    assert_eq!(after["speaking"], false, "{after}");
    assert!(after["interruptAt"].as_f64().is_some(), "{after}");
    let spoken_at_barge_in = browser.js("return window.__spoken.length;").await;
    browser.wait_turn_ended(2).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        browser.js("return window.__spoken.length;").await,
        spoken_at_barge_in,
        "nothing spoken after the barge-in"
    );
    let out: Vec<String> = browser.sent_types().await;
    let last_two: Vec<&str> = out
        .iter()
        .rev()
        .filter(|t| t.starts_with("system.user.") || *t == "system.control.interrupt")
        .take(2)
        .map(String::as_str)
        .collect();
    assert_eq!(
        last_two,
        ["system.control.interrupt", "system.user.started_speaking"],
        "speech start, then the interrupt: {out:?}"
    );
    browser.screenshot("voice").await;
    browser.close().await;
}

#[tokio::test]
async fn the_js_sentence_port_splits_every_case_of_cases_json_as_the_rust_aggregator_does() {
    let Some((_turn, browser)) = browser_for("sentence_port").await else {
        return;
    };
    let cases: Value = serde_json::from_str(include_str!(
        "../../../crewline-speech/src/sentence/cases.json"
    ))
    .expect("cases.json is JSON");
    let (page, page_task) = serve_page(Playground::new("ws://127.0.0.1:9/ws")).await;
    browser.open(&page).await;
    let report = browser
        .js_with(
            r#"
const { SentenceAggregator } = window.CrewlineSentence;
const failures = [];
let checks = 0;
const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
const check = (got, expected, what) => {
  checks += 1;
  if (!same(got, expected)) failures.push({ what, got, expected });
};
for (const [group, cases] of Object.entries(arguments[0].groups)) {
  for (const c of cases) {
    const make = () => new SentenceAggregator(c.min_chars ?? 8, c.max_chars ?? null);
    if (c.text !== undefined) {
      let a = make();
      let got = a.push(c.text);
      let rest = a.flush();
      if (rest !== null) got.push(rest);
      check(got, c.sentences, `${group}, whole: ${c.text}`);
      a = make();
      got = [];
      for (const ch of Array.from(c.text)) got.push(...a.push(ch));
      rest = a.flush();
      if (rest !== null) got.push(rest);
      check(got, c.sentences, `${group}, char by char: ${c.text}`);
    }
    if (c.steps) {
      const a = make();
      c.steps.forEach((step, i) => {
        if ("push" in step) check(a.push(step.push), step.yields, `${group}, step ${i}: push`);
        else if ("flush" in step) check(a.flush(), step.flush, `${group}, step ${i}: flush`);
        else if ("discard" in step) check(a.discard(), step.discard, `${group}, step ${i}: discard`);
        else if ("pending" in step) check(a.pending(), step.pending, `${group}, step ${i}: pending`);
        else failures.push({ what: `${group}, step ${i}: unknown` });
      });
    }
  }
}
return { checks, failures };
"#,
            vec![cases.clone()],
        )
        .await;
    assert_eq!(report["failures"], json!([]), "{report}");
    let expected_checks: usize = cases["groups"]
        .as_object()
        .expect("groups")
        .values()
        .flat_map(|cases| cases.as_array().cloned().unwrap_or_default())
        .map(|case| {
            let texts = if case.get("text").is_some() { 2 } else { 0 };
            texts + case["steps"].as_array().map_or(0, Vec::len)
        })
        .sum();
    assert_eq!(report["checks"], json!(expected_checks), "every case ran");
    assert!(expected_checks > 90, "{expected_checks}");
    browser.screenshot("page").await;
    browser.close().await;
    page_task.abort();
}

/// A stand-in crew that answers the first turn with a fatal error and a transfer, then
/// closes the socket with 1001 "call transferred": what the page must show as such.
async fn failing_crew() -> (SocketAddr, JoinHandle<()>) {
    use tokio_tungstenite::tungstenite::protocol::{CloseFrame, frame::coding::CloseCode};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let task = tokio::spawn(async move {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let Ok(mut socket) = tokio_tungstenite::accept_async(stream).await else {
            return;
        };
        let frame = |value: Value| Message::Binary(value.to_string().into_bytes().into());
        let at = "2026-12-03T06:00:00.000001";
        while let Some(Ok(message)) = socket.next().await {
            let Ok(text) = message.to_text() else {
                continue;
            };
            let Ok(event) = serde_json::from_str::<Value>(text) else {
                continue;
            };
            match event["type"].as_str() {
                Some("system.init") => {
                    let _ = socket
                        .send(frame(json!({"type": "agent.ready", "timestamp": at})))
                        .await;
                }
                Some("system.llm.request") => {
                    for reply in [
                        json!({"type": "agent.llm.response.start", "timestamp": at, "request_id": "r1"}),
                        json!({"type": "agent.llm.response.chunk", "timestamp": at, "text": "One moment."}),
                        json!({"type": "agent.error", "timestamp": at, "message": "the CRM is down", "severity": "fatal", "payload": {"node_name": "assistant"}}),
                        json!({"type": "agent.llm.response.end", "timestamp": at}),
                        json!({"type": "agent.transfer_call", "timestamp": at, "transfer_call_number": "+15550100", "transfer_options": {"type": "cold_transfer", "private_handoff_option": null, "public_handoff_option": null}, "on_hold_music": null}),
                    ] {
                        let _ = socket.send(frame(reply)).await;
                    }
                    let _ = socket
                        .close(Some(CloseFrame {
                            code: CloseCode::Away,
                            reason: "call transferred".into(),
                        }))
                        .await;
                }
                _ => {}
            }
        }
    });
    (addr, task)
}

#[tokio::test]
async fn a_fatal_error_a_transfer_and_the_close_are_shown_as_such() {
    let Some((_turn, browser)) = browser_for("errors").await else {
        return;
    };
    let (crew, crew_task) = failing_crew().await;
    let (page, page_task) = serve_page(Playground::new(format!("ws://{crew}/ws"))).await;
    browser.open(&page).await;
    browser.connect().await;
    browser.say("Put me through to billing.").await;
    browser
        .wait_for(
            "the close",
            "return document.getElementById('status').dataset.state === 'closed';",
        )
        .await;
    let shown = browser
        .js(
            "const text = (sel) => { const e = document.querySelector(sel); return e ? e.textContent : null; }; \
             return { \
               turnError: text('[data-testid=turn][data-index=\"1\"] [data-testid=turn-error]'), \
               handoff: text('[data-testid=turn][data-index=\"1\"] [data-testid=handoff]'), \
               error: text('#errors li.fatal'), \
               close: text('[data-testid=close]'), \
               status: text('#status'), \
               sayDisabled: document.getElementById('say').disabled, \
               notes: text('[data-testid=turn-figure][data-index=\"1\"] [data-testid=notes]'), \
             };",
        )
        .await;
    let field = |name: &str| shown[name].as_str().unwrap_or_default().to_owned();
    assert!(field("turnError").contains("the CRM is down"), "{shown}");
    assert!(field("handoff").contains("+15550100"), "{shown}");
    assert!(field("handoff").contains("cold_transfer"), "{shown}");
    assert!(
        field("error").contains("agent.error (fatal): the CRM is down"),
        "{shown}"
    );
    assert!(field("close").contains("close code 1001"), "{shown}");
    assert!(field("close").contains("call transferred"), "{shown}");
    assert!(
        field("status").contains("the crew closed the connection"),
        "{shown}"
    );
    assert_eq!(shown["sayDisabled"], true, "{shown}");
    assert!(field("notes").contains("transfer_call"), "{shown}");
    assert!(field("notes").contains("fatal error"), "{shown}");
    browser.screenshot("errors").await;
    browser.close().await;
    crew_task.abort();
    page_task.abort();
}

/// The weather crew on a `FallbackLlm` whose first provider is down: the backup answers, and
/// the crew's `llm_provider` log names it.
async fn fallback_crew() -> (SocketAddr, JoinHandle<()>) {
    use crewline::llm::{FallbackLlm, LlmClient, LlmError, Reply, ScriptedLlm};

    let down = ScriptedLlm::new([Reply::Fail(LlmError::Api {
        status: Some(503),
        message: "overloaded".into(),
        retry_after: None,
    })]);
    let up = ScriptedLlm::new([Reply::text("Hello from the backup.")]);
    let llm = FallbackLlm::builder()
        .provider("primary", Arc::new(down) as Arc<dyn LlmClient>)
        .provider("backup", Arc::new(up) as Arc<dyn LlmClient>)
        .build()
        .expect("two providers");
    let crew = WeatherCrew::new(Arc::new(llm), WEATHER_SERVICE_DELAY).expect("the crew");
    let server = CrewServer::new(crew.agent().clone()).auth_token(TOKEN);
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
    let addr = listener.local_addr().expect("an address");
    let task = tokio::spawn(async move {
        if let Err(error) = server.serve(listener).await {
            eprintln!("the crew server failed: {error}");
        }
    });
    (addr, task)
}

#[tokio::test]
async fn the_provider_that_answered_is_shown_in_the_turns_row_and_figures() {
    let Some((_turn, browser)) = browser_for("provider").await else {
        return;
    };
    let (crew, crew_task) = fallback_crew().await;
    let (page, page_task) =
        serve_page(Playground::new(format!("ws://{crew}/ws")).token(TOKEN)).await;
    browser.open(&page).await;
    browser.connect().await;
    browser.say("Hello?").await;
    browser.wait_turn_ended(1).await;
    let turn = browser.turn(1).await;
    assert_eq!(turn["provider"], "backup", "{turn}");
    assert_eq!(turn["text"], "Hello from the backup.", "{turn}");
    browser
        .wait_for(
            "the provider in the turn's row",
            "return Boolean(document.querySelector('[data-testid=turn][data-index=\"1\"] [data-testid=turn-provider]'));",
        )
        .await;
    let shown = browser
        .js(
            "const text = (sel) => { const e = document.querySelector(sel); return e ? e.textContent : null; }; \
             return { \
               provider: text('[data-testid=turn][data-index=\"1\"] [data-testid=turn-provider]'), \
               notes: text('[data-testid=turn-figure][data-index=\"1\"] [data-testid=notes]'), \
               figure: window.crewlinePlayground.figures().turns[0].provider, \
             };",
        )
        .await;
    assert_eq!(shown["provider"], "answered by backup", "{shown}");
    assert!(
        shown["notes"]
            .as_str()
            .unwrap_or_default()
            .contains("answered by backup"),
        "{shown}"
    );
    assert_eq!(shown["figure"], "backup", "{shown}");
    browser.screenshot("provider").await;
    browser.close().await;
    crew_task.abort();
    page_task.abort();
}

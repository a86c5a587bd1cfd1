//! The HTML report: self-contained, every scenario and expectation, each turn's timeline, and
//! everything a crew said shown as text, never as markup.

use crate::common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    sync::Arc,
    time::Duration,
};

use crewline::{
    llm::{Reply, ScriptedLlm},
    types::Message,
};
use crewline_eval::report::write_html;
use crewline_examples::voice_agent;
use crewline_server::CrewServer;

/// The variable that makes a missing Chromium a failure (as the playground's browser tests).
const REQUIRE_VARIABLE: &str = "CREWLINE_REQUIRE_CHROMIUM";

/// A weather crew whose model looks Paris up, then answers with markup.
async fn hostile_crew() -> String {
    let llm = ScriptedLlm::from_fn(|request| match request.messages.last() {
        Some(Message::Tool { .. }) => {
            Reply::text("<script>alert(1)</script><img src=x onerror=alert(2)> \"quoted\" & done")
        }
        _ => Reply::tool_call("get_weather", serde_json::json!({"location": "Paris"})),
    });
    let crew =
        voice_agent::WeatherCrew::new(Arc::new(llm), Duration::ZERO).expect("the weather tools");
    common::serve(CrewServer::new(crew.agent().clone())).await
}

/// The report of a scenario that fails one expectation against the hostile crew.
async fn report_html() -> String {
    let url = hostile_crew().await;
    let report = common::run(
        r#"
        name = "a <b>bold</b> scenario"
        crew.url = "ws://127.0.0.1:1/ws"
        runs = 2
        [[turns]]
        say = "What's the weather in Paris?"
        expect.tools = [{ name = "get_weather", args.location = { equals = "Paris" }, once = true }]
        expect.reply.contains = ["sunny"]
        [[turns]]
        say = "And now?"
        barge_in = { after_chunks = 1 }
        "#,
        &url,
    )
    .await;
    assert!(!report.passed);
    assert_eq!(report.timeline_run, 1);
    let mut html = Vec::new();
    write_html(&[report], &mut html).expect("the report");
    String::from_utf8(html).expect("UTF-8")
}

/// The open elements of `html`, checked to close in order: every element but the void ones
/// closes, and nothing closes that is not open. Returns the tags in document order.
fn parse(html: &str) -> Vec<String> {
    const VOID: [&str; 4] = ["meta", "br", "img", "input"];
    let mut open: Vec<String> = Vec::new();
    let mut tags = Vec::new();
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        rest = &rest[start + 1..];
        let end = rest.find('>').expect("every tag ends");
        let tag = &rest[..end];
        rest = &rest[end + 1..];
        if tag.starts_with('!') {
            continue;
        }
        if let Some(name) = tag.strip_prefix('/') {
            assert_eq!(open.pop().as_deref(), Some(name), "closing {name}");
            continue;
        }
        let name: String = tag
            .split(|c: char| c.is_whitespace())
            .next()
            .unwrap_or_default()
            .to_owned();
        tags.push(tag.to_owned());
        if name == "style" {
            let close = rest.find("</style>").expect("the style ends");
            rest = &rest[close + "</style>".len()..];
            continue;
        }
        if !VOID.contains(&name.as_str()) {
            open.push(name);
        }
    }
    assert!(open.is_empty(), "left open: {open:?}");
    tags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_report_shows_what_the_crew_said_as_text_and_draws_the_turns() {
    let html = report_html().await;
    let tags = parse(&html);

    // Nothing the crew or the file said became markup.
    assert!(!html.contains("<script"), "a script tag in the report");
    assert!(
        !tags.iter().any(|t| t == "b"),
        "the scenario's <b> became markup"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(html.contains("&lt;img src=x onerror=alert(2)&gt; &quot;quoted&quot; &amp; done"));
    assert!(html.contains("a &lt;b&gt;bold&lt;/b&gt; scenario"));

    // Self-contained: no script, nothing loaded from elsewhere, a policy that forbids both.
    assert!(html.contains("default-src 'none'"));
    assert!(!html.contains("http://") && !html.contains("https://"));
    let names: Vec<&str> = tags
        .iter()
        .map(|t| t.split_whitespace().next().unwrap_or_default())
        .collect();
    for fetching in ["script", "link", "img", "iframe", "object", "embed"] {
        assert!(!names.contains(&fetching), "a <{fetching}> in the report");
    }

    // The summary table, each expectation with its pass rate and failures.
    assert!(html.contains("<table id=\"scenarios\">"));
    assert!(
        html.contains(r#"expected the reply to contain "sunny""#.replace('"', "&quot;").as_str()),
        "{html}"
    );
    assert!(html.contains("0/2"), "the failed check held in 0 of 2 runs");
    assert!(html.contains("2/2"), "the tool check held in both runs");

    // The timeline: waiting and speaking bars, the tool call, chunks, the barge-in.
    assert!(html.contains("class=\"bar wait\""));
    assert!(html.contains("class=\"bar speak\""));
    assert!(html.contains("get_weather {&quot;location&quot;:&quot;Paris&quot;}"));
    assert!(html.contains("class=\"tick\""));
    assert!(
        html.contains("class=\"mark barge\""),
        "the barge-in is marked"
    );

    // Every run is drawn, each in its own <details>; the first failing one is open.
    assert_eq!(html.matches("<details class=\"run\"").count(), 2, "{html}");
    assert!(
        html.contains("<details class=\"run\" id=\"s0r1\" open>"),
        "{html}"
    );
    assert!(
        html.contains("<details class=\"run\" id=\"s0r2\">"),
        "{html}"
    );
    assert!(
        html.contains("<summary>Run 2 <span class=\"fail\">"),
        "{html}"
    );
    assert_eq!(
        html.matches("<div class=\"turn\">").count(),
        4,
        "two turns in each of two runs"
    );
}

/// Debian's `/usr/bin/NAME`, else the first on `PATH`.
fn program(name: &str) -> Option<PathBuf> {
    let debian = Path::new("/usr/bin").join(name);
    if debian.is_file() {
        return Some(debian);
    }
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn headless_chromium_renders_the_report_table() {
    let Some(chromium) = program("chromium") else {
        assert!(
            std::env::var_os(REQUIRE_VARIABLE).is_none(),
            "{REQUIRE_VARIABLE} is set but chromium is missing"
        );
        // Past the test harness's capture, so that every run shows what it skipped.
        {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED: chromium is not installed; the report is checked by parsing only"
            );
        }
        return;
    };
    let html = report_html().await;
    let dir = std::env::temp_dir().join(format!("crewline-eval-html-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a scratch dir");
    let page = dir.join("report.html");
    std::fs::write(&page, html).expect("the page");
    let output = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--dump-dom"])
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        output.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let dom = String::from_utf8_lossy(&output.stdout);
    assert!(dom.contains("<table id=\"scenarios\">"), "{dom}");
    assert!(dom.contains("a &lt;b&gt;bold&lt;/b&gt; scenario"), "{dom}");
    assert!(!dom.contains("<script>alert"), "{dom}");
    // Both runs reached the browser's DOM as folds, the failing one open.
    assert!(
        dom.contains("<details class=\"run\" id=\"s0r1\" open=\"\">"),
        "{dom}"
    );
    assert!(dom.contains("<details class=\"run\" id=\"s0r2\">"), "{dom}");
}

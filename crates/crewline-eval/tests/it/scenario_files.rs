//! Reading scenario files: what a mistake in one says, the bounds, the committed JSON
//! Schema, and the example suites.

use std::path::Path;

use crewline_eval::{EvalError, Scenario, ScenarioFile, scenario::MAX_FILE_BYTES};

fn invalid(toml: &str) -> String {
    match Scenario::from_toml(toml) {
        Ok(scenario) => panic!("accepted: {scenario:#?}"),
        Err(error) => error.to_string(),
    }
}

const CREW: &str = "crew.url = \"ws://127.0.0.1:8080/ws\"\n";

#[test]
fn a_typo_in_a_key_is_an_error_not_a_skipped_expectation() {
    let error = invalid(&format!(
        "name = \"x\"\n{CREW}[[turns]]\nsay = \"hi\"\nexpect.reply.contain = [\"hello\"]\n"
    ));
    assert!(error.contains("unknown field `contain`"), "{error}");
    assert!(error.contains("line 5"), "{error}");
}

#[test]
fn impossible_settings_are_refused_naming_the_field() {
    let turn = "[[turns]]\nsay = \"hi\"\n";
    let cases = [
        (
            format!("name = \"x\"\nruns = 0\n{CREW}{turn}"),
            "`runs` is 0; it must be 1 to 200",
        ),
        (
            format!("name = \"x\"\npass_threshold = 1.5\n{CREW}{turn}"),
            "`pass_threshold` is 1.5",
        ),
        (
            format!("name = \"x\"\n{CREW}"),
            "0 turns; a scenario has 1 to 64 (or a simulated `caller`)",
        ),
        (
            format!("name = \"x\"\n{CREW}turns = []\n"),
            "0 turns; a scenario has 1 to 64 (or a simulated `caller`)",
        ),
        (
            format!("name = \"x\"\ncrew = {{ url = \"http://x\" }}\n{turn}"),
            "is not a ws:// or wss:// address",
        ),
        (
            format!("name = \"x\"\ncrew = {{ url = \"ws://x\", command = [\"crew\"] }}\n{turn}"),
            "set `url` or `command`, not both",
        ),
        (
            format!("name = \"x\"\n{CREW}[[turns]]\nhang_up = true\n{turn}"),
            "turn 1: a hang-up must be the last turn",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}fault.model = \"404:soon\"\n"),
            "turn 1: `fault.model` \"404:soon\" is not a fault",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}expect.judge = [{{ rubric = \"polite\" }}]\n"),
            "`expect.judge` needs a `[judge]`",
        ),
        (
            format!(
                "name = \"x\"\njudge = {{ base_url = \"ftp://x\", model = \"m\" }}\n{CREW}{turn}"
            ),
            "[judge]: `base_url` \"ftp://x\" is not an http:// or https:// address",
        ),
        (
            format!(
                "name = \"x\"\njudge = {{ base_url = \"http://x\", model = \"m\" }}\n{CREW}{turn}expect.judge = [{{ rubric = \"polite\", min_score = 2 }}]\n"
            ),
            "turn 1: judge: `min_score` is 2; it must be from 0 to 1",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}{turn}[caller]\npersona = \"p\"\ngoal = \"g\"\nllm = {{ base_url = \"http://x\", model = \"m\" }}\n"
            ),
            "set `turns` or a simulated `caller`, not both",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}[caller]\npersona = \"p\"\ngoal = \"g\"\nmax_turns = 0\nllm = {{ base_url = \"http://x\", model = \"m\" }}\n"
            ),
            "[caller]: `max_turns` is 0; it must be 1 to 64",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}[caller]\npersona = \"p\"\ngoal = \"g\"\nllm = {{ base_url = \"x\", model = \"m\" }}\n"
            ),
            "[caller.llm]: `base_url` \"x\" is not an http:// or https:// address",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}[caller]\npersona = \"p\"\ngoal = \"g\"\nllm = {{ base_url = \"http://x\", model = \"m\" }}\n[expect]\ngoal_met = true\n"
            ),
            "`expect.goal_met` needs a `[judge]` to decide it",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}[expect]\ngoal_met = true\n"),
            "`expect.goal_met` needs a simulated `caller`",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}expect.reply.language = \"Klingon\"\n"),
            "turn 1: `reply.language` \"Klingon\" is not a language",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}silence_ms = 500\n"),
            "turn 1: a silence has no `say`, `hang_up`, `barge_in` or `fault`",
        ),
        (
            format!("name = \"x\"\n{CREW}[[turns]]\nsilence_ms = 500\nexpect.budget.turn_ms = 9\n"),
            "turn 1: a silence has no reply to time: no `budget`",
        ),
        (
            format!("name = \"x\"\n{CREW}[[turns]]\nsilence_ms = 0\n"),
            "turn 1: `silence_ms` is 0; it must be 1 to 600000",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}fault = {{}}\n"),
            "turn 1: `fault`: set `model`",
        ),
        (
            format!("name = \"x\"\n{CREW}model.replies = [3]\n{turn}"),
            "[model]: invalid mock LLM script: replies[0]: a rule must be an object",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}barge_in = {{ after_chunks = 1, after_ms = 5 }}\n"),
            "turn 1: `barge_in`: set one of `after_chunks`, `after_ms` and `on_tool_start`",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}{turn}expect.tools = [{{ name = \"t\", once = true, never = true }}]\n"
            ),
            "turn 1: tool `t`: set at most one of `count`, `once` and `never`",
        ),
        (
            format!(
                "name = \"x\"\n{CREW}{turn}expect.tools = [{{ name = \"t\", args.a = {{ regex = \"(\" }} }}]\n"
            ),
            "turn 1: tool `t`: args.a: bad regex \"(\"",
        ),
        (
            format!("name = \"x\"\n{CREW}{turn}[expect]\nreply.regex = [\"a{{1000}}{{1000}}\"]\n"),
            "[expect]: reply.regex: bad regex",
        ),
    ];
    for (toml, expected) in cases {
        let error = invalid(&toml);
        assert!(
            error.contains(expected),
            "{expected:?} not in {error:?} for\n{toml}"
        );
    }
}

#[test]
fn a_suite_shares_its_crew_with_scenarios_that_name_none() {
    let suite = ScenarioFile::from_toml(
        r#"
        crew.url = "ws://127.0.0.1:8080/ws"

        [[scenarios]]
        name = "greeting"
        turns = [{ say = "hi" }]

        [[scenarios]]
        name = "elsewhere"
        crew.url = "ws://127.0.0.1:9090/ws"
        turns = [{ say = "hi" }]
        "#,
    )
    .unwrap();
    let urls: Vec<_> = suite
        .iter()
        .map(|s| s.crew.as_ref().and_then(|c| c.url.as_deref()))
        .collect();
    assert_eq!(
        urls,
        [
            Some("ws://127.0.0.1:8080/ws"),
            Some("ws://127.0.0.1:9090/ws")
        ]
    );
    let error =
        ScenarioFile::from_toml("[[scenarios]]\nname = \"x\"\nturns = [{ say = \"hi\" }]\n")
            .unwrap_err()
            .to_string();
    assert!(error.contains("scenario 1 (\"x\"): no `crew`"), "{error}");
}

#[test]
fn a_file_over_the_size_bound_is_not_read() {
    let dir = std::env::temp_dir().join(format!("crewline-eval-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("huge.toml");
    let filler = "# padding\n".repeat(MAX_FILE_BYTES as usize / 10 + 1);
    std::fs::write(&path, format!("name = \"x\"\n{filler}")).unwrap();
    let error = Scenario::load(&path).unwrap_err();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(matches!(error, EvalError::TooLarge { .. }), "{error}");
    assert!(error.to_string().contains("huge.toml"), "{error}");
}

/// The repository's root.
fn root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

#[test]
fn the_committed_json_schema_is_the_one_the_types_generate() {
    let path = root().join("docs/eval-scenario.schema.json");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let generated = format!(
        "{}\n",
        serde_json::to_string_pretty(&ScenarioFile::json_schema()).unwrap()
    );
    assert!(
        committed == generated,
        "{} is stale: regenerate it with `cargo run -p crewline-cli -- eval --schema > docs/eval-scenario.schema.json`",
        path.display()
    );
}

#[test]
fn the_schema_documents_every_field_a_scenario_has() {
    let schema = ScenarioFile::json_schema();
    let expect = &schema["$defs"]["Expect"]["properties"];
    for field in [
        "tools",
        "tool_order",
        "reply",
        "budget",
        "end_call",
        "transfer",
        "handoff",
    ] {
        assert!(
            expect[field]["description"]
                .as_str()
                .is_some_and(|d| !d.is_empty()),
            "Expect.{field} has no description: {expect:#}"
        );
    }
    let scenario = &schema["$defs"]["Scenario"];
    assert_eq!(
        scenario["additionalProperties"], false,
        "unknown keys are refused"
    );
    assert!(scenario["properties"]["turns"]["description"].is_string());
}

#[test]
fn the_example_suites_are_valid_scenarios() {
    let dir = root().join("examples/evals");
    let mut read = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .extension()
            .is_some_and(|e| e == "toml" || e == "yaml" || e == "yml")
        {
            ScenarioFile::load(&path).unwrap_or_else(|e| panic!("{e}"));
            read += 1;
        }
    }
    assert!(read > 0, "no suite in {}", dir.display());
}

#[test]
fn a_yaml_file_reads_as_the_same_scenario_as_its_toml() {
    let toml = ScenarioFile::from_toml(
        r#"
        crew.url = "ws://127.0.0.1:8080/ws"
        [[scenarios]]
        name = "two cities"
        runs = 3
        variables = { name = "Ada" }
        [[scenarios.turns]]
        say = "Weather in Paris and Tokyo?"
        expect.reply = { contains = ["18"], max_sentences = 3 }
        expect.tools = [{ name = "get_weather", args.location = { regex = "(?i)^paris" }, once = true }]
        [[scenarios.turns]]
        hang_up = true
        [scenarios.expect]
        tools = [{ name = "get_weather", count = 2, args_subset = { units = "metric" } }]
        "#,
    )
    .unwrap();
    let yaml = ScenarioFile::from_yaml(
        r#"
crew:
  url: ws://127.0.0.1:8080/ws
scenarios:
  - name: two cities
    runs: 3
    variables: { name: Ada }
    turns:
      - say: Weather in Paris and Tokyo?
        expect:
          reply: { contains: ["18"], max_sentences: 3 }
          tools:
            - name: get_weather
              args: { location: { regex: "(?i)^paris" } }
              once: true
      - hang_up: true
    expect:
      tools: [{ name: get_weather, count: 2, args_subset: { units: metric } }]
"#,
    )
    .unwrap();
    assert_eq!(yaml, toml);
}

#[test]
fn a_yaml_typo_is_an_error_naming_the_line_and_the_file() {
    let dir = std::env::temp_dir().join(format!("crewline-eval-yaml-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("typo.yml");
    std::fs::write(
        &path,
        "name: x\ncrew: { url: \"ws://127.0.0.1:1/ws\" }\nturns:\n  - say: hi\n    expect: { reply: { contain: [hello] } }\n",
    )
    .unwrap();
    let error = Scenario::load(&path).unwrap_err().to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(error.contains("typo.yml"), "{error}");
    assert!(error.contains("unknown field `contain`"), "{error}");
    assert!(error.contains("line 5"), "{error}");
}

#[test]
fn a_yaml_alias_bomb_is_refused_not_expanded() {
    // Each level doubles nine times over: expanded, this would be 9^9 strings.
    let mut yaml = String::from("a: &a [\"lol\"]\n");
    let names = ["b", "c", "d", "e", "f", "g", "h", "i"];
    let mut previous = "a";
    for name in names {
        let refs = vec![format!("*{previous}"); 9].join(", ");
        yaml.push_str(&format!("{name}: &{name} [{refs}]\n"));
        previous = name;
    }
    yaml.push_str("name: x\ncrew: { url: \"ws://127.0.0.1:1/ws\" }\nturns: [{ say: hi }]\nvariables: { bomb: *i }\n");
    let error = ScenarioFile::from_yaml(&yaml).unwrap_err().to_string();
    assert!(error.contains("repetition limit exceeded"), "{error}");
}

#[test]
fn recorded_streams_are_read_next_to_the_file_bounded_and_named_when_wrong() {
    let dir = std::env::temp_dir().join(format!("crewline-eval-recorded-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("streams")).expect("a scratch dir");
    std::fs::write(
        dir.join("streams/answer.sse"),
        "# source: a test\n\ndata: {\"choices\":[]}\n\ndata: [DONE]\n\n",
    )
    .expect("a recording");
    let suite = |stream: &str| {
        format!(
            "name = \"x\"\ncrew.command = [\"crew\", \"{{port}}\"]\n\
             [[model.replies]]\nreply = {{ recorded_sse = \"{stream}\" }}\n\
             [[turns]]\nsay = \"hi\"\n"
        )
    };
    let load = |text: String| {
        let path = dir.join("suite.toml");
        std::fs::write(&path, text).expect("the suite");
        ScenarioFile::load(&path)
    };

    // Read from the file's folder, its `#` header dropped: the body the mock streams.
    let scenarios = load(suite("streams/answer.sse")).expect("the suite reads");
    let model = scenarios[0].model.as_ref().expect("its model");
    assert_eq!(
        model.replies[0]["reply"]["sse_body"],
        "data: {\"choices\":[]}\n\ndata: [DONE]\n\n"
    );
    assert!(model.replies[0]["reply"].get("recorded_sse").is_none());
    model.script().expect("a valid script");

    // A missing file is named.
    let error = load(suite("streams/missing.sse"))
        .expect_err("no such recording")
        .to_string();
    assert!(error.contains("`recorded_sse`"), "{error}");
    assert!(error.contains("missing.sse"), "{error}");

    // A recording larger than one answer is refused, read no further than its bound.
    let big = std::fs::File::create(dir.join("streams/big.sse")).expect("a file");
    big.set_len(crewline_eval::scenario::MAX_RECORDED_SSE_BYTES + 1)
        .expect("a sparse file");
    let error = load(suite("streams/big.sse"))
        .expect_err("too large")
        .to_string();
    assert!(error.contains("larger than"), "{error}");

    // A recording beside scripted content is ambiguous: refused.
    let error = load(suite("streams/answer.sse").replace(
        "recorded_sse =",
        "content_chunks = [\"hi\"], recorded_sse =",
    ))
    .expect_err("both")
    .to_string();
    assert!(error.contains("is the whole answer"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

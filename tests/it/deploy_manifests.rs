//! The deployment files (deploy/Dockerfile, deploy/kubernetes/*.yaml) against the server they
//! deploy: ports, probe paths, drain timing, secrets and environment names, so the files cannot
//! drift from what the server accepts.

use crate::common;

use std::{collections::BTreeSet, path::Path, time::Duration};

use crewline::{SessionSetup, llm::ScriptedLlm, prelude::Agent};
use crewline_examples::voice_agent::Args as CrewArgs;
use crewline_server::{CrewServer, DEFAULT_DRAIN_TIMEOUT, DEFAULT_PORT};
use yaml_rust2::{Yaml, YamlLoader};

/// Room left between the end of the drain and the kubelet's SIGKILL.
const MARGIN: Duration = Duration::from_secs(5);

fn deploy(path: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("deploy")
        .join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The one document of `deploy/kubernetes/<name>`.
fn manifest(name: &str) -> Yaml {
    let mut docs = YamlLoader::load_from_str(&deploy(&format!("kubernetes/{name}")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(docs.len(), 1, "{name} holds one document");
    docs.remove(0)
}

fn str_of<'a>(yaml: &'a Yaml, what: &str) -> &'a str {
    yaml.as_str()
        .unwrap_or_else(|| panic!("{what} is a string: {yaml:?}"))
}

fn int_of(yaml: &Yaml, what: &str) -> i64 {
    yaml.as_i64()
        .unwrap_or_else(|| panic!("{what} is an integer: {yaml:?}"))
}

fn container(deployment: &Yaml) -> &Yaml {
    let containers = &deployment["spec"]["template"]["spec"]["containers"];
    assert_eq!(containers.as_vec().map(Vec::len), Some(1), "one container");
    &containers[0]
}

/// Parses `args` as the crew binary does (the voice_agent example's own flags, the image's default crew).
fn crew_args(args: &[&str]) -> CrewArgs {
    let argv = std::iter::once("crew").chain(args.iter().copied());
    <CrewArgs as clap::Parser>::try_parse_from(argv)
        .unwrap_or_else(|e| panic!("the crew binary refuses {args:?}: {e}"))
}

#[test]
fn the_container_runs_the_crew_on_the_port_every_manifest_names() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let args: Vec<&str> = container["args"]
        .as_vec()
        .expect("args")
        .iter()
        .map(|a| str_of(a, "an arg"))
        .collect();
    let parsed = crew_args(&args);
    assert_eq!(parsed.crew.port, DEFAULT_PORT);
    assert!(
        !parsed.crew.serve.host.is_loopback(),
        "a pod must listen beyond loopback"
    );

    let port = &container["ports"][0];
    assert_eq!(str_of(&port["name"], "port name"), "http");
    assert_eq!(
        int_of(&port["containerPort"], "containerPort"),
        i64::from(DEFAULT_PORT)
    );
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(
        str_of(&annotations["prometheus.io/port"], "scrape port"),
        DEFAULT_PORT.to_string()
    );
    let service = manifest("service.yaml");
    assert_eq!(
        str_of(&service["spec"]["ports"][0]["targetPort"], "targetPort"),
        "http"
    );

    // The image's defaults agree: the same port, exposed and passed, and the same args.
    let dockerfile = deploy("Dockerfile");
    assert!(dockerfile.contains(&format!("EXPOSE {DEFAULT_PORT}")));
    let cmd = format!(
        "CMD [{}]",
        args.iter()
            .map(|a| format!("{a:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    assert!(dockerfile.contains(&cmd), "the Dockerfile's CMD is {cmd}");
    assert!(dockerfile.contains("STOPSIGNAL SIGTERM"));
    assert!(dockerfile.contains(&format!("http://127.0.0.1:{DEFAULT_PORT}/health")));
    assert!(dockerfile.contains("USER 10001"), "non-root");
}

#[test]
fn the_grace_period_covers_the_pre_stop_pause_and_the_servers_drain() {
    let deployment = manifest("deployment.yaml");
    let spec = &deployment["spec"]["template"]["spec"];
    let grace = int_of(&spec["terminationGracePeriodSeconds"], "grace period");
    let pre_stop = &container(&deployment)["lifecycle"]["preStop"]["exec"]["command"];
    assert_eq!(str_of(&pre_stop[0], "preStop"), "sleep");
    let pause: i64 = str_of(&pre_stop[1], "sleep seconds")
        .parse()
        .expect("seconds");
    let drain = i64::try_from(DEFAULT_DRAIN_TIMEOUT.as_secs()).expect("seconds");
    let margin = i64::try_from(MARGIN.as_secs()).expect("seconds");
    assert!(
        grace >= pause + drain + margin,
        "terminationGracePeriodSeconds {grace} < preStop {pause} + drain {drain} + {margin}: \
         the kubelet would kill live calls"
    );
    // A rollout never takes capacity away, and a disruption takes one replica at a time.
    let rolling = &deployment["spec"]["strategy"]["rollingUpdate"];
    assert_eq!(int_of(&rolling["maxUnavailable"], "maxUnavailable"), 0);
    assert_eq!(
        int_of(&manifest("pdb.yaml")["spec"]["maxUnavailable"], "pdb"),
        1
    );
}

#[test]
fn every_selector_and_reference_points_at_the_deployment() {
    let deployment = manifest("deployment.yaml");
    let name = str_of(&deployment["metadata"]["name"], "name");
    let labels = &deployment["spec"]["template"]["metadata"]["labels"];
    assert_eq!(deployment["spec"]["selector"]["matchLabels"], *labels);
    assert_eq!(manifest("service.yaml")["spec"]["selector"], *labels);
    assert_eq!(
        manifest("pdb.yaml")["spec"]["selector"]["matchLabels"],
        *labels
    );
    for hpa in ["hpa.yaml", "hpa-active-sessions.yaml"] {
        let target = &manifest(hpa)["spec"]["scaleTargetRef"];
        assert_eq!(str_of(&target["kind"], hpa), "Deployment");
        assert_eq!(str_of(&target["name"], hpa), name);
    }
}

#[test]
fn every_variable_is_one_the_server_reads_and_every_secret_key_exists() {
    let deployment = manifest("deployment.yaml");
    let secret = manifest("secret.example.yaml");
    let sources = workspace_sources();
    for var in container(&deployment)["env"].as_vec().expect("env") {
        let name = str_of(&var["name"], "env name");
        let read = match name {
            // tracing-subscriber's EnvFilter::try_from_default_env, in every binary.
            "RUST_LOG" => true,
            _ => sources.contains(&format!("\"{name}\"")),
        };
        assert!(read, "no crewline source reads {name}");
        if let Some(key) = var["valueFrom"]["secretKeyRef"]["key"].as_str() {
            let secret_name = str_of(&var["valueFrom"]["secretKeyRef"]["name"], "secret");
            assert_eq!(
                secret_name,
                str_of(&secret["metadata"]["name"], "secret name")
            );
            assert!(
                !secret["stringData"][key].is_badvalue(),
                "{name} reads key {key}, which secret.example.yaml lacks"
            );
        }
    }
    assert_eq!(crewline_auth_token_env(), "CREWLINE_AUTH_TOKEN");
}

/// The name the server reads its token from.
fn crewline_auth_token_env() -> &'static str {
    crewline_server::TOKEN_ENV
}

/// Every Rust source of the workspace's crates, concatenated.
fn workspace_sources() -> String {
    fn walk(dir: &Path, out: &mut String) {
        for entry in std::fs::read_dir(dir).expect("readable").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push_str(&std::fs::read_to_string(&path).expect("utf-8"));
            }
        }
    }
    let mut out = String::new();
    walk(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("crates"),
        &mut out,
    );
    out
}

#[tokio::test]
async fn the_probe_paths_and_the_scraped_metrics_are_served() {
    let deployment = manifest("deployment.yaml");
    let container = container(&deployment);
    let mut paths = BTreeSet::new();
    for probe in ["startupProbe", "livenessProbe", "readinessProbe"] {
        let get = &container[probe]["httpGet"];
        assert_eq!(str_of(&get["port"], probe), "http");
        paths.insert(str_of(&get["path"], probe).to_owned());
    }
    assert_eq!(
        paths,
        BTreeSet::from(["/health".to_owned(), "/ready".to_owned()])
    );
    let scraped = str_of(
        &deployment["spec"]["template"]["metadata"]["annotations"]["prometheus.io/path"],
        "scrape path",
    );
    let autoscaled = str_of(
        &manifest("hpa-active-sessions.yaml")["spec"]["metrics"][0]["pods"]["metric"]["name"],
        "metric",
    )
    .to_owned();

    let server = CrewServer::new(|setup: SessionSetup| {
        let crew = Agent::builder(ScriptedLlm::new([]))
            .build()
            .map(|agent| agent.crew_for(&setup));
        async move { crew }
    });
    let addr = common::listen(server).await;
    let http = reqwest::Client::new();
    for path in &paths {
        let response = http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .expect("probe");
        assert_eq!(response.status(), 200, "{path}");
    }
    let metrics = http
        .get(format!("http://{addr}{scraped}"))
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    assert!(
        metrics.contains(&format!("{autoscaled} ")),
        "the autoscaler's metric {autoscaled} is served at {scraped}"
    );

    // Every series the Grafana dashboard queries is one the server exports.
    let dashboard: serde_json::Value =
        serde_json::from_str(&deploy("grafana/crewline.json")).expect("dashboard JSON");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(!panels.is_empty());
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("expr");
            let names = metric_names(expr);
            assert!(!names.is_empty(), "{expr}");
            for name in names {
                let typed = |family: &str| {
                    metrics
                        .lines()
                        .any(|line| line.starts_with(&format!("# TYPE {family} ")))
                };
                assert!(
                    typed(&name) || typed(&format!("{name}_total")),
                    "panel {:?} queries {name}, which /metrics does not serve",
                    panel["title"]
                );
            }
        }
    }
}

/// The metric families a PromQL expression reads (`crewline_*`, with the histogram series
/// suffixes and a counter's `_total` taken off).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(start) = rest.find("crewline_") {
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        let name = &tail[..end];
        let family = ["_bucket", "_count", "_sum"]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix))
            .unwrap_or(name);
        // Counters are `# TYPE name counter` without their `_total`.
        names.insert(family.strip_suffix("_total").unwrap_or(family).to_owned());
        rest = &tail[end..];
    }
    names
}

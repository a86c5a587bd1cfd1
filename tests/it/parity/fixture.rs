//! The recorded reference fixtures (`tests/fixtures/reference/<scenario>.json`), as described in
//! `reference/README.md`.

use serde_json::Value;

/// One recorded scenario.
#[derive(Debug, Clone)]
pub struct Fixture {
    pub scenario: String,
    pub crew: String,
    pub steps: Vec<Step>,
    pub llm_script: Value,
    pub llm_requests: Vec<LlmRequest>,
    pub outbound: Vec<Frame>,
    pub connections: Vec<Connection>,
    pub http: Vec<HttpProbe>,
}

/// One inbound step and how it went in the reference.
#[derive(Debug, Clone)]
pub struct Step {
    pub index: usize,
    pub op: Op,
    pub result: StepResult,
}

/// What a step does.
#[derive(Debug, Clone)]
pub enum Op {
    /// Send `frame` (JSON) as a binary or text frame.
    Send { frame: Value, text: bool },
    /// Send `data` as is.
    SendRaw { data: String, text: bool },
    /// Wait until `count` frames of `kind` arrive on the current connection (counted from the
    /// step's start), or until it closes (`__closed__`).
    WaitFor {
        kind: String,
        count: usize,
        timeout: f64,
    },
    /// Sleep.
    Settle { seconds: f64 },
    /// Close the current connection (1000, "client done").
    Close,
    /// Open a new connection.
    Connect,
    /// An HTTP probe.
    Http { method: String, path: String },
}

/// A step's outcome: `ok`, and whether a wait timed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepResult {
    pub ok: bool,
    pub timed_out: bool,
}

/// One request the reference's mock LLM received.
#[derive(Debug, Clone)]
pub struct LlmRequest {
    pub path: String,
    pub body: Value,
    pub outcome: String,
}

/// One outbound frame the reference sent.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    pub conn: usize,
    /// `binary` or `text`.
    pub kind: String,
    /// The decoded JSON, normalised (generated timestamps are `<timestamp>`, tool latencies
    /// `<latency_ms>`); `None` for a frame that is not JSON.
    pub event: Option<Value>,
    /// The wire text (normalised the same way).
    pub raw: String,
}

impl Frame {
    /// The event's `type`.
    pub fn kind_of(&self) -> &str {
        self.event
            .as_ref()
            .and_then(|e| e.get("type"))
            .and_then(Value::as_str)
            .unwrap_or("<not json>")
    }
}

/// How a connection ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub open_at_end: bool,
    pub close: CloseInfo,
}

/// The closing of one connection, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseInfo {
    /// The close frame the server sent, if any.
    pub received: Option<(u16, String)>,
    /// The close frame the client sent, if any.
    pub sent: Option<(u16, String)>,
    /// Whether the server's close frame came first.
    pub server_first: Option<bool>,
    /// The close code seen by the client (1006: dropped without a close frame).
    pub code: u16,
}

/// One HTTP probe.
#[derive(Debug, Clone)]
pub struct HttpProbe {
    pub path: String,
    pub status: u16,
    pub content_type: String,
    pub body: Value,
}

fn str_of(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

fn close_frame(value: &Value) -> Option<(u16, String)> {
    let code = value.get("code")?.as_u64()?;
    Some((code as u16, str_of(value, "reason")))
}

impl Fixture {
    /// Loads `tests/fixtures/reference/<scenario>.json`.
    pub fn load(scenario: &str) -> Fixture {
        let path = format!(
            "{}/tests/fixtures/reference/{scenario}.json",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}"));
        Self::from_json(&value)
    }

    fn from_json(value: &Value) -> Fixture {
        let array = |key: &str| value[key].as_array().cloned().unwrap_or_default();
        let steps = array("inbound")
            .iter()
            .enumerate()
            .map(|(index, step)| Step {
                index,
                op: op(step),
                result: StepResult {
                    ok: step["result"]["ok"].as_bool().unwrap_or(false),
                    timed_out: step["result"]["timed_out"].as_bool().unwrap_or(false),
                },
            })
            .collect();
        let llm_requests = array("llm_requests")
            .iter()
            .map(|r| LlmRequest {
                path: str_of(r, "path"),
                body: r["body"].clone(),
                outcome: str_of(r, "outcome"),
            })
            .collect();
        let outbound = array("outbound")
            .iter()
            .map(|f| Frame {
                conn: f["conn"].as_u64().unwrap_or(0) as usize,
                kind: str_of(f, "frame"),
                event: f.get("event").cloned(),
                raw: str_of(f, "raw"),
            })
            .collect();
        let connections = array("connections")
            .iter()
            .map(|c| {
                let close = &c["close"];
                Connection {
                    open_at_end: c["open_at_end"].as_bool().unwrap_or(false),
                    close: CloseInfo {
                        received: close_frame(&close["close_frame_received"]),
                        sent: close_frame(&close["close_frame_sent"]),
                        server_first: close["received_then_sent"].as_bool(),
                        code: close["close_code"].as_u64().unwrap_or(1006) as u16,
                    },
                }
            })
            .collect();
        let http = array("http")
            .iter()
            .map(|h| HttpProbe {
                path: str_of(h, "path"),
                status: h["status"].as_u64().unwrap_or(0) as u16,
                content_type: str_of(h, "content_type"),
                body: h["body"].clone(),
            })
            .collect();
        Fixture {
            scenario: str_of(value, "scenario"),
            crew: str_of(value, "crew"),
            steps,
            llm_script: value["llm_script"].clone(),
            llm_requests,
            outbound,
            connections,
            http,
        }
    }

    /// Every timestamp the scenario sends (echoes must carry these unchanged).
    pub fn inbound_timestamps(&self) -> Vec<String> {
        self.steps
            .iter()
            .filter_map(|step| match &step.op {
                Op::Send { frame, .. } => frame.get("timestamp")?.as_str().map(str::to_owned),
                _ => None,
            })
            .collect()
    }
}

fn op(step: &Value) -> Op {
    let text = step["as"].as_str() == Some("text");
    match step["op"].as_str().unwrap_or_default() {
        "send" => Op::Send {
            frame: step["frame"].clone(),
            text,
        },
        "send_raw" => Op::SendRaw {
            data: str_of(step, "data"),
            text,
        },
        "wait_for" => Op::WaitFor {
            kind: str_of(step, "type"),
            count: step["count"].as_u64().unwrap_or(1) as usize,
            timeout: step["timeout"].as_f64().unwrap_or(10.0),
        },
        "settle" => Op::Settle {
            seconds: step["seconds"].as_f64().unwrap_or(0.0),
        },
        "close" => Op::Close,
        "connect" => Op::Connect,
        "http" => Op::Http {
            method: str_of(step, "method"),
            path: str_of(step, "path"),
        },
        other => panic!("unknown step op {other:?}"),
    }
}

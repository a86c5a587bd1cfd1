#!/usr/bin/env python3
"""Record golden fixtures from the real Python reference crew (smallestai==5.14.0).

For every scenario: start the mock LLM (mock_llm.py) and a reference crew server
(crews.py) as subprocesses on free 127.0.0.1 ports, wait for readiness, drive the
crew over a real WebSocket with scripted platform frames, record every frame it
sends back, and write ``tests/fixtures/reference/<scenario>.json``.

    reference/.venv/bin/python reference/record.py            # all scenarios
    reference/.venv/bin/python reference/record.py --only tool_turn --only handshake
    reference/.venv/bin/python reference/record.py --list

Exit status: 0 when every selected scenario was recorded (a reference that
crashes, hangs or drops the socket is recorded as data, not a failure); 1 when
the harness itself could not run a scenario (a server that does not start, a
port that cannot be bound, ...), with a message naming the scenario.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Dict, List, Optional

import websockets
from websockets.exceptions import ConnectionClosed

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUT = REPO / "tests" / "fixtures" / "reference"
LOG_DIR = HERE / "logs"
PY = sys.executable

SCENARIO_TIMEOUT_S = 60.0
READY_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 5.0

# Inbound timestamps are fixed so that echoes of inbound events are deterministic
# (and show that the reference keeps the original timestamp).
INBOUND_TS_BASE = "2030-01-02T03:04:"

NAIVE_ISO_RE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{6})?$")


class HarnessError(RuntimeError):
    """The harness (not the reference) failed: exit non-zero."""


# --------------------------------------------------------------------------- processes

_PROCS: List[subprocess.Popen] = []


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env() -> Dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env["PYTHONUNBUFFERED"] = "1"
    env["SMALLESTAI_LOG_DIR"] = str(LOG_DIR / "loguru")
    env.setdefault("SMALLESTAI_LOG_LEVEL", "INFO")
    env.pop("OPENAI_API_KEY", None)
    env.pop("OPENAI_BASE_URL", None)
    return env


def spawn(args: List[str], log_path: Path) -> subprocess.Popen:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "wb")
    proc = subprocess.Popen(
        args,
        cwd=str(HERE),
        env=child_env(),
        stdout=fh,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # own process group: killable as a unit
    )
    fh.close()
    _PROCS.append(proc)
    return proc


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=5)
    if proc in _PROCS:
        _PROCS.remove(proc)


def stop_all() -> None:
    for p in list(_PROCS):
        stop(p)


# --------------------------------------------------------------------------- http

_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def http(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Dict[str, Any]:
    data = None
    headers = {}
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with _OPENER.open(req, timeout=timeout) as resp:
            raw = resp.read()
            status = resp.status
            ctype = resp.headers.get("content-type")
    except urllib.error.HTTPError as e:
        raw = e.read()
        status = e.code
        ctype = e.headers.get("content-type")
    text = raw.decode("utf-8", "replace")
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return {"status": status, "content_type": ctype, "body_raw": text, "body": parsed}


async def ahttp(method: str, url: str, body: Any = None, timeout: float = 5.0) -> Dict[str, Any]:
    return await asyncio.to_thread(http, method, url, body, timeout)


def wait_http_ok(url: str, proc: subprocess.Popen, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise HarnessError(f"{what} exited with code {proc.returncode} before becoming ready")
        try:
            r = http("GET", url, timeout=1.0)
            if r["status"] == 200:
                return
            last = f"HTTP {r['status']}: {r['body_raw'][:200]}"
        except Exception as e:  # noqa: BLE001 - connection refused while booting
            last = repr(e)
        time.sleep(0.1)
    raise HarnessError(f"{what} not ready at {url} after {timeout}s (last: {last})")


# --------------------------------------------------------------------------- frames


def ts(i: int) -> str:
    return f"{INBOUND_TS_BASE}{i:02d}.{(i * 1111) % 1000000:06d}"


def init_frame(stamp: Optional[str] = ts(0)) -> Dict[str, Any]:
    f: Dict[str, Any] = {"type": "system.init"}
    if stamp:
        f["timestamp"] = stamp
    f.update(
        {
            "version": "1.0",
            "session_context": {
                "initial_variables": {"name": "Ada"},
                "conversation_type": "webcall",
                "caller": None,
            },
            "output_agent_settings": {"interruptible": True},
        }
    )
    return f


def ev(type_: str, stamp: Optional[str] = None, **fields: Any) -> Dict[str, Any]:
    f: Dict[str, Any] = {"type": type_}
    if stamp:
        f["timestamp"] = stamp
    f.update(fields)
    return f


def send(frame: Any, as_: str = "binary") -> Dict[str, Any]:
    return {"op": "send", "frame": frame, "as": as_}


def send_raw(data: str, as_: str = "binary") -> Dict[str, Any]:
    return {"op": "send_raw", "data": data, "as": as_}


def wait_for(type_: str, count: int = 1, timeout: float = 10.0) -> Dict[str, Any]:
    return {"op": "wait_for", "type": type_, "count": count, "timeout": timeout}


def settle(seconds: float) -> Dict[str, Any]:
    return {"op": "settle", "seconds": seconds}


def http_get(path: str) -> Dict[str, Any]:
    return {"op": "http", "method": "GET", "path": path}


CLOSE = {"op": "close"}
CONNECT = {"op": "connect"}
WAIT_CLOSED = {"op": "wait_for", "type": "__closed__", "count": 1, "timeout": 12.0}


def handshake(base: int = 0) -> List[Dict[str, Any]]:
    return [
        send(init_frame(ts(base))),
        send(ev("system.user.joined", ts(base + 1))),
        wait_for("agent.ready", timeout=10.0),
        settle(0.3),
    ]


def user_turn(text: str, base: int, history: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    msgs = list(history or []) + [{"role": "user", "content": text}]
    return [
        send(ev("agent.transcript.update", ts(base), role="user", content=text)),
        send(ev("system.llm.request", ts(base + 1), messages=msgs)),
    ]


# --------------------------------------------------------------------------- llm scripts


def text_reply(chunks: List[str], delay_ms: int = 0) -> Dict[str, Any]:
    r: Dict[str, Any] = {"content_chunks": chunks}
    if delay_ms:
        r["chunk_delay_ms"] = delay_ms
    return r


def weather_call(call_id: str, city: str) -> Dict[str, Any]:
    return {"id": call_id, "name": "get_weather", "arguments_chunks": ['{"loca', 'tion": "', city + '"}']}


HELLO = text_reply(["Hello!", " How can I", " help you", " today?"])
SLOW20 = text_reply([f"word{i} " for i in range(20)], delay_ms=100)


# --------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    description: str
    steps: List[Dict[str, Any]]
    llm_script: Dict[str, Any] = field(default_factory=lambda: {"replies": [{"reply": HELLO}]})
    crew: str = "weather"
    notes: List[str] = field(default_factory=list)


def bad_frame_variant(name: str, desc: str, bad_steps: List[Dict[str, Any]], notes: List[str]) -> Scenario:
    return Scenario(
        notes=notes,
        name=name,
        description=desc + " Then a good text turn on the same socket.",
        steps=handshake() + bad_steps + [settle(0.5)] + user_turn("Hi there", 10) + [wait_for("agent.llm.response.end", timeout=5.0), settle(0.5)],
    )


BAD_TEXT_FRAME = send(ev("system.user.started_speaking", ts(5)), as_="text")
BAD_NOT_JSON = send_raw("this is not json {", as_="binary")
BAD_NO_TYPE = send({"timestamp": ts(6), "foo": "bar"})
BAD_UNKNOWN_TYPE = send(ev("system.foo", ts(7), bar=1))
BAD_WRONG_FIELD = send(ev("system.llm.request", ts(8), messages=5))
EXTRA_FIELD = send(ev("system.user.stopped_speaking", ts(9), pause_ms=250, some_new_field={"x": 1}))

SCENARIOS: List[Scenario] = [
    Scenario(
        "http_endpoints",
        "GET /, /health, /ready (and a 404 path and a plain-HTTP GET /ws) before any call, then again during a call (after handshake).",
        [
            http_get("/"),
            http_get("/health"),
            http_get("/ready"),
            http_get("/does-not-exist"),
            http_get("/ws"),
            CONNECT,
            *handshake(),
            http_get("/"),
            http_get("/health"),
            http_get("/ready"),
            CLOSE,
            settle(0.5),
            http_get("/"),
            http_get("/health"),
        ],
        notes=[
            "active_sessions is 0 during a live call too: SessionHandler registers a session only after CrewSession.initialize() returns, i.e. after the call is over, and removes it immediately.",
            "/ready is already 200 when the port accepts connections: the startup dry-run runs in the (deprecated) FastAPI startup event before uvicorn binds, so the 503 body cannot be observed from outside.",
            "Unknown paths and a plain-HTTP GET /ws answer 404 {\"detail\":\"Not Found\"} (FastAPI default). HTTP bodies are compact JSON (no spaces), key order as listed.",
        ],
    ),
    Scenario(
        "handshake",
        "system.init (version 1.0, webcall, initial_variables {name: Ada}, caller null, output_agent_settings {interruptible: true}) then system.user.joined.",
        handshake() + [settle(1.0)],
        notes=[
            "agent.ready is the first frame; the output node then echoes system.user.joined with the timestamp the platform sent.",
            "The reference never sends a close frame on its own during a healthy call.",
        ],
    ),
    Scenario(
        "handshake_wrong_first_frame",
        "First frame is system.user.joined instead of system.init; wait up to 12 s for the server to close; if the socket is still open, send system.init afterwards.",
        [send(ev("system.user.joined", ts(1))), WAIT_CLOSED, send(init_frame(ts(2))), settle(1.5)],
        notes=[
            "The reference sends agent.error with severity 'warning' (the model default, not 'fatal') and payload {} and a Python class repr in the message, then still runs the setup handler; session.start() raises ValueError('Session not initialized') and uvicorn drops the TCP connection without a WebSocket close frame (client sees 1006).",
        ],
    ),
    Scenario(
        "handshake_invalid_init",
        "First frame is a system.init that fails validation (session_context without conversation_type); wait up to 12 s for the server to close.",
        [
            send(ev("system.init", ts(0), version="1.0", session_context={"initial_variables": {}})),
            WAIT_CLOSED,
            settle(0.5),
        ],
        notes=[
            "A system.init that fails validation produces NO frame at all (no agent.error); the connection is dropped without a close frame (1006).",
        ],
    ),
    Scenario(
        "handshake_timeout",
        "Connect and send nothing; wait up to 14 s to see what the server does when no system.init arrives (the reference waits 10 s).",
        [CONNECT, {"op": "wait_for", "type": "__closed__", "count": 1, "timeout": 14.0}, settle(0.5)],
        notes=[
            "With no first frame the reference waits 10 s, sends nothing, and drops the connection without a close frame (1006).",
        ],
    ),
    Scenario(
        "text_turn",
        "Handshake, agent.transcript.update {user, 'Hi there'} and system.llm.request {messages: [user 'Hi there']} — both WITHOUT a timestamp field, to record what the echo carries then. LLM streams 4 chunks.",
        handshake()
        + [
            send(ev("agent.transcript.update", role="user", content="Hi there")),
            send(ev("system.llm.request", messages=[{"role": "user", "content": "Hi there"}])),
            wait_for("agent.llm.response.end"),
            settle(0.5),
        ],
        notes=[
            "Inbound frames without 'timestamp' get one from pydantic's default (datetime.now at parse time), so their echoes carry a crew-generated timestamp.",
            "The output node echoes every event it processes: agent.transcript.update right away, system.llm.request only AFTER agent.llm.response.end.",
            "request_id on agent.llm.response.start is null.",
        ],
    ),
    Scenario(
        "tool_turn",
        "User asks for the weather in Paris; the LLM calls get_weather once (OpenAI-style streamed tool call), then answers with text using the tool result.",
        handshake() + user_turn("What's the weather in Paris?", 10) + [wait_for("agent.llm.response.end"), settle(0.5)],
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["It's sunny", " and 18°C", " in Paris."])},
                {"reply": {"tool_calls": [weather_call("call_weather_paris", "Paris")]}},
            ]
        },
        notes=[
            "agent.log tool_call_start/tool_call_end are emitted between response.start and the text chunks; turn_id is \"\"; latency is an int in ms (replaced by '<latency_ms>').",
            "The assistant tool-call message and tool result message in the 2nd LLM request come from the crew code (crews.py, same shape as the SDK's DeterministicRouter: content null, tc.to_dict(), ToolResult.to_message() which includes 'name').",
        ],
    ),
    Scenario(
        "two_tools",
        "Weather in Paris and Tokyo: the LLM returns two tool calls whose headers (index/id/name) arrive in ONE delta chunk, then argument fragments per index; then text.",
        handshake() + user_turn("Weather in Paris and Tokyo?", 10) + [wait_for("agent.llm.response.end"), settle(0.5)],
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["Both cities", " are sunny", " today."])},
                {
                    "reply": {
                        "tool_calls": [weather_call("call_paris", "Paris"), weather_call("call_tokyo", "Tokyo")],
                        "tool_calls_in_one_chunk": True,
                    }
                },
            ]
        },
        notes=[
            "The reference's stream parser only reads delta.tool_calls[0]: with two call headers in one chunk the second call (call_tokyo) is silently DROPPED - only one tool runs and the 2nd LLM request carries only one tool call/result.",
        ],
    ),
    Scenario(
        "two_tools_sequential",
        "Same as two_tools, but the two tool-call headers arrive in separate chunks (call 0 header, its args, call 1 header, its args) — the shape OpenAI actually streams.",
        handshake() + user_turn("Weather in Paris and Tokyo?", 10) + [wait_for("agent.llm.response.end"), settle(0.5)],
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["Both cities", " are sunny", " today."])},
                {"reply": {"tool_calls": [weather_call("call_paris", "Paris"), weather_call("call_tokyo", "Tokyo")]}},
            ]
        },
        notes=[
            "With one header per chunk both calls are assembled and run; tool events come as start0, end0, start1, end1.",
        ],
    ),
    Scenario(
        "tool_errors",
        "Three tool calls in one response (one header per chunk): get_weather('Atlantis') raises ValueError, an unknown tool 'get_time', and get_weather with malformed JSON arguments; then text after the tool results.",
        handshake() + user_turn("Weather in Atlantis?", 10) + [wait_for("agent.llm.response.end"), settle(0.5)],
        crew="tool_errors",
        notes=[
            "A tool that raises gives tool_call_start then tool_call_error {turn_id, tool_call_id, function_name, context: {arguments}, error, success: false} (no latency); the exception text becomes the tool message content for the LLM.",
            "An unknown tool name or malformed JSON arguments fail BEFORE tool_call_start: only tool_call_error is sent, with context.arguments {}.",
        ],
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["Sorry,", " I couldn't get that."])},
                {
                    "reply": {
                        "tool_calls": [
                            weather_call("call_atlantis", "Atlantis"),
                            {"id": "call_unknown", "name": "get_time", "arguments_chunks": ['{"city": "Paris"}']},
                            {"id": "call_badjson", "name": "get_weather", "arguments_chunks": ['{"location": "Par']},
                        ]
                    }
                },
            ]
        },
    ),
    Scenario(
        "interrupt_mid_stream",
        "Slow LLM stream (20 chunks, 100 ms apart). After the 2nd agent.llm.response.chunk arrives, send system.control.interrupt; settle 1 s; then a second system.llm.request that must be answered.",
        handshake()
        + user_turn("Tell me a long story.", 10)
        + [
            wait_for("agent.llm.response.chunk", count=2),
            send(ev("system.control.interrupt", ts(12))),
            settle(1.0),
            send(
                ev(
                    "system.llm.request",
                    ts(13),
                    messages=[
                        {"role": "user", "content": "Tell me a long story."},
                        {"role": "assistant", "content": "word0 word1 "},
                        {"role": "user", "content": "Actually, never mind."},
                    ],
                )
            ),
            wait_for("agent.llm.response.end"),
            settle(0.5),
        ],
        llm_script={
            "replies": [
                {"when": {"request_index": 0}, "reply": SLOW20},
                {"reply": text_reply(["Sure,", " no problem."])},
            ]
        },
        notes=[
            "On interrupt the generation task is cancelled: agent.llm.response.end is still sent, then the echo of system.control.interrupt. The interrupted system.llm.request is never echoed. The LLM HTTP stream is closed (mock sees client_disconnected).",
        ],
    ),
    Scenario(
        "llm_error_mid_stream",
        "The LLM stream is cut (TCP abort, incomplete chunked body) after the role delta + 2 text chunks; then a second system.llm.request to see whether the call goes on.",
        handshake()
        + user_turn("Hi there", 10)
        + [wait_for("agent.llm.response.end", timeout=15.0), settle(0.5)]
        + [
            send(ev("system.llm.request", ts(12), messages=[{"role": "user", "content": "Hi there"}, {"role": "user", "content": "Hello?"}])),
            wait_for("agent.llm.response.end", timeout=15.0),
            settle(0.5),
        ],
        llm_script={
            "replies": [
                {
                    "when": {"request_index": 0},
                    "reply": {"content_chunks": ["Hello", " there,", " how", " are", " you?"], "cut_after_chunks": 3},
                },
                {"reply": text_reply(["Sorry,", " I'm back."])},
            ]
        },
        notes=[
            "A cut stream gives agent.error severity fatal (error_class APIConnectionError) then agent.llm.response.end; the call goes on and the next request is answered.",
        ],
    ),
    Scenario(
        "llm_error_500",
        "The LLM answers HTTP 500 before the first byte (on every try — the openai client retries); then a second system.llm.request answered normally.",
        handshake()
        + user_turn("Hi there", 10)
        + [wait_for("agent.llm.response.end", timeout=20.0), settle(0.5)]
        + [
            send(ev("system.llm.request", ts(12), messages=[{"role": "user", "content": "Hi there"}, {"role": "user", "content": "Hello?"}])),
            wait_for("agent.llm.response.end", timeout=20.0),
            settle(0.5),
        ],
        llm_script={
            "replies": [
                {"when": {"last_user_contains": "Hi there"}, "reply": {"http_status": 500}},
                {"reply": text_reply(["Sorry,", " I'm back."])},
            ]
        },
        notes=[
            "The openai client retries a 500 twice (3 requests, x-stainless-retry-count 0,1,2, ~1-2 s of backoff) before agent.error fatal (InternalServerError) + end; the call goes on.",
        ],
    ),
    Scenario(
        "bad_frames",
        "After the handshake, on ONE socket: a TEXT frame with a valid event (system.user.started_speaking), a binary frame that is not JSON, JSON without 'type', unknown type 'system.foo', system.llm.request with messages: 5, a valid event with unknown extra fields; then a good text turn. The bad_frame_* scenarios run each bad frame on its own socket.",
        handshake()
        + [
            BAD_TEXT_FRAME,
            settle(0.5),
            BAD_NOT_JSON,
            settle(0.5),
            BAD_NO_TYPE,
            settle(0.5),
            BAD_UNKNOWN_TYPE,
            settle(0.5),
            BAD_WRONG_FIELD,
            settle(0.5),
            EXTRA_FIELD,
            settle(0.5),
        ]
        + user_turn("Hi there", 10)
        + [wait_for("agent.llm.response.end", timeout=5.0), settle(0.5)],
        notes=[
            "The TEXT frame kills the session: Starlette receive_json(mode='binary') raises KeyError('bytes') outside the per-event try, the receive loop runs cleanup() and the server closes with 1000 and an empty reason. Everything after it is not delivered.",
        ],
    ),
    bad_frame_variant("bad_frame_text", "A TEXT (not binary) frame holding a valid event (system.user.started_speaking).", [BAD_TEXT_FRAME], ["Text frames are fatal to the session (server close 1000, empty reason); no agent.error is sent."]),
    bad_frame_variant("bad_frame_not_json", "A binary frame that is not JSON.", [BAD_NOT_JSON], ["Non-JSON binary frames are fatal to the session (server close 1000, empty reason); no agent.error is sent."]),
    bad_frame_variant("bad_frame_no_type", "A binary JSON object without 'type'.", [BAD_NO_TYPE], ["JSON without 'type' is logged and dropped; the socket survives and the next turn is answered. No agent.error."]),
    bad_frame_variant("bad_frame_unknown_type", "A binary JSON event with unknown type 'system.foo'.", [BAD_UNKNOWN_TYPE], ["An unknown type is logged and dropped; the socket survives. No agent.error."]),
    bad_frame_variant("bad_frame_wrong_field_type", "system.llm.request with messages: 5 (wrong type).", [BAD_WRONG_FIELD], ["A validation error is logged and the frame dropped; the socket survives. No agent.error."]),
    bad_frame_variant(
        "frame_extra_fields",
        "A valid system.user.stopped_speaking carrying unknown extra fields (pause_ms, some_new_field).",
        [EXTRA_FIELD],
        ["Unknown extra fields are accepted and DROPPED from the echo (pydantic extra='ignore')."],
    ),
    Scenario(
        "end_call",
        "Crew whose end_call tool emits agent.end_call. The LLM says 'Thanks for calling.' and calls end_call in the same response; after the tool result it says 'Goodbye!'. Then another system.llm.request to see whether it is answered.",
        handshake()
        + user_turn("That's all, bye!", 10)
        + [wait_for("agent.llm.response.end"), settle(0.5)]
        + [
            send(ev("system.llm.request", ts(12), messages=[{"role": "user", "content": "That's all, bye!"}, {"role": "user", "content": "Are you still there?"}])),
            wait_for("agent.llm.response.end", timeout=3.0),
            settle(0.5),
        ],
        crew="end_call",
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["Goodbye!"])},
                {"when": {"request_index": 0}, "reply": {"content_chunks": ["Thanks for calling."], "tool_calls": [{"id": "call_end", "name": "end_call", "arguments_chunks": ["{}"]}]}},
                {"reply": text_reply(["I should not be asked after end_call."])},
            ]
        },
        notes=[
            "Inside the tool, agent.end_call is emitted between tool_call_start and tool_call_end; tool_call_end.response is the handoff summary {status, action}; the tool result sent to the LLM is the string 'null'.",
            "The current turn continues after end_call (the 2nd tool-loop round streams 'Goodbye!'); later system.llm.requests get no start/chunk/end, only their echo. The socket stays open.",
        ],
    ),
    Scenario(
        "transfer_call",
        "Crew whose transfer_call tool emits agent.transfer_call (+15550100, cold transfer, no hold music). The LLM calls the tool (no text), then says 'Transferring you now.' after the tool result. Then another system.llm.request.",
        handshake()
        + user_turn("Put me through to a human, please.", 10)
        + [wait_for("agent.llm.response.end"), settle(0.5)]
        + [
            send(ev("system.llm.request", ts(12), messages=[{"role": "user", "content": "Put me through to a human, please."}, {"role": "user", "content": "Hello?"}])),
            wait_for("agent.llm.response.end", timeout=3.0),
            settle(0.5),
        ],
        crew="transfer",
        llm_script={
            "replies": [
                {"when": {"last_role": "tool"}, "reply": text_reply(["Transferring", " you now."])},
                {"when": {"request_index": 0}, "reply": {"tool_calls": [{"id": "call_transfer", "name": "transfer_call", "arguments_chunks": ["{}"]}]}},
                {"reply": text_reply(["I should not be asked after transfer."])},
            ]
        },
        notes=[
            "agent.transfer_call carries transfer_options with snake_case keys and explicit nulls (private_handoff_option, public_handoff_option, on_hold_music). Later system.llm.requests are only echoed.",
        ],
    ),
    Scenario(
        "background_error",
        "Crew with an extra BackgroundCrewNode that raises RuntimeError on agent.transcript.update: transcript -> agent.error (warning); then an LLM request is still answered; then a second transcript raises again.",
        handshake()
        + [send(ev("agent.transcript.update", ts(10), role="user", content="Hi there")), settle(0.5)]
        + [send(ev("system.llm.request", ts(11), messages=[{"role": "user", "content": "Hi there"}])), wait_for("agent.llm.response.end"), settle(0.5)]
        + [send(ev("agent.transcript.update", ts(12), role="assistant", content="Hello! How can I help you today?")), settle(0.5)],
        crew="background",
        notes=[
            "The background node's exception becomes agent.error severity 'warning' with payload {node_name, error_class, traceback}; the call goes on. The relative order of the error and the output node's transcript echo depends on set iteration order in the reference (Root's children is a set) and is not guaranteed.",
        ],
    ),
    Scenario(
        "disconnect_mid_generation",
        "Slow generation (20 chunks, 100 ms apart); the client closes the socket (1000) after the first chunk; 1 s later GET / and /health; then a new connection with a handshake and a quick text turn shows the server still serves calls.",
        [http_get("/"), http_get("/health")]
        + handshake()
        + user_turn("Tell me a long story.", 10)
        + [wait_for("agent.llm.response.chunk", count=1), CLOSE, settle(1.0), http_get("/"), http_get("/health")]
        + [CONNECT]
        + handshake(20)
        + user_turn("Hi there", 30)
        + [wait_for("agent.llm.response.end"), settle(0.5), http_get("/"), http_get("/health")],
        llm_script={
            "replies": [
                {"when": {"request_index": 0}, "reply": SLOW20},
                {"reply": HELLO},
            ]
        },
        notes=[
            "After the client closes, the reference does NOT cancel the running generation: node.stop() cannot cancel its task (task_manager is None once _running is False), so the LLM stream is consumed to the end (mock outcome 'completed') and session cleanup only completes then. active_sessions stays 0 throughout.",
        ],
    ),
]

SCENARIO_BY_NAME = {s.name: s for s in SCENARIOS}


# --------------------------------------------------------------------------- recording


class Conn:
    def __init__(self, idx: int, ws: Any):
        self.idx = idx
        self.ws = ws
        self.closed = asyncio.Event()
        self.close_info: Optional[Dict[str, Any]] = None
        self.task: Optional[asyncio.Task] = None


class Recorder:
    def __init__(self, scenario: Scenario, ws_url: str, http_base: str, llm_base: str):
        self.s = scenario
        self.ws_url = ws_url
        self.http_base = http_base
        self.llm_base = llm_base
        self.outbound: List[Dict[str, Any]] = []
        self.conns: List[Conn] = []
        self.inbound: List[Dict[str, Any]] = []
        self.http_log: List[Dict[str, Any]] = []
        self.step = -1
        self.inbound_stamps = set()

    # ---- websocket plumbing
    async def connect(self) -> Conn:
        try:
            ws = await websockets.connect(self.ws_url, proxy=None, open_timeout=5, max_size=None, compression=None)
        except Exception as e:  # noqa: BLE001
            raise HarnessError(f"cannot open WebSocket {self.ws_url}: {e!r}") from e
        conn = Conn(len(self.conns), ws)
        self.conns.append(conn)
        conn.task = asyncio.create_task(self._reader(conn))
        return conn

    async def _reader(self, conn: Conn) -> None:
        try:
            async for msg in conn.ws:
                is_text = isinstance(msg, str)
                raw = msg if is_text else msg.decode("utf-8", "replace")
                rec: Dict[str, Any] = {
                    "seq": len(self.outbound),
                    "conn": conn.idx,
                    "during_step": self.step,
                    "frame": "text" if is_text else "binary",
                }
                try:
                    obj = json.loads(raw)
                    rec["type"] = obj.get("type") if isinstance(obj, dict) else None
                    rec["keys"] = list(obj.keys()) if isinstance(obj, dict) else None
                    rec["raw_timestamp"] = obj.get("timestamp") if isinstance(obj, dict) else None
                    rec["event"] = obj
                    rec["raw"] = raw
                except ValueError:
                    rec["type"] = None
                    rec["raw"] = raw
                self.outbound.append(rec)
        except ConnectionClosed:
            pass
        except Exception as e:  # noqa: BLE001
            conn.close_info = {"reader_error": repr(e)}
        finally:
            ws = conn.ws
            info = conn.close_info or {}
            proto = getattr(ws, "protocol", ws)
            rcvd = getattr(proto, "close_rcvd", None)
            sent = getattr(proto, "close_sent", None)
            info.update(
                {
                    "during_step": self.step,
                    "close_frame_received": None if rcvd is None else {"code": rcvd.code, "reason": rcvd.reason},
                    "close_frame_sent": None if sent is None else {"code": sent.code, "reason": sent.reason},
                    "received_then_sent": getattr(proto, "close_rcvd_then_sent", None),
                    "close_code": ws.close_code,
                    "close_reason": ws.close_reason,
                }
            )
            conn.close_info = info
            conn.closed.set()

    @property
    def cur(self) -> Optional[Conn]:
        return self.conns[-1] if self.conns else None

    # ---- steps
    async def run_step(self, st: Dict[str, Any]) -> Dict[str, Any]:
        op = st["op"]
        conn = self.cur
        if op == "connect":
            c = await self.connect()
            return {"ok": True, "conn": c.idx}
        if op in ("send", "send_raw"):
            if conn is None:
                conn = await self.connect()
            if op == "send":
                payload = json.dumps(st["frame"])
                if isinstance(st["frame"], dict) and st["frame"].get("timestamp"):
                    self.inbound_stamps.add(st["frame"]["timestamp"])
            else:
                payload = st["data"]
            data: Any = payload if st.get("as") == "text" else payload.encode("utf-8")
            if conn.closed.is_set():
                return {"ok": False, "conn": conn.idx, "error": "socket already closed, frame not sent"}
            try:
                await conn.ws.send(data)
                return {"ok": True, "conn": conn.idx}
            except ConnectionClosed as e:
                return {"ok": False, "conn": conn.idx, "error": f"ConnectionClosed: {e}"}
        if op == "wait_for":
            start = len(self.outbound)
            deadline = time.monotonic() + st["timeout"]
            while time.monotonic() < deadline:
                if st["type"] == "__closed__":
                    if conn is None or conn.closed.is_set():
                        return {"ok": True, "conn": conn.idx if conn else None}
                else:
                    n = sum(
                        1
                        for f in self.outbound[start:]
                        if f.get("type") == st["type"] and conn is not None and f["conn"] == conn.idx
                    )
                    if n >= st["count"]:
                        return {"ok": True, "conn": conn.idx}
                    if conn is None or conn.closed.is_set():
                        return {"ok": False, "conn": conn.idx if conn else None, "error": "socket closed while waiting"}
                await asyncio.sleep(0.005)
            return {"ok": False, "conn": conn.idx if conn else None, "timed_out": True, "error": f"timed out after {st['timeout']}s"}
        if op == "settle":
            await asyncio.sleep(st["seconds"])
            return {"ok": True}
        if op == "close":
            if conn is None:
                return {"ok": False, "error": "no connection"}
            if conn.closed.is_set():
                return {"ok": False, "conn": conn.idx, "error": "already closed by server"}
            await conn.ws.close(code=1000, reason="client done")
            await asyncio.wait_for(conn.closed.wait(), 5)
            return {"ok": True, "conn": conn.idx}
        if op == "http":
            r = await ahttp(st["method"], self.http_base + st["path"])
            r = {"step": self.step, "method": st["method"], "path": st["path"], **r}
            self.http_log.append(r)
            return {"ok": True, "status": r["status"]}
        raise HarnessError(f"unknown step op {op!r}")

    async def run(self) -> None:
        for i, st in enumerate(self.s.steps):
            self.step = i
            res = await self.run_step(st)
            entry = {"step": i, **copy.deepcopy(st), "result": res}
            self.inbound.append(entry)
        self.step = len(self.s.steps)
        # Close what is still open (recorded as open_at_end).
        for c in self.conns:
            c_open = not c.closed.is_set()
            if c_open:
                try:
                    await c.ws.close(code=1000, reason="recording finished")
                    await asyncio.wait_for(c.closed.wait(), 5)
                except Exception:  # noqa: BLE001
                    pass
            c.open_at_end = c_open  # type: ignore[attr-defined]
        for c in self.conns:
            if c.task:
                c.task.cancel()
                try:
                    await c.task
                except (asyncio.CancelledError, Exception):  # noqa: BLE001
                    pass


# --------------------------------------------------------------------------- normalisation


def normalise_text(s: str) -> str:
    s = re.sub(r"/[^\s\"']*/site-packages/", "<site-packages>/", s)
    s = s.replace(str(HERE), "<reference>")
    s = re.sub(r"session-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "session-<uuid>", s)
    s = re.sub(r" at 0x[0-9a-f]+", " at 0x<addr>", s)
    return s


def normalise_value(v: Any) -> Any:
    if isinstance(v, str):
        return normalise_text(v)
    if isinstance(v, list):
        return [normalise_value(x) for x in v]
    if isinstance(v, dict):
        return {k: normalise_value(x) for k, x in v.items()}
    return v


LOG_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d+ \| (\w+)\s*\| ([^ ]+) - (.*)$")
UVI_RE = re.compile(r"^(ERROR|WARNING|CRITICAL):\s+(.*)$")


def server_log_records(path: Path, min_levels=("WARNING", "ERROR", "CRITICAL")) -> List[Dict[str, Any]]:
    if not path.exists():
        return []
    recs: List[Dict[str, Any]] = []
    cur: Optional[Dict[str, Any]] = None
    for line in path.read_text("utf-8", "replace").splitlines():
        m = LOG_RE.match(line)
        u = UVI_RE.match(line) if not m else None
        if m or u:
            if cur:
                recs.append(cur)
            if m:
                cur = {"level": m.group(1), "where": re.sub(r":\d+$", "", m.group(2)), "message": m.group(3)}
            else:
                cur = {"level": u.group(1), "where": "uvicorn", "message": u.group(2)}
            cur["_cont"] = []
        elif cur is not None and line.strip():
            cur["_cont"].append(line)
    if cur:
        recs.append(cur)
    out = []
    for r in recs:
        if r["level"] not in min_levels:
            continue
        cont = r.pop("_cont")
        # Multi-line messages: keep the first line; for tracebacks keep the final exception line.
        r["message"] = normalise_text(r["message"]).strip()
        if cont:
            exc = [c for c in cont if re.match(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Disconnect|Closed)\b", c.strip())]
            if exc:
                r["exception"] = normalise_text(exc[-1].strip())
        out.append(r)
    return out


def build_fixture(
    sc: Scenario,
    rec: Recorder,
    llm_requests: List[Dict[str, Any]],
    crew_log: Path,
    crew_exit: Optional[int],
    harness_errors: List[str],
) -> Dict[str, Any]:
    outbound = []
    generated_ts: List[str] = []
    latencies: List[Any] = []
    for f in rec.outbound:
        f = copy.deepcopy(f)
        raw_ts = f.pop("raw_timestamp", None)
        ev_ = f.get("event")
        raw = f.pop("raw", None)
        if isinstance(ev_, dict) and "timestamp" in ev_:
            if raw_ts in rec.inbound_stamps:
                f["timestamp_is_inbound_original"] = True  # kept verbatim: an echo of what we sent
            else:
                ev_["timestamp"] = "<timestamp>"
                if isinstance(raw_ts, str):
                    generated_ts.append(raw_ts)
                    if raw is not None:
                        raw = raw.replace(json.dumps(raw_ts), '"<timestamp>"', 1)
            if ev_.get("type") == "agent.log" and isinstance(ev_.get("payload"), dict) and "latency" in ev_["payload"]:
                latencies.append(ev_["payload"]["latency"])
                ev_["payload"]["latency"] = "<latency_ms>"
                if raw is not None:
                    raw = re.sub(r'"latency": -?\d+', '"latency": "<latency_ms>"', raw)
        if ev_ is not None:
            f["event"] = normalise_value(ev_)
        if raw is not None:
            # exact wire text (key order, separators, escaping) with the same masking
            f["raw"] = normalise_text(raw)
        outbound.append(f)

    bad_ts = [t for t in generated_ts if not NAIVE_ISO_RE.match(t)]
    conns = []
    for c in rec.conns:
        conns.append({"conn": c.idx, "open_at_end": getattr(c, "open_at_end", None), "close": c.close_info})

    notes: List[str] = list(sc.notes)
    notes.extend(auto_notes(sc, rec, outbound, llm_requests, conns, latencies))
    notes.extend(harness_errors)

    return {
        "scenario": sc.name,
        "description": sc.description,
        "crew": sc.crew,
        "reference": reference_versions(),
        "inbound": rec.inbound,
        "llm_script": sc.llm_script,
        "llm_requests": llm_requests,
        "outbound": outbound,
        "outbound_types": [f.get("type") for f in outbound],
        "connections": conns,
        "http": rec.http_log,
        "timestamp_format": {
            "example": generated_ts[0] if generated_ts else None,
            "generated_count": len(generated_ts),
            "pattern": NAIVE_ISO_RE.pattern,
            "all_generated_match_pattern": not bad_ts,
            "non_matching": bad_ts,
            "note": "crew-generated timestamps are replaced by '<timestamp>'; frames whose timestamp equals one we sent keep it (timestamp_is_inbound_original).",
        },
        "tool_latency_ms_seen": latencies,
        "server_log": server_log_records(crew_log),
        "server_exit_code_during_run": crew_exit,
        "notes": notes,
    }


def auto_notes(sc, rec, outbound, llm_requests, conns, latencies) -> List[str]:
    notes: List[str] = []
    kinds = {f["frame"] for f in outbound}
    if kinds:
        notes.append(f"outbound frame kinds seen: {sorted(kinds)}")
    for c in conns:
        ci = c["close"] or {}
        if ci.get("close_frame_received") and ci.get("received_then_sent"):
            notes.append(
                f"conn {c['conn']}: the SERVER closed the socket: close frame code={ci['close_frame_received']['code']} reason={ci['close_frame_received']['reason']!r} (during step {ci.get('during_step')})"
            )
        elif ci.get("close_frame_received"):
            notes.append(
                f"conn {c['conn']}: the client closed the socket (code {ci['close_frame_sent']['code']}); the server answered the close handshake (during step {ci.get('during_step')})"
            )
        elif c["open_at_end"] is False and not ci.get("close_frame_sent"):
            notes.append(
                f"conn {c['conn']}: the server dropped the TCP connection WITHOUT a close frame (client sees code {ci.get('close_code')}) (during step {ci.get('during_step')})"
            )
        elif c["open_at_end"]:
            notes.append(f"conn {c['conn']}: socket still open at the end of the scenario (then closed by the harness)")
    for st in rec.inbound:
        r = st["result"]
        if not r.get("ok") and st["op"] != "settle":
            label = st.get("type") or (st["frame"].get("type") if isinstance(st.get("frame"), dict) else "") or ("raw" if st["op"] == "send_raw" else "")
            notes.append(f"step {st['step']} ({st['op']} {label}): {r.get('error')}")
    echoes = [f for f in outbound if isinstance(f.get("type"), str) and f["type"].startswith("system.")]
    if echoes:
        notes.append(f"echoed platform events (type system.*): {[f['type'] for f in echoes]}")
    if llm_requests:
        notes.append(f"LLM request outcomes: {[r.get('outcome') for r in llm_requests]}")
    return notes


def reference_versions() -> Dict[str, Any]:
    out: Dict[str, Any] = {"python": platform.python_version()}
    for pkg in ("smallestai", "fastapi", "starlette", "uvicorn", "pydantic", "openai", "httpx", "websockets"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    return out


# --------------------------------------------------------------------------- driver


async def record_scenario(sc: Scenario, out_dir: Path) -> Path:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    llm_port, crew_port = free_port(), free_port()
    while crew_port == llm_port:
        crew_port = free_port()
    llm_base = f"http://127.0.0.1:{llm_port}"
    crew_base = f"http://127.0.0.1:{crew_port}"
    crew_log = LOG_DIR / f"{sc.name}.crew.log"
    mock_log = LOG_DIR / f"{sc.name}.mock.log"
    mock = crew = None
    harness_errors: List[str] = []
    try:
        mock = spawn([PY, str(HERE / "mock_llm.py"), "--port", str(llm_port)], mock_log)
        await asyncio.to_thread(wait_http_ok, llm_base + "/health", mock, "mock LLM", READY_TIMEOUT_S)
        r = await ahttp("POST", llm_base + "/_mock/script", sc.llm_script)
        if r["status"] != 200:
            raise HarnessError(f"mock LLM refused the script: {r}")
        crew = spawn(
            [PY, str(HERE / "crews.py"), "--crew", sc.crew, "--port", str(crew_port), "--llm-base-url", llm_base + "/v1"],
            crew_log,
        )
        await asyncio.to_thread(wait_http_ok, crew_base + "/ready", crew, "reference crew server", READY_TIMEOUT_S)

        rec = Recorder(sc, f"ws://127.0.0.1:{crew_port}/ws", crew_base, llm_base)
        try:
            await asyncio.wait_for(rec.run(), SCENARIO_TIMEOUT_S)
        except asyncio.TimeoutError:
            harness_errors.append(f"scenario hit the overall {SCENARIO_TIMEOUT_S}s limit; recording is partial")

        # Let in-flight LLM streams finish (or be abandoned) before reading the log.
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while True:
            reqs = (await ahttp("GET", llm_base + "/_mock/requests"))["body"] or []
            if not any(x.get("outcome") == "pending" for x in reqs) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.1)
        crew_exit = crew.poll()
        await asyncio.sleep(0.2)
    finally:
        for p in (crew, mock):
            if p is not None:
                await asyncio.to_thread(stop, p)

    fixture = build_fixture(sc, rec, reqs, crew_log, crew_exit, harness_errors)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{sc.name}.json"
    path.write_text(json.dumps(fixture, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description="Record reference crew fixtures.")
    ap.add_argument("--only", action="append", default=[], help="scenario name (repeatable, or comma-separated)")
    ap.add_argument("--list", action="store_true", help="list scenario names and exit")
    ap.add_argument("--out", default=str(DEFAULT_OUT), help=f"output folder (default {DEFAULT_OUT})")
    args = ap.parse_args()

    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:28s} [{s.crew}] {s.description}")
        return 0

    names = [n for item in args.only for n in item.split(",") if n]
    unknown = [n for n in names if n not in SCENARIO_BY_NAME]
    if unknown:
        print(f"error: unknown scenario(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        return 2
    selected = [SCENARIO_BY_NAME[n] for n in names] if names else SCENARIOS

    def on_signal(signum, _frame):
        stop_all()
        sys.exit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)

    failures: List[str] = []
    try:
        for sc in selected:
            t0 = time.monotonic()
            try:
                path = asyncio.run(record_scenario(sc, Path(args.out)))
                print(f"recorded {sc.name:28s} -> {path.relative_to(REPO) if path.is_relative_to(REPO) else path} ({time.monotonic() - t0:.1f}s)", flush=True)
            except HarnessError as e:
                failures.append(f"{sc.name}: {e}")
                print(f"FAILED   {sc.name}: {e} (logs: {LOG_DIR})", file=sys.stderr, flush=True)
            except Exception as e:  # noqa: BLE001
                failures.append(f"{sc.name}: harness crashed: {e!r}")
                print(f"FAILED   {sc.name}: harness crashed: {e!r} (logs: {LOG_DIR})", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        stop_all()
        print("interrupted", file=sys.stderr)
        return 130
    finally:
        stop_all()

    if failures:
        print(f"\n{len(failures)} scenario(s) could not be run:", file=sys.stderr)
        for f in failures:
            print(f"  - {f}", file=sys.stderr)
        return 1
    print(f"\nall {len(selected)} scenario(s) recorded")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""End-to-end: Smooth's own Python SDK (smooth-py 0.4.5) lends a crewline call its tool.

Starts the `remote_weather` example crew server (scripted model, task API key) on 127.0.0.1
(port 0). The client side uses only the SDK's public API: `SmoothClient(api_key=...,
base_url="http://127.0.0.1:PORT/api/")` (the SDK appends `/v1`), a tool made with
`@client.tool(name=..., description=..., inputs=..., output=...)` (inputs in the SDK's
documented form, a map of parameter name -> {type, description}), `client.run(task=...,
custom_tools=[...])`, `task.id()` and `task.result(timeout=...)`. The SDK runs its tools only
while something waits on the task (its poller lives inside `result()`), so `result()` waits in
a thread started before the call. The platform's side of the call is a WebSocket client here
(aiohttp, already a dependency of the SDK), speaking the crew protocol as crewline's testkit
platform client does, with the task's id as the call variable `task_id`.

a. "What's the weather in Oslo?": the SDK's function runs and its answer is spoken.
b. "And in Atlantis?": the function raises `ToolCallError`; the model reads it as a tool error
   and speaks its message; the call goes on.
c. The call's socket closes: `task.result()` returns status `done`, with `output` the agent's
   last reply.
d. A second task registers only `get_forecast`; its call asks for the weather in Paris, the
   model calls `get_weather`, which that task never registered: the model is told at once
   (well under the crew's 10 s tool timeout) that there is no such tool; `get_forecast` never
   runs.
e. A wrong key: `client.run` raises `ApiError` with status 401.

Telemetry stays on (the server answers the SDK's `POST /api/v1/telemetry` with 204); the run
checks that route and that the server's log shows no 404. Any failure exits non-zero with what
was expected and what came.

Usage: e2e.py --server PATH_TO_remote_weather_BINARY
"""

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
from datetime import datetime

import aiohttp
from smooth import ApiError, SmoothClient, ToolCallError

KEY = "smooth-e2e-key"
# The remote_weather crew's tool timeout (examples/remote_weather.rs).
TOOL_TIMEOUT_S = 10.0
# How soon a call of a tool the task never registered must be refused.
UNKNOWN_TOOL_BOUND_S = 5.0
# How often the SDK sends its telemetry (smooth/_telemetry.py, _FLUSH_INTERVAL).
TELEMETRY_FLUSH_S = 5.0
# The longest a turn may take (a remote tool call: the SDK polls once per second).
TURN_TIMEOUT_S = 20.0
OSLO = {"location": "Oslo", "temperature_c": 7, "conditions": "light rain"}
ATLANTIS_ERROR = "Atlantis is not on any map"
ANSI = re.compile(r"\x1b\[[0-9;]*m")
LISTENING = re.compile(r"crew server listening addr=127\.0\.0\.1:(\d+)")


class Failure(Exception):
    """A check that did not hold: what was expected, and what came."""


def check(condition, message):
    if not condition:
        raise Failure(message)


def now():
    # The platform's timestamps: naive local time, ISO 8601.
    return datetime.now().isoformat()


class Server:
    """The remote_weather example binary, its stderr kept (ANSI codes stripped)."""

    def __init__(self, binary):
        env = {**os.environ, "RUST_LOG": "info", "NO_COLOR": "1"}
        self.process = subprocess.Popen(
            [binary, "--port", "0", "--scripted", "--api-key", KEY],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.lines = []
        self.port = None
        self._listening = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.process.stderr:
            line = ANSI.sub("", raw.rstrip("\n"))
            self.lines.append(line)
            found = LISTENING.search(line)
            if found and self.port is None:
                self.port = int(found.group(1))
                self._listening.set()
        self._listening.set()

    def wait_port(self, timeout=30.0):
        self._listening.wait(timeout)
        check(
            self.port is not None,
            "the server did not log `crew server listening addr=127.0.0.1:PORT`; its stderr:\n"
            + "\n".join(self.lines[-20:]),
        )
        return self.port

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


class Recorder:
    """The calls the SDK made of the script's tool functions (they run in the SDK's threads)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._calls = []

    def add(self, name, arguments):
        with self._lock:
            self._calls.append((name, arguments))

    def calls(self):
        with self._lock:
            return list(self._calls)


class ResultWaiter(threading.Thread):
    """`task.result(timeout=...)` in a thread of its own, started at once: while it waits, the
    SDK polls the task and runs its tools."""

    def __init__(self, task, timeout):
        super().__init__(daemon=True, name=f"result-{task.id()}")
        self.task = task
        self.timeout = timeout
        self.response = None
        self.error = None
        self.start()

    def run(self):
        try:
            self.response = self.task.result(timeout=self.timeout)
        except BaseException as error:  # reported by outcome()
            self.error = error

    def outcome(self, wait):
        self.join(wait)
        check(not self.is_alive(), f"task.result() had not returned {wait:.0f}s after the call ended")
        check(self.error is None, f"task.result() raised {self.error!r}")
        return self.response


class TurnResult:
    def __init__(self, text, seconds, logs, errors):
        self.text = text
        self.seconds = seconds
        self.logs = logs  # (name, payload) of each agent.log during the turn
        self.errors = errors  # agent.error payloads during the turn

    def tool_logs(self, name):
        return [payload for log, payload in self.logs if log == name]


class Call:
    """The platform's side of one call, as crewline's testkit platform client plays it: the
    `system.init` handshake (the task's id in `initial_variables`), `system.user.joined`, then
    per user turn `agent.transcript.update` plus `system.llm.request` with the whole
    conversation, and the assistant's transcript after each answer. Binary frames of JSON."""

    def __init__(self, port, task_id):
        self.url = f"ws://127.0.0.1:{port}/ws"
        self.task_id = task_id
        self.messages = []
        self.session = None
        self.ws = None

    async def send(self, event_type, **fields):
        frame = {"type": event_type, "timestamp": now(), **fields}
        await self.ws.send_bytes(json.dumps(frame).encode("utf-8"))

    async def receive(self, deadline, waiting_for):
        remaining = deadline - time.monotonic()
        check(remaining > 0, f"timed out waiting for {waiting_for}")
        try:
            message = await self.ws.receive(timeout=remaining)
        except asyncio.TimeoutError:
            raise Failure(f"timed out waiting for {waiting_for}") from None
        if message.type in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
            return json.loads(message.data)
        raise Failure(f"the crew closed the call ({message.type.name}, {message.data!r}) while waiting for {waiting_for}")

    async def open(self):
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, connect=10))
        self.ws = await self.session.ws_connect(self.url)
        await self.send(
            "system.init",
            version="1.0",
            session_context={
                "initial_variables": {"task_id": self.task_id},
                "conversation_type": "webcall",
                "caller": None,
            },
            output_agent_settings={"interruptible": True},
        )
        deadline = time.monotonic() + 15
        while True:
            frame = await self.receive(deadline, "agent.ready")
            if frame["type"] == "agent.ready":
                break
            check(frame["type"] != "agent.error", f"the crew refused the call: {frame}")
        await self.send("system.user.joined")
        return self

    async def turn(self, text, timeout=TURN_TIMEOUT_S):
        await self.send("agent.transcript.update", role="user", content=text)
        self.messages.append({"role": "user", "content": text})
        await self.send("system.llm.request", messages=self.messages, extra_params={})
        sent = time.monotonic()
        deadline = sent + timeout
        started, chunks, logs, errors = False, [], [], []
        while True:
            frame = await self.receive(deadline, f"the answer to {text!r}")
            kind = frame["type"]
            if kind == "agent.llm.response.start":
                started = True
            elif kind == "agent.llm.response.chunk":
                chunks.append(frame.get("text") or "")
            elif kind == "agent.log":
                logs.append((frame.get("name"), frame.get("payload") or {}))
            elif kind == "agent.error":
                errors.append(frame)
            elif kind == "agent.llm.response.end" and started:
                break
            # Anything else is an echo of the platform's own events.
        seconds = time.monotonic() - sent
        answer = "".join(chunks)
        if answer:
            self.messages.append({"role": "assistant", "content": answer})
            await self.send("agent.transcript.update", role="assistant", content=answer)
            # The crew echoes each event once its node has processed it: after this echo the
            # agent's context holds the transcript, so a hang-up next cannot overtake it.
            deadline = time.monotonic() + 5
            while True:
                frame = await self.receive(deadline, "the echo of the assistant's transcript")
                if (
                    frame["type"] == "agent.transcript.update"
                    and frame.get("role") == "assistant"
                    and frame.get("content") == answer
                ):
                    break
        return TurnResult(answer, seconds, logs, errors)

    async def close(self):
        if self.ws is not None:
            await self.ws.close()
        if self.session is not None:
            await self.session.close()


def weather_tool(client, recorder):
    """The SDK's tool: the documented decorator, inputs as name -> {type, description}."""

    @client.tool(
        name="get_weather",
        description="The current weather in a city.",
        inputs={"location": {"type": "string", "description": "The city, e.g. Oslo."}},
        output="The location, its temperature in degrees Celsius and its conditions.",
    )
    def get_weather(location):
        recorder.add("get_weather", {"location": location})
        if location == "Atlantis":
            raise ToolCallError(ATLANTIS_ERROR)
        if location == "Oslo":
            return OSLO
        raise ToolCallError(f"No weather station in {location}")

    return get_weather


def forecast_tool(client, recorder):
    @client.tool(
        name="get_forecast",
        description="Tomorrow's forecast for a city.",
        inputs={"location": {"type": "string", "description": "The city."}},
        output="The forecast, in words.",
    )
    def get_forecast(location):
        recorder.add("get_forecast", {"location": location})
        return "sunny"

    return get_forecast


async def weather_call(port, task_id):
    """Scenarios a and b on one call; closing it (c) ends the task."""
    call = await Call(port, task_id).open()
    try:
        oslo = await call.turn("What's the weather in Oslo?")
        atlantis = await call.turn("And in Atlantis?")
    finally:
        await call.close()
    return oslo, atlantis


async def unknown_tool_call(port, task_id):
    call = await Call(port, task_id).open()
    try:
        return await call.turn("What's the weather in Paris?", timeout=TOOL_TIMEOUT_S + 5)
    finally:
        await call.close()


async def telemetry_status(port, key):
    """What the SDK's telemetry endpoint answers (the SDK itself never reports it)."""
    async with aiohttp.ClientSession() as session:
        async with session.post(
            f"http://127.0.0.1:{port}/api/v1/telemetry",
            json={"events": [{"event": "sdk.e2e", "properties": {}}]},
            headers={"apikey": key},
        ) as response:
            return response.status


def scenarios(port):
    base_url = f"http://127.0.0.1:{port}/api/"
    report = []

    # --- a, b, c: one task, one call ---------------------------------------------------------
    started = time.monotonic()
    recorder = Recorder()
    first_client = time.monotonic()
    client = SmoothClient(api_key=KEY, base_url=base_url)
    get_weather = weather_tool(client, recorder)
    task = client.run(task="Answer the caller's weather questions.", custom_tools=[get_weather])
    check(task.id().startswith("task_"), f"expected a task id, got {task.id()!r}")
    waiter = ResultWaiter(task, timeout=90)
    oslo, atlantis = asyncio.run(weather_call(port, task.id()))

    check(
        recorder.calls()[:1] == [("get_weather", {"location": "Oslo"})],
        f"expected the SDK to run get_weather(location='Oslo') first, it ran {recorder.calls()}",
    )
    check(
        "7 degrees" in oslo.text and "light rain" in oslo.text,
        f"expected the Oslo answer to speak '7 degrees' and 'light rain', it said {oslo.text!r}",
    )
    check(not oslo.errors, f"expected no agent.error in the Oslo turn, got {oslo.errors}")
    ended = oslo.tool_logs("tool_call_end")
    check(
        len(ended) == 1 and ended[0].get("function_name") == "get_weather",
        f"expected one tool_call_end log for get_weather in the Oslo turn, got {oslo.logs}",
    )
    print(f"smooth e2e (a): OK: the SDK's get_weather ran; the crew said {oslo.text!r} ({oslo.seconds:.2f}s)")

    check(
        recorder.calls() == [("get_weather", {"location": "Oslo"}), ("get_weather", {"location": "Atlantis"})],
        f"expected the SDK to run get_weather for Oslo then Atlantis, it ran {recorder.calls()}",
    )
    check(
        ATLANTIS_ERROR in atlantis.text,
        f"expected the Atlantis answer to speak the tool's error {ATLANTIS_ERROR!r}, it said {atlantis.text!r}",
    )
    failed = atlantis.tool_logs("tool_call_error")
    check(
        len(failed) == 1 and ATLANTIS_ERROR in json.dumps(failed[0]),
        f"expected one tool_call_error log carrying {ATLANTIS_ERROR!r}, got {atlantis.logs}",
    )
    check(not atlantis.errors, f"expected no agent.error in the Atlantis turn, got {atlantis.errors}")
    print(
        f"smooth e2e (b): OK: ToolCallError reached the model as a tool error; the crew said "
        f"{atlantis.text!r} ({atlantis.seconds:.2f}s)"
    )

    result = waiter.outcome(wait=30)
    check(result.status == "done", f"expected the task to end 'done' when the call ended, got {result.status!r}")
    check(
        result.output == atlantis.text,
        f"expected the task's output to be the agent's last reply {atlantis.text!r}, got {result.output!r}",
    )
    report.append(("a-c", time.monotonic() - started))
    print(f"smooth e2e (c): OK: task.result() -> status {result.status!r}, output {result.output!r}")

    # --- d: a tool the task never registered --------------------------------------------------
    started = time.monotonic()
    forecasts = Recorder()
    other = SmoothClient(api_key=KEY, base_url=base_url)
    get_forecast = forecast_tool(other, forecasts)
    forecast_task = other.run(task="Answer the caller's forecast questions.", custom_tools=[get_forecast])
    forecast_waiter = ResultWaiter(forecast_task, timeout=90)
    paris = asyncio.run(unknown_tool_call(port, forecast_task.id()))
    check(
        paris.seconds < UNKNOWN_TOOL_BOUND_S,
        f"expected the call of an unregistered tool to be refused at once (< {UNKNOWN_TOOL_BOUND_S:.0f}s, "
        f"the tool timeout is {TOOL_TIMEOUT_S:.0f}s), the answer took {paris.seconds:.2f}s: {paris.text!r}",
    )
    said = paris.text.lower()
    check(
        "no tool named" in said and "get_weather" in said,
        f"expected the answer to say there is no tool named get_weather, it said {paris.text!r}",
    )
    forecast_result = forecast_waiter.outcome(wait=30)
    check(forecasts.calls() == [], f"expected get_forecast never to run, it ran {forecasts.calls()}")
    check(
        forecast_result.status == "done",
        f"expected the get_forecast task to end 'done' with its call, got {forecast_result.status!r}",
    )
    report.append(("d", time.monotonic() - started))
    print(f"smooth e2e (d): OK: get_weather refused at once ({paris.seconds:.2f}s): {paris.text!r}")

    # --- e: a wrong key -----------------------------------------------------------------------
    wrong = SmoothClient(api_key="wrong", base_url=base_url)
    try:
        wrong.run(task="Answer the caller's weather questions.", custom_tools=[weather_tool(wrong, Recorder())])
    except ApiError as error:
        check(error.status_code == 401, f"expected ApiError 401 for a wrong key, got {error.status_code}: {error.detail}")
    else:
        raise Failure("expected client.run with a wrong key to raise ApiError 401, it returned a task")
    print("smooth e2e (e): OK: a wrong key gets ApiError 401")

    # --- telemetry ----------------------------------------------------------------------------
    # The SDK flushes its telemetry every 5 s from its first client on: let one flush reach
    # the server while it runs (its answer is not reported; the route is checked directly).
    time.sleep(max(0.0, TELEMETRY_FLUSH_S + 0.5 - (time.monotonic() - first_client)))
    status = asyncio.run(telemetry_status(port, KEY))
    check(status == 204, f"expected POST /api/v1/telemetry to answer 204, got {status}")
    return report


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True, help="the remote_weather example binary")
    args = parser.parse_args()
    if os.environ.get("SMOOTH_TELEMETRY", "").lower() == "off":
        print("smooth e2e: note: SMOOTH_TELEMETRY=off; the SDK's telemetry is not exercised", file=sys.stderr)

    started = time.monotonic()
    server = Server(args.server)
    try:
        port = server.wait_port()
        report = scenarios(port)
    except Failure as failure:
        server.stop()
        print(f"smooth e2e: FAIL: {failure}", file=sys.stderr)
        print("smooth e2e: the server's last log lines:\n" + "\n".join(server.lines[-30:]), file=sys.stderr)
        sys.exit(1)
    finally:
        # Also on any other exception: never leave the server running.
        server.stop()

    not_found = [
        line
        for line in server.lines
        if "404" in line and ("telemetry" in line.lower() or "not found" in line.lower())
    ]
    if not_found:
        print(f"smooth e2e: FAIL: the server logged a 404: {not_found}", file=sys.stderr)
        sys.exit(1)
    panics = [line for line in server.lines if "panicked" in line]
    if panics:
        print(f"smooth e2e: FAIL: the server panicked: {panics}", file=sys.stderr)
        sys.exit(1)
    timings = ", ".join(f"{name} {seconds:.2f}s" for name, seconds in report)
    print(
        f"smooth e2e: OK: telemetry 204, no 404 in the server's log; {timings}; "
        f"{time.monotonic() - started:.2f}s with the server"
    )


if __name__ == "__main__":
    main()

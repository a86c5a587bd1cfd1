"""End-to-end: a real smolagents ToolCallingAgent uses crewline tools over MCP.

Starts the crewline example MCP server (smolagents schema flavour, a JSON Lines ledger) over
streamable HTTP on 127.0.0.1 (port 0) and over stdio, connects smolagents' MCPClient to it and
runs a ToolCallingAgent whose model is scripted (no network, no LLM):

1. book_table with required and optional arguments -> a booking;
2. book_table with a party of 40 -> the tool's error, {"error": {"kind": "ToolArgsInvalid"}};
3. seeing that error, book_table again with a valid party -> a booking;
4. final_answer.

Then it checks what the agent saw and that the crewline ledger recorded every call, the failed
one with its error kind. Over stdio it also checks, with the plain Python `mcp` client, the
structured output: book_table lists an object `outputSchema`, a successful call carries
`structuredContent` (validated by the client against that schema) equal to its JSON text, and
an error carries `isError` and no structured content. Any failure exits non-zero.

Usage: e2e.py --server PATH_TO_mcp_server_BINARY --ledger PATH_PREFIX [--transport http|stdio|both]
"""

import argparse
import json
import os
import subprocess
import sys
import time

from smolagents import MCPClient, Model, ToolCallingAgent
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
)

GOOD_CALL = {"restaurant": "Noma", "party_size": 4, "time": "20:00", "notes": "window seat"}
BAD_CALL = {"restaurant": "Noma", "party_size": 40}
RECOVERY_CALL = {"restaurant": "Noma", "party_size": 12}


def fail(message):
    print(f"smolagents e2e: FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def text_of(message):
    """The text of a smolagents message (content may be a list of parts)."""
    content = message.content if hasattr(message, "content") else message.get("content")
    if isinstance(content, list):
        return "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return str(content or "")


class ScriptedModel(Model):
    """A smolagents Model that answers from a script instead of an LLM, and checks what the
    agent shows it before each step."""

    def __init__(self):
        super().__init__(model_id="scripted")
        self.steps = 0
        self.seen = []

    def tool_call(self, name, arguments):
        self.steps += 1
        call = ChatMessageToolCall(
            id=f"call_{self.steps}",
            type="function",
            function=ChatMessageToolCallFunction(name=name, arguments=arguments),
        )
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])

    def generate(self, messages, stop_sequences=None, response_format=None, tools_to_call_from=None, **kwargs):
        transcript = "\n".join(text_of(m) for m in messages)
        self.seen.append(transcript)
        tool_names = {tool.name for tool in tools_to_call_from or []}
        if self.steps == 0:
            # The crew-only tool must not be offered; the MCP ones must.
            if not {"book_table", "get_weather"} <= tool_names or "staff_note" in tool_names:
                fail(f"unexpected tools offered to the model: {sorted(tool_names)}")
            return self.tool_call("book_table", GOOD_CALL)
        if self.steps == 1:
            if '"confirmation"' not in transcript:
                fail("the first booking's result did not reach the model")
            return self.tool_call("book_table", BAD_CALL)
        if self.steps == 2:
            # The error must reach the model with its kind, so it can correct its arguments.
            if "ToolArgsInvalid" not in transcript or "between 1 and 12" not in transcript:
                fail("the tool error (kind ToolArgsInvalid) did not reach the model")
            return self.tool_call("book_table", RECOVERY_CALL)
        if self.steps == 3:
            if '"party_size":12' not in transcript:
                fail("the recovered booking's result did not reach the model")
            return self.tool_call("final_answer", {"answer": "Booked Noma for 4 at 20:00 and for 12."})
        fail(f"the agent asked for an unscripted step {self.steps + 1}")


def start_server(binary, ledger):
    server = subprocess.Popen(
        [binary, "--flavour", "smolagents", "--ledger", ledger],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = server.stdout.readline().strip()
    if not line.startswith("MCP_URL="):
        server.kill()
        fail(f"the MCP server did not announce its URL (got {line!r})")
    return server, line[len("MCP_URL="):]


def check_ledger(path):
    with open(path, encoding="utf-8") as ledger:
        records = [json.loads(line) for line in ledger if line.strip()]
    calls = [(r["tool"], r["arguments"], r["outcome"], r["error_kind"]) for r in records]
    expected = [
        ("book_table", GOOD_CALL, "ok", None),
        ("book_table", BAD_CALL, "error", "ToolArgsInvalid"),
        ("book_table", RECOVERY_CALL, "ok", None),
    ]
    if calls != expected:
        fail(f"ledger records {json.dumps(calls)}, expected {json.dumps(expected)}")
    return records


def run_agent(server_parameters):
    """Connects smolagents to the server, checks the listing and runs the scripted agent."""
    with MCPClient(server_parameters, structured_output=False) as tools:
        book_table = next((t for t in tools if t.name == "book_table"), None)
        if book_table is None:
            fail(f"book_table not listed: {[t.name for t in tools]}")
        # The smolagents flavour: optional inputs nullable, required ones not.
        inputs = book_table.inputs
        if inputs["party_size"]["type"] != "integer" or inputs["party_size"].get("nullable"):
            fail(f"party_size should be a required integer: {inputs['party_size']}")
        if not inputs["time"].get("nullable") or inputs["time"]["type"] != "string":
            fail(f"time should be an optional (nullable) string: {inputs['time']}")

        model = ScriptedModel()
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=6, verbosity_level=0)
        answer = agent.run("Book Noma for 4 at 20:00, and then for a party of 40.")
    if model.steps != 4:
        fail(f"the scripted model ran {model.steps} steps, expected 4")
    if "Booked Noma" not in str(answer):
        fail(f"unexpected final answer {answer!r}")


def check_structured_output(binary):
    """The plain Python `mcp` client over stdio: outputSchema, structuredContent, isError."""
    import anyio
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    async def check():
        parameters = StdioServerParameters(
            command=binary, args=["--stdio", "--flavour", "smolagents"], env={**os.environ}
        )
        async with stdio_client(parameters) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {tool.name: tool for tool in (await session.list_tools()).tools}
                schema = listed["book_table"].outputSchema
                if not schema or schema.get("type") != "object" or "confirmation" not in schema.get("properties", {}):
                    fail(f"book_table should list an object outputSchema, got {schema!r}")
                # The client validates structuredContent against the outputSchema itself.
                good = await session.call_tool("book_table", GOOD_CALL)
                if good.isError or not isinstance(good.structuredContent, dict):
                    fail(f"a successful call should carry structuredContent: {good!r}")
                if json.loads(good.content[0].text) != good.structuredContent:
                    fail(f"the text should carry the structured result as JSON: {good!r}")
                if good.structuredContent.get("notes") != "window seat":
                    fail(f"unexpected structured booking {good.structuredContent!r}")
                # get_weather's schema refers to its `Unit` enum through `$ref`.
                weather = await session.call_tool("get_weather", {"city": "Oslo", "unit": "fahrenheit"})
                if weather.isError or (weather.structuredContent or {}).get("unit") != "fahrenheit":
                    fail(f"get_weather should answer with a structured forecast: {weather!r}")
                bad = await session.call_tool("book_table", BAD_CALL)
                if not bad.isError or bad.structuredContent is not None:
                    fail(f"an error should be isError without structured content: {bad!r}")
                if json.loads(bad.content[0].text)["error"]["kind"] != "ToolArgsInvalid":
                    fail(f"the error should keep its kind: {bad!r}")

    anyio.run(check)
    print("smolagents e2e (mcp client): OK: outputSchema listed, structuredContent accepted")


def over_http(binary, ledger):
    server, url = start_server(binary, ledger)
    try:
        run_agent({"url": url, "transport": "streamable-http"})
    finally:
        server.terminate()
        server.wait(timeout=10)


def over_stdio(binary, ledger):
    from mcp import StdioServerParameters

    run_agent(
        StdioServerParameters(
            command=binary,
            args=["--stdio", "--flavour", "smolagents", "--ledger", ledger],
            env={**os.environ},
        )
    )


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--ledger", required=True, help="ledger path prefix (one file per transport)")
    parser.add_argument("--transport", choices=["http", "stdio", "both"], default="both")
    args = parser.parse_args()

    transports = {"http": over_http, "stdio": over_stdio}
    chosen = list(transports) if args.transport == "both" else [args.transport]
    for name in chosen:
        ledger = f"{args.ledger}.{name}.jsonl"
        if os.path.exists(ledger):
            os.remove(ledger)
        started = time.monotonic()
        transports[name](args.server, ledger)
        records = check_ledger(ledger)
        elapsed = time.monotonic() - started
        print(
            f"smolagents e2e ({name}): OK: {len(records)} calls in the crewline ledger "
            f"(1 ToolArgsInvalid, recovered); agent run with server took {elapsed:.2f}s"
        )
    check_structured_output(args.server)


if __name__ == "__main__":
    main()

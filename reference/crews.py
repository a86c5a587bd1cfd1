#!/usr/bin/env python3
"""Reference crews for the recording harness, written against the real
``smallestai.atoms.crew`` SDK (5.14.0) the way its docs / docstrings / cookbook do.

Crews (``--crew``):

* ``weather``     – OutputCrewNode with a ``get_weather(location)`` @function_tool,
                    ToolRegistry.discover(self), and the documented streaming tool loop
                    (stream, gather tool calls, append assistant msg + tool results,
                    parallel tool execution, MAX_TOOL_ROUNDS = 4).
* ``end_call``    – weather + an ``end_call`` tool that emits SDKAgentEndCallEvent.
* ``transfer``    – weather + a ``transfer_call`` tool that cold-transfers to +15550100.
* ``background``  – weather + a BackgroundCrewNode that raises on agent.transcript.update.
* ``tool_errors`` – weather whose get_weather raises for "Atlantis" (tool_call_error events).

Run: ``python crews.py --crew weather --port 18080 --llm-base-url http://127.0.0.1:18001/v1``
The server binds 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List

from smallestai.atoms.crew import (
    AtomsCrewApp,
    BackgroundCrewNode,
    CrewSession,
    OpenAIClient,
    OutputCrewNode,
    ToolRegistry,
    function_tool,
)
from smallestai.atoms.crew.clients.types import ToolCall, ToolResult
from smallestai.atoms.crew.events import (
    SDKAgentEndCallEvent,
    SDKAgentTranscriptUpdateEvent,
    SDKAgentTransferConversationEvent,
    SDKEvent,
    TransferOption,
    TransferOptionType,
)

SYSTEM_PROMPT = "You are a helpful weather assistant. Use get_weather for weather questions. Keep answers short."

WEATHER_RESULT = {"temperature_c": 18, "conditions": "sunny", "humidity_pct": 40}

LLM_BASE_URL = os.environ.get("MOCK_LLM_BASE_URL", "http://127.0.0.1:18001/v1")


class WeatherAgent(OutputCrewNode):
    """The weather agent: documented OutputCrewNode + ToolRegistry tool loop."""

    MAX_TOOL_ROUNDS = 4

    def __init__(self, name: str = "weather-agent"):
        super().__init__(name=name)
        self.llm = OpenAIClient(model="mock-gpt", api_key="sk-mock", base_url=LLM_BASE_URL)

        self.tool_registry = ToolRegistry()
        self.tool_registry.discover(self)  # auto-discover @function_tool methods
        self.tool_schemas = self.tool_registry.get_schemas()

        self.context.add_message({"role": "system", "content": SYSTEM_PROMPT})

    @function_tool()
    async def get_weather(self, location: str) -> Dict[str, Any]:
        """Get the current weather for a location.

        Args:
            location: City name, e.g. "Paris".
        """
        return {"location": location, **WEATHER_RESULT}

    async def generate_response(self):
        for _round in range(self.MAX_TOOL_ROUNDS):
            response = await self.llm.chat(
                messages=self.context.messages,
                stream=True,
                tools=self.tool_schemas,
            )

            tool_calls: List[ToolCall] = []
            full_response = ""
            async for chunk in response:
                if chunk.content:
                    full_response += chunk.content
                    yield chunk.content
                if chunk.tool_calls:
                    tool_calls.extend(chunk.tool_calls)

            if not tool_calls:
                if full_response:
                    self.context.add_message({"role": "assistant", "content": full_response})
                return

            results: List[ToolResult] = await self.tool_registry.execute(tool_calls=tool_calls, parallel=True)

            # The assistant turn that requested the tools must precede the results.
            self.context.add_message(
                {
                    "role": "assistant",
                    "content": full_response or None,
                    "tool_calls": [tc.to_dict() for tc in tool_calls],
                }
            )
            for result in results:
                self.context.add_message(result.to_message())

        # Safety net after MAX_TOOL_ROUNDS: let the LLM wrap up without tools.
        final = await self.llm.chat(messages=self.context.messages, stream=True)
        async for chunk in final:
            if chunk.content:
                yield chunk.content


class EndCallAgent(WeatherAgent):
    @function_tool()
    async def end_call(self) -> None:
        """End the call gracefully when the user says goodbye."""
        await self.send_event(SDKAgentEndCallEvent())


class TransferAgent(WeatherAgent):
    @function_tool()
    async def transfer_call(self) -> None:
        """Transfer the caller to a human agent."""
        await self.send_event(
            SDKAgentTransferConversationEvent(
                transfer_call_number="+15550100",
                transfer_options=TransferOption(type=TransferOptionType.COLD_TRANSFER),
            )
        )


class FlakyWeatherAgent(WeatherAgent):
    """Weather agent whose tool raises for one location (records tool_call_error)."""

    @function_tool()
    async def get_weather(self, location: str) -> Dict[str, Any]:
        """Get the current weather for a location.

        Args:
            location: City name, e.g. "Paris".
        """
        if location == "Atlantis":
            raise ValueError("no weather station in Atlantis")
        return {"location": location, **WEATHER_RESULT}


class FailingObserver(BackgroundCrewNode):
    """Background node that raises on every transcript update."""

    def __init__(self):
        super().__init__(name="failing-observer")
        self.seen = 0

    async def process_event(self, event: SDKEvent):
        if isinstance(event, SDKAgentTranscriptUpdateEvent):
            self.seen += 1
            raise RuntimeError(f"observer failed on transcript #{self.seen}")


CREWS = {
    "weather": lambda: [WeatherAgent()],
    "end_call": lambda: [EndCallAgent()],
    "transfer": lambda: [TransferAgent()],
    "background": lambda: [WeatherAgent(), FailingObserver()],
    "tool_errors": lambda: [FlakyWeatherAgent()],
}


def make_setup_handler(crew: str):
    async def setup_session(session: CrewSession):
        # Both nodes (if two) have no parents -> children of Root; both are leaves -> Sink.
        for node in CREWS[crew]():
            session.add_node(node)
        await session.start()
        await session.wait_until_complete()

    return setup_session


def main() -> None:
    global LLM_BASE_URL
    ap = argparse.ArgumentParser(description="Run a reference crew server (127.0.0.1 only).")
    ap.add_argument("--crew", choices=sorted(CREWS), default="weather")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--llm-base-url", default=LLM_BASE_URL)
    ap.add_argument("--log-level", default="warning", help="uvicorn log level")
    args = ap.parse_args()
    LLM_BASE_URL = args.llm_base_url

    app = AtomsCrewApp(setup_handler=make_setup_handler(args.crew))
    app.run(host="127.0.0.1", port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The reference (``smallestai==5.14.0``) serving the same agent as crewline's
``voice_agent`` example, for the side-by-side load benchmark (``benches/load/run.sh``).

The agent is the SDK's documented pattern: an ``OutputCrewNode`` whose
``generate_response`` is the streaming tool loop (stream with ``tools=``, gather
``chunk.tool_calls``, run them with ``ToolRegistry.execute(parallel=True)``, append the
assistant message and the tool results, at most ``MAX_TOOL_ROUNDS = 4`` rounds, then one
final call without tools). Its prompt and its ``get_weather`` tool (same cities, same
answers, no artificial delay) match ``examples/voice_agent/crew.rs`` run with
``--service-delay-ms 0``.

Run: ``python bench_crew.py --port 18080 --llm-base-url http://127.0.0.1:18001/v1``
(binds 127.0.0.1). For benchmarks set ``SMALLESTAI_LOG_LEVEL=WARNING`` (crewline runs with
``RUST_LOG=warn``), so neither side pays for per-frame info logging.
"""

from __future__ import annotations

import argparse
import os
from typing import Any, Dict, List

from smallestai.atoms.crew import (
    AtomsCrewApp,
    CrewSession,
    OpenAIClient,
    OutputCrewNode,
    ToolRegistry,
    function_tool,
)
from smallestai.atoms.crew.clients.types import ToolCall, ToolResult

PROMPT = (
    "You are a friendly voice assistant on a phone line. Answer in one or two short spoken "
    "sentences. For weather questions use get_weather; when the caller names several cities, "
    "call it once per city."
)

WEATHER = {
    "paris": (18, "cloudy"),
    "tokyo": (24, "sunny"),
    "london": (12, "rainy"),
    "new york": (21, "clear"),
    "san francisco": (21, "clear"),
}

LLM_BASE_URL = os.environ.get("MOCK_LLM_BASE_URL", "http://127.0.0.1:18001/v1")
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")


class WeatherAgent(OutputCrewNode):
    """The weather agent: the documented OutputCrewNode + ToolRegistry tool loop."""

    MAX_TOOL_ROUNDS = 4

    def __init__(self, name: str = "weather-agent"):
        super().__init__(name=name)
        self.llm = OpenAIClient(model=MODEL, api_key="sk-mock", base_url=LLM_BASE_URL)
        self.tool_registry = ToolRegistry()
        self.tool_registry.discover(self)
        self.tool_schemas = self.tool_registry.get_schemas()
        self.context.add_message({"role": "system", "content": PROMPT})

    @function_tool()
    async def get_weather(self, location: str) -> Dict[str, Any]:
        """Get the current weather for a location.

        Args:
            location: City name, e.g. Paris
        """
        city = location.split(",")[0].strip().lower()
        if city not in WEATHER:
            raise ValueError(
                f"No weather data for {location}; ask the caller for a larger city nearby."
            )
        temperature_c, conditions = WEATHER[city]
        return {"location": location, "temperature_c": temperature_c, "conditions": conditions}

    async def generate_response(self):
        for _round in range(self.MAX_TOOL_ROUNDS):
            response = await self.llm.chat(
                messages=self.context.messages, stream=True, tools=self.tool_schemas
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

            results: List[ToolResult] = await self.tool_registry.execute(
                tool_calls=tool_calls, parallel=True
            )
            self.context.add_message(
                {
                    "role": "assistant",
                    "content": full_response or None,
                    "tool_calls": [tc.to_dict() for tc in tool_calls],
                }
            )
            for result in results:
                self.context.add_message(result.to_message())

        final = await self.llm.chat(messages=self.context.messages, stream=True)
        async for chunk in final:
            if chunk.content:
                yield chunk.content


async def setup_session(session: CrewSession):
    session.add_node(WeatherAgent())
    await session.start()
    await session.wait_until_complete()


def main() -> None:
    global LLM_BASE_URL
    parser = argparse.ArgumentParser(description="The reference weather crew (127.0.0.1 only).")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--llm-base-url", default=LLM_BASE_URL)
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    args = parser.parse_args()
    LLM_BASE_URL = args.llm_base_url
    app = AtomsCrewApp(setup_handler=setup_session)
    # uvicorn's defaults otherwise (one process, one event loop), as the SDK runs in its pods.
    app.run(host="127.0.0.1", port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()

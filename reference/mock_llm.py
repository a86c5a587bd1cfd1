#!/usr/bin/env python3
"""A scriptable, OpenAI-compatible mock LLM for driving the reference crew.

Serves ``POST /v1/chat/completions`` (streaming SSE and a minimal non-streaming
JSON answer) on 127.0.0.1 only, and plays a *script* that decides each reply.

Control endpoints (used by record.py, reusable for benchmarks):

* ``GET  /health``            -> ``{"status": "ok"}``
* ``POST /_mock/script``      -> load a script (JSON body), reset request log + counter
* ``GET  /_mock/requests``    -> the request log since the last script load
* ``POST /_mock/reset``       -> clear the request log + counter, keep the script

Script format (all keys optional)::

    {
      "model": "mock-gpt",                 # echoed in chunks
      "replies": [                         # first rule whose "when" matches wins
        {"when": {"last_role": "tool"}, "reply": {...}},
        {"when": {"request_index": 0},   "reply": {...}},
        {"when": {"last_user_contains": "Paris"}, "reply": {...}},
        {"reply": {...}}                   # no "when" = default
      ]
    }

A reply::

    {
      "content_chunks": ["Hel", "lo"],      # streamed text deltas
      "tool_calls": [                        # streamed after the text
        {"id": "call_1", "name": "get_weather",
         "arguments_chunks": ["{\\"loc", "ation\\": \\"Paris\\"}"]}
      ],
      "tool_calls_in_one_chunk": false,      # true: all call headers in ONE delta
      "finish_reason": null,                 # default "tool_calls" if calls else "stop"
      "chunk_delay_ms": 0,                   # sleep before every data chunk
      "first_byte_delay_ms": 0,              # sleep before the response headers
      "usage": {...},                        # default: made-up token counts
      "http_status": null,                   # e.g. 500: answer with an error, no stream
      "error_body": {...},                   # JSON body for http_status
      "cut_after_chunks": null               # abort the TCP connection after N data chunks
    }

Streaming follows OpenAI's wire shape: a first delta with ``role`` (and
``content: ""`` for text replies), one delta per text chunk, for tool calls a
header delta per call (``index``, ``id``, ``type``, ``function.name``,
``function.arguments: ""``) followed by argument-fragment deltas carrying only
``index`` + ``function.arguments``; then a chunk with empty delta and
``finish_reason``, a usage chunk with ``choices: []`` (when the request asked
for ``stream_options.include_usage``) and ``data: [DONE]``.

Usage: ``python mock_llm.py --port 18001 [--script script.json] [--log-file requests.jsonl]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
from typing import Any, Dict, List, Optional

from aiohttp import web

CREATED = 1700000000  # fixed, so recordings are deterministic

DEFAULT_REPLY: Dict[str, Any] = {"content_chunks": ["OK."]}


class MockLLM:
    def __init__(self, script: Optional[Dict[str, Any]] = None, log_file: Optional[str] = None):
        self.script: Dict[str, Any] = script or {}
        self.requests: List[Dict[str, Any]] = []
        self.log_file = log_file

    # ------------------------------------------------------------------ script
    def load(self, script: Dict[str, Any]) -> None:
        self.script = script or {}
        self.requests = []

    def pick_reply(self, index: int, body: Dict[str, Any]) -> Dict[str, Any]:
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        last_user = next((m for m in reversed(messages) if m.get("role") == "user"), {})
        for rule in self.script.get("replies", []):
            when = rule.get("when") or {}
            ok = True
            if "request_index" in when and when["request_index"] != index:
                ok = False
            if "last_role" in when and last.get("role") != when["last_role"]:
                ok = False
            if "last_user_contains" in when:
                content = last_user.get("content")
                if not isinstance(content, str) or when["last_user_contains"] not in content:
                    ok = False
            if ok:
                return rule.get("reply", DEFAULT_REPLY)
        return DEFAULT_REPLY

    # ---------------------------------------------------------------- handlers
    async def health(self, _request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def set_script(self, request: web.Request) -> web.Response:
        self.load(await request.json())
        return web.json_response({"ok": True})

    async def reset(self, _request: web.Request) -> web.Response:
        self.requests = []
        return web.json_response({"ok": True})

    async def get_requests(self, _request: web.Request) -> web.Response:
        return web.json_response(self.requests)

    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            body = json.loads(raw)
        except ValueError:
            body = {"_unparseable": raw.decode("utf-8", "replace")}
        index = len(self.requests)
        entry: Dict[str, Any] = {
            "index": index,
            "method": request.method,
            "path": request.path,
            "headers": {
                k.lower(): v
                for k, v in request.headers.items()
                if k.lower() in ("content-type", "accept", "x-stainless-retry-count")
            },
            "body": body,
            "outcome": "pending",
        }
        self.requests.append(entry)
        reply = self.pick_reply(index, body)
        try:
            return await self._answer(request, body, reply, entry, index)
        finally:
            if self.log_file:
                with open(self.log_file, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry) + "\n")

    async def _answer(
        self,
        request: web.Request,
        body: Dict[str, Any],
        reply: Dict[str, Any],
        entry: Dict[str, Any],
        index: int,
    ) -> web.StreamResponse:
        model = self.script.get("model") or body.get("model") or "mock-gpt"
        if reply.get("first_byte_delay_ms"):
            await asyncio.sleep(reply["first_byte_delay_ms"] / 1000)

        status = reply.get("http_status")
        if status:
            entry["outcome"] = f"http_{status}"
            err = reply.get("error_body") or {
                "error": {
                    "message": "mock upstream failure",
                    "type": "server_error",
                    "param": None,
                    "code": None,
                }
            }
            return web.json_response(err, status=status)

        content_chunks: List[str] = list(reply.get("content_chunks") or [])
        calls: List[Dict[str, Any]] = list(reply.get("tool_calls") or [])
        finish = reply.get("finish_reason") or ("tool_calls" if calls else "stop")
        usage = reply.get("usage") or {
            "prompt_tokens": 10 * (index + 1),
            "completion_tokens": max(1, len(content_chunks)) + 5 * len(calls),
            "total_tokens": 10 * (index + 1) + max(1, len(content_chunks)) + 5 * len(calls),
        }
        cmpl_id = f"chatcmpl-mock-{index}"

        if not body.get("stream"):
            # Minimal non-streaming answer (not used by the recorded scenarios).
            message: Dict[str, Any] = {"role": "assistant", "content": "".join(content_chunks) or None}
            if calls:
                message["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": "".join(c.get("arguments_chunks") or [])},
                    }
                    for c in calls
                ]
            entry["outcome"] = "completed"
            return web.json_response(
                {
                    "id": cmpl_id,
                    "object": "chat.completion",
                    "created": CREATED,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
                    "usage": usage,
                }
            )

        def chunk(delta: Dict[str, Any], finish_reason: Optional[str] = None) -> Dict[str, Any]:
            return {
                "id": cmpl_id,
                "object": "chat.completion.chunk",
                "created": CREATED,
                "model": model,
                "system_fingerprint": "fp_mock",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }

        # Build the list of SSE data payloads.
        events: List[Any] = []
        if content_chunks:
            events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
            for text in content_chunks:
                events.append(chunk({"content": text}))
        if calls:
            headers = [
                {
                    "index": i,
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": ""},
                }
                for i, c in enumerate(calls)
            ]
            first_delta_extra: Dict[str, Any] = {}
            if not content_chunks:
                first_delta_extra = {"role": "assistant", "content": None, "refusal": None}
            if reply.get("tool_calls_in_one_chunk"):
                events.append(chunk({**first_delta_extra, "tool_calls": headers}))
                for i, c in enumerate(calls):
                    for frag in c.get("arguments_chunks") or []:
                        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
            else:
                for i, c in enumerate(calls):
                    extra = first_delta_extra if i == 0 else {}
                    events.append(chunk({**extra, "tool_calls": [headers[i]]}))
                    for frag in c.get("arguments_chunks") or []:
                        events.append(chunk({"tool_calls": [{"index": i, "function": {"arguments": frag}}]}))
        if not content_chunks and not calls:
            events.append(chunk({"role": "assistant", "content": "", "refusal": None}))
        events.append(chunk({}, finish))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append(
                {
                    "id": cmpl_id,
                    "object": "chat.completion.chunk",
                    "created": CREATED,
                    "model": model,
                    "system_fingerprint": "fp_mock",
                    "choices": [],
                    "usage": usage,
                }
            )
        events.append("[DONE]")

        resp = web.StreamResponse(
            status=200,
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"},
        )
        await resp.prepare(request)
        delay = (reply.get("chunk_delay_ms") or 0) / 1000
        cut_after = reply.get("cut_after_chunks")
        sent = 0
        try:
            for ev in events:
                if cut_after is not None and sent >= cut_after:
                    entry["outcome"] = f"cut_by_script_after_{sent}_chunks"
                    # Abort without the terminating zero-length chunk: the client
                    # sees an incomplete chunked body.
                    if request.transport is not None:
                        request.transport.abort()
                    return resp
                if delay:
                    await asyncio.sleep(delay)
                payload = ev if isinstance(ev, str) else json.dumps(ev)
                await resp.write(f"data: {payload}\n\n".encode())
                sent += 1
            await resp.write_eof()
            entry["outcome"] = "completed"
        except (ConnectionResetError, asyncio.CancelledError):
            entry["outcome"] = "client_disconnected"
            raise
        return resp


def build_app(mock: MockLLM) -> web.Application:
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app.router.add_get("/health", mock.health)
    app.router.add_post("/_mock/script", mock.set_script)
    app.router.add_post("/_mock/reset", mock.reset)
    app.router.add_get("/_mock/requests", mock.get_requests)
    app.router.add_post("/v1/chat/completions", mock.chat_completions)
    app.router.add_post("/chat/completions", mock.chat_completions)
    return app


async def amain(port: int, script: Optional[Dict[str, Any]], log_file: Optional[str]) -> None:
    mock = MockLLM(script, log_file)
    runner = web.AppRunner(build_app(mock), access_log=None, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, host="127.0.0.1", port=port)
    await site.start()
    print(f"mock_llm listening on http://127.0.0.1:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--script", help="JSON file with the initial script")
    ap.add_argument("--log-file", help="append every request (JSON lines) to this file")
    args = ap.parse_args()
    script = None
    if args.script:
        with open(args.script, encoding="utf-8") as fh:
            script = json.load(fh)
    try:
        asyncio.run(amain(args.port, script, args.log_file))
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()

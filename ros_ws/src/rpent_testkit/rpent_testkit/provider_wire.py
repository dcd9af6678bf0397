"""Local servers that speak the LLM providers' HTTP APIs, for tests and benchmarks.

``AnthropicServer`` (Messages API, ``POST /v1/messages``), ``OpenAIChatServer`` (Chat
Completions, ``POST /v1/chat/completions``) and ``OpenAIResponsesServer`` (Responses,
``POST /v1/responses``) answer with JSON or, when the request asks ``stream: true``,
server-sent events in the providers' own event shapes, so the real SDKs (driven by
pydantic-ai, and the Claude Code and Codex CLIs) parse them as they parse the providers'.
A request the real API would refuse (a missing key header, a conversation that starts with
the model, a tool result that answers no tool call, an image that is not base64 PNG/JPEG,
a tool without an object schema, a schema strict mode cannot take, more than four cache
points) gets the provider's 400 error body and is kept in ``refused``.

The model is a policy: ``policy(conversation) -> Reply``, where the conversation is the
provider-neutral view of what arrived (system text, tools, and each message's texts,
images, tool calls and tool results), so a scripted model can act on tool results.
"""
from __future__ import annotations

import base64
import hashlib
import itertools
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
NAMESPACE_SEP = "__"  # a Responses namespace's function, as the policy sees it: <ns>__<name>
IMAGE_MAGIC = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


class Refused(ValueError):
    """The request breaks the provider's rules (HTTP 400)."""


@dataclass
class Message:
    role: str  # "user", "assistant", "tool" (OpenAI tool messages)
    texts: list = field(default_factory=list)
    images: list = field(default_factory=list)  # (media type, bytes)
    tool_calls: list = field(default_factory=list)  # (id, name, arguments dict)
    tool_results: list = field(default_factory=list)  # (id, text, is_error)


@dataclass
class Conversation:
    model: str
    system: str
    tools: list  # {"name", "description", "schema"}
    messages: list
    raw: dict  # the request body as sent


@dataclass
class Reply:
    text: str = ""
    tool_calls: list = field(default_factory=list)  # (name, arguments dict or raw JSON str)


Policy = Callable[[Conversation], Reply]


def _image(media_type: str, data: str) -> tuple:
    try:
        raw = base64.b64decode(data, validate=True)
    except (ValueError, TypeError):
        raise Refused("image data is not valid base64") from None
    magic = IMAGE_MAGIC.get(media_type)
    if magic is None or not raw.startswith(magic):
        raise Refused(f"image is not the {media_type} it claims to be")
    return media_type, raw


class _Server:
    """The HTTP side shared by both providers: one POST path, JSON in, JSON or SSE out."""

    path = ""

    def __init__(self, policy: Policy, api_key: str = ""):
        """``api_key``: when set, any other key is refused with HTTP 401."""
        self.policy, self.api_key = policy, api_key
        self.requests: list = []  # every Conversation accepted, in order
        self.refused: list = []  # (reason, body) of every refused request
        self.headers: list = []  # request headers, in order
        self.failures: list = []  # exceptions the policy raised (answered with HTTP 500)
        # (request arrived, answer sent) per request, perf_counter s: the time between one
        # answer and the next request is the client's, the rest the server's.
        self.timings: list = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_POST(self):
                arrived = time.perf_counter()
                length = int(self.headers.get("content-length", 0))
                body = self.rfile.read(length)
                server.headers.append(dict(self.headers))
                status, headers, chunks = server.handle(self.path, dict(self.headers), body)
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                if isinstance(chunks, bytes):
                    self.send_header("content-length", str(len(chunks)))
                    self.end_headers()
                    self.wfile.write(chunks)
                else:
                    self.send_header("transfer-encoding", "chunked")
                    self.end_headers()
                    for chunk in chunks:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                    self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                server.timings.append((arrived, time.perf_counter()))

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._http.serve_forever, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._http.shutdown()
        self._http.server_close()

    @property
    def port(self) -> int:
        return self._http.server_address[1]

    def handle(self, path: str, headers: dict, body: bytes):
        headers = {k.lower(): v for k, v in headers.items()}
        if path.split("?")[0] != self.path:
            return 404, {"content-type": "application/json"}, self.error(f"no route {path}")
        if self.api_key and self.key(headers) != self.api_key:
            return 401, {"content-type": "application/json"}, self.error("invalid x-api-key")
        try:
            self.check_headers(headers)
            request = json.loads(body)
            conversation = self.parse(request)
        except (Refused, ValueError, KeyError, TypeError) as err:
            reason = f"{type(err).__name__}: {err}" if not isinstance(err, Refused) else str(err)
            self.refused.append((reason, body))
            return 400, {"content-type": "application/json"}, self.error(reason)
        self.requests.append(conversation)
        try:
            reply = self.policy(conversation)
        except Exception as err:  # noqa: BLE001 - the model failed: a 500, as a provider sends
            self.failures.append(err)
            return 500, {"content-type": "application/json"}, self.error(
                f"the model failed: {type(err).__name__}: {err}")
        tokens_in = max(1, _tokens(_images_as_blocks(request)))
        if request.get("stream"):
            return 200, {"content-type": "text/event-stream"}, self.stream(
                request, reply, tokens_in)
        return 200, {"content-type": "application/json"}, json.dumps(
            self.response(request, reply, tokens_in)).encode()

    # --- per provider ----------------------------------------------------------------------
    def check_headers(self, headers: dict) -> None:
        raise NotImplementedError

    def key(self, headers: dict) -> str:
        raise NotImplementedError

    def parse(self, request: dict) -> Conversation:
        raise NotImplementedError

    def response(self, request: dict, reply: Reply, tokens_in: int) -> dict:
        raise NotImplementedError

    def stream(self, request: dict, reply: Reply, tokens_in: int):
        raise NotImplementedError

    def error(self, message: str) -> bytes:
        raise NotImplementedError


def _tokens(value) -> int:
    """A rough token count: a quarter of the characters of text and structure, and
    (width x height) / 750 per image, Anthropic's own rule for image tokens."""
    if isinstance(value, dict):
        source = value.get("source")
        if value.get("type") == "image" and isinstance(source, dict):
            raw = base64.b64decode(source.get("data", ""))
            if raw[:8] == IMAGE_MAGIC["image/png"]:
                width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24],
                                                                                 "big")
                return max(1, width * height // 750)
            return 1600  # the most an image (about 1.15 megapixels) costs
        return len(json.dumps({k: "" for k in value})) // 4 + sum(
            _tokens(v) for k, v in value.items() if k != "cache_control")
    if isinstance(value, list):
        return sum(_tokens(v) for v in value)
    return len(str(value)) // 4


def _images_as_blocks(value):
    """``value`` with OpenAI's data-URL images as Anthropic image blocks, which ``_tokens``
    counts by size, not by their base64 length (an agent CLI that counts toward its context
    window would otherwise compact its history after a few images)."""
    if isinstance(value, dict):
        return {k: _images_as_blocks(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_images_as_blocks(v) for v in value]
    if isinstance(value, str) and value.startswith("data:image/") and ";base64," in value:
        media_type, data = value[len("data:"):].split(";base64,", 1)
        return {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                            "data": data}}
    return value


def _uncached(value):
    """``value`` without its cache_control marks (a tool result's marks sit on its content):
    where the marks are is not part of the cached prompt."""
    if isinstance(value, dict):
        return {k: _uncached(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_uncached(v) for v in value]
    return value


def _arguments(args) -> str:
    return args if isinstance(args, str) else json.dumps(args)


class AnthropicServer(_Server):
    """The Anthropic Messages API (base URL ``http://127.0.0.1:<port>``).

    Prompt caching as the API does it: the prompt is read as tools, then system blocks,
    then message blocks; a block marked ``cache_control`` writes the prefix up to it to the
    cache (when that prefix has at least ``min_cache_tokens``), and a later request whose
    prompt starts with a cached prefix reads it. ``usage`` splits the input accordingly
    (``input_tokens`` counts only what was neither read nor written), so a client that
    reorders or rewrites earlier blocks sees its cache reads vanish, as it would there.
    """

    path = "/v1/messages"

    def __init__(self, policy: Policy, api_key: str = "", min_cache_tokens: int = 1024):
        super().__init__(policy, api_key)
        self.min_cache_tokens = min_cache_tokens
        self._cache: set = set()  # digests of the cached prefixes
        self._cache_lock = threading.Lock()
        self.usages: list = []  # the input side of each answer's usage, in order

    def _cache_usage(self, request: dict) -> dict:
        """(uncached, written, read) input tokens of ``request``, updating the cache."""
        system = request.get("system", [])
        blocks = list(request.get("tools", [])) + (
            system if isinstance(system, list) else [{"type": "text", "text": system}])
        for message in request["messages"]:
            content = message["content"]
            blocks += [{"role": message["role"], **b} for b in (
                content if isinstance(content, list) else [{"type": "text", "text": content}])]
        digest, size, prefixes = hashlib.sha256(), 0, []
        for block in blocks:
            text = json.dumps(_uncached(block), sort_keys=True)
            digest.update(text.encode())
            size += _tokens(block)
            prefixes.append((digest.hexdigest(), size, "cache_control" in json.dumps(block)))
        with self._cache_lock:
            read = max((n for key, n, _ in prefixes if key in self._cache), default=0)
            written = 0
            for key, n, marked in prefixes:
                if marked and n >= self.min_cache_tokens and key not in self._cache:
                    self._cache.add(key)
                    written = max(written, n - read)
            usage = {"input_tokens": size - read - written,
                     "cache_creation_input_tokens": written, "cache_read_input_tokens": read}
            self.usages.append(usage)
        return usage

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def key(self, headers: dict) -> str:
        return headers.get("x-api-key", "")

    def check_headers(self, headers: dict) -> None:
        for name in ("x-api-key", "anthropic-version"):
            if not headers.get(name):
                raise Refused(f"missing header {name}")

    def error(self, message: str) -> bytes:
        return json.dumps({"type": "error", "error": {"type": "invalid_request_error",
                                                      "message": message}}).encode()

    def parse(self, request: dict) -> Conversation:
        if not isinstance(request.get("model"), str) or not request["model"]:
            raise Refused("model: field required")
        if not isinstance(request.get("max_tokens"), int) or request["max_tokens"] < 1:
            raise Refused("max_tokens: must be a positive integer")
        system = request.get("system", "")
        cache_points = 0
        if isinstance(system, list):
            cache_points += sum("cache_control" in b for b in system)
            system = "\n".join(b["text"] for b in system if b["type"] == "text")
        tools = []
        for tool in request.get("tools", []):
            if not TOOL_NAME.match(tool.get("name", "")):
                raise Refused(f"tools: invalid name {tool.get('name')!r}")
            schema = tool.get("input_schema")
            if not isinstance(schema, dict) or schema.get("type") != "object":
                raise Refused(f"tools.{tool['name']}.input_schema: type must be 'object'")
            cache_points += "cache_control" in tool
            tools.append({"name": tool["name"], "description": tool.get("description", ""),
                          "schema": schema})
        messages, pending = [], set()
        if not request.get("messages"):
            raise Refused("messages: at least one message is required")
        # The API combines consecutive messages of one role into one turn (Claude Code sends
        # a tool result and a reminder as two user messages); newer models also take system
        # messages between them (Claude Code's environment notes), text only.
        turns: list = []
        for i, raw in enumerate(request["messages"]):
            blocks = raw["content"] if isinstance(raw["content"], list) else \
                [{"type": "text", "text": raw["content"]}]
            if raw.get("role") == "system":
                if any(b.get("type") != "text" for b in blocks):
                    raise Refused(f"messages.{i}: a system message takes text blocks only")
                cache_points += sum("cache_control" in b for b in blocks)
                system = "\n".join([system] + [b["text"] for b in blocks])
                continue
            if raw.get("role") not in ("user", "assistant"):
                raise Refused(f"messages.{i}: unknown role {raw.get('role')!r}")
            if turns and turns[-1][0] == raw["role"]:
                turns[-1][1].extend(blocks)
            else:
                turns.append((raw["role"], list(blocks)))
        if turns[0][0] != "user":
            raise Refused("messages.0: the first message must use the user role")
        for i, (role, blocks) in enumerate(turns):
            msg = Message(role)
            for block in blocks:
                cache_points += "cache_control" in block
                kind = block["type"]
                if kind == "text":
                    msg.texts.append(block["text"])
                elif kind == "image" and role == "user":
                    source = block["source"]
                    if source.get("type") != "base64":
                        raise Refused("image source must be base64 here")
                    msg.images.append(_image(source["media_type"], source["data"]))
                elif kind == "tool_use" and role == "assistant":
                    msg.tool_calls.append((block["id"], block["name"], block["input"]))
                elif kind == "tool_result" and role == "user":
                    if block["tool_use_id"] not in pending:
                        raise Refused(f"messages.{i}: tool_result {block['tool_use_id']} "
                                      "answers no tool_use of the previous message")
                    pending.discard(block["tool_use_id"])
                    content = block.get("content", "")
                    parts = content if isinstance(content, list) else \
                        [{"type": "text", "text": content}]
                    texts = []
                    for part in parts:
                        cache_points += "cache_control" in part
                        if part["type"] == "text":
                            texts.append(part["text"])
                        elif part["type"] == "image":
                            msg.images.append(_image(part["source"]["media_type"],
                                                     part["source"]["data"]))
                    msg.tool_results.append((block["tool_use_id"], "\n".join(texts),
                                             bool(block.get("is_error"))))
                elif kind not in ("thinking", "redacted_thinking"):
                    raise Refused(f"messages.{i}: content type {kind!r} not allowed for {role}")
            if role == "user" and pending:
                raise Refused(f"messages.{i}: tool_use ids {sorted(pending)} were not answered "
                              "with tool_result blocks")
            pending = {c[0] for c in msg.tool_calls}
            messages.append(msg)
        if cache_points > 4:
            raise Refused(f"a maximum of 4 blocks with cache_control may be provided, found "
                          f"{cache_points}")
        return Conversation(request["model"], system, tools, messages, request)

    def _blocks(self, reply: Reply) -> list:
        blocks = [{"type": "text", "text": reply.text}] if reply.text else []
        for name, args in reply.tool_calls:
            blocks.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}",
                           "name": name, "input": args})
        return blocks

    def response(self, request: dict, reply: Reply, tokens_in: int) -> dict:
        blocks = self._blocks(reply)
        return {"id": f"msg_{uuid.uuid4().hex[:20]}", "type": "message", "role": "assistant",
                "model": request["model"], "content": blocks,
                "stop_reason": "tool_use" if reply.tool_calls else "end_turn",
                "stop_sequence": None,
                "usage": {**self._cache_usage(request), "output_tokens": 10}}

    def stream(self, request: dict, reply: Reply, tokens_in: int):
        def event(kind: str, data: dict) -> bytes:
            return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()

        message = self.response(request, reply, tokens_in)
        blocks = message.pop("content")
        yield event("message_start", {"message": {
            **message, "content": [], "stop_reason": None,
            "usage": {**message["usage"], "output_tokens": 1}}})
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                yield event("content_block_start", {"index": i, "content_block": {
                    "type": "text", "text": ""}})
                yield event("content_block_delta", {"index": i, "delta": {
                    "type": "text_delta", "text": block["text"]}})
            else:
                yield event("content_block_start", {"index": i, "content_block": {
                    **block, "input": {}}})
                yield event("content_block_delta", {"index": i, "delta": {
                    "type": "input_json_delta", "partial_json": _arguments(block["input"])}})
            yield event("content_block_stop", {"index": i})
        yield event("message_delta", {"delta": {"stop_reason": message["stop_reason"],
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": 10}})
        yield event("message_stop", {})


class _OpenAIServer(_Server):
    """What OpenAI's APIs share: base URL ``http://127.0.0.1:<port>/v1``, bearer keys, the
    error body."""

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def key(self, headers: dict) -> str:
        return headers.get("authorization", "").removeprefix("Bearer ")

    def check_headers(self, headers: dict) -> None:
        if not headers.get("authorization", "").startswith("Bearer "):
            raise Refused("missing bearer token in the Authorization header")

    def error(self, message: str) -> bytes:
        return json.dumps({"error": {"message": message, "type": "invalid_request_error",
                                     "param": None, "code": None}}).encode()


def _data_url_image(url: str) -> tuple:
    match = re.match(r"^data:(image/[a-z]+);base64,(.*)$", url or "", re.S)
    if not match:
        raise Refused("image_url must be a data URL here")
    return _image(match.group(1), match.group(2))


def _strict_schema_problem(schema: dict, where: str) -> Optional[str]:
    """Why a schema is not valid in strict mode, which the Responses API checks: every
    object closes its properties and requires all of them."""
    if schema.get("type") == "object":
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is not False:
            return f"{where}: 'additionalProperties' is required to be supplied and to be false"
        if sorted(schema.get("required", [])) != sorted(props):
            return (f"{where}: 'required' is required to be supplied and to be an array "
                    "including every key in properties")
        for name, sub in props.items():
            problem = _strict_schema_problem(sub, f"{where}.{name}")
            if problem:
                return problem
    if schema.get("type") == "array" and isinstance(schema.get("items"), dict):
        return _strict_schema_problem(schema["items"], f"{where}[]")
    return None


class OpenAIResponsesServer(_OpenAIServer):
    """The OpenAI Responses API (``POST /v1/responses``): ``input`` items (messages,
    ``function_call`` and ``function_call_output``), ``instructions``, function tools whose
    schemas strict mode must accept; answers a response object, or its server-sent events."""

    path = "/v1/responses"

    def parse(self, request: dict) -> Conversation:
        if not isinstance(request.get("model"), str) or not request["model"]:
            raise Refused("Missing required parameter: 'model'.")
        tools = []
        for tool in request.get("tools", []):
            # A namespace groups functions (Codex puts each MCP server's tools in one); the
            # policy sees them as <namespace>__<name>.
            if tool.get("type") == "namespace" and TOOL_NAME.match(tool.get("name", "")) \
                    and isinstance(tool.get("tools"), list):
                tools += [{**t, "name": f"{tool['name']}{NAMESPACE_SEP}{t['name']}"}
                          for t in map(self._function, tool["tools"])]
            else:
                tools.append(self._function(tool))
        items = request.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items
        if not items:
            raise Refused("Missing required parameter: 'input'.")
        messages, calls = [], set()
        for i, item in enumerate(items):
            kind = item.get("type", "message")
            if kind == "reasoning":
                continue
            if kind == "function_call":
                if not item.get("call_id") or not TOOL_NAME.match(item.get("name", "")):
                    raise Refused(f"input[{i}]: a function_call needs call_id and name")
                if not messages or messages[-1].role != "assistant":
                    messages.append(Message("assistant"))
                name = item["name"] if not item.get("namespace") else \
                    f"{item['namespace']}{NAMESPACE_SEP}{item['name']}"
                messages[-1].tool_calls.append((item["call_id"], name,
                                                json.loads(item["arguments"])))
                calls.add(item["call_id"])
            elif kind == "function_call_output":
                if item.get("call_id") not in calls:
                    raise Refused(f"No tool call found for function call output with call_id "
                                  f"{item.get('call_id')}.")
                msg = Message("tool")
                output = item.get("output")
                parts = output if isinstance(output, list) else \
                    [{"type": "input_text", "text": output}]
                texts = []
                for part in parts:
                    if part["type"] == "input_text":
                        texts.append(part["text"])
                    elif part["type"] == "input_image":
                        msg.images.append(_data_url_image(part.get("image_url")))
                    else:
                        raise Refused(f"input[{i}].output: type {part['type']!r} not allowed")
                msg.tool_results.append((item["call_id"], "\n".join(texts), False))
                messages.append(msg)
            elif kind == "message":
                role, content = item.get("role"), item.get("content")
                if role not in ("user", "assistant", "system", "developer"):
                    raise Refused(f"input[{i}]: unknown role {role!r}")
                msg = Message("user" if role in ("system", "developer") else role)
                parts = content if isinstance(content, list) else \
                    [{"type": "input_text", "text": content}]
                for part in parts:
                    if part["type"] in ("input_text", "output_text"):
                        msg.texts.append(part["text"])
                    elif part["type"] == "input_image" and role == "user":
                        msg.images.append(_data_url_image(part.get("image_url")))
                    else:
                        raise Refused(f"input[{i}]: content type {part['type']!r} not allowed "
                                      f"for role {role}")
                messages.append(msg)
            else:
                raise Refused(f"input[{i}]: unknown item type {kind!r}")
        return Conversation(request["model"], request.get("instructions") or "", tools,
                            messages, request)

    @staticmethod
    def _function(tool: dict) -> dict:
        if tool.get("type") != "function" or not TOOL_NAME.match(tool.get("name", "")):
            raise Refused(f"tools: invalid tool {tool!r:.80}")
        schema = tool.get("parameters") or {}
        if schema.get("type") != "object":
            raise Refused(f"tools.{tool['name']}.parameters: type must be 'object'")
        problem = tool.get("strict") and _strict_schema_problem(
            schema, f"Invalid schema for function '{tool['name']}'")
        if problem:
            raise Refused(problem)
        return {"name": tool["name"], "description": tool.get("description", ""),
                "schema": schema}

    def response(self, request: dict, reply: Reply, tokens_in: int) -> dict:
        output = []
        if reply.text:
            output.append({"type": "message", "id": f"msg_{uuid.uuid4().hex[:20]}",
                           "status": "completed", "role": "assistant", "content": [
                               {"type": "output_text", "text": reply.text,
                                "annotations": []}]})
        namespaces = [t["name"] for t in request.get("tools", []) if t.get("type") == "namespace"]
        for name, args in reply.tool_calls:
            call = {"type": "function_call", "id": f"fc_{uuid.uuid4().hex[:20]}",
                    "call_id": f"call_{uuid.uuid4().hex[:20]}", "name": name,
                    "arguments": _arguments(args), "status": "completed"}
            # A function of a namespace is answered with its namespace and its own name.
            for space in namespaces:
                if name.startswith(space + NAMESPACE_SEP):
                    call.update(namespace=space, name=name[len(space + NAMESPACE_SEP):])
            output.append(call)
        return {"id": f"resp_{uuid.uuid4().hex[:20]}", "object": "response",
                "created_at": int(time.time()), "status": "completed", "error": None,
                "incomplete_details": None, "instructions": request.get("instructions"),
                "model": request["model"], "output": output, "parallel_tool_calls": True,
                "tool_choice": request.get("tool_choice", "auto"),
                "tools": request.get("tools", []), "metadata": {},
                "usage": {"input_tokens": tokens_in,
                          "input_tokens_details": {"cached_tokens": 0},
                          "output_tokens": 10, "output_tokens_details": {"reasoning_tokens": 0},
                          "total_tokens": tokens_in + 10}}

    def stream(self, request: dict, reply: Reply, tokens_in: int):
        whole = self.response(request, reply, tokens_in)
        sequence = itertools.count()

        def event(kind: str, data: dict) -> bytes:
            data = {"type": kind, "sequence_number": next(sequence), **data}
            return f"event: {kind}\ndata: {json.dumps(data)}\n\n".encode()

        yield event("response.created", {"response": {**whole, "status": "in_progress",
                                                      "output": [], "usage": None}})
        for index, item in enumerate(whole["output"]):
            yield event("response.output_item.added", {"output_index": index, "item": {
                **item, "status": "in_progress",
                **({"content": []} if item["type"] == "message" else {"arguments": ""})}})
            if item["type"] == "message":
                part = item["content"][0]
                yield event("response.content_part.added", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "part": {**part, "text": ""}})
                yield event("response.output_text.delta", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "delta": part["text"], "logprobs": []})
                yield event("response.output_text.done", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "text": part["text"], "logprobs": []})
                yield event("response.content_part.done", {
                    "item_id": item["id"], "output_index": index, "content_index": 0,
                    "part": part})
            else:
                yield event("response.function_call_arguments.delta", {
                    "item_id": item["id"], "output_index": index, "delta": item["arguments"]})
                yield event("response.function_call_arguments.done", {
                    "item_id": item["id"], "output_index": index,
                    "arguments": item["arguments"]})
            yield event("response.output_item.done", {"output_index": index, "item": item})
        yield event("response.completed", {"response": whole})


class OpenAIChatServer(_OpenAIServer):
    """OpenAI Chat Completions (base URL ``http://127.0.0.1:<port>/v1``)."""

    path = "/v1/chat/completions"

    def parse(self, request: dict) -> Conversation:
        if not isinstance(request.get("model"), str) or not request["model"]:
            raise Refused("you must provide a model parameter")
        tools = []
        for tool in request.get("tools", []):
            fn = tool.get("function", {})
            if tool.get("type") != "function" or not TOOL_NAME.match(fn.get("name", "")):
                raise Refused(f"tools: invalid tool {tool!r:.80}")
            if fn.get("parameters", {}).get("type") != "object":
                raise Refused(f"tools.{fn['name']}.parameters: type must be 'object'")
            tools.append({"name": fn["name"], "description": fn.get("description", ""),
                          "schema": fn["parameters"]})
        system, messages, pending = [], [], set()
        for i, raw in enumerate(request.get("messages") or []):
            role, content = raw["role"], raw.get("content")
            if role != "tool" and pending:
                raise Refused(f"messages.{i}: an assistant message with 'tool_calls' must be "
                              f"followed by tool messages answering each of {sorted(pending)}")
            if role in ("system", "developer"):
                system.append(content if isinstance(content, str) else
                              "\n".join(p["text"] for p in content))
                continue
            msg = Message(role)
            parts = content if isinstance(content, list) else \
                ([{"type": "text", "text": content}] if content else [])
            for part in parts:
                if part["type"] == "text":
                    msg.texts.append(part["text"])
                elif part["type"] == "image_url" and role == "user":
                    msg.images.append(_data_url_image(part["image_url"]["url"]))
                else:
                    raise Refused(f"messages.{i}: content part {part['type']!r} not allowed "
                                  f"for role {role}")
            if role == "assistant":
                for call in raw.get("tool_calls") or []:
                    msg.tool_calls.append((call["id"], call["function"]["name"],
                                           json.loads(call["function"]["arguments"])))
                pending = {c[0] for c in msg.tool_calls}
            elif role == "tool":
                if raw.get("tool_call_id") not in pending:
                    raise Refused(f"messages.{i}: tool message answers no pending tool call")
                pending.discard(raw["tool_call_id"])
                msg.tool_results.append((raw["tool_call_id"], "\n".join(msg.texts), False))
                msg.texts = []
            elif role != "user":
                raise Refused(f"messages.{i}: unknown role {role!r}")
            messages.append(msg)
        if not messages:
            raise Refused("messages: at least one message is required")
        return Conversation(request["model"], "\n".join(system), tools, messages, request)

    def _message(self, reply: Reply) -> dict:
        calls = [{"id": f"call_{uuid.uuid4().hex[:20]}", "type": "function",
                  "function": {"name": name, "arguments": _arguments(args)}}
                 for name, args in reply.tool_calls]
        return {"role": "assistant", "content": reply.text or None,
                **({"tool_calls": calls} if calls else {})}

    def response(self, request: dict, reply: Reply, tokens_in: int) -> dict:
        return {"id": f"chatcmpl-{uuid.uuid4().hex[:20]}", "object": "chat.completion",
                "created": int(time.time()), "model": request["model"],
                "choices": [{"index": 0, "message": self._message(reply), "logprobs": None,
                             "finish_reason": "tool_calls" if reply.tool_calls else "stop"}],
                "usage": {"prompt_tokens": tokens_in, "completion_tokens": 10,
                          "total_tokens": tokens_in + 10}}

    def stream(self, request: dict, reply: Reply, tokens_in: int):
        whole = self.response(request, reply, tokens_in)
        base = {k: whole[k] for k in ("id", "created", "model")}

        def chunk(delta: dict, finish: Optional[str] = None, usage=None) -> bytes:
            data = {**base, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            if usage is not None:
                data = {**data, "choices": [], "usage": usage}
            return f"data: {json.dumps(data)}\n\n".encode()

        message = whole["choices"][0]["message"]
        yield chunk({"role": "assistant", "content": ""})
        if message["content"]:
            yield chunk({"content": message["content"]})
        for i, call in enumerate(message.get("tool_calls", [])):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, whole["choices"][0]["finish_reason"])
        if (request.get("stream_options") or {}).get("include_usage"):
            yield chunk({}, usage=whole["usage"])
        yield b"data: [DONE]\n\n"

"""The one way Ingot calls a model: any OpenAI-compatible endpoint, per role, with guard rails.

Roles: `agent` (cheap serving model), `strong` (novel tasks; defaults to the teacher), `teacher`
(writes candidates) and `judge`. The serving roles may use their own endpoint (MODEL_BASE_URL).
Every request goes through here, so the rules are enforced once:
- On an OpenRouter URL every request carries the zero-data-retention provider preference, and a
  model without such an endpoint fails loudly instead of silently falling back.
- A remote URL without a key is a configuration error naming the setting; a local http:// URL
  needs no key.
- Timeouts, retries with backoff on 429/5xx (the SDK's), and a concurrency limit. A 200 whose
  body is not a chat completion (an HTML page, bytes that are not UTF-8, non-JSON, no `choices`;
  streamed: no chunk with a choice, or an error event) is retried the same way, then ends in one
  clear error line; each such reply is in the ledger as a call of unknown cost.
- Cassettes (record/replay), the usage ledger and its MAX_RUN_USD cap.
- One OpenTelemetry GenAI span per call (optimize/models/spans.py; a no-op unless a provider is set).
- `complete_json` parses and validates structured output, with one repair retry.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

import openai
from pydantic import BaseModel, ValidationError

from ingot.errors import IngotError
from optimize.models.cassette import Cassette, request_key
from optimize.models.endpoints import Endpoint, LLMConfig, is_openrouter
from optimize.models.ledger import UsageLedger
from optimize.models.spans import model_span, record_completion

ZDR_PREFERENCE = {"provider": {"zdr": True, "data_collection": "deny"}}
SAMPLING = (
    "temperature",
    "top_p",
    "max_tokens",
    "seed",
    "stop",
    "n",
    "presence_penalty",
    "frequency_penalty",
)
T = TypeVar("T", bound=BaseModel)


class LLMError(IngotError):
    """A model call failed in a way retrying will not fix."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """One model answer, assembled (also for streams)."""

    role: str
    model: str
    text: str | None
    tool_calls: tuple[ToolCall, ...]
    tokens_in: int
    tokens_out: int
    finish_reason: str | None
    cost_usd: float | None = None
    from_cassette: bool = False
    usage_known: bool = True

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["tool_calls"] = [asdict(c) for c in self.tool_calls]
        return data


def _from_json(role: str, data: Mapping[str, Any]) -> Completion:
    return Completion(
        role=role,
        model=data["model"],
        text=data.get("text"),
        tool_calls=tuple(ToolCall(**c) for c in data.get("tool_calls", [])),
        tokens_in=int(data.get("tokens_in", 0)),
        tokens_out=int(data.get("tokens_out", 0)),
        finish_reason=data.get("finish_reason"),
        from_cassette=True,
    )


@dataclass
class LLMClient:
    """Calls models for every role; shares one ledger, cassette and concurrency limit."""

    config: LLMConfig
    ledger: UsageLedger | None = None
    cassette: Cassette | None = None
    _clients: dict[tuple[str, str | None], openai.OpenAI] = field(default_factory=dict, repr=False)
    _slots: threading.BoundedSemaphore | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._slots = threading.BoundedSemaphore(self.config.concurrency)

    def _client(self, endpoint: Endpoint) -> openai.OpenAI:
        key = (endpoint.base_url, endpoint.api_key)
        if key not in self._clients:
            self._clients[key] = openai.OpenAI(
                base_url=endpoint.base_url,
                api_key=endpoint.api_key or "not-needed",
                timeout=self.config.timeout_s,
                max_retries=self.config.max_retries,
            )
        return self._clients[key]

    def complete(
        self,
        role: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        tools: Sequence[Mapping] | None = None,
        json_mode: bool = False,
        stream: bool = False,
        skill_revision: str | None = None,
        model: str | None = None,
        **sampling: Any,
    ) -> Completion:
        """One chat completion for `role` (optionally another `model` on the role's endpoint)."""
        endpoint = self.config.endpoint(role)
        request: dict[str, Any] = {
            "model": model or endpoint.model,
            "messages": list(messages),
            **{k: v for k, v in sampling.items() if k in SAMPLING and v is not None},
        }
        if tools:
            request["tools"] = list(tools)
        if json_mode:
            request["response_format"] = {"type": "json_object"}
        with model_span(endpoint, role, request["model"]) as span:
            completion = self._complete(endpoint, role, request, stream, skill_revision)
            record_completion(span, completion)
        return completion

    def _complete(
        self,
        endpoint: Endpoint,
        role: str,
        request: dict[str, Any],
        stream: bool,
        skill_revision: str | None,
    ) -> Completion:
        """`complete` after the request is built: cassette, ledger, the call itself."""
        key = request_key({**request, "endpoint": endpoint.base_url}, skill_revision)
        if self.cassette is not None:
            recorded = self.cassette.lookup(key)
            if recorded is not None:
                return _from_json(role, recorded)
        extra = dict(ZDR_PREFERENCE) if is_openrouter(endpoint.base_url) else None
        assert self._slots is not None
        with self._slots:
            if self.ledger is not None:
                self.ledger.reserve(request["model"])
            try:
                completion = self._call_until_well_formed(endpoint, role, request, extra, stream)
                if self.ledger is not None:
                    cost = self.ledger.record(
                        role,
                        request["model"],
                        completion.tokens_in if completion.usage_known else None,
                        completion.tokens_out if completion.usage_known else None,
                    )
                    completion = Completion(**{**completion.__dict__, "cost_usd": cost})
            finally:
                if self.ledger is not None:
                    self.ledger.release()
        if self.cassette is not None:
            self.cassette.store(key, request, completion.as_json())
        return completion

    def _call_until_well_formed(
        self, endpoint: Endpoint, role: str, request: dict[str, Any], extra: dict | None, stream: bool
    ) -> Completion:
        """`_call`, retrying a malformed 200 like a 5xx; each malformed reply is ledgered."""
        for attempt in range(self.config.max_retries + 1):
            try:
                return self._call(endpoint, role, request, extra, stream)
            except _Malformed as exc:
                if self.ledger is not None:
                    self.ledger.record(role, request["model"], None, None)  # it may have been billed
                if attempt == self.config.max_retries:
                    what = " ".join(str(exc).split())  # one line, whatever the body held
                    raise LLMError(
                        f"{endpoint.base_url} answered 200 with something that is not a chat completion "
                        f"({what}) for the {role} role, {attempt + 1} times; check BASE_URL points at an "
                        "OpenAI-compatible /v1 endpoint"
                    ) from None
                time.sleep(self.config.retry_backoff_s * 2**attempt)
        raise AssertionError("unreachable")

    def _call(
        self, endpoint: Endpoint, role: str, request: dict[str, Any], extra: dict | None, stream: bool
    ) -> Completion:
        client = self._client(endpoint)
        try:
            if stream:
                with client.chat.completions.create(
                    **request, stream=True, stream_options={"include_usage": True}, extra_body=extra
                ) as chunks:
                    return _assemble(role, request["model"], chunks)
            response = client.chat.completions.create(**request, extra_body=extra)
        except UnicodeDecodeError as exc:  # json.loads(bytes) in httpx's Response.json; the SSE decoder
            raise _Malformed(
                f"bytes that are not {exc.encoding} text ({exc.reason} at byte {exc.start})"
            ) from exc
        except json.JSONDecodeError as exc:
            raise _Malformed(f"a body that is not JSON: {exc}") from exc
        except openai.APIResponseValidationError as exc:
            raise _Malformed(f"a body the SDK cannot read: {exc.message}") from exc
        except openai.NotFoundError as exc:
            if extra is not None:
                raise LLMError(
                    f"OpenRouter has no zero-data-retention endpoint for {request['model']!r} "
                    f"({exc.message}); choose a model that offers one. Ingot will not send your "
                    "prompts to a provider that may retain them"
                ) from exc
            raise LLMError(
                f"{endpoint.base_url} does not know model {request['model']!r}: {exc.message}"
            ) from exc
        except openai.AuthenticationError as exc:
            raise LLMError(
                f"{endpoint.base_url} rejected the key for the {role} role; check API_KEY"
            ) from exc
        except openai.APIConnectionError as exc:
            raise LLMError(f"cannot reach {endpoint.base_url} for the {role} role: {exc}") from exc
        except openai.APIStatusError as exc:
            raise LLMError(
                f"{endpoint.base_url} answered {exc.status_code} for the {role} role after "
                f"{self.config.max_retries} retries: {_provider_words(exc)}"
            ) from exc
        except openai.APIError as exc:  # what is left: an `{"error": ...}` event inside a 200 stream
            raise _Malformed(f"an error event in the stream: {exc.message}") from exc
        choice = _first_choice(response)
        calls = tuple(
            ToolCall(c.id, c.function.name, c.function.arguments)
            for c in (choice.message.tool_calls or [])
            if getattr(c, "function", None)
        )
        usage = response.usage
        return Completion(
            role,
            response.model or request["model"],
            choice.message.content,
            calls,
            usage.prompt_tokens if usage else 0,
            usage.completion_tokens if usage else 0,
            choice.finish_reason,
            usage_known=usage is not None,
        )

    def complete_json(
        self, role: str, messages: Sequence[Mapping[str, Any]], schema: type[T], **kwargs: Any
    ) -> tuple[T, list[Completion]]:
        """A reply parsed into `schema`; one repair round if the first reply does not validate."""
        history = list(messages)
        calls = []
        for attempt in range(2):
            completion = self.complete(role, history, json_mode=True, **kwargs)
            calls.append(completion)
            try:
                return schema.model_validate(json.loads(completion.text or "")), calls
            except (json.JSONDecodeError, ValidationError) as exc:
                if attempt == 1:
                    raise LLMError(
                        f"the {role} model's reply is not valid {schema.__name__} JSON after a "
                        f"repair attempt: {str(exc)[:300]}"
                    ) from exc
                history += [
                    {"role": "assistant", "content": completion.text or ""},
                    {
                        "role": "user",
                        "content": "That reply was not valid JSON for the required schema "
                        f"({str(exc)[:300]}). Reply again with only the JSON object, matching: "
                        f"{json.dumps(schema.model_json_schema())}",
                    },
                ]
        raise AssertionError("unreachable")


def _provider_words(exc: openai.APIStatusError) -> str:
    """What the provider said, without the SDK's "Error code: 500 - " and dict dump around it:
    the `error.message` (or `message`, or `detail`) of a JSON body, else the SDK's message."""
    body = exc.body
    if isinstance(body, Mapping):
        error = body.get("error", body)
        for key in ("message", "detail"):
            said = error.get(key) if isinstance(error, Mapping) else None
            if isinstance(said, str) and said.strip():
                return " ".join(said.split())
        if isinstance(error, str) and error.strip():
            return " ".join(error.split())
    return " ".join(str(exc.message).split())


class _Malformed(Exception):
    """A 200 reply that is not a chat completion; retried, never shown as it is."""


def _first_choice(response: Any) -> Any:
    """The reply's first choice, or `_Malformed` saying what the body was instead."""
    if isinstance(response, str):
        kind = "an HTML page" if response.lstrip().lower().startswith(("<!doctype", "<html")) else "text"
        raise _Malformed(f"{kind}: {response[:60]!r}")
    choices = getattr(response, "choices", None)
    if not choices or not isinstance(choices, list):
        raise _Malformed("JSON without `choices`")
    if not isinstance(getattr(choices[0], "message", None), openai.BaseModel):
        raise _Malformed("a choice without a `message`")
    return choices[0]


def _assemble(role: str, model: str, chunks: openai.Stream[Any]) -> Completion:
    """The streamed chunks as one answer, or `_Malformed` if no chunk carried a choice (an HTML page
    or an empty body parse as a stream of no events)."""
    text, finish, tokens_in, tokens_out, seen_model, known, answered = [], None, 0, 0, model, False, False
    for chunk in chunks:
        choices = _chunk_choices(chunk)
        answered = answered or bool(choices)
        seen_model = chunk.model or seen_model
        if chunk.usage:
            tokens_in, tokens_out, known = chunk.usage.prompt_tokens, chunk.usage.completion_tokens, True
        for choice in choices:
            content = getattr(choice.delta, "content", None)
            if isinstance(content, str):
                text.append(content)
            finish = choice.finish_reason or finish
    if not answered:
        kind = chunks.response.headers.get("content-type", "no content-type")
        raise _Malformed(f"a stream without a single choice ({kind})")
    return Completion(role, seen_model, "".join(text), (), tokens_in, tokens_out, finish, usage_known=known)


def _chunk_choices(chunk: Any) -> list[Any]:
    """A stream chunk's choices (none in a usage-only chunk), or `_Malformed` saying what it was."""
    if not isinstance(chunk, openai.BaseModel):
        raise _Malformed(f"a stream chunk that is not a JSON object: {chunk!r:.60}")
    choices = getattr(chunk, "choices", None) or []
    if not isinstance(choices, list) or not all(
        isinstance(c, openai.BaseModel) and isinstance(getattr(c, "delta", None), openai.BaseModel | None)
        for c in choices
    ):
        raise _Malformed(f"a stream chunk whose `choices` are not choices: {choices!r:.60}")
    return choices

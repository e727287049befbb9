"""A LangChain chat model over Ingot's one model client, so agents obey the same rules.

LangChain's own OpenAI model would bypass `optimize/models/llm.py`: no zero-data-retention preference on
OpenRouter, no ledger or MAX_RUN_USD, no cassettes. This adapter converts LangChain messages and
tools to the OpenAI wire shape, calls `LLMClient.complete` for one role, and converts the answer
back (text, tool calls, token usage). With `calls`, each request and its usage is appended there
(the run's transcript, which traces and goldens keep). Callback handlers (Langfuse's) see the
role's model name, the answering model, usage, and the call's cost from the ledger in the
message's `response_metadata["cost_usd"]` (None when unpriced). It does nothing else.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel, LangSmithParams
from langchain_core.messages import AIMessage, BaseMessage, convert_to_openai_messages
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import ConfigDict, SkipValidation

from optimize.models.llm import LLMClient

PROVIDER = "ingot"


class IngotChatModel(BaseChatModel):
    """Chat model for one role (`agent`, `strong`, …) of an `LLMClient`."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    client: SkipValidation[LLMClient]
    role: str
    skill_revision: str | None = None  # part of the cassette key for served runs
    calls: SkipValidation[list[dict[str, Any]]] | None = None  # each request's wire form and usage

    @property
    def _llm_type(self) -> str:
        return "ingot"

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> LangSmithParams:
        # deepagents picks its harness profile by this provider name (agent/run.py registers "ingot").
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = PROVIDER
        endpoint = self.client.config.endpoints.get(self.role)
        if endpoint is not None:
            params["ls_model_name"] = endpoint.model  # what tracers name the call by
        return params

    def _combine_llm_outputs(self, llm_outputs: list[dict[str, Any] | None]) -> dict[str, Any]:
        return {k: v for output in llm_outputs for k, v in (output or {}).items()}

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Any:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        wire = convert_to_openai_messages(messages)
        completion = self.client.complete(
            self.role, wire, tools=kwargs.get("tools") or None, skill_revision=self.skill_revision, stop=stop
        )
        if self.calls is not None:
            self.calls.append(
                {
                    "messages": wire,
                    "tools": list(kwargs.get("tools") or ()),
                    "model": completion.model,
                    "tokens_in": completion.tokens_in,
                    "tokens_out": completion.tokens_out,
                    "cost_usd": completion.cost_usd,
                }
            )
        calls = [
            {"name": c.name, "args": json.loads(c.arguments or "{}"), "id": c.id, "type": "tool_call"}
            for c in completion.tool_calls
        ]
        message = AIMessage(
            content=completion.text or "",
            tool_calls=calls,
            usage_metadata={
                "input_tokens": completion.tokens_in,
                "output_tokens": completion.tokens_out,
                "total_tokens": completion.tokens_in + completion.tokens_out,
            },
            response_metadata={
                "model_name": completion.model,
                "finish_reason": completion.finish_reason,
                "cost_usd": completion.cost_usd,
            },
        )
        return ChatResult(
            generations=[ChatGeneration(message=message)], llm_output={"model_name": completion.model}
        )

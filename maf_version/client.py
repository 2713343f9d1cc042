"""Any langchain-core chat model as a Microsoft Agent Framework chat client, and our tools as MAF tools.

`LangChainChatClient` is a `BaseChatClient` stacked as MAF's shipped clients are (`FunctionInvocationLayer`, the
tool loop; `ChatMiddlewareLayer`; `ChatTelemetryLayer`): MAF messages and tool definitions become langchain-core
messages and `bind_tools`, and the reply comes back with its usage, its plan and the model's call ids. `maf_tool`
makes one of our `BaseTool`s a MAF `FunctionTool` with the same name, description and JSON schema."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Sequence
from typing import Any

from agent_framework import (
    BaseChatClient,
    ChatMiddlewareLayer,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    FunctionInvocationContext,
    FunctionInvocationLayer,
    FunctionTool,
    Message,
    ResponseStream,
    UsageDetails,
)
from agent_framework.observability import ChatTelemetryLayer
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    message_chunk_to_message,
)
from langchain_core.tools import BaseTool
from langchain_core.utils.function_calling import convert_to_openai_tool

from shared_tools import guards
from shared_tools.history import among_other_conversations
from shared_tools.replies import JoinedPieces, checked_reply
from shared_tools.steps import CallTools, classify, was_cut

log = logging.getLogger(__name__)


class LangChainChatClient(FunctionInvocationLayer, ChatMiddlewareLayer, ChatTelemetryLayer, BaseChatClient):
    """A MAF chat client over any langchain-core chat model with `bind_tools`.

    MAF's ``tool_choice="none"`` (its forced last call at a limit) is passed on to `bind_tools`; a model that
    ignores it (the scripted one does) may still ask for tools, and MAF then drops those calls itself.
    """

    OTEL_PROVIDER_NAME = "langchain"

    def __init__(self, model: BaseChatModel, **kwargs: Any) -> None:
        """`kwargs` go to MAF's layers: `function_invocation_configuration`, `middleware`."""
        super().__init__(**kwargs)
        self.chat_model = model
        """The langchain-core model (`model` is MAF's name for a model id, which the agent copies into its options)."""
        self.among_other_conversations = False
        """True under a `MafSession`: its system message is marked as one conversation among the customer's others
        (`history.among_other_conversations`), so a provider's call_0 gets an id of its own in the store."""

    def _inner_get_response(
        self, *, messages: Sequence[Message], stream: bool, options: dict[str, Any], **kwargs: Any
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        # Not a coroutine: MAF's layers expect a stream at once when `stream` is set.
        history = to_langchain(messages)
        if instructions := options.get("instructions"):
            # MAF passes the agent's instructions as an option, not as a message: the system message, first.
            history = [SystemMessage(str(instructions)), *history]
            if self.among_other_conversations:
                history = among_other_conversations(history, str(instructions))
        bound: Any = self.chat_model
        tools = [tool_schema(tool) for tool in options.get("tools") or []]
        if tools:
            choice = options.get("tool_choice")
            bound = self.chat_model.bind_tools(tools, tool_choice=choice if isinstance(choice, str) else None)
        if stream:
            return ResponseStream(self._stream(bound, history), finalizer=ChatResponse.from_updates)
        return self._whole(bound, history)

    async def _whole(self, bound: Any, history: list[BaseMessage]) -> ChatResponse:
        return reply_response(await bound.ainvoke(history), history)

    async def _stream(self, bound: Any, history: list[BaseMessage]) -> AsyncIterator[ChatResponseUpdate]:
        """The reply as MAF updates: the plan and text pieces as they arrive; the tool calls, merged from their
        chunks, and the usage in one last update (nothing can run on half a call's arguments)."""
        chunks: list[BaseMessage] = []
        # MAF joins the pieces into the answer itself: an emoji split across two chunks is joined here first.
        plans, texts = JoinedPieces(), JoinedPieces()
        async for chunk in bound.astream(history):
            chunks.append(chunk)
            contents = []
            plan = chunk.additional_kwargs.get("reasoning_content")
            if isinstance(plan, str) and (plan := plans.piece(plan)):
                contents.append(Content.from_text_reasoning(text=plan))
            if text := texts.piece(str(chunk.text)):
                contents.append(Content.from_text(text))
            if contents:
                yield ChatResponseUpdate(role="assistant", contents=contents)
        rest = [Content.from_text_reasoning(text=plan)] if (plan := plans.rest()) else []
        rest += [Content.from_text(text)] if (text := texts.rest()) else []
        if rest:
            yield ChatResponseUpdate(role="assistant", contents=rest)
        reply = merge_chunks(chunks)
        calls = [c for c in reply_message(reply, history).contents if c.type == "function_call"]
        usage = usage_of(reply)
        last = [*calls, *([Content.from_usage(usage)] if usage else [])]
        yield ChatResponseUpdate(
            role="assistant",
            contents=last,
            model=_model_name(reply),
            finish_reason=finish_reason(reply),
            raw_representation=reply,  # the whole reply, for `kept_reply`
        )


def merge_chunks(chunks: Sequence[BaseMessage]) -> AIMessage:
    """The streamed chunks as the one reply `ainvoke` would have given (a model that cannot stream sends one)."""
    if len(chunks) == 1 and isinstance(chunks[0], AIMessage) and not isinstance(chunks[0], AIMessageChunk):
        return chunks[0]
    if not chunks or not all(isinstance(chunk, AIMessageChunk) for chunk in chunks):
        raise TypeError(f"the model streamed {[type(chunk).__name__ for chunk in chunks[:3]]}, expected chunks")
    first, *rest = chunks
    merged = message_chunk_to_message(first + rest if rest else first)  # type: ignore[operator]
    assert isinstance(merged, AIMessage)
    return merged


# --- tools --------------------------------------------------------------------------------------------------------


def tool_schema(tool: Any) -> dict[str, Any]:
    """A MAF tool as the OpenAI-format definition `bind_tools` takes (a mapping is taken as one already)."""
    if isinstance(tool, FunctionTool):
        return tool.to_json_schema_spec()
    if isinstance(tool, dict):
        return tool
    raise TypeError(f"{type(tool).__name__} is no tool this client can describe to a langchain-core model")


class LangChainTool(FunctionTool):
    """One of our `BaseTool`s as a MAF `FunctionTool`: MAF validates the arguments with the tool's own pydantic
    schema (`tool_call_schema`, which leaves out the injected call id), and the model is shown exactly the JSON
    schema langchain-core shows it, so every contender describes the tool in the same words and tokens."""

    def __init__(self, tool: BaseTool, **kwargs: Any) -> None:
        self.langchain_tool = tool
        self._schema = convert_to_openai_tool(tool)["function"]

        async def run(ctx: FunctionInvocationContext, **arguments: Any) -> str:
            return await run_langchain_tool(tool, ctx, arguments)

        super().__init__(
            name=tool.name,
            description=tool.description,
            func=run,
            input_model=tool.tool_call_schema,
            **kwargs,
        )

    def parameters(self) -> dict[str, Any]:
        parameters: dict[str, Any] = self._schema.get("parameters", {"type": "object", "properties": {}})
        return parameters

    async def invoke(self, *, tool_call_id: str | None = None, **kwargs: Any) -> Any:
        # MAF uses `tool_call_id` only for its `execute_tool` span (`gen_ai.tool.call.id`), which it writes even
        # with content capture off; the id is the model's text, so it is masked as the other contenders mask it.
        # The tool itself reads the id from the invocation's metadata, unmasked (add_to_cart's request key).
        masked = None if tool_call_id is None else guards.mask_pii(tool_call_id)
        return await super().invoke(tool_call_id=masked, **kwargs)


async def run_langchain_tool(tool: BaseTool, ctx: FunctionInvocationContext, arguments: dict[str, Any]) -> str:
    """Run `tool` on the call MAF is invoking; its exceptions go to MAF, which decides what the model reads.

    The call goes in as a langchain `ToolCall`, so `InjectedToolCallId` arguments (add_to_cart's idempotency
    key) get the model's call id, which MAF puts in the invocation's metadata when function middleware runs.
    """
    call_id = ctx.metadata.get("call_id")
    if not isinstance(call_id, str) or not call_id:
        raise RuntimeError(f"{tool.name}: MAF gave no call id (the agent installs function middleware for it)")
    output = await tool.ainvoke(ToolCall(name=tool.name, args=arguments, id=call_id, type="tool_call"))
    text, is_error = guards.output_text(output)
    if is_error:
        raise ToolReportedError(text)
    return text


class ToolReportedError(Exception):
    """A tool returned an error result of its own (a ToolMessage with status "error"): to MAF, a failure."""


def maf_tool(tool: BaseTool, *, needs_approval: bool = False) -> LangChainTool:
    """`tool` for MAF; `needs_approval` makes MAF ask before every call of it (``approval_mode="always_require"``)."""
    return LangChainTool(tool, approval_mode="always_require" if needs_approval else "never_require")


# --- messages -----------------------------------------------------------------------------------------------------


def to_langchain(messages: Sequence[Message]) -> list[BaseMessage]:
    """MAF messages as the langchain-core history a chat model takes.

    An assistant message becomes one `AIMessage` (its text, plan and tool calls; the original reply where MAF
    kept it); a tool message one `ToolMessage` per result, matched by call id, status "error" when MAF recorded
    an exception. Approval requests and answers are MAF's bookkeeping, never sent to a model.
    """
    history: list[BaseMessage] = []
    names: dict[str, str] = {}
    refused = {  # a call the human said no to gets MAF's result with no exception: an error all the same
        c.function_call.call_id
        for m in messages
        for c in m.contents
        if c.type == "function_approval_response" and not c.approved and c.function_call is not None
    }
    for message in messages:
        role = str(message.role)
        if role == "system":
            history.append(SystemMessage(message.text))
        elif role == "user":
            if text := _text_of(message):
                history.append(HumanMessage(text))
        elif role == "assistant":
            reply = _assistant(message)
            if reply is not None:
                names.update({call["id"]: call["name"] for call in reply.tool_calls})
                history.append(reply)
        elif role == "tool":
            for content in message.contents:
                if content.type == "function_result" and content.call_id:
                    history.append(
                        ToolMessage(
                            result_text(content),
                            tool_call_id=content.call_id,
                            name=names.get(content.call_id),
                            status="error"
                            if content.exception is not None or content.call_id in refused
                            else "success",
                        )
                    )
        else:
            raise ValueError(f"a message with role {role!r} has no langchain-core counterpart")
    return history


def _text_of(message: Message) -> str:
    return "".join(c.text or "" for c in message.contents if c.type == "text")


def _assistant(message: Message) -> AIMessage | None:
    calls = [
        ToolCall(name=c.name or "", args=c.parse_arguments() or {}, id=c.call_id, type="tool_call")
        for c in message.contents
        if c.type == "function_call" and c.call_id
    ]
    text = _text_of(message)
    plan = "".join(c.text or "" for c in message.contents if c.type == "text_reasoning")
    if not calls and not text and not plan:
        return None  # only approval bookkeeping
    kwargs = {"reasoning_content": plan} if plan else {}
    return AIMessage(content=text, tool_calls=calls, additional_kwargs=kwargs)


def result_text(content: Content) -> str:
    """A function result as the text the model reads."""
    result = content.result
    if isinstance(result, str):
        return result
    if isinstance(result, list):
        parts = [item.text if isinstance(item, Content) and item.type == "text" else item for item in result]
        if all(isinstance(part, str) for part in parts):
            return "".join(parts)  # type: ignore[arg-type]
        return guards.compact_json([p.to_dict() if isinstance(p, Content) else p for p in parts])
    return "" if result is None else json.dumps(result, default=str)


def reply_message(reply: BaseMessage, history: Sequence[BaseMessage]) -> Message:
    """A langchain-core reply as one MAF assistant message: plan, text, then each tool call with its id.

    A call with no id, or an id an earlier call of the conversation had, gets a fresh one
    (`guards.with_call_ids`): the store takes a call id as an add's request key. MAF runs every call it is
    given, so it is given only the calls `steps.classify` would run, as the other contenders run only those: none
    of an unusable reply (cut off at its length limit, whose last call may be half a call that still parses, or
    with only unparsable calls; the run then stops: `_Run.stop_reason`), and never an unparsable call (which MAF
    would answer and go on). The reply itself is kept as the message's `raw_representation` (which MAF never
    serializes).
    """
    if not isinstance(reply, AIMessage):
        raise TypeError(f"the model returned {type(reply).__name__}, expected AIMessage")
    reply = guards.with_call_ids(checked_reply(reply), history)
    step = classify(reply)
    contents: list[Content] = []
    plan = reply.additional_kwargs.get("reasoning_content")
    if isinstance(plan, str) and plan:
        contents.append(Content.from_text_reasoning(text=plan))
    if text := str(reply.text):
        contents.append(Content.from_text(text))
    for call in step.calls if isinstance(step, CallTools) else ():
        contents.append(Content.from_function_call(call["id"] or "", call["name"], arguments=dict(call["args"])))
    return Message("assistant", contents, raw_representation=reply)


def finish_reason(reply: AIMessage) -> str | None:
    """MAF's finish reason of a reply, for its telemetry: "length" for one cut off at its length limit."""
    return "length" if was_cut(reply) else None


def usage_of(reply: AIMessage) -> UsageDetails | None:
    """The reply's usage in MAF's terms; the total as `guards.usage_tokens` reads it, so budgets agree."""
    usage = reply.usage_metadata
    if not usage:
        return None
    return UsageDetails(
        input_token_count=usage.get("input_tokens"),
        output_token_count=usage.get("output_tokens"),
        total_token_count=guards.usage_tokens(reply),
    )


def reply_response(reply: BaseMessage, history: Sequence[BaseMessage]) -> ChatResponse:
    message = reply_message(reply, history)
    kept: AIMessage = message.raw_representation
    return ChatResponse(
        messages=[message],
        usage_details=usage_of(kept),
        model=_model_name(kept),
        finish_reason=finish_reason(kept),
        raw_representation=kept,  # the whole reply, for `kept_reply`
    )


def kept_reply(response: ChatResponse) -> AIMessage | None:
    """The whole checked reply behind a response of this client (a streamed one: its last update's), with what
    MAF was not given of it: its unparsable calls, whether it was cut."""
    raw = response.raw_representation
    for item in reversed(raw if isinstance(raw, list) else [raw]):
        if isinstance(item, AIMessage):
            return item
    return None


def _model_name(reply: AIMessage) -> str | None:
    name = reply.response_metadata.get("model_name") or reply.response_metadata.get("model")
    return name if isinstance(name, str) else None

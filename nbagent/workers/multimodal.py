"""MultimodalReActAgentWorker: ReAct over a vision model, with the task's images.

The images are in the task's ``extra_state["image_docs"]`` (paths, bytes, URLs, data URLs or
``ImageDocument``); they go with the user's question in the OpenAI vision format
(``{"type": "image_url", "image_url": {"url": ...}}``), local files and bytes as base64
data URLs. ``images_html`` draws them as thumbnails for the HTML views.
"""

from __future__ import annotations

import base64
import html
import os
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from nbagent._compat import warn_callback_manager
from nbagent.images import ImageDocument, to_image_document
from nbagent.llms.base import LLM
from nbagent.messages import ChatMessage, MessageRole, ToolOutput
from nbagent.snapshot import AppendLog
from nbagent.schema import Task, TaskStep, TaskStepOutput
from nbagent.tools import FunctionTool
from nbagent.workers.react.formatter import ReActChatFormatter
from nbagent.workers.react.output_parser import ReActOutputParser
from nbagent.workers.react.worker import ReActAgentWorker

__all__ = [
    "MultimodalReActAgentWorker",
    "ImageDocument",
    "to_image_document",
    "image_parts",
    "tool_output_images",
    "images_html",
    "IMAGE_CONTEXT",
]

IMAGE_CONTEXT = "The user's request comes with one or more images: look at them when you answer."
_THUMB_MAX_BYTES = 2_000_000  # inline thumbnails up to this size; bigger ones get a caption
_THUMB_STYLE = (
    "max-height:96px;max-width:160px;border:1px solid var(--nb-border,#d0d7de);"
    "border-radius:4px;margin:2px 6px 2px 0;vertical-align:top"
)


def tool_output_images(out: ToolOutput) -> list[ImageDocument]:
    """The images a tool returned: its ``raw_output.image_documents()`` (MCP results have it)."""
    get = getattr(out.raw_output, "image_documents", None)
    if not callable(get):
        return []
    return [to_image_document(d) for d in get()]


def image_parts(docs: Iterable[Any], detail: str | None = None) -> list[dict[str, Any]]:
    """The images as OpenAI vision content parts."""
    parts: list[dict[str, Any]] = []
    for doc in docs:
        image: dict[str, Any] = {"url": to_image_document(doc).url()}
        if detail is not None:
            image["detail"] = detail
        parts.append({"type": "image_url", "image_url": image})
    return parts


def images_html(docs: Iterable[Any], *, load_remote: bool = False) -> str:
    """Thumbnails of the images, as an HTML fragment (pure: the same images give the same text).

    Local files and bytes are inlined as data URLs (no external asset); a remote URL is only
    named, unless ``load_remote=True``. An image that cannot be read is named, with the reason.
    """
    items: list[str] = []
    for raw in docs:
        try:
            doc = to_image_document(raw)
            caption = doc.text or os.path.basename(doc.describe()) or doc.describe()
            if doc.is_remote and not load_remote:
                items.append(f'<span class="nb-muted">[image: {html.escape(doc.describe()[:120], quote=True)}]</span>')
                continue
            if doc.is_remote:
                src = doc.describe()
            else:
                data = doc.data() or b""
                if len(data) > _THUMB_MAX_BYTES:
                    items.append(
                        f'<span class="nb-muted">[image: {html.escape(caption[:120], quote=True)}, '
                        f"{len(data) // 1024} KiB, too large to inline]</span>"
                    )
                    continue
                src = f"data:{doc.mimetype(data)};base64,{base64.b64encode(data).decode('ascii')}"
            alt = html.escape(caption[:120], quote=True)
            items.append(
                f'<figure style="display:inline-block;margin:0 6px 0 0">'
                f'<img src="{html.escape(src, quote=True)}" alt="{alt}" title="{alt}" '
                f'referrerpolicy="no-referrer" style="{_THUMB_STYLE}"/>'
                f'<figcaption class="nb-muted" style="font-size:0.85em">{alt}</figcaption></figure>'
            )
        except Exception as err:  # noqa: BLE001 - a view must not raise
            reason = html.escape(f"{type(err).__name__}: {err}"[:200], quote=True)
            items.append(f'<span class="nb-error">[image not shown: {reason}]</span>')
    return f'<div class="nb-images">{"".join(items)}</div>' if items else ""


class MultimodalReActAgentWorker(ReActAgentWorker):
    """The ReAct worker for a vision model: the task's images go with the user's question.

    Create tasks with ``extra_state={"image_docs": [...]}`` (or the runner's
    ``init_task_state_kwargs``). ``image_detail`` ("low", "high", "auto") is passed to the
    model if given. ``generate_chat_message_fn(prompt=, role=, image_documents=, image_detail=)``
    (as in llama-index-core 0.12.52) builds the first user message instead: it must return an
    nbagent ``ChatMessage``.
    """

    def __init__(
        self,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        multi_modal_llm: LLM | None = None,
        max_iterations: int = 10,
        react_chat_formatter: ReActChatFormatter | None = None,
        output_parser: ReActOutputParser | None = None,
        callback_manager: Any = None,
        verbose: bool = False,
        tool_retriever: Any = None,
        generate_chat_message_fn: Callable[..., ChatMessage] | None = None,
        *,
        llm: LLM | None = None,
        image_detail: str | None = None,
        context: str | None = IMAGE_CONTEXT,
        **kwargs: Any,
    ) -> None:
        if multi_modal_llm is not None and llm is not None and multi_modal_llm is not llm:
            raise ValueError("pass the model once: multi_modal_llm=... or llm=..., not both")
        if image_detail is not None and image_detail not in ("low", "high", "auto"):
            raise ValueError(f"image_detail must be 'low', 'high', 'auto' or None, got {image_detail!r}")
        if generate_chat_message_fn is not None and not callable(generate_chat_message_fn):
            raise TypeError(f"generate_chat_message_fn must be callable, got {generate_chat_message_fn!r}")
        if callback_manager is not None:
            warn_callback_manager("MultimodalReActAgentWorker")
        model = multi_modal_llm if multi_modal_llm is not None else llm
        super().__init__(
            tools,
            model,  # type: ignore[arg-type]
            max_iterations=max_iterations,
            verbose=verbose,
            context=context,
            tool_retriever=tool_retriever,
            output_parser=output_parser,
            formatter=react_chat_formatter,
            **kwargs,
        )
        self.image_detail = image_detail
        self.generate_chat_message_fn = generate_chat_message_fn

    @classmethod
    def from_tools(  # type: ignore[override]
        cls,
        tools: Sequence[FunctionTool | Callable[..., Any]] | None = None,
        tool_retriever: Any = None,
        multi_modal_llm: LLM | None = None,
        max_iterations: int = 10,
        react_chat_formatter: ReActChatFormatter | None = None,
        output_parser: ReActOutputParser | None = None,
        callback_manager: Any = None,
        verbose: bool = False,
        **kwargs: Any,
    ) -> MultimodalReActAgentWorker:
        """Build the worker the way the reference API does."""
        return cls(
            tools,
            multi_modal_llm,
            max_iterations=max_iterations,
            react_chat_formatter=react_chat_formatter,
            output_parser=output_parser,
            callback_manager=callback_manager,
            verbose=verbose,
            tool_retriever=tool_retriever,
            **kwargs,
        )

    @property
    def multi_modal_llm(self) -> LLM:
        """The model that reads the images: ``llm`` under the reference's name for it."""
        return self.llm

    def initialize_step(self, task: Task, **kwargs: Any) -> TaskStep:
        """Check and normalise the task's images, then start as the ReAct worker does."""
        if "image_docs" not in task.extra_state:
            raise ValueError(
                "MultimodalReActAgentWorker needs the task's images in extra_state['image_docs']: "
                "runner.create_task(question, extra_state={'image_docs': ['photo.png']}) or "
                "init_task_state_kwargs={'image_docs': [...]} on the runner (paths, bytes, "
                "http(s) URLs or ImageDocument)"
            )
        raw = task.extra_state["image_docs"]
        if isinstance(raw, (str, bytes, os.PathLike, ImageDocument)) or not isinstance(raw, Iterable):
            raise TypeError(
                f"extra_state['image_docs'] must be a list of images, got {type(raw).__name__}; "
                "wrap a single image in a list"
            )
        docs = AppendLog(to_image_document(d) for d in raw)  # an AppendLog snapshots in O(1)
        step = super().initialize_step(task, **kwargs)
        task.extra_state["image_docs"] = docs
        return step

    def _begin(self, step: TaskStep, task: Task, **resume: Any) -> tuple[list[FunctionTool], list[ChatMessage]]:
        """As ReAct; on the first step the user's message also carries the images."""
        first = int(task.extra_state.get("iterations", 0)) == 0
        if first and "image_docs" not in task.extra_state:
            raise ValueError(
                f"task {task.task_id!r} has no extra_state['image_docs']: create it with "
                "runner.create_task(...) so MultimodalReActAgentWorker.initialize_step runs first"
            )
        make = self.generate_chat_message_fn
        parts = image_parts(task.extra_state["image_docs"], self.image_detail) if first and make is None else []
        tools, messages = super()._begin(step, task, **resume)
        if first:
            question = task.scratch_memory.get_all()[0]  # a person's input may follow it
            assert question.role == MessageRole.USER
            # the same message object is in `messages`, and stays in memory with its images
            if make is None:
                question.content = [{"type": "text", "text": question.text}, *parts]
            else:
                made = make(
                    prompt=question.text,
                    role=MessageRole.USER,
                    image_documents=list(task.extra_state["image_docs"]),
                    image_detail=self.image_detail,
                )
                if not isinstance(made, ChatMessage):
                    raise TypeError(
                        f"generate_chat_message_fn must return an nbagent ChatMessage, got {type(made).__name__}"
                    )
                question.content = made.content
        return tools, messages

    async def _finish_step(
        self, text: str, step: TaskStep, task: Task, tools: list[FunctionTool], resumed: Any = None
    ) -> TaskStepOutput:
        """As ReAct; images a tool returned (an MCP tool's, say) go with its observation."""
        out = await super()._finish_step(text, step, task, tools, resumed)
        images = [doc for t in out.tool_outputs or [] for doc in tool_output_images(t)]
        if images and not out.is_last:
            observation = task.extra_state["reasoning_messages"][-1]  # recorded by this step
            observation.content = [
                {"type": "text", "text": observation.text},
                *image_parts(images, self.image_detail),
            ]
        return out

    def __repr__(self) -> str:
        names = [t.name for t in self.tools]
        return (
            f"MultimodalReActAgentWorker(llm={self.llm!r}, tools={names}, "
            f"max_iterations={self.max_iterations})"
        )

"""Small workers used by the runner tests."""

from __future__ import annotations

from typing import Any

from nbagent import AgentChatResponse, ChatMessage, CustomSimpleAgentWorker, MessageRole, Task, ToolOutput


class CountingWorker(CustomSimpleAgentWorker):
    """Counts to ``target``; writes a message and a source per step; can be told to fail."""

    target: int = 3
    fail_on: set[int] = set()

    def _initialize_state(self, task: Task, **kwargs: Any) -> dict[str, Any]:
        return {"count": 0, "seen_inputs": []}

    def _run_step(self, state: dict[str, Any], task: Task, input: str | None = None) -> tuple[AgentChatResponse, bool]:
        state["count"] += 1
        state["seen_inputs"].append(input)
        state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=f"step {state['count']}"))
        state["sources"].append(ToolOutput(content=str(state["count"]), tool_name="count"))
        if state["count"] in self.fail_on:
            raise ValueError(f"boom at {state['count']}")
        done = state["count"] >= self.target
        return AgentChatResponse(response=f"count={state['count']} input={input}"), done

    def _finalize_task(self, state: dict[str, Any], **kwargs: Any) -> None:
        state["finalized"] = True

"""Old path of the ready-made agents (``ReActAgent``, ``FunctionCallingAgent``, ``OpenAIAgent``):
they live beside ``AgentRunner`` in ``nbagent.runner.base``."""

from nbagent.runner.base import FunctionCallingAgent, OldOpenAIAgent, OldReActAgent, OpenAIAgent, ReActAgent

__all__ = ["ReActAgent", "OpenAIAgent", "FunctionCallingAgent", "OldOpenAIAgent", "OldReActAgent"]

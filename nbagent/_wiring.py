"""nbagent's own views and roles, registered when ``nbagent`` is imported.

The table names classes and views by strings only, so nothing here imports a view (or the
class it shows) until an object is displayed: ``import nbagent`` stays light. A module that
moves a class or a view edits its line here; ``tests/test_registry.py`` checks that every
line resolves and that every class with ``_repr_html_`` outside the views has its line.
"""

from __future__ import annotations

from nbagent import registry

__all__ = ["VIEWS", "ROLES", "install"]

_HTML = "nbagent.viz.html"
_WORKFLOW_HTML = "nbagent.viz.workflow_html"

# (class, kind, view): ``kind="html"`` is what the class's ``_repr_html_`` returns; the other
# kinds are what a method of the class returns (``Workflow.draw`` -> "draw").
VIEWS: tuple[tuple[str, str, str], ...] = (
    ("nbagent.schema.Task", "html", f"{_HTML}.task:task_html"),
    ("nbagent.schema.TaskStep", "html", f"{_HTML}.steps:step_html"),
    ("nbagent.schema.TaskStepOutput", "html", f"{_HTML}.steps:step_output_html"),
    ("nbagent.schema.AgentChatResponse", "html", f"{_HTML}.chat:chat_response_html"),
    ("nbagent.messages.ChatMessage", "html", f"{_HTML}.chat:message_html"),
    ("nbagent.messages.ToolOutput", "html", f"{_HTML}.chat:tool_output_html"),
    ("nbagent.memory.ChatMemoryBuffer", "html", f"{_HTML}.chat:memory_html"),
    ("nbagent.tools.FunctionTool", "html", f"{_HTML}.chat:tool_html"),
    ("nbagent.llms.base.LLM", "html", f"{_HTML}.agents:llm_html"),
    ("nbagent.workers.base.BaseAgentWorker", "html", f"{_HTML}.agents:worker_html"),
    ("nbagent.engine.step_engine.StepEngine", "html", f"{_HTML}.agents:runner_html"),  # every runner
    ("nbagent.mcp.client.BasicMCPClient", "html", "nbagent.viz.mcp_html:mcp_client_html"),
    ("nbagent.mcp.tools.McpToolSpec", "html", "nbagent.viz.mcp_html:mcp_tool_spec_html"),
    ("nbagent.costs.TaskCost", "html", f"{_HTML}.costs:task_cost_html"),
    ("nbagent.branches.BranchComparison", "html", f"{_HTML}.branches:comparison_html"),
    ("nbagent.batch.run.BatchRun", "html", "nbagent.viz.batch.summary:batch_summary_html"),
    ("nbagent.batch.run.BatchRun", "summary_html", "nbagent.viz.batch.summary:batch_summary_html"),
    ("nbagent.batch.run.BatchRun", "widget", "nbagent.viz.batch.grid:BatchGrid"),
    ("nbagent.batch.run.BatchRun", "progress", "nbagent.viz.batch.progress:start_progress"),
    ("nbagent.workflow.events.Event", "html", f"{_WORKFLOW_HTML}:event_html"),
    ("nbagent.workflow.agents.BaseWorkflowAgent", "html", f"{_WORKFLOW_HTML}:agent_html"),
    ("nbagent.runner.planner.StructuredPlannerAgent", "html", "nbagent.viz.plan_dot:planner_html"),
    ("nbagent.runner.planner.StructuredPlannerAgent", "draw_plan", "nbagent.viz.plan_dot:draw_plan"),
    ("nbagent.workflow.workflow.Workflow", "html", f"{_WORKFLOW_HTML}:workflow_html"),
    ("nbagent.workflow.workflow.Workflow", "draw", f"{_WORKFLOW_HTML}:draw_workflow"),
    ("nbagent.workflow.workflow.Workflow", "panel", "nbagent.viz.workflow_panel:WorkflowPanel"),
    ("nbagent.workflow.multi_agent.AgentWorkflow", "draw_agents", f"{_WORKFLOW_HTML}:draw_agents"),
    ("nbagent.workflow.handler.WorkflowHandler", "input_box", "nbagent.viz.workflow_live:HumanInputBox"),
    ("nbagent.tracing.tree.SpanTree", "html", "nbagent.viz.trace_html:span_tree_html"),
)

# role -> the class a lower layer creates without importing it
ROLES: dict[str, str] = {
    "agent_runner": "nbagent.runner.base:AgentRunner",  # BaseAgentWorker.as_agent, runner_from_dict
    "prompt_component": "nbagent.query_pipeline.model:PromptComponent",  # PromptTemplate.as_query_component
    "agent_workflow": "nbagent.workflow.multi_agent:AgentWorkflow",  # BaseWorkflowAgent.run
}

_installed = False


def install() -> None:
    """Register the table (once; later registrations by anyone win over it)."""
    global _installed
    if _installed:
        return
    _installed = True
    for target, kind, view in VIEWS:
        registry.register_view(target, view, kind=kind)
    for role, provider in ROLES.items():
        registry.provide(role, provider)

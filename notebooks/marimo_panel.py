import marimo

__generated_with = "0.25.2"
app = marimo.App(width="full", app_title="nbagent control panel in marimo")


@app.cell
def _():
    import marimo as mo

    return (mo,)


@app.cell
def _(mo):
    mo.md(
        """
        # nbagent's control panel in marimo

        marimo runs anywidgets, and nbagent's panel is one: its buttons, the live step graph
        (Graphviz compiled to WebAssembly, shipped in the package), the streamed tokens, the
        step inspector and the transcript all work here as in JupyterLab. The agent below is
        offline: a `ScriptedLLM` plays the model, one reply per step.

        Press **Run step** a few times, then **Undo**: the step you took back stays in the graph,
        dashed. Click a step in the graph (or Tab to it and press Enter) to inspect it; from the
        inspector you can undo back to it or fork from it.
        """
    )
    return


@app.cell
def _():
    import nbagent
    from nbagent import (
        AgentChatResponse,
        AgentRunner,
        ChatMessage,
        CustomSimpleAgentWorker,
        MessageRole,
        ScriptedLLM,
    )

    nbagent.seed_ids(0)

    class FiveStepAgent(CustomSimpleAgentWorker):
        """Asks the (scripted, streaming) model once per step; done after five steps."""

        def _initialize_state(self, task, **kwargs):
            return {"n": 0}

        async def _arun_step(self, state, task, input=None):
            state["n"] += 1
            prompt = input or (task.input if state["n"] == 1 else f"continue (step {state['n']})")
            state["memory"].put(ChatMessage(role=MessageRole.USER, content=prompt))
            text = ""
            async for chunk in self.llm.astream_chat(state["memory"].get_all()):
                text = chunk.message.text
            state["memory"].put(ChatMessage(role=MessageRole.ASSISTANT, content=text))
            return AgentChatResponse(response=text), state["n"] >= 5

        def _finalize_task(self, state, **kwargs):
            pass

    llm = ScriptedLLM(
        [
            "Plan: work out 121 * 3 first, then add 42.",
            "121 * 3 = 363.",
            "363 + 42 = 405.",
            "Check: 405 - 42 = 363 and 363 / 3 = 121.",
            "The answer is 405.",
        ],
        repeat_last=True,
    )
    agent = AgentRunner(FiveStepAgent(llm=llm))
    task = agent.create_task("What is (121 * 3) + 42?")
    return agent, task


@app.cell
def _(agent, mo, task):
    panel = mo.ui.anywidget(agent.panel(task))
    panel
    return (panel,)


@app.cell
def _(mo):
    mo.md(
        """
        ## The workflow panel

        A workflow runs here step by step too: `mo.ui.anywidget(agent.panel())` for a workflow
        agent. Type a message and press **Start**, then **Step** a few times, or **Run to end**:
        the agent's `publish` tool asks you first, and the run waits for your answer in the box.
        """
    )
    return


@app.cell
def _(mo):
    from nbagent import FunctionLLM, tool_call
    from nbagent.messages import MessageRole as Role
    from nbagent.workflow import Context, FunctionAgent, ask_human

    async def publish(ctx: Context, title: str) -> str:
        """Publish once the person agrees."""
        return f"person said: {await ask_human(ctx, f'Publish {title}?')}"

    def writer_model(messages, tools):
        last = messages[-1]
        if last.role == Role.TOOL:
            return f"Finished; {last.text}"
        return tool_call("publish", title="the note")

    writer = FunctionAgent(name="writer", description="Publishes notes.", tools=[publish],
                           llm=FunctionLLM(writer_model))
    workflow_panel = mo.ui.anywidget(writer.panel())
    workflow_panel
    return (workflow_panel,)


if __name__ == "__main__":
    app.run()

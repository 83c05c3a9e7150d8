// nbagent's panels as one anywidget front end (JupyterLab, Notebook 7, marimo, VS Code, Colab,
// JupyterLite): the agent's control panel (AgentPanel) and the workflow panel (WorkflowPanel)
// share this module, and with it the one copy of Graphviz compiled to WebAssembly. Which one a
// widget is comes down as its `kind` traitlet.

import { renderAgent } from "./agent.js";
import { renderWorkflow } from "./workflow.js";

function render(context) {
  return context.model.get("kind") === "workflow" ? renderWorkflow(context) : renderAgent(context);
}

export default { render };

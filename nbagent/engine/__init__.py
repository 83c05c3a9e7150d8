"""The step engine: tasks and their state, the one transactional step path, undo, held steps
and approvals. It emits events and imports nothing above it (no store, costs, views or
runners); ``nbagent.runner`` builds the runners people use on top of it."""

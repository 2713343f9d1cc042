"""What both agents share, and what they run against.

At the top, the agent contract both loops implement: `results` (limits, options, stop reasons, trace events,
the result), `steps` (the three shapes of a model reply), `guards` (the texts and checks every guard uses) and
`sync` (driving an async agent from sync code). Below it, two parts neither loop imports: `bookstore` (the
store, its tools, faults, the approval rule) and `models` (the scripted model and its personas, Ollama, the
OpenAI-compatible and the bundled local model). The harness that runs both agents is the top-level `comparison`.
"""

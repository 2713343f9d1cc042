"""What both agents share, and what they run against.

The agent contract: `results` (limits, options, stop reasons, trace events, the result), `steps`, `guards`, `sync`
and `history`. Beside it, two parts neither loop imports: `bookstore` (the store, its tools, faults, the approval
rule) and `models` (scripted, Ollama, OpenAI-compatible, the bundled local model).
"""

"""Agent frameworks beside our own agents, one file each: the bridge from any langchain-core chat model to the
framework's model seam, the bridge over our tools, and a contender with the shared `run(...) -> AgentResult`.

Each file imports only `shared_tools` and its own framework; the framework runs the loop and its own guards.
"""

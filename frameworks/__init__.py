"""Agent frameworks as contenders, one file each: the bridge (model seam, tools) and its `ContenderSpec`
(`shared_tools.contender`), declared in pyproject.toml's "agent_loop_compare.contenders" entry points.

An agent floor like `handwritten/`: each file imports only `shared_tools` and its own framework, never another
file here, another agent or the harness (the import contracts in pyproject.toml).
"""

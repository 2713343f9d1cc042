"""LangGraph and LangChain as shipped, the control group: nothing of ours is added to what they do.

`defaults.py` is the task as LangGraph's prebuilt pieces run it (`ToolNode`, `tools_condition`, the recursion
limit); `create_agent.py` is LangChain's `create_agent` with its built-in middleware; `thread.py` is the
checkpointer thread both run on for a conversation; `reporting.py` is how both report a call and a stop.
"""

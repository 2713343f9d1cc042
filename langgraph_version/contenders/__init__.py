"""The three LangGraph contenders' declarations (`shared_tools.contender.ContenderSpec`), one module each: our
guarded graph (`langgraph`), LangGraph's defaults (`langgraph_defaults`) and `create_agent` (`create_agent`).
Cheap to import: each builds its agent, and imports LangGraph, only when asked to."""

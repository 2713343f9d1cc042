"""Agent frameworks driven through one file each: the bridge from a langchain-core chat model to the framework's
model seam, the bridge over our tools, and a contender running the framework's own loop behind `AgentOptions`."""

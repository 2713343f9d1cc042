"""The bookstore the agent works for: the store, its five tools, opt-in faults and the approval rule.

`BookStore` is the single source of truth (SQLite, in memory or a file); `make_tools(store)` gives the five
LangChain tools the model may call (search, stock, order status, cart view, add to cart); `Faults` injects
timeouts, failures and latency for the reliability scenarios; `RiskyWritePolicy` says which cart writes a
human must approve. Neither agent imports this package: they take any tools and any approval rule.
"""

from shared_tools.bookstore.approval import RiskyWritePolicy
from shared_tools.bookstore.faults import Faults
from shared_tools.bookstore.store import BookStore, StoreError, money
from shared_tools.bookstore.tools import TOOL_NAMES, make_tools

__all__ = ["TOOL_NAMES", "BookStore", "Faults", "RiskyWritePolicy", "StoreError", "make_tools", "money"]

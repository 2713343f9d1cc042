"""`compare.py serve`: a live page with the agents side by side (see `webdemo.server`)."""

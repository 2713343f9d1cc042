"""The test suite: behaviour tests written once and run on every implementation, with real parts."""

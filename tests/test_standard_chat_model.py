"""langchain-tests' standard unit tests for `ScriptedChatModel`, so it behaves like any other LangChain chat model.

The capability properties say what the scripted model really does. It binds tools (`has_tool_calling`),
but ignores `tool_choice` as ChatOllama does, has no structured-output mode (its replies come from persona
scripts, not from a schema), and reports usage on every reply. The suite's unit tests construct the
model and bind tools; none of them invoke it with a generic prompt, so no special persona is needed here.
"""

from __future__ import annotations

from typing import Any

import pytest
from langchain_tests.unit_tests import ChatModelUnitTests
from pytest_benchmark.fixture import BenchmarkFixture

from shared_tools.models import ScriptedChatModel


@pytest.fixture
def benchmark(benchmark: BenchmarkFixture) -> BenchmarkFixture:
    """The suite's `test_init_time` runs its body once here: timings belong in benchmarks/, not in the test run."""
    benchmark.disabled = True
    return benchmark


class TestScriptedChatModelStandard(ChatModelUnitTests):
    @property
    def chat_model_class(self) -> type[ScriptedChatModel]:
        return ScriptedChatModel

    @property
    def chat_model_params(self) -> dict[str, Any]:
        return {"model": "scripted", "persona": "shopper"}

    @property
    def standard_chat_model_params(self) -> dict[str, Any]:
        # The unit suite adds api_key="test" for hosted providers. A local script has no key, and the model
        # forbids unknown fields on purpose (a misspelled `persona` must fail), so the key is left out.
        params = dict(super().standard_chat_model_params)
        params.pop("api_key", None)
        return params

    @property
    def has_tool_calling(self) -> bool:
        return True

    @property
    def has_tool_choice(self) -> bool:
        return False  # accepted by bind_tools and ignored, like ChatOllama

    @property
    def has_structured_output(self) -> bool:
        return False

    @property
    def returns_usage_metadata(self) -> bool:
        return True

    @property
    def supports_model_override(self) -> bool:
        return False  # a per-call `model=` does not change a script

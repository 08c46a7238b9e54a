"""Importing the extra: cheap without side effects, and a clear error without LiteLLM."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dex_agents_ray

REPO_ROOT = Path(dex_agents_ray.__file__).resolve().parent.parent


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("LITELLM_")}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_missing_extra_raises_import_error_naming_it() -> None:
    # None in sys.modules makes the import fail as it does without the package.
    result = run_python(
        "import sys\nsys.modules['litellm'] = None\nimport dex_agents_ray.litellm\n"
    )

    assert result.returncode != 0
    assert (
        'ImportError: dex_agents_ray.litellm needs LiteLLM: pip install "dex-agents-ray[litellm]"'
        in result.stderr
    )
    assert "ModuleNotFoundError: import of litellm halted" in result.stderr
    assert "The above exception was the direct cause" in result.stderr


def test_import_and_construction_do_not_load_litellm() -> None:
    result = run_python(
        "import os, sys\n"
        "from dex_agents_ray.builtin_loop import ModelSettings\n"
        "from dex_agents_ray.litellm import LiteLLMModelClient\n"
        "client = LiteLLMModelClient('anthropic/claude-sonnet-4-5')\n"
        "client.supports_forced_tool_choice(ModelSettings(reasoning_effort='low'))\n"
        "repr(client)\n"
        "print('litellm' in sys.modules, 'openai' in sys.modules,"
        " os.environ.get('LITELLM_LOCAL_MODEL_COST_MAP'))\n"
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "None"]


def test_exports() -> None:
    import dex_agents_ray.litellm as package

    assert package.__all__ == [
        "ESTIMATED_IMAGE_INPUT_TOKENS",
        "TOOL_RESULT_IMAGES_OMITTED_TEXT",
        "TOOL_RESULT_IMAGES_TEXT",
        "ApiKeyProvider",
        "LiteLLMApi",
        "LiteLLMModelClient",
        "LiteLLMRoute",
    ]
    for name in package.__all__:
        assert hasattr(package, name), name

"""The engine's bridge to the dex SDK: invoking handlers, codecs, stored values.

Every use of the SDK's private names (imports, attributes, subclasses) is in
this package (``tests/test_structure.py`` and ``tests/test_layering.py`` keep
the rest of the project off them), and importing it first checks that the
installed SDK is the release they were written for, so another release fails
at once with both versions named instead of somewhere inside a run. It imports
nothing of the engine but the front's vocabulary (errors, options, clock).
"""

from dex_agents_ray.engine.sdk._version import check_sdk_version, installed_sdk_version

check_sdk_version(installed_sdk_version())

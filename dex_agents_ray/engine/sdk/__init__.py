"""The engine's bridge to the dex SDK: invoking handlers, codecs, stored values.

Every use of the SDK's private names (imports, attributes, subclasses) is in
this package, and ``_sdk`` checks at import that the installed SDK is the
version they were written for. It imports nothing of the engine but the
front's vocabulary (errors, options, clock).
"""

"""One run in memory: its state, the driver that runs its Steps and commits
their results, attempts (in the host, on executors or as Ray tasks), waits,
decisions and Streams.

It knows the actors above it only through small Protocols (``_attempts.AttemptPool``).
"""

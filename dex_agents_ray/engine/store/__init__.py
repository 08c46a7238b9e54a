"""Where runs live: the ``FlowStore`` Protocol, its SQLite and PostgreSQL backends.

``_store`` holds the Protocol (one role Protocol per concern: definitions, runs,
passivation, the clock, Streams) and the configs, ``_records`` the rows every
layer reads, ``_open.open_store`` picks the backend a config names. Each backend
is one database object (``_sqlite_db``, ``_postgres_db``: the connection, its
thread, retries) shared by one object per role.
"""

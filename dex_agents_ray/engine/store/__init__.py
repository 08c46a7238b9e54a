"""Where runs live: the ``FlowStore`` Protocol, its SQLite and PostgreSQL backends.

``_store`` holds the Protocol and the configs, ``_records`` the rows every layer
reads, ``_open.open_store`` picks the backend a config names.
"""

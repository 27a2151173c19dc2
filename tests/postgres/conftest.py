"""The PostgreSQL fixtures (``pg_server``, ``pg_url``, ``pg_empty_url``) live in
``tests/pg_server.py`` and are registered by ``tests/conftest.py`` for every test folder."""

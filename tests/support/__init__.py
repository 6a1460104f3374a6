"""What the tests share, none of it a test: claims, decisions and key states (`builders`),
hypothesis strategies (`strategies`), the journal's format written out (`journal`), settled
conflicts (`settlements`), task-store steps (`store_steps`), Avro bodies (`avro`), single records
through a processor (`pipeline`), and stand-ins for what the arbiter sends through (`fakes`).

Test modules import from here or take a conftest's fixtures, never import each other. The
integration tests' own support is tests/stream/support.py (and tests/stream/browser.py).
"""

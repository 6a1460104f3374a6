"""What the tests share, none of it a test: claims, decisions and key states (`builders`),
hypothesis strategies (`strategies`), the journal's format written out (`journal`), settled
conflicts (`settlements`), task-store steps (`store_steps`), Avro bodies (`avro`), single records
through a processor (`pipeline`), stand-ins for what the arbiter sends through (`fakes`), what
importing some modules loads in a fresh interpreter (`import_probe`), and the runner of the
docs' code blocks (`snippets`).

Test modules import from here or take a conftest's fixtures, never import each other. Support
for one group of tests only sits beside them: the broker tests' in tests/stream/support.py and
browser.py, the deployment checks' in tests/ops/promql.py and kustomize.py.
"""

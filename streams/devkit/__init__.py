"""The dev kit: what develops, demonstrates and measures claimstream, never what a worker runs.

Brokers started from Maven jars or Tansu, the `dev` bundle and its demo scenarios, generated
claims, the benchmark and a small schema-registry server. Nothing outside this package imports it
except the CLI's dev commands (lazily) and the tests; tests/devkit/test_boundary.py holds the line.
"""

"""The pure core: contracts, policy, normalization and arbitration.

Nothing under this package performs I/O beyond reading a policy file, and nothing imports
faust, aiokafka, fastavro or prometheus_client; a test enforces it.
"""

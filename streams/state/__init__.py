"""Where a worker keeps its keys' state: a task's store, its backing key store, the local
checkpoints that let a restart read only the changelog's tail, and the restore that reads it.

- `cache`: `StateCache`, the decoded states of recently used keys, shared by a worker's tasks.
- `keystore`: the `KeyStore` interface a task's encoded states and timers live behind, and
  `MemoryKeyStore` (the default: nothing survives the process).
- `rocks`: `RocksKeyStore`, the same on local disk (`store: rocksdb://`).
- `task`: `TaskStore`, one task's keys as the arbiter sees them: decoded through the cache,
  journaled per batch, written to the key store once the changelog holds them.
- `local`: where each task's store lives on disk, and its checkpoint file.
- `restore`: `ChangelogReader`, a task's changelog partition read into its store, from the
  offset its checkpoint names to the partition's end.

The arbiter's tasks (`streams.arbiter.tasks`) open, restore (through `restore`) and close these;
the loop reads and writes through `TaskStore`.
"""

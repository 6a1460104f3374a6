"""The audit export: everything believed as of an instant, from a cut of the input topics,
replayed with no worker, written as Parquet (or JSON Lines) with a signed manifest, and verified.

- `cut`: the cut, a vector of offsets per input partition, and its snapshot token.
- `buckets`: the cut's records spilled to disk by family of spellings, for bounded memory.
- `replaying`: one bucket replayed as the workers decided it, and its rows.
- `files`: the tables' writers, Parquet in row groups or JSON Lines.
- `manifest`: `manifest.json`, its Ed25519 signature and the checks of an export's files.
- `export`: `audit export`, reading the cut and writing the tables and manifest.
- `verify`: `audit verify`, with `--replay` exported again from the token and compared.
"""

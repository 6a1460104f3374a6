"""The `claimstream` command line, the outermost layer: it may import every other one.

- `main`: the argument table (`build_parser`) and the dispatch (`main`, the console script).
- `commands`: one handler per subcommand.
- `agents`: the agents' subcommands, `mcp` and `get`.
- `aliases`: `alias add|remove|list|history`, the subject aliases on their topic.
- `audit`: `audit export|verify|keygen`, everything believed as of an instant, provably.
- `erase`: `erase SUBJECT|approve|status|keygen`, a data subject's data erased on request.
- `review`: the stewards' work, `review approve|reject|send-back|take|release|hand|queue|show`.
- `dead_letters`: `replay-dead-letters`, refused records sent back to their topics.
- `signing`: a steward's signature on what `resolve`, `alias` and `policy publish` send, its
  key checked first.
- `bench`: the options of `bench` (its handler is `main`'s, which alone names the dev kit).

`python -m streams.cli` runs it as the console script does.
"""

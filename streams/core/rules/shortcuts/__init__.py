"""The rules table's shortcuts: second encodings of `engine.RULES` for the common cases, held
equal to it.

Where it sits: beside the table (`engine.py`, its vocabulary in `rulebook.py`), which stays the
specification; each shortcut decides a case faster, and only as the table would:
- fused: the whole table in one pass for a key whose claims are all plain (`engine.arbitrate`
  hands such keys here).
- incremental: one more claim placed into the key's last arbitration without running the rules
  (a key's transitions try it first for a new claim; `Arbitration.place` applies it).
tests/core/rules/test_shortcuts.py holds them equal to the table over generated keys
(scripts/test.sh runs it again with ten times the examples): a change to the rules that a shortcut
does not follow fails there. The fused pass also names the rows it encodes, checked against the
table at import.
"""

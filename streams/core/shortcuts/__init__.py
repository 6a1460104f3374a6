"""The rules table's shortcuts: second encodings of `engine.RULES` for the common cases, held
equal to it.

Where it sits: beside the table (`engine.py`, its vocabulary in `rulebook.py`), which stays the
specification; each shortcut decides a case faster, and only as the table would:
- fused: the whole table in one pass for a key whose claims are all plain (`engine.arbitrate`
  hands such keys here).
- incremental: one more claim placed into the key's last arbitration without running the rules
  (keystate tries it first for a new claim; `Arbitration.place` applies it).
tests/core/test_fused.py and tests/core/test_properties.py hold them equal to the table over
generated keys: a change to the rules that a shortcut does not follow fails there.
"""

"""Decisions read back, never changed.

- explain: a decision in words.
- asof: what a key decided at an instant.
- replay: decisions rebuilt from recorded inputs, with the clock through the timers.
- audit_rows: what keys believed at a cut, their evidence, statements and policies, as rows.
- policy_preview: what keys would decide were a policy put in force now, beside what they
  decide now; preview_report: what such a preview says, per key and field, merged and printed.
- alias_preview: what an alias change would move where and which decisions it would flip, were
  it to take effect now.
"""

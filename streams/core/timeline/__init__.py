"""Time and what changes over it: the clock, the policies in force, the subject aliases, the
erasures.

- timers: the transitions time alone makes, fired in order up to an instant.
- rollout: the policies in force over time, and a key moved through them.
- policy_history: that history as JSON lines.
- aliases: the subject aliases in force over time (chains resolved, cycles refused), where a
  key's evidence belongs once one takes effect or is retracted, and that history as JSON lines;
  alias_review: which changes count, where the policy asks stewards to approve them.
- erasures: the data subjects erased from an instant on, reviewed as alias changes are, the
  spellings each covers, and the decision an erased key sends.
"""

"""Time and the policies in force over it.

- timers: the transitions time alone makes, fired in order up to an instant.
- rollout: the policies in force over time, and a key moved through them.
- policy_history: that history as JSON lines.
"""

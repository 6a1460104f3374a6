"""What a decision is made of and what it says.

- agreement: how admitted claims agree (the same value, the same lineage).
- side_records: the evidence and the events a decision is built with.
- arbitration: the decision record and its deterministic id.
- summary: the decisions a key keeps of its history.
"""

"""The pipeline: what the worker does with one input record, without Faust.

`Processor.process` turns one `Incoming` record into the state to store and the records to send
(`Handled`). Anything it cannot accept becomes a dead letter carrying the original key, value and
headers plus the reason; a failure while processing a valid record is retried, then dead-lettered.
Nothing is silently skipped, and the worker never stops on bad input.

The rooms, in the order a record goes through them:
- `records`: `Incoming`, `Outgoing`, `Handled`, the shapes in and out;
- `processor`: `Processor`, retry and dispatch by kind (claim, resolution, timer tick, evidence
  an alias moved), decoding, admission and the key's transition;
- `key_clock`: the key brought to a record's instant first (its timers, the policies and the
  subject aliases that took effect since, each at its own instant), and the key a record about
  a subject counts on as the aliases change;
- `authentication`: the declared source proven by principal topic and/or signature;
  `principal_topics`, the per-principal input topics;
- `rekey`: the key's partition (`partition_of`) and the hop through the rekeyed topic when a
  record landed elsewhere; the `claimstream.*` record headers;
- `alias_records`: an alias change as a record of the aliases topic;
- `outputs`: decision, escalation and outcome records, and dead letters.

This package's face is what the arbiter drives: `Processor`, the three record shapes, and
`TaskCorrupted`, a record that failed after changing its key's state (the task is reloaded).
"""

from streams.pipeline.processor import Processor, TaskCorrupted
from streams.pipeline.records import Handled, Incoming, Outgoing

__all__ = ["Handled", "Incoming", "Outgoing", "Processor", "TaskCorrupted"]

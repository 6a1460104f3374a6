"""The hot path: a batched aiokafka loop that owns the arbiter's partitions, key state and commits.

Faust's per-event machinery costs about 30 µs per record before any work is done, and one table
write sends one changelog record. Measured before the arbiter was written (2026-11-29, a 2-core
machine, faust-streaming 0.15.3, one worker, 100k claims over 10k keys), an agent doing Avro
decode, a table update and one output per input reached 2.3k records/s with Faust's defaults and
3.6k with its best settings (uvloop, direct producer sends, larger batches). So the arbiter works
like a Kafka Streams task set instead, and Faust keeps the rest (aliases, outcome windows, web,
lifecycle):

- **Tasks.** Every input topic is keyed by `subject|field` with one partition count, so partition
  `p` of every input topic holds the same keys. Task `p` owns those partitions and the state of
  their keys: a dict in memory, journaled to partition `p` of a compacted changelog topic. A range
  assignment hands partition `p` of every topic to one worker, and also tells every worker which
  worker's web API serves each partition.
- **Batches.** Fetch many records; run each through `Processor` against its task's state; then
  send the outputs plus one changelog record per changed key, and commit the input offsets only
  once all of that is acknowledged (at least once: the changelog only once the outputs are, one
  changelog send at a time carrying every batch ready by then, and the loop goes on deciding
  while up to eight batches' acknowledgements are on their way; the settled batches' offsets are
  committed together, at most every `commit_interval_s`), or
  inside the same Kafka transaction (exactly once, one transactional producer per task, so a
  task's new owner fences the old one).
- **Rebalances.** A revoked task stops before its partitions move (the batch in flight finishes
  and commits first). The assignment callback only records the new partitions and pauses them:
  aiokafka heartbeats only once that callback returns, so a callback that restores state would
  outlast the rebalance timeout and get the member evicted (two members can evict each other in
  a loop). Restoring runs as its own task instead, all new partitions at once, and each resumes
  as soon as its changelog partition is read to its end offset. A task assigned again catches up
  from the changelog offset it last saw instead of reloading everything. A revocation cancels a
  restore under way. A batch that fails to commit rewinds: its tasks (while revoking, only those
  that stay here) reload from the changelog and re-read from the last committed offsets.

The rooms, in the order a batch flows through them (every module of the package). Imports
point one way: `loop` imports every other room but `changelog`; `bookkeeping` imports `commit`,
`routing`, `schedule`, `sources` and `tallies`; `commit` imports `tasks`, `changelog` and
`collector`; `isolation` imports `commit` and `tasks`; `changelog` and `tallies` import
`collector`; `routing` imports `tasks` and `schedule`; `tasks` imports `schedule`; `schedule`
imports `sweep`; `pacing` imports none; nothing imports `loop`.

- `loop`: `Arbiter`, the service: fetch, run each record through `Processor`, apply, commit,
  repair what failed, tick; and, from the consumer's listener, revoke and assign.
- `bookkeeping`: `Bookkeeping`, what the loop does with each handled record before its batch is
  committed: the key's state into its task's store, its timer into the schedule, its settled
  conflicts into the source ledgers, its records into the batch, its decisions counted and shown
  to the console's observers.
- `tasks`: `Task` (a task's store and producer), `InputPositions` (the group consumer's
  positions, pauses, seeks, offset commits), `Tasks` (open and standby tasks: restore from the
  changelog off the rebalance callback, install, reload, close).
- `schedule`: `Schedule`, the keys due a tick and the open conflicts (a punctuation queue).
- `sweep`: `RolloutSweep`, the owned keys still on a policy other than the one in force, walked
  and sent a tick each (the schedule holds it).
- `pacing`: `Pacing`, how many ticks a turn starts (the due timers' and the sweep's), each a
  share of the loop's time priced at what records and ticks cost.
- `collector`: `RecordCollector`, records to producer batches per partition, and their acks.
- `isolation`: `Isolation`, a task whose commit the broker refuses for good read one record at a
  time, committed alone, until the refused record is found (and dead-lettered when read again).
- `commit`: the guarantee as a strategy, chosen once (`commits_for`): `AtLeastOnce` (a window of
  batches in flight) or `ExactlyOnce` (a transaction per task). Both return what failed
  (`Failed`: tasks to rewind, tasks fenced) for the loop to repair, rather than calling back into
  it.
- `changelog`: `ChangelogWriter`, at least once: one changelog send at a time, each carrying the
  batches whose outputs are acknowledged by then.
- `tallies`: `Tallies`, the decisions' outcome counts, summed over batches and sent once a second.
- `routing`: `RoutingAssignor` (range assignment sharing web URLs) and `Ownership`, the query
  face the console, web API and health use (owner of a key, its state, open keys, peers, open
  tasks, the decisions feed).
- `sources`: `SourceLedgers`, the source ledgers: the claims of each settled conflict judged
  against the settled value, kept as a task-level record of the task's store (journaled with its
  batches), merged over tasks and peers for `GET /api/sources`.
"""

"""The worker: one process that runs the pipeline, the arbiter and the web views on Faust.

- `app`: the one module that wires topics, tables, agents, the arbiter and the web views.
- `runtime`: starting a worker (and the command line's publish and tail).
- `topics`: the pipeline's topics, created before a worker starts.
- `retention`: what each topic keeps, and for how long.
- `size_check`: whether the topics the worker sends its largest records to take them.
- `policy_log`: the cluster's policy history on the policy topic: read before a worker decides,
  followed after, published to by `claimstream policy publish` and by a worker's new policy file.
- `alias_log`: the cluster's alias history on the aliases topic: read before a worker decides,
  followed after, published to by `claimstream alias`.
- `erasure_log`: the cluster's erasure requests on the erasures topic: read before a worker
  decides, followed after, published to by `claimstream erase`.
- `history_follower`: how a worker follows a history topic (aliases, erasures) as it grows.
- `erasure_receipts`: an erasure's subject keys destroyed, and its receipt on the receipts topic.
"""

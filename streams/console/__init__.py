"""The steward console and the JSON API behind it, served by every worker's web server.

The rooms, in the order a request goes through them: `web` (Faust's web server: pages, security
headers, lifecycle hooks, a view per path), `api` (the handlers and their `ROUTES` table),
`writes` (the stewards' statements, one or many, refused here where the key's owner would),
`forward` (a key's request relayed to its owner, or fanned out to every peer, over one HTTP
session), `queue` (the open-conflicts queue across workers), `cluster_preview` (a policy previewed
against every worker's keys), `cluster_alias_preview` (an alias change previewed against the
keys it touches, read from their owners), `erasures` (what an erased subject's reads answer,
the erasures listed, a steward's erasure request or approval), `live` (server-sent decisions),
`stewards` (who may write: steward tokens bound to their names), `static/` (the pages).
"""

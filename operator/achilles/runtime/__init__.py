"""The operator's generic machinery, as controller-runtime and client-go have theirs:
nothing here knows an Agent, a run, kopf or the database.

- `workqueue`: a keyed workqueue (the newest item of a key wins, one thread per key)
  and the worker loop that drains it;
- `retries`: failed handlings retried per object with exponential backoff;
- `wake`: a level-triggered wake-up one part sets and a loop waits on;
- `loops`: named loop threads started and stopped together, and each loop's passes
  timed, counted and reported for the liveness probe;
- `memory`: the garbage collector's settings and the heaps' free pages given back.

`achilles.handlers` (the operator's kopf handlers and controllers) builds on it; the
import contracts (pyproject.toml) keep it from importing any layer of the product.
"""

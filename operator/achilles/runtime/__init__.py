"""The operator's generic machinery, as controller-runtime and client-go have theirs:
nothing here knows an Agent, a run, kopf or the database.

- `manager`: the controllers declared with their sources, queue and reconcile, their
  signals routed to their wakes, their loops started and stopped together, a loop's
  failed pass retried after its backoff (`LoopHandle.drive`, the one place);
- `workqueue`: a keyed workqueue (the newest item of a key wins, one thread per key, a
  failed key re-added after its backoff) and the worker loop that drains it;
- `synced`: sources whose first listing must be handled before another part starts
  (client-go's `WaitForCacheSync`);
- `backoff`: the exponential backoff of a failed key (1 s doubling to 60 s) or of a
  loop's failed pass (its controller's);
- `wake`: a level-triggered wake-up one part sets and a loop waits on, and the routes
  from signals to wakes;
- `loops`: named loop threads started and stopped together, and each loop's passes
  timed, counted and reported for the liveness probe;
- `memory`: the garbage collector's settings and the heaps' free pages given back.

`achilles.handlers` (the operator's controllers and its kopf activities) builds on it; the
import contracts (pyproject.toml) keep it from importing any layer of the product.
"""

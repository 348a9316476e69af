"""The operator's controllers beside kopf: one module per loop, each on a reconciler that
holds exactly the handles it uses (handlers/manager.py builds it from the process's
`RuntimeContext`) and the `LoopHandle` the manager gives it.

    kopf (event loop)                    loop threads (handlers/manager.py)
    ---------------------------          -----------------------------------------------
    Agent events: settled at once        agents-0..3   Agent workqueue -> reconciles
      from memory, or put on the         catalogue-0..1 catalogue workqueue -> mirrors
      Agent workqueue                    listener      NOTIFY -> signals
    AgentModel / AgentTool /             scheduler     slots -> queued runs
      AgentPlatform events: put on       dispatcher    queued runs -> Jobs
      the catalogue workqueue            pod-watch     pod outcomes -> journal
    (a failed reconcile: the queue's     job-watch     Job outcomes -> journal
      rate-limited re-add)               sweeper       reaper, pending pods, owners,
                                                       reply wakes, orphans, ...
                                         status        journal -> Agent status
                                         notifier      outbox -> webhook

The workqueues' threads are bound in manager.py to handlers/agents.py and
handlers/catalogue.py; every other loop is a module here. docs/architecture.md draws the
whole and says where state lives.
"""

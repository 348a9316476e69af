"""The operator's controllers beside kopf: one module per loop, sharing a `RuntimeContext`.

    kopf (event loop + workers)          loop threads (handlers/manager.py)
    ---------------------------          -----------------------------------------------
    Agent / AgentModel / AgentTool /     agents-0..3   Agent workqueue -> reconciles
    AgentPlatform events                 listener      NOTIFY -> wakes
      -> a service reconciles            scheduler     slots -> queued runs
      -> the handler applies it          dispatcher    queued runs -> Jobs
      (an Agent's, unless settled at     pod-watch     pod outcomes -> journal
      once: onto the workqueue)          job-watch     Job outcomes -> journal
      (failures: handlers/retries.py)    sweeper       reaper, pending pods, retries,
                                                       owners, reply wakes, orphans
                                         status        journal -> Agent status

The Agent workqueue's threads are bound in manager.py to handlers/agents.py; every other
loop is a module here. docs/architecture.md draws the whole and says where state lives.
"""

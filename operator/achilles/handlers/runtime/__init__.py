"""The operator's runtime beside kopf: one module per loop, sharing a `RuntimeContext`.

    kopf (event loop + workers)          runtime threads (runtime.py)
    ---------------------------          -----------------------------------------------
    Agent / AgentModel / AgentTool /     listener      NOTIFY -> wakes
    AgentPlatform events                 scheduler     slots -> queued runs
      -> a service reconciles            dispatcher    queued runs -> Jobs
      -> the handler applies it          pod-watch     pod outcomes -> journal
      (failures: retries.py)             job-watch     Job outcomes -> journal
                                         sweeper       reaper, pending pods, retries,
                                                       owners, reply wakes, orphans
                                         status        journal -> Agent status

docs/architecture.md draws the whole and says where state lives.
"""

"""The operator's manager: every controller declared with its sources, its queue and its
reconcile, as kueue's cmd/kueue/main.go sets up its reconcilers on controller-runtime's
manager (`SetupWithManager(...).For(...).Watches(...)`). docs/architecture.md shows this
table row for row (tests/unit/test_manager_table.py holds them to each other).

Each kind of ours has its list+watch here, a thread each (`agentmodel-watch`,
`agenttool-watch`, `agentplatform-watch`, catalogue_watch.py; `agent-watch`, agents.py, which
lists once the catalogue's first listings are mirrored): kopf's per-object machinery was
most of a restart's CPU, for handlers that used none of it, and kopf cannot say when a
kind's listing is done. What a watch cannot settle at once goes to a workqueue whose
threads run here (`agents-N`, `catalogue-N`), and a failed reconcile is the queue's
rate-limited re-add. What is not about one object runs here too, one thread per loop,
each in its own module under controllers/. kopf runs the start-up (operator.py), the
clean-up and the probe. Who wakes whom is the `On` sources below and nothing else: a
part emits what happened (handlers/signals.py), the manager routes it to the loops that
declared it. Every loop is safe with two replicas because the database decides (row
locks, SKIP LOCKED, the dispatch advisory lock, the one-active-run and request-key
indexes).
"""

from __future__ import annotations

from collections.abc import Callable

from achilles.handlers import agents, catalogue, catalogue_watch
from achilles.handlers.agent_queue import QueuedAgent
from achilles.handlers.catalogue_queue import CATALOGUE_KINDS, QueuedCatalogue
from achilles.handlers.context import RuntimeContext
from achilles.handlers.controllers import (
    dispatcher,
    listener,
    notifier,
    scheduler,
    status_writer,
    sweeper,
    watchers,
)
from achilles.handlers.signals import Happened
from achilles.k8s.resources.kinds import CustomResourceKind
from achilles.runtime.backoff import Backoff
from achilles.runtime.manager import (
    Channel,
    Controller,
    ListWatch,
    LoopHandle,
    Manager,
    On,
    Requeue,
    Stream,
    Timer,
)
from achilles.runtime.workqueue import process

SHUTDOWN_SECONDS = 5.0

Declared = Controller[RuntimeContext, Happened]


def agent_worker(context: RuntimeContext, loop: LoopHandle) -> None:
    """One of the Agent workqueue's threads: each takes an Agent's newest waiting event
    and reconciles it (`agents.handle_queued`, which logs and re-adds a failure), one
    thread per Agent at a time, on `agents.AgentReconciler` (its own handles, built by
    `agents.reconciler_of`, which the agent watch uses too). Events still waiting when
    the operator stops are not lost: the next start lists every Agent again."""
    reconciler = agents.reconciler_of(context)

    def handle(queued: QueuedAgent) -> None:
        agents.handle_queued(reconciler, queued)

    process(reconciler.queue, handle, loop.stop, agents.TAKE_SECONDS)


def agent_watch_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    agents.run_watch(agents.watch_of(context), loop)


def catalogue_watch_loop(kind: CustomResourceKind) -> Callable[[RuntimeContext, LoopHandle], None]:
    """The loop of one catalogue kind's list+watch (`catalogue_watch.follow_catalogue`)."""

    def loop(context: RuntimeContext, handle: LoopHandle) -> None:
        catalogue_watch.run_watch(catalogue_watch.watch_of(context, kind), handle)

    return loop


def catalogue_watch_of(kind: CustomResourceKind) -> Declared:
    return Controller(
        f"{kind.singular}-watch",
        sources=(ListWatch(kind.kind),),
        queue="none: each event put on the catalogue workqueue; the first listing"
        " mirrored before the watch goes on",
        reconcile="catalogue_watch.follow_catalogue",
        run=catalogue_watch_loop(kind),
        joined=False,
        retry=watchers.RETRY,
    )


def catalogue_of(context: RuntimeContext) -> catalogue.CatalogueReconciler:
    """The catalogue's reconciler on what it uses: the database, the API server, the
    runs' namespace (the MCP sources' Secrets), its workqueue, the Agent workqueue (the
    Agents a model or tool changed) and the signals it emits (the platform changed)."""
    return catalogue.CatalogueReconciler(
        context.database,
        context.resources,
        context.config.job_template.namespace,
        context.catalogue_queue,
        context.agent_queue,
        context.wakes.emit,
    )


def catalogue_worker(context: RuntimeContext, loop: LoopHandle) -> None:
    """One of the catalogue workqueue's threads: an AgentModel's, AgentTool's or
    AgentPlatform's newest waiting event mirrored (`catalogue.handle_queued`, which logs
    and re-adds a failure), one thread per object at a time."""
    reconciler = catalogue_of(context)

    def handle(queued: QueuedCatalogue) -> None:
        catalogue.handle_queued(reconciler, queued)

    process(reconciler.queue, handle, loop.stop, catalogue.TAKE_SECONDS)


def notifier_of(context: RuntimeContext) -> notifier.Notifier:
    """The notifier on what it uses: the outbox's database, the API server (the signing
    Secret, the dead notifications' Events) and the runs' namespace, where the Secret is."""
    return notifier.Notifier(
        context.database, context.resources, context.config.job_template.namespace
    )


def notifier_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    notifier.run(notifier_of(context), loop)


def listener_of(context: RuntimeContext) -> listener.Listener:
    """The listener on what it uses: the journal's database (its URL), the signals it
    emits and the status marks."""
    return listener.Listener(context.database, context.wakes.emit, context.marks)


def listener_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    listener.run(listener_of(context), loop)


def scheduler_of(context: RuntimeContext) -> scheduler.Scheduler:
    """The scheduler on what it uses: the journal's database, the API server, the spans,
    the signals it emits (runs to dispatch) and the status marks."""
    return scheduler.Scheduler(
        context.database, context.resources, context.spans, context.wakes.emit, context.marks
    )


def scheduler_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    scheduler.run(scheduler_of(context), loop)


def dispatcher_of(context: RuntimeContext) -> dispatcher.Dispatcher:
    """The dispatcher on what it uses: the journal's database, the Jobs client and
    template, the API server, the spans, the pod watcher's view of the runs' pods, the
    status marks, and `dispatch_idle`, which the status writer waits on."""
    return dispatcher.Dispatcher(
        context.database,
        context.jobs,
        context.config.job_template,
        context.resources,
        context.spans,
        context.run_objects.pod_run_ids,
        context.marks,
        context.dispatch_idle,
    )


def dispatcher_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    dispatcher.run(dispatcher_of(context), loop)


def watchers_of(context: RuntimeContext) -> watchers.Watchers:
    """The pod and Job watchers on what they use: the run objects they fold into, the
    database, the API server and the status marks (a failed run's Event and status),
    and the signals they emit (a pod gone)."""
    return watchers.Watchers(
        context.run_objects, context.database, context.resources, context.marks, context.wakes.emit
    )


def pod_watch_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    watchers.run_pods(watchers_of(context), loop)


def job_watch_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    watchers.run_jobs(watchers_of(context), loop)


def sweeper_of(context: RuntimeContext) -> sweeper.Sweeper:
    """The sweeper on what its passes use: the database, the Jobs client, the API server,
    the watchers' run objects, the Agent workqueue, the catalogue workqueue (the MCP
    sources listed again), the status marks, the signals it emits, the reaper's threshold
    and the MCP listings' period."""
    config = context.config
    return sweeper.Sweeper(
        context.database,
        context.jobs,
        context.resources,
        context.run_objects,
        context.agent_queue,
        context.catalogue_queue,
        context.marks,
        context.wakes.emit,
        config.stale_after,
        config.mcp_relist_every,
    )


def sweeper_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    sweeper.run(sweeper_of(context), loop, sweeper.wakes(context.wakes))


def status_writer_of(context: RuntimeContext) -> status_writer.StatusWriter:
    """The status writer on what it uses: the journal's database, the API server, the
    status queue and the statuses written (the context's in-memory state, which the
    other parts mark), and the dispatcher's `dispatch_idle`, which it waits on."""
    return status_writer.StatusWriter(
        context.database,
        context.resources,
        context.statuses,
        context.written_statuses,
        context.dispatch_idle,
    )


def status_loop(context: RuntimeContext, loop: LoopHandle) -> None:
    status_writer.run(status_writer_of(context), loop)


CONTROLLERS: tuple[Declared, ...] = (
    *(catalogue_watch_of(kind) for kind in CATALOGUE_KINDS),
    Controller(
        "agent-watch",
        sources=(ListWatch("Agent"),),
        queue="none: each event settled at once (the operator's own status, a listed Agent"
        " that agrees) or put on the Agent workqueue; listed once the catalogue's first"
        " listings are mirrored",
        reconcile="agents.follow_agents",
        run=agent_watch_loop,
        joined=False,
        retry=watchers.RETRY,
    ),
    Controller(
        "agents",
        sources=(
            Stream("Agent", via="agent-watch"),
            Requeue("catalogue, sweeper: an AgentModel or AgentTool came or went"),
        ),
        queue="Agent workqueue keyed by uid, newest event wins; a failure re-added"
        " rate-limited, 1 s doubling to 60 s (runtime/workqueue.py)",
        reconcile="agents.handle_queued",
        run=agent_worker,
        threads=agents.THREADS,
        retry=None,
    ),
    Controller(
        "catalogue",
        sources=(
            *(Stream(kind.kind, via=f"{kind.singular}-watch") for kind in CATALOGUE_KINDS),
            Requeue("sweeper: each MCP AgentTool to list again (its MCP listings pass)"),
        ),
        queue="catalogue workqueue keyed by kind and name, newest event wins (a waiting"
        " relist stays asked); a failure re-added rate-limited, 1 s doubling to 60 s"
        " (runtime/workqueue.py)",
        reconcile="catalogue.handle_queued",
        run=catalogue_worker,
        threads=catalogue.THREADS,
        retry=None,
    ),
    Controller(
        listener.NAME,
        sources=tuple(Channel(channel) for channel in listener.CHANNELS),
        queue="none: each NOTIFY emitted as its signal",
        reconcile="listener.Listener.on_notify",
        run=listener_loop,
        retry=listener.RETRY,
    ),
    Controller(
        scheduler.NAME,
        sources=(
            On(Happened.SLOTS_MOVED),
            On(Happened.PLATFORM_CHANGED),
            On(Happened.RECONNECTED),
            Timer(scheduler.SCHEDULER_MAX_SLEEP, "sooner at the nearest slot"),
        ),
        queue="agents due in the journal (next_run_at, SKIP LOCKED)",
        reconcile="scheduler.Scheduler.schedule_once",
        run=scheduler_loop,
        pace=scheduler.SCHEDULER_PACE,
    ),
    Controller(
        dispatcher.NAME,
        sources=(
            On(Happened.RUNS_CHANGED),
            On(Happened.DISPATCHABLE),
            On(Happened.PLATFORM_CHANGED),
            On(Happened.RECONNECTED),
            Timer(dispatcher.DISPATCH_TICK, "at once while a pass leaves more waiting"),
        ),
        queue="queued runs in the journal, FIFO under the cap (dispatch lock)",
        reconcile="dispatcher.Dispatcher.dispatch_once",
        run=dispatcher_loop,
        retry=Backoff(1.0, dispatcher.MAX_BACKOFF),
    ),
    Controller(
        "pod-watch",
        sources=(ListWatch("Pod"),),
        queue="none: each watch event folded in (services/run_objects.py)",
        reconcile="watchers.Watchers.follow_pods",
        run=pod_watch_loop,
        joined=False,
        retry=watchers.RETRY,
    ),
    Controller(
        "job-watch",
        sources=(ListWatch("Job"),),
        queue="none: each watch event folded in (services/run_objects.py)",
        reconcile="watchers.Watchers.follow_jobs",
        run=job_watch_loop,
        joined=False,
        retry=watchers.RETRY,
    ),
    Controller(
        sweeper.NAME,
        sources=(
            Timer(sweeper.SWEEP_TICK, "each pass at its own period"),
            On(Happened.OWNER_DEACTIVATED, part="owners"),
            On(Happened.RECONNECTED, part="owners"),
            On(Happened.RUNS_CHANGED, part="budget-warnings"),
            On(Happened.RECONNECTED, part="budget-warnings"),
        ),
        queue="none: each pass derives its work from the rows",
        reconcile="sweeper.tick (the passes of sweeper.Sweeper.periods)",
        run=sweeper_loop,
    ),
    Controller(
        status_writer.NAME,
        sources=(
            On(Happened.STATUS_MOVED),
            Timer(status_writer.TICK, "waits while the dispatcher makes Jobs"),
        ),
        queue="the status queue: Agents marked dirty, owners' siblings in turns",
        reconcile="status_writer.StatusWriter.write_dirty_statuses",
        run=status_loop,
    ),
    Controller(
        notifier.NAME,
        sources=(
            On(Happened.NOTIFICATION_WRITTEN),
            On(Happened.RECONNECTED),
            Timer(notifier.NOTIFIER_TICK, "sooner at the earliest retry"),
        ),
        queue="the outbox's due rows",
        reconcile="notifier.Notifier.deliver_once",
        run=notifier_loop,
    ),
)


class Runtime:
    """The controllers of one operator process, on one `RuntimeContext`."""

    def __init__(self, context: RuntimeContext) -> None:
        self.context = context
        self.manager = Manager(CONTROLLERS, context, context.wakes, context.stop, context.passes)

    def start(self) -> None:
        self.manager.start()

    def shutdown(self) -> None:
        """Let the loops finish the pass they are in (a pass is one short transaction),
        within SHUTDOWN_SECONDS in all; the threads are daemons and end with the process."""
        self.manager.shutdown(SHUTDOWN_SECONDS)

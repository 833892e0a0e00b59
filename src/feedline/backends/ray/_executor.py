"""The Ray backend: the per-sample work runs in Ray actors, on any node of a cluster.

The training process stays the consumer (index lists, tasks, order); only
`run_task` moves, into actors (`_actor.RayWorker`). The protocol, in short
(the full story is in docs/architecture.md, "Protocols"):
- Start: the running Ray instance, or ``fl.Ray(address=...)``, or a local
  one (logged); the part goes once into the object store; only actors that
  answered ``ready`` get tasks.
- Work: one actor call per task, late binding (`TaskPool`); batches are
  read-only object-store views owned by the consumer. Besides the window's
  count, the bytes of batches in the object store are bounded
  (`_budget.ByteBudget`), so a slow trainer never makes Ray spill.
- Room: an actor needs its resources free; with none free for the first
  one, start fails within seconds with what holds them (`_room`). With the
  worker count unset, actors are added when a node joins (the cluster's
  CPUs grow), checked at each epoch's start and every few seconds.
- Cancel: each actor holding calls of the generation is told (a call in
  a concurrency group of its own, beside the running task); its running
  call stops at its next sample, queued ones before their first, and
  their empty results are dropped.
- Death: an actor-death error; finished results are kept, the first
  unfinished call counts an attempt, the rest go to a replacement. A task
  blamed ``MAX_ATTEMPTS - 1`` times runs isolated, one sample per call, so
  the sample that kills actors is named. Ray never restarts actors itself.
- Shutdown: ``ray.kill`` every actor and wait (bounded) until Ray reports
  them dead; a Ray instance is never shut down by feedline.
"""

from __future__ import annotations

import collections
import itertools
import logging
import os
import time
import uuid

from ..._errors import FeedlineError, WorkerError
from ..._optional import require
from ...worker import Result, TaskError
from .._base import Event, Executor, PartNotPicklable
from .._pool import MAX_ATTEMPTS, TaskPool
from ._actor import CONTROL, RayWorker, dumps_part
from ._budget import DEFAULT_SHARE, ByteBudget
from ._room import DEFAULT_START_TIMEOUT, forget, register, request_of, wait_for_room

__all__ = ["RayExecutor", "connect", "import_ray", "plan_actors"]

START_TIMEOUT = 120.0  # seconds without any ready actor (while work waits) before giving up
CLOSE_TIMEOUT = 5.0  # seconds close() waits for Ray to report the actors dead
GROW_INTERVAL = 2.0  # seconds between looks for free CPUs to add actors on (worker count unset)
DEFAULT_NUM_CPUS = 1  # one core per actor: an actor runs one task at a time (Ray's actor default, 0, would pack any number on a node)
_log = logging.getLogger("feedline")
_READY = object()
_ids = itertools.count()


def import_ray():
    """Import Ray, or raise an ImportError that says how to install it."""
    return require("ray", "ray", "backend='ray'")


def connect(address: str | None) -> str:
    """Make sure this process is connected to Ray; return a note on how.

    Uses the running instance if ``ray.init()`` was already called (it stays
    the user's), else ``ray.init(address=address)`` (``"auto"``, a head node's
    ``host:6379``, or ``RAY_ADDRESS``), else starts a local instance without
    the dashboard, which Ray shuts down when the interpreter exits.
    """
    ray = import_ray()
    if ray.is_initialized():
        note = "the running Ray instance"
        if address is not None:
            note += f" (ray.init() was already called, so fl.Ray(address={address!r}) is not used)"
        return note
    if address is not None or os.environ.get("RAY_ADDRESS"):
        target = address or os.environ["RAY_ADDRESS"]
        try:
            ray.init(address=address)
        except ConnectionError as e:
            raise FeedlineError(
                f"backend='ray' could not connect to the Ray cluster at {target!r}: {e}. Start one with "
                "'ray start --head' (then fl.Ray(address='auto') on that machine), or leave the address unset "
                "for a local instance"
            ) from e
        return f"the Ray cluster at {target!r}"
    # "local": a new instance, even where an earlier `ray start` or a killed run left its address in Ray's temp folder.
    ray.init(address="local", include_dashboard=False)
    cpus = ray.cluster_resources().get("CPU", 0)
    _log.warning(
        "feedline started a local Ray instance for backend='ray' (ray.init(address='local', include_dashboard=False), "
        "%g CPUs); Ray shuts it down when this interpreter exits. Call ray.init() yourself, or pass "
        "backend=fl.Ray(address='auto'), to use a cluster.", cpus,
    )
    return "a local Ray instance started by feedline"


def plan_actors(workers: int | None, options: dict, address: str | None) -> tuple[int, str]:
    """Connect, and choose the number of actors: one per ``num_cpus`` of the cluster by default."""
    note = connect(address)
    ray = import_ray()
    cpus = ray.cluster_resources().get("CPU", 0.0)
    nodes = sum(1 for node in ray.nodes() if node.get("Alive"))
    per = options.get("num_cpus", DEFAULT_NUM_CPUS)
    if workers is None:
        workers = max(1, int(cpus // per)) if per else max(1, int(cpus))
        how = "one actor per"
    else:
        how = "workers set by map();"
    why = f"Ray actors on {note}, {cpus:g} CPUs on {nodes} node{'s' if nodes != 1 else ''}: {workers} actors ({how} num_cpus={per:g})"
    if per * workers > cpus:
        why += f"; only {int(cpus // per) if per else workers} fit now, the rest start when the cluster has room"
    largest = _largest_node(ray)
    wanted = {"CPU": per, "GPU": options.get("num_gpus", 0), "memory": options.get("memory", 0)}
    short = [f"{key}={need:g} (largest node: {largest.get(key, 0):g})" for key, need in wanted.items() if need > largest.get(key, 0)]
    if short:
        _log.warning(
            "feedline: each Ray actor asks for %s, which no node of the cluster has; the actors wait "
            "until such a node joins (WorkerError after fl.Ray(start_timeout=...), default %g s). Lower the "
            "fl.Ray(...) resources or add nodes.",
            ", ".join(short), DEFAULT_START_TIMEOUT,
        )
    return workers, why


def _largest_node(ray) -> dict:
    """The most of each resource that one live node of the cluster has."""
    largest: dict = {}
    for node in ray.nodes():
        if node.get("Alive"):
            for key, amount in node.get("Resources", {}).items():
                largest[key] = max(largest.get(key, 0), amount)
    return largest


class _Actor:
    __slots__ = ("handle", "host", "id", "isolating", "node", "offset", "outstanding", "pid", "position", "ready", "started")

    def __init__(self, aid, position, handle):
        self.id, self.position, self.handle = aid, position, handle
        self.ready = False
        self.pid = self.host = self.node = None
        self.offset = 0.0  # add to the actor's perf_counter to get the consumer's
        self.outstanding: collections.OrderedDict = collections.OrderedDict()  # call key -> _Call
        self.isolating = False  # running an isolated task's calls, and nothing else
        self.started = time.monotonic()


class _Call(collections.namedtuple("_Call", "key task ref probe")):
    """One actor call: a task (``probe`` None) or one sample of it (``probe`` = position)."""


class RayExecutor(Executor):
    """Runs tasks on Ray actors; see the module docstring for the protocol."""

    name = "ray"

    def __init__(self, part, workers: int | None, settings=None):
        options = settings.actor_options() if settings is not None else {}  # None: Ray chosen by feedline, defaults
        self.grows = workers is None  # one actor per CPU: more when the cluster gains CPUs
        workers, self.note = plan_actors(workers, options, settings.address if settings is not None else None)  # connects to Ray
        ray = self.ray = import_ray()
        self.cluster_cpus = ray.cluster_resources().get("CPU", 0.0)  # the actors were planned for this many (see _grow)
        self.cores = max(1, int(self.cluster_cpus))  # the report's "cores available" is the cluster's
        self.workers = workers
        self.stream_workers = workers  # a stream shard's actor is ``affinity % this``, fixed even if the pool grows
        self.closing = False
        self.tasks = TaskPool()  # backlog, late binding, attempts, cancelled generations
        self.describe_index = part.source.where
        self.isolate: dict = {}  # task key -> next sample position to probe (see "Death")
        self.refs: dict = {}  # object ref -> (actor, call key or _READY)
        self.restarts = 0
        self.start_failures = 0
        self.pool: list[_Actor | None] = [None] * workers
        self.death_errors = (
            ray.exceptions.RayActorError, ray.exceptions.ObjectLostError, ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError, ray.exceptions.OutOfMemoryError, ray.exceptions.LocalRayletDiedError,
        )
        self.fatal_start_errors = (ray.exceptions.RuntimeEnvSetupError, ray.exceptions.ActorUnschedulableError)
        self.node = ray.get_runtime_context().get_node_id()
        self.clock = time.time() - time.perf_counter()
        self.session = uuid.uuid4().hex[:8]
        self.actor_class = ray.remote(concurrency_groups={CONTROL: 1})(RayWorker)  # `cancel` beside the running task
        self.actor_options = {
            "num_cpus": DEFAULT_NUM_CPUS, **(options or {}),
            "max_restarts": 0, "max_task_retries": 0, "max_concurrency": 1,  # see the module docstring
        }
        self.request = request_of(self.actor_options)
        if not _in_placement_group(ray, self.actor_options):  # a placement group's bundles hold the room, not the free pool
            wait_for_room(ray, self.request, DEFAULT_START_TIMEOUT if settings is None or settings.start_timeout is None else settings.start_timeout)
        limit = settings.max_bytes_in_flight if settings is not None else None
        self.budget = ByteBudget(limit or DEFAULT_SHARE * _object_store_bytes(ray, self.node))
        self.generation = None  # of the last task submitted
        self.starving = False  # set only while wait() dispatches with no result to return
        self.next_grow = time.monotonic() + GROW_INTERVAL
        try:
            shipped = dumps_part(part, ray.ObjectRef)
        except Exception as e:  # the runtime names the function that cannot travel
            raise PartNotPicklable(str(e)) from e
        self.part_ref = ray.put(shipped)
        register(self)
        for position in range(workers):
            self._spawn(position)

    # ----------------------------------------------------------------- start
    def _spawn(self, position: int) -> None:
        aid = next(_ids)
        # Named, so ``ray.util.list_named_actors()`` (and the dashboard) show whose actors these are.
        handle = self.actor_class.options(name=self._name(aid), **self.actor_options).remote(self.part_ref)
        actor = _Actor(aid, position, handle)
        self.pool[position] = actor
        self.refs[handle.ready.remote()] = (actor, _READY)

    def _on_ready(self, actor: _Actor, ref) -> None:
        try:
            answer = self.ray.get(ref)
        except self.death_errors + self.fatal_start_errors as e:
            self._on_start_failure(actor, e)
            return
        if answer[0] == "part_error":
            self.close()
            raise WorkerError(
                "a Ray actor could not load the pipeline (its functions are unpickled in the actor's "
                "interpreter, so every module they use must be importable on every node; pass "
                "fl.Ray(runtime_env={...}) to ship code or packages):\n" + answer[1]
            )
        _, actor.pid, actor.host, actor.node, clock = answer
        # Spans are measured with the actor's perf_counter; on another node, map them
        # to ours through the wall clocks (same node: the same monotonic clock).
        actor.offset = 0.0 if actor.node == self.node else clock - self.clock
        actor.ready = True

    def _on_start_failure(self, actor: _Actor, error: Exception) -> None:
        self._forget(actor)
        if self.closing:
            return
        self.start_failures += 1
        if isinstance(error, self.fatal_start_errors) or self.start_failures > MAX_ATTEMPTS * self.workers:
            self.close()
            raise WorkerError(f"Ray actors for backend='ray' keep failing to start: {_short(error)}") from error
        self._spawn(actor.position)

    # ------------------------------------------------------------- dispatch
    def submit(self, key, task, affinity=None):
        if key[0] != self.generation:  # a new epoch: look for room for more actors now
            self.generation, self.next_grow = key[0], 0.0
            self._grow()
        self.tasks.add(key, task, affinity)
        self._dispatch()

    def _dispatch(self) -> None:
        self.tasks.dispatch(self._pick, self._send)

    def _pick(self, key, task, affinity) -> _Actor | None:
        ready = [a for a in self.pool if a is not None and a.ready]
        if not self.budget.admits(sum(len(a.outstanding) for a in ready), len(ready), self.starving):
            return None
        if key in self.isolate:  # an isolated task gets an idle actor to itself
            return next((a for a in self.pool if a is not None and a.ready and not a.outstanding), None)
        if affinity is not None:
            actor = self.pool[affinity % self.stream_workers]
            return actor if actor is not None and actor.ready and not actor.isolating else None
        return self.tasks.least_loaded(self.pool, lambda a: a.ready and not a.isolating, _tasks)

    def _send(self, actor: _Actor, key, task) -> None:
        position = self.isolate.get(key)
        if position is None:
            self._call(actor, key, task, actor.handle.run.remote(task, key[0], (actor.position, self.workers)), None)
            return
        actor.isolating = True
        if position < len(task.indices):  # one sample alone: if it kills the actor, it is the culprit
            self._call(actor, (key, position), task, actor.handle.probe.remote(task, position), position)
        else:
            self._call(actor, key, task, actor.handle.run.remote(task, key[0], (actor.position, self.workers)), None)

    def _call(self, actor: _Actor, call_key, task, ref, probe) -> None:
        actor.outstanding[call_key] = _Call(call_key, task, ref, probe)
        self.refs[ref] = (actor, call_key)
        self.budget.note(self._pending())

    def _pending(self) -> int:
        """Calls sent and not yet fetched (their batches are, or will be, in the object store)."""
        return sum(len(a.outstanding) for a in self.pool if a is not None)

    # ------------------------------------------------------------- collect
    def wait(self, timeout):
        events = self.tasks.take_held()
        if events:
            return events
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.refs:
                remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
                step = 1.0 if remaining is None else min(remaining, 1.0)  # wakes up to check start-up
                ready, _ = self.ray.wait(list(self.refs), num_returns=1, timeout=step)
                if ready:
                    ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
                for ref in ready:
                    if ref in self.refs:  # a death handled earlier in this loop may have dropped it
                        events.extend(self._on_ref(ref))
            elif deadline is not None:
                time.sleep(max(0.0, min(0.05, deadline - time.monotonic())))
            self._check_start()
            self._grow()
            events.extend(self.tasks.take_held())
            self.starving = not events  # the consumer waits with nothing in hand: the byte budget lets one task through
            self._dispatch()
            self.starving = False
            if events or (deadline is not None and time.monotonic() >= deadline) or not (self.refs or len(self.tasks)):
                return events

    def _on_ref(self, ref) -> list:
        actor, call_key = self.refs.pop(ref)
        if call_key is _READY:
            self._on_ready(actor, ref)
            return []
        received = time.perf_counter()
        try:
            result = self.ray.get(ref)
        except self.death_errors as e:
            self.refs[ref] = (actor, call_key)  # classified with the actor's other calls
            return self._on_death(actor, e)
        except self.ray.exceptions.RayError as e:  # e.g. the batch could not be pickled back
            call = actor.outstanding[call_key]
            result = _task_error(call.task, f"the Ray actor could not return the task's result: {_short(e)}", e)
        call = actor.outstanding.pop(call_key)
        actor.isolating = False
        if call.probe is not None:  # this sample survived alone: probe the next one
            task_key = call_key[0]
            if task_key in self.isolate and self.tasks.live(task_key):
                self.isolate[task_key] = call.probe + 1
                self.tasks.add(task_key, call.task, first=True)
            return []
        return self._finish(actor, call, result, time.perf_counter() - received)

    def _finish(self, actor: _Actor, call: _Call, result: Result, transport: float) -> list:
        self.tasks.finished(call.key, call.task, result.consumed)
        self.isolate.pop(call.key, None)
        result.worker = actor.position
        result.transport = transport
        if result.payload is not None:
            self.budget.track(result.payload)
            self.budget.note(self._pending())
        if actor.offset:
            result.span = (result.span[0] + actor.offset, result.span[1] + actor.offset)
        if not self.tasks.live(call.key):
            return []
        return [Event(call.key, result)]

    def _check_start(self) -> None:
        if any(a is not None and a.ready for a in self.pool) or not len(self.tasks):
            return
        waiting = [a for a in self.pool if a is not None]
        if waiting and time.monotonic() - min(a.started for a in waiting) > START_TIMEOUT:
            cpus = self.ray.cluster_resources().get("CPU", 0)
            free = self.ray.available_resources().get("CPU", 0)
            self.close()
            raise WorkerError(
                f"no Ray actor for backend='ray' started within {START_TIMEOUT:.0f} s; the cluster has "
                f"{cpus:g} CPUs ({free:g} free). Lower fl.Ray(num_cpus=..., memory=...), free the cluster, or add nodes."
            )

    def _grow(self) -> None:
        """Worker count unset: add actors for the CPUs a node that joined brought, if they are free.

        Only the cluster's growth counts, never CPUs that other work merely
        released: taking those would leave the next pipeline (a validation
        pipeline made each epoch, say) with no room.
        """
        if not self.grows or self.closing or time.monotonic() < self.next_grow:
            return
        self.next_grow = time.monotonic() + GROW_INTERVAL
        if any(a is None or not a.ready for a in self.pool):  # a replacement waits for room: a joining node goes to it first
            return
        per = self.request.get("CPU", 0)
        total = self.ray.cluster_resources().get("CPU", 0.0)
        gained, self.cluster_cpus = total - self.cluster_cpus, total
        if not per or gained < per:
            return
        free = self.ray.available_resources()
        room = min((free.get(key, 0.0) // amount for key, amount in self.request.items()), default=0)
        for _ in range(int(min(room, gained // per))):
            self.pool.append(None)
            self.workers += 1
            self._spawn(len(self.pool) - 1)
        _log.info("feedline: the Ray cluster grew to %g CPUs; %d actors now", total, self.workers)

    # ---------------------------------------------------------------- death
    def _on_death(self, actor: _Actor, error: Exception) -> list:
        if self.pool[actor.position] is not actor:  # already replaced: only drop what it left
            self._forget(actor)
            return []
        if not actor.ready:
            self._on_start_failure(actor, error)
            return []
        events, unfinished, redo = self._finished_before_death(actor)
        self._forget(actor)
        if self.closing:
            return events
        self.restarts += 1
        how = _short(error)
        for call in unfinished:
            key = call.key if call.probe is None else call.key[0]
            if not any(k == key for k, _ in redo):
                redo.append((key, call.task))
        if unfinished:
            redo = self._blame(unfinished[0], redo, how)
        self._spawn(actor.position)
        self.tasks.requeue(redo, actor.position)
        return events

    def _finished_before_death(self, actor: _Actor) -> tuple[list, list, list]:
        """``(events, unfinished, redo)`` of a dead actor's calls: up to the first without a result, what it finished."""
        calls = list(actor.outstanding.values())
        # A dead actor's calls all resolve promptly; results it finished first are kept.
        self.ray.wait([c.ref for c in calls], num_returns=len(calls), timeout=2.0)
        events, unfinished, redo = [], [], []  # redo: (key, task) in submission order, each once
        for call in calls:
            if not unfinished:
                received = time.perf_counter()
                try:
                    result = self.ray.get(call.ref, timeout=0)
                except self.ray.exceptions.RayError:
                    unfinished.append(call)
                    continue
                actor.outstanding.pop(call.key)
                if call.probe is None:
                    events.extend(self._finish(actor, call, result, time.perf_counter() - received))
                elif call.key[0] in self.isolate:  # the probe passed just before the death
                    self.isolate[call.key[0]] = call.probe + 1
                    redo.append((call.key[0], call.task))
            else:
                unfinished.append(call)
        return events, unfinished, redo

    def _blame(self, running: _Call, redo: list, how: str) -> list:
        """The call the actor died in (``running``) counts an attempt: its task fails, runs isolated, or again (``redo``)."""
        key = running.key if running.probe is None else running.key[0]
        attempts = self.tasks.blame(key)
        if key in self.isolate or attempts >= MAX_ATTEMPTS:
            redo = [(k, t) for k, t in redo if k != key]
            if self.tasks.live(key):
                self.tasks.hold([Event(key, self._death_result(running, how))])
            self.tasks.attempts.pop(key, None)
            self.isolate.pop(key, None)
        elif attempts == MAX_ATTEMPTS - 1 and running.task.indices is not None:
            self.isolate[key] = 0 if len(running.task.indices) > 1 else 1  # one sample: the task is its probe
        return redo

    def _death_result(self, running: _Call, how: str) -> Result:
        task = running.task
        if running.probe is not None or (task.indices is not None and len(task.indices) == 1):
            index = int(task.indices[running.probe or 0])
            where = self.describe_index(index)
            sample = f"sample {index}" + (f" ({where})" if where else "")
            cause = "the sample probably crashes the decoder or exhausts memory. Remove or repair it, or run with backend='thread' to see the error in-process"
        else:
            index, where = None, None
            if task.indices is not None:
                shown = ", ".join(str(int(i)) for i in task.indices[:8])
                sample = f"task {task.number} (samples {shown}{', ...' if len(task.indices) > 8 else ''}); each sample alone survived, so the crash is intermittent or needs the whole batch"
            else:
                sample = f"task {task.number} (shard {task.shard} of the generator)"
            cause = "check the actors' logs (printed by Ray, or in /tmp/ray/session_latest/logs)"
        message = f"a Ray actor died {MAX_ATTEMPTS} times on {sample} (last: {how}); {cause}."
        return Result(error=TaskError.crash(message, how, index=index, where=where))

    def _forget(self, actor: _Actor) -> None:
        for call in actor.outstanding.values():
            self.refs.pop(call.ref, None)
        for ref, (owner, _) in list(self.refs.items()):
            if owner is actor:
                del self.refs[ref]
        actor.outstanding.clear()
        if self.pool[actor.position] is actor:
            self.pool[actor.position] = None
        try:
            self.ray.kill(actor.handle, no_restart=True)
        except ValueError:  # not an actor handle any more (Ray already dropped it)
            return

    def set_window_share(self, tasks: int) -> None:
        self.tasks.per_worker = tasks

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until every actor has loaded the pipeline (benchmarks and tests); False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while any(a is not None and not a.ready for a in self.pool):
            starting = [ref for ref, (_, key) in self.refs.items() if key is _READY]
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            done, _ = self.ray.wait(starting, num_returns=len(starting), timeout=remaining)
            for ref in done:
                self._on_ref(ref)
            if deadline is not None and time.monotonic() >= deadline:
                return False
        self._dispatch()
        return True

    # ------------------------------------------------------------- queries
    def outstanding(self):
        return sum(_tasks(a) for a in self.pool if a is not None) + len(self.tasks)

    def cancel(self, generation):
        """Drop ``generation``'s backlog and tell every actor: its calls of that generation stop before their next sample."""
        self.tasks.cancel(generation)
        for actor in self.pool:
            if actor is not None and any(_generation(call) <= generation for call in actor.outstanding.values()):
                actor.handle.cancel.options(concurrency_group=CONTROL).remote(generation)

    def worker_pids(self) -> list[int]:
        """Process ids of the ready actors (on their own nodes)."""
        return [a.pid for a in self.pool if a is not None and a.ready]

    def actor_nodes(self) -> dict[int, str]:
        """Ray node id of each ready actor, by its position in the pool (``Result.worker``, the stats' worker)."""
        return {a.position: a.node for a in self.pool if a is not None and a.ready}

    def live_actors(self) -> int:
        """Actors started and holding their resources on the cluster."""
        return sum(1 for a in self.pool if a is not None and a.ready)

    def actor_names(self) -> list[str]:
        """Ray names of the live actors of this executor."""
        return [self._name(a.id) for a in self.pool if a is not None]

    def _name(self, aid: int) -> str:
        return f"feedline-{os.getpid()}-{self.session}-{aid}"

    # ------------------------------------------------------------- shutdown
    def close(self):
        if self.closing:
            return
        self.closing = True
        forget(self)
        actors = [a for a in self.pool if a is not None]
        if not self.ray.is_initialized():  # Ray already shut down (at exit): its actors went with it
            actors = []
        for actor in actors:
            try:
                self.ray.kill(actor.handle, no_restart=True)
            except ValueError:
                continue
        # Ray reports a killed actor dead to callers; wait (bounded) so close()
        # returns with the actors gone rather than merely doomed.
        pings = [a.handle.ready.remote() for a in actors]
        if pings:
            self.ray.wait(pings, num_returns=len(pings), timeout=CLOSE_TIMEOUT)
        self.pool = [None] * self.workers
        self.refs.clear()
        self.tasks.backlog.clear()
        self.part_ref = None


def _in_placement_group(ray, options: dict) -> bool:
    """Whether the actors go into a placement group (given, or captured from the calling task)."""
    strategy = options.get("scheduling_strategy")
    if strategy is not None and not isinstance(strategy, str):  # e.g. PlacementGroupSchedulingStrategy
        return True
    return ray.util.get_current_placement_group() is not None


def _object_store_bytes(ray, node_id: str) -> float:
    """The object store size of node ``node_id`` (where this process's batches land)."""
    for node in ray.nodes():
        if node.get("NodeID") == node_id and node.get("Alive"):
            return float(node.get("Resources", {}).get("object_store_memory", 0.0)) or float(2 << 30)
    return float(2 << 30)  # not listed (should not happen): 2 GiB, Ray's smallest default store is larger


def _generation(call: _Call) -> int:
    """The generation (epoch iterator) of a call's task."""
    return (call.key if call.probe is None else call.key[0])[0]


def _tasks(actor: _Actor) -> int:
    """Tasks (not probes) outstanding on ``actor``."""
    return sum(1 for call in actor.outstanding.values() if call.probe is None)


def _short(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}{'...' if len(text) > 300 else ''}"


def _task_error(task, message: str, error: BaseException) -> Result:
    index = int(task.indices[0]) if task.indices is not None and len(task.indices) else None
    return Result(error=TaskError(index=index, where=None, stage="worker", type=type(error).__name__, message=message))

"""Handing tasks over from the threads to the process workers during the trial, earliest first, no row lost or run twice.

`Handover` is the part of `feedline.engine._trial.BackendTrial` that
moves tasks between its two executors through the `Executor` capabilities
`take_queued`, `resume(give_back=True)`, `abandon_running` and
`take_returned`:

- Queued thread tasks move at once; running ones are given back at their
  next sample and move when they come back (or after `HANDOVER_WAIT`, when
  a late one moves as it comes back). Tasks submitted for the processes
  meanwhile wait behind them: the given-back ones are the earliest, and the
  workers take tasks in the order sent.
- A task given back with its first rows done keeps them: only the rest
  runs on the processes, and the two parts are joined into the batch one
  task would have made (`_join_partial`).
- A process task that finds no room in shared memory runs on threads,
  which keep the work from then on (`_rerun_without_shared_memory`).

State it owns: `_init_handover`. It moves keys in the trial's ``_owner``
and ``_outstanding`` ledgers, adds what the threads did of a given-back task
to their bound (``_thread_rows``, ``_thread_cpu``), and calls the trial's
`_settle`.
"""

from __future__ import annotations

import dataclasses

from .._errors import SharedMemoryFull
from ..backends import Executor
from ..worker import Result
from ._tail import PiecesDiffer, join
from ._trial_standin import NotStarted

__all__ = ["GIVE_BACK_DONE", "HANDOVER_WAIT", "Handover"]

HANDOVER_WAIT = 0.05  # seconds the queued tasks wait for the paused threads' tasks to come back, so that those go first
GIVE_BACK_DONE = 0.25  # running tasks that cannot be split are given back only with under this share of their samples begun


class Handover:
    """Thread tasks handed over to the process workers (see the module docstring)."""

    def _init_handover(self) -> None:
        self._abandoned = False  # the threads' running tasks were taken back once
        self._handover: list = []  # thread tasks for the processes, sent earliest first with those given back ...
        self._due: set = set()  # ... once the thread tasks with these keys are back (given back, or done) ...
        self._handover_by = 0.0  # ... or by then
        self._held: list = []  # tasks for the processes submitted meanwhile: sent after the handover
        self._partials: dict = {}  # key -> (a thread's result for a task's first rows, their indices, the rest's, the whole task)
        self._sent: dict = {}  # key -> task, for tasks on process workers (`_rerun_without_shared_memory`)

    @property
    def _handing_over(self) -> bool:
        """Thread tasks are on their way to the processes (`_move_returned` sends them, then the held ones)."""
        return bool(self._due or self._handover or self._held)

    def _hand_over_after(self, tasks, due) -> None:
        """``tasks`` go to the processes with the thread tasks ``due`` back, earliest first (`_move_returned`)."""
        self._handover += tasks
        self._due |= set(due)
        self._handover_by = self.clock.perf_counter() + HANDOVER_WAIT
        self._move_returned()

    def _hand_over(self, tasks) -> None:
        """Submit ``(key, task)`` pairs the threads hold no more to the processes, earliest first."""
        for key, task in sorted(tasks, key=lambda pair: pair[0]):
            if self._owner.get(key) is self.threads:  # not cancelled meanwhile
                self._owner[key] = self.processes
                self._outstanding[self.threads] -= 1
                self._outstanding[self.processes] += 1
                self._to_processes(key, task)

    def _to_processes(self, key, task) -> None:
        self._sent[key] = task  # until its result is in: run on threads instead if shared memory is full
        self.processes.submit(key, task)

    def _hand_over_at_start(self, drained: list) -> None:
        """The workers are up: the threads' queued tasks (and ``drained``, kept from them) go to the processes.

        Paused threads give their tasks back, and so do running threads judged
        plainly held back (`Policy.held_share`), for tasks begun under
        `GIVE_BACK_DONE`; a task that can be split (`feedline.worker.splittable`)
        is given back however far along, keeping the rows done (`_join_partial`).
        """
        queued = drained + self.threads.take_queued()
        due = self.threads.resume(give_back=True)  # paused tasks come back: they go first, in key order
        if self._cores_kept is not None and self._cores_kept < self.policy.held_share * self._judged_cores():
            # so do running ones not far along, where the processes will be much faster (plainly held back)
            self._abandoned = True
            due += self.threads.abandon_running(done_under=GIVE_BACK_DONE)
        self._hand_over_after(queued, due)

    def _send_to_processes(self, key, task) -> None:
        """A new task for the processes: behind the earlier tasks the threads give back, if any are due (`_move_returned`)."""
        if self._due:
            self._held.append((key, task))
        else:
            self._to_processes(key, task)

    def _thread_results_in(self, events: list) -> None:
        """Thread tasks due back that finished before their next sample are due no more; what came back moves."""
        self._due.difference_update(event.key for event in events)
        self._move_returned()

    def _cancel_handover(self, generation: int) -> None:
        """Cancelled tasks give no result to wait for, and no part to join."""
        self._due = {key for key in self._due if key[0] != generation}
        self._partials = {key: kept for key, kept in self._partials.items() if key[0] != generation}
        self._sent = {key: task for key, task in self._sent.items() if key[0] != generation}

    def _rerun_without_shared_memory(self, events: list) -> list:
        """Process tasks that found no room in shared memory run on threads, which keep the work from then on.

        Under the automatic choice a full ``/dev/shm`` (and spill folder) is a
        reason to use threads, not an error; with ``backend="process"`` set by
        hand it is `SharedMemoryFull`.
        """
        kept = []
        for event in events:
            task = self._sent.pop(event.key, None)
            error = event.result.error
            if task is None or error is None or error.type != SharedMemoryFull.__name__ or not self._threads_to_take_over():
                kept.append(event)
                continue
            if self.winner != "thread":
                why = (f"process workers cannot hand batches over: {error.message.split('. ')[0]}: threads "
                       "(give the container more shared memory for processes)")
                self._settle("thread", f"{self._verdict_note}; then {why}" if self.winner else why, measured=False)
                self._restart = None  # no trial again (drift, grown threads meeting the GIL): processes cannot run here
            self._owner[event.key] = self.threads
            self._outstanding[self.processes] -= 1
            self._outstanding[self.threads] += 1
            self.threads.submit(event.key, task)
        return kept

    def _threads_to_take_over(self) -> bool:
        """Threads to take the work over: the pool, or one started now (a run started on a remembered process verdict); False: none."""
        if not isinstance(self.threads, NotStarted):
            return True
        if self._restart is None:
            return False
        waiting, self.threads = self.threads, self._restart("thread", self.workers)
        self._outstanding[self.threads] = self._outstanding.pop(waiting)
        self._measure[self.threads] = self._measure.pop(waiting)
        return True

    def _join_partial(self, executor: Executor, key, rest: Result) -> Result | None:
        """The batch of task ``key``: the rows a thread did before giving it back, then ``rest``'s (`_move_returned`).

        Joined as the epoch's last batches are from their pieces
        (`feedline.engine._tail.join`), so the batch is the one a single
        task would have made; where the parts cannot give exactly that,
        the task runs again whole on ``executor`` (the one that ran the
        rest) and this returns None. The result keeps ``rest``'s span,
        worker and CPU (the thread's went to the threads' bound when it
        came back); the stage times are both parts'.
        """
        partial, done, rest_indices, whole = self._partials.pop(key)
        try:
            joined = join([partial, rest], [done, rest_indices])
        except PiecesDiffer:
            self._owner[key] = executor
            self._outstanding[executor] += 1
            if executor is self.processes:
                self._to_processes(key, whole)
            else:
                executor.submit(key, whole)
            return None
        joined.span, joined.worker, joined.cpu, joined.cpu_wait = rest.span, rest.worker, rest.cpu, rest.cpu_wait
        joined.transport = rest.transport
        return joined

    def _move_returned(self) -> None:
        """Tasks the threads gave back run on the processes; what the threads did of them counts for their bound.

        The given-back tasks are held with the queued ones until all are back
        (or `HANDOVER_WAIT` passed), and so are tasks submitted meanwhile: the
        given-back ones are the earliest, and the workers take tasks in the
        order sent.
        """
        for key, returned in self.threads.take_returned():
            self._thread_rows += returned.rows
            self._thread_cpu += returned.cpu
            task = returned.task
            if returned.partial is not None:  # its first rows are done: the rest runs on the processes (`_join_partial`)
                done, rest = task.indices[: returned.rows], task.indices[returned.rows :]
                self._partials[key] = (returned.partial, done, rest, task)
                task = dataclasses.replace(task, indices=rest)
            self._handover.append((key, task))
            self._due.discard(key)
        if self._due and self.clock.perf_counter() >= self._handover_by:
            self._due = set()  # one still running past the deadline is handed over when it comes back
        if self._due or not self._handing_over:
            return
        moving, self._handover = self._handover, []
        self._hand_over(moving)
        held, self._held = self._held, []
        for key, task in held:
            if self._owner.get(key) is self.processes:  # not cancelled meanwhile
                self._to_processes(key, task)

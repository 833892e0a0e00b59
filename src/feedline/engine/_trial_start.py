"""Starting the process workers during the trial: the fork server, held workers, early workers, and the threads meanwhile.

`WorkerStart` is the part of `feedline.engine._trial.BackendTrial` that
starts processes and keeps the threads useful while they come up:

- at the first sign of threads held back by the GIL, the fork server's
  imports start (`_start_server_if_held`) and workers start held
  (`_park_workers`: they connect and wait for the pipeline);
- where the server is up and the sign is borne out, workers start before
  the verdict (`_start_workers_if_held`); a verdict for threads closes them;
- at the verdict (`_start_processes`) the threads judged held back pause
  beyond `_kept_running` (`Executor.pause_beyond`), narrow to
  `_kept_importing` while a zygote imports (`Executor.narrow`), or begin no
  new task (`_drain_threads`: `Executor.take_queued`), and go on again if
  the workers are not up within `EarlyStart.pause_limit` (`Executor.resume`);
- once every worker is up (`_check_ready`), the processes are measured and
  the threads' tasks handed over (`feedline.engine._trial_handover`).

Every question about the fork server (`warm_up`, `warming_up`,
`warmed_up`) is asked here, of the trial's `ForkServer`. State it owns: `_init_start`. It calls the
trial's `_settle` and `_judge_gil`, and the judging's `_first_sign`,
`_keeps_under` and `_judge_anew`.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from ..backends import Executor, warm_up, warmed_up, warming_up
from .choice import Phase

__all__ = ["SERVER_AND_CONSUMER", "ForkServer", "WorkerStart"]

SERVER_AND_CONSUMER = 2  # cores the fork server's imports and the consumer's thread take beside the threads judged


@dataclasses.dataclass(frozen=True)
class ForkServer:
    """The process backend's fork server as the trial asks after it: `feedline.backends`' own, or one a test scripts.

    A trial takes one when it is built (``BackendTrial(fork_server=)``;
    `feedline.testing.trial_fork_server` makes a scripted one).
    """

    warming_up: Callable[[], bool] = warming_up  # its imports run
    warmed_up: Callable[[], bool] = warmed_up  # it is up
    warm_up: Callable[[str], None] = warm_up  # start it, for this backend


class WorkerStart:
    """The process workers' start during the trial, and the threads while they come up (see the module docstring)."""

    def _init_start(self, make_processes, park) -> None:
        self._make_processes = make_processes  # make_processes() starts the process executor (`_start_processes`)
        self._park = park  # park() starts the process workers held (`Executor.release`): see `_park_workers`
        self._parked: Executor | None = None
        self._processes_started = False
        self._server_early = ""  # "importing", then "up": `_start_server_if_held` started the fork server
        self._server_up_at = 0.0  # ... up then
        self._early: Executor | None = None  # process workers started at the first sign of the GIL (`_start_workers_if_held`) ...
        self.early_workers_at: float | None = None  # ... this many seconds into the trial (None: not early)
        self._sign_mark: tuple | None = None  # where the stretch that must bear out the workers' first sign began
        self._drained: list | None = None  # tasks kept from threads while the workers start (`_drain_threads`), else None
        self._paused_at: float | None = None  # when threads were paused for the process workers' start
        self._pause_when_up = False  # ... to be paused once the fork server is up (it was importing: `_start_processes`)
        self._drain_when_up = False  # ... and drained then (its workers waited for a zygote's imports)

    def _check_ready(self) -> None:
        """Judge the GIL while the threads are judged; while the workers start, watch them come up.

        Paused or narrowed threads go on if the workers are not up within
        `EarlyStart.pause_limit`; a failure to start settles on threads with the reason.
        Once every worker is up the processes are measured, and the threads'
        tasks are handed over to them (`_hand_over_at_start`).
        """
        if self.phase is Phase.JUDGING_THREADS:
            self._judge_gil()
        if self.phase is not Phase.STARTING_PROCESSES:
            return
        if self._pause_when_up and not self.fork_server.warming_up() and self.processes.workers_forked():
            self._pause_threads()  # the server is up and the workers forked (`_start_processes`)
            if self._drain_when_up:
                self._drain_when_up = False
                self._drain_threads()
        try:
            ready = self.processes.wait_ready(0)
        except Exception as exc:  # the workers cannot start here: threads it is, and the report says why
            self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads", measured=False)
            return
        if not ready and self._paused_at is not None and self.clock.perf_counter() - self._paused_at > self.policy.start.pause_limit:
            self._paused_at = None
            self.threads.resume()  # the paused threads hold tasks the consumer may be waiting for ...
            self._undrain()  # ... and so may the tasks kept from them
        if ready:
            self.phase = Phase.MEASURING_PROCESSES
            self._paused_at = None
            drained, self._drained = self._drained or [], None
            self._hand_over_at_start(drained)  # (`feedline.engine._trial_handover`)

    def _room_beside_server(self) -> bool:
        """The fork server importing beside the threads judged takes a core none of them needs (`SERVER_AND_CONSUMER`)."""
        return self.cores - self.threads.workers >= SERVER_AND_CONSUMER

    def _beside_start(self, now: float) -> bool | None:
        """What the workers' start does beside the threads judged now: None, no stretch to judge (begun anew);
        True, only the plain verdict (`Observations.beside_start`); False, any verdict.

        The fork server's imports take a core: no stretch is fair beside them
        unless the cores leave the server one of its own (and the workers
        could not start before it is up anyway). The server this trial started
        (`_start_server_if_held`) spoiled the stretch it imported in, so the
        judging begins anew once it is up. Held workers connecting take CPU as
        the imports do: only the plain verdict, for `EarlyStart.connecting_skipped` at most.
        """
        importing = self.fork_server.warming_up()
        if importing and self._server_early != "importing":
            if not self._room_beside_server():
                self._judge_anew(now)
                return None
            importing = False  # scouts on a many-core machine are judged meanwhile
        if self._server_early == "importing" and not importing:
            self._server_early, self._server_up_at = "up", now
            self._judge_anew(now)
            return None
        if (not importing and self._parked is not None and self._parked.connecting()
                and now - self._server_up_at < self.policy.start.connecting_skipped):
            self._warm_baseline = None  # on threads still in their first samples
            importing = True
        return importing

    def _start_server_if_held(self, now: float, clocks: list) -> None:
        """Start the fork server's imports at the first sign of threads held back by the GIL, before the verdict.

        The sign: `EarlyStart.sign_span` with the threads under `Policy.held_share`
        of their cores busy. Threads that release the GIL keep more than that
        even beside the imports, so meanwhile only the plain verdict is given.
        """
        server = self.fork_server
        if self._server_early or server.warming_up() or server.warmed_up() or not self._first_sign(self._baseline, now, clocks, self.policy.held_share):
            return
        self._server_early = "importing"
        self._baseline = self._warm_baseline = None  # judged from here: the sign may have been cold first samples
        try:
            self.fork_server.warm_up("process")
        except Exception:  # the workers' own start reports what is wrong, with context (`_start_processes`)
            return
        self._park_workers()

    def _park_workers(self) -> None:
        """Start the process workers held: they fork as the server comes up, connect, and wait for the pipeline.

        At the verdict only the pipeline's unpickling and one message each are
        left (`Executor.release`). While they connect, their start takes CPU,
        so only the plain verdict is given, for at most `EarlyStart.connecting_skipped`
        after the server is up. Threads that win close them unused.
        """
        if self._park is None or self._parked is not None or self._early is not None or self._processes_started:
            return
        try:
            self._parked = self._park()
        except Exception:  # `_start_processes` tries again, and reports what it meets
            self._parked = None

    def _unpark(self) -> Executor | None:
        """The held workers, given the pipeline now (None if none were started)."""
        parked, self._parked = self._parked, None
        if parked is not None:
            parked.release()
        return parked

    def _start_workers_if_held(self, now: float, clocks: list) -> None:
        """Start the process workers before the verdict where the fork server is up and the threads leave a core idle.

        The sign borne out (`_sign_borne_out`: two stretches of
        `EarlyStart.sign_span`) under `Policy.near_bound` of the cores past the
        first samples, or under `Policy.held_share` while every thread is still
        in its first sample. The verdict still decides; workers it does not
        want are closed (`_settle`).
        """
        if self._early is not None or not self.fork_server.warmed_up():
            return
        # every thread still in its first sample (a long first sample): the whole stretch, the plain sign
        baseline, share = ((self._baseline, self.policy.held_share) if self._warm_baseline is None
                           else (self._warm_baseline, self.policy.near_bound))
        if not self._sign_borne_out(baseline, now, clocks, share):
            return
        try:
            self._early = self._unpark() or self._make_processes()
        except Exception:  # `_start_processes` tries again, and reports what it meets
            return
        self.early_workers_at = now - self._started

    def _sign_borne_out(self, baseline: tuple | None, now: float, clocks: list, share: float) -> bool:
        """`_first_sign`, and the same again over the `EarlyStart.sign_span` after it (one short stretch may be a thread off its core)."""
        if baseline is None:
            return False
        if self._sign_mark is None or self._sign_mark[0] < baseline[0]:  # (none yet, or from a stretch started again)
            if self._first_sign(baseline, now, clocks, share):
                self._sign_mark = (now, self.clock.thread_time(), clocks)
            return False
        if now - self._sign_mark[0] < self.policy.start.sign_span:
            return False
        mark, self._sign_mark = self._sign_mark, None  # borne out, or not: a later stretch from ``baseline`` may mark again
        return self._keeps_under(mark, now, clocks, share)

    def _start_processes(self) -> None:
        """Start the process workers (see `_judge_gil`); a failure settles on threads with the reason."""
        self._processes_started = True
        self.phase = Phase.STARTING_PROCESSES
        if self._cores_kept is not None and self.fork_server.warming_up() and self._room_beside_server():
            self._pause_when_up = True  # judged beside the server's imports: their tasks are worth having till it is up
        elif self._cores_kept is not None:  # judged held back by the GIL: few threads deliver as much meanwhile, and
            self._pause_threads()  # the workers start sooner
        soon = self._early is not None or self.fork_server.warmed_up()  # the workers fork from a server that is up: at once
        try:
            fresh, self._early = self._early or self._unpark() or self._make_processes(), None
        except Exception as exc:
            self._settle("thread", f"process workers failed to start ({type(exc).__name__}: {exc}): threads", measured=False)
            return
        self._use_processes(fresh)
        if self._cores_kept is not None and not fresh.workers_forked():
            # They wait for a zygote's imports (torch's take a core for a while): the threads go on till they are forked,
            self.threads.resume()  # as few as deliver what they can beside the import (`_kept_importing`)
            self.threads.narrow(self._kept_importing())
            self._paused_at, self._pause_when_up, self._drain_when_up = None, True, soon
            return
        if soon and self._cores_kept is not None:
            self._drain_threads()

    def _pause_threads(self) -> None:
        """Pause the threads held back by the GIL beyond `_kept_running` while the process workers start.

        Where the verdict came while the fork server still imported, the pause
        waits for it to be up (`_check_ready`): the threads' tasks are worth
        having meanwhile.
        """
        self._pause_when_up = False
        self.threads.pause_beyond(self._kept_running())
        self._paused_at = self.clock.perf_counter()

    def _drain_threads(self) -> None:
        """Threads held back by the GIL begin no new task while the workers start from a fork server that is up.

        Their queued tasks wait for the workers (`_check_ready` hands them over),
        and so do tasks submitted meanwhile; they go back to the threads if the
        workers do not come up (`EarlyStart.pause_limit`) or fail.
        """
        self._drained = self.threads.take_queued()

    def _undrain(self) -> None:
        """The tasks kept from the threads go back to them (the workers did not come up in time, or cannot start)."""
        drained, self._drained = self._drained or [], None
        for key, task in drained:
            if self._owner.get(key) is self.threads:
                self.threads.submit(key, task)

    def _use_processes(self, fresh: Executor) -> None:
        """``fresh`` takes the place of the process workers not started yet."""
        waiting = self.processes
        if self._window_share is not None:
            fresh.set_window_share(self._window_share)
        self._outstanding[fresh] = self._outstanding.pop(waiting)
        self._measure[fresh] = self._measure.pop(waiting)
        self.processes = fresh

    def _kept_running(self) -> int:
        """Threads held back by the GIL that go on while the process workers start: none on `EarlyStart.many_cores`.

        They deliver about a core between them however many run; the rest
        would take the GIL from the consumer's hand-shake with the workers.
        """
        if self.cores >= self.policy.start.many_cores:
            return 0
        return max(self.policy.start.keep_running, math.ceil(self._cores_kept))

    def _kept_importing(self) -> int:
        """Threads held back by the GIL that take tasks while the process workers wait for a zygote's imports.

        On fewer than `EarlyStart.many_cores` cores, as many as the cores they kept
        busy, less the one the import takes, and at least `EarlyStart.keep_running`.
        """
        if self.cores >= self.policy.start.many_cores:
            return self.threads.workers
        return max(self.policy.start.keep_running, min(math.ceil(self._cores_kept), self._usable - 1))

    def _stop_starting(self) -> None:
        """The verdict is in: the threads go on, workers started on a sign it did not bear out close, drained tasks go back."""
        self._pause_when_up = self._drain_when_up = False
        self.threads.resume()
        for started in (self._early, self._parked):
            if started is not None:
                started.close()  # started on a first sign the verdict did not bear out
        self._early = self._parked = None
        self._undrain()  # (none where the processes won: they took them once up)

"""Judging the GIL: the threads' CPU clocks read side by side, as stretches the model (`feedline.engine.choice`) reads.

`GilJudging` is the part of `feedline.engine._trial.BackendTrial` that
turns `Executor.side_by_side` readings into `Stretch`es: a stretch starts
when every thread is busy and ends the moment a thread waits for tasks
(`IDLE_SHARE`); a warm one starts once every thread is past its first
sample. `_judge_gil` hands them to `decide` and carries the verdict out
(start the processes, widen the scouts to the whole pool, or settle).

State it owns (`_init_judging`): the stretches' baselines ``(when, the
consumer's CPU time, the clocks)``, the verdict's due time, the modules
seen imported, and the verdict on the GIL (`_cores_kept` by `_judged`
threads). It reads the trial's ``threads``, ``phase``, ``policy``,
``cores``, ``workers`` and ``_usable``, and calls the trial's
`_observations`, `_carry_out`, `_start_processes` and the start-up's
`_beside_start`, `_start_server_if_held`, `_start_workers_if_held`.
"""

from __future__ import annotations

from ._imports import imports_seen
from .choice import Action, Phase, Stretch, Verdict, decide

__all__ = ["IDLE_SHARE", "IMPORTS_SKIPPED", "GilJudging", "waited_for_tasks"]

IDLE_SHARE = 0.05  # a thread waiting for tasks more than this share of a stretch was not side by side
IMPORTS_SKIPPED = 0.15  # seconds of first-sample imports left out of the stretches judged, at most: imports hold the GIL in any work


def waited_for_tasks(baseline: tuple, now: float, clocks: list) -> bool:
    """A thread waited for tasks more than `IDLE_SHARE` of the stretch since ``baseline`` (or the pool changed): not side by side."""
    began, _, before = baseline
    return len(before) != len(clocks) or any(now_[2] - was[2] > IDLE_SHARE * (now - began) for now_, was in zip(clocks, before))


class GilJudging:
    """The threads judged side by side for the GIL, and the scouts widened to the pool (see the module docstring)."""

    def _init_judging(self, threads) -> None:
        self._baseline: tuple | None = None  # (when, this process's CPU time, the threads' clocks) as a stretch began
        self._warm_baseline: tuple | None = None  # ... and as every thread was past its first sample (the early verdict's stretch)
        self._alone_baseline: tuple | None = None  # ... as every thread was busy, measured alone
        self._waits_at: dict = {}  # a stretch's start -> the threads' `runnable_waits` then (`_runnable_share`)
        self._judging_from = self.clock.perf_counter()  # the verdict is due `Policy.verdict_due` after this
        self._modules = imports_seen()[0]  # modules imported as of the stretches judged: one that imports is cold
        self._imports_from: float | None = None  # when a first sample was first seen importing
        self._cores_kept: float | None = None  # cores the threads kept busy side by side, once known ...
        self._judged = threads.workers  # ... by this many threads (scouts: fewer than the pool, `first_threads`)
        self._cores_others = 0.0  # ... and cores the consumer's thread used meanwhile

    def _alone_stretch(self, now: float) -> Stretch | None:
        """Threads measured alone, every one busy since `_alone_baseline`: the stretch the model reads (None: none yet).

        Set once per stretch, as `_judge_gil` does; a thread that waited for
        tasks starts it again.
        """
        if self._threads_alone_from is None or self._thread_cpu <= 0:
            return None
        clocks = self.threads.side_by_side()
        if clocks is None:
            return None
        if self._alone_baseline is None:
            if all(busy for busy, *_ in clocks):
                self._alone_baseline = (now, self.clock.thread_time(), clocks)
            return None
        if waited_for_tasks(self._alone_baseline, now, clocks):
            self._alone_baseline = None  # one waited for tasks meanwhile (or the pool changed): not side by side
            return None
        return self._stretch(self._alone_baseline, now, clocks)

    def _judge_gil(self) -> None:
        """Read the threads' CPU clocks side by side and carry out the model's verdict on them (`feedline.engine.choice`).

        A stretch starts when every thread is busy (a thread that waits for
        tasks more than `IDLE_SHARE` of it starts it again), and a second one
        when every thread is past its first sample (first samples are cold:
        imports, first calls, fresh memory). Not judged: a stretch in which a
        first sample imports a module (for up to `IMPORTS_SKIPPED`), and one
        beside the fork server's imports unless the cores leave it one of
        its own (`_room_beside_server`); beside held workers connecting, only
        the plain verdict (`Observations.beside_start`). No clocks (Windows),
        one usable core, or no verdict within `Policy.verdict_due`: the
        process workers start.
        """
        if self.phase is not Phase.JUDGING_THREADS:
            return
        now = self.clock.perf_counter()
        clocks = self.threads.side_by_side()
        if clocks is None or self._usable < 2 or now - self._judging_from >= self.policy.verdict_due:
            self._start_processes()  # no clocks; one thread shows nothing side by side; or no verdict in time
            return
        importing = self._beside_start(now)  # (`feedline.engine._trial_start`)
        if importing is None or self._skip_imports(now, clocks) or not self._side_by_side_since(now, clocks):
            return
        self._start_server_if_held(now, clocks)
        if self._baseline is None:
            return  # the fork server's imports started: a new stretch
        self._start_workers_if_held(now, clocks)
        whole, warm = (None if b is None else self._stretch(b, now, clocks, runnable=True) if now > b[0]
                       else Stretch(0.0, 0.0, self._usable) for b in (self._baseline, self._warm_baseline))
        verdict = decide(self._observations(whole=whole, warm=warm, beside_start=importing), self.policy)
        self._carry_out_judged(verdict, now)

    def _skip_imports(self, now: float, clocks: list) -> bool:
        """A first sample imports a module: cold work, so the stretches begin again past it, for `IMPORTS_SKIPPED` at most."""
        modules, importing_module = imports_seen()
        imported, self._modules = importing_module or modules != self._modules, modules
        if not imported or all(begun >= 2 for *_, begun in clocks):
            return False
        if self._imports_from is None:
            self._imports_from = now
        if now - self._imports_from >= IMPORTS_SKIPPED:
            return False  # imports this long overlap the workers' own: judged as any other work
        self._baseline = self._warm_baseline = None
        return True

    def _side_by_side_since(self, now: float, clocks: list) -> bool:
        """Whether the threads ran side by side since `_baseline` (every one busy as it began, none waiting for tasks since).

        Starts the stretch where none runs, and the warm one once every
        thread is past its first sample (first samples are cold: imports,
        first calls, fresh memory).
        """
        if self._baseline is None:
            if all(busy for busy, *_ in clocks):
                self._baseline = (now, self.clock.thread_time(), clocks)
                self._mark_waits(now)
            return False
        if self._warm_baseline is None and all(busy and begun >= 2 for busy, _, _, begun in clocks):
            self._warm_baseline = (now, self.clock.thread_time(), clocks)  # every thread past its first sample
            self._mark_waits(now)
        if waited_for_tasks(self._baseline, now, clocks):
            self._baseline = self._warm_baseline = None  # one waited for tasks meanwhile: not side by side
            return False
        return True

    def _carry_out_judged(self, verdict: Verdict, now: float) -> None:
        """Act on the model's verdict on the threads judged side by side."""
        if verdict.action is Action.DROP_STRETCH:
            self._baseline = self._warm_baseline = None  # (`verdict_due` still runs)
        elif verdict.action is Action.WIDEN and verdict.kept is None:
            if self._widen():  # scouts that wait (files, the network) say nothing of the GIL
                self._judge_anew(now)
        elif verdict.kept is not None:
            self._judged = self.threads.workers
            self._cores_kept, self._cores_others = verdict.kept, verdict.others
            if verdict.action is Action.START_PROCESSES:
                self._start_processes()
            elif verdict.action is Action.WIDEN:
                if self._widen():
                    self._judge_anew(now)
            elif verdict.action is Action.THREADS:
                self._carry_out(verdict, now, f"{self._cores_note()[:-2]}: {verdict.why}")
        elif verdict.settles:  # (the I/O shortcut)
            self._carry_out(verdict, now, verdict.why)

    def _runnable_share(self, baseline: tuple, span: float) -> float:
        """Cores' worth of time the threads were runnable but waiting for a CPU since ``baseline`` (Linux; else 0).

        Scouts that other programs keep off the cores use as little CPU as
        scouts that wait on files, but are not blocked.
        """
        before = self._waits_at.get(baseline[0])
        if before is None:
            return 0.0
        waited = sum(now_ - was for now_, was in zip(self.threads.runnable_waits(), before))
        return max(0.0, waited / span)

    def _mark_waits(self, now: float) -> None:
        """Keep the threads' `runnable_waits` at the stretch begun ``now`` (and only at the stretches still judged)."""
        live = {b[0] for b in (self._baseline, self._warm_baseline) if b is not None}
        self._waits_at = {began: waits for began, waits in self._waits_at.items() if began in live}
        self._waits_at[now] = self.threads.runnable_waits()

    def _judge_anew(self, now: float) -> None:
        """Drop the stretches judged so far: the next starts when every thread is busy, and the verdict is due from ``now``."""
        self._baseline = self._warm_baseline = None
        self._judging_from = now

    def _first_sign(self, baseline: tuple | None, now: float, clocks: list, share: float) -> bool:
        """`EarlyStart.sign_span` since ``baseline``, the threads kept under ``share`` of their cores busy (and not idle: `Policy.io_together`)."""
        if baseline is None or now - baseline[0] < self.policy.start.sign_span:
            return False
        return self._keeps_under(baseline, now, clocks, share)

    def _keeps_under(self, baseline: tuple, now: float, clocks: list, share: float) -> bool:
        stretch = self._stretch(baseline, now, clocks)
        return self.policy.io_together <= stretch.kept < share * stretch.usable

    def _stretch(self, baseline: tuple, now: float, clocks: list, runnable: bool = False) -> Stretch:
        """The threads side by side since ``baseline``; with ``runnable``, their time kept off the cores where it may matter.

        The consumer's thread is the one judging (it iterates); the rest of
        this process (a BLAS pool, say) is not counted as the consumer's.
        Time runnable but waiting for a CPU is read only for scouts that
        keep under `Policy.io_together` of a core busy (`_runnable_share`).
        """
        began, consumer_cpu, before = baseline
        span = now - began
        kept = sum(now_[1] - was[1] for now_, was in zip(clocks, before)) / span
        others = max(0.0, (self.clock.thread_time() - consumer_cpu) / span)  # (0 if another thread took over the iterating)
        usable = min(self._usable, self.threads.workers, self.cores - others)  # (scouts: fewer than the pool)
        begun = sum(now_[3] - was[3] for now_, was in zip(clocks, before))
        waited = self._runnable_share(baseline, span) if runnable and self._scouting and kept < self.policy.io_together else 0.0
        return Stretch(span, kept, usable, begun, others, waited)

    def _judged_cores(self) -> int:
        """The cores the threads judged for the GIL could keep busy at most."""
        return min(self._judged, self._usable)

    @property
    def _scouting(self) -> bool:
        """The threads judged are the scouts (`first_threads`), fewer than the pool: `_widen` would grow them."""
        return self.threads.workers < self.workers

    def _widen(self) -> bool:
        """The scouts (`first_threads`) become the whole pool, their queued tasks spread over it; False if they are it."""
        if not self._scouting or not self.threads.grow(self.workers):
            return False
        for key, task in self.threads.take_queued():  # the scouts' backlog holds the earliest tasks: spread it
            self.threads.submit(key, task)
        return True

    def _cores_note(self) -> str:
        if self._cores_kept is None:
            return ""
        first = f" (the first {self._judged} of {self.workers}, started to judge)" if self._judged < self.workers else ""
        return (f"{self._judged} threads side by side{first} kept {self._cores_kept:.2f} of {self._judged_cores()} cores "
                f"busy (the consumer's thread {self._cores_others:.2f}); ")

    def _forget_judging(self, now: float) -> None:
        """The trial runs again: no stretch, no verdict on the GIL, and the verdict due from ``now``."""
        self._judge_anew(now)
        self._cores_kept = self._alone_baseline = None
